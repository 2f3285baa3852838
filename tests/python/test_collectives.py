"""Every collective of the "chorus" backend over every dtype and reduce op, against gloo's result
in the same run and against a reference computed from every rank's inputs (which every rank can
make). Run by launch_ranks.py with 2 to 4 ranks; a failure raises, so the rank exits non-zero."""
import sys

import torch
import torch.distributed as dist

from common import DTYPES, OPS, check, gloo_takes, init, input_of, ops_for, reduce_ref

rank, world, gloo = init()
SIZES = [1, 1001]
cases = 0


def both(fn, *args, dt=None, op=None):
    """Runs fn with the chorus group and, where gloo takes it, with gloo; returns both results."""
    mine = fn(None, *args)
    theirs = fn(gloo, *args) if gloo_takes(dt, op) else None
    return mine, theirs


def compare(what, mine, theirs, want):
    global cases
    check(what + " (against the reference)", mine, want, world)
    if theirs is not None:
        check(what + " (against gloo)", mine, theirs, world)
    cases += 1


for n in SIZES:
    for dt in DTYPES:
        for op in ops_for(dt):
            ins = [input_of(r, n, dt, op) for r in range(world)]
            want = reduce_ref(ins, op)

            def all_reduce(group):
                t = ins[rank].clone()
                dist.all_reduce(t, OPS[op], group=group)
                return t
            compare(f"all_reduce {op} {dt} n={n}", *both(all_reduce, dt=dt, op=op), want)

            root = world - 1

            def reduce(group):
                t = ins[rank].clone()
                dist.reduce(t, root, OPS[op], group=group)
                return t
            mine, theirs = both(reduce, dt=dt, op=op)
            # Off the root, chorus leaves the buffer as it was; gloo may leave partial sums there.
            compare(f"reduce {op} {dt} n={n}", mine, theirs if rank == root else None,
                    want if rank == root else ins[rank])

            def reduce_scatter(group):
                out = torch.empty(n, dtype=dt)
                dist.reduce_scatter(out, [input_of(rank, n, dt, op, salt=j) for j in range(world)],
                                    OPS[op], group=group)
                return out
            rs_want = reduce_ref([input_of(r, n, dt, op, salt=rank) for r in range(world)], op)
            mine = reduce_scatter(None)  # gloo 1.13 has no reduce_scatter
            compare(f"reduce_scatter {op} {dt} n={n}", mine, None, rs_want)

            def reduce_scatter_tensor(group):  # _reduce_scatter_base
                out = torch.empty(n, dtype=dt)
                flat = torch.cat([input_of(rank, n, dt, op, salt=j) for j in range(world)])
                dist.reduce_scatter_tensor(out, flat, OPS[op])
                return out
            compare(f"reduce_scatter_tensor {op} {dt} n={n}", reduce_scatter_tensor(None), None, rs_want)

        ins = [input_of(r, n, dt) for r in range(world)]

        def broadcast(group):
            t = ins[rank].clone()
            dist.broadcast(t, 1 % world, group=group)
            return t
        compare(f"broadcast {dt} n={n}", *both(broadcast, dt=dt), ins[1 % world])

        def all_gather(group):
            outs = [torch.empty(n, dtype=dt) for _ in range(world)]
            dist.all_gather(outs, ins[rank], group=group)
            return torch.cat(outs)
        compare(f"all_gather {dt} n={n}", *both(all_gather, dt=dt), torch.cat(ins))

        def all_gather_into_tensor(group):  # _allgather_base; gloo 1.13 has none
            out = torch.empty(world * n, dtype=dt)
            dist.all_gather_into_tensor(out, ins[rank], group=group)
            return out
        compare(f"all_gather_into_tensor {dt} n={n}", all_gather_into_tensor(None), None, torch.cat(ins))

        def gather(group):
            outs = [torch.empty(n, dtype=dt) for _ in range(world)] if rank == 0 else None
            dist.gather(ins[rank], outs, 0, group=group)
            return torch.cat(outs) if rank == 0 else ins[rank]
        compare(f"gather {dt} n={n}", *both(gather, dt=dt), torch.cat(ins) if rank == 0 else ins[rank])

        def scatter(group):
            out = torch.empty(n, dtype=dt)
            src = world - 1
            dist.scatter(out, [input_of(src, n, dt, salt=j) for j in range(world)] if rank == src else None, src,
                         group=group)
            return out
        compare(f"scatter {dt} n={n}", *both(scatter, dt=dt), input_of(world - 1, n, dt, salt=rank))

        # all_to_all with blocks of different sizes: rank i sends (i + j + 1) * n // 8 + 1 elements to j.
        def size_of(i, j):
            return (i + j + 1) * n // 8 + 1

        def block(i, j):
            return input_of(i, size_of(i, j), dt, salt=j)

        def all_to_all(group):
            outs = [torch.empty(size_of(j, rank), dtype=dt) for j in range(world)]
            dist.all_to_all(outs, [block(rank, j) for j in range(world)], group=group)
            return torch.cat(outs)
        a2a_want = torch.cat([block(j, rank) for j in range(world)])
        compare(f"all_to_all (uneven) {dt} n={n}", all_to_all(None), None, a2a_want)  # gloo 1.13 has no list form

        def all_to_all_single_splits(group):
            out = torch.empty(sum(size_of(j, rank) for j in range(world)), dtype=dt)
            dist.all_to_all_single(out, torch.cat([block(rank, j) for j in range(world)]),
                                   [size_of(j, rank) for j in range(world)], [size_of(rank, j) for j in range(world)],
                                   group=group)
            return out
        compare(f"all_to_all_single (splits) {dt} n={n}", *both(all_to_all_single_splits, dt=dt), a2a_want)

        def all_to_all_single(group):
            out = torch.empty(world * n, dtype=dt)
            dist.all_to_all_single(out, torch.cat([input_of(rank, n, dt, salt=j) for j in range(world)]), group=group)
            return out
        compare(f"all_to_all_single {dt} n={n}", *both(all_to_all_single, dt=dt),
                torch.cat([input_of(j, n, dt, salt=rank) for j in range(world)]))

        # send/recv: a ring, two tags, the second sent first.
        def ring(group):
            right, left = (rank + 1) % world, (rank - 1) % world
            a, b = torch.empty(n, dtype=dt), torch.empty(n, dtype=dt)
            reqs = [dist.isend(input_of(rank, n, dt, salt=2), right, group=group, tag=2),
                    dist.isend(input_of(rank, n, dt, salt=1), right, group=group, tag=1),
                    dist.irecv(a, left, group=group, tag=1), dist.irecv(b, left, group=group, tag=2)]
            for r in reqs:
                r.wait()
            return torch.cat([a, b])
        left = (rank - 1) % world
        compare(f"send/recv with tags {dt} n={n}", *both(ring, dt=dt),
                torch.cat([input_of(left, n, dt, salt=1), input_of(left, n, dt, salt=2)]))

