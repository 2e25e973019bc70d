"""One rank of ``zerotorch.zero.Init`` against ``deepspeed.zero.Init`` (ztrun starts it, with the
DeepSpeed virtualenv's python: scripts/setup_deepspeed.sh).

usage: zero_init.py OUT

1. **Construction is DeepSpeed's.** Three models are built with the same seed under DeepSpeed's
   Init and under zerotorch's, from the same config: a module whose constructor writes into a
   child's weight directly (DeepSpeed has cut it already: no effect) and through ``Module.apply``
   (gathered, applied, kept), a tiny ``transformers`` Llama and a GPT-2 (tied embedding). Each
   parameter is an empty tensor with the same ``ds_shape`` and ``ds_numel``, this rank's part
   ``ds_tensor`` holds the same elements (element counts that do not divide by the world size
   included), and ``GatheredParameters`` of each library gives the same whole values.
2. **Hugging Face's loading.** Pretrained values (a plain construction's) are put into the
   partitioned Llama as transformers loads a ZeRO-3 model: ``GatheredParameters(params,
   modifier_rank=0)`` around rank 0's ``load_state_dict``; every rank then holds them.
3. **The engine adopts the parts.** That model, given to ``zerotorch.initialize`` at stage 3
   (made whole one unit at a time and cut into the engine's shards), trains bit for bit like the
   same values built whole and given to the engine as usual, and so does a Mixtral (its experts a
   routed unit inside each layer's unit, cut first); a partitioned Llama on the host-backed test
   device trains like its twin on the host; a GPT-2 built partitioned trains at stage 2
   (gathered whole first) like its whole twin.
"""

import copy
import sys

import torch

import zerotorch

STEPS, MICRO, SEQ, VOCAB = 3, 2, 10, 97


