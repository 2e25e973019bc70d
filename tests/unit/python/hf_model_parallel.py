"""One rank of a sequence-, tensor- or expert-parallel run of a Hugging Face causal LM (ztrun
starts it).

A tiny random ``LlamaForCausalLM`` or ``Qwen3ForCausalLM`` (8 heads over 4 key/value heads,
or 2 for llama-kv2, or 6 over 3 for llama-uneven, which a group of 2 splits unevenly, as it does
its MLP of 91 features; Qwen3's q/k norms act on split heads) trained by ``zerotorch.initialize``
with the config's ``sequence_parallel_size`` and ``tensor_parallel`` block, at a mesh of data x
sequence x tensor ranks, must train like plain single-process ``torch.optim.AdamW`` on the same
global batches, fp32, with the Trainer's "auto" values (clipping 1.0, accumulation): the
per-step loss of each data-parallel batch within 1e-5, and the final parameters (tensor slices
joined) within 3e-5 of each tensor's norm (1e-7 with SGD, below). A tiny ``MixtralForCausalLM`` or
``Qwen2MoeForCausalLM`` (4 experts, top 2; Qwen2-MoE's shared expert; qwen2_moe16: 16 experts,
top 1, so that some expert often gets no row on any rank) trains the same way with the
``expert_parallel`` block (``ep<N>`` in SPLIT, borrowed from the data-parallel ranks: each holds
4 / N experts of every layer, its tokens exchanged with the others). Rows are padded unevenly on
the right and 13 positions long, so a sequence split pads them too. ``split_sequence`` and
``causal_lm_loss`` feed every split the same way.

usage: hf_model_parallel.py MODEL SPLIT PLAN STAGE ACC OUT [checks] [+ ...]
  MODEL llama|llama-kv2|llama-uneven|qwen3|mixtral|qwen2_moe|qwen2_moe16; SPLIT
  dp<N>_sp<N>_tp<N>_ep<N> (a
  part left out is 1; ep divides dp);
  PLAN hf (the model's tp_plan), preset (preset_model "llama"), patterns (partition_config);
  checks: save16: the 16-bit model, written by every rank, holds the whole weights; sgd: SGD at
  lr 0.5 instead of AdamW, parameters within 1e-7 of each tensor's norm (AdamW amplifies
  rounding differences where a gradient is near zero; SGD shows the gradients themselves);
  device: the model on the host-backed test device (zttest), the reference on the CPU; unrouted:
  stage 3 counted experts it did not gather because no rank routed to them.
  MODEL refuse: the one-line errors (heads that do not split, an eager attention, a model with
  no plan, a model without experts); SPLIT then names the split to refuse at.
"""

import copy
import os
import re
import sys
import types

import torch

import zerotorch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from case_list import run_each  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_equivalence  # noqa: E402

STEPS, MICRO, SEQ, VOCAB, LR, WD, SGD_LR = 4, 2, 13, 96, 2e-3, 0.01, 0.5


def tiny(kind, heads=8, kv_heads=4, attn="sdpa", hidden=64, inter=96):
    import transformers
    torch.manual_seed(0)
    if kind == "llama-kv2":  # fewer key/value heads than a group of 4: replicated
        kind, kv_heads = "llama", 2
    if kind == "llama-uneven":  # 3 key/value heads over 2 ranks: 2 and 1, with 4 and 2 heads;
        # at tp 2 the MLP's 91 features split 46 and 45
        kind, heads, kv_heads, hidden, inter = "llama", 6, 3, 48, 91
    common = dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter,
                  num_hidden_layers=2,
                  num_attention_heads=heads, num_key_value_heads=kv_heads,
                  max_position_embeddings=64, attn_implementation=attn)
    experts, top = (16, 1) if kind == "qwen2_moe16" else (4, 2)
    if kind == "qwen2_moe16":
        kind = "qwen2_moe"
    if kind in ("mixtral", "qwen2_moe"):
        moe = dict(num_experts_per_tok=top, output_router_logits=False, **common)
        if kind == "mixtral":
            return transformers.MixtralForCausalLM(transformers.MixtralConfig(
                num_local_experts=4, **moe))
        moe.pop("intermediate_size")
        return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            num_experts=experts, moe_intermediate_size=inter, shared_expert_intermediate_size=inter,
            intermediate_size=inter, norm_topk_prob=False, **moe))
    if kind == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=hidden // heads,
                                                                      **common))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))


def mesh(split):
    sizes = {"dp": 1, "sp": 1, "tp": 1, "ep": 1}
    for part in split.split("_"):
        m = re.fullmatch(r"(dp|sp|tp|ep)(\d+)", part)
        assert m, split
        sizes[m.group(1)] = int(m.group(2))
    return sizes


