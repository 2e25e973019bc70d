"""One rank of a compiled-vs-eager run through the Python front door (ztrun starts it).

A tiny random ``LlamaForCausalLM`` trained by ``zerotorch.initialize`` twice from the same weights
and batches: eagerly, and compiled with the inductor backend, either by DeepSpeed's
``engine.compile()`` (``method``), by handing ``initialize`` a ``torch.compile``d model
(``wrapped``), or by ``TrainingArguments``' ``torch_compile`` given to ``initialize``
(``trainer``). Per-step losses agree within 1e-5 relative and the final parameters within 1e-5
(inductor fuses the same arithmetic in another order); the engine's module keeps the model's own
parameter names, and so does the 16-bit export (no ``_orig_mod.`` prefix). The graph breaks are
counted: none below stage 3, where each unit's gather and release run eagerly between compiled
parts (at most two per unit).

usage: compile_equivalence.py STAGE MODE OUT [+ STAGE MODE OUT ...]
"""

import copy
import os
import sys
import types

import torch
from torch._dynamo.utils import counters

import zerotorch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from case_list import run_each  # noqa: E402

STEPS, ACC, MICRO, SEQ, VOCAB = 3, 2, 2, 12, 96


def tiny():
    import transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg)


def train(model, stage, mode, world, rank):
    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": ACC,
              "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.01}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
              "compile": {"deepcompile": False}}
    given = torch.compile(model) if mode == "wrapped" else model
    # trainer: TrainingArguments' torch_compile (its field names), as the Trainer sets it.
    args = types.SimpleNamespace(torch_compile=True, torch_compile_backend="inductor",
                                 torch_compile_mode=None, lr_scheduler_type="constant",
                                 max_steps=STEPS) if mode == "trainer" else None
    engine, _, _, _ = zerotorch.initialize(model=given, config=config, training_args=args)
    if mode == "method":
        engine.compile()
    assert engine.is_compiled == (mode != "eager")
    assert engine.module is model
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS * ACC):
        ids = torch.randint(0, VOCAB, (MICRO * world, SEQ), generator=g)
        part = ids[rank * MICRO:(rank + 1) * MICRO]
        loss = engine(input_ids=part, labels=part).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return engine, losses, params


def run_case(argv):
    stage, mode, out = int(argv[0]), argv[1], argv[2]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    base = tiny()
    _, want_losses, want = train(copy.deepcopy(base), stage, "eager", world, rank)
    before = sum(counters["graph_break"].values())
    model = copy.deepcopy(base)
    engine, losses, got = train(model, stage, mode, world, rank)
    breaks = sum(counters["graph_break"].values()) - before
    for a, b in zip(losses, want_losses):
        assert abs(a - b) <= 1e-5 * abs(b), (losses, want_losses)
    assert got.keys() == want.keys(), sorted(got.keys() ^ want.keys())
    for n, w in want.items():
        torch.testing.assert_close(got[n], w, rtol=0, atol=1e-5, msg=lambda m, n=n: f"{n}: {m}")
    units = len(engine.units) if stage == 3 else 0
    assert breaks <= 2 * units, (breaks, units)
    if stage < 3:
        assert breaks == 0, dict(counters["graph_break"])
    target = os.path.join(out, "hf16")
    name = "model.safetensors" if stage == 3 else "pytorch_model.bin"
    assert engine.save_16bit_model(target, name) if stage < 3 else True
    if stage < 3 and rank == 0:
        saved = torch.load(os.path.join(target, name))
        assert set(saved) == set(base.state_dict()), sorted(set(saved) ^ set(base.state_dict()))
    engine.destroy()
    print(f"rank {rank}: stage {stage} {mode}: {breaks} graph breaks ({units} units)", flush=True)
    print(f"rank {rank}: {' '.join(argv)}: equal", flush=True)


if __name__ == "__main__":
    run_each(run_case)