# Coalesced all_reduce, objects (through allgather and broadcast of bytes), barrier.
ts = [input_of(rank, k, torch.float32, salt=k) for k in (3, 300, 30)]
dist.all_reduce_coalesced(ts, dist.ReduceOp.SUM)
for k, t in zip((3, 300, 30), ts):
    compare(f"all_reduce_coalesced n={k}", t, None, reduce_ref([input_of(r, k, torch.float32, salt=k)
                                                                  for r in range(world)], "sum"))
# Many small tensors (packed into shared buffers) and a large one, of other dtypes and ops,
# against gloo's coalesced all_reduce of the same lists.
for dt, op, name in ((torch.float64, dist.ReduceOp.MAX, "max"), (torch.int32, dist.ReduceOp.SUM, "sum")):
    sizes = [1 + (7 * k) % 50 for k in range(40)] + [5000]
    ts = [input_of(rank, k, dt, salt=k) for k in sizes]
    gts = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ts, op)
    dist.all_reduce_coalesced(gts, op, group=gloo)
    for j, (k, t, g) in enumerate(zip(sizes, ts, gts)):
        compare(f"all_reduce_coalesced {dt} {name} #{j} n={k}", t, g,
                reduce_ref([input_of(r, k, dt, salt=k) for r in range(world)], name))
