"""DeepSpeed's Ulysses peer of `zt_bench_sequence --sp N` (bench/sequence_parallel/README.md): the
same small LLaMA as a `transformers` model (sdpa attention, which
`UlyssesSPAttentionHF.register_with_transformers` wraps with its all-to-alls), trained by DeepSpeed
on its CPU accelerator (gloo) at ZeRO stage 3, fp32, AdamW, clipping 1.0, every layer's
activations checkpointed, one random sequence per data-parallel rank per step. Each rank of a
sequence group feeds its part of the sequence with its own position_ids, as DeepSpeed's
UlyssesSPDataLoaderAdapter does, and the loss is the token-loss sum of its part over the
sequence's length.

  DS_ACCELERATOR=cpu deepspeed --num_gpus 2 bench/sequence_parallel/ds_ulysses.py SP SEQ

Prints the larger rank's peak resident memory (ru_maxrss) and tokens/s over the steps after the
first (every position of every data-parallel rank's sequence, once).
"""
import resource
import sys
import time

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    sp, seq = int(args[0]), int(args[1])
    steps = 3
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688,
                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=seq, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable()
    mpu = None
    if sp > 1:
        mpu = UlyssesSPAttentionHF.register_with_transformers(
            model_name_or_path=model, core_attn_implementation="sdpa",
            sequence_parallel_size=sp, micro_batch_size=1, seq_length=seq,
            seq_length_is_variable=False)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 3}, "gradient_clipping": 1.0,
              "sequence_parallel_size": sp,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                      config=config, mpu=mpu)
    rank = dist.get_rank()
    dp = dist.get_world_size() // sp
    part, n = rank % sp, seq // sp
    seconds = []
    for s in range(steps):
        torch.manual_seed(100 + s * dp + rank // sp)  # a sequence group: one sequence
        ids = torch.randint(1, 2048, (1, seq + 1))
        inputs = ids[:, part * n:(part + 1) * n]
        labels = ids[:, part * n + 1:(part + 1) * n + 1]  # shifted before the split
        positions = torch.arange(part * n, (part + 1) * n).unsqueeze(0)
        start = time.time()
        logits = engine(input_ids=inputs, position_ids=positions).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(),
                                                 labels.reshape(-1), reduction="sum") / seq
        engine.backward(loss)
        engine.step()
        seconds.append(time.time() - start)
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        tokens = dp * seq * (steps - 1)
        print(f"deepspeed sp {sp} dp {dp} seq {seq}: peak RSS {peak.item():.0f} MiB "
              f"(larger rank), {tokens / sum(seconds[1:]):.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
