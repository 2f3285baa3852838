"""chorus groups beside a default group of another backend: gloo is the default group's backend, as
NCCL would be in a GPU job, and dist.new_group(backend="chorus") makes chorus groups of their own
(each member meets the others through the group's store). Two at once, one of every rank and one
of a subset, each op checked against gloo's result in the same run. Run by launch_ranks.py with 3
ranks; a failure raises, so the rank exits non-zero."""
import datetime
import sys

import torch
import torch.distributed as dist

import chorus
from common import check, input_of

timeout = datetime.timedelta(seconds=20)
dist.init_process_group("gloo", timeout=timeout)
rank, world = dist.get_rank(), dist.get_world_size()
assert world >= 3, "the subset group needs 3 ranks"
everyone = dist.new_group(backend="chorus", timeout=timeout)
pair_ranks = [0, world - 1]
pair = dist.new_group(pair_ranks, backend="chorus", timeout=timeout)  # every rank calls it, as torch asks
gloo_pair = dist.new_group(pair_ranks, backend="gloo", timeout=timeout)
assert dist.get_backend(everyone) == "chorus" and dist.get_backend() == "gloo"
cases = 0


def same(what, mine, gloo):
    global cases
    check(what, mine, gloo, world)
    cases += 1


for n in (1, 1001, 70000):
    x = input_of(rank, n, torch.float32)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a, group=everyone)
    dist.all_reduce(b)
    same(f"all_reduce of {n} on the chorus group of every rank", a, b)

    outs, gouts = [torch.empty(n) for _ in range(world)], [torch.empty(n) for _ in range(world)]
    dist.all_gather(outs, x, group=everyone)
    dist.all_gather(gouts, x)
    same(f"all_gather of {n}", torch.cat(outs), torch.cat(gouts))

    a, b = x.clone(), x.clone()
    dist.broadcast(a, 1, group=everyone)
    dist.broadcast(b, 1)
    same(f"broadcast of {n} from rank 1", a, b)

    if rank in pair_ranks:
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=dist.ReduceOp.MAX, group=pair)
        dist.all_reduce(b, op=dist.ReduceOp.MAX, group=gloo_pair)
        same(f"all_reduce MAX of {n} on the chorus pair", a, b)
        # Point to point within the pair, in global ranks as torch names them.
        other = pair_ranks[1] if rank == pair_ranks[0] else pair_ranks[0]
        got = torch.empty(n)
        if rank == pair_ranks[0]:
            dist.send(x, other, group=pair)
            dist.recv(got, other, group=pair)
        else:
            dist.recv(got, other, group=pair)
            dist.send(x, other, group=pair)
        same(f"send/recv of {n} on the chorus pair", got, input_of(other, n, torch.float32))

# A non-blocking op of the chorus group beside the default group's.
a, b = torch.ones(8) * (rank + 1), torch.ones(8) * (rank + 1)
w = dist.all_reduce(a, group=everyone, async_op=True)
dist.all_reduce(b)
w.wait()
same("a non-blocking all_reduce beside gloo's", a, b)

# Errors still name the group's ranks and reach every member.
try:
    dist.all_reduce(torch.ones(2 + (rank == 1)), group=everyone)
    raise AssertionError("a shape mismatch on the chorus group did not raise")
except chorus.ShapeMismatch as e:
    assert "all_reduce" in str(e), e
    cases += 1

dist.barrier()
print(f"rank {rank}: {cases} cases match gloo, chorus groups beside a gloo default group")
dist.destroy_process_group()
sys.exit(0)
