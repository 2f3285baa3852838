"""``module.with_bagua(optimizers, algorithm)``: trains every rank's replica of a module in step,
as Bagua's BaguaModule does, over chorus.

Gradients gather in buckets, in the reverse order of the parameters (the order backward produces
them, as DDP's buckets). A bucket's communication starts as soon as its last gradient is in, so it
overlaps the rest of backward, and buckets start in their order on every rank (a later bucket
that fills first waits for the earlier ones), so every rank issues the same ops in the same order.
When backward ends, every bucket not started yet starts (a parameter without a gradient in this
backward counts as zero), every bucket is waited, and the synchronized gradients are left in the
parameters' ``grad`` for ``optimizer.step()``. The algorithm says what a bucket's communication
is, and may act before forward and after backward (decentralized averaging of the weights)."""
import torch

from . import communication

# Bagua's default bucket size.
DEFAULT_BUCKET_BYTES = 10 * 1024 ** 2


class Bucket:
    """Parameters of one dtype and device whose gradients are synchronized together, through
    ``flat`` (``views[k]`` is parameter k's part of it, in its shape)."""

    def __init__(self, index, params):
        self.index = index
        self.params = params
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        self.views, off = [], 0
        for p in params:
            self.views.append(self.flat.narrow(0, off, p.numel()).view_as(p))
            off += p.numel()
        self.arrived = set()  # indices of the parameters whose gradient this backward produced


def make_buckets(params, bucket_bytes):
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
    return [Bucket(i, ps) for i, ps in enumerate(groups)]


class BaguaEngine:
    """One module's training state: its buckets, the hooks on its parameters' gradient
    accumulators and on its forward, and the algorithm's implementation."""

    def __init__(self, module, impl, bucket_bytes, do_flatten):
        self.module = module
        self.impl = impl
        self.do_flatten = do_flatten
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = make_buckets(self.params, bucket_bytes) if self.params else []
        self._in_backward = False
        self._next = 0        # the next bucket to start
        self._started = []    # (bucket, what the algorithm's launch returned), in bucket order
        self._accumulators = []
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
        if self.module.training and torch.is_grad_enabled():
            self.impl.before_forward(self)

    def _on_grad(self, bucket, k):
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        if k in bucket.arrived:
            return
        bucket.arrived.add(k)
        g, view = bucket.params[k].grad, bucket.views[k]
        if g is not None and g.data_ptr() != view.data_ptr():
            view.copy_(g)
        if len(bucket.arrived) == len(bucket.params):
            while self._next < len(self.buckets) and \
                    len(self.buckets[self._next].arrived) == len(self.buckets[self._next].params):
                self._start(self.buckets[self._next])

    def _start(self, bucket):
        for k, view in enumerate(bucket.views):
            if k not in bucket.arrived:  # no gradient in this backward: it adds nothing
                view.zero_()
        token = self.impl.launch(bucket) if self.impl.syncs_gradients else None
        self._started.append((bucket, token))
        self._next += 1

    def _end_backward(self):
        try:
            while self._next < len(self.buckets):
                self._start(self.buckets[self._next])
            if self.impl.syncs_gradients:
                for bucket, token in self._started:
                    self.impl.finish(bucket, token)
                for bucket in self.buckets:
                    self._give_back(bucket)
            self.impl.after_backward(self)
        finally:
            self._in_backward = False
            self._next = 0
            self._started = []
            for b in self.buckets:
                b.arrived.clear()

    def _give_back(self, bucket):
        for p, view in zip(bucket.params, bucket.views):
            if p.grad is not None and p.grad.data_ptr() == view.data_ptr():
                continue
            if self.do_flatten or p.grad is None:
                # do_flatten: the gradient becomes its part of the bucket, which later backwards
                # accumulate into in place (no copy in or out); else a tensor of its own.
                p.grad = view if self.do_flatten else view.clone()
            else:
                p.grad.copy_(view)


def with_bagua(self, optimizers, algorithm, process_group=None, do_flatten=True,
               bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Makes this module train in step with its replicas on the other ranks of ``process_group``
    (the default group: every rank), the way ``algorithm`` says (an ``algorithms.Algorithm``).
    Every rank of the group calls it, with modules of the same parameters. Rank 0's parameters
    and buffers are broadcast to the others first. Returns the module itself.

    ``optimizers`` are the module's optimizers (kept as ``bagua_optimizers``). ``do_flatten``
    (Bagua's name): the gradients become views of the buckets' flat buffers (no copies in and out
    of them); False keeps each gradient a tensor of its own. ``bucket_bytes``: the size of a bucket."""
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
    self._bagua_engine = BaguaEngine(self, impl, bucket_bytes, do_flatten)
    return self
