"""Bagua's ByteGrad: gradients cross the network as 8-bit integers. Each rank splits a bucket
into one chunk per rank and compresses each chunk (its min and max, and every value as the
nearest of 256 steps between them: MinMax-UInt8); an all-to-all gives rank i everyone's chunk i,
which it decompresses, sums (averages), and compresses again; an all-gather gives everyone every
reduced chunk, decompressed alike on every rank, so the replicas stay identical. A quarter of
float32's bytes cross, at the cost of a quantization error of up to (max - min) / 510 per value
and step. ``hierarchical`` (Bagua's default): summed in full precision on each host's leader
first, compressed between the leaders only, broadcast on each host last."""
import torch

from .. import communication
from .base import Algorithm, AlgorithmImpl, Hierarchy

HEADER = 8  # a chunk's min and max, as float32, ahead of its bytes


def compress(x):
    """A float32 vector as its min, max and one byte per value."""
    lo, hi = x.min(), x.max()
    span = hi - lo
    if span > 0:
        # Divided first: 255 / span overflows where the span is tiny.
        q = ((x - lo) / span * 255).round_().clamp_(0, 255).to(torch.uint8)
    else:
        q = torch.zeros(x.numel(), dtype=torch.uint8, device=x.device)
    return torch.cat([torch.stack([lo, hi]).to(torch.float32).view(torch.uint8), q])


def decompress(b):
    lo, hi = b[:HEADER].clone().view(torch.float32)
    return lo + b[HEADER:].to(torch.float32) * ((hi - lo) / 255.0)


class Exchange:
    """One compressed all-reduce between the ranks of ``comm``: ``start`` sends the chunks
    (all-to-all, not waited), ``finish`` reduces this rank's chunk, shares it and writes the
    result into the tensor."""

    def __init__(self, tensor, comm, divisor):
        self.tensor, self.comm, self.divisor = tensor, comm, divisor
        n = comm.nranks()
        self.chunk = -(-tensor.numel() // n)
        padded = torch.zeros(self.chunk * n, dtype=torch.float32, device=tensor.device)
        padded[:tensor.numel()] = tensor
        self.send = torch.stack([compress(c) for c in padded.view(n, self.chunk)])
        self.recv = torch.empty_like(self.send)
        self.work = communication.alltoall(self.send, self.recv, comm=comm, async_op=True)

    def finish(self):
        self.work.wait()
        mine = decompress(self.recv[0])
        for row in self.recv[1:]:
            mine += decompress(row)
        if self.divisor != 1:
            mine /= self.divisor
        everyone = torch.empty_like(self.send)
        communication.allgather(compress(mine), everyone, comm=self.comm)
        whole = torch.cat([decompress(row) for row in everyone])
        self.tensor.copy_(whole[:self.tensor.numel()])


def compressed_allreduce(tensor, comm, divisor):
    """The whole exchange, waited; the tensor divided alone where ``comm`` has one rank."""
    if comm.nranks() == 1:
        if divisor != 1:
            tensor.div_(divisor)
        return
    Exchange(tensor, comm, divisor).finish()


class ByteGradAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, average: bool = True):
        self.hierarchical = hierarchical
        self.average = average

    def reify(self, process_group):
        return ByteGradAlgorithmImpl(process_group, self.hierarchical, self.average)


class CompressedAllReduce:
    """ByteGrad's exchange of one float tensor between the ranks of a process group, in place:
    ``start`` begins it (what it returns is handed to ``finish``), ``finish`` completes it. Flat
    (every rank compresses) or ``hierarchical`` (summed in full precision on each host's leader,
    compressed between the leaders, broadcast on each host). The result is the sum over
    ``divisor``, alike on every rank. QAdam exchanges its momentum this way too."""

    def __init__(self, process_group, hierarchical, divisor):
        self.global_comm = process_group.get_global_communicator()
        self.hierarchy = Hierarchy(process_group) if hierarchical else None
        self.divisor = divisor

    def start(self, tensor):
        if not tensor.is_floating_point():
            raise TypeError(f"ByteGrad compresses floating-point tensors, not {tensor.dtype}")
        if self.hierarchy is not None:
            return self.hierarchy.reduce_in_host(tensor)
        if self.global_comm.nranks() == 1:
            return None
        return Exchange(tensor, self.global_comm, self.divisor)

    def finish(self, tensor, token):
        h = self.hierarchy
        if h is None:
            if token is None:
                compressed_allreduce(tensor, self.global_comm, self.divisor)
            else:
                token.finish()
            return
        if token is not None:
            token.wait()
        if h.leader:
            compressed_allreduce(tensor, h.inter, self.divisor)
        h.broadcast_in_host(tensor)


class ByteGradAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group, hierarchical, average):
        super().__init__(process_group)
        self.reducer = CompressedAllReduce(process_group, hierarchical,
                                           self.global_comm.nranks() if average else 1)
        self.averages = average

    def launch(self, bucket):
        return self.reducer.start(bucket.flat)

    def finish(self, bucket, token):
        self.reducer.finish(bucket.flat, token)
