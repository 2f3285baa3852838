#!/usr/bin/env python3
"""What one torch.distributed call costs from Python, taken apart: in one process of a one-rank
world (no peer to wait for, so only the call's own path counts), 1 KiB f32 sum all-reduces timed
on the "chorus" backend, on gloo and on a backend that moves nothing (_null_backend,
bench/torch_null_backend.cpp: torch's own part of a call, the floor under any backend).

Columns, each the median of --reps runs of --iters calls, in us per call:
  dist.all_reduce    the call as a training script makes it
  pg.allreduce.wait  the backend's op and its Work's wait, without torch's Python wrapper
  pg.allreduce       the backend's op handed in, its Work dropped (a non-blocking op)
The last line says what chorus adds over the floor. The same op from C++ (a one-peer blocking
all_reduce) is `build/bin/chorus-bench --peers 1 -b 1K -e 1K -n 20000`.

usage: PYTHONPATH=build/python bench/torch_overhead.py [--iters N] [--reps R]"""
import argparse
import os
import socket
import statistics
import time


def timed(fn, iters, reps):
    for _ in range(min(iters, 500)):
        fn()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        runs.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    import torch
    import torch.distributed as dist
    import chorus  # noqa: F401  (registers "chorus")
    import _null_backend

    dist.Backend.register_backend("null", _null_backend.create)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]), RANK="0", WORLD_SIZE="1")
    s.close()
    dist.init_process_group("chorus")
    groups = {"chorus": dist.distributed_c10d._get_default_group(),
              "gloo": dist.new_group(backend="gloo"), "null": dist.new_group(backend="null")}
    t = torch.ones(256)
    opts = dist.AllreduceOptions()
    print(f"# one rank, all_reduce 1 KiB f32 sum, us per call (median of {a.reps} x {a.iters})")
    print(f"#{'backend':>7} {'dist.all_reduce':>16} {'pg.allreduce.wait':>18} {'pg.allreduce':>13}")
    got = {}
    for name, g in groups.items():
        got[name] = (timed(lambda: dist.all_reduce(t, group=g), a.iters, a.reps),
                     timed(lambda: g.allreduce([t], opts).wait(), a.iters, a.reps),
                     timed(lambda: g.allreduce([t], opts), a.iters, a.reps))
        print(f"{name:>8} {got[name][0]:16.2f} {got[name][1]:18.2f} {got[name][2]:13.2f}", flush=True)
    if t[0].item() != 1.0:
        raise SystemExit(f"FAILED: a one-rank sum changed the tensor to {t[0].item()}")
    c, n = got["chorus"], got["null"]
    print(f"# chorus over the floor: {c[0] - n[0]:.2f} us per dist.all_reduce, {c[1] - n[1]:.2f} us per op and wait")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
