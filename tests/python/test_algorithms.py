"""Bagua's training algorithms (``module.with_bagua``) on 4 ranks, each step checked against a
reference computed here from every rank's own gradients or weights, gathered over gloo:
- gradient all-reduce (flat and hierarchical, averaged or summed, gradients as bucket views or
  tensors of their own, several buckets, a parameter that only some ranks use): the synchronized
  gradients are the mean (sum) of every rank's (a rank's unused parameter counting zero);
- a parameter that no rank's backward reaches (or frozen after with_bagua) keeps its grad None;
  gradients accumulated over two backwards (average=True) are the mean of every rank's
  accumulated ones, and with average=False accumulation raises;
- a backward that raises part-way makes the next forward raise, and training goes on rightly;
  reentrant checkpointing raises, use_reentrant=False gives the ranks' mean;
- ByteGrad (flat and hierarchical): the gradients are what MinMax-UInt8 compression of every
  rank's chunks, their sum, and its compression give, and every rank holds the same;
- decentralized (all, shift_one, an interval, hierarchical, several buckets): after the step,
  each weight is its peers' mean before forward minus lr times this rank's gradient; forwards in
  eval mode or without grad exchange nothing;
- bad settings raise, on every rank. The hierarchical cases make two "hosts" of ranks {0, 1} and
  {2, 3}."""
import functools
import sys

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

import algorithm_refs
from algorithm_refs import bytegrad_reference, fake_hosts
from common import init

from chorus import torch_api as bagua
from chorus.torch_api import communication
from chorus.torch_api.algorithms import bytegrad, decentralized, gradient_allreduce

rank, world, gloo = init(timeout_s=60)
bagua.init_process_group()
assert world == 4, "run with 4 ranks"
gathered = functools.partial(algorithm_refs.gathered, group=gloo)
LR = 0.05


class Fail(torch.autograd.Function):
    """The identity, whose backward raises while ``armed``: a backward that fails part-way."""
    armed = False

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if Fail.armed:
            raise RuntimeError("Fail is armed")
        return g


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 32)
        self.c = torch.nn.Linear(32, 4)
        self.extra = torch.nn.Linear(32, 4)  # used by some ranks on some steps only
        self.reentrant = None  # c under torch.utils.checkpoint, with this use_reentrant (None: not)

    def forward(self, x, use_extra=False):
        h = torch.tanh(self.b(Fail.apply(torch.tanh(self.a(x)))))
        out = self.c(h) if self.reentrant is None else checkpoint(self.c, h, use_reentrant=self.reentrant)
        return out + (self.extra(h) if use_extra else 0)


class IdleNet(Net):
    def __init__(self):
        super().__init__()
        self.idle = torch.nn.Linear(4, 4)  # no rank's forward uses it


def make(seed, cls=Net):
    torch.manual_seed(seed + rank)  # different on every rank: with_bagua broadcasts rank 0's
    return cls()



def local_grads(model, x, y, use_extra, more=()):
    """This rank's own gradients at the model's weights (zeros where a parameter is unused),
    accumulated over the (x, y, use_extra) of ``more`` too."""
    ref = type(model)()
    ref.load_state_dict(model.state_dict())
    for x, y, use_extra in [(x, y, use_extra)] + list(more):
        torch.nn.functional.mse_loss(ref(x, use_extra), y).backward()
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()]


def train_step(model, x, y, use_extra):
    torch.nn.functional.mse_loss(model(x, use_extra), y).backward()


def raises(want, fn):
    """fn() raises a RuntimeError that says ``want``."""
    try:
        fn()
    except RuntimeError as e:
        assert want in str(e), f"expected {want!r} in {e}"
    else:
        raise AssertionError(f"no error where {want!r} was expected")


def check_mean(name, model, mine, divisor=world):
    """Every gradient is the sum of every rank's ``mine`` over ``divisor``; returns the largest difference."""
    worst = 0.0
    for (n, p), own in zip(model.named_parameters(), mine):
        want = torch.stack(gathered(own)).sum(0) / divisor
        d = float((p.grad - want).abs().max())
        worst = max(worst, d)
        assert d < 1e-6, f"{name}: {n}'s gradient differs from the ranks' {'mean' if divisor > 1 else 'sum'} by {d}"
    return worst


def batch(g, step):
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g), (rank + step) % 3 == 0



