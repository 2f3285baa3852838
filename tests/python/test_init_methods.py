"""The ways torch.distributed starts a "chorus" default group besides env://: the tcp:// init
method, and a store passed in (a FileStore); then, on the last group, batch_isend_irecv (pipeline
parallelism's exchange) and chorus.torch_api.from_torch_group. Each group is checked with an
all_reduce against the value every rank computes, and destroyed before the next one starts. Run by
launch_ranks.py (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE set) with 3 ranks; a failure raises."""
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import chorus  # noqa: F401  (registers "chorus")
from chorus import torch_api as comm

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=20)


def summed(what):
    t = torch.full((1001,), float(rank + 1))
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    assert torch.all(t == want), f"{what}: all_reduce gave {t[0].item()}, not {want}"
    assert dist.get_backend() == "chorus" and dist.get_rank() == rank and dist.get_world_size() == world


# tcp://: rank 0 hosts torch's TCPStore at the address (the launcher's free port: nothing here
# makes an env:// store).
port = int(os.environ["MASTER_PORT"])
dist.init_process_group("chorus", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=timeout)
summed("tcp://")
dist.destroy_process_group()

# A store handed in, as a program with a store of its own does (one file, named by the launch: its
# port and the launcher's pid; the last rank to drop its FileStore removes it).
path = os.path.join(tempfile.gettempdir(), f"chorus-init-methods-{os.environ['MASTER_PORT']}-{os.getppid()}.store")
store = dist.FileStore(path, world)
dist.init_process_group("chorus", store=store, rank=rank, world_size=world, timeout=timeout)
summed("store=")

# batch_isend_irecv: each rank sends to the next around the ring and receives from the one before.
send = torch.arange(64, dtype=torch.float32) + 100 * rank
got = torch.empty(64)
ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
want = torch.arange(64, dtype=torch.float32) + 100 * ((rank - 1) % world)
assert torch.equal(got, want), f"batch_isend_irecv: got {got[:3].tolist()}, want {want[:3].tolist()}"

# chorus.torch_api over a torch group made with the chorus backend (from_torch_group).
comm.init_process_group()  # the default group is chorus's already: taken as it is
sub_ranks = [0, world - 1]
sub = dist.new_group(sub_ranks)
bagua = comm.from_torch_group(sub)  # every rank, as new_group
c = bagua.get_global_communicator()
if rank not in sub_ranks:
    assert c is None
else:
    assert c.nranks() == 2 and c.rank() == sub_ranks.index(rank), (c.nranks(), c.rank())
    t = torch.full((5,), float(rank))
    comm.allreduce_inplace(t, op=comm.ReduceOp.MAX, comm=c)
    assert torch.all(t == world - 1), t
whole = comm.from_torch_group(None)  # None is the world, as torch reads it
assert whole.get_global_communicator().nranks() == world
dist.barrier()
print(f"rank {rank}: tcp://, store=, batch_isend_irecv and from_torch_group ok")
dist.destroy_process_group()
sys.exit(0)
