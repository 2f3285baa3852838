"""``module.with_bagua(optimizers, algorithm)``: trains every rank's replica of a module in step,
as Bagua's BaguaModule does, over chorus.

Gradients gather in buckets, in the reverse order of the parameters (the order backward produces
them, as DDP's buckets). A bucket's communication starts as soon as its last gradient is in, so it
overlaps the rest of backward, and buckets start in their order on every rank (a later bucket
that fills first waits for the earlier ones), so every rank issues the same ops in the same order.
When backward ends, every bucket not started yet starts (a parameter without a gradient in this
backward counts as what its ``grad`` holds, or zero), every bucket is waited, and the synchronized
gradients are left in the parameters' ``grad`` for ``optimizer.step()`` (a parameter that no
rank's backward reached keeps its ``grad``, as DDP leaves it). The algorithm says what a bucket's
communication is, and may act before forward and after backward (decentralized averaging of the
weights).

torch runs no end-of-backward callback when backward raises, and reentrant checkpointing runs one
inside the backward of its segment; both would leave the ranks' gradients silently apart, so the
engine says so instead (a RuntimeError at the next forward, or at the hook that sees it)."""
import weakref

import torch

from . import communication
from .communication import ReduceOp

# Bagua's default bucket size.
DEFAULT_BUCKET_BYTES = 10 * 1024 ** 2

UNFINISHED = ("with_bagua: the previous backward did not finish (it raised), so its gradients were only partly "
              "synchronized and the ranks' collectives may no longer line up (they do where every rank's backward "
              "failed at the same point); the engine starts afresh: zero the gradients before the next backward")
NO_FORWARD = ("with_bagua: a backward reached the module's parameters again without a forward of the module since "
              "they were synchronized. Likely causes: reentrant activation checkpointing (torch.utils.checkpoint's "
              "default in torch 1.13 runs the checkpointed part's backward apart, which ends the synchronization "
              "early: pass use_reentrant=False), or a second backward through one forward (retain_graph=True): run "
              "a forward for each backward")
ACCUMULATED = ("with_bagua: a gradient was accumulated over several backwards (its grad was not zeroed since it was "
               "synchronized), and this algorithm sums the ranks' gradients (average=False), which would add the "
               "earlier, already summed part once per rank. Zero the gradients before each backward "
               "(optimizer.zero_grad(); a zeroing through .data is not seen) or use average=True")


class Bucket:
    """Parameters of one dtype and device whose gradients are synchronized together, through
    ``flat`` (``views[k]`` is parameter k's part of it, in its shape; both None where the
    algorithm does not synchronize gradients)."""

    def __init__(self, index, params, with_buffer):
        self.index = index
        self.params = params
        self.flat = self.views = None
        if with_buffer:
            self.allocate()
        self.arrived = set()  # indices of the parameters whose gradient this backward produced
        # (weak reference to the grad given back, its _version then), by parameter: tells accumulation apart.
        self.given = [None] * len(params)

    def allocate(self):
        p0 = self.params[0]
        self.flat = torch.zeros(sum(p.numel() for p in self.params), dtype=p0.dtype, device=p0.device)
        self.views, off = [], 0
        for p in self.params:
            self.views.append(self.flat.narrow(0, off, p.numel()).view_as(p))
            off += p.numel()


def make_buckets(params, bucket_bytes, with_buffers):
    """Buckets of at most ``bucket_bytes`` (a larger parameter alone), parameters in reverse order."""
    groups, cur, size = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if cur and (cur[0].dtype != p.dtype or cur[0].device != p.device or size + nbytes > bucket_bytes):
            groups.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        groups.append(cur)
    return [Bucket(i, ps, with_buffers) for i, ps in enumerate(groups)]


def _inside_backward():
    # torch 1.13 has no direct query; only a running backward takes a final callback.
    try:
        torch.autograd.Variable._execution_engine.queue_callback(lambda: None)
    except RuntimeError:
        return False
    return True