def check_allreduce(name, algorithm, pg=None, do_flatten=True):
    model = make(1).with_bagua([], algorithm, process_group=pg, bucket_bytes=2048, do_flatten=do_flatten)
    assert len(model._bagua_engine.buckets) > 2, "several buckets"
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(rank)
    worst = 0.0
    for step in range(8):
        x, y, use_extra = batch(g, step)
        mine = local_grads(model, x, y, use_extra)
        opt.zero_grad(set_to_none=step % 2 == 1)
        train_step(model, x, y, use_extra)
        worst = max(worst, check_mean(f"{name}, step {step}", model, mine, world if algorithm.average else 1))
        # do_flatten: each gradient is its part of its bucket's flat buffer; else a tensor of its own.
        for b in model._bagua_engine.buckets:
            for p, view in zip(b.params, b.views):
                assert (p.grad.data_ptr() == view.data_ptr()) == do_flatten, \
                    f"{name}: a gradient is {'not ' if do_flatten else ''}its bucket's view"
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(flat, o) for o in gathered(flat)), f"{name}: the replicas differ"
    print(f"rank {rank}: {name}: 8 steps, gradients the ranks' {'mean' if algorithm.average else 'sum'} "
          f"within {worst:.1e}")



def check_bytegrad(name, hierarchical, pg=None):
    model = make(2).with_bagua([], bytegrad.ByteGradAlgorithm(hierarchical=hierarchical), process_group=pg,
                               bucket_bytes=4096)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(10 + rank)
    worst = 0.0
    for step in range(5):
        x, y, use_extra = batch(g, step)
        mine = local_grads(model, x, y, use_extra)
        index = {p: k for k, p in enumerate(model.parameters())}
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x, use_extra), y).backward()
        for b in model._bagua_engine.buckets:
            flat = torch.cat([mine[index[p]].reshape(-1) for p in b.params])
            everyone = gathered(flat)
            # What enters the compressed exchange: every rank's, or each host's sum (its leader's).
            inputs = [everyone[0] + everyone[1], everyone[2] + everyone[3]] if hierarchical else everyone
            want = bytegrad_reference(inputs, world)
            got = torch.cat([p.grad.reshape(-1) for p in b.params])
            d = float((got - want).abs().max())
            worst = max(worst, d)
            assert d < 1e-6, f"{name}, step {step}, bucket {b.index}: differs from the reference by {d}"
            # Against the exact mean: half a step of each input's compression, then of the result's.
            exact = torch.stack(everyone).mean(0)
            first = sum(float(v.max() - v.min()) for v in inputs) / (510 * world)
            bound = first + (float(exact.max() - exact.min()) + 2 * first) / 510 + 1e-6
            err = float((got - exact).abs().max())
            assert 0 < err <= bound, f"{name}: the quantization error {err} is not within (0, {bound}]"
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(flat, o) for o in gathered(flat)), f"{name}: the replicas differ"
    print(f"rank {rank}: {name}: 5 steps, gradients the compressed reference's within {worst:.1e}")


def check_decentralized(name, algorithm, peers_of, pg=None, bucket_bytes=None, idle=False, fail_at=None):
    """peers_of(step, weights by rank) -> what this rank's weights average to before its step.
    ``idle``: forwards in eval mode and without grad before each step (they must exchange
    nothing); ``fail_at``: a backward that raises part-way before that step."""
    kw = {} if bucket_bytes is None else {"bucket_bytes": bucket_bytes}
    model = make(3).with_bagua([], algorithm, process_group=pg, **kw)
    engine = model._bagua_engine
    assert bucket_bytes is None or len(engine.buckets) > 2, "several buckets"
    assert all(b.flat is None for b in engine.buckets), "gradients are not copied into buckets"
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(20 + rank)
    worst = 0.0
    for step in range(6):
        x, y, _ = batch(g, step)
        before = [p.detach().clone() for p in model.parameters()]
        if step == fail_at:
            fail_backward(model, x, y)
        if idle:
            model.eval()
            model(x)
            model.train()
            with torch.no_grad():
                model(x)
            assert model.bagua_algorithm.pending is None, f"{name}: an idle forward started an exchange"
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        opt.step()
        for p, w, gr in zip(model.parameters(), before, grads):
            want = peers_of(step, gathered(w)) - LR * gr
            d = float((p.detach() - want).abs().max())
            worst = max(worst, d)
            assert d < 1e-6, f"{name}, step {step}: a weight differs from its peers' mean - lr x grad by {d}"
    print(f"rank {rank}: {name}: 6 steps, weights as the peers' mean within {worst:.1e}")
    return model


def mean(ws):
    return torch.stack(ws).mean(0)


