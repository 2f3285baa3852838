"""Bagua's communication API (chorus.torch_api) against torch.distributed's results on gloo in the
same run: each op of the API, its _inplace form, a subgroup's communicators and non-blocking ops."""
import os
import socket
import sys

import torch
import torch.distributed as dist

from chorus import torch_api as comm
from common import check, input_of, reduce_ref

comm.init_process_group()
rank, world = comm.get_rank(), comm.get_world_size()
gloo = dist.new_group(backend="gloo")
assert comm.is_initialized() and comm.get_local_size() == world and comm.get_local_rank() == rank
assert [int(o) for o in comm.ReduceOp] == [0, 1, 2, 3, 7, 8, 9, 10]
n = 257
f32 = torch.float32
ins = [input_of(r, n, f32) for r in range(world)]
x = ins[rank]

# allreduce, against gloo's all_reduce of the same input
recv = torch.empty(n)
comm.allreduce(x, recv, op=comm.ReduceOp.MAX)
g = x.clone()
dist.all_reduce(g, dist.ReduceOp.MAX, group=gloo)
check("allreduce MAX", recv, g, world)
t = x.clone()
comm.allreduce_inplace(t, op=comm.ReduceOp.AVG)
check("allreduce_inplace AVG", t, reduce_ref(ins, "avg"), world)
ints = [input_of(r, n, torch.int32) for r in range(world)]
t = ints[rank].clone()
comm.allreduce_inplace(t, op=comm.ReduceOp.BXOR)
g = ints[rank].clone()
dist.all_reduce(g, dist.ReduceOp.BXOR, group=gloo)
check("allreduce_inplace BXOR", t, g, world)

# allgather
out = torch.empty(world * n)
comm.allgather(x, out)
glist = [torch.empty(n) for _ in range(world)]
dist.all_gather(glist, x, group=gloo)
check("allgather", out, torch.cat(glist), world)
buf = torch.zeros(world * n)
buf[rank * n:(rank + 1) * n] = x
comm.allgather_inplace(buf)
check("allgather_inplace", buf, torch.cat(glist), world)

# alltoall and alltoall_v
send = torch.cat([input_of(rank, n, f32, salt=j) for j in range(world)])
out = torch.empty(world * n)
comm.alltoall(send, out)
gout = torch.empty(world * n)
dist.all_to_all_single(gout, send, group=gloo)
check("alltoall", out, gout, world)
t = send.clone()
comm.alltoall_inplace(t)
check("alltoall_inplace", t, gout, world)
counts = [j + 1 for j in range(world)]                  # rank i sends j+1 elements to rank j
send_v = torch.cat([input_of(rank, j + 1, f32, salt=j) for j in range(world)])
displs = [sum(counts[:j]) for j in range(world)]
recv_v = torch.zeros(world * (rank + 1))
comm.alltoall_v(send_v, counts, displs, recv_v, [rank + 1] * world, [i * (rank + 1) for i in range(world)])
check("alltoall_v", recv_v, torch.cat([input_of(i, rank + 1, f32, salt=rank) for i in range(world)]), world)

# broadcast, broadcast_object, barrier
t = x.clone()
comm.broadcast(t, src=world - 1)
check("broadcast", t, ins[world - 1], world)
assert comm.broadcast_object({"from": rank, "list": [1, 2]}, src=0) == {"from": 0, "list": [1, 2]}
comm.barrier()

# gather / scatter / reduce / reduce_scatter, with their _inplace forms
root = world - 1
out = torch.zeros(world * n)
comm.gather(x, out, dst=root)
if rank == root:
    check("gather", out, torch.cat(ins), world)
buf = torch.zeros(world * n)
buf[rank * n:(rank + 1) * n] = x
comm.gather_inplace(buf, n, dst=0)
if rank == 0:
    check("gather_inplace", buf, torch.cat(ins), world)
