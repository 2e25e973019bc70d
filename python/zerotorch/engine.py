"""DeepSpeed's engine API over the C++ engine, for a Python ``torch.nn.Module``."""

import json
import os
import tempfile

import torch

from . import _C


def _first_tensor(out):
    """The tensor a forward's output is judged by (whether a backward follows): the output
    itself, a Hugging Face output's loss or logits, or the first tensor in a tuple/dict."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("loss", "logits"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
    return torch.zeros(())


class ZeroEngine:
    """What ``zerotorch.initialize`` returns first: call it as the model, then ``backward(loss)``
    and ``step()`` every micro-step, as with DeepSpeed's engine. The parameters of ``module`` are
    the engine's (sharded, cast and stepped in place): ``engine.module`` is the model."""

    def __init__(self, module, config_path, overrides=(), hidden_size=None):
        self.module = module
        self._engine = _C.Engine(module, os.fspath(config_path), list(overrides), hidden_size)

    def __call__(self, *args, **kwargs):
        box = []

        def run():
            box.append(self.module(*args, **kwargs))
            return _first_tensor(box[0])

        self._engine.forward(run)
        return box[0]

    forward = __call__

    def backward(self, loss):
        """``loss.backward()`` scaled by 1 / gradient_accumulation_steps (and the fp16 loss
        scale), then this micro-step's gradient reduction."""
        self._engine.backward(loss)

    def step(self):
        """Steps the optimizer on the accumulation boundary only; call after every backward."""
        self._engine.step()

    def zero_grad(self):
        self._engine.zero_grad()

    def train(self, mode=True):
        self.module.train(mode)
        self._engine.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def get_lr(self):
        """The learning rate of every parameter group, as DeepSpeed's list."""
        return [self._engine.get_lr()]

    def is_gradient_accumulation_boundary(self):
        return self._engine.is_gradient_accumulation_boundary()

    @property
    def global_steps(self):
        return self._engine.global_step

    @property
    def micro_steps(self):
        return self._engine.micro_steps

    @property
    def skipped_steps(self):
        return self._engine.skipped_steps

    def get_global_grad_norm(self):
        return self._engine.last_grad_norm

    def gradient_accumulation_steps(self):
        return self._engine.gradient_accumulation_steps

    def train_micro_batch_size_per_gpu(self):
        return self._engine.train_micro_batch_size_per_gpu

    @property
    def global_rank(self):
        return self._engine.rank

    @property
    def world_size(self):
        return self._engine.world_size

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        """Every rank calls it; the tag defaults to ``global_step<N>``, DeepSpeed's. The
        checkpoint is zerotorch's format, which the C++ programs load too."""
        tag = tag if tag is not None else f"global_step{self.global_steps}"
        state = {str(k): json.dumps(v) for k, v in (client_state or {}).items()}
        self._engine.save_checkpoint(os.fspath(save_dir), str(tag), state)

    def load_checkpoint(self, load_dir, tag=None):
        """Returns (load_dir, client_state), as DeepSpeed's returns (path, client_state)."""
        state = self._engine.load_checkpoint(os.fspath(load_dir), "" if tag is None else str(tag))
        return os.fspath(load_dir), {k: json.loads(v) for k, v in state.items()}


def initialize(model, config, model_parameters=None, overrides=()):
    """``engine, optimizer, training_dataloader, lr_scheduler``, as ``deepspeed.initialize``.

    ``config`` is a path (JSON, hjson-lenient, or YAML, read as the C++ programs read it) or a
    dict. The optimizer and scheduler are the config's; they live inside the engine, so the
    second and fourth values are None, and so is the loader (use ``zerotorch.data``).
    ``model_parameters``, when given, must be the model's trainable parameters (those with
    requires_grad; the config's ``freeze`` globs freeze more): the engine trains exactly those,
    with the weight decay and learning rates of the config's ``optimizer`` and
    ``parameter_groups`` blocks, so parameter groups given here (dicts) are refused rather than
    ignored. "auto" bucket sizes resolve from ``model.config.hidden_size`` as the Hugging Face
    Trainer does.
    """
    if model_parameters is not None:
        given = list(model_parameters)
        if any(isinstance(p, dict) for p in given):
            raise ValueError(
                "zerotorch.initialize: model_parameters as parameter groups (dicts) are not "
                "supported; set weight decay and learning rates in the config's optimizer and "
                "parameter_groups blocks")
        if {id(p) for p in given} != {id(p) for p in model.parameters() if p.requires_grad}:
            raise ValueError(
                "zerotorch.initialize: model_parameters must be the model's trainable "
                "parameters; freeze the others with requires_grad=False or the config's freeze "
                "globs")
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    # DeepSpeed builds the config's optimizer over model_parameters (model.parameters() when
    # none are given): one group, so every parameter decays. The C++ programs' default grouping
    # (parameter_groups.no_decay: biases and norms, as the Hugging Face Trainer groups them) is
    # kept only when the config names it.
    if isinstance(config, dict):
        text = json.dumps(config)
    else:
        with open(config) as f:
            text = f.read()
    overrides = list(overrides)
    if "parameter_groups" not in text:
        overrides.insert(0, "parameter_groups.no_decay=[]")
    if isinstance(config, dict):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(config, f)
            path = f.name
        try:
            engine = ZeroEngine(model, path, overrides, hidden)
        finally:
            os.unlink(path)
    else:
        engine = ZeroEngine(model, config, overrides, hidden)
    return engine, None, None, None
