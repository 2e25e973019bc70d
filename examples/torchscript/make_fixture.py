"""Writes the TorchScript fixture of train_torchscript: a small regression model written in
Python and compiled with torch.jit.script, and its data.

    python make_fixture.py OUT_DIR     ->  OUT_DIR/model.pt, OUT_DIR/data.pt

model.pt: TinyRegressor, nested submodules (names body.0.weight, ..., head.weight), a buffer
(input_scale) and a frozen parameter (offset, requires_grad=False), so the C++ adapter's
mirroring of parameters, buffers and frozen parameters is exercised. It exports
loss(x, y) -> mean squared error, which the C++ loop calls.
data.pt: a scripted module holding buffers x (N, 16) and y (N, 1): y = tanh(x w) + noise.
Deterministic (seeded).
"""
import os
import sys

import torch
from torch import nn


class TinyRegressor(nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.LayerNorm(d_hidden),
                                  nn.Linear(d_hidden, d_hidden), nn.GELU())
        self.head = nn.Linear(d_hidden, 1)
        self.register_buffer("input_scale", torch.full((d_in,), 0.5))
        self.offset = nn.Parameter(torch.tensor([0.25]), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x * self.input_scale)) + self.offset

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.forward(x), y)


class Data(nn.Module):
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        super().__init__()
        self.register_buffer("x", x)
        self.register_buffer("y", y)

    def forward(self) -> torch.Tensor:
        return self.x


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    n, d = 512, 16
    x = torch.randn(n, d)
    w = torch.randn(d, 1) / d ** 0.5
    y = torch.tanh(2 * x @ w) + 0.05 * torch.randn(n, 1)
    torch.jit.script(Data(x, y)).save(f"{out}/data.pt")
    model = torch.jit.script(TinyRegressor(d))
    model.save(f"{out}/model.pt")
    print(f"{out}/model.pt: {sum(p.numel() for p in model.parameters())} parameters, "
          f"initial loss {model.loss(x, y).item():.4f}; {out}/data.pt: {n} samples")


if __name__ == "__main__":
    main(sys.argv[1])
