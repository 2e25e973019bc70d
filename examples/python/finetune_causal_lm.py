"""Fine-tune a Hugging Face causal LM with zerotorch, a DeepSpeed config and token shards.

    build/bin/ztrun --standalone --nproc-per-node 2 "$ZT_VENV/bin/python" \\
        examples/python/finetune_causal_lm.py --config configs/hf_auto_zero3.json \\
        --train-shard build/main_job/corpora/kjv_train.ztt --steps 40

The model is a small random Llama sized to the shard's vocabulary, or any local Hugging Face
directory (``--model DIR``, whose tokenizer must be the one the shard was made with). The config
is any DeepSpeed config: its "auto" values resolve from the flags below as the Hugging Face
Trainer fills them (``zerotorch.auto_values``). Batches come from the length-bucketed
distributed sampler with dynamic padding (``zerotorch.data``). The training loop is DeepSpeed's:
the same script runs under DeepSpeed with ``import deepspeed as zerotorch`` and ``config=`` in
``deepspeed.initialize`` (see examples/python/README.md).
"""

import argparse
import json
import os
import time
import types

import torch

import zerotorch
from zerotorch.data import Collator, LengthBucketedSampler, TokenShardDataset


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/hf_auto_zero3.json")
    p.add_argument("--train-shard", required=True)
    p.add_argument("--model", default="", help="a local Hugging Face model directory")
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--gradient-accumulation-steps", type=int, default=1)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=4)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output-dir", default="")
    return p.parse_args()


def build_model(args, vocab_size):
    import transformers
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        if model.config.vocab_size < vocab_size:
            raise SystemExit(f"--model {args.model}: vocabulary {model.config.vocab_size} is "
                             f"smaller than the shard's {vocab_size}; tokenize with its tokenizer")
        return model
    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=args.hidden_size,
        intermediate_size=int(args.hidden_size * 8 / 3) // 64 * 64 or 64,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, max_position_embeddings=max(args.max_length, 128))
    return transformers.LlamaForCausalLM(config)


def main():
    args = parse()
    zerotorch.init_distributed()
    data = TokenShardDataset(args.train_shard)
    model = build_model(args, data.vocab_size)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    # The Trainer's "auto" sources, by TrainingArguments' names.
    training_args = types.SimpleNamespace(
        per_device_train_batch_size=args.micro_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_grad_norm=args.max_grad_norm, fp16=False, bf16=args.bf16, learning_rate=args.lr,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps, warmup_ratio=0.0, max_steps=args.steps)
    engine, _, _, _ = zerotorch.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.config, training_args=training_args)
    rank = engine.global_rank
    sampler = LengthBucketedSampler(data, batch_size=args.micro_batch_size, seed=args.seed,
                                    rank=rank, world_size=engine.world_size,
                                    max_length=args.max_length)
    collate = Collator(pad_id=data.pad_id, max_length=args.max_length)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate)

    engine.train()
    step, epoch, tokens, start = 0, 0, 0, time.time()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            out = engine(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         labels=batch["labels"])
            engine.backward(out.loss)
            engine.step()
            tokens += int(batch["attention_mask"].sum()) * engine.world_size
            if engine.global_steps > step:
                step = engine.global_steps
                if rank == 0 and (step % 10 == 0 or step == 1 or step == args.steps):
                    elapsed = time.time() - start
                    print(json.dumps({"step": step, "loss": round(out.loss.item(), 4),
                                      "lr": engine.get_lr()[0],
                                      "tokens_per_s": round(tokens / elapsed, 1)}), flush=True)
                if step >= args.steps:
                    break
        epoch += 1
    if args.output_dir:
        engine.save_checkpoint(os.path.join(args.output_dir, "checkpoints"))
        if rank == 0:
            model.config.save_pretrained(os.path.join(args.output_dir, "hf"))
        engine.save_16bit_model(os.path.join(args.output_dir, "hf"), "model.safetensors")


if __name__ == "__main__":
    main()
