"""What a Work's future and a group's options promise, on 2 ranks:
- a future's callback may wait for another op's future (DDP's PowerSGD hook does): it completes,
  and DDP with PowerSGD on chorus keeps parameters within 1e-5 of the same on gloo;
- a list that an all_gather or gather fills is filled once the op is done, also where the Work
  was dropped unwaited (the next op of the group finds it filled);
- CPU tensors of any strides work (staged through a contiguous copy);
- a subgroup's own timeout (new_group(timeout=...)) bounds its ops, not the default group's."""
import datetime
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
from common import init

rank, world, gloo = init(timeout_s=60)

# A callback that waits for a second op's future, as PowerSGD's do.
x = torch.ones(2)
inner = torch.full((2,), float(rank + 1))


def second(_):
    dist.all_reduce(inner, async_op=True).get_future().wait()
    return inner.tolist()


got = dist.all_reduce(x, async_op=True).get_future().then(second).wait()
assert got == [3.0, 3.0], f"the nested op gave {got}"


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


nets = []
for group in (dist.group.WORLD, gloo):
    net = DDP(model(), process_group=group)
    state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=1, start_powerSGD_iter=2)
    net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    nets.append((net, torch.optim.SGD(net.parameters(), lr=0.1)))
g = torch.Generator().manual_seed(rank)
worst = 0.0
for step in range(5):
    batch = torch.randn(8, 16, generator=g)
    for net, opt in nets:
        opt.zero_grad()
        net(batch).sum().backward()
        opt.step()
    for a, b in zip(nets[0][0].parameters(), nets[1][0].parameters()):
        worst = max(worst, float((a - b).abs().max()))
assert worst < 1e-5, f"DDP with PowerSGD: chorus and gloo {worst} apart"
print(f"rank {rank}: nested futures complete; PowerSGD on chorus within {worst:.1e} of gloo", flush=True)

# Lists filled without a wait.
t = torch.full((3,), float(rank))
gathered = [torch.zeros(3) for _ in range(world)]
dist.all_gather(gathered, t, async_op=True)  # dropped
at_root = [torch.zeros(3) for _ in range(world)] if rank == 0 else None
dist.gather(t, at_root, dst=0, async_op=True)
dist.barrier()
want = [torch.full((3,), float(r)) for r in range(world)]
assert all(torch.equal(a, b) for a, b in zip(gathered, want)), f"all_gather's list: {gathered}"
assert rank != 0 or all(torch.equal(a, b) for a, b in zip(at_root, want)), f"gather's list: {at_root}"
print(f"rank {rank}: lists of dropped Works filled", flush=True)

# Tensors of other strides (gloo takes them): staged through a contiguous copy and back.
m = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)).t()  # a transpose
dist.all_reduce(m)
want = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * sum(r + 1 for r in range(world))).t()
assert torch.equal(m, want), f"all_reduce of a transpose: {m}"
base = torch.zeros(10)
every_other = base[::2]
if rank == 0:
    every_other.copy_(torch.arange(5, dtype=torch.float32))
dist.broadcast(every_other, 0)
assert torch.equal(base[::2], torch.arange(5, dtype=torch.float32)) and not base[1::2].any(), f"broadcast: {base}"
sent = torch.arange(8, dtype=torch.float32).reshape(2, 4).t()  # 4 x 2, of other strides
box = torch.zeros(2, 4)
if rank == 0:
    dist.send(sent, 1, tag=4)
elif rank == 1:
    dist.recv(box.t(), 0, tag=4)  # into a 4 x 2 transpose: the same elements, in the same order
    assert torch.equal(box.t(), sent), f"recv into a transpose: {box.t()}"
weight = torch.nn.Parameter(torch.zeros(6))  # a strided view of a parameter, written back as memory
with torch.no_grad():
    view = weight[::2]
    if rank == 0:
        view.copy_(torch.ones(3))
dist.broadcast(view, 0)
assert torch.equal(weight.detach(), torch.tensor([1.0, 0, 1, 0, 1, 0])), f"broadcast into a parameter's view: {weight}"
print(f"rank {rank}: tensors of other strides", flush=True)

# A subgroup's timeout: rank 1 does not call until rank 0's op ended.
sub = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=1))
dist.barrier(group=sub)
token = torch.zeros(1)
if rank == 0:
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(2), group=sub)
        raise AssertionError("the subgroup's all_reduce succeeded with a rank missing")
    except chorus.Timeout:
        took = time.monotonic() - start
    assert took < 10, f"the subgroup's op timed out after {took:.1f} s: its own 1 s did not hold"
    dist.send(token, 1, group=gloo)
    print(f"rank {rank}: the subgroup's op timed out after {took:.1f} s", flush=True)
else:
    dist.recv(token, 0, group=gloo)
dist.barrier(group=gloo)
sys.exit(0)