class Net(torch.nn.Module):
    """A parent writing into its children once they are built: directly (DeepSpeed: lost) and
    through Module.apply (DeepSpeed: gathered and kept)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 9)
        self.inner = torch.nn.Linear(9, 7)
        self.head = torch.nn.Linear(7, VOCAB)
        torch.nn.init.zeros_(self.inner.bias)
        self.head.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.constant_(m.bias, 0.5)


def make(kind):
    import transformers
    if kind == "net":
        return Net()
    if kind == "mixtral":
        # Experts fused into one parameter per projection, a routed unit inside each layer's
        # unit: the nested unit is cut first.
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            num_local_experts=4, num_experts_per_tok=2))
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0))


def config(stage, optimizer="AdamW"):
    params = {"lr": 1e-2, "weight_decay": 0.01} if optimizer == "AdamW" else \
        {"lr": 5e-2, "momentum": 0.9}
    return {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
            "gradient_clipping": 1.0, "optimizer": {"type": optimizer, "params": params},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                  "reduce_bucket_size": 4000},
            "steps_per_print": 1000}


def built_like_deepspeed(kind, rank, world):
    import deepspeed
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config(3)):
        theirs = make(kind)
    torch.manual_seed(0)
    with zerotorch.zero.Init(config_dict_or_path=config(3)):
        ours = make(kind)
    pairs = list(zip(theirs.named_parameters(), ours.named_parameters()))
    assert len(pairs) == len(list(ours.parameters())) > 0
    for (name, a), (other, b) in pairs:
        assert name == other, (name, other)
        assert zerotorch.zero.is_partitioned(b) and b.numel() == 0, name
        assert tuple(a.ds_shape) == tuple(b.ds_shape) and a.ds_numel == b.ds_numel, name
        size = -(-b.ds_numel // world)
        valid = max(0, min(size, b.ds_numel - rank * size))
        assert b.ds_tensor.numel() == size == a.ds_tensor.numel(), name
        assert torch.equal(a.ds_tensor[:valid], b.ds_tensor[:valid]), name
    with deepspeed.zero.GatheredParameters(list(theirs.parameters())):
        want = {n: p.detach().clone() for n, p in theirs.named_parameters()}
    with zerotorch.zero.GatheredParameters(list(ours.parameters())):
        for name, p in ours.named_parameters():
            assert torch.equal(p.detach(), want[name]), name
    assert all(p.numel() == 0 for p in ours.parameters())
    return ours


def train(engine, data, rank):
    losses = []
    for ids in data:
        part = ids[rank * MICRO:(rank + 1) * MICRO].to(engine.device)
        out = engine(input_ids=part, labels=part)
        engine.backward(out.loss)
        engine.step()
        losses.append(out.loss.item())
    with zerotorch.zero.GatheredParameters(list(engine.module.parameters())):
        final = {n: p.detach().cpu().clone() for n, p in engine.module.named_parameters()}
    engine.destroy()
    return losses, final


def same_training(kind, partitioned, whole, cfg, data, rank, device="cpu"):
    """Bit for bit on the host; on the test device within 1e-6 relative (some ATen ops
    decompose differently there: device_front_door.py), with SGD (Adam would turn rounding
    noise in a near-zero gradient into whole steps of lr)."""
    ours = train(zerotorch.initialize(model=partitioned, config=cfg, device=device)[0], data,
                 rank)
    twin = train(zerotorch.initialize(model=whole, config=cfg, device="cpu")[0], data, rank)
    stage = cfg["zero_optimization"]["stage"]
    if device == "cpu":
        assert ours[0] == twin[0], (kind, stage, ours[0], twin[0])
    else:
        for a, b in zip(ours[0], twin[0]):
            assert abs(a - b) <= 1e-6 * abs(b), (kind, stage, device, ours[0], twin[0])
    for name, value in twin[1].items():
        if device == "cpu":
            assert torch.equal(ours[1][name], value), (kind, stage, name)
        else:
            diff = (ours[1][name] - value).norm().item()
            assert diff <= 1e-6 * max(1.0, value.norm().item()), (kind, stage, device, name, diff)
    print(f"rank {rank}: {kind} stage {stage} on {device}: trains like its whole twin "
          f"({ours[0][-1]:.6f})", flush=True)


def partitioned_and_whole(kind, seed, cfg, rank, values=None):
    """A model built under zerotorch's Init (given ``values`` as transformers loads them, else
    its own), and a whole one holding the same values."""
    torch.manual_seed(seed)
    with zerotorch.zero.Init(config_dict_or_path=cfg):
        model = make(kind)
    if values is not None:
        with zerotorch.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
            if rank == 0:
                model.load_state_dict(values)
    with zerotorch.zero.GatheredParameters(list(model.parameters())):
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    whole = make(kind)
    whole.load_state_dict(state)
    return model, whole


def main(out):
    import transformers
    # The model classes made before any Init: DeepSpeed's puts back the __init__ a class had
    # when it was made inside its context, dropping the wrapper transformers' kernel decorator
    # adds to its attention after that.
    transformers.LlamaForCausalLM, transformers.GPT2LMHeadModel, transformers.MixtralForCausalLM
    # Before this process's first backward: autograd sizes its per-device threads once.
    zerotorch.devices.resolve_device("zttest")
    zerotorch.init_distributed()  # the job's group, which DeepSpeed's comm then uses as it is
    env = zerotorch.launch_env()
    rank, world = env["rank"], env["world_size"]
    for kind in ("net", "gpt2"):
        built_like_deepspeed(kind, rank, world)
    llama = built_like_deepspeed("llama", rank, world)

    # Pretrained values into the partitioned model, as transformers' ZeRO-3 loading puts them.
    torch.manual_seed(1)
    pretrained = make("llama")
    with zerotorch.zero.GatheredParameters(list(llama.parameters()), modifier_rank=0):
        if rank == 0:
            llama.load_state_dict(pretrained.state_dict())
    assert all(p.numel() == 0 for p in llama.parameters())
    with zerotorch.zero.GatheredParameters(list(llama.parameters())):
        for (name, p), q in zip(llama.named_parameters(), pretrained.parameters()):
            assert torch.equal(p.detach(), q.detach()), name

    g = torch.Generator().manual_seed(2)
    data = [torch.randint(0, VOCAB, (MICRO * world, SEQ), generator=g) for _ in range(STEPS)]
    same_training("llama", llama, copy.deepcopy(pretrained), config(3), data, rank)
    model, whole = partitioned_and_whole("llama", 4, config(3, "SGD"), rank,
                                         pretrained.state_dict())
    same_training("llama", model, whole, config(3, "SGD"), data, rank, device="zttest")
    torch.manual_seed(5)
    pretrained = make("mixtral")
    model, whole = partitioned_and_whole("mixtral", 5, config(3), rank, pretrained.state_dict())
    same_training("mixtral", model, whole, config(3), data, rank)
    model, whole = partitioned_and_whole("gpt2", 3, config(2), rank)
    same_training("gpt2", model, whole, config(2), data, rank)
    print(f"rank {rank}: {out}: equal", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