# Receives from any source (dist.recv / irecv without src): rank 0 takes one message from every
# other rank and names each sender, on chorus as on gloo.
def from_any(group):
    if rank != 0:
        dist.send(torch.tensor([rank, rank * 10, rank * 100]), 0, group=group, tag=9)
        w = dist.isend(torch.tensor([rank, -rank, 7]), 0, group=group, tag=10)
        w.wait()
        return None
    got = {}
    for _ in range(world - 1):
        t = torch.empty(3, dtype=torch.int64)
        src = dist.recv(t, group=group, tag=9)
        got[src] = t.tolist()
    for _ in range(world - 1):
        t = torch.empty(3, dtype=torch.int64)
        w = dist.irecv(t, group=group, tag=10)
        w.wait()
        got[("irecv", w._source_rank())] = t.tolist()
    return got
mine_any, gloo_any = from_any(None), from_any(gloo)
if rank == 0:
    want = {r: [r, r * 10, r * 100] for r in range(1, world)}
    want.update({("irecv", r): [r, -r, 7] for r in range(1, world)})
    assert mine_any == want, mine_any
    assert gloo_any == want, gloo_any
# MPI's order of posting: receives that may take the same send take them in the order they were
# called. Rank 1 posts two receives from rank 0 and one from any source, all with tag 11; rank
# 0's three sends land in them in that order.
if world > 1:
    if rank == 1:
        bufs = [torch.zeros(2, dtype=torch.int64) for _ in range(3)]
        reqs = [dist.irecv(bufs[0], 0, tag=11), dist.irecv(bufs[1], 0, tag=11), dist.irecv(bufs[2], tag=11)]
    dist.barrier()
    if rank == 0:
        for v in (10, 11, 12):
            dist.send(torch.tensor([v, v]), 1, tag=11)
    if rank == 1:
        for r in reqs:
            r.wait()
        assert [b.tolist() for b in bufs] == [[10, 10], [11, 11], [12, 12]], bufs
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "text": "x" * rank})
assert objs == [{"rank": r, "text": "x" * r} for r in range(world)], objs
box = [{"from": 0}] if rank == 0 else [None]
dist.broadcast_object_list(box, 0)
assert box == [{"from": 0}], box
for _ in range(3):
    dist.barrier()

# Non-blocking: a Work per op, waited out of order, and its future.
works = [dist.all_reduce(torch.full((64,), float(rank + k)), async_op=True) for k in range(4)]
for k, w in reversed(list(enumerate(works))):
    w.wait()
    assert w.is_completed()
fut = dist.all_reduce(torch.ones(8), async_op=True).get_future()
assert torch.equal(fut.wait()[0], torch.full((8,), float(world))), fut.wait()

# send/recv around the ring of tensors over the largest message sent with its header (1 MiB:
# their data is pulled straight into the receiving tensor) and under it, waited last first.
for n, dt in ((3 << 18, torch.float32), (1 << 16, torch.float64), (3 << 19, torch.bfloat16)):
    def big_ring(group):
        right, left = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(n, dtype=dt)
        reqs = [dist.irecv(got, left, group=group, tag=5),
                dist.isend(input_of(rank, n, dt, salt=5), right, group=group, tag=5)]
        for r in reversed(reqs):
            r.wait()
        return got
    compare(f"send/recv {dt} n={n}", *both(big_ring, dt=dt), input_of((rank - 1) % world, n, dt, salt=5))

# Subgroups: the even ranks, and the odd ones (each built by every rank, as torch asks).
evens = dist.new_group([r for r in range(world) if r % 2 == 0], backend="chorus")
odds = dist.new_group([r for r in range(world) if r % 2 == 1], backend="chorus") if world > 1 else None
mine = evens if rank % 2 == 0 else odds
members = [r for r in range(world) if r % 2 == rank % 2]
t = torch.full((5,), float(rank))
dist.all_reduce(t, group=mine)
assert torch.equal(t, torch.full((5,), float(sum(members)))), t
b = torch.full((3,), float(rank))
dist.broadcast(b, members[-1], group=mine)  # the root is a global rank, as torch takes it
assert torch.equal(b, torch.full((3,), float(members[-1]))), b

dist.barrier()
print(f"rank {rank}: {cases} cases match")
dist.destroy_process_group()
sys.exit(0)
