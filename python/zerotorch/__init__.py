"""zerotorch: ZeRO-style sharded training with a C++ engine.

This package is the Python side of the project: ``zerotorch.initialize`` wraps a
``torch.nn.Module`` in the C++ engine with DeepSpeed's API (ZeRO stages 0-2 today), and
``zerotorch.data`` gives Python scripts the token shards, the length-bucketed distributed sampler
and the dynamic-padding collator that the C++ programs use.
"""

import torch  # noqa: F401  (loads LibTorch before the extension that links it)

from . import _C  # noqa: F401
from . import data
from .engine import ZeroEngine, initialize

__all__ = ["data", "initialize", "ZeroEngine"]
