"""Bagua's torch API on chorus, with Bagua's names: its communication functions (communication.py)
and its way to train, ``model.with_bagua(optimizers, algorithm)`` (bagua_module.py), with Bagua's
gradient all-reduce, ByteGrad, decentralized (full and low precision), QAdam and asynchronous
model-average algorithms (algorithms/).

    from chorus import torch_api as bagua
    from chorus.torch_api.algorithms import gradient_allreduce
    bagua.init_process_group()
    model = model.with_bagua([optimizer], gradient_allreduce.GradientAllReduceAlgorithm())

As Bagua does, importing it gives every ``torch.nn.Module`` a ``with_bagua`` method.
"""
import torch

from . import algorithms  # noqa: F401
from .bagua_module import with_bagua
from .communication import *  # noqa: F401,F403
from .communication import __all__ as _communication

__all__ = list(_communication) + ["with_bagua", "algorithms"]

torch.nn.Module.with_bagua = with_bagua
