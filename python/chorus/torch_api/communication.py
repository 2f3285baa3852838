"""Bagua's communication API on chorus: the same names, argument order and ReduceOp values as
``bagua.torch_api`` (its communication module), over torch.distributed's "chorus" backend.

    from chorus import torch_api as comm
    comm.init_process_group()                      # from torchrun's, chorus-run's, Slurm's or Open MPI's environment
    comm.allreduce(send, recv, op=comm.ReduceOp.AVG)
    group = comm.new_group([0, 1])
    comm.allreduce_inplace(t, comm=group.get_global_communicator())

A communicator is a ``BaguaCommunicator``: a chorus process group and its members' global ranks.
Roots (``src``, ``dst``) are ranks within the communicator. Every op blocks unless given
``async_op=True``, which returns its torch ``Work`` (``wait()``, ``is_completed()``,
``get_future()``). Failures raise ``chorus.Error``'s subclasses.
"""
import datetime
import enum
import os
import pickle
import socket

import torch
import torch.distributed as dist

from .. import _chorus

__all__ = [
    "ReduceOp", "BaguaCommunicator", "BaguaProcessGroup", "init_process_group", "is_initialized", "get_rank",
    "get_world_size", "get_local_rank", "get_local_size", "get_default_group", "new_group", "from_torch_group",
    "allreduce", "allreduce_inplace", "allgather", "allgather_inplace", "alltoall", "alltoall_inplace", "alltoall_v",
    "barrier", "broadcast", "broadcast_object", "gather", "gather_inplace", "reduce", "reduce_inplace",
    "reduce_scatter", "reduce_scatter_inplace", "scatter", "scatter_inplace", "send", "recv",
]


class ReduceOp(enum.IntEnum):
    """Bagua's values (not torch's)."""
    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BOR = 7
    BAND = 8
    BXOR = 9
    AVG = 10


_TORCH_OP = {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT, ReduceOp.MIN: dist.ReduceOp.MIN,
             ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.BOR: dist.ReduceOp.BOR, ReduceOp.BAND: dist.ReduceOp.BAND,
             ReduceOp.BXOR: dist.ReduceOp.BXOR, ReduceOp.AVG: dist.ReduceOp.AVG}


def _op(op):
    try:
        return _TORCH_OP[ReduceOp(op)]
    except ValueError:
        raise ValueError(f"{op!r} is not one of Bagua's ReduceOp values {[int(o) for o in ReduceOp]}") from None


class BaguaCommunicator:
    """A chorus process group and its members' global ranks (rank i of the group is ranks[i])."""

    def __init__(self, pg, ranks):
        self.pg = pg
        self.ranks = list(ranks)

    def rank(self):
        return self.pg.rank()

    def nranks(self):
        return self.pg.size()

    def __repr__(self):
        return f"BaguaCommunicator(ranks={self.ranks})"


class BaguaProcessGroup:
    """Bagua's process group: its global communicator, the communicator of its members on this
    host, and the one of each host's first member (None on the others; None for all three on a
    rank that is not a member). Every rank of the world makes each group (new_group), as
    torch.distributed asks, so all three are made then. ``host_count``: its members' hosts, the
    same on every rank."""

    def __init__(self, ranks, pg=None):
        self.ranks = list(ranks)
        me = dist.get_rank()
        if pg is None:
            pg = _make_group(self.ranks)
        self._global = BaguaCommunicator(pg, self.ranks) if me in self.ranks else None
        self._intra = self._inter = None
        hosts = {}
        for r in self.ranks:
            hosts.setdefault(_hosts[r], []).append(r)
        for members in hosts.values():  # in the order of each host's first member
            g = _make_group(members)
            if me in members:
                self._intra = BaguaCommunicator(g, members)
        self.host_count = len(hosts)
        leaders = [members[0] for members in hosts.values()]
        g = _make_group(leaders)
        if me in leaders:
            self._inter = BaguaCommunicator(g, leaders)

    def get_global_communicator(self):
        return self._global

    def get_intra_node_communicator(self):
        return self._intra

    def get_inter_node_communicator(self):
        return self._inter


_default = None
_hosts = []  # every rank's host name, by global rank


def _make_group(ranks):
    # torch.distributed asks every rank of the world to make every group; a non-member gets a
    # placeholder it must not use.
    return dist.new_group(ranks, backend="chorus")


