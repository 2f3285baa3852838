"""Errors across ranks. usage: test_errors.py mismatch | killed
  mismatch  ranks call all_reduce with different lengths: every rank raises chorus.ShapeMismatch
            with the same message (compared through a gloo group); a sparse tensor raises
            chorus.InvalidArgument at the call.
  killed    the last rank dies (SIGKILL) before an all_reduce: every survivor raises
            chorus.NodeLost naming it, well within the op timeout."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import chorus
from common import init

case = sys.argv[1]
rank, world, gloo = init(timeout_s=30)

if case == "mismatch":
    t = torch.ones(1000 + (rank == 1))
    try:
        dist.all_reduce(t)
        raise AssertionError("a shape mismatch did not raise")
    except chorus.ShapeMismatch as e:
        message = str(e)
    assert isinstance(chorus.ShapeMismatch("x"), RuntimeError)
    messages = [None] * world
    dist.all_gather_object(messages, message, group=gloo)
    assert len(set(messages)) == 1, messages
    assert "all_reduce" in message and "f32[1001]" in message, message
    # The group goes on after the error.
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world))), t
    print(f"rank {rank}: raised chorus.ShapeMismatch: {message}")
    # A tensor chorus cannot take is refused on the caller, before any op: a sparse one.
    try:
        dist.all_reduce(torch.eye(3).to_sparse())
        raise AssertionError("a sparse tensor did not raise")
    except chorus.InvalidArgument as e:
        assert "sparse" in str(e).lower() and "to_dense" in str(e), str(e)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world * world))), t
elif case == "killed":
    victim = world - 1
    dist.barrier()
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
        raise AssertionError("an op with a killed rank did not raise")
    except chorus.NodeLost as e:
        message = str(e)
    took = time.monotonic() - start
    assert f"node {victim}" in message, message
    assert took < 20, f"the loss was raised after {took:.1f} s"
    print(f"rank {rank}: raised chorus.NodeLost after {took:.2f} s: {message}")
    os._exit(0)  # the job is over: no teardown against a dead rank
else:
    sys.exit(f"unknown case {case}")
dist.destroy_process_group()
