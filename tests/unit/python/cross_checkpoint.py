"""One rank of the Python <-> C++ checkpoint exchange (test_engine.py drives it under ztrun).

usage: cross_checkpoint.py CONFIG SHARD CKPT_DIR CONSOLIDATED STEPS
The GPT example's Python twin (gpt_twin.py) loads the latest checkpoint that train_gpt wrote
in CKPT_DIR: its parameters must equal zt-consolidate's fp32 weights of that checkpoint
(CONSOLIDATED) and its step counter train_gpt's. It then trains to STEPS and saves there, for
train_gpt to resume from.
"""

import sys

import torch

import zerotorch
from gpt_twin import Gpt
from zerotorch.data import Collator, LengthBucketedSampler, TokenShardDataset


def main():
    config, shard, ckpt, consolidated, steps = sys.argv[1:6]
    data = TokenShardDataset(shard)
    model = Gpt(data.vocab_size, d_model=32, n_layer=2, n_head=2, max_seq_len=32)
    engine, _, _, _ = zerotorch.initialize(model=model, config=config)
    assert engine.units == ["blocks.0", "blocks.1"], engine.units
    engine.load_checkpoint(ckpt)
    from safetensors.torch import load_file
    want = load_file(consolidated)
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), want[name]), name
    loaded_step = engine.global_steps
    sampler = LengthBucketedSampler(data, batch_size=engine.train_micro_batch_size_per_gpu(),
                                    rank=engine.global_rank, world_size=engine.world_size)
    collate = Collator(pad_id=data.pad_id, causal_lm_shift=True)
    batches = iter(torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate))
    while engine.global_steps < int(steps):
        b = next(batches)
        loss = engine(b["input_ids"], b["attention_mask"], b["labels"])
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(ckpt)
    print(f"rank {engine.global_rank}: loaded step {loaded_step}, saved step "
          f"{engine.global_steps}: equal", flush=True)


if __name__ == "__main__":
    main()
