"""DeepSpeed's engine API over the C++ engine, for a Python ``torch.nn.Module``."""

import atexit
import itertools
import json
import os
import sys
import warnings

import torch

from . import _C
from . import model_parallel as _model_parallel
from . import native_moe as _native_moe
from . import zero as _zero
from .devices import resolve_device


# Stage 3 gathers a unit's parameters in module hooks (ZeroEngine below). Code torch.compile made
# for a module of the same class before such hooks existed (another instance trained at a lower
# stage, the model run compiled before it was wrapped) must not run without them: it would read
# released parameters. By default dynamo does not guard on module hooks; with zerotorch imported
# it does, for code compiled from then on.
torch._dynamo.config.skip_nnmodule_hook_guards = False


def _tensors(out):
    """Every tensor in a module's output (a tensor, tuple, list, dict or Hugging Face output)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


def _first_tensor(out):
    """The tensor a forward's output is judged by (whether a backward follows): a Hugging Face
    output's loss or logits, else the first tensor in it."""
    for key in ("loss", "logits"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    found = _tensors(out)
    return found[0] if found else torch.zeros(())


def granularity_leaves(model, threshold):
    """DeepSpeed's leaf modules for ``stage3_module_granularity_threshold``
    (deepspeed/runtime/zero/parameter_offload.py): a module's granularity is its parameter count
    over its layers (itself and every module with parameters below it that is not a container),
    kept only under 1e9 parameters; modules without parameters, parameter-holding modules without
    children and containers (ModuleList, Sequential, ...) never qualify. Walking from the root,
    the first module on each path whose granularity is at most ``threshold`` is a leaf, fetched
    whole. Returns their names in module order."""
    if threshold <= 0:
        return []
    granularity = {}
    containers = set(torch.nn.modules.container.__all__)

    def visit(module):
        if next(module.parameters(), None) is None:
            granularity[id(module)] = sys.maxsize
            return 0, 0
        params = sum(_zero.numel(p) for p in module.parameters(recurse=False))
        if next(module.children(), None) is None:
            granularity[id(module)] = sys.maxsize
            return 1, params
        layers = 0
        for child in module.children():
            child_layers, child_params = visit(child)
            layers += child_layers
            params += child_params
        if type(module).__name__ in containers:
            granularity[id(module)] = sys.maxsize
            return layers, params
        layers += 1
        granularity[id(module)] = params // layers if params <= 1e9 else sys.maxsize
        return layers, params

    visit(model)
    leaves = []

    def pick(name, module):
        if next(module.parameters(), None) is None:
            return
        if granularity[id(module)] <= threshold:
            leaves.append(name)
            return
        for child_name, child in module.named_children():
            pick(f"{name}.{child_name}" if name else child_name, child)

    pick("", model)
    return leaves


def stage3_units(model, granularity_threshold=0):
    """The stage-3 units of ``model`` by module name: the modules whose class a Hugging Face
    model lists in ``_no_split_modules`` (its decoder layers) and there also every other module
    holding parameters of its own (the embedding, the output head), else the members of every
    ``nn.ModuleList`` (the repeated blocks of most models). A unit inside another is not a unit
    of its own, and neither is a unit holding a parameter that a module outside it also uses
    (a tied embedding): its parameters stay with the root, gathered for all of forward and
    backward, so the sharing module never sees them released.

    ``granularity_threshold`` (the config's stage3_module_granularity_threshold): DeepSpeed's
    leaf modules (granularity_leaves) are units too, fetched whole; a unit inside a leaf is
    merged into it, a leaf inside a unit is already fetched with it. A leaf that is the whole
    model leaves everything to the root."""
    classes = set(getattr(model, "_no_split_modules", None) or ())
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    names = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(u + ".") for u in names):
            continue
        if classes and type(module).__name__ in classes:
            names.append(name)
    if classes:
        # Otherwise the embedding and the head would stay in the root, gathered for the whole
        # forward and backward: with a large vocabulary the largest matrices of the model.
        # DeepSpeed fetches every module's own parameters, and transformers models run under
        # it, so none of them reads another module's weight in its own forward; any other model
        # might (a head reusing embedding.weight), so there the root keeps them. A small one
        # stays gathered anyway (stage3_param_persistence_threshold, core/zero/units.h).
        names += [name for name, module in model.named_modules()
                  if name and not any(name == u or name.startswith(u + ".") for u in names)
                  and next(module.children(), None) is None
                  and any(p is not None for p in module._parameters.values())]
        names.sort(key=order.__getitem__)
    else:
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.ModuleList) and not any(
                    name.startswith(u + ".") for u in names):
                names += [f"{name}.{child}" if name else child
                          for child, m in module.named_children()
                          if any(True for _ in m.parameters())]
    leaves = [n for n in granularity_leaves(model, granularity_threshold)
              if not any(n == u or n.startswith(u + ".") for u in names)]
    if "" in leaves:
        return []
    if leaves:
        names = [u for u in names if not any(u.startswith(leaf + ".") for leaf in leaves)]
        names = sorted(names + leaves, key=order.__getitem__)
    inside = {}
    shared = set()
    for name in names:
        for p in model.get_submodule(name).parameters():
            if inside.get(id(p), name) != name:  # tied between two units: neither is one
                shared.update((inside[id(p)], name))
            inside[id(p)] = name
    for name, module in model.named_modules():
        for p in module._parameters.values():
            unit = inside.get(id(p)) if p is not None else None
            if unit is not None and not (name == unit or name.startswith(unit + ".")):
                shared.add(unit)
    return [n for n in names if n not in shared]


