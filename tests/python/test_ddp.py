"""20 steps of DistributedDataParallel on a small MLP, once over chorus and once over gloo, from
the same weights and data: the parameters must agree within 1e-6 after every step. DDP runs its
buckets' all-reduces through the backend's Work futures (its communication hook)."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import init

rank, world, gloo = init()


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


# Small buckets, so that one step's backward sends several all-reduces.
on_chorus = DDP(model(), process_group=dist.group.WORLD, bucket_cap_mb=0.01)
on_gloo = DDP(model(), process_group=gloo, bucket_cap_mb=0.01)
opt_c = torch.optim.SGD(on_chorus.parameters(), lr=0.05)
opt_g = torch.optim.SGD(on_gloo.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
worst = 0.0
for step in range(20):
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
    for net, opt in ((on_chorus, opt_c), (on_gloo, opt_g)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    for a, b in zip(on_chorus.parameters(), on_gloo.parameters()):
        d = float((a - b).abs().max())
        worst = max(worst, d)
        if d > 1e-6:
            raise AssertionError(f"step {step}: a parameter differs by {d} between chorus and gloo")
# Every rank holds the same parameters (DDP's point).
flat = torch.cat([p.detach().reshape(-1) for p in on_chorus.parameters()])
everyone = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(everyone, flat, group=gloo)
assert all(torch.equal(everyone[0], e) for e in everyone), "ranks hold different parameters"
print(f"rank {rank}: 20 DDP steps, chorus and gloo within {worst:.2e}")
dist.destroy_process_group()
sys.exit(0)
