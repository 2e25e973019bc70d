"""``zerotorch.zero``: DeepSpeed's ``deepspeed.zero.Init`` and ``deepspeed.zero.GatheredParameters``
for models trained by ``zerotorch.initialize``.

**Partitioned construction** (``Init``). Inside ``with zerotorch.zero.Init(...):`` every module
keeps only this rank's part of its parameters as soon as its own constructor returns, so no
rank ever holds more of a model being built than its largest module plus its parts of the
rest. The rules are DeepSpeed's (``deepspeed/runtime/zero/partition_parameters.py``), so a model
built here holds the values a model built under ``deepspeed.zero.Init`` holds:

- a module's parameters are cut once the constructor of its own class returns (the
  constructors of the classes it derives from run inside it); an initialisation a parent's
  constructor then writes into a child's parameters (``torch.nn.init.*_(self.child.weight)``)
  writes into an empty tensor and does nothing, except through ``Module.apply``, which gathers
  each module's parameters around the function and keeps rank 0's values
  (``zero_optimization.override_module_apply``, on by default);
- parameter ``p`` (``n = p.numel()`` elements) becomes an empty tensor; ``p.ds_shape``,
  ``p.ds_numel`` and ``p.ds_tensor`` hold its shape, ``n`` and this rank's part: elements
  ``[rank c, (rank + 1) c)`` of the flattened values, ``c = ceil(n / world)``, zero-padded;
- ``GatheredParameters(params)`` makes the listed parameters whole inside its block (an
  all-gather over the job's ranks) and cuts them again after it; with ``modifier_rank`` the
  values that rank left are broadcast first and kept, which is how Hugging Face's loaders put
  pretrained values into such a model.

``zerotorch.initialize`` gives the parts to the engine: at stage 3 it makes one stage-3 unit
whole at a time, cuts it into the engine's own shards (``core/zero/partitioned_init.h``) and
frees it, so the model is never whole there either. At stages 0-2, or beside tensor or expert
parallelism, the engine keeps every parameter whole (or splits whole ones), and the model is
gathered whole first. Where this differs from DeepSpeed: the parts are kept in host memory in the
dtype the model made (fp32), not cast to the config's 16-bit dtype on the accelerator (the engine
makes its 16-bit copies from the fp32 values, so its fp32 masters start unrounded; DeepSpeed's
start from the 16-bit values); a parameter made on the ``meta`` device is left as it is.
"""

import functools
import warnings
import weakref

import torch

from . import config_file

# Live engines, so that a bare list of parameters finds the engine that shards them.
_ENGINES = weakref.WeakSet()


def _register(engine):
    _ENGINES.add(engine)


def _owner(params):
    ids = {id(p) for p in params}
    for engine in list(_ENGINES):
        if ids & engine._param_ids:
            return engine
    return None


# ---- partitioned construction -------------------------------------------------------------

_ACTIVE = []  # the Init contexts entered, innermost last
_PATCHED = {}  # class -> its own __init__, while the contexts are entered
_SAVED = {}  # Module attributes replaced while the contexts are entered
_NEXT_ID = [0]
_GROUP = {}  # "group": the gloo group the parts are traded over (None: the default group)


def is_partitioned(p):
    """Whether ``p`` holds only this rank's part (built under ``Init``, not yet given to an
    engine)."""
    return getattr(p, "_zt_part", None) is not None


def _place():
    """(rank, world) of this process in the job, as the engine will see it."""
    from . import _C
    env = _C.launch_env()
    return env["rank"], env["world_size"]


def _group():
    """The process group the parts are traded over: torch.distributed's default group (made
    over the job's own store by zerotorch.init_distributed, as DeepSpeed's Init makes it) when
    its backend takes host tensors, else a gloo group beside it."""
    import torch.distributed as dist
    from .comm import init_distributed
    if "group" not in _GROUP:
        if not dist.is_initialized():
            init_distributed(dist_backend="gloo")
        _GROUP["group"] = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return _GROUP["group"]


def _cut(p, values, rank, world):
    """This rank's part of ``values`` (p's whole values): c = ceil(n / world) elements,
    zero-padded."""
    flat = values.detach().reshape(-1)
    n = flat.numel()
    size = -(-n // world)
    part = torch.zeros(size, dtype=flat.dtype, device="cpu")
    lo, hi = min(rank * size, n), min((rank + 1) * size, n)
    part[:hi - lo].copy_(flat[lo:hi])
    return part


def _partition(p, rank, world):
    with torch.no_grad():
        part = _cut(p, p.data, rank, world)
    p._zt_part = part
    p.ds_shape = p.shape
    p.ds_numel = p.numel()
    p.ds_tensor = part
    p.ds_id = _NEXT_ID[0]
    _NEXT_ID[0] += 1
    p.data = torch.empty(0, dtype=p.dtype, device=p.device)


def _whole(p):
    """p's whole values from every rank's part (collective)."""
    part = p._zt_part
    rank, world = _place()
    if world == 1:
        flat = part
    else:
        import torch.distributed as dist
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part, group=_group())
        flat = torch.cat(parts)
    return flat[:p.ds_numel].view(p.ds_shape)


