"""One rank of a zerotorch-vs-torch run of a Hugging Face causal LM (ztrun starts it).

A tiny random ``LlamaForCausalLM``, ``GPT2LMHeadModel`` (tied embeddings), or mixture of experts
(``MixtralForCausalLM``, ``Qwen2MoeForCausalLM``: each rank's tokens routed its own way, the
load-balancing loss of each rank's batch added as transformers adds it) trained by
``zerotorch.initialize`` from a Hugging Face-style DeepSpeed config, every value the Trainer fills
left "auto" and resolved from TrainingArguments' field names and ``model.config.hidden_size``,
must end with the parameters of plain single-process ``torch.optim.AdamW`` training on the same
global batches: fp32 within 1e-5; bf16 and fp16 (fp32 masters) within what 16-bit forward and
backward rounding allows, stated below. Then, when asked: a checkpoint resumes bit-identically;
the 16-bit model reloads with ``from_pretrained``; ``GatheredParameters(modifier_rank=0)``
changes a weight on every rank.

usage: hf_equivalence.py MODEL STAGE ACC DTYPE OFFLOAD GC OUT [checks...] [+ MODEL STAGE ...]
  Several cases separated by "+" run in the same ranks (tests/support/case_list.py); each
  prints its own "equal" line.
  MODEL llama|gpt2|mixtral|qwen2_moe, DTYPE fp32|bf16|fp16, OFFLOAD none|cpu|cpu_all|nvme|nvme_all,
  GC none|nonreentrant|reentrant (gradient_checkpointing_enable), OUT a scratch directory,
  checks: resume, save16, modify; decoupled: the resume check saves in the background
  (checkpoint.writer.decoupled), and the step after the save runs while the write is in flight;
  lora: only the attention's query and value projections train (LoRA's usual targets, here the
  whole matrices), everything else frozen, so every unit holds frozen parameters and some units
  only frozen ones; qfrozen (with lora): zero_quantized_nontrainable_weights, and the reference
  then trains the model with the frozen weights the engine computes with, each within half a
  quantization step (max |x| / 254 of the whole frozen buffer, which bounds its blocks') of the
  original
"""

import copy
import os
import sys
import types

import torch

import zerotorch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from case_list import run_each  # noqa: E402

STEPS, MICRO, SEQ, VOCAB, LR, WD = 4, 2, 12, 96, 2e-3, 0.01


def tiny(kind):
    import transformers
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=3, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(cfg)
    elif kind in ("mixtral", "qwen2_moe"):
        # Experts fused into one parameter per projection (transformers 5), the load-balancing
        # loss on (output_router_logits) at its default weight; Qwen2-MoE with a shared expert and
        # layer 1 dense.
        common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      num_experts_per_tok=2, output_router_logits=True)
        if kind == "mixtral":
            cfg = transformers.MixtralConfig(num_local_experts=4, **common)
        else:
            cfg = transformers.Qwen2MoeConfig(num_experts=4, moe_intermediate_size=24,
                                              shared_expert_intermediate_size=40,
                                              mlp_only_layers=[1], **common)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    # Routers far from ties, so rounding never flips an expert choice.
                    p.normal_(0.0, 0.5)
    else:
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4,
                                      n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
    return model


def ds_config(stage, dtype, offload, nvme_dir, decoupled=False, qfrozen=False):
    """The shape of the Hugging Face integration's ZeRO configs (ds_config_zero2/3.json), without
    the scheduler block, so the learning rate is constant as torch's AdamW below."""
    zero = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True,
            "reduce_bucket_size": "auto"}
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": "auto",
                     "stage3_param_persistence_threshold": "auto",
                     "stage3_gather_16bit_weights_on_model_save": True})
        if qfrozen:
            zero["zero_quantized_nontrainable_weights"] = True
    if offload != "none":
        device = "nvme" if offload.startswith("nvme") else "cpu"
        block = {"device": device, "pin_memory": True}
        if device == "nvme":
            block["nvme_path"] = nvme_dir
        zero["offload_optimizer"] = dict(block)
        if offload.endswith("_all"):
            zero["offload_param"] = dict(block)
    return {
        "fp16": {"enabled": "auto"},
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                  "weight_decay": "auto"}},
        "zero_optimization": zero,
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "steps_per_print": 1000,
        "wall_clock_breakdown": False,
        "checkpoint": {"writer": {"decoupled": decoupled}},
    }


