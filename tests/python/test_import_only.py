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
# The elastic calls rewrite torch 1.x's group tables: under a torch 2.x they say so, by name.
real = torch.__version__
torch.__version__ = "2.5.1"
try:
    chorus.shrink()
    raise AssertionError("chorus.shrink ran under a torch 2.x")
except NotImplementedError as e:
    assert "chorus.shrink" in str(e) and "2.5.1" in str(e), str(e)
finally:
    torch.__version__ = real
print("import chorus: no thread, no shared memory; backend registered; elastic calls refuse torch 2.x")
sys.exit(0)
