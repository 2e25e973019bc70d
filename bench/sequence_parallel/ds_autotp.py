"""DeepSpeed's AutoTP peer of `zt_bench_sequence --wide 1` (bench/sequence_parallel/README.md):
the same LLaMA shape as a `transformers` model, trained by DeepSpeed on its CPU accelerator (gloo)
with its `tensor_parallel` block, ZeRO stage S, fp32, AdamW, clipping 1.0, every layer's
activations checkpointed, one random sequence per data-parallel rank per step.

  DS_ACCELERATOR=cpu deepspeed --num_gpus 2 bench/sequence_parallel/ds_autotp.py TP SEQ STAGE

Prints the larger rank's peak resident memory (ru_maxrss) and tokens/s over the steps after the
first (every position of every data-parallel rank's sequence, once).
"""
import resource
import sys
import time

import deepspeed
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    tp, seq, stage = int(args[0]), int(args[1]), int(args[2])
    steps = 3
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=2048, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=8,
                      head_dim=64, max_position_embeddings=seq, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable()
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    if tp > 1:
        config["tensor_parallel"] = {"autotp_size": tp, "preset_model": "llama"}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                      config=config)
    rank, dp = dist.get_rank(), dist.get_world_size() // tp
    seconds = []
    for s in range(steps):
        torch.manual_seed(100 + s * dp + rank // tp)  # the ranks of a tensor group: one sequence
        ids = torch.randint(1, 2048, (1, seq + 1))
        start = time.time()
        loss = engine(input_ids=ids[:, :seq], labels=ids[:, :seq]).loss  # the model shifts
        engine.backward(loss)
        engine.step()
        seconds.append(time.time() - start)
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        tokens = dp * seq * (steps - 1)
        print(f"deepspeed tp {tp} dp {dp} stage {stage} seq {seq}: peak RSS {peak.item():.0f} MiB "
              f"(larger rank), {tokens / sum(seconds[1:]):.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