def _with_routed_units(model, units):
    """``units`` with each transformers experts module inside one of them (fused experts,
    model_parallel.fused_experts) added after it as a unit of its own: a routed unit, which stage
    3 gathers only for the experts some rank routed rows to (core/zero/call_unit.h)."""
    out = []
    for name in units:
        out.append(name)
        for sub, module in model.get_submodule(name).named_modules():
            if sub and getattr(module, "_zt_routed_unit", False):
                out.append(f"{name}.{sub}")
    return out


def _mark_routed_units(model):
    """Marks the fused experts modules, so that their mirrors are routed units (engine_bindings)."""
    for module in model.modules():
        try:
            if _model_parallel.fused_experts(module) is not None:
                module._zt_routed_unit = True
        except ValueError:
            pass  # not experts as transformers 5 holds them: gathered whole


def _client_value(text):
    """A client_state value: JSON as save_checkpoint writes it; a C++ program's own entries
    (train_gpt's sampler position) are strings."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _release_engines_at_exit():
    """Frees every engine still alive when the interpreter starts to exit (a normal return,
    ``sys.exit``, an uncaught exception), before finalization begins: its C++ side (the
    communicator's worker threads, a background save's writer, NVMe I/O threads) is then torn down
    while Python is whole. Left to finalization, those threads can outlive the objects they use
    and end the process with an abort instead of the script's exit status. A background save in
    flight is written out but not committed (committing is collective, and a rank leaving with an
    error cannot count on its peers); its tag then stays incomplete. torch.distributed's default
    process group, where one was made, is destroyed after them for the same reason."""
    for engine in list(_zero._ENGINES):
        for h in engine._hooks:
            h.remove()
        engine._hooks = []
        for m in engine._routed_modules:
            del m._zt_routed_gather
        engine._routed_modules = []
        engine._engine = None
    # torch.distributed's default group (zerotorch.init_distributed's, accelerate's, the
    # script's): left to finalization, its gloo threads can end the process with an abort too.
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


atexit.register(_release_engines_at_exit)


_STOPPING = []  # set while an uncaught error is being reported


def _stop_the_job_on_an_uncaught_error(previous):
    """The excepthook over ``previous``: an exception nobody caught ends the job, as a failed
    rank of the C++ programs does (base/main_guard.h): after the traceback is printed, the
    job-wide stop runs (MPI_Abort under the MPI runtime, with the flight recorder's dump first).
    Without it, this rank would wait in MPI_Finalize at exit for peers that wait for it in a
    collective: the job would hang instead of failing. With a backend that needs no such stop
    (gloo, NCCL), the process exits as usual and the launcher stops the others.

    The stop does not return, so this hook must be the outermost: a hook installed over it
    (torch.distributed's init_process_group installs one that prints the traceback into a
    buffer and writes it out with a "[rankN]:" prefix only once the hook it wraps returns) would
    lose the traceback. ``install_excepthook`` puts it back on top; an instance reached again
    from inside the hooks it wraps only prints."""
    def hook(kind, value, traceback):
        if _STOPPING:
            previous(kind, value, traceback)
            return
        _STOPPING.append(True)
        previous(kind, value, traceback)
        sys.stderr.flush()
        sys.stdout.flush()
        _C.stop_job(1)
    hook._zt_stops_the_job = True
    return hook


def install_excepthook():
    """Makes the job-stopping excepthook the outermost one (again, after torch.distributed or a
    script installed its own over it)."""
    if not getattr(sys.excepthook, "_zt_stops_the_job", False):
        sys.excepthook = _stop_the_job_on_an_uncaught_error(sys.excepthook)


install_excepthook()


def _device_kind(module):
    """What ``ZeroEngine`` resolves when no device is given: "auto" (the local rank's GPU if one
    is visible, else the CPU) for a module on the host, the kind of device it is on otherwise."""
    for t in itertools.chain(module.parameters(), module.buffers()):
        if t.device.type == "cuda":
            return "cuda"
        if t.device.type != "cpu":
            return t.device.type
    return "auto"


def _routed_pre_hook(gather):
    """The forward pre-hook of a transformers experts module's routed unit: its forward is called
    with (hidden_states, top_k_index, top_k_weights); index E (transformers' "no expert") takes no
    row."""
    def hook(module, args, kwargs):
        index = args[1] if len(args) > 1 else kwargs["top_k_index"]
        experts = module.num_experts
        gather(torch.bincount(index.reshape(-1), minlength=experts + 1)[:experts])
    return hook


class ZeroEngine:
    """What ``zerotorch.initialize`` returns first: call it as the model, then ``backward(loss)``
    and ``step()`` every micro-step, as with DeepSpeed's engine. The parameters of ``module`` are
    the engine's (sharded, cast and stepped in place): ``engine.module`` is the model."""

    def __init__(self, module, config, overrides=(), program=None, units=None, device=None,
                 lr_schedule=None):
        # A torch.compile'd module (OptimizedModule) runs compiled, and the engine works on the
        # model inside it: its parameters keep their own names (no "_orig_mod." prefix) in
        # checkpoints and exports, as after engine.compile().
        self._compiled_call = None
        if isinstance(module, torch._dynamo.eval_frame.OptimizedModule):
            self._compiled_call = module
            module = module._orig_mod
        self.module = module
        # DeepSpeed's MoE layers with ep_size > 1 set the expert-parallel size (native_moe.py).
        overrides = list(overrides) + _native_moe.expert_parallel_overrides(module, config,
                                                                           overrides)
        # DeepSpeed moves the module to the local rank's accelerator (cuda:LOCAL_RANK), whatever
        # device it was built on; so does the engine here, and a module already on a device stays
        # on that kind. The C++ side resolves the name (train/device.h) and creates the
        # communicator for it: nccl for CUDA, a host backend staged for the test device.
        self.device = resolve_device(device or _device_kind(module))
        self.local_rank = _C.launch_env()["local_rank"]
        module.to(self.device)
        # By default the units follow the config's stage3_module_granularity_threshold, which
        # the engine reads from the config before it asks for them.
        _mark_routed_units(module)
        choose = (lambda threshold: _with_routed_units(module, stage3_units(module, threshold))) \
            if units is None else list(units)
        try:
            # A dict goes to the C++ loader as JSON text; a path is read there.
            path, text = ("", json.dumps(config)) if isinstance(config, dict) \
                else (os.fspath(config), "")
            # The config's sequence_parallel_size and tensor_parallel block split the model
            # (model_parallel.py) once the launch has made the groups, before the engine lays its
            # parameters out.
            # A model built under zerotorch.zero.Init is made whole unit by unit as the engine
            # cuts it into its shards (zero.py, materialise).
            materialise = (lambda prefix: _zero.materialise(module, prefix)) \
                if _zero.has_partitioned(module) else None
            self._engine = _C.Engine(module, path, text, list(overrides), program or {}, choose,
                                     str(self.device),
                                     lambda groups: _model_parallel.split_model(module, groups),
                                     materialise, lr_schedule)
        except RuntimeError as e:
            if 'still "auto"' not in str(e):
                raise
            keys = str(e).split(": still")[0]
            raise RuntimeError(
                f'{keys}: still "auto" with nothing to resolve it from: the model has no '
                'config.hidden_size (bucket sizes) or no max_steps was given (scheduler steps); '
                'pass zerotorch.initialize(..., auto={"hidden_size": H, "total_steps": N}) or '
                'training_args=') from None
        # The Trainer's own schedule (TrainerSchedule) when the config has no scheduler block.
        self.trainer_schedule = lr_schedule
        self._resolved = None  # the resolved config as a dict, read on first use (_config)
        self._step_applied = False
        units = list(self._engine.units)
        self.model_parallel = self._engine.model_parallel
        # DeepSpeed's AutoTP checks the first step's inputs across each tensor group.
        self._check_tensor_group_inputs = self.model_parallel.tensor_parallel_size > 1
        self._param_ids = {id(p) for p in module.parameters()}
        self._hooks = []
        self._routed_modules = []
        if self._engine.gathers_units:
            # Stage 3: a unit is gathered just before its forward and released after it; its
            # outputs' gradient hooks gather it again for its backward (core/zero/call_unit.h).
            engine = self._engine
            expert_split = self.model_parallel.expert_parallel_size > 1
            for i, name in enumerate(units):
                unit = module.get_submodule(name)
                if getattr(unit, "_zt_routed_unit", False):
                    # A routed unit: gathered once the rows each expert takes are known, by the
                    # expert-parallel forward after its count exchange (model_parallel.py), else
                    # from the routing the experts module is called with.
                    gather = torch.compiler.disable(
                        lambda rows, i=i: engine.unit_before_routed_forward(i, rows))
                    if expert_split:
                        unit._zt_routed_gather = gather
                        self._routed_modules.append(unit)
                    else:
                        self._hooks.append(unit.register_forward_pre_hook(
                            torch.compiler.disable(_routed_pre_hook(gather)), with_kwargs=True))
                    self._hooks.append(unit.register_forward_hook(torch.compiler.disable(
                        lambda _m, _args, out, i=i: engine.unit_after_forward(i, _tensors(out)))))
                    continue
                # In a compiled model the gathers run eagerly between the compiled parts (one
                # graph break before and one after each unit), never traced.
                self._hooks.append(unit.register_forward_pre_hook(torch.compiler.disable(
                    lambda _m, _args, i=i: engine.unit_before_forward(i))))
                self._hooks.append(unit.register_forward_hook(torch.compiler.disable(
                    lambda _m, _args, out, i=i: engine.unit_after_forward(i, _tensors(out)))))
        self.units = units
        for key in self._engine.activation_checkpointing_keys_set:
            if self._engine.rank == 0:
                # The block configures the C++ library's checkpoint (what a C++ model calls); a
                # Python model checkpoints with torch.utils.checkpoint or
                # gradient_checkpointing_enable(), which this block does not reach.
                warnings.warn(f"activation_checkpointing.{key}: no effect on a Python model; "
                              "use torch.utils.checkpoint or gradient_checkpointing_enable()")
        _zero._register(self)
        install_excepthook()

    def destroy(self):
        """Commits a background checkpoint save still in flight (every rank calls it, as
        DeepSpeed's), then removes the stage-3 hooks from the module."""
        self._engine.wait_checkpoint()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for m in self._routed_modules:
            del m._zt_routed_gather
        self._routed_modules = []

    def __call__(self, *args, **kwargs):
        if self._check_tensor_group_inputs:
            self._check_tensor_group_inputs = False
            given = list(args) + [kwargs[k] for k in sorted(kwargs)]
            for i, t in enumerate(given):
                if isinstance(t, torch.Tensor) and not t.is_floating_point():
                    self.model_parallel.check_same_on_tensor_group(t, f"forward inputs (#{i})")
        box = []

        def run():
            call = self.module if self._compiled_call is None else self._compiled_call
            box.append(call(*args, **kwargs))
            return _first_tensor(box[0])

        self._engine.forward(run)
        return box[0]

    forward = __call__

    def call_as_forward(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` run where the engine runs the model's forward: at stage 3 the
        parameters outside the units stay gathered for the whole call and each unit is gathered
        by its hooks as it runs, so code that drives the model other than through its forward
        (``model.generate``, which also calls an encoder alone) works, as under DeepSpeed's
        hooks on every module. Without gradients everything is released afterwards."""
        box = []

        def run():
            box.append(fn(*args, **kwargs))
            return _first_tensor(box[0])

        self._engine.forward(run)
        return box[0]

    def compile(self, backend=None, compile_kwargs=None, schedule=None,
                compiled_autograd_enabled=False):
        """DeepSpeed's ``engine.compile()``: the module compiled in place
        (``nn.Module.compile``, so its parameters keep their names) with ``backend`` (inductor
        by default) and ``compile_kwargs``. The engine's work stays outside the compiled graphs:
        at stage 3 each unit's gather and release run eagerly around it (a graph break on each
        side), and gradients reach the engine through the parameters' accumulation hooks, which
        the compiled backward feeds as the eager one does. DeepCompile schedules and compiled
        autograd (which would trace those hooks) are refused."""
        if schedule is not None:
            raise ValueError("engine.compile: schedule is DeepCompile's; zerotorch compiles with "
                             "torch.compile only (compile.deepcompile is refused)")
        if compiled_autograd_enabled:
            raise ValueError("engine.compile: compiled_autograd_enabled would trace the engine's "
                             "gradient hooks; compile without it")
        if self.is_compiled:
            return
        kwargs = dict(compile_kwargs or {})
        kwargs["backend"] = backend or kwargs.get("backend") or "inductor"
        self.module.compile(**kwargs)

    @property
    def is_compiled(self):
        return self._compiled_call is not None or getattr(
            self.module, "_compiled_call_impl", None) is not None

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        """``loss.backward()`` scaled by 1 / gradient_accumulation_steps (``scale_wrt_gas``, as
        DeepSpeed's; off: the loss as it is) and the fp16 loss scale, then this micro-step's
        gradient reduction. ``retain_graph`` is refused: the engine's gradient hooks reduce and
        release each gradient once."""
        if retain_graph:
            raise ValueError("engine.backward: retain_graph=True is not supported (each gradient "
                             "is reduced and released once)")
        self._engine.backward(loss, scale_wrt_gas)

    def step(self):
        """Steps the optimizer on the accumulation boundary only; call after every backward.
        With ``checkpoint.writer.decoupled``, also commits a background save once every rank
        has written it (until then ``latest`` names the previous checkpoint)."""
        before = (self._engine.global_step, self._engine.skipped_steps)
        self._engine.step()
        self._step_applied = self._engine.global_step > before[0] and \
            self._engine.skipped_steps == before[1]
        self._engine.commit_checkpoint()

    def was_step_applied(self):
        """DeepSpeed's: whether the last ``step()`` changed the parameters (False between
        accumulation boundaries and for a step skipped on an fp16 overflow)."""
        return self._step_applied

    # DeepSpeed's accessors of the resolved config.
    def _config(self):
        if self._resolved is None:
            self._resolved = json.loads(self._engine.config_json)
        return self._resolved

    def train_batch_size(self):
        return self._config()["train_batch_size"]

    def get_batch_info(self):
        """(train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps)."""
        return (self.train_batch_size(), self.train_micro_batch_size_per_gpu(),
                self.gradient_accumulation_steps())

    @property
    def global_samples(self):
        """Samples consumed by the optimizer steps taken, at the config's batch size."""
        return self.global_steps * self.train_batch_size()

    def fp16_enabled(self):
        return bool(self._config()["fp16"]["enabled"])

    def bfloat16_enabled(self):
        return bool(self._config()["bf16"]["enabled"])

    def gradient_clipping(self):
        return self._config()["gradient_clipping"]

    def memory_plan(self):
        """This rank's memory plan, made and checked when the engine was built (the config's
        ``memory_plan`` block): ``{"device", "host", "pinned", "nvme"}`` peak bytes, ``parts``
        as ``(name, place, bytes)`` alive at each place's peak, ``device_peak_at`` and
        ``notes``. Of the parameters and the engine's buffers: a Python model's activations are
        not probed (the notes say so)."""
        return self._engine.memory_plan

    def zero_optimization(self):
        return self.zero_optimization_stage() > 0

    def zero_offload_optimizer(self):
        """The offload_optimizer block, or None when nothing is offloaded."""
        block = self._config()["zero_optimization"]["offload_optimizer"]
        return block if block["device"] != "none" else None

    def zero_offload_param(self):
        """The offload_param block, or None when nothing is offloaded."""
        block = self._config()["zero_optimization"]["offload_param"]
        return block if block["device"] != "none" else None

    def steps_per_print(self):
        return self._config()["steps_per_print"]

    def wall_clock_breakdown(self):
        return bool(self._config()["wall_clock_breakdown"])

    def zero_grad(self, set_to_none=True):
        self._engine.zero_grad()

    # The module's, as DeepSpeed's engine (an nn.Module around it) gives them.
    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def named_parameters(self, *args, **kwargs):
        return self.module.named_parameters(*args, **kwargs)

    def buffers(self, recurse=True):
        return self.module.buffers(recurse)

    def named_buffers(self, *args, **kwargs):
        return self.module.named_buffers(*args, **kwargs)

    def modules(self):
        return self.module.modules()

    def named_modules(self, *args, **kwargs):
        return self.module.named_modules(*args, **kwargs)

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

    @property
    def gather_traffic(self):
        """Stage 3 since the engine began: gathered_bytes (parameters its gathers rebuilt) and
        unrouted_bytes (experts left out of them because no rank of their group routed rows to
        them); zeros below stage 3."""
        return self._engine.gather_traffic

    @property
    def step_flops(self):
        """With flops_profiler enabled, the last optimizer step on this rank: model_flops,
        hardware_flops (with recomputation), other_flops (elementwise), seconds, tflops and mfu
        (None without a known peak); None when the profiler is off."""
        return self._engine.step_flops

    def gradient_accumulation_steps(self):
        return self._engine.gradient_accumulation_steps

    def train_micro_batch_size_per_gpu(self):
        return self._engine.train_micro_batch_size_per_gpu

    @property
    def global_rank(self):
        return self._engine.rank

    # The mesh (the config's sequence_parallel_size and tensor_parallel.autotp_size): ranks of a
    # sequence or tensor group read the same batch; data-parallel ranks read different ones.
    @property
    def data_parallel_size(self):
        return self.model_parallel.data_parallel_size

    @property
    def data_parallel_rank(self):
        return self.model_parallel.data_parallel_rank

    @property
    def sequence_parallel_size(self):
        return self.model_parallel.sequence_parallel_size

    @property
    def sequence_parallel_rank(self):
        return self.model_parallel.sequence_parallel_rank

    @property
    def tensor_parallel_size(self):
        return self.model_parallel.tensor_parallel_size

    @property
    def tensor_parallel_rank(self):
        return self.model_parallel.tensor_parallel_rank

    @property
    def expert_parallel_size(self):
        return self.model_parallel.expert_parallel_size

    @property
    def expert_parallel_rank(self):
        return self.model_parallel.expert_parallel_rank

    @property
    def world_size(self):
        return self._engine.world_size

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        """Every rank calls it; the tag defaults to ``global_step<N>``, DeepSpeed's. The
        checkpoint is zerotorch's format, which the C++ programs load too. With
        ``checkpoint.writer.decoupled`` (DeepSpeed's background writer) it returns once the
        state is copied aside; the write goes on while training continues, and ``step()`` or
        ``destroy()`` commits it."""
        tag = tag if tag is not None else f"global_step{self.global_steps}"
        state = {str(k): json.dumps(v) for k, v in (client_state or {}).items()}
        self._engine.save_checkpoint(os.fspath(save_dir), str(tag), state)

    def zero_optimization_stage(self):
        """A method, as DeepSpeed's engine has it."""
        return self._engine.stage

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """The model's weights in the compute dtype (bf16/fp16, fp32 for fp32 training) for
        ``from_pretrained``: ``save_dir/save_filename``, a torch.save state dict, or a
        safetensors file when the name ends in ``.safetensors``. At stage 3 it needs
        ``stage3_gather_16bit_weights_on_model_save`` (else False and nothing written, as
        DeepSpeed); every rank calls it. Returns True when written."""
        if self._engine.stage == 3 and not self._engine.gather_16bit_weights_on_model_save:
            if self.global_rank == 0:
                warnings.warn("save_16bit_model: stage 3 without zero_optimization."
                              "stage3_gather_16bit_weights_on_model_save writes nothing; "
                              "zt-consolidate builds fp32 weights from a checkpoint")
            return False
        os.makedirs(save_dir, exist_ok=True)
        path = os.path.join(os.fspath(save_dir), save_filename)
        if path.endswith(".safetensors") and not exclude_frozen_parameters:
            # Unit by unit (peak memory ~ the largest unit), rank 0 writing; no rank returns
            # before the file is complete.
            written = self._engine.save_16bit_model(path)
            self._engine.barrier()
            return written
        frozen = {n for n, p in self.module.named_parameters() if not p.requires_grad}
        split = self._engine.tensor_split_params
        dealt = self._engine.dealt_names
        with _zero.GatheredParameters(list(self.module.parameters())):
            # A tensor split's slices (an expert split's experts) joined whole, and every rank's
            # dealt experts under their own names (every rank of the group takes part).
            joined = {k: self.model_parallel.join_over_split_group(v.detach(), split[k]).cpu()
                      for k, v in self.module.state_dict().items() if k in split}
            held = {}
            for k, v in self.module.state_dict().items():
                if k in dealt:
                    every = self.model_parallel.join_over_split_group(v.detach()[None], 0)
                    held.update(zip(dealt[k], every.cpu().unbind(0)))
            if self.global_rank == 0:
                state = {}
                for k, v in self.module.state_dict().items():
                    if exclude_frozen_parameters and k in frozen:
                        continue
                    if k in dealt:
                        state.update({n: held[n].clone() for n in dealt[k]})
                    else:
                        state[k] = joined[k] if k in joined else v.detach().cpu().clone()
                if path.endswith(".safetensors"):
                    from safetensors.torch import save_file
                    save_file(state, path, metadata={"format": "pt"})
                else:
                    torch.save(state, path)
        self._engine.barrier()
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        """Returns (load_dir, client_state), as DeepSpeed's returns (path, client_state). Loads
        everything, as DeepSpeed's defaults do: the keyword arguments that would load less (or
        load the module non-strictly, or through a function) are refused, naming the one given,
        rather than ignored."""
        partial = {"load_module_strict": (load_module_strict, True),
                   "load_optimizer_states": (load_optimizer_states, True),
                   "load_lr_scheduler_states": (load_lr_scheduler_states, True),
                   "load_module_only": (load_module_only, False),
                   "custom_load_fn": (custom_load_fn, None)}
        for key, (given, default) in partial.items():
            if given != default:
                raise ValueError(f"load_checkpoint: {key}={given!r} is not supported: the "
                                 "engine loads its whole checkpoint (module, optimizer and "
                                 "schedule); leave it at DeepSpeed's default")
        state = self._engine.load_checkpoint(os.fspath(load_dir), "" if tag is None else str(tag))
        return os.fspath(load_dir), {k: _client_value(v) for k, v in state.items()}


def auto_values(training_args=None, model=None, **values):
    """What the config's "auto" values resolve from, as the Hugging Face Trainer fills them:
    from a ``transformers.TrainingArguments`` (or any object with its field names:
    per_device_train_batch_size, gradient_accumulation_steps, max_grad_norm, fp16, bf16,
    learning_rate, adam_beta1/2, adam_epsilon, weight_decay, warmup_steps, warmup_ratio,
    max_steps), the model's ``config.hidden_size`` (bucket sizes), and explicit keyword values
    by zerotorch's names (micro_batch_size, gradient_accumulation_steps, gradient_clipping,
    fp16, bf16, lr, betas, eps, weight_decay, warmup_steps, warmup_ratio, total_steps,
    hidden_size, save_16bit_model), which win. A key left "auto" with nothing to resolve it is
    an error naming it."""
    out, origin = {}, {}
    if training_args is not None:
        a = training_args
        fields = {"micro_batch_size": "per_device_train_batch_size",
                  "gradient_accumulation_steps": "gradient_accumulation_steps",
                  "gradient_clipping": "max_grad_norm", "fp16": "fp16", "bf16": "bf16",
                  "lr": "learning_rate", "eps": "adam_epsilon", "weight_decay": "weight_decay",
                  "warmup_steps": "warmup_steps", "warmup_ratio": "warmup_ratio",
                  "total_steps": "max_steps"}
        for key, field in fields.items():
            value = getattr(a, field, None)
            if value is not None:
                out[key] = value
                origin[key] = f"TrainingArguments.{field} {value}"
        steps = out.get("warmup_steps")
        if isinstance(steps, float):
            # transformers 5 folds warmup_ratio into warmup_steps: below 1 it is the fraction
            # of the total steps (TrainingArguments.get_warmup_steps).
            if 0 < steps < 1:
                out["warmup_ratio"], out["warmup_steps"] = steps, 0
                origin["warmup_ratio"] = origin.pop("warmup_steps")
            else:
                out["warmup_steps"] = int(steps)
        if getattr(a, "adam_beta1", None) is not None and getattr(a, "adam_beta2", None):
            out["betas"] = [float(a.adam_beta1), float(a.adam_beta2)]
            origin["betas"] = "TrainingArguments.adam_beta1/adam_beta2"
        if out.get("total_steps", 0) <= 0:
            out.pop("total_steps", None)
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    if hidden is not None:
        out["hidden_size"] = int(hidden)
        origin["hidden_size"] = f"model.config.hidden_size {hidden}"
    for key, value in values.items():
        out[key] = value
        origin[key] = f"{key}={value} given to zerotorch.initialize"
    out["origin"] = origin
    return out


class TrainerSchedule:
    """The Hugging Face Trainer's learning-rate schedule, for a config without a scheduler
    block: ``transformers.get_scheduler(lr_scheduler_type)`` over the Trainer's warmup and
    total steps, which the Trainer hands DeepSpeed as a client scheduler, stepped after each
    optimizer step, over the optimizer's lr (the config's, its "auto" the Trainer's
    learning_rate). ``lr(s)`` is the factor of that lr at optimizer step s (0-based), read off
    the scheduler itself over a one-parameter optimizer of lr 1, so every schedule type is the
    Trainer's own."""

    def __init__(self, training_args, total_steps):
        import math
        import transformers
        kind = getattr(training_args, "lr_scheduler_type", "linear") or "linear"
        kind = str(getattr(kind, "value", kind)).split(".")[-1].lower()
        if kind == "reduce_lr_on_plateau":
            raise ValueError("zerotorch.initialize: lr_scheduler_type 'reduce_lr_on_plateau' "
                             "steps on evaluation metrics, which the engine does not see; give "
                             "a scheduler block")
        if kind != "constant" and not total_steps:
            raise ValueError(f"zerotorch.initialize: the Trainer's {kind} schedule needs "
                             "training_args.max_steps > 0 (or a scheduler block)")
        total = int(total_steps or 0)
        if hasattr(training_args, "get_warmup_steps"):
            warmup = training_args.get_warmup_steps(total)
        else:
            steps = getattr(training_args, "warmup_steps", 0) or 0
            ratio = getattr(training_args, "warmup_ratio", 0.0) or 0.0
            warmup = int(steps) if steps > 0 else math.ceil(total * ratio)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        self._schedule = transformers.get_scheduler(
            kind, self._optimizer, num_warmup_steps=warmup, num_training_steps=total,
            scheduler_specific_kwargs=getattr(training_args, "lr_scheduler_kwargs", None) or {})
        self._lrs = []
        self.name = f"the Trainer's {kind}"

    def lr(self, step):
        with warnings.catch_warnings():
            # "scheduler.step() before optimizer.step()": no optimizer steps here.
            warnings.simplefilter("ignore")
            while len(self._lrs) <= step:
                self._lrs.append(float(self._optimizer.param_groups[0]["lr"]))
                self._schedule.step()
        return self._lrs[step]


def _trainer_defaults(blocks, training_args, total_steps):
    """What the Hugging Face Trainer adds to a DeepSpeed config without an optimizer or
    scheduler block: its own AdamW over its parameter groups (biases and LayerNorm weights
    without decay, which is the C++ programs' parameter_groups.no_decay default), as config
    overrides, and its learning-rate schedule (TrainerSchedule), or None."""
    out = []
    if "optimizer" not in blocks:
        # The Trainer's optim choices that are torch's AdamW (fused or not).
        optim = str(getattr(getattr(training_args, "optim", None), "value",
                            getattr(training_args, "optim", None)) or "adamw_torch")
        if optim not in ("adamw_torch", "adamw_torch_fused", "adamw_hf"):
            raise ValueError(f"zerotorch.initialize: TrainingArguments.optim {optim!r} without an "
                             "optimizer block: the engine's default is the Trainer's AdamW; give "
                             "the config an optimizer block")
        out += ["optimizer.type=AdamW"] + [f"optimizer.params.{k}=auto"
                                           for k in ("lr", "betas", "eps", "weight_decay")]
    elif "parameter_groups" not in blocks:
        out.append("parameter_groups.no_decay=[]")
    schedule = None if "scheduler" in blocks else TrainerSchedule(training_args, total_steps)
    return out, schedule


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, mpu=None, dist_init_required=None, collate_fn=None,
               config=None, config_params=None, *, overrides=(), units=None,
               training_args=None, auto=None, device=None):
    """``engine, optimizer, training_dataloader, lr_scheduler``, as ``deepspeed.initialize``.

    ``config`` (or ``config_params``, or ``args.deepspeed_config``) is a path (JSON,
    hjson-lenient, or YAML, read as the C++ programs read it) or a dict. The optimizer and
    scheduler are the config's; they live inside the engine, so the second and fourth values
    are None, and a client ``optimizer`` or ``lr_scheduler`` is refused rather than ignored.
    ``model_parameters``, when given, must be the model's trainable parameters (those with
    requires_grad; the config's ``freeze`` globs freeze more): the engine trains exactly those,
    with the weight decay and learning rates of the config's ``optimizer`` and
    ``parameter_groups`` blocks, so parameter groups given here (dicts) are refused too, except
    DeepSpeed's MoE split of one group (``split_params_into_different_moe_groups_for_optimizer``:
    keys ``params``, ``name`` and ``moe`` only), which sets nothing.
    ``training_data`` (a map-style dataset) gives the third value: a DataLoader of
    train_micro_batch_size_per_gpu samples per rank through a DistributedSampler over the data
    ranks, with ``collate_fn``, as DeepSpeed's ``deepspeed_io``.

    "auto" values resolve from ``model.config.hidden_size`` (bucket sizes), from
    ``training_args`` (a ``transformers.TrainingArguments``) and from ``auto`` (a dict by
    zerotorch's names), see ``auto_values``. ``units`` overrides the stage-3 units
    (``stage3_units``); ``overrides`` are "a.b=value" strings, as the programs' ``--set``.

    The module is moved to the local rank's device, as DeepSpeed does: ``device`` (zerotorch's
    own: "auto", "cpu", "cuda", "cuda:N", "zttest", "zttest:N", as the programs' ``--device``)
    or, unset, the kind of device the module is on, a module on the host going to the local
    rank's GPU where one is visible. ``engine.device`` and ``engine.local_rank`` say where.

    A ``torch.compile``d model runs compiled, the engine working on the model inside it (names
    without ``_orig_mod.``); ``engine.compile()`` or ``training_args.torch_compile`` compile it
    in place, as DeepSpeed's ``engine.compile()`` does.
    """
    if model is None:
        raise ValueError("zerotorch.initialize: model is required")
    if optimizer is not None or lr_scheduler is not None:
        raise ValueError(
            "zerotorch.initialize: a client optimizer or lr_scheduler cannot drive the C++ "
            "engine; give them as the config's optimizer and scheduler blocks")
    if mpu is not None:
        raise ValueError("zerotorch.initialize: mpu is not taken; the sequence and tensor groups "
                         "come from the config's sequence_parallel_size and tensor_parallel block")
    if config is None:
        config = config_params
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if config is None:
        raise ValueError("zerotorch.initialize: no config (config=, config_params= or "
                         "args.deepspeed_config)")
    if model_parameters is not None:
        given = list(model_parameters)
        # DeepSpeed's MoE tutorial passes its one group split by
        # deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer: groups that
        # differ only in their name and "moe" flag, which set nothing here (the engine knows
        # the experts itself). Groups that set hyperparameters are refused.
        if any(isinstance(p, dict) for p in given):
            extra = sorted({k for g in given if isinstance(g, dict) for k in g}
                           - {"params", "name", "moe"})
            if extra or not all(isinstance(g, dict) for g in given):
                raise ValueError(
                    "zerotorch.initialize: model_parameters as parameter groups (dicts) with "
                    f"{', '.join(extra) or 'loose parameters beside them'} are not supported; "
                    "set weight decay and learning rates in the config's optimizer and "
                    "parameter_groups blocks")
            given = [p for g in given for p in g["params"]]
        if {id(p) for p in given} != {id(p) for p in model.parameters() if p.requires_grad}:
            raise ValueError(
                "zerotorch.initialize: model_parameters must be the model's trainable "
                "parameters; freeze the others with requires_grad=False or the config's freeze "
                "globs")
    program = auto_values(training_args, model, **(auto or {}))
    # DeepSpeed builds the config's optimizer over model_parameters (model.parameters() when
    # none are given): one group, so every parameter decays. The C++ programs' default grouping
    # (parameter_groups.no_decay: biases and norms, as the Hugging Face Trainer groups them) is
    # kept only when the config names it.
    # The blocks the user's config gives, as the C++ loader reads the file.
    blocks = set(config) if isinstance(config, dict) else set(
        _C.config_file_keys(os.fspath(config)))
    overrides = list(overrides)
    schedule = None
    if training_args is not None:
        defaults, schedule = _trainer_defaults(blocks, training_args, program.get("total_steps"))
        overrides = defaults + overrides
    elif "parameter_groups" not in blocks:
        overrides.insert(0, "parameter_groups.no_decay=[]")
    engine = ZeroEngine(model, config, overrides, program, units, device, schedule)
    if getattr(training_args, "torch_compile", False):
        # TrainingArguments(torch_compile=True): the Trainer compiles the model with its backend
        # and mode; engine.compile() does it with the engine's hooks in place.
        mode = getattr(training_args, "torch_compile_mode", None)
        engine.compile(backend=getattr(training_args, "torch_compile_backend", None),
                       compile_kwargs={"mode": mode} if mode else {})
    loader = None
    if training_data is not None:
        # data.drop_last, which DeepSpeed's dataloader_drop_last sets too.
        # Over the data-parallel ranks: the ranks of a sequence or tensor group read one batch.
        sampler = torch.utils.data.DistributedSampler(
            training_data, num_replicas=engine.data_parallel_size,
            rank=engine.data_parallel_rank, shuffle=True, seed=engine._engine.seed)
        loader = torch.utils.data.DataLoader(
            training_data, batch_size=engine.train_micro_batch_size_per_gpu(), sampler=sampler,
            collate_fn=collate_fn, drop_last=engine._engine.data_drop_last)
    return engine, None, loader, None
