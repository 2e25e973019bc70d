"""DeepSpeed's AutoTP peer of `zt_bench_sequence --wide 1` (bench/sequence_parallel/README.md):
the same LLaMA shape as a `transformers` model, trained by DeepSpeed on its CPU accelerator (gloo)
with its `tensor_parallel` block, ZeRO stage S, fp32, AdamW, clipping 1.0, every layer's
activations checkpointed, one random sequence per data-parallel rank per step.

  DS_ACCELERATOR=cpu deepspeed --num_gpus 2 bench/sequence_parallel/ds_autotp.py TP SEQ STAGE

Prints the larger rank's peak resident memory (ru_maxrss) and tokens/s over the steps after the
first (every position of every data-parallel rank's sequence, once).
"""
import sys

import deepspeed

from ds_peer import llama, report, timed_steps


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    tp, seq, stage = int(args[0]), int(args[1]), int(args[2])
    deepspeed.init_distributed(dist_backend="gloo")
    model = llama(seq, hidden=1024, intermediate=2816, heads=16, kv_heads=8, head_dim=64)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    if tp > 1:
        config["tensor_parallel"] = {"autotp_size": tp, "preset_model": "llama"}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                      config=config)
    dp, seconds = timed_steps(
        engine, seq, tp,
        # the model shifts its labels
        lambda e, ids: e(input_ids=ids[:, :seq], labels=ids[:, :seq]).loss)
    report(f"tp {tp} stage {stage}", dp, seq, seconds)


if __name__ == "__main__":
    main()