class BaguaEngine:
    """One module's training state: its buckets, the hooks on its parameters' gradient
    accumulators and on its forward, and the algorithm's implementation."""

    def __init__(self, module, impl, bucket_bytes, do_flatten):
        self.module = module
        self.impl = impl
        self.do_flatten = do_flatten
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = make_buckets(self.params, bucket_bytes, impl.syncs_gradients) if self.params else []
        self._in_backward = False
        self._forward_seen = False  # a forward with grad enabled since the last backward ended
        self._next = 0        # the next bucket to start
        self._started = []    # (bucket, what the algorithm's launch returned), in bucket order
        # Buffers and works of backwards that did not finish: collectives in flight may still write them.
        self._abandoned = []
        self._accumulators = []
        impl.attach(self)  # before any hook: where it raises, no hook is left (see with_bagua)
        with torch.enable_grad():
            for b in self.buckets:
                for k, p in enumerate(b.params):
                    # The parameter's AccumulateGrad node: its hook runs once the gradient is in p.grad.
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._hook(b, k))
                    self._accumulators.append(acc)
        self._forward_hook = module.register_forward_pre_hook(lambda _m, _inputs: self._before_forward())

    def _hook(self, bucket, k):
        def on_grad(*_):
            self._on_grad(bucket, k)
        return on_grad

    def _before_forward(self):
        if not torch.is_grad_enabled():
            return
        # Still in a backward that no longer runs (a forward inside a running one is a checkpoint's recomputation).
        if self._in_backward and not _inside_backward():
            self._reset()
            raise RuntimeError(UNFINISHED)
        self._forward_seen = True
        if self.module.training:
            self.impl.before_forward(self)

    def _on_grad(self, bucket, k):
        if not self._in_backward:
            if not self._forward_seen:
                self._fail(NO_FORWARD)
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        p = bucket.params[k]
        if k in bucket.arrived:
            # A second gradient in one backward: an inner (reentrant checkpoint's) backward. Taken
            # while its bucket waits; once the bucket started, it would be left out.
            if bucket.index < self._next:
                self._fail(NO_FORWARD)
        else:
            if not self.impl.averages:
                self._check_zeroed(bucket, k)
            bucket.arrived.add(k)
        if not self.impl.syncs_gradients:
            return
        g, view = p.grad, bucket.views[k]
        if g is not None and g.data_ptr() != view.data_ptr():
            view.copy_(g)
        if len(bucket.arrived) == len(bucket.params):
            while self._next < len(self.buckets) and \
                    len(self.buckets[self._next].arrived) == len(self.buckets[self._next].params):
                self._start(self.buckets[self._next])

    def _check_zeroed(self, bucket, k):
        """Raises where AccumulateGrad just added into the grad given back at the last backward:
        the same tensor, one write later (a zeroing would be another)."""
        given, g = bucket.given[k], bucket.params[k].grad
        if given is not None and g is not None and given[0]() is g and g._version == given[1] + 1:
            self._fail(ACCUMULATED)

    def _start(self, bucket):
        if self.impl.syncs_gradients:
            for k, (p, view) in enumerate(zip(bucket.params, bucket.views)):
                if k in bucket.arrived:
                    continue
                # No gradient in this backward: it adds what its grad holds from earlier backwards
                # (accumulation; identical on every rank since their sync), or zero.
                if p.grad is None:
                    view.zero_()
                elif p.grad.data_ptr() != view.data_ptr():
                    view.copy_(p.grad)
            token = self.impl.launch(bucket)
        else:
            token = None
        self._started.append((bucket, token))
        self._next += 1

    def _end_backward(self):
        try:
            while self._next < len(self.buckets):
                self._start(self.buckets[self._next])
            if self.impl.syncs_gradients:
                # Which parameters some rank's backward reached: the others keep their grad (DDP's way).
                used = torch.tensor([k in b.arrived for b in self.buckets for k in range(len(b.params))],
                                    dtype=torch.uint8)
                work = communication.allreduce_inplace(used, ReduceOp.MAX, comm=self.impl.global_comm,
                                                       async_op=True)
                for bucket, token in self._started:
                    self.impl.finish(bucket, token)
                work.wait()
                used, off = used.tolist(), 0
                for bucket in self.buckets:
                    self._give_back(bucket, used[off:off + len(bucket.params)])
                    off += len(bucket.params)
            self.impl.after_backward(self)
        except BaseException:
            self._reset()
            raise
        self._clear()

    def _give_back(self, bucket, used):
        for k, (p, view) in enumerate(zip(bucket.params, bucket.views)):
            if not used[k] or not p.requires_grad:
                continue
            g = p.grad
            if g is None or g.data_ptr() != view.data_ptr():
                if self.do_flatten:
                    # Its part of the bucket, which later backwards accumulate into in place. `.data`:
                    # a version counter of its own (a view shares its bucket's), for _check_zeroed.
                    p.grad = view.data
                elif g is None:
                    p.grad = view.clone()
                else:
                    g.copy_(view)
            bucket.given[k] = (weakref.ref(p.grad), p.grad._version)

    def _clear(self):
        self._in_backward = False
        self._forward_seen = False
        self._next = 0
        self._started = []
        for b in self.buckets:
            b.arrived.clear()

    def _reset(self):
        """Forgets a backward that did not finish, and the algorithm's step with it. A bucket
        whose collective started gets a new buffer (the old one, and gradients in it, may still be
        written by it: kept aside, the gradients copied out)."""
        in_flight = [(b, token) for b, token in self._started if token is not None]
        for b, _ in in_flight:
            old = b.views
            b.allocate()
            for p, view in zip(b.params, old):
                if p.grad is not None and p.grad.data_ptr() == view.data_ptr():
                    p.grad = p.grad.clone()
        kept = self.impl.reset()
        if in_flight or kept is not None:
            self._abandoned.append((in_flight, kept))
        self._clear()

    def _fail(self, message):
        self._reset()
        raise RuntimeError(message)