def _env_int(*names, default=None, env=os.environ):
    for n in names:
        if env.get(n):
            return int(env[n])
    return default


def init_process_group(store=None, rank=-1, world_size=-1, local_world_size=-1, timeout=None):
    """Joins the job named by the environment (torchrun's, chorus-run's, Slurm's or Open MPI's
    variables), or by ``store``, ``rank`` and ``world_size``; chorus is the default group's backend."""
    global _default
    if dist.is_initialized():
        if dist.get_backend() != "chorus":
            raise RuntimeError("torch.distributed is initialized with another backend than chorus")
    else:
        kw = {"timeout": timeout or datetime.timedelta(minutes=30)}
        if store is not None:
            kw.update(store=store, rank=rank, world_size=world_size)
        else:
            # The launcher's numbering as chorus's C++ programs take it (core/launch_env.hpp), where
            # the call does not give both.
            r, n = rank, world_size
            if r < 0 or n <= 0:
                _, env_rank, env_size = _chorus._launch_numbering()
                r = r if r >= 0 else env_rank
                n = n if n > 0 else env_size
            if "MASTER_ADDR" not in os.environ and n == 1:
                os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
                os.environ.setdefault("MASTER_PORT", "0")
            init = "env://"
            if "MASTER_ADDR" not in os.environ:
                # Every rank on this host (srun or mpirun on one machine): the ranks meet in a file
                # named by the launcher's job, as chorus's C++ programs do (docs/launching.md).
                path = _chorus._one_host_store_file()
                if path is None:
                    raise RuntimeError("chorus.torch_api.init_process_group: no MASTER_ADDR and MASTER_PORT in the "
                                       "environment (torchrun and chorus-run set them; under srun or mpirun on "
                                       "several hosts, set them to rank 0's host and a free port)")
                init = "file://" + path
            kw.update(init_method=init, rank=r, world_size=n)
        dist.init_process_group("chorus", **kw)
    global _local_rank, _local_size
    _local_rank = _env_int("LOCAL_RANK", "CHORUS_LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", default=0)
    global _hosts
    _hosts = [None] * dist.get_world_size()
    dist.all_gather_object(_hosts, socket.gethostname())
    _local_size = _local_size_of(local_world_size, _hosts, dist.get_rank())
    _default = BaguaProcessGroup(range(dist.get_world_size()), dist.group.WORLD)


def _local_size_of(asked, hosts, rank, env=os.environ):
    """This rank's host's number of ranks: `asked` (init_process_group's local_world_size), a
    launcher's own count, else the ranks on this host in `hosts` (every rank's host name, exact).
    Slurm's counts are not read: they describe the step's tasks, which are not the ranks where
    an sbatch script starts ranks with a launcher of its own (and SLURM_NTASKS_PER_NODE is set
    only where --ntasks-per-node was given)."""
    if asked > 0:
        return asked
    n = _env_int("LOCAL_WORLD_SIZE", "CHORUS_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", env=env)
    if n is not None:
        return n
    return hosts.count(hosts[rank])


_local_rank = 0
_local_size = 1


def is_initialized():
    return _default is not None and dist.is_initialized()


def _need():
    if not is_initialized():
        raise RuntimeError("chorus.torch_api: call init_process_group() first")


def get_rank():
    _need()
    return dist.get_rank()


def get_world_size():
    _need()
    return dist.get_world_size()


def get_local_rank():
    _need()
    return _local_rank


def get_local_size():
    _need()
    return _local_size


def get_default_group():
    _need()
    return _default


def new_group(ranks=None, stream=None):
    """A process group of these global ranks (every rank of the world calls it, as in Bagua and
    torch.distributed); None: every rank. ``stream`` is taken for Bagua's signature (chorus
    orders GPU work on torch's current stream)."""
    _need()
    ranks = sorted(set(range(get_world_size()) if ranks is None else ranks))
    return BaguaProcessGroup(ranks)


