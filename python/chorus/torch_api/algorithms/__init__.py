"""Bagua's training algorithms, chosen by ``module.with_bagua(optimizers, algorithm)``:
``gradient_allreduce.GradientAllReduceAlgorithm``, ``bytegrad.ByteGradAlgorithm`` (gradients
compressed to 8 bits), ``decentralized.DecentralizedAlgorithm`` (weights averaged with peers),
``decentralized.LowPrecisionDecentralizedAlgorithm`` (8-bit differences with ring neighbours),
``q_adam.QAdamAlgorithm`` with its ``q_adam.QAdamOptimizer`` (Adam's momentum exchanged in 8 bits
after a warm-up) and ``async_model_average.AsyncModelAverageAlgorithm`` (weights averaged by a
background thread while training goes on).

An ``Algorithm`` holds the user's settings; ``reify(process_group)`` makes its ``AlgorithmImpl``,
whose methods the module's engine (bagua_module.py) calls in a step's order."""
from .base import Algorithm, AlgorithmImpl  # noqa: F401
from . import async_model_average, bytegrad, decentralized, gradient_allreduce, q_adam  # noqa: F401,E402

__all__ = ["Algorithm", "AlgorithmImpl", "async_model_average", "bytegrad", "decentralized", "gradient_allreduce",
           "q_adam"]