def fail_backward(model, x, y):
    """A backward that raises on every rank, after the module's first buckets started (or, in
    decentralized, with its exchange in flight); the next forward says so, on every rank."""
    Fail.armed = True
    raises("Fail is armed", lambda: train_step(model, x, y, True))
    Fail.armed = False
    engine, impl = model._bagua_engine, model.bagua_algorithm
    in_flight = engine._next > 0 if impl.syncs_gradients else impl.pending is not None
    assert engine._in_backward and in_flight, "the backward failed with communication in flight"
    raises("the previous backward did not finish", lambda: model(x))
    assert not engine._in_backward and getattr(impl, "pending", None) is None


def steps_give_mean(model, opt, g, steps, label):
    """`steps` training steps, each one's gradients checked against the ranks' mean."""
    for step in range(steps):
        x, y, use_extra = batch(g, step)
        mine = local_grads(model, x, y, use_extra)
        opt.zero_grad()
        train_step(model, x, y, use_extra)
        check_mean(f"{label}, step {step}", model, mine)
        opt.step()


def check_failure():
    """Training goes on rightly after a backward that raised on every rank."""
    model = make(5).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm(), bucket_bytes=2048)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(30 + rank)
    fail_backward(model, *batch(g, 0)[:2])
    steps_give_mean(model, opt, g, 3, "after a failed backward")
    print(f"rank {rank}: a failed backward: the next forward raises, then 3 steps give the ranks' mean")


def check_checkpointing():
    """Reentrant checkpointing raises (on every rank: the checkpointed c's backward comes first on
    every rank, without extra); use_reentrant=False gives the ranks' mean."""
    model = make(6).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm(), bucket_bytes=2048)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(40 + rank)
    x, y, _ = batch(g, 0)
    model.reentrant = True
    raises("use_reentrant=False", lambda: train_step(model, x, y, False))
    model.reentrant = False
    steps_give_mean(model, opt, g, 3, "use_reentrant=False")
    print(f"rank {rank}: reentrant checkpointing raises; use_reentrant=False: 3 steps give the ranks' mean")


def check_unused():
    """A parameter that no rank's backward reaches, or frozen after with_bagua, keeps grad None
    (so AdamW's weight decay leaves it); one that only rank 1 uses gets the ranks' mean."""
    model = make(7, IdleNet).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm(), bucket_bytes=2048)
    model.a.bias.requires_grad_(False)
    still = {"idle.weight", "idle.bias", "a.bias"}
    start = {n: p.detach().clone() for n, p in model.named_parameters() if n in still}
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    g = torch.Generator().manual_seed(50 + rank)
    for step in range(3):
        x, y, _ = batch(g, step)
        mine = local_grads(model, x, y, rank == 1)
        opt.zero_grad(set_to_none=step == 1)
        train_step(model, x, y, rank == 1)
        for (n, p), own in zip(model.named_parameters(), mine):
            if n in still:
                assert p.grad is None, f"step {step}: {n}, which no rank's backward reaches, has a gradient"
            else:
                want = torch.stack(gathered(own)).mean(0)
                d = float((p.grad - want).abs().max())
                assert d < 1e-6, f"step {step}: {n}'s gradient differs from the ranks' mean by {d}"
        opt.step()
    for n, p in model.named_parameters():
        if n in still:
            assert torch.equal(p.detach(), start[n]), f"{n} moved"
    print(f"rank {rank}: parameters no rank uses keep grad None; one only rank 1 uses gets the mean")


def check_accumulation(do_flatten):
    """Two backwards a step (extra used by ranks 0 and 1 in the first, by rank 2 in the second):
    the gradients are the mean of every rank's accumulated ones."""
    model = make(8).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm(), bucket_bytes=2048,
                               do_flatten=do_flatten)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(60 + rank)
    for step in range(3):
        micro = [batch(g, 2 * step)[:2] + (rank in (0, 1),), batch(g, 2 * step + 1)[:2] + (rank == 2,)]
        mine = local_grads(model, *micro[0], more=micro[1:])
        opt.zero_grad(set_to_none=step == 1)
        for m in micro:
            train_step(model, *m)
        check_mean(f"accumulation (do_flatten={do_flatten}), step {step}", model, mine)
        opt.step()
    print(f"rank {rank}: two backwards a step, do_flatten={do_flatten}: 3 steps give the ranks' mean")


def check_accumulation_summed():
    """average=False: a second backward into un-zeroed gradients raises, on every rank; then
    zeroed steps give the ranks' sum."""
    model = make(9).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm(average=False),
                               bucket_bytes=2048)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(70 + rank)
    x, y, _ = batch(g, 0)
    train_step(model, x, y, True)
    raises("accumulated over several backwards", lambda: train_step(model, x, y, True))
    for step in range(2):
        x, y, use_extra = batch(g, step + 1)
        mine = local_grads(model, x, y, use_extra)
        opt.zero_grad()
        train_step(model, x, y, use_extra)
        check_mean(f"summed, step {step}", model, mine, 1)
        opt.step()
    print(f"rank {rank}: average=False: accumulating raises; zeroed steps give the ranks' sum")


