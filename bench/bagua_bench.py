#!/usr/bin/env python3
"""Training steps of an MLP (forward, backward, SGD step) on every rank, with each way of keeping
the replicas in step: none (the floor), DistributedDataParallel on chorus and on gloo, and
``with_bagua``'s algorithms on chorus. Prints, per way, the step's time (the slowest rank's
median over --reps timed runs of --steps steps) and what it adds to the floor.

usage: chorus-run -n 2 /usr/bin/python3 bench/bagua_bench.py [--hidden 1024] [--steps 20] [--reps 3]
       (or torchrun --nproc_per_node 2; with the build tree's package: PYTHONPATH=build/python)"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus  # noqa: F401
from chorus import torch_api as bagua
from chorus.torch_api.algorithms import bytegrad, decentralized, gradient_allreduce


def model(hidden):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 256))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=120))
    bagua.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    gloo = dist.new_group(backend="gloo")
    ways = {
        "local (no sync)": lambda m: m,
        "DDP, chorus": lambda m: DDP(m),
        "DDP, gloo": lambda m: DDP(m, process_group=gloo),
        "with_bagua gradient_allreduce": lambda m: m.with_bagua([], gradient_allreduce.GradientAllReduceAlgorithm()),
        "with_bagua bytegrad": lambda m: m.with_bagua([], bytegrad.ByteGradAlgorithm(hierarchical=False)),
        "with_bagua decentralized all": lambda m: m.with_bagua([], decentralized.DecentralizedAlgorithm(
            hierarchical=False)),
    }
    if world % 2 == 0:
        ways["with_bagua decentralized shift_one"] = lambda m: m.with_bagua([], decentralized.DecentralizedAlgorithm(
            hierarchical=False, peer_selection_mode="shift_one"))
    params = sum(q.numel() for q in model(a.hidden).parameters())
    if rank == 0:
        print(f"# {world} ranks, MLP of {params / 1e6:.2f}M f32 parameters ({params * 4 / 2**20:.1f} MiB of "
              f"gradients), batch 32, {torch.get_num_threads()} torch threads a rank; ms per step, the slowest rank's "
              f"median of {a.reps} runs of {a.steps} steps")
        print(f"# {'way':<36} {'ms/step':>9} {'over floor':>11}")
    floor = None
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(32, 256, generator=g), torch.randn(32, 256, generator=g)
    for name, wrap in ways.items():
        net = wrap(model(a.hidden))
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)

        def step():
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()

        for _ in range(3):
            step()
        runs = []
        for _ in range(a.reps):
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            runs.append((time.perf_counter() - t0) * 1e3 / a.steps)
        worst = torch.tensor([statistics.median(runs)], dtype=torch.float64)
        dist.all_reduce(worst, dist.ReduceOp.MAX, group=gloo)
        ms = float(worst[0])
        floor = ms if floor is None else floor
        if rank == 0:
            print(f"  {name:<36} {ms:9.2f} {ms - floor:11.2f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
