#!/usr/bin/env python3
"""A small MLP trained with DistributedDataParallel on chorus: each rank fits its own shard of a
synthetic regression problem, DDP averages the gradients through the "chorus" backend, and the
script checks what it claims (every rank holds the same weights; the loss fell).

    torchrun --nproc_per_node 2 examples/python/ddp_train.py
    build/bin/chorus-run -n 2 /usr/bin/python3 examples/python/ddp_train.py
(with the build tree's package: PYTHONPATH=build/python)"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus  # noqa: F401  (registers the "chorus" backend)


def main(steps=50):
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(100 + rank)  # each rank's own shard
    first = last = None
    for step in range(steps):
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients on chorus here
        opt.step()
        last = loss.item()
        first = last if first is None else first
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(everyone, weights)
    same = all(torch.equal(everyone[0], w) for w in everyone)
    if rank == 0:
        print(f"ddp_train: {world} ranks, {steps} steps, loss {first:.4f} -> {last:.4f}, "
              f"replicas {'identical' if same else 'DIFFER'}")
    dist.destroy_process_group()
    return 0 if same and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
