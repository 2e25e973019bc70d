"""A small Hugging Face Trainer script, run once under DeepSpeed and once under zerotorch with
only its import changed (``ztrun`` starts it, with the DeepSpeed virtualenv's python).

usage: trainer_script.py deepspeed|zerotorch OUT CONFIG [CONFIG ...]

For each Hugging Face config CONFIG (every value the Trainer fills left "auto"), in OUT/<its
name>: a tiny random ``LlamaForCausalLM`` (seed 0; at stage 3 on zerotorch's side saved, then
loaded with ``from_pretrained`` after the TrainingArguments, so built partitioned) trains on
generated token rows (causal LM labels, a few positions masked with -100) for 6 optimizer
steps: 2 rows per rank, 2 accumulation steps, weight decay, clipping, a warmup. It logs every
step, saves a checkpoint every 2 steps (``save_total_limit`` 2), evaluates, and saves the model
to final/; rank 0 writes result.json:
the logged losses, learning rates and gradient norms, the evaluation loss, the checkpoints
kept. Then a second Trainer resumes from checkpoint-4 and trains to step 6, and rank 0 writes
its logged losses to resumed.json. Last, with the last CONFIG, a run with only the attention's
query and value projections trainable and gradient checkpointing on, then predict(): OUT/
variant.json. Then, with the last CONFIG, load_best_model_at_end: OUT/best.json, and
``Seq2SeqTrainer`` generating in its prediction: OUT/seq2seq.json. At one rank, only each
CONFIG's run.
"""

import json
import os
import sys

import torch

framework, out, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
if framework == "zerotorch":
    from zerotorch.hf import (Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer,
                              TrainingArguments)
else:
    from transformers import (Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer,
                              TrainingArguments)
import transformers  # noqa: E402

VOCAB, SEQ = 96, 16


class Rows(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        labels = self.ids[i].clone()
        labels[: 1 + i % 3] = -100
        return {"input_ids": self.ids[i], "labels": labels}


def model():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def arguments(run_dir, config, **more):
    return TrainingArguments(**dict(
        output_dir=run_dir, per_device_train_batch_size=2, per_device_eval_batch_size=2,
        gradient_accumulation_steps=2, max_steps=6, learning_rate=2e-3, weight_decay=0.01,
        max_grad_norm=0.5, warmup_steps=2, logging_steps=1, save_steps=2, save_total_limit=2,
        report_to=[], seed=0, deepspeed=config, dataloader_drop_last=True,
        use_cpu=not torch.cuda.is_available(), disable_tqdm=True) | more)


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h and "step" in h]


def pretrained(args, out):
    """model() saved as a from_pretrained directory and loaded after the TrainingArguments, as a
    fine-tuning script loads its model: at ZeRO stage 3 zerotorch builds it partitioned
    (transformers' is_deepspeed_zero3_enabled path). Returns the model and whether every
    parameter came partitioned and every value as saved."""
    path = os.path.join(out, "pretrained")
    if args.process_index == 0:
        model().save_pretrained(path)
    torch.distributed.barrier()
    loaded = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    import zerotorch
    params = dict(loaded.named_parameters())
    partitioned = all(zerotorch.zero.is_partitioned(p) and p.numel() == 0
                      for p in params.values())
    want = dict(model().named_parameters())
    with zerotorch.zero.GatheredParameters(list(params.values())):
        exact = all(torch.equal(p, want[n]) for n, p in params.items())
    return loaded, {"partitioned": partitioned, "exact": exact}


def run(config, out):
    run_dir = os.path.join(out, "run")
    args = arguments(run_dir, config)
    with open(config) as f:
        stage = json.load(f)["zero_optimization"]["stage"]
    # DeepSpeed 0.19 cannot load at stage 3 here (its zero.Init checks the config's batch
    # against a world of 1 on its CPU accelerator and asserts): its side builds the model whole,
    # with the same values.
    loading = None
    if stage == 3 and framework == "zerotorch":
        built, loading = pretrained(args, out)
    else:
        built = model()
    storage = {n: p.data_ptr() for n, p in built.named_parameters()}
    trainer = Trainer(model=built, args=args, train_dataset=Rows(64, 1),
                      eval_dataset=Rows(8, 2))
    # The Trainer leaves placement to the engine (as to DeepSpeed's): no copy of the model to
    # TrainingArguments.device (cpu:0 under a launcher) before the engine takes it.
    kept = all(p.data_ptr() == storage[n] for n, p in built.named_parameters())
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(os.path.join(out, "final"))
    rank = trainer.args.process_index
    if rank == 0:
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump({"loss": logged(trainer, "loss"),
                       "learning_rate": logged(trainer, "learning_rate"),
                       "grad_norm": logged(trainer, "grad_norm"),
                       "eval_loss": metrics["eval_loss"],
                       "checkpoints": sorted(d for d in os.listdir(run_dir)
                                             if d.startswith("checkpoint")),
                       "loading": loading, "kept_storage": kept}, f)
    again = Trainer(model=model(), args=arguments(run_dir, config), train_dataset=Rows(64, 1))
    again.train(resume_from_checkpoint=os.path.join(run_dir, "checkpoint-4"))
    if rank == 0:
        with open(os.path.join(out, "resumed.json"), "w") as f:
            json.dump({"loss": logged(again, "loss")}, f)
    print(f"rank {rank}: {os.path.basename(out)} done", flush=True)


