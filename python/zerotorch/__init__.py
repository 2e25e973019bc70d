"""zerotorch: ZeRO-style sharded training with a C++ engine.

This package is the Python side of the project: ``zerotorch.initialize`` wraps a
``torch.nn.Module`` (Hugging Face models included) in the C++ engine with DeepSpeed's API and
configs, ZeRO stages 0-3 with CPU and NVMe offload; ``zerotorch.zero.Init`` builds a model
partitioned over the ranks and ``zerotorch.zero.GatheredParameters`` reads or changes the full
parameters at stage 3; and
``zerotorch.data`` gives Python scripts the token shards, the length-bucketed distributed sampler
and the dynamic-padding collator that the C++ programs use. The config's
``sequence_parallel_size`` and ``tensor_parallel`` block split a ``transformers`` model
(``zerotorch.model_parallel``): ``split_sequence`` gives a rank its part of a batch and
``causal_lm_loss`` the loss one process computes.
"""

import torch  # noqa: F401  (loads LibTorch before the extension that links it)

from . import _C  # noqa: F401
from . import data, devices, model_parallel, zero
from .accelerator import get_accelerator
from .arguments import add_config_arguments
from .comm import init_distributed, launch_env
from .engine import ZeroEngine, auto_values, initialize, stage3_units
from .model_parallel import causal_lm_loss, split_sequence

__all__ = ["data", "devices", "model_parallel", "zero", "init_distributed", "launch_env",
           "initialize", "auto_values", "stage3_units", "ZeroEngine", "get_accelerator",
           "add_config_arguments", "split_sequence", "causal_lm_loss"]
