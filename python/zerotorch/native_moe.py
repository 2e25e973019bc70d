"""DeepSpeed's own MoE layer (``deepspeed.moe.layer.MoE``) in a model trained by
``zerotorch.initialize``.

At ``ep_size`` 1 the layer trains as it is: its gate and experts are ordinary modules, ZeRO-sharded
with the rest. At a larger ``ep_size`` DeepSpeed's engine hands each layer an expert group
(``set_deepspeed_parallelism``), and the layer's forward trades its dispatched rows over it with
``all_to_all_single``. Here the layers' ``ep_size`` becomes the engine's expert-parallel size
(consecutive ranks form an expert group, the expert-data-parallel groups stride across them, as
DeepSpeed makes them), and each layer's forward is replaced by one that computes what
DeepSpeed's ``MOELayer.forward`` computes (``deepspeed/moe/sharded_moe.py``), with the
installed deepspeed's own code for all but the trade: the layer's gate (capacity, token
dropping, random token selection and the auxiliary loss), the (E, C, M) dispatch and the combine
(0.19's sparse routes, or the one-hot einsums of the versions before), and the layer's experts;
the equal-chunk trade of experts' rows over the expert group and back goes through the C++
exchange (parallel/expert_exchange.h) instead of ``all_to_all_single``. With ``drop_tokens``
off, DeepSpeed's gate takes the largest capacity over the expert group; the gate runs without the
group here, so the dispatch is laid out at that capacity afterwards (the extra slots empty, as
DeepSpeed's are).

Rank j of an expert group holds experts [j E/ep, (j+1) E/ep), as DeepSpeed deals them. Each
local expert is renamed by its global index (``deepspeed_experts.2`` on rank 1 at ep 2 with 4
experts), so checkpoints, resumes at another ``ep_size`` and 16-bit exports hold every expert
under the name the layer gives it at ``ep_size`` 1: the engine knows them as dealt parameters
(core/engine_options.h ``dealt_params``).
"""

import sys

import torch

from . import config_file


def _is_native(module):
    kind = type(module)
    return kind.__module__ == "deepspeed.moe.layer" and kind.__name__ == "MoE"


def native_layers(model):
    """(name, layer) of every ``deepspeed.moe.layer.MoE`` in ``model``."""
    return [(name, m) for name, m in model.named_modules() if _is_native(m)]


def expert_parallel_size(model):
    """The ``ep_size`` of the model's DeepSpeed MoE layers: 1 without any. ValueError when they
    differ (DeepSpeed makes a group per size; the engine has one expert dimension)."""
    sizes = {name or "the model": m.ep_size for name, m in native_layers(model)}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"deepspeed.moe.layer.MoE layers with different ep_size {sizes}: the "
                         "engine has one expert-parallel size; give every layer the same")
    return next(iter(sizes.values()), 1)


def _configured_size(config):
    """The config's expert_parallel size (1 when off), or None when it cannot be read here."""
    block = config_file.read(config)
    if block is None and config is not None:
        return None
    ep = (block or {}).get("expert_parallel") or {}
    size = int(ep.get("autoep_size", 1) or 1)
    return size if ep.get("enabled", False) and size > 1 else 1


def expert_parallel_overrides(model, config, overrides):
    """The config overrides that make the layers' ``ep_size`` the engine's expert-parallel size
    (none without DeepSpeed MoE layers, or at ``ep_size`` 1). A config or override that asks for
    another size is refused in one line."""
    ep = expert_parallel_size(model)
    if ep == 1:
        return []
    asked = _configured_size(config)
    for o in overrides:
        if o.startswith("expert_parallel.autoep_size="):
            asked = int(o.split("=", 1)[1])
    if asked not in (None, 1, ep):
        raise ValueError(f"expert_parallel.autoep_size {asked}, but the model's "
                         f"deepspeed.moe.layer.MoE layers have ep_size {ep}: set one to the other")
    for name, layer in native_layers(model):
        if getattr(layer.deepspeed_moe, "use_tutel", False):
            raise ValueError(f"{name} (deepspeed.moe.layer.MoE) uses Tutel's dispatcher, which "
                             "trades rows its own way; set use_tutel=False for ep_size > 1")
        if layer.enable_expert_tensor_parallelism:
            raise ValueError(f"{name} (deepspeed.moe.layer.MoE) has "
                             "enable_expert_tensor_parallelism: experts are not split over a "
                             "tensor group; set it to False")
    return ["expert_parallel.enabled=true", f"expert_parallel.autoep_size={ep}"]


