"""Expert parallelism against every expert on every rank (bench/moe/README.md): train_llama's
Mixtral (the same shape as moe_bench.py's: 4 layers, hidden 256, 8 experts of 512, top 2), from
the same seed on the main job's KJV shard, 2 ranks, one intra-op thread each, at ZeRO stage S
with expert_parallel.autoep_size 1 and 2, alternated run by run.

  python bench/moe/ep_bench.py [--stages 2,3] [--steps 30] [--repeats 3] [--build-dir build]

Tokens/s is train_llama's own (summary.json: real tokens over both ranks per second of
training); memory is the larger rank's peak resident set, as GNU time reports it for ztrun
(the largest of the processes it waited for). At stage 3 the summary also gives rank 0's gather
bytes: rebuilt, and left out because no rank of the experts' group routed rows to them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CONFIG = """train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 1
gradient_clipping: 1.0
steps_per_print: 1000
seed: 1234
optimizer:
  type: AdamW
  params: {{lr: 1.0e-4, weight_decay: 0.01}}
zero_optimization:
  stage: {stage}
expert_parallel:
  enabled: true
  autoep_size: {ep}
data:
  max_length: 256
  bucketing: false
model:
  model_type: mixtral
  vocab_size: 0
  hidden_size: 256
  intermediate_size: 512
  num_hidden_layers: 4
  num_attention_heads: 8
  num_key_value_heads: 4
  num_local_experts: 8
  num_experts_per_tok: 2
  max_position_embeddings: 256
  tie_word_embeddings: false
"""


def run(build, stage, ep, steps, work):
    config = os.path.join(work, f"s{stage}_ep{ep}.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(stage=stage, ep=ep))
    out = os.path.join(work, f"s{stage}_ep{ep}")
    bin_dir = os.path.join(build, "bin")
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M", os.path.join(bin_dir, "ztrun"), "--standalone",
           "--nproc-per-node", "2", os.path.join(bin_dir, "train_llama"), "--config", config,
           "--train-shard", os.path.join(build, "main_job", "corpora", "kjv_train.ztt"),
           "--steps", str(steps), "--out-dir", out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"stage {stage} ep {ep} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    rss = [int(l.split()[1]) for l in r.stderr.splitlines() if l.startswith("MAXRSS ")][-1]
    s = json.load(open(os.path.join(out, "summary.json")))
    return {"stage": stage, "ep": ep, "tokens_per_s": s["tokens_per_s"],
            "peak_rss_mib": rss / 1024.0, "valid_loss_after": s.get("valid_loss_after"),
            "unrouted_mib": s.get("stage3_unrouted_bytes", 0) / 2**20,
            "gathered_mib": s.get("stage3_gathered_bytes", 0) / 2**20}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stages", default="2,3")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        for stage in [int(s) for s in a.stages.split(",")]:
            for _ in range(a.repeats):
                for ep in (1, 2):
                    rows.append(run(a.build_dir, stage, ep, a.steps, work))
                    print(json.dumps(rows[-1]), flush=True)
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("| stage | autoep_size | tokens/s (median) | peak RSS MiB (larger rank) | runs (tokens/s) "
          "| stage-3 gathers, rank 0: MiB rebuilt / MiB of unrouted experts left out |")
    print("|---|---|---|---|---|---|")
    for stage in sorted({r["stage"] for r in rows}):
        for ep in (1, 2):
            runs = [r for r in rows if r["stage"] == stage and r["ep"] == ep]
            tps = sorted(r["tokens_per_s"] for r in runs)
            print(f"| {stage} | {ep} | {tps[len(tps) // 2]:.0f} | "
                  f"{max(r['peak_rss_mib'] for r in runs):.0f} | "
                  f"{', '.join(f'{t:.0f}' for t in tps)} | "
                  + (f"{runs[0]['gathered_mib']:.0f} / {runs[0]['unrouted_mib']:.1f} |"
                     if stage == 3 else "- |"))


if __name__ == "__main__":
    main()
