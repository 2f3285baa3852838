"""What every algorithm is to the module's engine, and the node hierarchy of Bagua's
``hierarchical`` forms: the members of a host first, then one member per host."""
import functools
import types

from .. import communication
from ..communication import ReduceOp


class Algorithm:
    """A training algorithm's settings; ``reify`` makes its implementation for a process group."""

    def reify(self, process_group):
        raise NotImplementedError(f"{type(self).__name__} does not say how it runs (reify)")


class AlgorithmImpl:
    """The engine's calls: ``attach`` once, when with_bagua made the engine (its buckets made);
    then in a step's order ``before_forward`` (a training forward), ``launch``
    for each bucket of gradients once they are all in (in bucket order; what it returns is handed
    to ``finish``), then at the end of backward ``finish`` for each bucket in order and
    ``after_backward``; ``reset`` where a backward did not finish. Where ``syncs_gradients`` is
    False, buckets are neither launched nor finished and the gradients stay each rank's own (it may
    change between steps, read at with_bagua and during each backward).
    ``averages``: the synchronized gradient is the ranks' mean (False: their sum, which a gradient
    accumulated over several backwards cannot take)."""

    syncs_gradients = True
    averages = True

    def __init__(self, process_group):
        self.process_group = process_group
        self.global_comm = process_group.get_global_communicator()

    def attach(self, engine):
        pass

    def before_forward(self, engine):
        pass

    def launch(self, bucket):
        return None

    def finish(self, bucket, token):
        pass

    def after_backward(self, engine):
        pass

    def reset(self):
        """Forgets the step of a backward that did not finish; returns what collectives still in
        flight may write (the engine keeps it)."""
        return None


def wrap_step(optimizer, around):
    """Makes ``optimizer.step(...)`` run as ``around(step, *args, **kwargs)``, ``step`` being the
    one it had. The wrapper is a bound method of the optimizer, as torch's LR schedulers wrap the
    step again through its ``__func__`` and ``__self__``."""
    step = optimizer.step

    @functools.wraps(step)
    def wrapped(_optimizer, *args, **kwargs):
        return around(step, *args, **kwargs)
    optimizer.step = types.MethodType(wrapped, optimizer)


class Hierarchy:
    """A group's members on this host (``intra``, its first member the host's leader) and the
    hosts' leaders (``inter``: None on a rank that leads no host)."""

    def __init__(self, process_group):
        self.intra = process_group.get_intra_node_communicator()
        self.inter = process_group.get_inter_node_communicator()
        self.total = process_group.get_global_communicator().nranks()

    @property
    def leader(self):
        return self.inter is not None

    def reduce_in_host(self, tensor):
        """Starts the sum of the host's tensors on its leader; None where the host has one rank."""
        if self.intra.nranks() == 1:
            return None
        return communication.reduce_inplace(tensor, 0, ReduceOp.SUM, comm=self.intra, async_op=True)

    def broadcast_in_host(self, tensor):
        if self.intra.nranks() > 1:
            communication.broadcast(tensor, 0, comm=self.intra)
