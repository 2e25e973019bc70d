"""Python side of bert_hf_roundtrip_test.sh, with transformers' *ForSequenceClassification.

  make TYPE DIR SHARDED_DIR V P       a random tiny BertForSequenceClassification (TYPE bert) or
                                      RobertaForSequenceClassification (roberta): vocabulary V,
                                      P positions, 2 layers, 2 heads, 32 wide, one label
                                      (regression), dropout 0, weights N(0, 0.3) so the logits are
                                      O(1); save_pretrained to DIR, and sharded (with an index)
                                      to SHARDED_DIR
  inputs HF_DIR OUT T                 inputs (3, T), rows padded on the right to lengths T, 2T/3,
                                      T/3 with the model's pad id (and one pad id among the first
                                      row's tokens), random token types -> OUT
  logits HF_DIR INPUTS CXX_LOGITS     from_pretrained(HF_DIR) logits vs the C++ ones:
                                      max |diff| <= 1e-4
  pretrained DIR BASE_DIR MLM_DIR     DIR's encoder as pre-trained models without the task head:
                                      the base model (BertModel / RobertaModel, names without the
                                      prefix) -> BASE_DIR, *ForMaskedLM -> MLM_DIR
  moved BEFORE AFTER INPUTS           the weights and the logits of AFTER differ from BEFORE's
"""
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (AutoModel, AutoModelForMaskedLM,  # noqa: E402
                          AutoModelForSequenceClassification, BertConfig,
                          BertForSequenceClassification, RobertaConfig,
                          RobertaForSequenceClassification)


def load(d):
    m = AutoModelForSequenceClassification.from_pretrained(d, dtype=torch.float32)
    m.eval()
    return m


def logits_of(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "make":
        kind, out, sharded, vocab, positions = args[0], args[1], args[2], int(args[3]), int(args[4])
        torch.manual_seed(5)
        shape = dict(vocab_size=vocab, max_position_embeddings=positions, hidden_size=32,
                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=1,
                     initializer_range=0.3, layer_norm_eps=1e-7)
        if kind == "bert":
            m = BertForSequenceClassification(BertConfig(type_vocab_size=3, **shape))
        else:
            m = RobertaForSequenceClassification(RobertaConfig(type_vocab_size=1, **shape))
        # LayerNorms as a trained model has them, not ones and zeros.
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "LayerNorm" in name:
                    p.add_(torch.randn_like(p) * 0.2)
        m.save_pretrained(out)
        m.save_pretrained(sharded, max_shard_size="20KB")
        assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), \
            os.listdir(sharded)
    elif cmd == "inputs":
        cfg = load(args[0]).config
        t = int(args[2])
        g = torch.Generator().manual_seed(7)
        ids = torch.randint(0, cfg.vocab_size, (3, t), generator=g)
        types = torch.randint(0, cfg.type_vocab_size, (3, t), generator=g)
        mask = torch.zeros(3, t, dtype=torch.long)
        for row, n in enumerate((t, 2 * t // 3, t // 3)):
            mask[row, :n] = 1
        ids = torch.where(mask.bool(), ids, torch.full_like(ids, cfg.pad_token_id))
        # A pad id among the real tokens: RoBERTa's positions skip it, BERT's do not.
        ids[0, 3] = cfg.pad_token_id
        save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask},
                  args[1])
    elif cmd == "logits":
        ref = logits_of(load(args[0]), load_file(args[1]))
        ours = load_file(args[2])["logits"]
        diff = (ref - ours).abs().max().item()
        print(f"{args[0]}: max |logits diff| vs C++ = {diff:.3g} "
              f"(logits scale {ref.abs().max():.3g})")
        assert ref.shape == ours.shape, (ref.shape, ours.shape)
        assert diff <= 1e-4, diff
        assert ref.abs().max() > 0.1, "logits too small for the bound to mean anything"
    elif cmd == "pretrained":
        m = load(args[0])
        for auto, out in ((AutoModel, args[1]), (AutoModelForMaskedLM, args[2])):
            p = auto.from_config(m.config)
            # The pooler is the one tensor pair one side may have and the other not.
            r = p.base_model.load_state_dict(m.base_model.state_dict(), strict=False)
            assert all("pooler" in k for k in r.missing_keys + r.unexpected_keys), r
            p.save_pretrained(out)
    elif cmd == "moved":
        before, after = load(args[0]), load(args[1])
        a, b = dict(before.named_parameters()), dict(after.named_parameters())
        assert a.keys() == b.keys(), set(a) ^ set(b)
        moved = [n for n in a if not torch.equal(a[n], b[n])]
        inputs = load_file(args[2])
        d = (logits_of(before, inputs) - logits_of(after, inputs)).abs().max().item()
        print(f"{len(moved)} of {len(a)} tensors moved; max |logits change| = {d:.3g}")
        assert len(moved) >= len(a) // 2, moved
        assert d > 1e-3, d
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    # Several commands separated by "+" run in one process (tests/support/case_list.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "support"))
    from case_list import run_each
    run_each(main)
