"""zerotorch.initialize over a Python torch.nn.Module: ZeRO stages 0-2, 1 and 2 ranks (real
processes under ztrun), accumulation 1 and 3, with and without clipping, trains to the parameters
of single-process torch.optim.AdamW (engine_equivalence.py checks, and checks that a checkpoint
resumes bit-identically); stage 3 and a bad config are one-line errors."""

import os
import subprocess
import sys

import pytest

import zerotorch

HERE = os.path.dirname(os.path.abspath(__file__))
ZTRUN = os.path.join(os.environ.get("ZT_BINARY_DIR", ""), "bin", "ztrun")


def run_ranks(world, *args, tmp_path):
    cmd = [ZTRUN, "--standalone", "--nproc-per-node", str(world), sys.executable,
           os.path.join(HERE, "engine_equivalence.py"), *map(str, args), str(tmp_path / "ckpt")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count(": equal") == world, r.stdout[-2000:]


@pytest.mark.parametrize("stage", [0, 1, 2])
@pytest.mark.parametrize("world", [1, 2])
def test_stages_train_like_torch_adamw(stage, world, tmp_path):
    run_ranks(world, stage, 1, 0.0, tmp_path=tmp_path)


@pytest.mark.parametrize("stage", [0, 2])
def test_accumulation_and_clipping(stage, tmp_path):
    run_ranks(2, stage, 3, 0.05, tmp_path=tmp_path)


def test_stage3_is_refused_with_one_line(tmp_path):
    import torch
    config = {"train_batch_size": 2, "zero_optimization": {"stage": 3},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    with pytest.raises(RuntimeError, match="stage 3 is not yet available for Python modules"):
        zerotorch.initialize(model=torch.nn.Linear(2, 2), config=config)


def test_bad_config_names_the_key(tmp_path):
    import torch
    config = {"train_batch_size": 2, "zero_optimization": {"stgae": 1}}
    with pytest.raises(RuntimeError, match="zero_optimization.stgae"):
        zerotorch.initialize(model=torch.nn.Linear(2, 2), config=config)


def test_model_parameters_other_than_the_trainable_ones_are_refused():
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    config = {"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    groups = [{"params": list(model[0].parameters()), "weight_decay": 0.0},
              {"params": list(model[1].parameters())}]
    with pytest.raises(ValueError, match="parameter groups"):
        zerotorch.initialize(model=model, model_parameters=groups, config=config)
    with pytest.raises(ValueError, match="trainable parameters"):
        zerotorch.initialize(model=model, model_parameters=model[0].parameters(), config=config)
