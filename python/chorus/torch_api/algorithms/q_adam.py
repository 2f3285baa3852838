"""Bagua's QAdam: Adam whose momentum, not its gradient, crosses between ranks, compressed to
8 bits once the variance has settled.

- Warm-up, the optimizer's first ``warmup_steps`` steps: every bucket of gradients is all-reduced
  (averaged, in full precision, flat even where ``hierarchical``: Bagua's way), and
  ``QAdamOptimizer.step`` is Adam, updating both moments from the averaged gradient.
- After it: at backward, each rank updates its momentum from its own gradient,
  ``m_r = beta1 * m + (1 - beta1) * (g_r + weight_decay * w)``, and the ranks' momenta are
  averaged with ByteGrad's MinMax-UInt8 exchange (chunks compressed, an all-to-all, each chunk
  reduced and compressed again, an all-gather, decompressed alike on every rank), which becomes
  every rank's ``exp_avg``; the variance ``exp_avg_sq`` stays as warm-up left it, and the step is
  ``w -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)``. The gradients stay each
  rank's own. ``hierarchical`` (Bagua's default): the momenta are summed in full precision on
  each host's leader, compressed between the leaders only, broadcast on each host.

Where this differs from Bagua (bagua/torch_api/algorithms/q_adam.py): Bagua's step number
``warmup_steps`` uses the warm-up's all-reduced gradient for neither moment (its optimizer
updates the moments while ``step < warmup_steps``, counted after the step's increment, and its
algorithm communicates gradients while it is below that before); here the first
``warmup_steps`` steps are all Adam on the averaged gradient. Bagua's QAdamOptimizer takes
``weight_decay`` and uses it nowhere (neither in warm-up nor after); here it is Adam's L2 term
(``g + weight_decay * w``) in both. Gradients accumulated over several backwards before a step
make that step's momentum from the accumulated gradient (each backward exchanges it again from the
momentum of the last step). A parameter whose ``grad`` is None at the end of backward (no rank's
backward reached it, after ``zero_grad(set_to_none=True)``) keeps its momentum, as the step skips
it, as torch's Adam leaves a parameter without a gradient. The settings of a parameter's group
(``betas``, ``weight_decay``) are read at each backward from ``optimizer.param_groups``, so that
``load_state_dict`` and changes to a group take effect."""
import math

import torch
from torch.optim.optimizer import Optimizer

from .. import communication
from ..communication import ReduceOp
from .base import Algorithm, AlgorithmImpl
from .bytegrad import CompressedAllReduce


class QAdamOptimizer(Optimizer):
    def __init__(self, params, lr: float = 1e-3, warmup_steps: int = 100, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if warmup_steps <= 0:
            raise ValueError(f"Invalid warmup_steps parameter, must be larger than 0: {warmup_steps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.warmup_steps = warmup_steps
        # Made now, not at the first step: the algorithm may exchange a momentum before a
        # parameter's first gradient came.
        for group in self.param_groups:
            for p in group["params"]:
                self._state_of(p)

    def _state_of(self, p):
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @property
    def step_id(self):
        """Steps taken (a parameter's count; the largest, as one without gradients is skipped)."""
        return max((self.state[p].get("step", 0) for g in self.param_groups for p in g["params"]), default=0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        warm = self.step_id < self.warmup_steps  # this step's gradients were all-reduced, not its momentum
        for group in self.param_groups:
            lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._state_of(p)
                state["step"] += 1
                t = state["step"]
                if warm:
                    grad = p.grad if weight_decay == 0 else p.grad.add(p, alpha=weight_decay)
                    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)
                p.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1 ** t))
        return loss


def momentum(base, grad, weight, beta1, weight_decay):
    """A rank's momentum of a step: ``beta1 * base + (1 - beta1) * (grad + weight_decay * weight)``."""
    if weight_decay != 0:
        grad = grad.add(weight, alpha=weight_decay)
    return base.mul(beta1).add_(grad, alpha=1 - beta1)


