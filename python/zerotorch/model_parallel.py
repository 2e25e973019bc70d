"""Sequence and tensor parallelism for a Python model (a ``transformers`` model, or any module
whose layers a plan names), split before the C++ engine lays its parameters out.

Sequence parallelism (DeepSpeed's Ulysses, ``sequence_parallel_size``): the attention function
the model calls is wrapped, as DeepSpeed's ``UlyssesSPAttentionHF.register_with_transformers``
does, so that each rank's q, k, v of its positions are traded for every position of its heads
(one all-to-all), attention runs over the whole sequence, and the result is traded back. As in
DeepSpeed the attention is causal over the gathered sequence and the model's attention mask is
dropped (right padding only affects padded positions, which the loss ignores); key/value heads
fewer than the group are replicated, and a count the group does not divide is split unevenly,
whole key/value heads with their query heads (DeepSpeed's DistributedAttention does so; its
Hugging Face wrapper refuses it). ``split_sequence`` gives a rank its part of a batch and
``causal_lm_loss`` the loss one process would compute.

Tensor parallelism (DeepSpeed's AutoTP training, the ``tensor_parallel`` block): the linear layers
a plan names are cut over the tensor group, column-split ones keeping their slice of the output
features (their input's gradient summed over the group), row-split ones their slice of the input
features (their outputs summed over the group, the bias added once), in whole key/value heads
(with their query heads) for attention, the first ranks one more where the group does not divide
them, and one by one for the MLP, as DeepSpeed's AutoTP deals them. The plan is, as DeepSpeed
chooses it: ``partition_config`` (with ``preset_model``'s specs after it unless
``use_default_specs`` is false), else ``preset_model``, else the model's Hugging Face
``tp_plan``. Embeddings, norms and the output head stay whole on every
rank (a ``colwise_gather_output`` head computes the same whole logits that way), and
``replicated_with_grad_allreduce`` parameters (Qwen3's q/k norms, applied to split heads) get
their gradient summed over the group. The engine then shards the slices over the ranks of their
tensor index and checkpoints record the split (core/checkpoint/format.h).

Expert parallelism (DeepSpeed's AutoEP, the ``expert_parallel`` block with ``autoep_size`` > 1):
each ``transformers`` 5 experts module (fused ``gate_up_proj`` (E, 2I, C) and ``down_proj``
(E, C, I), as Mixtral's, Qwen2-MoE's and Qwen3-MoE's hold them) keeps its rank's E / ep experts,
and its forward sends each routed row to the rank holding its expert and takes the outputs back
(the C++ exchange, parallel/expert_exchange.h), computing what the module computes on one rank:
the same experts, the same weights, the sums in ascending expert order. The router and the rest
of the model stay whole; each rank reads its own batches.
"""

import functools
import re
import warnings

import torch

from . import native_moe as _native_moe

# DeepSpeed's AutoTP presets (deepspeed/module_inject/autotp_config.py, AutoTPPresets): the
# LLaMA family's split, which Qwen2 shares.
_LLAMA_PRESET = [
    {"patterns": [r".*\.self_attn\.o_proj\.weight$"], "partition_type": "row"},
    {"patterns": [r".*\.self_attn\.[qkv]_proj\.weight$"], "partition_type": "column"},
    {"patterns": [r".*\.mlp\.down_proj\.weight$"], "partition_type": "row"},
    {"patterns": [r".*\.mlp\.(up|gate)_proj\.weight$"], "partition_type": "column"},
]
_PRESETS = {"llama": _LLAMA_PRESET, "qwen2": _LLAMA_PRESET}

# Hugging Face tp_plan styles, as DeepSpeed's TPPlanConverter reads them: (split, whole output).
_HF_STYLES = {"colwise": ("column", False), "colwise_rep": ("column", True),
              "colwise_gather_output": ("column", True), "rowwise": ("row", False),
              "embedding_rowwise": ("skip", False),
              "replicated_with_grad_allreduce": ("skip_sum", False)}


class _Spec:
    def __init__(self, patterns, kind, whole_output=False, where="partition_config"):
        self.patterns = [re.compile(p) for p in patterns]
        self.kind = kind  # "column", "row", "skip", "skip_sum"
        self.whole_output = whole_output
        self.where = where

    def matches(self, name):
        return any(p.match(name) for p in self.patterns)


