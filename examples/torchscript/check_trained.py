"""Checks train_torchscript's output from Python: the trained TorchScript module loads, its loss
on the data equals the one the C++ program reported (summary.json loss_after), it is below the
untrained model's, every trainable parameter moved, and the frozen parameter and the buffer are
unchanged.

    python check_trained.py FIXTURE_DIR RUN_DIR
"""
import json
import math
import sys

import torch

fixture, run = sys.argv[1], sys.argv[2]
data = torch.jit.load(f"{fixture}/data.pt")
x, y = data.x, data.y
initial = torch.jit.load(f"{fixture}/model.pt")
trained = torch.jit.load(f"{run}/trained.pt")
with open(f"{run}/summary.json") as f:
    summary = json.loads(f.read())
with torch.no_grad():
    loss0, loss1 = initial.loss(x, y).item(), trained.loss(x, y).item()
reported = summary["loss_after"]
assert math.isclose(loss1, reported, rel_tol=1e-4, abs_tol=1e-6), \
    f"trained.pt loss {loss1} in Python, {reported} reported by train_torchscript"
assert math.isclose(loss0, summary["loss_before"], rel_tol=1e-4, abs_tol=1e-6), \
    f"model.pt loss {loss0} in Python, {summary['loss_before']} reported before training"
assert loss1 < loss0, f"loss did not decrease: {loss0} -> {loss1}"
p0, p1 = dict(initial.named_parameters()), dict(trained.named_parameters())
assert p0.keys() == p1.keys(), (p0.keys(), p1.keys())
for name, value in p1.items():
    if p0[name].requires_grad:
        assert not torch.equal(value, p0[name]), f"{name} did not change in training"
    else:
        assert torch.equal(value, p0[name]), f"frozen {name} changed in training"
assert torch.equal(trained.input_scale, initial.input_scale), "buffer input_scale changed"
print(f"{run}/trained.pt: loss {loss0:.4f} -> {loss1:.4f} (C++ reported {reported:.4f}); "
      f"{len(p1)} parameters checked")
