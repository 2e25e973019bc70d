"""DeepSpeed's own choice of leaf modules for stage3_module_granularity_threshold, run in the
DeepSpeed virtualenv (scripts/setup_deepspeed.sh): the model of granularity_model(), each
parameter given the ds_numel zero.Init would give it, DeepSpeedZeRoOffload's two passes
(_get_granularity_recursively, _set_leaf_by_threshold_preorder) run on it, and the names of the
modules it marked z3 leaves printed as JSON, one list per threshold on the command line."""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from granularity_model import granularity_model  # noqa: E402

from deepspeed.runtime.zero.parameter_offload import DeepSpeedZeRoOffload  # noqa: E402
from deepspeed.utils import z3_leaf_module  # noqa: E402


class _Offload:
    """The two passes and the state they keep, as on DeepSpeedZeRoOffload (whose constructor
    needs a whole engine)."""

    _get_granularity_recursively = DeepSpeedZeRoOffload._get_granularity_recursively
    _set_leaf_by_threshold_preorder = DeepSpeedZeRoOffload._set_leaf_by_threshold_preorder

    def __init__(self):
        self.min_granularity_value = sys.maxsize
        self.min_granularity_layer = None
        self.granularity_info = set()
        self.z3_leaf_layers = []


out = []
for threshold in map(int, sys.argv[1:]):
    model = granularity_model()
    for p in model.parameters():
        p.ds_numel = p.numel()
    state = _Offload()
    state._get_granularity_recursively(model)
    if state.min_granularity_value <= threshold:
        state._set_leaf_by_threshold_preorder(model, threshold)
    out.append([n for n, m in model.named_modules() if z3_leaf_module(m)])
print(json.dumps(out))