def _specs_from_partition_config(block, model_type):
    specs = []
    for i, spec in enumerate(block.get("layer_specs", [])):
        where = f"tensor_parallel.partition_config.layer_specs[{i}]"
        for key in ("shape", "partition_dim"):
            if spec.get(key) is not None:
                raise ValueError(f"{where}.{key}: sub-parameter and reshaped splits are not "
                                 "supported; split whole output (column) or input (row) features")
        types = spec.get("model_types")
        if types and model_type not in types:
            continue
        kind = str(spec.get("partition_type", "column")).lower()
        if kind not in ("column", "row", "skip"):
            raise ValueError(f"{where}.partition_type: {kind!r} is not column, row or skip")
        if kind == "skip" and spec.get("grad_allreduce"):
            kind = "skip_sum"
        specs.append(_Spec(spec.get("patterns", []), kind, bool(spec.get("gather_output")),
                           where))
    return specs


def _hf_tp_plan(model):
    """The model's Hugging Face tp_plan, merged from its config, class and instance as DeepSpeed's
    ``_get_hf_tp_plan`` does."""
    config = getattr(model, "config", None)
    merged, seen = {}, set()
    plans = (getattr(config, "base_model_tp_plan", None), getattr(type(model), "_tp_plan", None),
             getattr(model, "__dict__", {}).get("_tp_plan"))
    for plan in plans:
        if not isinstance(plan, dict):
            continue
        for pattern, style in plan.items():
            canonical = pattern[len("model."):] if pattern.startswith("model.") else pattern
            if pattern.startswith("model.") and canonical in seen:
                continue
            merged[pattern] = style
            seen.add(canonical)
    return merged


def _specs_from_hf_plan(plan):
    unknown = sorted({s for s in plan.values() if s.lower() not in _HF_STYLES})
    if unknown:
        raise ValueError(f"tensor_parallel: the model's tp_plan has styles {unknown} that are not "
                         "supported; give tensor_parallel.partition_config for this model")
    specs = []
    for pattern, style in plan.items():
        regex = ".*" + pattern.replace(".", r"\.").replace("*", ".*")
        regex += "$" if regex.endswith(r"\.weight") else r"\.weight$"
        kind, whole = _HF_STYLES[style.lower()]
        specs.append(_Spec([regex], kind, whole, f"tp_plan[{pattern!r}]"))
    return specs