class QAdamAlgorithm(Algorithm):
    def __init__(self, q_adam_optimizer: QAdamOptimizer, hierarchical: bool = True):
        if not isinstance(q_adam_optimizer, QAdamOptimizer):
            raise TypeError(f"QAdamAlgorithm takes a QAdamOptimizer, not {type(q_adam_optimizer).__name__}")
        self.hierarchical = hierarchical
        self.optimizer = q_adam_optimizer

    def reify(self, process_group):
        return QAdamAlgorithmImpl(process_group, self.optimizer, self.hierarchical)


class QAdamAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group, q_adam_optimizer, hierarchical=True):
        super().__init__(process_group)
        self.optimizer = q_adam_optimizer
        self.warmup_steps = q_adam_optimizer.warmup_steps
        self.hierarchical = hierarchical
        self.reducer = CompressedAllReduce(process_group, hierarchical, self.global_comm.nranks())
        self._group_of, self._groups_seen = {}, None
        # By bucket index: (the optimizer's step, the momentum that step started from), kept for
        # a further backward before the step (accumulation), whose momentum starts from it again.
        self.base = {}
        # (bucket, the ranks' averaged momentum) of this backward, for exp_avg at its end.
        self.pending = []

    def group_of(self):
        """The optimizer's group of each parameter as it is now: load_state_dict and
        add_param_group make new groups (the map made again holds the old ones, whose ids
        cannot come back meanwhile)."""
        seen = tuple(map(id, self.optimizer.param_groups))
        if seen != self._groups_seen:
            self._group_of = {p: group for group in self.optimizer.param_groups for p in group["params"]}
            self._groups_seen = seen
            self.base.clear()  # a momentum kept from before a load_state_dict is not the loaded one
        return self._group_of

    def attach(self, engine):
        theirs = {p for p in self.group_of() if p.requires_grad}
        ours = set(engine.params)
        if ours != theirs:
            raise ValueError(f"QAdamAlgorithm: the QAdamOptimizer's parameters must be the module's that require grad "
                             f"({len(ours - theirs)} of the module's are not the optimizer's, "
                             f"{len(theirs - ours)} of the optimizer's not the module's)")
        for b in engine.buckets:
            if not b.params[0].is_floating_point():
                raise TypeError(f"QAdamAlgorithm: parameters of {b.params[0].dtype}, not floating point")

    def compressing(self):
        return self.optimizer.step_id >= self.warmup_steps

    def launch(self, bucket):
        if not self.compressing():
            return communication.allreduce_inplace(bucket.flat, ReduceOp.AVG, comm=self.global_comm, async_op=True)
        step = self.optimizer.step_id
        group_of = self.group_of()  # first: it forgets the momenta kept where the groups changed
        kept = self.base.get(bucket.index)
        if kept is None or kept[0] != step:
            kept = (step, torch.cat([self.optimizer.state[p]["exp_avg"].reshape(-1) for p in bucket.params]))
            self.base[bucket.index] = kept
        base = kept[1]
        weights = torch.cat([p.detach().reshape(-1) for p in bucket.params])
        settings = {(group_of[p]["betas"][0], group_of[p]["weight_decay"]) for p in bucket.params}
        if len(settings) == 1:
            (beta1, weight_decay), = settings
            m = momentum(base, bucket.flat, weights, beta1, weight_decay)
        else:  # parameters of groups with other settings in one bucket: each its own
            m, off = torch.empty_like(base), 0
            for p in bucket.params:
                n, group = p.numel(), group_of[p]
                m.narrow(0, off, n).copy_(momentum(base.narrow(0, off, n), bucket.flat.narrow(0, off, n),
                                                   weights.narrow(0, off, n), group["betas"][0],
                                                   group["weight_decay"]))
                off += n
        return m, self.reducer.start(m)

    def finish(self, bucket, token):
        if not isinstance(token, tuple):
            token.wait()
            return
        m, inner = token
        self.reducer.finish(m, inner)
        self.pending.append((bucket, m))

    def after_backward(self, engine):
        # Only where the step will take a gradient: a parameter whose grad is None (no rank's
        # backward reached it) is skipped by the step, and keeps its momentum, as in torch's Adam.
        pending, self.pending = self.pending, []
        for bucket, m in pending:
            off = 0
            for p in bucket.params:
                if p.grad is not None:
                    self.optimizer.state[p]["exp_avg"].copy_(m.narrow(0, off, p.numel()).view_as(p))
                off += p.numel()

    def reset(self):
        self.pending = []
        return None