def from_torch_group(group, stream=None):
    """A Bagua process group over a torch.distributed group made with the chorus backend. Every
    rank of the world calls it, as it called new_group (the group's host communicators are made
    then): a rank outside the group passes what new_group gave it, and learns the members from
    the others."""
    _need()
    group = dist.group.WORLD if group is None else group  # as torch reads None
    member = group is not dist.GroupMember.NON_GROUP_MEMBER
    mine = None
    if member:
        if dist.get_backend(group) != "chorus":
            raise ValueError(f"from_torch_group: the group's backend is {dist.get_backend(group)}, not chorus")
        mine = list(range(get_world_size())) if group is dist.group.WORLD else dist.get_process_group_ranks(group) \
            if hasattr(dist, "get_process_group_ranks") else sorted(dist.distributed_c10d._pg_group_ranks[group])
    told = [None] * get_world_size()
    dist.all_gather_object(told, mine)
    ranks = next((r for r in told if r is not None), None)
    if ranks is None:
        raise ValueError("from_torch_group: no rank is a member of the group")
    if any(r is not None and r != ranks for r in told):
        raise ValueError(f"from_torch_group: the ranks passed different groups ({sorted({tuple(r) for r in told if r})})")
    return BaguaProcessGroup(ranks, group if member else dist.GroupMember.NON_GROUP_MEMBER)


def _comm(comm):
    _need()
    c = comm if comm is not None else _default.get_global_communicator()
    if not isinstance(c, BaguaCommunicator):
        raise TypeError(f"comm must be a BaguaCommunicator (from a BaguaProcessGroup), not {type(c).__name__}")
    return c


