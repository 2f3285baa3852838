"""The "chorus" backend on CUDA tensors, against a reference computed from every rank's inputs: every
collective over the dtypes, an op ordered between kernels on the default stream and on a side
stream, non-blocking Work, and DDP on the GPU. Rank r takes GPU r % count (on one GPU every rank shares it, and chorus runs
between the processes through CUDA IPC). Where torch sees no GPU, or chorus was built without CUDA,
every rank says SKIPPED and exits 0. Run by launch_ranks.py with 2 or more ranks."""
import datetime
import sys
import time

import torch
import torch.distributed as dist

import chorus
from common import OPS, check, input_of, rank_env, reduce_ref

rank, world = rank_env()
if not torch.cuda.is_available() or not chorus._chorus.cuda:
    why = "torch sees no GPU" if not torch.cuda.is_available() else \
        "this chorus module takes no CUDA tensors (chorus or its torch built without CUDA)"
    print(f"rank {rank}: SKIPPED: the CUDA tensor tests need a GPU ({why})")
    sys.exit(0)

dev = torch.device("cuda", rank % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=60))
cases = 0


def on_gpu(t):
    return t.to(dev)


def compare(what, got, want):
    global cases
    torch.cuda.current_stream().synchronize()
    try:
        check(what, got.cpu(), want, world)
    except AssertionError as e:
        # Whether the result came late (the op said done before its writes landed) or never.
        torch.cuda.synchronize()
        time.sleep(0.5)
        try:
            check(what, got.cpu(), want, world)
            later = "right after a device-wide sync and 0.5 s: the op said done before its writes landed"
        except AssertionError:
            later = "still wrong after a device-wide sync and 0.5 s"
        raise AssertionError(f"{e}; {later}") from None
    cases += 1


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64]
for n in (1, 1001, 1 << 20):
    for dt in DTYPES:
        reduce_ops = ["sum", "max"] + (["min", "prod", "avg"] if n == 1001 else [])
        for op in reduce_ops:
            if op == "avg" and not dt.is_floating_point:
                continue
            ins = [input_of(r, n, dt, op) for r in range(world)]
            t = on_gpu(ins[rank])
            dist.all_reduce(t, OPS[op])
            compare(f"all_reduce {op} {dt} n={n}", t, reduce_ref(ins, op))
            t = on_gpu(ins[rank])
            dist.reduce(t, world - 1, OPS[op])
            compare(f"reduce {op} {dt} n={n}", t, reduce_ref(ins, op) if rank == world - 1 else ins[rank])
            out = torch.empty(n, dtype=dt, device=dev)
            dist.reduce_scatter_tensor(out, on_gpu(torch.cat([input_of(rank, n, dt, op, salt=j) for j in range(world)])),
                                       OPS[op])
            compare(f"reduce_scatter_tensor {op} {dt} n={n}", out,
                    reduce_ref([input_of(r, n, dt, op, salt=rank) for r in range(world)], op))
        ins = [input_of(r, n, dt) for r in range(world)]
        t = on_gpu(ins[rank])
        dist.broadcast(t, 1 % world)
        compare(f"broadcast {dt} n={n}", t, ins[1 % world])
        out = torch.empty(world * n, dtype=dt, device=dev)
        dist.all_gather_into_tensor(out, on_gpu(ins[rank]))
        compare(f"all_gather_into_tensor {dt} n={n}", out, torch.cat(ins))
        outs = [torch.empty(n, dtype=dt, device=dev) for _ in range(world)]
        dist.all_gather(outs, on_gpu(ins[rank]))
        compare(f"all_gather {dt} n={n}", torch.cat(outs), torch.cat(ins))
        outs = [torch.empty(n, dtype=dt, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(on_gpu(ins[rank]), outs, 0)
        if rank == 0:
            compare(f"gather {dt} n={n}", torch.cat(outs), torch.cat(ins))
        out = torch.empty(n, dtype=dt, device=dev)
        src = world - 1
        dist.scatter(out, [on_gpu(input_of(src, n, dt, salt=j)) for j in range(world)] if rank == src else None, src)
        compare(f"scatter {dt} n={n}", out, input_of(src, n, dt, salt=rank))
        out = torch.empty(world * n, dtype=dt, device=dev)
        dist.all_to_all_single(out, on_gpu(torch.cat([input_of(rank, n, dt, salt=j) for j in range(world)])))
        compare(f"all_to_all_single {dt} n={n}", out, torch.cat([input_of(j, n, dt, salt=rank) for j in range(world)]))
        right, left = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(n, dtype=dt, device=dev)
        reqs = [dist.isend(on_gpu(input_of(rank, n, dt, salt=3)), right), dist.irecv(got, left)]
        for r in reqs:
            r.wait()
        compare(f"send/recv {dt} n={n}", got, input_of(left, n, dt, salt=3))

# Stream order: a kernel still running (torch.cuda._sleep) and then the fill that makes the input;
# the all_reduce (non-blocking: the host does not wait) must wait for both, and the add queued after
# it must wait for it (an add before the sum would be counted world times). On torch's default
# stream (its handle is null: CUDA's legacy stream) and on a side stream.
n = 1 << 22
for name, stream in (("the default stream", torch.cuda.default_stream(dev)), ("a side stream", torch.cuda.Stream())):
    with torch.cuda.stream(stream):
        t = torch.empty(n, device=dev)
        torch.cuda._sleep(50_000_000)  # ~25 ms of a busy GPU clock
        t.fill_(rank + 1.0)
        w = dist.all_reduce(t, async_op=True)
        t.add_(1.0)
    stream.synchronize()
    w.wait()
    want = sum(r + 1.0 for r in range(world)) + 1.0
    assert bool((t == want).all()), f"stream order on {name}: {t[:4].tolist()}, want {want}"
    cases += 1

# A staged result (all_gather and gather into a list) is copied into the list on the op's stream,
# right behind the op: an add queued after the call, on a side stream, sees the gathered values
# before the host has waited on the Work.
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    part = torch.full((n,), rank + 1.0, device=dev)
    torch.cuda._sleep(50_000_000)
    lists = {"all_gather": [torch.zeros(n, device=dev) for _ in range(world)],
             "gather": [torch.zeros(n, device=dev) for _ in range(world)] if rank == 0 else None}
    w_ag = dist.all_gather(lists["all_gather"], part, async_op=True)
    w_g = dist.gather(part, lists["gather"], dst=0, async_op=True)
    for out in lists.values():
        for t in out or []:
            t.add_(1.0)
side.synchronize()
for w in (w_ag, w_g):
    w.wait()
for what, out in lists.items():
    for r, t in enumerate(out or []):
        assert bool((t == r + 2.0).all()), f"{what} on a side stream: block {r} is {t[:4].tolist()}, want {r + 2.0}"
        cases += 1

# Non-blocking: Works waited out of order, then the tensors read on the current stream.
ts = [torch.full((4096,), float(rank + k), device=dev) for k in range(4)]
works = [dist.all_reduce(t, async_op=True) for t in ts]
for w in reversed(works):
    w.wait()
for k, t in enumerate(ts):
    want = float(sum(r + k for r in range(world)))
    assert bool((t == want).all()), f"async all_reduce {k}: {t[:4].tolist()}, want {want}"
    cases += 1

# A coalesced all_reduce of GPU tensors (each rank's on its own GPU): each runs as its own op.
ts = [torch.full((n,), float(rank + k), device=dev) for k, n in enumerate((3, 5000, 17))]
dist.all_reduce_coalesced(ts, dist.ReduceOp.SUM)
for k, t in enumerate(ts):
    want = float(sum(r + k for r in range(world)))
    assert bool((t == want).all()), f"all_reduce_coalesced {k}: {t[:4].tolist()}, want {want}"
    cases += 1

# DDP on the GPU (its buckets' all-reduces run through the Work futures): 10 steps from the same
# weights, against one model trained on the CPU with every rank's batch at once (DDP's average of
# equal batches' gradients is the gradient over their union).
def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def batch(r, step):
    g = torch.Generator().manual_seed(100 * r + step)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


ddp = torch.nn.parallel.DistributedDataParallel(mlp().to(dev), device_ids=[dev.index], bucket_cap_mb=0.001)
ref = mlp()
opt, ref_opt = torch.optim.SGD(ddp.parameters(), lr=0.05), torch.optim.SGD(ref.parameters(), lr=0.05)
for step in range(10):
    x, y = batch(rank, step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x.to(dev)), y.to(dev)).backward()
    opt.step()
    xs, ys = zip(*(batch(r, step) for r in range(world)))
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(ref(torch.cat(xs)), torch.cat(ys)).backward()
    ref_opt.step()
worst = max(float((a.detach().cpu() - b.detach()).abs().max()) for a, b in zip(ddp.parameters(), ref.parameters()))
assert worst < 1e-4, f"DDP on the GPU drifts {worst} from the model trained on every rank's batch"
cases += 1
dist.barrier()
print(f"rank {rank}: {cases} CUDA cases match (GPU {dev.index} of {torch.cuda.device_count()}); "
      f"DDP within {worst:.1e} of the reference")
dist.destroy_process_group()
sys.exit(0)
