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
import sys

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

from ds_peer import llama, report, timed_steps


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    sp, seq = int(args[0]), int(args[1])
    deepspeed.init_distributed(dist_backend="gloo")
    model = llama(seq, hidden=256, intermediate=688, heads=8, kv_heads=2, head_dim=32)
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
    part, n = dist.get_rank() % sp, seq // sp

    def loss_of(e, ids):  # this rank's part, labels shifted before the split
        inputs = ids[:, part * n:(part + 1) * n]
        labels = ids[:, part * n + 1:(part + 1) * n + 1]
        positions = torch.arange(part * n, (part + 1) * n).unsqueeze(0)
        logits = e(input_ids=inputs, position_ids=positions).logits
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(),
                                                 labels.reshape(-1), reduction="sum") / seq

    dp, seconds = timed_steps(engine, seq, sp, loss_of)
    report(f"sp {sp}", dp, seq, seconds)


if __name__ == "__main__":
    main()
