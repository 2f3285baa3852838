"""Bagua's training algorithms (``module.with_bagua``) on 4 ranks, each step checked against a
reference computed here from every rank's own gradients or weights, gathered over gloo:
- gradient all-reduce (flat and hierarchical, gradients as bucket views or tensors of their own,
  several buckets, a parameter that only some ranks use): the synchronized gradients are the mean
  of every rank's (a rank's unused parameter counting zero);
- ByteGrad (flat and hierarchical): the gradients are what MinMax-UInt8 compression of every
  rank's chunks, their sum, and its compression give, and every rank holds the same;
- decentralized (all, shift_one, an interval, hierarchical): after the step, each weight is its
  peers' mean before forward minus lr times this rank's gradient;
- bad settings raise. The hierarchical cases make two "hosts" of ranks {0, 1} and {2, 3}."""
import sys

import torch
import torch.distributed as dist

from common import init

from chorus import torch_api as bagua
from chorus.torch_api import communication
from chorus.torch_api.algorithms import bytegrad, decentralized, gradient_allreduce

rank, world, gloo = init(timeout_s=60)
bagua.init_process_group()
assert world == 4, "run with 4 ranks"
LR = 0.05


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 32)
        self.c = torch.nn.Linear(32, 4)
        self.extra = torch.nn.Linear(32, 4)  # used by some ranks on some steps only

    def forward(self, x, use_extra=False):
        h = torch.tanh(self.b(torch.tanh(self.a(x))))
        return self.c(h) + (self.extra(h) if use_extra else 0)


def make(seed):
    torch.manual_seed(seed + rank)  # different on every rank: with_bagua broadcasts rank 0's
    return Net()


def gathered(t):
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t.contiguous(), group=gloo)
    return out


def local_grads(model, x, y, use_extra):
    """This rank's own gradients at the model's weights (zeros where a parameter is unused)."""
    ref = Net()
    ref.load_state_dict(model.state_dict())
    torch.nn.functional.mse_loss(ref(x, use_extra), y).backward()
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()]


def batch(g, step):
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g), (rank + step) % 3 == 0


def fake_hosts():
    communication._hosts = ["a", "a", "b", "b"]
    return bagua.new_group()


def check_allreduce(name, algorithm, pg=None, **kw):
    model = make(1).with_bagua([], algorithm, process_group=pg, bucket_bytes=2048, **kw)
    assert len(model._bagua_engine.buckets) > 2, "several buckets"
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(rank)
    worst = 0.0
    for step in range(8):
        x, y, use_extra = batch(g, step)
        mine = local_grads(model, x, y, use_extra)
        opt.zero_grad(set_to_none=step % 2 == 1)
        torch.nn.functional.mse_loss(model(x, use_extra), y).backward()
        for p, own in zip(model.parameters(), mine):
            want = torch.stack(gathered(own)).sum(0) / world
            d = float((p.grad - want).abs().max())
            worst = max(worst, d)
            assert d < 1e-6, f"{name}, step {step}: a gradient differs from the ranks' mean by {d}"
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert all(torch.equal(flat, o) for o in gathered(flat)), f"{name}: the replicas differ"
    print(f"rank {rank}: {name}: 8 steps, gradients the ranks' mean within {worst:.1e}")


def bytegrad_reference(chunks_by_rank, divisor):
    """One compressed all-reduce of the ranks' vectors, as every rank computes it."""
    n = len(chunks_by_rank)
    numel = chunks_by_rank[0].numel()
    chunk = -(-numel // n)
    padded = []
    for v in chunks_by_rank:
        z = torch.zeros(chunk * n)
        z[:numel] = v
        padded.append(z.view(n, chunk))
    out = []
    for i in range(n):
        s = bytegrad.decompress(bytegrad.compress(padded[0][i]))
        for j in range(1, n):
            s += bytegrad.decompress(bytegrad.compress(padded[j][i]))
        if divisor != 1:
            s /= divisor
        out.append(bytegrad.decompress(bytegrad.compress(s)))
    return torch.cat(out)[:numel]


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


def check_decentralized(name, algorithm, peers_of, pg=None):
    """peers_of(step, weights by rank) -> what this rank's weights average to before its step."""
    model = make(3).with_bagua([], algorithm, process_group=pg)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(20 + rank)
    worst = 0.0
    for step in range(6):
        x, y, _ = batch(g, step)
        before = [p.detach().clone() for p in model.parameters()]
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


check_allreduce("gradient all-reduce", gradient_allreduce.GradientAllReduceAlgorithm())
check_allreduce("gradient all-reduce, gradients of their own", gradient_allreduce.GradientAllReduceAlgorithm(),
                do_flatten=False)
two_hosts = fake_hosts()
assert two_hosts.get_intra_node_communicator().ranks == ([0, 1] if rank < 2 else [2, 3])
assert (two_hosts.get_inter_node_communicator() is not None) == (rank in (0, 2))
check_allreduce("gradient all-reduce, hierarchical", gradient_allreduce.GradientAllReduceAlgorithm(hierarchical=True),
                pg=two_hosts)

check_bytegrad("ByteGrad", hierarchical=False)
check_bytegrad("ByteGrad, hierarchical", hierarchical=True, pg=two_hosts)

check_decentralized("decentralized, all", decentralized.DecentralizedAlgorithm(hierarchical=False),
                    lambda step, ws: mean(ws))
pairs = lambda step: decentralized.shift_one_peer(rank, world, step)  # noqa: E731
assert sorted(decentralized.shift_one_peer(r, 4, 1) for r in range(4)) == [0, 1, 2, 3]
check_decentralized("decentralized, shift_one",
                    decentralized.DecentralizedAlgorithm(hierarchical=False, peer_selection_mode="shift_one"),
                    lambda step, ws: (ws[rank] + ws[pairs(step)]) / 2)
check_decentralized("decentralized, shift_one every 2nd step",
                    decentralized.DecentralizedAlgorithm(hierarchical=False, peer_selection_mode="shift_one",
                                                         communication_interval=2),
                    lambda step, ws: (ws[rank] + ws[pairs(step // 2)]) / 2 if step % 2 == 0 else ws[rank])
check_decentralized("decentralized, shift_one, hierarchical",
                    decentralized.DecentralizedAlgorithm(peer_selection_mode="shift_one"),
                    lambda step, ws: ((ws[0] + ws[1]) / 2 + (ws[2] + ws[3]) / 2) / 2, pg=two_hosts)

# Bad settings: said at once, on every rank.
three = bagua.new_group([0, 1, 2])
for bad, want in ((lambda: decentralized.DecentralizedAlgorithm(peer_selection_mode="ring"), "peer_selection_mode"),
                  (lambda: decentralized.DecentralizedAlgorithm(communication_interval=0), "communication_interval"),
                  (lambda: Net().with_bagua([], decentralized.DecentralizedAlgorithm(
                      hierarchical=False, peer_selection_mode="shift_one"), process_group=three),
                   "shift_one pairs ranks, and 3 ranks" if rank < 3 else "not a member"),
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
