"""Prints bench/gpu_check.sh's table from its files: the GPU checks, every step's status and time
(so a failed or skipped run shows up, not only the ones that printed a row), then one row per
training run with tokens/s, MFU, peak memory and the ratio to the eager baseline of the same
dtype, then the issue's targets (issue 13) with measured values. Missing files are fine.

usage: gpu_report.py BENCH_JSONL [CHECKS_JSONL [RUNS_TSV]]
"""
import json
import sys


def rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def runs(path):
    """(name, status, seconds) per line of gpu_check.sh's runs.tsv."""
    try:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main():
    bench = rows(sys.argv[1])
    checks = rows(sys.argv[2]) if len(sys.argv) > 2 else []
    steps = runs(sys.argv[3]) if len(sys.argv) > 3 else []
    if steps:
        print("steps (status, seconds):")
        for step in steps:
            name, status, seconds = (step + ["", "", ""])[:3]
            print(f"  {name:<24} {status:<40} {seconds:>5}")
        print()
    if checks:
        print("GPU checks (CUDA path vs CPU reference):")
        for c in checks:
            status = "PASS" if c["pass"] else "FAIL  " + c["error"][:160]
            print(f"  {c['check']:<20} {status}")
        print()
    if not bench:
        print("no benchmark rows")
        return
    peak = bench[0].get("peak_tflops", 989.0)
    print(f"GPT-2 124M training, 1 GPU, batch {bench[0]['batch']} x {bench[0]['seq']} tokens, "
          f"{bench[0]['steps']} timed steps; MFU = 6 * params * tokens/s / {peak:g} TFLOPS "
          "(H100/H200 SXM dense bf16 peak)")
    eager = {r["dtype"]: r for r in bench if r["impl"] == "pytorch-eager"}
    head = f"{'run':<34}{'tokens/s':>11}{'MFU':>8}{'peak GiB':>10}{'vs eager':>10}{'loss':>8}"
    print(head)
    print("-" * len(head))
    for r in bench:
        base = eager.get(r["dtype"])
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        print(f"{r['name']:<34}{r['tokens_per_s']:>11.0f}{100 * r['mfu']:>7.1f}%"
              f"{r['peak_mem_bytes'] / 2**30:>10.2f}{ratio:>10}{r['final_loss']:>8.3f}")
    by = {(r["impl"], r["dtype"], r["stage"], r["offload"]): r for r in bench}
    s0 = by.get(("zerotorch", "bf16", 0, False))
    s3 = by.get(("zerotorch", "bf16", 3, False))
    eb = eager.get("bf16")
    print()
    print("targets (issue 13):")
    if s0:
        print(f"  bf16 stage 0 MFU >= 40%:            {100 * s0['mfu']:.1f}%  "
              f"{'met' if s0['mfu'] >= 0.40 else 'NOT met'}")
    if s0 and eb:
        r = s0["tokens_per_s"] / eb["tokens_per_s"]
        print(f"  bf16 stage 0 >= 1.0x eager:          {r:.2f}x  {'met' if r >= 1.0 else 'NOT met'}")
    if s0 and s3:
        r = s3["tokens_per_s"] / s0["tokens_per_s"]
        print(f"  stage 3 within 15% of stage 0:       {r:.2f}x  {'met' if r >= 0.85 else 'NOT met'}")
    failed = [c["check"] for c in checks if not c["pass"]]
    print(f"  GPU checks pass:                     {'all' if checks and not failed else failed or 'not run'}")


if __name__ == "__main__":
    main()
