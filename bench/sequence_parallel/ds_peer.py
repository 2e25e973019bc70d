"""What ds_autotp.py and ds_ulysses.py share: the LLaMA as a `transformers` model with gradient
checkpointing, the timed steps on one random sequence per data-parallel rank, and the report
(the larger rank's peak resident memory, tokens/s over the steps after the first)."""
import resource
import time

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 2048


def llama(seq, hidden, intermediate, heads, kv_heads, head_dim):
    """zt_bench_sequence's shape (4 layers, untied head, sdpa attention), seeded as it is."""
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=4, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=head_dim,
                      max_position_embeddings=seq, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable()
    return model


def timed_steps(engine, seq, group, loss_of, steps=3):
    """`steps` steps; the `group` consecutive ranks that split one model or sequence draw the same
    sequence (seq + 1 ids). loss_of(engine, ids) returns the loss to backpropagate. Returns the
    data-parallel size and each step's seconds."""
    rank, dp = dist.get_rank(), dist.get_world_size() // group
    seconds = []
    for s in range(steps):
        torch.manual_seed(100 + s * dp + rank // group)
        ids = torch.randint(1, VOCAB, (1, seq + 1))
        start = time.time()
        engine.backward(loss_of(engine, ids))
        engine.step()
        seconds.append(time.time() - start)
    return dp, seconds


def report(what, dp, seq, seconds):
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        tokens = dp * seq * (len(seconds) - 1)
        print(f"deepspeed {what} dp {dp} seq {seq}: peak RSS {peak.item():.0f} MiB (larger rank), "
              f"{tokens / sum(seconds[1:]):.0f} tokens/s", flush=True)
