"""Writes cases.safetensors: router logits and what DeepSpeed's own top-k gating keeps of them
under a capacity (deepspeed.moe.sharded_moe.topkgating, DeepSpeed 0.19.8), for
tests/unit/models/moe_capacity_test.cpp.

  ~/.cache/zerotorch/venv-deepspeed/bin/python tests/data/moe_capacity/make_cases.py

Per case c: c.logits (N, E) fp32, c.gates (N, E) the combine weights summed over the capacity
slots (0 where a choice was dropped or never made), c.meta [k, capacity factor x 100,
min_capacity, policy (0 probs, 1 position), the capacity DeepSpeed used].
"""
import os

import torch
from deepspeed.moe.sharded_moe import topkgating
from safetensors.torch import save_file

CASES = [  # tokens, experts, k, capacity factor, min capacity, policy
    (32, 4, 2, 1.0, 4, "probs"),
    (32, 4, 2, 0.5, 4, "probs"),
    (32, 4, 2, 0.5, 4, "position"),
    (40, 8, 2, 1.25, 2, "probs"),
    (40, 8, 1, 0.75, 1, "position"),
    (24, 8, 3, 0.5, 0, "probs"),
    (6, 4, 2, 1.0, 8, "probs"),  # min_capacity above the tokens: nothing dropped
]

out = {}
for c, (n, e, k, factor, min_cap, policy) in enumerate(CASES):
    g = torch.Generator().manual_seed(100 + c)
    # Skewed toward expert 0, so that some experts overflow.
    logits = torch.randn(n, e, generator=g) * 2.0
    logits[:, 0] += 1.5
    _, combine, _, _ = topkgating(logits, k, factor, min_cap, drop_tokens=True,
                                  drop_policy=policy)
    out[f"{c}.logits"] = logits.contiguous()
    out[f"{c}.gates"] = combine.sum(-1).contiguous()
    out[f"{c}.meta"] = torch.tensor([k, round(factor * 100), min_cap,
                                     0 if policy == "probs" else 1, combine.shape[-1]],
                                    dtype=torch.int64)
save_file(out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.safetensors"))
print(f"{len(CASES)} cases")
