"""Elastic membership from Python, one role per process (elastic_job.py starts them):
  member    under chorus-run -n 3 --elastic: checks an all_reduce and makes the subgroup {0, 2};
            rank 1 then kills itself (SIGKILL); the survivors get chorus.NodeLost naming it,
            shrink the world and the subgroup, check ops in both, print "SHRUNK", wait for the
            newcomer, grow, send it the model state and run ops with it in the world and in a
            new subgroup {1, 2}.
  newcomer  under chorus-run --join: chorus.join() returns once the members grew; it takes the
            model state and runs the same ops."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import chorus

role = sys.argv[1]
TIMEOUT = datetime.timedelta(seconds=60)
STATE = torch.arange(6, dtype=torch.float32) * 7  # rank 0's model state, sent to the newcomer


def expect_sum(group=None):
    """Every member of `group` all-reduces rank + 1: the sum is n (n + 1) / 2."""
    n = dist.get_world_size(group)
    t = torch.full((5,), float(dist.get_rank(group) + 1))
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((5,), n * (n + 1) / 2)), (n, t)


def with_newcomer():
    """What every member of the grown world runs, the newcomer too."""
    assert dist.get_world_size() == 3 and chorus.epoch() == 2, (dist.get_world_size(), chorus.epoch())
    state = STATE.clone() if dist.get_rank() == 0 else torch.zeros(6)
    dist.broadcast(state, 0)
    assert torch.equal(state, STATE), state
    expect_sum()
    pair = chorus.new_group([1, 2])
    if dist.get_rank() in (1, 2):
        assert dist.get_rank(pair) == dist.get_rank() - 1 and dist.get_world_size(pair) == 2
        expect_sum(pair)
    else:
        assert pair == dist.GroupMember.NON_GROUP_MEMBER
    print(f"rank {dist.get_rank()}: GROWN to 3, state ok", flush=True)


if role == "member":
    dist.init_process_group("chorus", timeout=TIMEOUT)
    rank = dist.get_rank()
    assert dist.get_world_size() == 3 and chorus.epoch() == 0
    expect_sum()
    pair = dist.new_group([0, 2])  # torch's own, while its store (rank 0's) is there
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.all_reduce(torch.ones(8))
        raise AssertionError("an op with a killed rank did not raise")
    except chorus.NodeLost as e:
        assert "node 1" in str(e), str(e)
    try:  # subgroups follow the default group, not the other way round
        chorus.shrink(group=pair)
        raise AssertionError("a subgroup shrank before the default group")
    except RuntimeError as e:
        assert "shrink the default group first" in str(e), str(e)
    assert chorus.shrink(group=dist.GroupMember.NON_GROUP_MEMBER) is dist.GroupMember.NON_GROUP_MEMBER
    start = time.monotonic()
    chorus.shrink()
    took = time.monotonic() - start
    assert dist.get_world_size() == 2 and dist.get_rank() == (0 if rank == 0 else 1), dist.get_rank()
    assert chorus.epoch() == 1
    expect_sum()
    pair = chorus.shrink(group=pair)  # both its members survived: the same two, in the new world
    assert dist.get_world_size(pair) == 2 and dist.get_rank(pair) == dist.get_rank()
    expect_sum(pair)
    print(f"rank {rank}: SHRUNK to 2 in {took * 1000:.1f} ms", flush=True)
    deadline = time.monotonic() + 60
    while True:  # until every member knows of the newcomer (each hears at its own moment)
        heard = torch.tensor([float(chorus.newcomers())])
        dist.all_reduce(heard, op=dist.ReduceOp.MAX)
        if heard.item() > 0:
            break
        assert time.monotonic() < deadline, "no newcomer came"
        time.sleep(0.005)  # pacing only: the all_reduce above decides
    chorus.grow()
    assert dist.get_rank() == (0 if rank == 0 else 1)
    with_newcomer()
elif role == "newcomer":
    assert not dist.is_initialized()
    chorus.join(timeout=TIMEOUT)
    assert dist.get_rank() == 2, dist.get_rank()
    with_newcomer()
else:
    sys.exit(f"unknown role {role}")