def with_bagua(self, optimizers, algorithm, process_group=None, do_flatten=True,
               bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Makes this module train in step with its replicas on the other ranks of ``process_group``
    (the default group: every rank), the way ``algorithm`` says (an ``algorithms.Algorithm``).
    Every rank of the group calls it, with modules of the same parameters, already on their
    device and dtype (``.to()`` first): the parameters that require grad now are the ones
    synchronized. Rank 0's parameters and buffers are broadcast to the others first. Returns the
    module itself.

    ``optimizers`` are the module's optimizers (kept as ``bagua_optimizers``). ``do_flatten``
    (Bagua's name): the gradients become views of the buckets' flat buffers (as DDP's
    gradient_as_bucket_view: no copy out of them, and none into them while backward accumulates
    into the view); False keeps each gradient a tensor of its own. ``bucket_bytes``: the size of a
    bucket.

    Where it raises (bad settings, an algorithm's check of the module), the module keeps no hook and
    no ``bagua_*`` attribute, and the optimizers' ``step`` is not wrapped (an algorithm's ``attach``
    checks before it wraps); its parameters and buffers are rank 0's where it raised after their
    broadcast (every rank's check raises alike)."""
    if getattr(self, "_bagua_engine", None) is not None:
        raise RuntimeError("with_bagua: this module was already given an algorithm")
    pg = process_group if process_group is not None else communication.get_default_group()
    comm = pg.get_global_communicator()
    if comm is None:
        raise ValueError(f"with_bagua: rank {communication.get_rank()} is not a member of the process group "
                         f"of ranks {pg.ranks}")
    if bucket_bytes <= 0:
        raise ValueError(f"with_bagua: bucket_bytes must be positive, not {bucket_bytes}")
    impl = algorithm.reify(pg)
    with torch.no_grad():
        for t in list(self.parameters()) + list(self.buffers()):
            communication.broadcast(t.data, 0, comm=comm)
    self.bagua_optimizers = list(optimizers)
    self.bagua_algorithm = impl
    try:
        self._bagua_engine = BaguaEngine(self, impl, bucket_bytes, do_flatten)
    except BaseException:
        del self.bagua_optimizers, self.bagua_algorithm
        raise
    return self
