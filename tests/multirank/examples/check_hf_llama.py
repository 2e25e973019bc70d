"""Python side of llama_hf_roundtrip_test.sh, with transformers' Llama, Qwen2, Mistral and the
mixtures of experts Mixtral, Qwen2-MoE and Qwen3-MoE.

  make ARCH DIR SHARDED_DIR V     a tiny random ARCH model (V tokens, 64 positions), saved whole to
                                  DIR, sharded with an index to SHARDED_DIR, and as a torch.save
                                  pytorch_model.bin to DIR_bin:
                                    llama    4 heads over 2 key/value heads, llama3 rotary
                                             scaling, untied head
                                    qwen2    q/k/v biases, 3 key/value heads, tied head, theta 1e6
                                    mistral  sliding window of 8 tokens (sequences are 32), no
                                             grouped query
                                    mixtral  4 experts, top 2, sliding window of 8
                                    qwen2_moe  4 experts, top 2 not renormalised, a shared
                                             expert; layer 1 dense (mlp_only_layers)
                                    qwen3_moe  4 experts, top 2 renormalised, q/k norms
                                  (the experts saved one tensor per expert, as save_pretrained
                                  writes them)
  ids OUT V T                     random ids (3, T) in [0, V) and a right-padding mask -> OUT
  logits HF_DIR IDS CXX_LOGITS [--sensitive]
                                  transformers' logits vs the C++ ones: at every position without
                                  a mask, and at the real positions with it, max |diff| <= 1e-4;
                                  --sensitive: without the architecture's own feature (rotary
                                  scaling, biases, window) the logits would have failed that bound
  moved BEFORE AFTER SHARD T SUMMARY
                                  validation loss of BEFORE and AFTER on the shard's samples must be
                                  train_llama's valid_loss_before/after, and must have fallen
  same A B TOL [key_bias_noise]   the weights of two directories agree within TOL (max |diff|;
                                  with key_bias_noise, key projection biases, which have no
                                  gradient, within 1e-2)
  same_logits A B                 two logits files of zt_llama_logits are identical

Several commands separated by "+" run in one process (tests/support/case_list.py).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoConfig, AutoModelForCausalLM, LlamaConfig, MistralConfig,
                          MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3MoeConfig)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_hf_gpt2 import read_shard, valid_loss  # noqa: E402  (.ztt reader, shifted loss)


def load(d):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def make(arch, vocab):
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  max_position_embeddings=64, initializer_range=0.2, rms_norm_eps=1e-5)
    if arch == "llama":
        cfg = LlamaConfig(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                          rope_scaling={"rope_type": "llama3", "factor": 4.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 16},
                          rope_theta=500000.0, **common)
    elif arch == "qwen2":
        cfg = Qwen2Config(num_attention_heads=6, num_key_value_heads=3, hidden_act="silu",
                          tie_word_embeddings=True, rope_theta=1000000.0,
                          **{**common, "hidden_size": 48})
    elif arch == "mistral":
        cfg = MistralConfig(num_attention_heads=4, num_key_value_heads=4, sliding_window=8,
                            tie_word_embeddings=False, **common)
    elif arch == "mixtral":
        cfg = MixtralConfig(num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                            num_experts_per_tok=2, sliding_window=8, tie_word_embeddings=False,
                            **common)
    elif arch == "qwen2_moe":
        cfg = Qwen2MoeConfig(num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                             num_experts_per_tok=2, moe_intermediate_size=24,
                             shared_expert_intermediate_size=40, norm_topk_prob=False,
                             mlp_only_layers=[1], tie_word_embeddings=False, **common)
    elif arch == "qwen3_moe":
        cfg = Qwen3MoeConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                             num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                             norm_topk_prob=True, tie_word_embeddings=False, **common)
    else:
        sys.exit(f"unknown architecture {arch}")
    m = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            # Biases and the q/k norms start at zero or one, and a router may start at zero (ties):
            # give them values so a lost one shows.
            if n.endswith(".bias") or "_norm." in n and "layernorm" not in n:
                p.normal_(1.0 if "_norm." in n else 0.0, 0.5)
            elif n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.5)
    return m


def without_feature(d):
    """The model of `d` without what sets its architecture apart in the tiny test models: Llama
    3's rotary scaling, Qwen2's q/k/v biases, Mistral's sliding window, Qwen2-MoE's shared expert,
    Qwen3-MoE's renormalised top-k weights, Mixtral's router scale."""
    cfg = AutoConfig.from_pretrained(d)
    if cfg.model_type == "llama":
        theta = cfg.rope_parameters["rope_theta"]
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": theta}
    elif cfg.model_type == "mistral":
        cfg.sliding_window = None
    elif cfg.model_type in ("mixtral", "qwen3_moe"):
        cfg.norm_topk_prob = False  # (Mixtral's router ignores it: see below)
    m = AutoModelForCausalLM.from_pretrained(d, config=cfg, dtype=torch.float32,
                                             attn_implementation="eager")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if cfg.model_type == "qwen2" and n.endswith(".bias"):
                p.zero_()
            if cfg.model_type == "qwen2_moe" and ".shared_expert." in n:
                p.zero_()
            if cfg.model_type == "mixtral" and n.endswith("mlp.gate.weight"):
                p.mul_(0.5)  # other routing probabilities, other weights
    return m.eval()


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "make":
        torch.manual_seed(5)
        m = make(args[0], int(args[3]))
        m.save_pretrained(args[1])
        m.save_pretrained(args[2], max_shard_size="20KB")
        assert os.path.exists(os.path.join(args[2], "model.safetensors.index.json")), \
            os.listdir(args[2])
        # The older format as transformers 4 wrote it (safe_serialization=False): torch.save of a
        # plain dict of the state_dict's tensors; transformers 5 writes safetensors only.
        os.makedirs(args[1] + "_bin", exist_ok=True)
        m.config.save_pretrained(args[1] + "_bin")
        torch.save(dict(m.state_dict()), os.path.join(args[1] + "_bin", "pytorch_model.bin"))
    elif cmd == "ids":
        g = torch.Generator().manual_seed(7)
        t = int(args[2])
        ids = torch.randint(0, int(args[1]), (3, t), generator=g)
        mask = torch.ones(3, t, dtype=torch.int64)
        mask[1, t - 5:] = 0
        mask[2, t // 2:] = 0
        save_file({"input_ids": ids, "attention_mask": mask}, args[0])
    elif cmd == "logits":
        inputs = load_file(args[1])
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        cxx = load_file(args[2])
        model = load(args[0])
        with torch.no_grad():
            ref = model(ids).logits
            ref_masked = model(ids, attention_mask=mask).logits
        diff = (ref - cxx["logits"]).abs().max().item()
        real = mask.bool()
        diff_masked = (ref_masked - cxx["logits_masked"])[real].abs().max().item()
        print(f"{args[0]}: max |logits diff| vs C++ = {diff:.3g} unpadded, {diff_masked:.3g} "
              f"padded (logits scale {ref.abs().max():.3g})")
        assert ref.shape == cxx["logits"].shape and diff <= 1e-4, diff
        assert diff_masked <= 1e-4, diff_masked
        if "aux_loss" in cxx:
            # transformers' load-balancing loss of the same forwards, padding left out with it.
            with torch.no_grad():
                aux = model(ids, output_router_logits=True).aux_loss
                aux_masked = model(ids, attention_mask=mask, output_router_logits=True).aux_loss
            print(f"  load-balancing loss {aux.item():.7g} (padded {aux_masked.item():.7g}), "
                  f"C++ {cxx['aux_loss'].item():.7g} ({cxx['aux_loss_masked'].item():.7g})")
            assert abs(aux.item() - cxx["aux_loss"].item()) <= 1e-6 * aux.item()
            assert abs(aux_masked.item() - cxx["aux_loss_masked"].item()) <= 1e-6 * aux.item()
            assert abs(aux.item() - aux_masked.item()) > 1e-4, "the mask changed nothing"
        if "--sensitive" in args:
            wrong = without_feature(args[0])
            with torch.no_grad():
                off = (wrong(ids).logits - cxx["logits"]).abs().max().item()
            print(f"  without the architecture's own feature: max |diff| = {off:.3g}")
            assert off > 1e-3, "the check cannot tell the feature apart"
    elif cmd == "moved":
        samples = read_shard(args[2])
        max_len = int(args[3])
        summary = json.load(open(args[4]))
        before = valid_loss(load(args[0]), samples, max_len)
        after = valid_loss(load(args[1]), samples, max_len)
        cb, ca = summary["valid_loss_before"], summary["valid_loss_after"]
        print(f"validation loss, Python: {before:.6f} -> {after:.6f}; "
              f"C++ logged {cb:.6f} -> {ca:.6f}")
        assert abs(before - cb) <= 1e-4 * abs(cb), (before, cb)
        assert abs(after - ca) <= 1e-4 * abs(ca), (after, ca)
        assert after < before - 1e-3, "the loss did not move"
    elif cmd == "same_logits":
        a, b = load_file(args[0]), load_file(args[1])
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (args[0], args[1])
        print(f"{args[0]} and {args[1]}: identical")
    elif cmd == "same":
        a = load(args[0]).state_dict()
        b = load(args[1]).state_dict()
        assert a.keys() == b.keys(), (sorted(a.keys() ^ b.keys()))
        # A key projection's bias has no gradient: softmax is the same when every key of a row
        # moves by one vector. What reaches it is rounding noise, which Adam turns into steps of
        # up to lr (1e-3 in these runs) whatever its size, so two runs whose sums round
        # differently (a tensor split's) part by up to 2 lr a step there: 1e-2 over 5 steps.
        noise = [k for k in a if k.endswith("k_proj.bias")] if "key_bias_noise" in args else []
        for k in noise:
            assert (a[k] - b[k]).abs().max().item() <= 1e-2, k
        worst = max((a[k] - b[k]).abs().max().item() for k in a if k not in noise)
        print(f"{args[0]} vs {args[1]}: max |weight diff| = {worst:.3g}"
              + (" (key biases within 1e-2)" if noise else ""))
        assert worst <= float(args[2]), worst
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "support"))
    from case_list import run_each
    run_each(main)
