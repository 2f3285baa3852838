"""Bagua's decentralized SGD: gradients stay each rank's own, and the weights are averaged with
peers instead. At a training forward, each rank sends out a copy of its weights; at the end of
backward, it waits for its peers' and takes their average, and the optimizer's step then applies
this rank's gradient to it (w <- mean of the peers' w - lr * own gradient).

``peer_selection_mode``: ``"all"``, the average of every rank's weights; ``"shift_one"``, each
rank pairs with one other, a new one each time (rank i of the first half with rank n/2 + (i + t)
mod n/2 of the second at the t-th exchange: Bagua's schedule; an even number of ranks).
``communication_interval``: weights are exchanged at every k-th training forward (the others
train alone). ``hierarchical`` (Bagua's default): a host's ranks average their weights together
first, the hosts' leaders exchange between hosts, and each leader's result is broadcast on its
host.

``LowPrecisionDecentralizedAlgorithm``: Bagua's low-precision decentralized SGD (after Tang et
al., "Communication compression for decentralized training", 2018). The ranks form a ring; each
keeps ``x^`` (its weights as its neighbours know them) and its copies of its left and right
neighbours' ``x^``, all the weights of with_bagua at first. After every
``communication_interval``-th optimizer step (the first included), with ``x`` the weights the
step made: ``d = x + L / 3 + R / 3 - 5 / 3 x^`` (the ring's mean of the known weights, plus what
this rank's step moved it, minus ``x^``), in float32 whatever the parameters' dtype, compressed
MinMax-UInt8 as a whole; the bytes go to both neighbours, each rank adds its neighbours'
decompressed ``d`` to its copies of theirs, and takes ``x^ + decompressed d`` as its weights and
its new ``x^``. ``hierarchical``: the weights are averaged within each host first, the hosts'
leaders form the ring, and each leader's result is broadcast on its host.

Bagua counts training forwards for ``communication_interval``; this counts optimizer steps (a
bucket's step: every optimizer of its parameters stepped). The two agree with one forward a step;
with several (gradient accumulation), Bagua exchanges only after a step whose last forward falls
on the interval, and never where the interval is the number of forwards a step."""
import torch

from .. import communication
from ..communication import ReduceOp
from .base import Algorithm, AlgorithmImpl, Hierarchy, wrap_step
from .bytegrad import compress, decompress

MODES = ("all", "shift_one")


def shift_one_peer(rank, nranks, step):
    """The rank that ``rank`` exchanges with at the ``step``-th exchange (pairs, both ways)."""
    half = nranks // 2
    if rank < half:
        return (step + rank) % half + half
    return (rank - half - step) % half


class DecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, peer_selection_mode: str = "all", communication_interval: int = 1):
        if peer_selection_mode not in MODES:
            raise ValueError(f"DecentralizedAlgorithm: peer_selection_mode must be one of {MODES}, "
                             f"not {peer_selection_mode!r}")
        if communication_interval < 1:
            raise ValueError(f"DecentralizedAlgorithm: communication_interval must be at least 1, "
                             f"not {communication_interval}")
        self.hierarchical = hierarchical
        self.peer_selection_mode = peer_selection_mode
        self.communication_interval = communication_interval

    def reify(self, process_group):
        return DecentralizedAlgorithmImpl(process_group, self.hierarchical, self.peer_selection_mode,
                                          self.communication_interval)


class DecentralizedAlgorithmImpl(AlgorithmImpl):
    syncs_gradients = False

    def __init__(self, process_group, hierarchical, mode, interval):
        super().__init__(process_group)
        self.hierarchy = Hierarchy(process_group) if hierarchical else None
        # The ranks that exchange: the hosts' leaders, or everyone (None on a rank that leads no host).
        self.peers = self.hierarchy.inter if hierarchical else self.global_comm
        self.mode, self.interval = mode, interval
        # Counted alike on every rank (not only on the ranks that exchange), so that every rank says so.
        exchanging = process_group.host_count if hierarchical else self.global_comm.nranks()
        if mode == "shift_one" and exchanging % 2:
            raise ValueError(f"DecentralizedAlgorithm: shift_one pairs ranks, and {exchanging} "
                             f"{'hosts' if hierarchical else 'ranks'} exchange")
        self.forwards = 0
        self.pending = None  # (weights by bucket, their partners' or None, the works to wait)

    def before_forward(self, engine):
        if self.pending is not None:  # the exchange of an earlier forward, not backed yet
            return
        t = self.forwards
        self.forwards += 1
        if t % self.interval:
            return
        weights = [torch.cat([p.detach().reshape(-1) for p in b.params]) for b in engine.buckets]
        h = self.hierarchy
        if h is not None and h.intra.nranks() > 1:
            for w in weights:
                communication.allreduce_inplace(w, ReduceOp.AVG, comm=h.intra)
        theirs, works = None, []
        if self.peers is not None and self.peers.nranks() > 1:
            if self.mode == "all":
                works = [communication.allreduce_inplace(w, ReduceOp.AVG, comm=self.peers, async_op=True)
                         for w in weights]
            else:
                peer = shift_one_peer(self.peers.rank(), self.peers.nranks(), t // self.interval)
                theirs = [torch.empty_like(w) for w in weights]
                for w, other in zip(weights, theirs):
                    works.append(communication.send(w, peer, comm=self.peers, async_op=True))
                    works.append(communication.recv(other, peer, comm=self.peers, async_op=True))
        self.pending = (weights, theirs, works)

    def reset(self):
        pending, self.pending = self.pending, None
        return pending

    def after_backward(self, engine):
        if self.pending is None:
            return
        weights, theirs, works = self.pending
        self.pending = None
        for w in works:
            w.wait()
        if theirs is not None:
            for w, other in zip(weights, theirs):
                w.add_(other).div_(2)
        if self.hierarchy is not None:
            for w in weights:
                self.hierarchy.broadcast_in_host(w)
        with torch.no_grad():
            for b, w in zip(engine.buckets, weights):
                off = 0
                for p in b.params:
                    p.copy_(w.narrow(0, off, p.numel()).view_as(p))
                    off += p.numel()


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, communication_interval: int = 1):
        if communication_interval < 1:
            raise ValueError(f"LowPrecisionDecentralizedAlgorithm: communication_interval must be at least 1, "
                             f"not {communication_interval}")
        self.hierarchical = hierarchical
        self.communication_interval = communication_interval

    def reify(self, process_group):
        return LowPrecisionDecentralizedAlgorithmImpl(process_group, self.hierarchical, self.communication_interval)