def _gather(params):
    """Every partitioned parameter of ``params`` whole (in rank order; collective)."""
    for p in params:
        p.data = _whole(p).to(p.device)


def _repartition(params, source_rank=None):
    """Each parameter cut again; with ``source_rank``, its values are that rank's (broadcast
    first), else the parts stay as they were."""
    rank, world = _place()
    for p in params:
        if source_rank is not None:
            if world > 1:
                import torch.distributed as dist
                values = p.data.detach().cpu().contiguous()
                dist.broadcast(values, int(source_rank), group=_group())
            else:
                values = p.data
            with torch.no_grad():
                p._zt_part.copy_(_cut(p, values, rank, world))
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)


def materialise(module, prefix):
    """Makes every partitioned parameter of ``module``'s submodule ``prefix`` ("" the whole
    module) whole again and an ordinary parameter (collective; the engine calls it unit by unit,
    python/csrc/engine_bindings.cpp)."""
    sub = module.get_submodule(prefix) if prefix else module
    params = [p for p in sub.parameters() if is_partitioned(p)]
    _gather(params)
    for p in params:
        for name in ("_zt_part", "ds_shape", "ds_numel", "ds_tensor", "ds_id"):
            delattr(p, name)


def has_partitioned(module):
    return any(is_partitioned(p) for p in module.parameters())


def numel(p):
    """A parameter's element count, partitioned or not."""
    return p.ds_numel if is_partitioned(p) else p.numel()


def _post_init(module):
    """A module's own constructor returned inside the innermost Init: cut its parameters."""
    if not _ACTIVE:
        return
    rank, world = _ACTIVE[-1]._place
    for p in module.parameters(recurse=False):
        if not is_partitioned(p) and p.device.type != "meta":
            _partition(p, rank, world)


def _cut_after(init):
    @functools.wraps(init)
    def wrapper(module, *args, **kwargs):
        # The first wrapper entered for an object is its own class's: the constructors of the
        # classes it derives from run inside it, and the parameters are cut once it returns.
        own = "_zt_constructing" not in module.__dict__
        if own:
            module.__dict__["_zt_constructing"] = True
        try:
            init(module, *args, **kwargs)
        finally:
            if own:
                del module.__dict__["_zt_constructing"]
        if own:
            _post_init(module)
    wrapper._zt_original = init
    return wrapper


def _wrap_class(cls):
    if "__init__" in cls.__dict__ and cls not in _PATCHED:
        _PATCHED[cls] = cls.__dict__["__init__"]
        cls.__init__ = _cut_after(cls.__init__)


def _subclasses(cls):
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def _apply_gathering(original):
    """Module.apply whose function sees each module's parameters whole, rank 0's result kept
    (DeepSpeed's apply_with_gather)."""
    @functools.wraps(original)
    def apply(module, fn):
        def gathered(m):
            params = [p for p in m.parameters(recurse=False) if is_partitioned(p)]
            _gather(params)
            try:
                fn(m)
            finally:
                _repartition(params, source_rank=0)
        return original(module, gathered)
    return apply


def _patch(gather_apply):
    Module = torch.nn.Module
    for cls in _subclasses(Module):
        _wrap_class(cls)
    _SAVED["__init_subclass__"] = Module.__dict__.get("__init_subclass__")
    _SAVED["apply"] = Module.apply

    def init_subclass(cls, **kwargs):
        super(Module, cls).__init_subclass__(**kwargs)
        _wrap_class(cls)

    Module.__init_subclass__ = classmethod(init_subclass)
    if gather_apply:
        Module.apply = _apply_gathering(Module.apply)


def _unpatch():
    Module = torch.nn.Module
    for cls, init in _PATCHED.items():
        # A class made inside the context may have had its __init__ wrapped again after it was
        # made (a decorator: kernels' use_kernelized_func on transformers' attention): that
        # wrapper calls ours, which does nothing outside a context, and stays.
        if getattr(cls.__dict__.get("__init__"), "_zt_original", None) is not None:
            cls.__init__ = init
    _PATCHED.clear()
    if _SAVED.get("__init_subclass__") is None:
        del Module.__init_subclass__
    else:
        Module.__init_subclass__ = _SAVED["__init_subclass__"]
    Module.apply = _SAVED["apply"]
    _SAVED.clear()


