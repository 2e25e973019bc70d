"""The memory plan (core/plan/memory_plan.h) of train_llama runs split over sequence, tensor and
expert parallel ranks, against measurement, each within 10%:

  llama_memory_plan.py BIN_DIR WORK_DIR

train_llama (--measure-memory) plans the model this rank holds with one layer of each kind and
the root probed as this rank's part of the split (examples/llama/llama_plan.h) and writes the plan
and the largest rank's measured peaks into summary.json; what is measured where is as in
gpt_memory_plan.py (the test device's allocators; on the CPU the most CPU tensor bytes alive at
once plus the NVMe swap buffers). Every sample is max_length tokens.

The configurations: on 2 ranks a LLaMA with grouped-query attention at sequence parallelism 2
(stages 2 and 3) and tensor parallelism 2 (stages 1 and 3), a Mixtral-shaped mixture of experts
at expert parallelism 2 (stages 2 and 3), with and without activation checkpointing, on the
test device and on the CPU; on 4 ranks of the CPU (the test device has 2) tensor and expert
splits beside data parallelism (a ZeRO world of 2 ranks under the split, stage-3 gathers and
the routed experts' among them); on one,
a LLaMA and a Mixtral without a split and a Mistral whose sliding window is shorter than the
sequence (its mask and the masked attention). The ones marked
held out are configurations the plan's rules were not tuned on. zt-plan, given the same
configurations before launch, prints rank 0's plan of each.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_memory_plan as common  # noqa: E402

LLAMA = {"model_type": "llama", "vocab_size": 0, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "max_position_embeddings": 64, "tie_word_embeddings": False}
MIXTRAL = dict(LLAMA, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2,
               intermediate_size=256)
MISTRAL = dict(LLAMA, model_type="mistral", sliding_window=16)


def config(zero, model, split=None, ckpt=False, micro=4):
    c = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
         "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": zero, "model": dict(model, activation_checkpointing=ckpt),
         "data": {"max_length": 64}}
    c.update(split or {})
    return c


def main(bin_dir, work):
    shard = common.corpus(bin_dir, work)
    sp2 = {"sequence_parallel_size": 2}
    tp2 = {"tensor_parallel": {"autotp_size": 2}}
    ep2 = {"expert_parallel": {"enabled": True, "autoep_size": 2}}
    # (name, config, device, world, held out)
    runs = [
        ("llama_s3", config({"stage": 3}, LLAMA), "zttest", 1, False),
        ("llama_sp2_s3", config({"stage": 3}, LLAMA, sp2), "zttest", 2, False),
        ("llama_tp2_s3", config({"stage": 3}, LLAMA, tp2), "zttest", 2, False),
        ("llama_tp2_s1_ckpt", config({"stage": 1}, LLAMA, tp2, ckpt=True), "zttest", 2, True),
        ("mixtral_s2", config({"stage": 2}, MIXTRAL), "zttest", 1, False),
        ("mixtral_ep2_s3", config({"stage": 3}, MIXTRAL, ep2), "zttest", 2, False),
        ("mixtral_ep2_s2_ckpt", config({"stage": 2}, MIXTRAL, ep2, ckpt=True), "zttest", 2, True),
        ("cpu_llama_sp2_s2", config({"stage": 2}, LLAMA, sp2), "cpu", 2, True),
        ("cpu_llama_tp2_s3", config({"stage": 3}, LLAMA, tp2), "cpu", 2, False),
        ("cpu_mixtral_ep2_s3", config({"stage": 3}, MIXTRAL, ep2), "cpu", 2, False),
        ("cpu_llama_tp2_dp2_s3", config({"stage": 3}, LLAMA, tp2), "cpu", 4, True),
        ("cpu_mixtral_ep2_dp2_s3", config({"stage": 3}, MIXTRAL, ep2), "cpu", 4, True),
        ("mistral_window16_s2", config({"stage": 2}, MISTRAL), "zttest", 1, True),
    ]
    common.check_plans(runs, lambda name, cfg, device, world: common.train(
        bin_dir, work, shard, name, cfg, device, world, program="train_llama"))
    # zt-plan plans the same runs before launch as rank 0 plans them (the same bytes, as far as
    # the printed sizes show).
    for name, cfg, device, world, _ in runs:
        place = "host" if device == "cpu" else "device"
        summary = json.load(open(os.path.join(work, name, "run", "summary.json")))
        r = subprocess.run([f"{bin_dir}/zt-plan", os.path.join(work, name, "config.json"),
                            "--model", "llama", "--world-size", str(world), "--device", device,
                            "--vocab-size", "128"], capture_output=True, text=True,
                           env=dict(os.environ, ZT_HOST_CACHE="0"))  # as common.train runs
        line = next((l for l in r.stdout.splitlines() if l.strip().startswith(place + " peak")),
                    None)
        assert line is not None, f"{name}: zt-plan printed no {place} peak:\n{r.stdout}{r.stderr}"
        value, unit = line.split()[2:4]
        scale = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
        program = summary[f"plan_{place}_bytes"]
        # Half of the last printed digit (core/plan/memory_plan.cpp format_bytes).
        digits = len(value.split(".")[1]) if "." in value else 0
        assert abs(float(value) * scale - program) <= 0.5 * 10**-digits * scale * 1.001, \
            f"{name}: zt-plan {line.strip()}, train_llama planned {program} B"
    print(f"zt-plan gives train_llama's plans for the {len(runs)} configurations")


if __name__ == "__main__":
    bin_dir, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    main(bin_dir, work)