def ds_config(stage, sp, tp, plan, ep=1):
    """hf_equivalence.py's Hugging Face-style config (every Trainer value "auto"), fp32, with the
    sequence, tensor and expert splits."""
    config = hf_equivalence.ds_config(stage, "fp32", "none", "")
    config["sequence_parallel_size"] = sp
    if ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": ep}
    if tp > 1:
        block = {"autotp_size": tp}
        if plan == "preset":
            block["preset_model"] = "llama"
        elif plan == "patterns":
            block["partition_config"] = {"use_default_specs": False, "layer_specs": [
                {"patterns": [r".*\.(o|down)_proj\.weight$"], "partition_type": "row"},
                {"patterns": [r".*\.([qkv]|gate|up)_proj\.weight$"],
                 "partition_type": "column"}]}
        config["tensor_parallel"] = block
    return config


def trainer_args(acc):
    return types.SimpleNamespace(per_device_train_batch_size=MICRO, gradient_accumulation_steps=acc,
                                 max_grad_norm=1.0, fp16=False, bf16=False, learning_rate=LR,
                                 adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                                 weight_decay=WD, warmup_steps=0, warmup_ratio=0.0,
                                 max_steps=STEPS, lr_scheduler_type="constant")


def refuse(split):
    """Each bad setting stops zerotorch.initialize with one line naming it, on every rank."""
    sizes = mesh(split)
    cases = []
    if sizes["tp"] > 1:
        # One key/value head over the tensor group.
        cases.append((tiny("llama", heads=4, kv_heads=1), "hf", "are fewer than the ranks"))
        cases.append((torch.nn.Sequential(torch.nn.Linear(4, 4)), "hf",
                      "has no Hugging Face tp_plan"))
    if sizes["sp"] > 1:
        cases.append((tiny("llama", attn="eager"), "hf", "attn_implementation 'eager'"))
    if sizes["ep"] > 1:
        # A model whose MLPs hold no experts.
        cases.append((tiny("llama"), "hf", "has no experts module"))
    if sizes["sp"] > 2:
        # Three key/value heads over a group of 4: fewer than the ranks and not dividing them.
        cases.append((tiny("llama", heads=6, kv_heads=3, hidden=48), "hf", "do not split over"))
    for model, plan, words in cases:
        try:
            zerotorch.initialize(model=model, training_args=trainer_args(1),
                                 config=ds_config(1, sizes["sp"], sizes["tp"], plan,
                                                  sizes["ep"]))
        except ValueError as e:
            assert words in str(e) and "\n" not in str(e), str(e)
        else:
            raise AssertionError(f"not refused: {words}")


