"""A DeepSpeed-style script (``import zerotorch as deepspeed``) that trains one step at ZeRO
stage 3 and then ends as argv[1] says: "return" (falls off the end), "exit" (sys.exit(3)),
"raise" (an uncaught exception), "return_dist" and "raise_dist" (the same in a script that
called ``init_distributed`` first: torch.distributed's process group must be torn down before
the interpreter finalizes, and its excepthook goes over the package's) or "raise_one" (rank 1
raises while the others go on to a step that waits for it). It never tears the engine down
itself: the package must, so that the rank ends with the script's own status, never an
abort."""

import sys

import torch

import zerotorch as deepspeed

how = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
config = {"train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
if how.endswith("_dist"):
    deepspeed.init_distributed()
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=config)
loss = engine(torch.randn(2, 8)).square().mean()
engine.backward(loss)
engine.step()
print(f"rank {engine.global_rank}: trained", flush=True)
if how == "exit":
    sys.exit(3)
if how in ("raise", "raise_dist"):
    raise RuntimeError("the script's own error")
if how == "raise_one":
    if engine.global_rank == 1:
        raise RuntimeError("the script's own error")
    engine.backward(engine(torch.randn(2, 8)).square().mean())
    engine.step()
