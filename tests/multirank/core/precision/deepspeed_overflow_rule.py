# Where real DeepSpeed skips a step whose gradients hold inf/NaN: the source of the table in
# core/precision/overflow_vote.h, which precision_test.cpp's InfSkipsTheStepWhereDeepSpeedSkipsIt
# checks zerotorch against. Not run by ctest (one DeepSpeed start per case); run it by hand with
# the DeepSpeed venv (scripts/setup_deepspeed.sh), one rank, CPU, gloo:
#
#   V=~/.cache/zerotorch/venv-deepspeed
#   DS_ACCELERATOR=cpu PATH="$PATH:$V/bin" $V/bin/python -m torch.distributed.run \
#       --nproc_per_node 1 deepspeed_overflow_rule.py STAGE fp32|bf16 CHECK CLIP OFFLOAD
#
# CHECK: bf16.check_grad_overflow (1/0); CLIP: gradient_clipping; OFFLOAD: 1 for
# offload_optimizer cpu. Prints one RESULT line: skipped steps and whether the parameters became
# non-finite after one step with an inf input.
import json
import sys

import deepspeed
import torch

deepspeed.init_distributed(dist_backend="gloo")
stage, dtype, check, clip, offload = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", \
    float(sys.argv[4]), sys.argv[5] == "1"
config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "Adam", "params": {"lr": 0.1, "torch_adam": not offload}},
          "zero_optimization": {"stage": stage}, "gradient_clipping": clip,
          "steps_per_print": 1000}
if dtype == "bf16":
    config["bf16"] = {"enabled": True, "check_grad_overflow": check}
if offload:
    config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
compute = torch.bfloat16 if dtype == "bf16" else torch.float32


def step(x):
    engine.backward(engine(x.to(compute)).float().sum())
    engine.step()


step(torch.randn(2, 4))
x = torch.randn(2, 4)
x[0, 0] = float("inf")
step(x)
if stage == 3:
    from deepspeed.utils import safe_get_full_fp32_param
    params = [safe_get_full_fp32_param(p) for p in engine.module.parameters()]
else:
    params = [p.detach().float() for p in engine.module.parameters()]
norm = engine.get_global_grad_norm()
print("RESULT", json.dumps({
    "stage": stage, "dtype": dtype, "check_grad_overflow": check, "clip": clip,
    "offload": offload, "skipped": engine.skipped_steps,
    "params_nonfinite": any(not torch.isfinite(p).all() for p in params),
    "grad_norm": None if norm is None else float(norm)}))
