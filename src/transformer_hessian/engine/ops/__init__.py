"""The rules of the engine's operations, one module per kind; importing this package fills
:data:`..contract.RULES`."""

from . import activations, attention, elementwise, linear, losses, norms, pooling, shape, tiles  # noqa: F401