src_blocks = torch.cat([input_of(0, n, f32, salt=j) for j in range(world)])
out = torch.empty(n)
comm.scatter(src_blocks if rank == 0 else torch.empty(0), out, src=0)
check("scatter", out, input_of(0, n, f32, salt=rank), world)
buf = src_blocks.clone() if rank == 0 else torch.zeros(world * n)
comm.scatter_inplace(buf, n, src=0)
check("scatter_inplace", buf[rank * n:(rank + 1) * n], input_of(0, n, f32, salt=rank), world)
recv = torch.zeros(n)
comm.reduce(x, recv, dst=root, op=comm.ReduceOp.SUM)
g = x.clone()
dist.reduce(g, root, group=gloo)
if rank == root:
    check("reduce", recv, g, world)
t = x.clone()
comm.reduce_inplace(t, dst=0, op=comm.ReduceOp.MIN)
if rank == 0:
    check("reduce_inplace MIN", t, reduce_ref(ins, "min"), world)
blocks = [input_of(r, world * n, f32, salt=5) for r in range(world)]
out = torch.empty(n)
comm.reduce_scatter(blocks[rank], out)
want = reduce_ref(blocks, "sum")[rank * n:(rank + 1) * n]
check("reduce_scatter", out, want, world)
t = blocks[rank].clone()
comm.reduce_scatter_inplace(t)
check("reduce_scatter_inplace", t[rank * n:(rank + 1) * n], want, world)

# send / recv around a ring, non-blocking
right, left = (rank + 1) % world, (rank - 1) % world
got = torch.empty(n)
works = [comm.send(x, right, async_op=True), comm.recv(got, left, async_op=True)]
for w in works:
    w.wait()
check("send/recv", got, ins[left], world)

# A subgroup of the first two ranks and its communicators (every rank makes it).
sub = comm.new_group([0, 1])
c = sub.get_global_communicator()
if rank in (0, 1):
    t = torch.full((4,), float(rank + 1))
    comm.allreduce_inplace(t, comm=c)
    assert torch.equal(t, torch.full((4,), 3.0)), t
    intra, inter = sub.get_intra_node_communicator(), sub.get_inter_node_communicator()
    assert intra.ranks == [0, 1], intra  # one host here
    assert (inter is not None) == (rank == 0) and (inter is None or inter.ranks == [0]), inter
    comm.broadcast(t, src=1, comm=c)
else:
    assert c is None
default = comm.get_default_group()
assert default.get_intra_node_communicator().ranks == list(range(world))
assert socket.gethostname()
work = comm.allreduce_inplace(torch.ones(3), async_op=True)
work.wait()
assert work.is_completed()

# get_local_size where no launcher says it: the ranks on this host among every rank's host
# (Slurm's counts are not read: SLURM_TASKS_PER_NODE and SLURM_NTASKS_PER_NODE are set below).
from chorus.torch_api import communication as impl  # noqa: E402
hosts = ["a", "a", "b", "a", "c"]
slurm = {"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3", "SLURM_NTASKS_PER_NODE": "9"}
assert impl._local_size_of(5, hosts, 0, env=slurm) == 5  # init_process_group's local_world_size
assert impl._local_size_of(-1, hosts, 0, env=dict(slurm, LOCAL_WORLD_SIZE="6")) == 6  # torchrun's
assert impl._local_size_of(-1, hosts, 0, env=dict(slurm, OMPI_COMM_WORLD_LOCAL_SIZE="7")) == 7
assert impl._local_size_of(-1, hosts, 0, env=slurm) == 3  # hosts: "a" thrice
assert impl._local_size_of(-1, hosts, 2, env=slurm) == 1
# The same through init_process_group (again, on the group made above): the ranks on this host
# (all of them here), whatever Slurm's variables say.
for name in ("LOCAL_WORLD_SIZE", "CHORUS_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"):
    os.environ.pop(name, None)
os.environ.update(SLURM_TASKS_PER_NODE=f"{world + 2},1", SLURM_NODEID="0")
comm.init_process_group()
assert comm.get_local_size() == world, comm.get_local_size()
del os.environ["SLURM_TASKS_PER_NODE"], os.environ["SLURM_NODEID"]

dist.barrier()
print(f"rank {rank}: Bagua's API matches torch.distributed")
dist.destroy_process_group()
sys.exit(0)
