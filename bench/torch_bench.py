#!/usr/bin/env python3
"""all_reduce (f32, sum), or send/recv, from Python through torch.distributed: the "chorus" backend
and gloo in the same processes, the same sizes, one after the other at each size, in the columns
of anchors.sh's torch-gloo (bytes, time_us, algbw, busbw) plus chorus's speedup over gloo.
send_recv pairs ranks 0->1, 2->3, ... (an odd last rank idles); its busbw is its algbw.

usage: bench/torch_bench.py [-n RANKS] [-b MIN_BYTES] [-e MAX_BYTES] [-i ITERS] [--op all_reduce|send_recv]
       (run from the repository with the build tree's package: PYTHONPATH=build/python)
Each rank is a process, started here as torchrun would (MASTER_ADDR, RANK, WORLD_SIZE)."""
import argparse
import os
import socket
import subprocess
import sys
import time


def rank_main(minb, maxb, iters, op):
    import torch
    import torch.distributed as dist
    import chorus  # noqa: F401

    dist.init_process_group("chorus")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    peer = rank ^ 1

    def step(t, group):
        if op == "all_reduce":
            dist.all_reduce(t, group=group)
        elif peer < n:
            (dist.send if rank % 2 == 0 else dist.recv)(t, peer, group=group)

    if rank == 0:
        what = "all_reduce f32 sum" if op == "all_reduce" else "send/recv f32"
        print(f"# torch.distributed {what}, ranks={n}, chorus vs gloo (same processes, same run)")
        print(f"#{'bytes':>12} {'chorus_us':>10} {'algbw':>8} {'busbw':>8} {'gloo_us':>10} {'algbw':>8} {'busbw':>8}"
              f" {'speedup':>8}", flush=True)
    b = minb
    while b <= maxb:
        t = torch.full((max(1, b // 4),), float(rank + 1))
        it = max(3, iters // 8) if b >= 1 << 24 else max(5, iters // 4) if b >= 1 << 20 else iters
        times = {}
        for name, group in (("chorus", None), ("gloo", gloo)):
            for _ in range(3):
                step(t, group)
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(it):
                step(t, group)
            times[name] = (time.perf_counter() - t0) * 1e6 / it
        # Every rank's time counts: the slowest one is the op's.
        worst = torch.tensor([times["chorus"], times["gloo"]], dtype=torch.float64)
        dist.all_reduce(worst, dist.ReduceOp.MAX, group=gloo)
        c, g = float(worst[0]), float(worst[1])
        if rank == 0:
            row = f"{b:13d}"
            for us in (c, g):
                alg = b / us / 1e3
                row += f" {us:10.2f} {alg:8.3f} {alg * 2 * (n - 1) / n if op == 'all_reduce' else alg:8.3f}"
            print(row + f" {g / c:8.2f}", flush=True)
        b *= 2
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2)
    p.add_argument("-b", type=int, default=1024)
    p.add_argument("-e", type=int, default=64 << 20)
    p.add_argument("-i", type=int, default=200)
    p.add_argument("--op", choices=("all_reduce", "send_recv"), default="all_reduce")
    p.add_argument("--rank-of", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank_of is not None:
        return rank_main(a.b, a.e, a.i, a.op)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(a.n))
    procs = [subprocess.Popen([sys.executable, __file__, "-b", str(a.b), "-e", str(a.e), "-i", str(a.i), "--op", a.op,
                               "--rank-of", str(r)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(a.n)]
    return max(pr.wait() for pr in procs)


if __name__ == "__main__":
    sys.exit(main())
