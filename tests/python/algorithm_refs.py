"""What the suites of Bagua's algorithms (test_algorithms.py, test_algorithms_more.py) share:
every rank's tensors gathered over gloo, ByteGrad's compressed all-reduce as every rank computes
it, and two fake "hosts" of ranks {0, 1} and {2, 3}."""
import torch
import torch.distributed as dist

from chorus import torch_api as bagua
from chorus.torch_api import communication
from chorus.torch_api.algorithms import bytegrad


def gathered(t, group):
    """Every rank's `t`, over `group` (gloo)."""
    if t.dtype == torch.bfloat16:  # gloo 1.13 has no bfloat16: as float32, both ways exact
        return [o.to(torch.bfloat16) for o in gathered(t.float(), group)]
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous(), group=group)
    return out


def fake_hosts():
    communication._hosts = ["a", "a", "b", "b"]
    return bagua.new_group()


def bytegrad_reference(vectors, divisor):
    """ByteGrad's compressed all-reduce of the ranks' vectors: each rank's chunks compressed,
    summed, divided, and compressed again."""
    n, numel = len(vectors), vectors[0].numel()
    chunk = -(-numel // n)
    padded = []
    for v in vectors:
        z = torch.zeros(chunk * n)
        z[:numel] = v
        padded.append(z.view(n, chunk))
    out = []
    for i in range(n):
        s = bytegrad.decompress(bytegrad.compress(padded[0][i]))
        for j in range(1, n):
            s += bytegrad.decompress(bytegrad.compress(padded[j][i]))
        if divisor != 1:
            s /= divisor
        out.append(bytegrad.decompress(bytegrad.compress(s)))
    return torch.cat(out)[:numel]