class LowPrecisionDecentralizedAlgorithmImpl(AlgorithmImpl):
    syncs_gradients = False

    def __init__(self, process_group, hierarchical=True, communication_interval=1):
        super().__init__(process_group)
        self.hierarchy = Hierarchy(process_group) if hierarchical else None
        self.ring = self.hierarchy.inter if hierarchical else self.global_comm  # None on a rank that leads no host
        self.interval = communication_interval
        self.states = []  # by bucket: [x^, left's, right's], flat
        self.steps = []  # by bucket: its steps so far (each of its parameters' optimizers stepped)
        self.stepped = []  # by bucket: its parameters stepped since its last step

    def attach(self, engine):
        optimizers = engine.module.bagua_optimizers
        stepped_by = [{p for group in opt.param_groups for p in group["params"]} for opt in optimizers]
        names = {p: n for n, p in engine.module.named_parameters()}
        for p in engine.params:
            if not any(p in theirs for theirs in stepped_by):
                # As Bagua: the exchange comes after the step of each parameter's optimizer.
                raise RuntimeError(f"LowPrecisionDecentralizedAlgorithm: the module's parameter {names.get(p, '?')} "
                                   f"is not one of the optimizers' given to with_bagua")
        for b in engine.buckets:
            if not b.params[0].is_floating_point():
                raise TypeError(f"LowPrecisionDecentralizedAlgorithm: parameters of {b.params[0].dtype}, "
                                f"not floating point")
        for b in engine.buckets:
            w = torch.cat([p.detach().reshape(-1) for p in b.params])
            self.states.append([w, w.clone(), w.clone()])
            self.steps.append(0)
            self.stepped.append(set())
        for opt, theirs in zip(optimizers, stepped_by):
            # The buckets it steps parameters of, in bucket order, the same on every rank.
            touched = [(b, [p for p in b.params if p in theirs]) for b in engine.buckets]
            wrap_step(opt, self._make_step([(b, ps) for b, ps in touched if ps]))

    def _make_step(self, touched):
        def step(inner, *args, **kwargs):
            out = inner(*args, **kwargs)
            for b, params in touched:
                stepped = self.stepped[b.index]
                stepped.update(params)
                if len(stepped) == len(b.params):
                    stepped.clear()
                    t = self.steps[b.index]
                    self.steps[b.index] += 1
                    if t % self.interval == 0:
                        self._exchange(b)
            return out
        return step

    def _exchange(self, bucket):
        with torch.no_grad():
            x = torch.cat([p.detach().reshape(-1) for p in bucket.params])
            h = self.hierarchy
            if h is not None and h.intra.nranks() > 1:
                communication.reduce_inplace(x, 0, ReduceOp.SUM, comm=h.intra)
                x.div_(h.intra.nranks())
            if self.ring is not None:
                self._ring_step(bucket.index, x)
            if h is not None:
                h.broadcast_in_host(x)
            off = 0
            for p in bucket.params:
                p.copy_(x.narrow(0, off, p.numel()).view_as(p))
                off += p.numel()

    def _ring_step(self, index, x):
        """x (this rank's weights after its step) becomes x^ + Q(d), as Bagua's op computes it."""
        mine, left, right = self.states[index]
        # In float32 (as ByteGrad's exchange): in bfloat16, the difference of near weights would
        # lose most of its bits, and the quantization its steps.
        d = x.float().add(left.float(), alpha=1 / 3).add_(right.float(), alpha=1 / 3).add_(mine.float(), alpha=-5 / 3)
        c = compress(d)
        n, r = self.ring.nranks(), self.ring.rank()
        if n > 1:
            from_left, from_right = torch.empty_like(c), torch.empty_like(c)
            works = [communication.send(c, (r - 1) % n, comm=self.ring, async_op=True),
                     communication.send(c, (r + 1) % n, comm=self.ring, async_op=True),
                     communication.recv(from_left, (r - 1) % n, comm=self.ring, async_op=True),
                     communication.recv(from_right, (r + 1) % n, comm=self.ring, async_op=True)]
            for w in works:
                w.wait()
        else:  # a ring of one: its neighbours are itself
            from_left = from_right = c
        left.add_(decompress(from_left))
        right.add_(decompress(from_right))
        x.copy_(decompress(c).add_(mine))
        mine.copy_(x)