def variant(config, out):
    """LoRA's usual targets alone trainable (the query and value projections, whole here),
    gradient checkpointing on, no checkpoints, the warmup as a fraction of the steps
    (transformers 5's warmup_steps below 1: 3 of the 6 steps); then predict() on the evaluation
    rows."""
    net = model()
    for name, p in net.named_parameters():
        p.requires_grad_(name.endswith(("q_proj.weight", "v_proj.weight")))
    trainer = Trainer(model=net, args=arguments(os.path.join(out, "run"), config,
                                                gradient_checkpointing=True, save_strategy="no",
                                                warmup_steps=0.34),
                      train_dataset=Rows(64, 1))
    trainer.train()
    predicted = trainer.predict(Rows(8, 2))
    if trainer.args.process_index == 0:
        with open(os.path.join(out, "variant.json"), "w") as f:
            json.dump({"loss": logged(trainer, "loss"),
                       "learning_rate": logged(trainer, "learning_rate"),
                       "test_loss": predicted.metrics["test_loss"],
                       "predictions": list(predicted.predictions.shape)}, f)
    print(f"rank {trainer.args.process_index}: variant done", flush=True)


def best(config, out):
    """load_best_model_at_end, the metric chosen so that the best checkpoint is the first
    (eval_loss, greater is better): after training the model is that checkpoint's again, so
    the final evaluation repeats its evaluation loss: OUT/best.json."""
    trainer = Trainer(model=model(), args=arguments(
        os.path.join(out, "best"), config, eval_strategy="steps", eval_steps=2,
        load_best_model_at_end=True, metric_for_best_model="eval_loss", greater_is_better=True),
        train_dataset=Rows(64, 1), eval_dataset=Rows(8, 2))
    trainer.train()
    during = logged(trainer, "eval_loss")
    final = trainer.evaluate()["eval_loss"]
    if trainer.args.process_index == 0:
        with open(os.path.join(out, "best.json"), "w") as f:
            json.dump({"eval_loss": during, "final": final,
                       "best": os.path.basename(trainer.state.best_model_checkpoint)}, f)
    print(f"rank {trainer.args.process_index}: best done", flush=True)


def seq2seq(config, out, name):
    """Seq2SeqTrainer: a tiny random T5 (no dropout) learns to copy rows for 4 steps, then
    predicts with predict_with_generate (greedy, 8 new tokens): OUT/NAME.json."""
    torch.manual_seed(0)
    net = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))

    class Copy(Rows):
        def __getitem__(self, i):
            ids = self.ids[i] % (VOCAB - 2) + 2  # no pad or end-of-sequence token
            return {"input_ids": ids, "labels": ids[:8].clone()}

    args = Seq2SeqTrainingArguments(
        output_dir=os.path.join(out, name), per_device_train_batch_size=2,
        per_device_eval_batch_size=2, gradient_accumulation_steps=2, max_steps=4,
        learning_rate=2e-3, max_grad_norm=0.5, logging_steps=1, save_strategy="no",
        report_to=[], seed=0, deepspeed=config, dataloader_drop_last=True,
        use_cpu=not torch.cuda.is_available(), disable_tqdm=True, predict_with_generate=True,
        generation_max_length=8, generation_num_beams=1)
    trainer = Seq2SeqTrainer(model=net, args=args, train_dataset=Copy(32, 3),
                             eval_dataset=Copy(4, 4))
    trainer.train()
    predicted = trainer.predict(Copy(4, 4))
    if args.process_index == 0:
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump({"loss": logged(trainer, "loss"),
                       "test_loss": predicted.metrics["test_loss"],
                       "generated": predicted.predictions.tolist()}, f)
    print(f"rank {args.process_index}: {name} done", flush=True)


for path in configs:
    run(path, os.path.join(out, os.path.splitext(os.path.basename(path))[0]))
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    variant(configs[-1], out)
    best(configs[-1], out)
    seq2seq(configs[-1], out, "seq2seq")
