#!/usr/bin/env python3
"""Elastic training from PyTorch on chorus (docs/elastic.md, docs/python.md): a small MLP whose
gradients every rank averages with dist.all_reduce. When a rank is lost, the survivors get
chorus.NodeLost, call chorus.shrink() and redo the step among themselves; when a newcomer started
with `chorus-run --join` waits, the members grow() and rank 0 sends it the model. At the end every
rank checks it holds the same weights as rank 0.

    build/bin/chorus-run -n 3 --elastic /usr/bin/python3 examples/python/elastic_train.py
    build/bin/chorus-run --join FILE -n 1 /usr/bin/python3 examples/python/elastic_train.py
(chorus-run --elastic prints the FILE; with the build tree's package: PYTHONPATH=build/python).
--kill-rank R --kill-step S: rank R kills itself (SIGKILL) at step S, to see the shrink."""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

import chorus


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def set_flat(model, v):
    at = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(v[at:at + p.numel()].view_as(p))
            at += p.numel()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--step-ms", type=float, default=5, help="pretended compute per step")
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-step", type=int, default=-1)
    a = ap.parse_args()

    newcomer = os.environ.get("CHORUS_JOIN") == "1"
    if newcomer:
        chorus.join()  # waits until the members grow
    else:
        dist.init_process_group("chorus")
    first_rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights everywhere
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    truth = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(100 + first_rank + (1000 if newcomer else 0))
    shrinks = grows = 0
    step = torch.tensor([0.0, float(a.steps)])  # the step, and how many the job runs

    def take_model():  # rank 0's weights and steps to everyone (a newcomer has neither)
        v = flat(model)
        dist.broadcast(v, 0)
        dist.broadcast(step, 0)
        set_flat(model, v)

    if newcomer:
        take_model()
    while step[0].item() < step[1].item():
        if int(step[0].item()) == a.kill_step and first_rank == a.kill_rank and shrinks == 0 and not newcomer:
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        opt.zero_grad()
        loss.backward()
        time.sleep(a.step_ms / 1000)
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        try:
            dist.all_reduce(grads)
            heard = torch.tensor([float(chorus.newcomers())])
            dist.all_reduce(heard, op=dist.ReduceOp.MAX)  # every member decides alike
        except chorus.NodeLost:
            start = time.monotonic()
            chorus.shrink()
            shrinks += 1
            take_model()  # a loss inside the second all_reduce may have ended it at some ranks only
            print(f"elastic: shrink to {dist.get_world_size()} members in {(time.monotonic() - start) * 1000:.1f} ms",
                  flush=True)
            continue  # redo the step among the survivors
        grads /= dist.get_world_size()
        at = 0
        for p in model.parameters():
            p.grad.copy_(grads[at:at + p.numel()].view_as(p))
            at += p.numel()
        opt.step()
        step[0] += 1
        if heard.item() > 0:
            start = time.monotonic()
            chorus.grow()
            grows += 1
            take_model()
            print(f"elastic: grow to {dist.get_world_size()} members in {(time.monotonic() - start) * 1000:.1f} ms",
                  flush=True)
    weights = flat(model)
    mine = weights.clone()
    dist.broadcast(weights, 0)
    ok = torch.equal(weights, mine)
    print(f"elastic: done steps={int(step[0].item())} members={dist.get_world_size()} shrinks={shrinks} grows={grows} "
          f"loss {loss.item():.4f} weights {'ok' if ok else 'DIFFER'}", flush=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
