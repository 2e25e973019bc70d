"""Interop: the zt-consolidate output loads in Python and equals the C++ side's parameters.

usage: check_safetensors.py OUT.safetensors REF_DIR
REF_DIR/index.txt lists `name d0 d1 ...` per parameter; REF_DIR/<name>.bin holds its fp32 values.
"""
import os
import sys

import numpy as np
from safetensors.numpy import load_file

out, ref = sys.argv[1], sys.argv[2]
got = load_file(out)
want = {}
with open(os.path.join(ref, "index.txt")) as f:
    for line in f:
        name, *dims = line.split()
        v = np.fromfile(os.path.join(ref, name + ".bin"), dtype="<f4").reshape([int(d) for d in dims])
        want[name] = v
assert set(got) == set(want), f"names differ: {sorted(set(got) ^ set(want))}"
for name, v in want.items():
    g = got[name]
    assert g.dtype == np.float32, f"{name}: dtype {g.dtype}"
    assert g.shape == v.shape, f"{name}: shape {g.shape} vs {v.shape}"
    assert np.array_equal(g, v), f"{name}: values differ (max {np.abs(g - v).max()})"
print(f"interop ok: {len(want)} tensors match")
