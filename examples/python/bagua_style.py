#!/usr/bin/env python3
"""The model of ddp_train.py trained with Bagua's communication API (chorus.torch_api): after
each backward pass, every gradient is averaged in place across the ranks, as Bagua's gradient
allreduce algorithm does. Checks that every rank holds the same weights and the loss fell.

    torchrun --nproc_per_node 2 examples/python/bagua_style.py
    build/bin/chorus-run -n 2 /usr/bin/python3 examples/python/bagua_style.py
(with the build tree's package: PYTHONPATH=build/python)"""
import sys

import torch

from chorus import torch_api as comm


def main(steps=50):
    comm.init_process_group()
    rank, world = comm.get_rank(), comm.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    for p in model.parameters():  # rank 0's weights everywhere
        comm.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(100 + rank)
    first = last = None
    for step in range(steps):
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        opt.zero_grad()
        loss.backward()
        works = [comm.allreduce_inplace(p.grad, op=comm.ReduceOp.AVG, async_op=True) for p in model.parameters()]
        for w in works:
            w.wait()
        opt.step()
        last = loss.item()
        first = last if first is None else first
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = torch.empty(world * weights.numel())
    comm.allgather(weights, everyone)
    same = all(torch.equal(weights, w) for w in everyone.view(world, -1))
    if rank == 0:
        print(f"bagua_style: {world} ranks, {steps} steps, loss {first:.4f} -> {last:.4f}, "
              f"replicas {'identical' if same else 'DIFFER'}")
    return 0 if same and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