class Init:
    """``with zerotorch.zero.Init(config_dict_or_path=ds_config): model = Model()``: the model
    is built partitioned over the job's ranks (see the module's text), as with
    ``deepspeed.zero.Init``, and ``zerotorch.initialize`` takes it. ``module=`` partitions a
    model already built. Every rank must build the same model with the same seed.

    The arguments are DeepSpeed's. ``config_dict_or_path`` / ``config`` give
    ``zero_optimization.override_module_apply`` and the 16-bit dtype, which is noted, not
    applied (the parts stay as the model made them). Arguments that would place the parts
    elsewhere or over other ranks (``remote_device="nvme"``, ``pin_memory``, the process
    groups, ``mpu``, quantized weights) are said once to have no effect here: the parts stay in
    host memory over all ranks until ``initialize`` hands them to the engine, which then acts on
    the config's own offload, quantization and group keys. ``enabled=False``: nothing happens.
    """

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True,
                 remote_device=None, pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, zero_param_parallel_group=None,
                 zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None):
        self.enabled = enabled
        if not enabled:
            return
        given = {"data_parallel_group": data_parallel_group, "mpu": mpu,
                 "zero_param_parallel_group": zero_param_parallel_group,
                 "sequence_data_parallel_group": sequence_data_parallel_group,
                 "param_swapper": param_swapper}
        ignored = [k for k, v in given.items() if v is not None]
        ignored += [k for k, v in (("pin_memory", pin_memory),
                                   ("zero_quantized_weights", zero_quantized_weights),
                                   ("zero_quantized_nontrainable_weights",
                                    zero_quantized_nontrainable_weights)) if v]
        if remote_device not in (None, "cpu"):
            ignored.append(f"remote_device={remote_device!r}")
        block = config_file.read(config_dict_or_path if config_dict_or_path is not None
                                 else config) or {}
        zero = block.get("zero_optimization") or {}
        self._gather_apply = bool(zero.get("override_module_apply", True))
        if dtype is None:
            if (block.get("bf16") or block.get("bfloat16") or {}).get("enabled") is True:
                dtype = torch.bfloat16
            elif (block.get("fp16") or {}).get("enabled") is True:
                dtype = torch.float16
        self._place = _place()
        if self._place[0] == 0:
            if ignored:
                warnings.warn(f"zerotorch.zero.Init: {', '.join(ignored)}: no effect while the "
                              "model is built (its parts stay in host memory, cut over all "
                              "ranks); the engine applies the config's own keys at initialize")
            if dtype is not None and dtype != torch.float32:
                warnings.warn(f"zerotorch.zero.Init: dtype {dtype}: the parameters are kept "
                              "as the model makes them (fp32); the engine makes its 16-bit "
                              "copies from them at initialize")
        if self._place[1] > 1:
            _group()  # DeepSpeed's Init joins the job's process group on entry too
        if module is not None:
            for p in module.parameters():
                if not is_partitioned(p) and p.device.type != "meta":
                    _partition(p, *self._place)

    def __enter__(self):
        if self.enabled:
            if not _ACTIVE:
                _patch(self._gather_apply)
            _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        if self.enabled:
            _ACTIVE.remove(self)
            if not _ACTIVE:
                _unpatch()
        return False


# ---- gathered parameters ------------------------------------------------------------------


class GatheredParameters:
    """``with GatheredParameters(params, modifier_rank=None):`` every parameter of the engine
    that owns ``params`` holds its full values inside the block (stage 3 gathers them; at
    stages 0-2 they are full anyway). With ``modifier_rank``, the values that rank left in
    ``params`` are broadcast to every rank at the end of the block and written into the shards
    and the fp32 masters, so the change survives the next step (DeepSpeed's semantics; it also
    holds at stages 0-2 here, where DeepSpeed's masters would overwrite it). Parameters of a
    model built under ``Init`` and not yet given to an engine: those listed are gathered whole
    and cut again after the block, with ``modifier_rank``'s values when given. Every rank must
    enter the block: gathering is collective. Parameters neither owns: nothing happens.
    """

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if params is None:
            params = []
        elif hasattr(params, "data") and not isinstance(params, (list, tuple)):
            params = [params]
        self._params = list(params)
        self._modifier_rank = modifier_rank
        self._engine = _owner(self._params) if enabled else None
        self._parts = [p for p in self._params if is_partitioned(p)] if enabled else []
        self._scope = None

    def __enter__(self):
        if self._engine is not None:
            self._scope = self._engine._engine.gathered(self._modifier_rank is not None)
        _gather(self._parts)
        return self

    def __exit__(self, *exc):
        if self._parts:
            _repartition(self._parts,
                         self._modifier_rank if exc[0] is None else None)
        if self._scope is None:
            return False
        try:
            if self._modifier_rank is not None and exc[0] is None:
                with torch.no_grad():
                    for p in self._params:
                        self._engine._engine.broadcast(p.data, int(self._modifier_rank))
        finally:
            self._scope.close()
            self._scope = None
        return False
