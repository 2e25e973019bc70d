"""same_losses.py RUN_A RUN_B REL_TOL [LOG_B DEVICE]: two training runs' per-step losses (their
out-dirs' metrics.jsonl) are as many and agree within REL_TOL relative; used to compare a
program's run on the test device with the same run on the CPU. With LOG_B and DEVICE, run B's log
must also say it trained on DEVICE (the program's "device: DEVICE:0" line)."""
import json
import math
import sys


def losses(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line)["loss"] for line in f]


a, b = losses(sys.argv[1]), losses(sys.argv[2])
tol = float(sys.argv[3])
assert a and len(a) == len(b), (len(a), len(b))
for step, (x, y) in enumerate(zip(a, b), 1):
    assert math.isclose(x, y, rel_tol=tol), f"step {step}: {x} vs {y} (rel tol {tol})"
if len(sys.argv) > 5:
    line = f"device: {sys.argv[5]}:0"
    with open(sys.argv[4]) as f:
        assert line in f.read(), f"{sys.argv[4]}: no '{line}'"
print(f"{sys.argv[2]}: {len(b)} losses equal {sys.argv[1]}'s within {tol}")
