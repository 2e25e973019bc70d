"""A decoder-shaped module tree for the stage3_module_granularity_threshold tests: embedding,
blocks (attention of four projections, an MLP in a Sequential, two norms) in a ModuleList, a final
norm and a head; built with plain torch so DeepSpeed's virtualenv can build it too."""

import torch


class Attention(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, h):
        return self.o(torch.tanh(self.q(h)) * self.k(h) + self.v(h))


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Decoder(torch.nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, vocab=64, d=16, layers=3):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def granularity_model():
    torch.manual_seed(0)
    return Decoder()
