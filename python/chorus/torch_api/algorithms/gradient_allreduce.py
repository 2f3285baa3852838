"""Bagua's gradient all-reduce: every bucket of gradients summed (or averaged) over all ranks,
as DDP does. ``hierarchical``: summed on each host's leader first, over the leaders next, and
broadcast on each host last (fewer ranks on the links between hosts)."""
from .. import communication
from ..communication import ReduceOp
from .base import Algorithm, AlgorithmImpl, Hierarchy


class GradientAllReduceAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = False, average: bool = True):
        self.hierarchical = hierarchical
        self.average = average

    def reify(self, process_group):
        return GradientAllReduceAlgorithmImpl(process_group, self.hierarchical, self.average)


class GradientAllReduceAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group, hierarchical, average):
        super().__init__(process_group)
        self.hierarchy = Hierarchy(process_group) if hierarchical else None
        self.averages = average

    def launch(self, bucket):
        if self.hierarchy is not None:
            return self.hierarchy.reduce_in_host(bucket.flat)
        op = ReduceOp.AVG if self.averages else ReduceOp.SUM
        return communication.allreduce_inplace(bucket.flat, op, comm=self.global_comm, async_op=True)

    def finish(self, bucket, token):
        if token is not None:
            token.wait()
        h = self.hierarchy
        if h is None:
            return
        if h.leader:
            if h.inter.nranks() > 1:
                communication.allreduce_inplace(bucket.flat, ReduceOp.SUM, comm=h.inter)
            if self.averages:
                bucket.flat.div_(h.total)
        h.broadcast_in_host(bucket.flat)
