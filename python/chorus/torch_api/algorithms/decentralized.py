"""Bagua's decentralized SGD: gradients stay each rank's own, and the weights are averaged with
peers instead. At a training forward, each rank sends out a copy of its weights; at the end of
backward, it waits for its peers' and takes their average, and the optimizer's step then applies
this rank's gradient to it (w <- mean of the peers' w - lr * own gradient).

``peer_selection_mode``: ``"all"``, the average of every rank's weights; ``"shift_one"``, each
rank pairs with one other, a new one each time (rank i of the first half with rank n/2 + (i + t)
mod n/2 of the second at the t-th exchange: Bagua's schedule; an even number of ranks).
``communication_interval``: weights are exchanged at every k-th training forward (the others
train alone). ``hierarchical`` (Bagua's default): a host's ranks average their weights together
first, the hosts' leaders exchange between hosts, and each leader's result is broadcast on its
host."""
import torch

from .. import communication
from ..communication import ReduceOp
from .base import Algorithm, AlgorithmImpl, Hierarchy

MODES = ("all", "shift_one")


def shift_one_peer(rank, nranks, step):
    """The rank that ``rank`` exchanges with at the ``step``-th exchange (pairs, both ways)."""
    half = nranks // 2
    if rank < half:
        return (step + rank) % half + half
    return (rank - half - step) % half


class DecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, peer_selection_mode: str = "all", communication_interval: int = 1):
        if peer_selection_mode not in MODES:
            raise ValueError(f"DecentralizedAlgorithm: peer_selection_mode must be one of {MODES}, "
                             f"not {peer_selection_mode!r}")
        if communication_interval < 1:
            raise ValueError(f"DecentralizedAlgorithm: communication_interval must be at least 1, "
                             f"not {communication_interval}")
        self.hierarchical = hierarchical
        self.peer_selection_mode = peer_selection_mode
        self.communication_interval = communication_interval

    def reify(self, process_group):
        return DecentralizedAlgorithmImpl(process_group, self.hierarchical, self.peer_selection_mode,
                                          self.communication_interval)


class DecentralizedAlgorithmImpl(AlgorithmImpl):
    syncs_gradients = False

    def __init__(self, process_group, hierarchical, mode, interval):
        super().__init__(process_group)
        self.hierarchy = Hierarchy(process_group) if hierarchical else None
        # The ranks that exchange: the hosts' leaders, or everyone (None on a rank that leads no host).
        self.peers = self.hierarchy.inter if hierarchical else self.global_comm
        self.mode, self.interval = mode, interval
        # Counted alike on every rank (not only on the ranks that exchange), so that every rank says so.
        exchanging = process_group.host_count if hierarchical else self.global_comm.nranks()
        if mode == "shift_one" and exchanging % 2:
            raise ValueError(f"DecentralizedAlgorithm: shift_one pairs ranks, and {exchanging} "
                             f"{'hosts' if hierarchical else 'ranks'} exchange")
        self.forwards = 0
        self.pending = None  # (weights by bucket, their partners' or None, the works to wait)

    def before_forward(self, engine):
        if self.pending is not None:  # the exchange of an earlier forward, not backed yet
            return
        t = self.forwards
        self.forwards += 1
        if t % self.interval:
            return
        weights = [torch.cat([p.detach().reshape(-1) for p in b.params]) for b in engine.buckets]
        h = self.hierarchy
        if h is not None and h.intra.nranks() > 1:
            for w in weights:
                communication.allreduce_inplace(w, ReduceOp.AVG, comm=h.intra)
        theirs, works = None, []
        if self.peers is not None and self.peers.nranks() > 1:
            if self.mode == "all":
                works = [communication.allreduce_inplace(w, ReduceOp.AVG, comm=self.peers, async_op=True)
                         for w in weights]
            else:
                peer = shift_one_peer(self.peers.rank(), self.peers.nranks(), t // self.interval)
                theirs = [torch.empty_like(w) for w in weights]
                for w, other in zip(weights, theirs):
                    works.append(communication.send(w, peer, comm=self.peers, async_op=True))
                    works.append(communication.recv(other, peer, comm=self.peers, async_op=True))
        self.pending = (weights, theirs, works)

    def reset(self):
        pending, self.pending = self.pending, None
        return pending

    def after_backward(self, engine):
        if self.pending is None:
            return
        weights, theirs, works = self.pending
        self.pending = None
        for w in works:
            w.wait()
        if theirs is not None:
            for w, other in zip(weights, theirs):
                w.add_(other).div_(2)
        if self.hierarchy is not None:
            for w in weights:
                self.hierarchy.broadcast_in_host(w)
        with torch.no_grad():
            for b, w in zip(engine.buckets, weights):
                off = 0
                for p in b.params:
                    p.copy_(w.narrow(0, off, p.numel()).view_as(p))
                    off += p.numel()
