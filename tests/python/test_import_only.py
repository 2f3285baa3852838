"""A process that imports chorus and never makes a group: no thread, no shared memory, no file
of chorus's is left, and it exits at once with status 0."""
import glob
import os
import sys


def threads():
    return len(os.listdir("/proc/self/task"))


def shm():
    return set(glob.glob("/dev/shm/*"))


import torch  # noqa: E402  (its own threads first)
import torch.distributed  # noqa: E402,F401

before_threads, before_shm = threads(), shm()
import chorus  # noqa: E402

assert chorus.Error is not None and issubclass(chorus.ShapeMismatch, chorus.Error)
assert threads() == before_threads, f"import chorus started {threads() - before_threads} thread(s)"
assert shm() == before_shm, f"import chorus made {shm() - before_shm}"
assert torch.distributed.Backend.CHORUS == "CHORUS" or hasattr(torch.distributed.Backend, "CHORUS")
# The elastic calls need a group of chorus's: a foreign object, and no group at all, are refused.
try:
    chorus.epoch(group=object())
    raise AssertionError("chorus.epoch took a group that is not chorus's")
except TypeError as e:
    assert "chorus" in str(e), str(e)
try:
    chorus.shrink()
    raise AssertionError("chorus.shrink ran with no group")
except (RuntimeError, ValueError) as e:  # torch 1.x's words, torch 2.x's
    assert "not been initialized" in str(e), str(e)
print("import chorus: no thread, no shared memory; backend registered; elastic calls refuse a group not chorus's")
sys.exit(0)
