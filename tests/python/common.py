"""What the Python suites share: both backends in one job, every rank's inputs made alike on
every rank (so each rank can compute any op's reference), and comparisons that say what differs."""
import datetime
import os

import torch
import torch.distributed as dist

import chorus  # registers "chorus"

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}


def init(timeout_s=20):
    """chorus as the default group, and a gloo group of the same ranks to compare with."""
    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=timeout_s))
    gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size(), gloo


def is_float(dt):
    return dt.is_floating_point


def ops_for(dt):
    return [o for o in OPS if is_float(dt) is False or not o.startswith("b")]


def gloo_takes(dt, op=None):
    # Gloo 1.13: no bfloat16, no AVG.
    return dt != torch.bfloat16 and op != "avg"


def input_of(rank, n, dt, op="sum", salt=0):
    """Rank `rank`'s input: small values, so that products and sums of every type stay in range."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    if op == "prod":
        v = torch.randint(1, 3, (n,), generator=g)  # 1 or 2
    elif is_float(dt):
        v = torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2
    elif dt == torch.uint8:
        v = torch.randint(0, 60, (n,), generator=g)  # 4 ranks' sum stays below 256
    else:
        v = torch.randint(-30, 30, (n,), generator=g)  # ... and int8's within +-127
    return v.to(dt)


def reduce_ref(inputs, op):
    """The reduction of every rank's input, in float64 (or int64) and then in the input's type."""
    dt = inputs[0].dtype
    wide = [t.to(torch.float64 if is_float(dt) else torch.int64) for t in inputs]
    acc = wide[0].clone()
    for t in wide[1:]:
        if op in ("sum", "avg"):
            acc += t
        elif op == "prod":
            acc *= t
        elif op == "min":
            acc = torch.minimum(acc, t)
        elif op == "max":
            acc = torch.maximum(acc, t)
        elif op == "band":
            acc &= t
        elif op == "bor":
            acc |= t
        elif op == "bxor":
            acc ^= t
    if op == "avg":
        acc = acc / len(inputs) if is_float(dt) else torch.div(acc, len(inputs), rounding_mode="trunc")
    return acc.to(dt)


def tolerance(dt, world):
    """What the order of summation explains: one rounding per step in the type's precision."""
    eps = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1.2e-7, torch.float64: 2.3e-16}[dt]
    return 4 * world * eps


def check(what, got, want, world):
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
    if is_float(got.dtype):
        g, w = got.to(torch.float64), want.to(torch.float64)
        tol = tolerance(got.dtype, world)
        bad = (g - w).abs() > tol * (1 + w.abs())
    else:
        bad = got != want
    if bool(bad.any()):
        i = int(bad.nonzero()[0][0])
        raise AssertionError(f"{what}: element {i} is {got[i].item()}, want {want[i].item()} "
                             f"({int(bad.sum())} of {got.numel()} differ)")


def rank_env():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
