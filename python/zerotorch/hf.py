"""``zerotorch.hf``: Hugging Face ``Trainer`` scripts on the C++ engine, with their imports
changed and nothing else::

    from zerotorch.hf import Trainer, TrainingArguments   # was: from transformers import ...

    args = TrainingArguments(output_dir="out", deepspeed="ds_config.json", ...)
    Trainer(model=model, args=args, train_dataset=data).train()

Importing this module makes ``transformers.TrainingArguments`` (and every subclass a script
defines, ``Seq2SeqTrainingArguments`` included) hand its ``deepspeed`` config (a path or a dict,
``--deepspeed`` on a script's command line) to zerotorch instead of DeepSpeed: the field reads
None afterwards, so neither transformers nor accelerate imports DeepSpeed (which need not be
installed), and the config is kept as ``args.zerotorch_config``. The ranks then join the job's
process group (``zerotorch.init_distributed``), which accelerate uses as it is.

``Trainer`` and ``Seq2SeqTrainer`` are transformers' classes with ``ZeroTrainerMixin`` in front;
``trainer_class(cls)`` makes the same of any Trainer subclass (a project's own; one that
overrides the methods below does so at its own risk)::

    MyTrainer = zerotorch.hf.trainer_class(MyTrainer)

What the mixin changes is what accelerate's DeepSpeed path changes in the Trainer, with
``zerotorch.initialize`` in place of ``deepspeed.initialize``: the model is wrapped by the engine
(the config's ZeRO stage, offload, precision; its "auto" values filled from the
``TrainingArguments`` as the Trainer fills them, its optimizer and scheduler the config's or
the Trainer's AdamW and schedule); each micro-batch's loss goes to ``engine.backward(loss,
scale_wrt_gas=False)`` and ``engine.step()`` (the Trainer has already divided it over the
accumulation window), the optimizer and scheduler the Trainer sees are the engine's, checkpoints
are the engine's (``checkpoint-N/global_stepN``, resumed by ``resume_from_checkpoint``), and
``save_model`` writes a ``from_pretrained`` directory (at stage 3 through
``stage3_gather_16bit_weights_on_model_save``, else the engine's checkpoint, as with DeepSpeed).
Evaluation and prediction run the model with the engine's stage-3 gathers. ``torch_compile``
compiles the model in place (``zerotorch.initialize`` calls ``engine.compile`` with the
Trainer's backend and mode), as accelerate compiles DeepSpeed's engine.

A script written for transformers 4 may pass ``tokenizer=``: it is taken as
``processing_class=``, with a warning. At ZeRO stage 3, models loaded with ``from_pretrained``
after the arguments are made are built partitioned, as under DeepSpeed (``hf_zero3.py``).

Refused in one line: a Trainer given its own optimizer or scheduler, FSDP beside the config,
``fp16_full_eval`` / ``bf16_full_eval``, an epoch whose batches do not divide into the
accumulation steps, ``save_only_model`` with ``load_best_model_at_end`` and
``auto_find_batch_size`` at stage 3 (as under DeepSpeed), and ``auto_find_batch_size``'s retry
after running out of memory (naming the smaller batch to restart with).
"""

import functools
import inspect
import os
import warnings

import torch
import transformers

from . import config_file, hf_zero3
from .comm import init_distributed, launch_env
from .engine import initialize

__all__ = ["Trainer", "Seq2SeqTrainer", "TrainingArguments", "Seq2SeqTrainingArguments",
           "ZeroTrainerMixin", "trainer_class"]


# ---- TrainingArguments(deepspeed=...) -----------------------------------------------------

def _take_deepspeed(post_init):
    @functools.wraps(post_init)
    def wrapper(self, *args, **kwargs):
        config = self.deepspeed
        if config is not None:
            self.zerotorch_config = config
            self.deepspeed = None
        elif not hasattr(self, "zerotorch_config"):
            self.zerotorch_config = None
        if launch_env()["launcher"] != "none":
            # Before accelerate's PartialState, which would otherwise rendezvous on its own, on
            # the port the job's store already holds.
            init_distributed()
        if config is not None:
            # At stage 3 the models loaded after this are built partitioned (hf_zero3.py).
            hf_zero3.enable(self, config_file.read(config) or {})
        post_init(self, *args, **kwargs)
    wrapper._zt_takes_deepspeed = True
    return wrapper


