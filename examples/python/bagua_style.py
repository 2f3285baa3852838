#!/usr/bin/env python3
"""The model of ddp_train.py trained the way Bagua trains: ``model.with_bagua([optimizer],
algorithm)`` (chorus.torch_api), with one of Bagua's algorithms: gradient_allreduce (the
default), bytegrad (gradients sent as 8-bit integers), decentralized (weights averaged with one
peer a step), low_precision_decentralized (with both ring neighbours, as 8-bit differences),
qadam (Adam whose momentum is sent as 8-bit integers after a warm-up) or async
(weights averaged by a background thread while training goes on). Checks that the loss fell and
that the replicas agree: identical where gradients or momenta are synchronized; where weights are
only averaged with peers, once averaged at the end.

    torchrun --nproc_per_node 2 examples/python/bagua_style.py [--algorithm bytegrad]
    build/bin/chorus-run -n 2 /usr/bin/python3 examples/python/bagua_style.py
(with the build tree's package: PYTHONPATH=build/python)"""
import argparse
import sys

import torch

from chorus import torch_api as bagua
from chorus.torch_api.algorithms import async_model_average, bytegrad, decentralized, gradient_allreduce, q_adam

# Each makes (optimizer, algorithm) for the model's parameters.
ALGORITHMS = {
    "gradient_allreduce": lambda params: sgd(params, gradient_allreduce.GradientAllReduceAlgorithm()),
    # Compressed between every two ranks (Bagua's default, hierarchical, compresses between hosts only).
    "bytegrad": lambda params: sgd(params, bytegrad.ByteGradAlgorithm(hierarchical=False)),
    "decentralized": lambda params: sgd(params, decentralized.DecentralizedAlgorithm(
        hierarchical=False, peer_selection_mode="shift_one" if bagua.get_world_size() % 2 == 0 else "all")),
    # Weights exchanged with the ring's two neighbours as 8-bit differences.
    "low_precision_decentralized": lambda params: sgd(params, decentralized.LowPrecisionDecentralizedAlgorithm(
        hierarchical=False)),
    "qadam": lambda params: qadam(params),
    # A round every 10 ms, after 5 steps of gradient all-reduce.
    "async": lambda params: sgd(params, async_model_average.AsyncModelAverageAlgorithm(sync_interval_ms=10,
                                                                                        warmup_steps=5)),
}


def sgd(params, algorithm):
    return torch.optim.SGD(params, lr=0.1), algorithm


def qadam(params):
    # 10 steps of Adam on all-reduced gradients, then the momentum crosses in 8 bits.
    opt = q_adam.QAdamOptimizer(params, lr=0.01, warmup_steps=10)
    return opt, q_adam.QAdamAlgorithm(opt, hierarchical=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="gradient_allreduce")
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    bagua.init_process_group()
    rank, world = bagua.get_rank(), bagua.get_world_size()
    torch.manual_seed(rank)  # each rank's own start: with_bagua gives every rank rank 0's weights
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt, algorithm = ALGORITHMS[a.algorithm](model.parameters())
    model = model.with_bagua([opt], algorithm)
    truth = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(100 + rank)
    first = last = None
    for step in range(a.steps):
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        opt.zero_grad()
        loss.backward()  # the algorithm's communication runs in it
        opt.step()
        last = loss.item()
        first = last if first is None else first
    if a.algorithm == "async":
        model.bagua_algorithm.abort(model)  # every rank: the background averaging stops
    spread = apart(model)
    if a.algorithm in ("decentralized", "low_precision_decentralized", "async"):  # the replicas are near one another: one average makes them one
        for p in model.parameters():
            bagua.allreduce_inplace(p.data, op=bagua.ReduceOp.AVG)
    agree = apart(model) == 0
    if rank == 0:
        print(f"bagua_style ({a.algorithm}): {world} ranks, {a.steps} steps, loss {first:.4f} -> {last:.4f}, "
              f"replicas {'agree' if agree else 'DIFFER'} (at most {spread:.1e} apart after training)")
    return 0 if agree and last < first else 1


def apart(model):
    """How far the replicas' weights are apart, at most."""
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = torch.empty(bagua.get_world_size() * weights.numel())
    bagua.allgather(weights, everyone)
    return float((everyone.view(bagua.get_world_size(), -1) - weights).abs().max())


if __name__ == "__main__":
    sys.exit(main())