def _plan(model, groups):
    """The layer specs of this model and config, in DeepSpeed's order of precedence, and whether
    they came from partition_config."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    preset = groups.preset_model
    custom = None
    if groups.partition_config:
        import json
        custom = json.loads(groups.partition_config)
    if custom is not None:
        specs = _specs_from_partition_config(custom, model_type)
        if preset and custom.get("use_default_specs", True):
            specs += [_Spec(s["patterns"], s["partition_type"], where=f"preset {preset}")
                      for s in _PRESETS[preset]]
        return specs, True, bool(custom.get("strict_mode", False))
    if preset:
        return [_Spec(s["patterns"], s["partition_type"], where=f"preset {preset}")
                for s in _PRESETS[preset]], False, False
    plan = _hf_tp_plan(model)
    if not plan:
        raise ValueError(
            f"tensor_parallel.autotp_size {groups.tensor_parallel_size}: the model has no Hugging "
            "Face tp_plan; set tensor_parallel.preset_model or tensor_parallel.partition_config")
    return _specs_from_hf_plan(plan), False, False


def _column_forward(groups):
    def forward(self, x):
        return torch.nn.functional.linear(groups.enter_tensor_group(x), self.weight, self.bias)
    return forward


def _row_forward(groups):
    def forward(self, x):
        y = groups.leave_tensor_group(torch.nn.functional.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
    return forward


def _slices(size, parts, groups):
    """DeepSpeed AutoTP's extents of `size` features over `parts` ranks (tp_shard.py's
    get_shard_size; dist::split_sizes in parallel/tensor_parallel.h): `groups` equal groups dealt
    out, the first ranks one more where `parts` does not divide them."""
    return [(groups // parts + (r < groups % parts)) * (size // groups) for r in range(parts)]


def _cut(param, dim, rank, sizes):
    first = sum(sizes[:rank])
    piece = param.detach().narrow(dim, first, sizes[rank]).clone()
    return torch.nn.Parameter(piece, requires_grad=param.requires_grad)


def _groups_of(model, name, size, tp):
    """How `size` features of layer `name` split, as DeepSpeed's AutoTP decides: in whole key/value
    heads (with their query heads) for a layer outside the MLP and the head whose features are
    whole heads, else one by one."""
    text = getattr(model, "config", None)
    text = text.get_text_config() if hasattr(text, "get_text_config") else text
    kv = getattr(text, "num_key_value_heads", None) or getattr(text, "num_attention_heads", None)
    last = name.split(".")[-1]
    if kv and size % kv == 0 and "mlp" not in name and last not in ("lm_head", "embed_out"):
        if kv < tp:
            raise ValueError(f"tensor_parallel.autotp_size {tp}: the model's {kv} key/value heads "
                             "are fewer than the ranks (each rank keeps at least one whole head)")
        return kv
    if size < tp:
        raise ValueError(f"tensor_parallel.autotp_size {tp}: {name} has {size} features, fewer "
                         "than the ranks")
    return size


def split_layers(model, groups):
    """Cuts the model's linear layers over the tensor group by the plan (module docstring).
    Returns ({parameter name: split dimension}, whether partition_config was applied)."""
    tp, rank = groups.tensor_parallel_size, groups.tensor_parallel_rank
    specs, from_partition_config, strict = _plan(model, groups)
    split = {}
    for name, module in list(model.named_modules()):
        own = {n: p for n, p in module.named_parameters(recurse=False)}
        if "weight" not in own:
            continue
        pname = f"{name}.weight" if name else "weight"
        spec = next((s for s in specs if s.matches(pname)), None)
        if spec is None:
            if strict and isinstance(module, torch.nn.Linear):
                raise ValueError("tensor_parallel.partition_config.strict_mode: no layer spec "
                                 f"matches {pname}")
            continue
        if spec.kind == "skip":
            continue
        if spec.kind == "skip_sum":
            for p in own.values():
                if p.requires_grad:
                    p.register_hook(groups.sum_over_tensor_group)
            continue
        if not isinstance(module, torch.nn.Linear):
            raise ValueError(f"{spec.where}: {pname} belongs to a {type(module).__name__}; only "
                             "linear layers split (embeddings stay whole)")
        if spec.whole_output:
            continue  # a column split whose output is gathered again: the same as whole
        if spec.kind == "column":
            sizes = _slices(module.out_features, tp,
                            _groups_of(model, name, module.out_features, tp))
            module.weight = _cut(module.weight, 0, rank, sizes)
            split[pname] = 0
            if module.bias is not None:
                module.bias = _cut(module.bias, 0, rank, sizes)
                split[f"{name}.bias"] = 0
            module.out_features = sizes[rank]
            module.forward = _column_forward(groups).__get__(module)
        else:
            sizes = _slices(module.in_features, tp,
                            _groups_of(model, name, module.in_features, tp))
            module.weight = _cut(module.weight, 1, rank, sizes)
            split[pname] = 1
            module.in_features = sizes[rank]
            module.forward = _row_forward(groups).__get__(module)
    if not split:
        source = specs[0].where if specs else "empty"
        raise ValueError(f"tensor_parallel.autotp_size {tp}: the plan ({source}) matches no "
                         "linear layer of the model")
    return split, from_partition_config


def _expert_parallel_forward(groups, num_experts):
    """The experts module's forward over the expert group (the module docstring): rows out to
    their experts' ranks, each local expert over the rows every rank sent, outputs back. Rows
    leave through one index_select and arrive as pieces of one split, so the backward adds each
    gradient once (padding rows repeat row 0 and get a zero gradient: nobody reads them)."""
    ep, me = groups.expert_parallel_size, groups.expert_parallel_rank
    per = num_experts // ep

    def forward(self, hidden_states, top_k_index, top_k_weights):
        with torch.no_grad():
            # Index E (transformers' "no expert", masked routing) takes no row.
            counts = torch.bincount(top_k_index.reshape(-1), minlength=num_experts + 1)
            mine = counts[:num_experts].tolist()
            by_expert = top_k_index.t().cpu()
            routed = {}
            for e in range(num_experts):
                if mine[e]:
                    # (choice rank, token) in rank-major order: transformers' order.
                    routed[e] = torch.where(by_expert == e)
        every = groups.gather_expert_counts(mine)
        # Stage 3 (engine.py): gather the local experts that rows reach on some rank, only those.
        routed_gather = getattr(self, "_zt_routed_gather", None)
        if routed_gather is not None:
            routed_gather(torch.tensor([sum(every[s][me * per + local] for s in range(ep))
                                        for local in range(per)]))

        def run(s, j):
            return sum(every[s][j * per:(j + 1) * per])

        longest = max([1] + [run(s, j) for s in range(ep) for j in range(ep)])
        send_index = torch.zeros(ep * longest, dtype=torch.long)
        for j in range(ep):
            rows = [routed[e][1] for e in range(j * per, (j + 1) * per) if e in routed]
            if rows:
                rows = torch.cat(rows)
                send_index[j * longest:j * longest + rows.numel()] = rows
        arrived = groups.exchange_expert_rows(
            hidden_states.index_select(0, send_index.to(hidden_states.device)))
        pieces = arrived.split([n for s in range(ep) for n in
                                [every[s][me * per + l] for l in range(per)]
                                + [longest - run(s, me)]])
        back = [[] for _ in range(ep)]
        # One unbind per forward: its backward stacks the experts' gradients once, where
        # indexing each expert would fill a zero gradient of the whole parameter per expert.
        gate_ups, downs = self.gate_up_proj.unbind(0), self.down_proj.unbind(0)
        for local in range(per):
            rows = [pieces[s * (per + 1) + local] for s in range(ep)]
            gate, up = torch.nn.functional.linear(torch.cat(rows), gate_ups[local]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(self.act_fn(gate) * up, downs[local])
            for s, part in enumerate(y.split([r.shape[0] for r in rows])):
                back[s].append(part)
        width = hidden_states.shape[-1]
        returned = groups.exchange_expert_rows(torch.cat(
            [torch.cat(back[s] + [hidden_states.new_zeros(longest - run(s, me), width)])
             for s in range(ep)]))
        outs = returned.split([n for j in range(ep) for n in
                               [mine[e] for e in range(j * per, (j + 1) * per)]
                               + [longest - run(me, j)]])
        final = torch.zeros_like(hidden_states)
        for e, (pos, tok) in sorted(routed.items()):
            pos, tok = pos.to(hidden_states.device), tok.to(hidden_states.device)
            y = outs[(e // per) * (per + 1) + e % per] * top_k_weights[tok, pos, None]
            final.index_add_(0, tok, y.to(final.dtype))
        return final

    return forward


def fused_experts(module):
    """The number of experts ``module`` holds as transformers 5's fused ``gate_up_proj``
    (E, 2I, C) and ``down_proj`` (E, C, I) with its ``num_experts`` and ``act_fn``; None for a
    module without both parameters. ValueError for one that has them in another form."""
    own = dict(module.named_parameters(recurse=False))
    if "gate_up_proj" not in own or "down_proj" not in own:
        return None
    gate_up, down = own["gate_up_proj"], own["down_proj"]
    experts = getattr(module, "num_experts", None)
    if (experts is None or not hasattr(module, "act_fn") or gate_up.dim() != 3
            or down.dim() != 3 or gate_up.shape[0] != experts or down.shape[0] != experts
            or gate_up.shape[2] != down.shape[1] or gate_up.shape[1] != 2 * down.shape[2]):
        raise ValueError("does not hold its experts as transformers 5's fused gate_up_proj "
                         "(E, 2I, C) and down_proj (E, C, I)")
    return experts


def split_experts(model, groups):
    """Deals every experts module's experts over the expert group (module docstring). Returns
    {parameter name: 0} for the fused expert parameters."""
    ep, rank = groups.expert_parallel_size, groups.expert_parallel_rank
    split = {}
    for name, module in list(model.named_modules()):
        try:
            experts = fused_experts(module)
        except ValueError as e:
            raise ValueError(f"expert_parallel.autoep_size {ep}: {name} "
                             f"({type(module).__name__}) {e}") from None
        if experts is None:
            continue
        gate_up, down = module.gate_up_proj, module.down_proj
        if experts % ep:
            raise ValueError(f"expert_parallel.autoep_size {ep} does not divide the {experts} "
                             f"experts of {name}")
        per = experts // ep
        for pname, p in (("gate_up_proj", gate_up), ("down_proj", down)):
            cut = torch.nn.Parameter(p.detach()[rank * per:(rank + 1) * per].clone(),
                                     requires_grad=p.requires_grad)
            setattr(module, pname, cut)
            split[f"{name}.{pname}" if name else pname] = 0
        module.forward = _expert_parallel_forward(groups, experts).__get__(module)
    if not split:
        raise ValueError(f"expert_parallel.autoep_size {ep}: the model has no experts module "
                         "(fused gate_up_proj and down_proj, as transformers 5's MoE models)")
    return split


# The attention functions wrapped for sequence parallelism, by implementation name: the wrapper
# acts only for modules of a model that was split (they carry the groups), so other models in the
# process keep the function as it was.
_WRAPPED = {}


def _sequence_parallel_attention(core, module, query, key, value, attention_mask, *args,
                                 **kwargs):
    groups = getattr(module, "_zt_sequence_groups", None)
    if groups is None:
        return core(module, query, key, value, attention_mask, *args, **kwargs)
    sp = groups.sequence_parallel_size
    # (B, H, T/sp, D) -> (B, T/sp, H, D) -> exchange -> (B, T, H/sp, D) -> (B, H/sp, T, D)
    kv_heads = key.shape[1]
    if kv_heads < sp:
        # DeepSpeed's kv_replication_factor: each rank then receives the key/value head its
        # query heads read.
        key = key.repeat_interleave(sp // kv_heads, dim=1)
        value = value.repeat_interleave(sp // kv_heads, dim=1)
    # Uneven (key/value heads more than the ranks, not dividing them): whole key/value heads
    # with their query heads per rank, some ranks one more (DeepSpeed's DistributedAttention).
    kv_counts = [] if kv_heads % sp == 0 or kv_heads < sp else [
        kv_heads // sp + (r < kv_heads % sp) for r in range(sp)]
    q_counts = [n * (query.shape[1] // kv_heads) for n in kv_counts]
    q = groups.sequence_to_heads(query.transpose(1, 2), q_counts).transpose(1, 2)
    k = groups.sequence_to_heads(key.transpose(1, 2), kv_counts).transpose(1, 2)
    v = groups.sequence_to_heads(value.transpose(1, 2), kv_counts).transpose(1, 2)
    positions = kwargs.get("position_ids")
    if torch.is_tensor(positions) and positions.dim() == 2:
        # Over the gathered sequence, as DeepSpeed gives them: flash attention reads them to find
        # the sequences packed in a row (sdpa ignores them).
        kwargs = dict(kwargs, position_ids=groups.gather_over_sequence(positions))
    saved = getattr(module, "num_key_value_groups", None)
    if saved is not None:
        module.num_key_value_groups = q.shape[1] // k.shape[1]
    try:
        # The mask the model built covers this rank's positions only; over the gathered sequence
        # the attention is causal (DeepSpeed drops it the same way).
        out, weights = core(module, q, k, v, None, *args, **kwargs)
    finally:
        if saved is not None:
            module.num_key_value_groups = saved
    # out (B, T, H/sp, D) -> (B, T/sp, H, D)
    return groups.heads_to_sequence(out.contiguous(), q_counts), weights


def wrap_attention(model, groups):
    """Makes the model's attention sequence-parallel over the sequence group (module docstring)."""
    sp = groups.sequence_parallel_size
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl is None:
        raise ValueError(f"sequence_parallel_size {sp}: the model is not a transformers model "
                         "(no config._attn_implementation); its attention cannot be split")
    if impl in ("eager", "paged|eager"):
        raise ValueError(f"sequence_parallel_size {sp}: attn_implementation {impl!r} builds a "
                         "whole attention mask; load the model with attn_implementation=\"sdpa\" "
                         "(or a flash attention) as DeepSpeed's Ulysses requires")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kv = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    tp = groups.tensor_parallel_size
    # Each tensor rank's key/value heads (all of them without a tensor split).
    for kv_here in sorted(set(_slices(kv, tp, kv) if kv >= tp else [kv])):
        if kv_here < sp and sp % kv_here:
            raise ValueError(
                f"sequence_parallel_size {sp}: {kv_here} key/value heads"
                f"{' on a rank of a tensor group' if tp > 1 else ''} are fewer than the ranks and "
                f"do not split over {sp} ranks (each rank needs a whole or replicated key/value "
                "head)")
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    if impl not in _WRAPPED:
        _WRAPPED[impl] = ALL_ATTENTION_FUNCTIONS[impl]
        ALL_ATTENTION_FUNCTIONS[impl] = functools.partial(_sequence_parallel_attention,
                                                          _WRAPPED[impl])
    marked = 0
    for module in model.modules():
        if hasattr(module, "head_dim") and hasattr(module, "is_causal"):
            module._zt_sequence_groups = groups
            marked += 1
    if not marked:
        raise ValueError(f"sequence_parallel_size {sp}: no attention module found in the model")