if not getattr(transformers.TrainingArguments.__post_init__, "_zt_takes_deepspeed", False):
    transformers.TrainingArguments.__post_init__ = _take_deepspeed(
        transformers.TrainingArguments.__post_init__)

TrainingArguments = transformers.TrainingArguments
Seq2SeqTrainingArguments = transformers.Seq2SeqTrainingArguments


# ---- the Trainer --------------------------------------------------------------------------

class _EngineOptimizer:
    """The optimizer the Trainer's loop steps: the engine's, which steps inside
    ``engine.step()`` (accelerate's DeepSpeedOptimizerWrapper is the same no-op)."""

    def __init__(self, engine):
        self.engine = engine

    @property
    def param_groups(self):
        return [{"lr": self.engine.get_lr()[0]}]

    def step(self, closure=None):
        pass

    def zero_grad(self, set_to_none=True):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class _EngineScheduler:
    """The scheduler the Trainer's loop steps: the engine's, stepped inside ``engine.step()``."""

    def __init__(self, engine):
        self.engine = engine
        self._lr = None  # the optimizer's lr, which the Trainer's own schedule scales

    def step(self, *args, **kwargs):
        pass

    def get_last_lr(self):
        # The lr of the step just taken, as the Trainer logs it under DeepSpeed: the config's
        # schedule reports it as get_lr(); the Trainer's own schedule (a config without a
        # scheduler block, TrainerSchedule) by its step index.
        schedule = self.engine.trainer_schedule
        if schedule is None:
            return self.engine.get_lr()
        if self._lr is None:
            self._lr = self.engine._config()["optimizer"]["params"]["lr"]
        return [self._lr * schedule.lr(max(self.engine.global_steps - 1, 0))]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class ZeroTrainerMixin:
    """Put in front of a ``transformers.Trainer`` class (``trainer_class`` does): the model
    trains on zerotorch's engine with the config of ``TrainingArguments(deepspeed=...)``."""

    def __init__(self, *args, **kwargs):
        name = type(self).__name__
        if "tokenizer" in kwargs and \
                "tokenizer" not in inspect.signature(transformers.Trainer.__init__).parameters:
            # transformers 4.x's name for processing_class (deprecated in 4.46, gone in 5), which
            # the public scripts written for those versions still pass.
            if kwargs.get("processing_class") is not None:
                raise ValueError(f"zerotorch.hf.{name}: both tokenizer= and processing_class= "
                                 "given; keep processing_class")
            kwargs["processing_class"] = kwargs.pop("tokenizer")
            warnings.warn(f"zerotorch.hf.{name}: tokenizer= is transformers 4's name; taken "
                          "as processing_class=")
        super().__init__(*args, **kwargs)
        self.zerotorch_engine = None
        if getattr(self.args, "zerotorch_config", None) is None:
            raise ValueError(f"zerotorch.hf.{name}: no DeepSpeed config; give "
                             "TrainingArguments(deepspeed=...) or --deepspeed")
        if self.optimizer is not None or self.lr_scheduler is not None:
            raise ValueError(f"zerotorch.hf.{name}: optimizers=(...) cannot drive the C++ "
                             "engine; give the config an optimizer and scheduler block")
        if self.args.fp16_full_eval or self.args.bf16_full_eval:
            raise ValueError(f"zerotorch.hf.{name}: fp16_full_eval / bf16_full_eval: the "
                             "engine evaluates in the config's precision; remove them")
        if self.args.fsdp:
            raise ValueError(f"zerotorch.hf.{name}: fsdp={self.args.fsdp!r} beside a DeepSpeed "
                             "config; remove one")
        # The Trainer's own refusals for a DeepSpeed engine, which it makes only when it sees
        # DeepSpeed: a checkpoint without the engine's state has no best model to load back,
        # and stage 3's partitioned model cannot be wrapped again at another batch size.
        if self.args.save_only_model and self.args.load_best_model_at_end:
            raise ValueError(f"zerotorch.hf.{name}: save_only_model with load_best_model_at_end: "
                             "the best checkpoint would hold no engine state to load; drop one")
        config = config_file.read(self.args.zerotorch_config) or {}
        stage = (config.get("zero_optimization") or {}).get("stage", 0)
        if self.args.auto_find_batch_size and stage == 3:
            raise ValueError(f"zerotorch.hf.{name}: auto_find_batch_size at ZeRO stage 3 (as "
                             "under DeepSpeed); give per_device_train_batch_size")
        accelerator = self.accelerator
        original_unwrap = accelerator.unwrap_model

        def unwrap_model(model, *a, **kw):
            # The engine is the Trainer's wrapped model (model_wrapped), as DeepSpeed's is.
            if self.zerotorch_engine is not None and model is self.zerotorch_engine:
                return self.model
            return original_unwrap(model, *a, **kw)

        accelerator.unwrap_model = unwrap_model
        accelerator.backward = self._zerotorch_backward

    def _move_model_to_device(self, model, device):
        # The engine places the model (the local rank's device, as DeepSpeed's engine does), and
        # the Trainer leaves placement to DeepSpeed's. Left to the Trainer, a CPU job's
        # TrainingArguments.device (cpu:0 under a launcher) would copy every parameter once more
        # before the engine takes them.
        pass

    # -- the engine -------------------------------------------------------------------------

    def _zerotorch_engine(self, max_steps):
        if self.zerotorch_engine is None:
            config = self.args.zerotorch_config
            auto = {"total_steps": int(max_steps)} if max_steps and max_steps > 0 else {}
            params = [p for p in self.model.parameters() if p.requires_grad]
            engine, _, _, _ = initialize(model=self.model, model_parameters=params,
                                         config=config, training_args=self.args, auto=auto)
            self.zerotorch_engine = engine
            # Hugging Face's name for the wrapped engine, which callbacks read.
            self.deepspeed = engine
        return self.zerotorch_engine

    def _update_auto_batch_size(self, batch_size):
        # auto_find_batch_size retries with a smaller batch after running out of memory: the
        # engine that ran out may be mid-step (reductions in flight), and the model's parameters
        # are its buffers, so it is not rebuilt behind the user's back.
        if self.zerotorch_engine is not None:
            raise RuntimeError(
                f"zerotorch.hf.{type(self).__name__}: out of memory at per-device batch "
                f"{self._train_batch_size}; auto_find_batch_size cannot rebuild the engine: "
                f"restart with per_device_train_batch_size={batch_size}")
        super()._update_auto_batch_size(batch_size)

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        engine = self._zerotorch_engine(max_steps)
        self.model_wrapped = engine
        self.optimizer = _EngineOptimizer(engine)
        self.lr_scheduler = _EngineScheduler(engine)
        if resume_from_checkpoint is not None:
            engine.load_checkpoint(resume_from_checkpoint)
        for attr in ("model", "optimizer", "lr_scheduler"):
            setattr(self.callback_handler, attr, getattr(self, attr))
        self.callback_handler.train_dataloader = train_dataloader
        return engine, train_dataloader

    def _zerotorch_backward(self, loss, **kwargs):
        engine = self.zerotorch_engine
        if self.accelerator.sync_gradients != engine.is_gradient_accumulation_boundary():
            raise ValueError(
                f"zerotorch.hf.{type(self).__name__}: an accumulation window ended after "
                f"{engine.micro_steps % engine.gradient_accumulation_steps() + 1} of "
                f"gradient_accumulation_steps {engine.gradient_accumulation_steps()} micro-batches "
                "(an epoch's batches do not divide into them); use a dataset size or "
                "dataloader_drop_last that makes them divide")
        engine.backward(loss, scale_wrt_gas=False)
        engine.step()

    def _clip_grad_norm(self, model):
        # The engine clipped at its step (gradient_clipping, "auto": max_grad_norm).
        norm = self.zerotorch_engine.get_global_grad_norm()
        return None if norm is None else float(norm)

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is None:
            grad_norm = self._clip_grad_norm(model)
        return grad_norm

    # -- checkpoints and the saved model ------------------------------------------------------

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        # The engine loads its own checkpoint once it exists (_prepare_for_training).
        pass

    def _load_optimizer_and_scheduler(self, checkpoint):
        pass

    def _load_best_model(self):
        # load_best_model_at_end: the best checkpoint's engine state, model and optimizer, as
        # the Trainer loads DeepSpeed's (transformers' path for other models would read
        # model.safetensors into the module behind the engine, or find none at stage 3).
        self.zerotorch_engine.load_checkpoint(self.state.best_model_checkpoint)

    def _save_optimizer_and_scheduler(self, output_dir):
        self.zerotorch_engine.save_checkpoint(output_dir)

    def save_model(self, output_dir=None, _internal_call=False):
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        engine = self.zerotorch_engine
        if engine is None:
            return super().save_model(output_dir, _internal_call)
        os.makedirs(output_dir, exist_ok=True)
        if engine.save_16bit_model(output_dir, "model.safetensors"):
            if self.args.should_save:
                self.model.config.save_pretrained(output_dir)
                generation = getattr(self.model, "generation_config", None)
                if generation is not None and hasattr(self.model, "can_generate") \
                        and self.model.can_generate():
                    generation.save_pretrained(output_dir)
                if self.processing_class is not None:
                    self.processing_class.save_pretrained(output_dir)
                torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
        else:
            # Stage 3 without stage3_gather_16bit_weights_on_model_save: the engine's checkpoint,
            # as DeepSpeed's integration saves it (zt-consolidate rebuilds the weights).
            engine.save_checkpoint(output_dir)

    # -- evaluation -----------------------------------------------------------------------------

    def _wrap_model(self, model, training=True, dataloader=None):
        # Evaluation and prediction run the engine (its stage-3 gathers), never a model
        # accelerate prepared again.
        if self.zerotorch_engine is not None:
            return self.zerotorch_engine
        return super()._wrap_model(model, training, dataloader)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **kwargs):
        engine = self.zerotorch_engine
        if getattr(self.args, "predict_with_generate", False) and not prediction_loss_only and \
                engine.zero_optimization_stage() == 3:
            # Seq2SeqTrainer generates with the model itself, outside the engine's forward,
            # which at stage 3 gathers the parameters outside the units.
            return engine.call_as_forward(super().prediction_step, model, inputs,
                                          prediction_loss_only, ignore_keys=ignore_keys, **kwargs)
        return super().prediction_step(model, inputs, prediction_loss_only,
                                       ignore_keys=ignore_keys, **kwargs)

    def evaluation_loop(self, *args, **kwargs):
        # The model's stage-3 units are gathered by the engine's hooks: make the engine first
        # when evaluation comes before training (DeepSpeed's inference init).
        self._zerotorch_engine(self.args.max_steps)
        return super().evaluation_loop(*args, **kwargs)


def trainer_class(cls):
    """``cls`` (a ``transformers.Trainer`` subclass) training on zerotorch's engine."""
    if issubclass(cls, ZeroTrainerMixin):
        return cls
    return type(cls.__name__, (ZeroTrainerMixin, cls),
                {"__module__": __name__, "__doc__": cls.__doc__})


Trainer = trainer_class(transformers.Trainer)
Seq2SeqTrainer = trainer_class(transformers.Seq2SeqTrainer)


def _refuse_the_plain_trainer(init):
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if getattr(self.args, "zerotorch_config", None) is not None and \
                not isinstance(self, ZeroTrainerMixin):
            raise ValueError(
                f"{type(self).__name__}: the TrainingArguments' DeepSpeed config went to "
                "zerotorch (zerotorch.hf is imported); train with zerotorch.hf.Trainer or "
                f"zerotorch.hf.trainer_class({type(self).__name__})")
    wrapper._zt_refuses = True
    return wrapper


if not getattr(transformers.Trainer.__init__, "_zt_refuses", False):
    transformers.Trainer.__init__ = _refuse_the_plain_trainer(transformers.Trainer.__init__)