def _done(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def _root(c, r, what):
    if not 0 <= r < c.nranks():
        raise ValueError(f"{what} {r} is not a rank of the communicator ({c.nranks()} ranks)")
    return r


# Every op below runs on the communicator's process group directly, with its own ranks as roots.

def allreduce(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None, async_op=False):
    c = _comm(comm)
    if recv_tensor.data_ptr() != send_tensor.data_ptr():
        recv_tensor.copy_(send_tensor)
    return allreduce_inplace(recv_tensor, op, comm=c, async_op=async_op)


def allreduce_inplace(tensor, op=ReduceOp.SUM, comm=None, async_op=False):
    c = _comm(comm)
    opts = dist.AllreduceOptions()
    opts.reduceOp = _op(op)
    return _done(c.pg.allreduce([tensor], opts), async_op)


def allgather(send_tensor, recv_tensor, comm=None, async_op=False):
    """recv_tensor holds nranks blocks of send_tensor's size, block i from rank i."""
    c = _comm(comm)
    return _done(c.pg._allgather_base(recv_tensor, send_tensor), async_op)


def allgather_inplace(tensor, comm=None, async_op=False):
    """tensor holds nranks blocks; this rank's block is its input."""
    c = _comm(comm)
    n = tensor.numel() // c.nranks()
    mine = tensor.view(-1).narrow(0, c.rank() * n, n).clone()
    return _done(c.pg._allgather_base(tensor, mine), async_op)


def alltoall(send_tensor, recv_tensor, comm=None, async_op=False):
    c = _comm(comm)
    return _done(c.pg.alltoall_base(recv_tensor, send_tensor, [], [], dist.AllToAllOptions()), async_op)


def alltoall_inplace(tensor, comm=None, async_op=False):
    c = _comm(comm)
    send = tensor.clone()
    return _done(c.pg.alltoall_base(tensor, send, [], [], dist.AllToAllOptions()), async_op)


def alltoall_v(send_tensor, send_counts, send_displs, recv_tensor, recv_counts, recv_displs, comm=None,
               async_op=False):
    """Counts and displacements in elements of the flat tensors, one per rank."""
    c = _comm(comm)
    n = c.nranks()
    if not all(len(x) == n for x in (send_counts, send_displs, recv_counts, recv_displs)):
        raise ValueError(f"alltoall_v: counts and displacements need {n} entries each")
    flat_s, flat_r = send_tensor.view(-1), recv_tensor.view(-1)
    ins = [flat_s.narrow(0, d, k) for d, k in zip(send_displs, send_counts)]
    outs = [flat_r.narrow(0, d, k) for d, k in zip(recv_displs, recv_counts)]
    return _done(c.pg.alltoall(outs, ins, dist.AllToAllOptions()), async_op)


def barrier(comm=None, async_op=False):
    c = _comm(comm)
    return _done(c.pg.barrier(), async_op)


def broadcast(tensor, src=0, comm=None, async_op=False):
    c = _comm(comm)
    opts = dist.BroadcastOptions()
    opts.rootRank = _root(c, src, "src")
    return _done(c.pg.broadcast([tensor], opts), async_op)


def broadcast_object(obj, src=0, comm=None):
    """src's object on every rank (pickled)."""
    c = _comm(comm)
    _root(c, src, "src")
    size = torch.zeros(1, dtype=torch.int64)
    payload = None
    if c.rank() == src:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size[0] = payload.numel()
    broadcast(size, src, comm=c)
    if payload is None:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    broadcast(payload, src, comm=c)
    return pickle.loads(payload.numpy().tobytes())


def gather(send_tensor, recv_tensor, dst, comm=None, async_op=False):
    """recv_tensor (on dst) holds nranks blocks of send_tensor's size."""
    c = _comm(comm)
    opts = dist.GatherOptions()
    opts.rootRank = _root(c, dst, "dst")
    n = send_tensor.numel()
    outs = [[recv_tensor.view(-1).narrow(0, i * n, n) for i in range(c.nranks())]] if c.rank() == dst else []
    return _done(c.pg.gather(outs, [send_tensor.view(-1)], opts), async_op)


def gather_inplace(tensor, count, dst, comm=None, async_op=False):
    """tensor holds nranks blocks of `count` elements; each rank sends its own block to dst's."""
    c = _comm(comm)
    mine = tensor.view(-1).narrow(0, c.rank() * count, count).clone()
    opts = dist.GatherOptions()
    opts.rootRank = _root(c, dst, "dst")
    outs = [[tensor.view(-1).narrow(0, i * count, count) for i in range(c.nranks())]] if c.rank() == dst else []
    return _done(c.pg.gather(outs, [mine], opts), async_op)


def reduce(send_tensor, recv_tensor, dst, op=ReduceOp.SUM, comm=None, async_op=False):
    c = _comm(comm)
    if recv_tensor.data_ptr() != send_tensor.data_ptr():
        recv_tensor.copy_(send_tensor)
    return reduce_inplace(recv_tensor, dst, op, comm=c, async_op=async_op)


def reduce_inplace(tensor, dst, op=ReduceOp.SUM, comm=None, async_op=False):
    c = _comm(comm)
    opts = dist.ReduceOptions()
    opts.reduceOp = _op(op)
    opts.rootRank = _root(c, dst, "dst")
    return _done(c.pg.reduce([tensor], opts), async_op)


def reduce_scatter(send_tensor, recv_tensor, op=ReduceOp.SUM, comm=None, async_op=False):
    """send_tensor holds nranks blocks of recv_tensor's size; rank i gets block i reduced."""
    c = _comm(comm)
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = _op(op)
    return _done(c.pg._reduce_scatter_base(recv_tensor, send_tensor, opts), async_op)


def reduce_scatter_inplace(tensor, op=ReduceOp.SUM, comm=None, async_op=False):
    """tensor holds nranks blocks; this rank's block becomes the reduction of everyone's."""
    c = _comm(comm)
    n = tensor.numel() // c.nranks()
    send = tensor.clone()
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = _op(op)
    return _done(c.pg._reduce_scatter_base(tensor.view(-1).narrow(0, c.rank() * n, n), send, opts), async_op)


def scatter(send_tensor, recv_tensor, src, comm=None, async_op=False):
    """send_tensor (on src) holds nranks blocks of recv_tensor's size; rank i gets block i."""
    c = _comm(comm)
    opts = dist.ScatterOptions()
    opts.rootRank = _root(c, src, "src")
    n = recv_tensor.numel()
    ins = [[send_tensor.view(-1).narrow(0, i * n, n) for i in range(c.nranks())]] if c.rank() == src else []
    return _done(c.pg.scatter([recv_tensor.view(-1)], ins, opts), async_op)


def scatter_inplace(tensor, count, src, comm=None, async_op=False):
    """tensor holds nranks blocks of `count` elements; each rank's block comes from src's."""
    c = _comm(comm)
    opts = dist.ScatterOptions()
    opts.rootRank = _root(c, src, "src")
    ins = [[tensor.view(-1).narrow(0, i * count, count).clone() for i in range(c.nranks())]] if c.rank() == src else []
    return _done(c.pg.scatter([tensor.view(-1).narrow(0, c.rank() * count, count)], ins, opts), async_op)


def send(tensor, dst, comm=None, async_op=False):
    c = _comm(comm)
    return _done(c.pg.send([tensor], _root(c, dst, "dst"), 0), async_op)


def recv(tensor, src, comm=None, async_op=False):
    c = _comm(comm)
    return _done(c.pg.recv([tensor], _root(c, src, "src"), 0), async_op)
