"""Bagua's training algorithms, chosen by ``module.with_bagua(optimizers, algorithm)``:
``gradient_allreduce.GradientAllReduceAlgorithm``, ``bytegrad.ByteGradAlgorithm`` (gradients
compressed to 8 bits) and ``decentralized.DecentralizedAlgorithm`` (weights averaged with peers).

An ``Algorithm`` holds the user's settings; ``reify(process_group)`` makes its ``AlgorithmImpl``,
whose methods the module's engine (bagua_module.py) calls in a step's order."""
from .base import Algorithm, AlgorithmImpl  # noqa: F401
from . import bytegrad, decentralized, gradient_allreduce  # noqa: F401,E402

__all__ = ["Algorithm", "AlgorithmImpl", "bytegrad", "decentralized", "gradient_allreduce"]
