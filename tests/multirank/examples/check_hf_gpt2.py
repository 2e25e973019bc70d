"""Python side of gpt_hf_roundtrip_test.sh, with transformers' GPT2LMHeadModel.

  ids OUT V T                       random input ids (3, T) in [0, V) -> OUT (safetensors)
  logits HF_DIR IDS CXX_LOGITS [--sensitive]
                                    from_pretrained(HF_DIR) logits vs the C++ ones, max |diff| <= 1e-4;
                                    --sensitive: the other GELU would have failed that bound
  make DIR SHARDED_DIR V P          a random GPT2LMHeadModel (2 layers, 2 heads, 32 wide, gelu_new,
                                    weights N(0, 0.3) so the MLP sees O(1) inputs where GELU's two
                                    forms differ), save_pretrained to DIR, and sharded (with an
                                    index) to SHARDED_DIR
  same A B TOL                      the weights of two directories agree within TOL (max |diff|)
  moved BEFORE AFTER SHARD T SUMMARY  validation loss of BEFORE and AFTER on the shard's samples must
                                    be train_gpt's valid_loss_before/after, and must have fallen
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.activations import ACT2FN


def load(d):
    m = GPT2LMHeadModel.from_pretrained(d, torch_dtype=torch.float32)
    m.eval()
    return m


def read_shard(path):
    """Samples of a .ztt token shard (data/token_shard_format.h) as int64 arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    h = struct.unpack_from("<8sIIQQIIQQQQQQQQ3Q", raw, 0)
    assert h[0] == b"ZTTOKENS", path
    token_bytes, n, ntok = h[2], h[3], h[4]
    offsets_off, tokens_off = h[10], h[12]
    offsets = np.frombuffer(raw, dtype="<i8", count=n + 1, offset=offsets_off)
    tokens = np.frombuffer(raw, dtype="<u2" if token_bytes == 2 else "<u4", count=ntok,
                           offset=tokens_off)
    return [tokens[offsets[i]:offsets[i + 1]].astype(np.int64) for i in range(n)]


def valid_loss(model, samples, max_len):
    """Mean next-token loss per token, samples cut to max_len + 1 tokens (the C++ collator's shift)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for s in samples:
            s = torch.from_numpy(s[:max_len + 1])
            if len(s) < 2:
                continue
            logits = model(s[:-1].unsqueeze(0)).logits[0].double()
            total += torch.nn.functional.cross_entropy(logits, s[1:], reduction="sum").item()
            count += len(s) - 1
    return total / count


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "ids":
        g = torch.Generator().manual_seed(7)
        save_file({"input_ids": torch.randint(0, int(args[1]), (3, int(args[2])), generator=g)},
                  args[0])
    elif cmd == "logits":
        ids = load_file(args[1])["input_ids"]
        with torch.no_grad():
            ref = load(args[0])(ids).logits
        ours = load_file(args[2])["logits"]
        diff = (ref - ours).abs().max().item()
        print(f"{args[0]}: max |logits diff| vs C++ = {diff:.3g} (logits scale {ref.abs().max():.3g})")
        assert ref.shape == ours.shape and diff <= 1e-4, diff
        if "--sensitive" in args:
            m = load(args[0])
            other = "gelu" if m.config.activation_function == "gelu_new" else "gelu_new"
            m.config.activation_function = other
            for block in m.transformer.h:
                block.mlp.act = ACT2FN[other]
            with torch.no_grad():
                wrong = (m(ids).logits - ours).abs().max().item()
            print(f"  with {other} instead: max |diff| = {wrong:.3g}")
            assert wrong > 1e-4, "the check cannot tell the activations apart"
    elif cmd == "make":
        torch.manual_seed(3)
        cfg = GPT2Config(vocab_size=int(args[2]), n_positions=int(args[3]), n_embd=32, n_layer=2,
                         n_head=2, activation_function="gelu_new", resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.3)
        m = GPT2LMHeadModel(cfg)
        m.save_pretrained(args[0])
        m.save_pretrained(args[1], max_shard_size="20KB")
        assert os.path.exists(os.path.join(args[1], "model.safetensors.index.json")), \
            os.listdir(args[1])
    elif cmd == "moved":
        samples = read_shard(args[2])
        max_len = int(args[3])
        summary = json.load(open(args[4]))
        before = valid_loss(load(args[0]), samples, max_len)
        after = valid_loss(load(args[1]), samples, max_len)
        cb, ca = summary["valid_loss_before"], summary["valid_loss_after"]
        print(f"validation loss, Python: {before:.6f} -> {after:.6f}; C++ logged {cb:.6f} -> {ca:.6f}")
        assert abs(before - cb) <= 1e-4 * abs(cb), (before, cb)
        assert abs(after - ca) <= 1e-4 * abs(ca), (after, ca)
        assert after < before - 1e-3, "the loss did not move"
    elif cmd == "same":
        a, b = load(args[0]).state_dict(), load(args[1]).state_dict()
        assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())
        worst = max((a[k] - b[k]).abs().max().item() for k in a)
        print(f"{args[0]} vs {args[1]}: max |weight diff| = {worst:.3g}")
        assert worst <= float(args[2]), worst
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    # Several commands separated by "+" run in one process (tests/support/case_list.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "support"))
    from case_list import run_each
    run_each(main)