class _DealtExperts(torch.nn.ModuleList):
    """A DeepSpeed MoE layer's local experts under expert parallelism: the layer's
    ``ModuleList`` of them, indexed and iterated locally, but named by their global index (a
    ModuleList still, so stage 3 makes each expert a unit as at ``ep_size`` 1)."""

    def __init__(self, experts, first):
        super().__init__()
        for i, expert in enumerate(experts):
            self.add_module(str(first + i), expert)

    def __getitem__(self, i):
        return list(self._modules.values())[i]


def _forward(groups, layer):
    """``MOELayer.forward`` over the expert group (the module docstring), with the helpers of the
    deepspeed version installed: 0.19's sparse routes (``_route_slots``, ``_sparse_encode``,
    ``_sparse_decode``: each routed token gathered into its expert's capacity slot), or the
    dense one-hot einsums of the versions before."""
    ep, per = layer.ep_size, layer.num_local_experts
    moe = sys.modules[type(layer).__module__]
    sparse = all(hasattr(moe, f) for f in ("_route_slots", "_sparse_encode", "_sparse_decode"))

    def widest(capacity):
        # DeepSpeed's gate without dropping all-reduces the largest capacity over the group.
        if layer.gate.drop_tokens:
            return capacity
        return max(row[0] for row in groups.gather_expert_counts([capacity]))

    def trade(dispatched, width):
        # (E, C, M) in ep equal chunks of `per` experts: chunk j goes to rank j; what arrives
        # from rank s is its rows for this rank's experts, (ep, per, C, M) as DeepSpeed has it.
        arrived = groups.exchange_expert_rows(dispatched.reshape(-1, width))
        out = layer.experts(arrived.reshape(ep, per, -1, width))
        return groups.exchange_expert_rows(out.reshape(-1, width).contiguous())

    def forward(*inputs, **kwargs):
        x = inputs[0]
        width = x.shape[-1]
        flat = x.reshape(-1, width)
        used = inputs[1] if len(inputs) > 1 else None
        if sparse:
            layer.l_aux, capacity, experts, indices, locations, gates, layer.exp_counts = \
                layer.gate(flat, used, True, False)
            capacity = widest(int(capacity))
            slots = moe._route_slots(indices, locations, experts, capacity)
            returned = trade(moe._sparse_encode(flat, slots, experts, capacity), width)
            combined = moe._sparse_decode(returned.view(experts * capacity, width), slots, gates,
                                          flat.shape[0])
        else:
            layer.l_aux, combine, dispatch, layer.exp_counts = layer.gate(flat, used)
            capacity = combine.shape[2]
            most = widest(capacity)
            if most > capacity:
                combine = torch.nn.functional.pad(combine, (0, most - capacity))
                dispatch = torch.nn.functional.pad(dispatch, (0, most - capacity))
            returned = trade(torch.einsum("sec,sm->ecm", dispatch.type_as(x), flat), width)
            combined = torch.einsum("sec,ecm->sm", combine.type_as(x),
                                    returned.reshape(ep * per, -1, width))
        return combined.reshape(x.shape)

    return forward


def deal_native_experts(model, groups):
    """Gives each DeepSpeed MoE layer the expert group (module docstring). Returns the names of
    the dealt expert parameters; none without such layers or at ep_size 1."""
    ep, rank = groups.expert_parallel_size, groups.expert_parallel_rank
    dealt = []
    for name, layer in native_layers(model):
        if layer.ep_size != ep:
            raise ValueError(f"{name} (deepspeed.moe.layer.MoE) has ep_size {layer.ep_size}, "
                             f"the engine's expert groups have {ep} ranks")
        if ep == 1:
            continue
        if groups.tensor_parallel_size > 1 or groups.sequence_parallel_size > 1:
            raise ValueError(f"{name} (deepspeed.moe.layer.MoE) with ep_size {ep} beside tensor "
                             "or sequence parallelism is not built; set those to 1")
        moe = layer.deepspeed_moe
        experts = moe.experts
        experts.deepspeed_experts = _DealtExperts(list(experts.deepspeed_experts),
                                                  rank * layer.num_local_experts)
        prefix = f"{name}.deepspeed_moe.experts." if name else "deepspeed_moe.experts."
        dealt += [prefix + n for n, _ in experts.named_parameters()]
        moe.forward = _forward(groups, moe)
    return dealt
