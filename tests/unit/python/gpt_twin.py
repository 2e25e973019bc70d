"""The C++ GPT example (models/gpt/gpt_model.h, gpt_block.h) as a Python torch.nn.Module: the
same modules registered under the same names in the same order, the same computation. Its
parameters line up one to one with the C++ model's, so zerotorch checkpoints move between the
Python front door and train_gpt."""

import math

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for y in self.qkv(x).chunk(3, -1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(torch.nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head)
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.fc = torch.nn.Linear(d_model, 4 * d_model)
        self.out = torch.nn.Linear(4 * d_model, d_model)

    def forward(self, x, mask):
        h = x + self.attn(self.ln1(x), mask)
        return h + self.out(F.gelu(self.fc(self.ln2(h))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab_size, d_model, n_layer, n_head, max_seq_len):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab_size, d_model)
        self.wpe = torch.nn.Embedding(max_seq_len, d_model)
        self.ln_f = torch.nn.LayerNorm(d_model)
        self.blocks = torch.nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln" in name:
                    continue
                if name.endswith(".bias"):
                    p.zero_()
                elif name.endswith("attn.proj.weight") or name.endswith(".out.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2.0 * n_layer))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, input_ids, attention_mask, labels):
        b, t = input_ids.shape
        x = self.wte(input_ids) + self.wpe(torch.arange(t))
        causal = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
        mask = causal & attention_mask.bool().view(b, 1, 1, t)
        for block in self.blocks:
            x = block(x, mask)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                               ignore_index=-100)