def split_model(model, groups):
    """What ``zerotorch.initialize`` does to a model before the engine takes it, for the config's
    sequence_parallel_size, tensor_parallel and expert_parallel blocks."""
    out = {"sequence_parallel": False, "tensor_split": {}, "expert_split": {},
           "expert_dealt": [], "partition_config_applied": False}
    if groups.expert_parallel_size > 1:
        # DeepSpeed's own MoE layers deal their experts whole (native_moe.py); a transformers
        # model's fused experts are cut.
        out["expert_dealt"] = _native_moe.deal_native_experts(model, groups)
        if not out["expert_dealt"]:
            out["expert_split"] = split_experts(model, groups)
    if groups.tensor_parallel_size > 1:
        out["tensor_split"], out["partition_config_applied"] = split_layers(model, groups)
    elif groups.partition_config:
        warnings.warn("tensor_parallel.partition_config: no effect without autotp_size > 1")
        out["partition_config_applied"] = True
    if groups.sequence_parallel_size > 1:
        wrap_attention(model, groups)
        out["sequence_parallel"] = True
    return out


def split_sequence(batch, engine, pad_token_id=0):
    """This rank's part of a batch its sequence group shares (every rank of the group reads the
    same batch): input_ids and every other (batch, positions) tensor padded to a multiple of the
    group's size (input_ids with ``pad_token_id``, attention_mask with 0) and cut along the
    sequence; ``position_ids`` added when absent (0, 1, ... per row); ``labels`` replaced by
    ``shift_labels``, shifted before the cut (the next token's label, -100 at the end and on
    padding), as DeepSpeed's UlyssesSPDataLoaderAdapter makes them. Without sequence parallelism
    the same, uncut, so a script runs unchanged at any size."""
    sp = engine.sequence_parallel_size
    rank = engine.sequence_parallel_rank
    ids = batch["input_ids"]
    length = ids.shape[1]
    padded = -(-length // sp) * sp
    out = dict(batch)
    if "position_ids" not in out:
        out["position_ids"] = torch.arange(padded, device=ids.device).expand(ids.shape[0], -1)
    if "labels" in out:
        labels = out.pop("labels")
        out["shift_labels"] = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    fill = {"input_ids": pad_token_id, "shift_labels": -100, "attention_mask": 0}
    part = padded // sp
    for key, value in out.items():
        if not (torch.is_tensor(value) and value.dim() == 2 and value.shape[1] in (length, padded)):
            continue
        if value.shape[1] != padded:
            value = torch.nn.functional.pad(value, (0, padded - length), value=fill.get(key, 0))
        out[key] = value[:, rank * part:(rank + 1) * part].contiguous()
    return out


def causal_lm_loss(logits, shift_labels, engine):
    """The mean token cross-entropy of the batch the sequence group shares, as one process
    computes it on the whole batch: each rank's token-loss sum over the group's count of labelled
    tokens (so its gradient is this rank's share), reported as the whole batch's mean. With
    ``split_sequence``'s ``shift_labels``; without sequence parallelism, the usual mean."""
    flat = logits.float().reshape(-1, logits.shape[-1])
    labels = shift_labels.reshape(-1).to(flat.device)
    total = torch.nn.functional.cross_entropy(flat, labels, ignore_index=-100, reduction="sum")
    groups = engine.model_parallel
    count = (labels != -100).sum().to(torch.float32)
    if engine.sequence_parallel_size > 1:
        count = groups.sum_over_sequence(count)
    loss = total / count.clamp(min=1)
    if engine.sequence_parallel_size > 1:
        whole = groups.sum_over_sequence(loss.detach())
        loss = loss + (whole - loss.detach())
    return loss
