"""Interop: a safetensors file written by zerotorch loads in Python and equals the C++ side.

usage: check_safetensors.py OUT.safetensors REF_DIR [DTYPE]
REF_DIR/index.txt lists `name d0 d1 ...` per tensor; REF_DIR/<name>.bin holds its raw values in
DTYPE (float32, the default, as zt-consolidate writes; or bfloat16/float16 for save_16bit_model).
"""
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

out, ref = sys.argv[1], sys.argv[2]
dtype = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "float32")
got = load_file(out)
want = {}
with open(os.path.join(ref, "index.txt")) as f:
    for line in f:
        name, *dims = line.split()
        raw = np.fromfile(os.path.join(ref, name + ".bin"), dtype=np.uint8)
        want[name] = torch.frombuffer(bytearray(raw.tobytes()), dtype=dtype).reshape(
            [int(d) for d in dims])
assert set(got) == set(want), f"names differ: {sorted(set(got) ^ set(want))}"
for name, v in want.items():
    g = got[name]
    assert g.dtype == dtype, f"{name}: dtype {g.dtype}, want {dtype}"
    assert g.shape == v.shape, f"{name}: shape {tuple(g.shape)} vs {tuple(v.shape)}"
    assert torch.equal(g, v), f"{name}: values differ (max {(g.float() - v.float()).abs().max()})"
print(f"interop ok: {len(want)} {dtype} tensors match")