check_allreduce("gradient all-reduce", gradient_allreduce.GradientAllReduceAlgorithm())
check_allreduce("gradient all-reduce, gradients of their own", gradient_allreduce.GradientAllReduceAlgorithm(),
                do_flatten=False)
check_allreduce("gradient all-reduce, summed", gradient_allreduce.GradientAllReduceAlgorithm(average=False))
check_failure()
check_checkpointing()
check_unused()
check_accumulation(do_flatten=True)
check_accumulation(do_flatten=False)
check_accumulation_summed()
two_hosts = fake_hosts()
assert two_hosts.get_intra_node_communicator().ranks == ([0, 1] if rank < 2 else [2, 3])
assert (two_hosts.get_inter_node_communicator() is not None) == (rank in (0, 2))
check_allreduce("gradient all-reduce, hierarchical", gradient_allreduce.GradientAllReduceAlgorithm(hierarchical=True),
                pg=two_hosts)

# A tiny span: 255 / span would overflow.
tiny = torch.tensor([0.0, 1e-37, 3e-37])
d = float((bytegrad.decompress(bytegrad.compress(tiny)) - tiny).abs().max())
assert d <= 3e-37 / 500, f"ByteGrad: a span of 3e-37 comes back {d} off"
check_bytegrad("ByteGrad", hierarchical=False)
check_bytegrad("ByteGrad, hierarchical", hierarchical=True, pg=two_hosts)

check_decentralized("decentralized, all, several buckets, a failed backward",
                    decentralized.DecentralizedAlgorithm(hierarchical=False), lambda step, ws: mean(ws),
                    bucket_bytes=2048, fail_at=2)
pairs = lambda step: decentralized.shift_one_peer(rank, world, step)  # noqa: E731
assert sorted(decentralized.shift_one_peer(r, 4, 1) for r in range(4)) == [0, 1, 2, 3]
check_decentralized("decentralized, shift_one",
                    decentralized.DecentralizedAlgorithm(hierarchical=False, peer_selection_mode="shift_one"),
                    lambda step, ws: (ws[rank] + ws[pairs(step)]) / 2)
check_decentralized("decentralized, shift_one every 2nd step, idle forwards between",
                    decentralized.DecentralizedAlgorithm(hierarchical=False, peer_selection_mode="shift_one",
                                                         communication_interval=2),
                    lambda step, ws: (ws[rank] + ws[pairs(step // 2)]) / 2 if step % 2 == 0 else ws[rank],
                    idle=True)
check_decentralized("decentralized, all, hierarchical", decentralized.DecentralizedAlgorithm(),
                    lambda step, ws: mean(ws), pg=two_hosts, bucket_bytes=2048)
check_decentralized("decentralized, shift_one, hierarchical",
                    decentralized.DecentralizedAlgorithm(peer_selection_mode="shift_one"),
                    lambda step, ws: ((ws[0] + ws[1]) / 2 + (ws[2] + ws[3]) / 2) / 2, pg=two_hosts)

# Bad settings: said at once, on every rank.
three = bagua.new_group([0, 1, 2])
communication._hosts = ["a", "b", "c", "c"]
three_hosts = bagua.new_group()
for bad, want in ((lambda: decentralized.DecentralizedAlgorithm(peer_selection_mode="ring"), "peer_selection_mode"),
                  (lambda: decentralized.DecentralizedAlgorithm(communication_interval=0), "communication_interval"),
                  (lambda: Net().with_bagua([], decentralized.DecentralizedAlgorithm(
                      hierarchical=False, peer_selection_mode="shift_one"), process_group=three),
                   "shift_one pairs ranks, and 3 ranks" if rank < 3 else "not a member"),
                  (lambda: Net().with_bagua([], decentralized.DecentralizedAlgorithm(peer_selection_mode="shift_one"),
                                            process_group=three_hosts), "shift_one pairs ranks, and 3 hosts"),
                  (lambda: make(4).with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm()).with_bagua(
                      [], gradient_allreduce.GradientAllReduceAlgorithm()), "already")):
    try:
        bad()
    except (ValueError, RuntimeError) as e:
        assert want in str(e), f"expected {want!r} in {e}"
    else:
        raise AssertionError(f"no error where {want!r} was expected")
print(f"rank {rank}: bad settings raise")
dist.destroy_process_group()
sys.exit(0)
