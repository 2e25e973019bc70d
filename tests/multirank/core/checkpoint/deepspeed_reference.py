"""The DeepSpeed side of the deepspeed_checkpoint tests: the real `deepspeed` package trains the
GPT example's Python twin (tests/unit/python/gpt_twin.py, the C++ model's parameter names) and
writes everything a user moving to zerotorch brings, plus what the C++ test compares against.

usage (one rank each, under torch.distributed.run, DS_ACCELERATOR=cpu; ZT_DS_STAGE: the ZeRO
stage, default 2):
  deepspeed_reference.py OUT_DIR

OUT_DIR/
  batches.safetensors        input_ids_<s>, labels_<s> (GLOBAL_BATCH, SEQ) int64, s = 0..5: the
                             global batch of step s; data rank r of w takes rows [r*B/w, (r+1)*B/w)
  config.json                the DeepSpeed config (the optimizer's hyper-parameters)
  ckpt/global_step3/         DeepSpeed's own checkpoint after 3 steps (save_checkpoint)
  ckpt/global_step3_universal/   ds_to_universal.py's output for it
  fp32/model.safetensors     zero_to_fp32 of global_step3, safetensors
  fp32/pytorch_model.bin     zero_to_fp32 of global_step3, torch.save
  reference.safetensors      after step 3, read by torch.load from the universal checkpoint
                             (in the parameter's shape): fp32.<name>, exp_avg.<name>,
                             exp_avg_sq.<name>; after step 6:
                             final.<name> (the parameters DeepSpeed trained to)
  losses.json                {"resumed": [loss of steps 4, 5, 6, mean over data ranks],
                              "step": 3, "stage": ZeRO stage, "world": 2}
"""

import glob
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../unit/python"))
from gpt_twin import Gpt  # noqa: E402

import deepspeed  # noqa: E402
from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

VOCAB, D_MODEL, N_LAYER, N_HEAD, SEQ = 64, 32, 2, 2, 16
GLOBAL_BATCH, STEPS, SAVE_AT = 6, 6, 3
STAGE = int(os.environ.get("ZT_DS_STAGE", "2"))


def batches():
    g = torch.Generator().manual_seed(7)
    out = {}
    for s in range(STEPS):
        out[f"input_ids_{s}"] = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
        out[f"labels_{s}"] = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
    return out


def main():
    out = sys.argv[1]
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1, "torch_adam": True}},
        "zero_optimization": {"stage": STAGE},
        "steps_per_print": 1000,
    }
    torch.manual_seed(1234)
    model = Gpt(VOCAB, D_MODEL, N_LAYER, N_HEAD, SEQ)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    data = batches()
    micro = GLOBAL_BATCH // world
    resumed = []
    for s in range(STEPS):
        ids = data[f"input_ids_{s}"][rank * micro:(rank + 1) * micro]
        labels = data[f"labels_{s}"][rank * micro:(rank + 1) * micro]
        loss = engine(ids, torch.ones_like(ids), labels)
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if s >= SAVE_AT:
            resumed.append(mean.item() / world)
        if s + 1 == SAVE_AT:
            engine.save_checkpoint(os.path.join(out, "ckpt"), tag=f"global_step{SAVE_AT}")
    final = {}
    if STAGE == 3:
        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            final = {f"final.{n}": p.detach().clone() for n, p in model.named_parameters()}
    else:
        final = {f"final.{n}": p.detach().clone() for n, p in model.named_parameters()}
    dist.barrier()
    if rank != 0:
        return
    save_file(data, os.path.join(out, "batches.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    tag_dir = os.path.join(out, "ckpt", f"global_step{SAVE_AT}")
    universal = tag_dir + "_universal"
    subprocess.run([sys.executable, os.path.join(os.path.dirname(deepspeed.__file__),
                                                 "checkpoint", "ds_to_universal.py"),
                    "--input_folder", tag_dir, "--output_folder", universal,
                    # A model that is not Megatron's carries no universal_checkpoint_info: the
                    # flag DeepSpeed's docs give for it.
                    "--inject_missing_state"],
                   check=True, stdout=subprocess.DEVNULL)
    fp32 = os.path.join(out, "fp32")
    convert_zero_checkpoint_to_fp32_state_dict(os.path.dirname(tag_dir), fp32,
                                               tag=os.path.basename(tag_dir),
                                               safe_serialization=True, max_shard_size=None)
    convert_zero_checkpoint_to_fp32_state_dict(os.path.dirname(tag_dir), fp32,
                                               tag=os.path.basename(tag_dir),
                                               safe_serialization=False, max_shard_size=None)
    ref = dict(final)
    shapes = {n: p.shape for n, p in model.named_parameters()} if STAGE != 3 else \
        {k[len("final."):]: v.shape for k, v in final.items()}
    for name in shapes:
        for state in ("fp32", "exp_avg", "exp_avg_sq"):
            v = torch.load(os.path.join(universal, "zero", name, f"{state}.pt"), weights_only=False)
            # A stage-3 run's values are flat.
            ref[f"{state}.{name}"] = (v["param"] if isinstance(v, dict) else v).reshape(shapes[name])
    save_file(ref, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump({"resumed": resumed, "step": SAVE_AT, "stage": STAGE, "world": world}, f)
    print("deepspeed_reference: wrote", out, "files:",
          sorted(os.path.relpath(p, out) for p in glob.glob(os.path.join(universal, "*"))),
          flush=True)


if __name__ == "__main__":
    main()
    # Leave without finalizing the interpreter: a gloo worker thread may still be dropping the
    # last collective's tensors then, and taking the GIL during finalization aborts the process
    # ("terminate called without an active exception") now and then. Everything is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
