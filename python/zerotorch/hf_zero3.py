"""transformers' ZeRO-3 model loading on ``zerotorch.zero``, for ``zerotorch.hf``.

Under DeepSpeed a ``TrainingArguments(deepspeed=...)`` whose config is at ZeRO stage 3, made
before the model, makes ``from_pretrained`` (and ``from_config``) build the model partitioned:
``transformers.integrations.is_deepspeed_zero3_enabled()`` reads true, the model is constructed
inside ``deepspeed.zero.Init``, rank 0 alone reads the checkpoint, and each module's weights
reach the parts through ``deepspeed.zero.GatheredParameters(params, modifier_rank=0)``. No rank
ever holds the whole model, which is what lets a model larger than one rank's memory be loaded.

``enable(args, config)`` does the same for zerotorch: transformers' own switch
(``set_hf_deepspeed_config``, a weak reference that ``args`` keeps alive, as its
``hf_deepspeed_config`` does under DeepSpeed) is set, and while transformers' loading and
embedding-resizing entry points run, the name ``deepspeed`` (with ``deepspeed.zero``,
``deepspeed.comm``, ``deepspeed.accelerator``) that their code imports stands for zerotorch's
``zero.Init``, ``zero.GatheredParameters``, ``comm.get_rank`` and ``get_accelerator``. Outside
those calls the name is whatever it was (an installed DeepSpeed stays importable as itself).
``zerotorch.initialize`` then takes the parts unit by unit (``zerotorch.zero``).
"""

import contextlib
import functools
import sys
import types

import torch
import transformers
from transformers.integrations import deepspeed as hf_deepspeed

from . import accelerator, comm, zero


class ZeroThreeConfig:
    """What transformers reads from its DeepSpeed config object: the config, and whether it is
    at stage 3."""

    def __init__(self, config):
        self.config = config

    def is_zero3(self):
        return (self.config.get("zero_optimization") or {}).get("stage") == 3


def _facade():
    ds = types.ModuleType("deepspeed")
    ds.__doc__ = "zerotorch's stand-in for the DeepSpeed names transformers' ZeRO-3 loading uses"
    ds.zero, ds.comm, ds.accelerator = zero, comm, accelerator
    ds.__version__ = "0.0+zerotorch"
    # transformers' prevent_arange_dtype_change swaps DeepSpeed's wrapper of tensor
    # constructors around zero.Init (which here wraps none) and puts it back after.
    pp = types.ModuleType("deepspeed.runtime.zero.partition_parameters")
    pp.zero_wrapper_for_fp_tensor_constructor = lambda fn, *args, **kwargs: fn
    pp._orig_torch_arange = torch.arange
    pp.get_accelerator = accelerator.get_accelerator
    runtime_zero = types.ModuleType("deepspeed.runtime.zero")
    runtime_zero.partition_parameters = pp
    runtime = types.ModuleType("deepspeed.runtime")
    runtime.zero = runtime_zero
    ds.runtime = runtime
    return {"deepspeed": ds, "deepspeed.zero": zero, "deepspeed.comm": comm,
            "deepspeed.accelerator": accelerator, "deepspeed.runtime": runtime,
            "deepspeed.runtime.zero": runtime_zero,
            "deepspeed.runtime.zero.partition_parameters": pp}


_FACADE = _facade()


@contextlib.contextmanager
def deepspeed_names():
    """Inside: ``import deepspeed`` finds zerotorch's stand-in, when zerotorch's ZeRO-3 loading
    is on; nothing changes otherwise."""
    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    on = ref is not None and isinstance(ref(), ZeroThreeConfig) and ref().is_zero3()
    if not on:
        yield
        return
    saved = {name: sys.modules.get(name) for name in _FACADE}
    sys.modules.update(_FACADE)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _scoped(function, is_classmethod):
    raw = function.__func__ if is_classmethod else function

    @functools.wraps(raw)
    def wrapper(*args, **kwargs):
        with deepspeed_names():
            return raw(*args, **kwargs)
    wrapper._zt_scoped = True
    return classmethod(wrapper) if is_classmethod else wrapper


def _install():
    cls = transformers.PreTrainedModel
    for name, is_classmethod in (("from_pretrained", True), ("_from_config", True),
                                 ("resize_token_embeddings", False)):
        function = cls.__dict__[name]
        raw = function.__func__ if is_classmethod else function
        if not getattr(raw, "_zt_scoped", False):
            setattr(cls, name, _scoped(function, is_classmethod))


_install()


def enable(args, config):
    """``args`` (TrainingArguments) took ``config`` (a dict): at stage 3, transformers' ZeRO-3
    loading builds the models made after it partitioned, over zerotorch.zero; below, whole."""
    # As each TrainingArguments with a DeepSpeed config sets transformers' switch, so that the
    # latest one's stage decides.
    holder = ZeroThreeConfig(config)
    args.zerotorch_zero3 = holder
    hf_deepspeed.set_hf_deepspeed_config(holder)
    if holder.is_zero3():
        # transformers reads the rank from torch.distributed while it loads (rank 0 reads the
        # checkpoint); a script run without a launcher is a job of one.
        comm.init_distributed()
