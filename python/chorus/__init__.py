"""chorus: collective operations on torch tensors.

``import chorus`` registers torch.distributed's ``"chorus"`` backend::

    import torch.distributed as dist
    import chorus
    dist.init_process_group("chorus")        # env:// (torchrun, chorus-run), tcp://, or a store

Bagua's communication API is ``chorus.torch_api``; elastic membership (shrink after a lost rank,
grow by newcomers) is ``chorus.shrink``, ``chorus.grow``, ``chorus.join``, ``chorus.revoke``. Every chorus failure raises a subclass of
``chorus.Error`` (itself a RuntimeError) named after its kind, e.g. ``chorus.ShapeMismatch``, with
the same message on every rank of the failed op. See docs/python.md.
"""
import atexit as _atexit
import inspect as _inspect

import torch as _torch
import torch.distributed as _dist  # registers c10d's types, which the module's classes build on

from . import _chorus
from ._chorus import Error, ProcessGroupChorus, __version__  # noqa: F401

# Every error kind: chorus.ShapeMismatch, chorus.NodeLost, chorus.Timeout, ...
for _name in dir(_chorus):
    _obj = getattr(_chorus, _name)
    if isinstance(_obj, type) and issubclass(_obj, Error):
        globals()[_name] = _obj


def _check_torch():
    built = _chorus.torch_version.split("+")[0].split(".")[:2]
    running = _torch.__version__.split("+")[0].split(".")[:2]
    if built != running:
        raise ImportError(f"chorus was compiled against torch {_chorus.torch_version}, "
                          f"but torch {_torch.__version__} is running: rebuild chorus")


_check_torch()


def _create(opts, pg_options=None):
    # torch.distributed's extended API hands the group's ranks in the world (empty: the world).
    # A subgroup where the default group has another backend (gloo, NCCL) is a collective of its own.
    ranks = list(opts.global_ranks_in_group)
    own = bool(ranks) and _dist.is_initialized() and _dist.get_backend() != "chorus"
    return _chorus._create_process_group(opts.store, opts.group_rank, opts.group_size, opts.timeout, ranks, own)


from .elastic import _DEVICES, epoch, grow, join, new_group, newcomers, revoke, shrink  # noqa: E402,F401

if not hasattr(_dist.Backend, "CHORUS"):
    # torch 2.x keeps a c10d::Backend per device type, where its register_backend takes devices
    _devices = {"devices": _DEVICES} if "devices" in _inspect.signature(_dist.Backend.register_backend).parameters else {}
    _dist.Backend.register_backend("chorus", _create, extended_api=True, **_devices)

# Before the interpreter goes: this process's node leaves, rank 0's orchestrator waits for the
# others to leave, then closes. Nothing runs until a group is made.
_atexit.register(_chorus._shutdown)
