"""The Python front door on the host-backed test device (testdevice/): a transformers GPT-2 at
stage 3 with its optimizer offloaded to the host trains on zttest:0 as on the CPU. The module is
moved there, and every tensor the engine makes must be on it (a host tensor next to a device one
fails there, as on CUDA); the gradients go to pinned host memory and the updated weights come
back through the side-stream copies a GPU takes. Within 1e-6 relative, not bit for bit: some ATen
ops decompose differently off the CPU (transformers' attention among them), and GPT-2's key bias
has a gradient of pure rounding noise, which Adam would turn into whole steps of lr, so the
optimizer is SGD with momentum here (Adam on the device: device_test.cpp). Prints ": equal"."""

import copy
import math

import torch
import transformers

import zerotorch

# Before this process's first backward: autograd sizes its per-device threads once.
zerotorch.devices.resolve_device("zttest")
cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
torch.manual_seed(0)
base = transformers.GPT2LMHeadModel(cfg)
config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "SGD", "params": {"lr": 5e-2, "momentum": 0.9}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
torch.manual_seed(1)
ids = torch.randint(0, 64, (3, 2, 12))
results = {}
for device in ("cpu", "zttest"):
    model = copy.deepcopy(base)
    engine, _, _, _ = zerotorch.initialize(model=model, config=config, device=device)
    assert engine.device.type == device, engine.device
    assert all(p.device.type == device for p in model.parameters())
    losses = []
    for step in range(3):
        batch = ids[step].to(engine.device)
        loss = engine(input_ids=batch, labels=batch).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        params = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    engine.destroy()
    results[device] = (losses, params)
(cpu_losses, cpu_params), (dev_losses, dev_params) = results["cpu"], results["zttest"]
for a, b in zip(cpu_losses, dev_losses):
    assert math.isclose(a, b, rel_tol=1e-6), (cpu_losses, dev_losses)
for name, want in cpu_params.items():
    rel = ((dev_params[name].double() - want.double()).norm() / want.double().norm()).item()
    assert rel <= 1e-6, (name, rel)
print(f"losses {dev_losses}: equal")