def run_case(argv):
    kind, stage, acc, dtype, offload, gc, out = argv[:7]
    stage, acc = int(stage), int(acc)
    checks = set(argv[7:])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    os.makedirs(os.path.join(out, "nvme"), exist_ok=True)
    model = tiny(kind)
    if "lora" in checks:
        for name, p in model.named_parameters():
            p.requires_grad_(name.endswith(("q_proj.weight", "v_proj.weight", "c_attn.weight")))
    reference = copy.deepcopy(model)
    original = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (MICRO * world, SEQ), generator=g)
            for _ in range(STEPS * acc)]
    if gc != "none":
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": gc == "reentrant"})

    # TrainingArguments' field names (the Trainer's "auto" sources).
    args = types.SimpleNamespace(per_device_train_batch_size=MICRO,
                                 gradient_accumulation_steps=acc, max_grad_norm=1.0,
                                 fp16=dtype == "fp16", bf16=dtype == "bf16", learning_rate=LR,
                                 adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                                 weight_decay=WD, warmup_steps=0, warmup_ratio=0.0,
                                 max_steps=STEPS, lr_scheduler_type="constant")
    engine, _, _, _ = zerotorch.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
        training_args=args,
        config=ds_config(stage, dtype, offload, os.path.join(out, "nvme"),
                         decoupled="decoupled" in checks, qfrozen="qfrozen" in checks))
    rank = engine.global_rank
    assert engine.world_size == world
    if stage == 3:
        # The decoder layers, and every other module holding parameters of its own; the tied
        # GPT-2 embedding and head stay with the root. A mixture's experts are a routed unit
        # inside their layer, gathered once routed.
        def routed(i):  # Qwen2-MoE's mlp_only_layers keep a dense MLP
            return hasattr(getattr(model.model.layers[i], "mlp", None), "experts")
        want = (["model.embed_tokens"]
                + [u for i in range(3) for u in [f"model.layers.{i}"]
                   + ([f"model.layers.{i}.mlp.experts"] if routed(i) else [])]
                + ["model.norm", "lm_head"] if kind != "gpt2" else
                ["transformer.wpe"] + [f"transformer.h.{i}" for i in range(3)]
                + ["transformer.ln_f"])
        assert engine.units == want, engine.units

    if "qfrozen" in checks:
        with zerotorch.zero.GatheredParameters(list(model.parameters())):
            computed = {n: p.detach().clone() for n, p in model.named_parameters()
                        if not p.requires_grad}
        step = max(t.abs().max().item() for t in original.values()) / 127
        moved = 0
        for n, t in computed.items():
            err = (t - original[n]).abs().max().item()
            assert err <= step / 2 * (1 + 1e-5), (n, err, step)
            moved += err > 0
        assert moved, "no frozen weight was quantized"
        with torch.no_grad():
            for n, p in reference.named_parameters():
                if n in computed:
                    p.copy_(computed[n])

    def batch(i):
        return data[i][rank * MICRO:(rank + 1) * MICRO]

    losses = []
    for i in range(STEPS * acc):
        ids = batch(i)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    assert engine.global_steps == STEPS, engine.global_steps

    trainable = [p for p in reference.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, weight_decay=WD, eps=1e-8)
    ref_losses = []
    for s in range(STEPS):
        opt.zero_grad()
        for m in range(acc):
            ids = data[s * acc + m]
            for r in range(world):
                part = ids[r * MICRO:(r + 1) * MICRO]
                loss = reference(input_ids=part, labels=part).loss
                (loss / (acc * world)).backward()
                if r == rank:
                    ref_losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()

    # fp32: the same arithmetic up to summation order. bf16 (about 3 significant digits) and
    # fp16 (about 4, with dynamic loss scaling): forward and backward in 16 bits. An Adam update
    # is at most about LR in size whatever the gradient's scale, so where rounding flips a small
    # gradient's sign a parameter moves by up to 2 LR a step: every parameter lies within
    # 2 * STEPS * LR (plus a bf16 ulp) of the fp32 result, and on average within LR / 4 (a
    # parameter left untrained is 1-2 LR off). Losses agree within 2%.
    fp32 = dtype == "fp32"
    for a, b in zip(losses, ref_losses):
        assert abs(a - b) <= (1e-5 if fp32 else 0.02 * abs(b)), (losses, ref_losses)
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        got = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    total, count = 0.0, 0
    for name, want in reference.named_parameters():
        want = want.detach()
        if fp32:
            torch.testing.assert_close(got[name], want, rtol=0, atol=1e-5,
                                       msg=lambda m, n=name: f"{n}: {m}")
        else:
            diff = (got[name] - want).abs()
            tol = 2 * STEPS * LR + want.abs() * 2 ** -8
            assert bool((diff <= tol).all()), f"{name}: max diff {diff.max().item()}"
            total, count = total + diff.sum().item(), count + diff.numel()
    if not fp32:
        print(f"rank {rank}: {dtype} mean |diff| {total / count:.2e}", flush=True)
        assert total / count <= LR / 4, total / count

    if "resume" in checks:
        ckpt = os.path.join(out, "ckpt")
        engine.save_checkpoint(ckpt, client_state={"losses": losses})

        def one_step():
            for m in range(acc):
                ids = batch(m)
                engine.backward(engine(input_ids=ids, labels=ids).loss)
                engine.step()
            with zerotorch.zero.GatheredParameters(list(model.parameters())):
                return [p.detach().clone() for p in model.parameters()]

        first = one_step()
        _, client = engine.load_checkpoint(ckpt)
        assert client["losses"] == losses and engine.global_steps == STEPS
        second = one_step()
        for a, b in zip(first, second):
            assert torch.equal(a, b)

    if "save16" in checks:
        import transformers
        target = os.path.join(out, "hf16")
        if rank == 0:
            model.config.save_pretrained(target)
        # Stage 3 streams a safetensors file unit by unit; below it, DeepSpeed's default name:
        # a torch.save state dict.
        name = "model.safetensors" if stage == 3 else "pytorch_model.bin"
        assert engine.save_16bit_model(target, name)
        assert os.path.exists(os.path.join(target, name))
        with zerotorch.zero.GatheredParameters(list(model.parameters())):
            now = {n: p.detach().clone() for n, p in model.named_parameters()}
        cls = type(model)
        loaded = cls.from_pretrained(target, dtype=next(iter(now.values())).dtype)
        for n, p in loaded.named_parameters():
            assert torch.equal(p.detach(), now[n]), n

    if "modify" in checks:
        name, p = next(iter(model.named_parameters()))
        with zerotorch.zero.GatheredParameters([p], modifier_rank=0):
            if rank == 0:
                p.data.fill_(0.25)
        ids = batch(0)
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        with zerotorch.zero.GatheredParameters([p]):
            assert bool((p.detach() == 0.25).all()), name
    engine.destroy()
    print(f"rank {rank}: {' '.join(argv)}: equal", flush=True)


if __name__ == "__main__":
    run_each(run_case)
