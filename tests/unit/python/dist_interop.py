"""One rank (under ztrun): zerotorch.init_distributed() makes torch.distributed's process group
over the job's own rendezvous, and it works next to the engine."""

import torch
import torch.distributed as dist

import zerotorch


def main():
    zerotorch.init_distributed()
    env = zerotorch.launch_env()
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    assert dist.get_rank() == env["rank"] and dist.get_world_size() == env["world_size"]
    t = torch.tensor([float(env["rank"] + 1)])
    dist.all_reduce(t)
    n = env["world_size"]
    assert t.item() == n * (n + 1) / 2, t
    model = torch.nn.Linear(4, 4)
    config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    engine, _, _, _ = zerotorch.initialize(model=model, config=config)
    x = torch.randn(2, 4)
    engine.backward(engine(x).square().mean())
    engine.step()
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        w = model.weight.detach().clone()
    dist.all_reduce(w)  # the same weights on every rank after the step
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        assert torch.allclose(w, model.weight.detach() * n)
    dist.barrier()
    print(f"rank {dist.get_rank()}: equal", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