def run_case(argv):
    kind, split, plan, stage, acc, out = argv[:6]
    stage, acc = int(stage), int(acc)
    checks = set(argv[6:])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if kind == "refuse":
        refuse(split)
        print(f"rank {os.environ.get('RANK')}: {' '.join(argv)}: equal", flush=True)
        return
    sizes = mesh(split)
    dp, sp, tp, ep = sizes["dp"], sizes["sp"], sizes["tp"], sizes["ep"]
    assert dp * sp * tp == world and dp % ep == 0, (split, world)
    model = tiny(kind)
    if "device" in checks and kind.startswith(("mixtral", "qwen2_moe")) and ep == 1:
        # transformers' default experts kernel (grouped_mm) counts rows with an integer histc
        # on any device but the CPU and MPS, which the host-backed test device runs with the
        # CPU's kernel, which has none: the experts loop instead, on both sides.
        model.set_experts_implementation("eager")
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(STEPS * acc):
        ids = torch.randint(1, VOCAB, (MICRO * dp, SEQ), generator=g)
        lengths = torch.randint(7, SEQ + 1, (MICRO * dp,), generator=g)
        mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        labels = ids.masked_fill(mask == 0, -100)
        data.append((ids, mask, labels))

    sgd = "sgd" in checks
    config = ds_config(stage, sp, tp, plan, ep)
    if sgd:
        config["optimizer"] = {"type": "SGD", "params": {"lr": SGD_LR, "momentum": 0.0,
                                                         "weight_decay": 0.0}}
    engine, _, _, _ = zerotorch.initialize(model=model, training_args=trainer_args(acc),
                                           config=config,
                                           device="zttest" if "device" in checks else "cpu")
    assert (engine.data_parallel_size, engine.sequence_parallel_size,
            engine.tensor_parallel_size, engine.expert_parallel_size) == (dp, sp, tp, ep)
    rank = engine.global_rank
    d = engine.data_parallel_rank

    def part(i):
        ids, mask, labels = (t[d * MICRO:(d + 1) * MICRO] for t in data[i])
        return zerotorch.split_sequence(
            {"input_ids": ids.to(engine.device), "attention_mask": mask.to(engine.device),
             "labels": labels.to(engine.device)}, engine)

    losses = []
    for i in range(STEPS * acc):
        b = part(i)
        logits = engine(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                        position_ids=b["position_ids"]).logits
        loss = zerotorch.causal_lm_loss(logits, b["shift_labels"], engine)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    assert engine.global_steps == STEPS, engine.global_steps
    if sp > 1:
        # What the attention hands a flash kernel: every part's position ids, joined.
        joined = engine.model_parallel.gather_over_sequence(part(0)["position_ids"])
        want_ids = torch.arange(joined.shape[1], device=joined.device).expand(MICRO, -1)
        assert torch.equal(joined.long(), want_ids), joined

    opt = torch.optim.SGD(reference.parameters(), lr=SGD_LR) if sgd else torch.optim.AdamW(
        reference.parameters(), lr=LR, weight_decay=WD, eps=1e-8)
    ref_losses = []
    least = {}  # each element's smallest |gradient| over the steps, as the optimizer took it
    for s in range(STEPS):
        opt.zero_grad()
        for m in range(acc):
            ids, mask, labels = data[s * acc + m]
            for r in range(dp):
                rows = slice(r * MICRO, (r + 1) * MICRO)
                loss = reference(input_ids=ids[rows], attention_mask=mask[rows],
                                 labels=labels[rows]).loss
                (loss / (acc * dp)).backward()
                if r == d:
                    ref_losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        for pname, param in reference.named_parameters():
            g = param.grad.detach().abs()
            least[pname] = g if pname not in least else torch.minimum(least[pname], g)
        opt.step()
    for a, b in zip(losses, ref_losses):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (losses, ref_losses)

    split_dims = engine._engine.tensor_split_params
    assert bool(split_dims) == (tp > 1 or ep > 1), split_dims
    if ep > 1:  # each rank holds E / ep experts of every layer
        assert all(n.endswith(("experts.gate_up_proj", "experts.down_proj")) for n in split_dims)
        held = [p for n, p in model.named_parameters() if n in split_dims]
        experts = 16 if kind == "qwen2_moe16" else 4
        assert held and all(p.shape[0] == experts // ep for p in held), [p.shape for p in held]
    if "unrouted" in checks:
        # Stage 3 left out of its gathers the experts no rank of their group routed rows to.
        traffic = engine.gather_traffic
        assert 0 < traffic["unrouted_bytes"] < traffic["gathered_bytes"], traffic
    groups = engine.model_parallel
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        got = {n: (groups.join_over_split_group(p.detach(), split_dims[n]) if n in split_dims
                   else p.detach().clone()).cpu() for n, p in model.named_parameters()}
    # AdamW: within 3e-5 of each tensor's norm. The split model computes the same sums in
    # another order (row-split layers add partial products; attention over the gathered sequence
    # runs without the padding mask, whose kernel rounds differently), so its gradients differ
    # from one process's by rounding (about 1e-10 here). Where an element's gradient is near
    # Adam's eps (1e-8) its step, lr g / (|g| + eps), turns with that rounding (d step / d g is
    # lr / eps there, 2e5): measured 5.0e-5 of an element whose gradient fell to 3e-9 (Qwen3 tp2,
    # stage 2, on an AVX-512 CPU; 2.5e-5 elsewhere). Such an element, whose |gradient| fell below
    # 10 eps at some step (where the sensitivity is at most lr / (100 eps)), is held to what its
    # steps can move, 2 lr each. With SGD (the sgd check) every element of the same runs agrees
    # within 1e-7 of its tensor's norm (measured 3e-8): the gradients are one process's.
    worst = 0.0
    for name, want in reference.named_parameters():
        want = want.detach()
        diff = (got[name] - want).abs()
        bound = (1e-7 if sgd else 3e-5) * max(1.0, want.norm().item())
        if not sgd:
            near_eps = least[name] < 10 * 1e-8
            assert (diff[near_eps] <= 2 * LR * STEPS).all(), name
            diff = diff.masked_fill(near_eps, 0.0)
        diff = diff.max().item()
        worst = max(worst, diff / bound)
        assert diff <= bound, f"{name}: max |diff| {diff}, bound {bound}"
    print(f"rank {rank}: {split} stage {stage}: max |diff| / bound {worst:.2f}", flush=True)

    if "save16" in checks:
        import transformers
        target = os.path.join(out, "hf16")
        if rank == 0:
            model.config.save_pretrained(target)
        name = "model.safetensors" if stage == 3 else "pytorch_model.bin"
        assert engine.save_16bit_model(target, name)
        loaded = type(reference).from_pretrained(target, dtype=torch.float32)
        for n, p in loaded.named_parameters():
            assert torch.equal(p.detach(), got[n]), n
    engine.destroy()
    print(f"rank {rank}: {' '.join(argv)}: equal", flush=True)


if __name__ == "__main__":
    if "device" in sys.argv:
        # Before this process's first backward: autograd sizes its per-device threads once.
        zerotorch.devices.resolve_device("zttest")
    run_each(run_case)
