"""Prints bench/gpu_check.sh's table from its files: every step's status and time (so a failed or
skipped run shows up, not only the ones that printed a row), the GPU checks with every failing
case of each, then one row per training run with tokens/s, MFU, peak memory and the ratio to the
eager baseline of the same dtype (a run that failed, with a non-finite loss or no optimizer step,
is shown as FAIL with its reason), then the performance targets with measured values. Missing
files are fine, and so is a line that is not JSON (a run killed mid-write): it is reported.

usage: gpu_report.py BENCH_JSONL [CHECKS_JSONL [RUNS_TSV]]
"""
import json
import math
import sys
import textwrap


def rows(path):
    """(parsed rows, unreadable lines) of a JSON-lines file."""
    good, bad = [], []
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    good.append(json.loads(line))
                except ValueError:
                    bad.append(line.strip())
    except FileNotFoundError:
        pass
    return good, bad


def runs(path):
    """(name, status, seconds) per line of gpu_check.sh's runs.tsv."""
    try:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wrapped(text, indent):
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent + "  ")


def check_passed(c):
    return c.get("pass") is True


def print_checks(checks, unreadable):
    print("GPU checks (CUDA path vs CPU reference):")
    for c in checks:
        name = str(c.get("check", "?"))
        if check_passed(c):
            print(f"  {name:<22} {'SKIP' if c.get('skipped') else 'PASS'}")
            continue
        error = str(c.get("error", "")) or "failed without a message"
        head, sep, cases = error.partition(" cases failed: ")
        if sep:  # "N of M cases failed: A: why | B: why": one case a line
            print(f"  {name:<22} FAIL  {head} cases failed:")
            for case in cases.split(" | "):
                print(wrapped(case, " " * 30))
        else:
            print(f"  {name:<22} FAIL")
            print(wrapped(error, " " * 30))
    for line in unreadable:
        print(f"  {'?':<22} FAIL  unreadable line: {line[:200]}")
    print()


def bench_ok(r):
    return r.get("ok", True) is True


def number(r, key):
    v = r.get(key)
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def print_bench(bench):
    measured = [r for r in bench if bench_ok(r)]
    if measured:
        first = measured[0]
        peak = first.get("peak_tflops", 989.0)
        print(f"GPT-2 124M training, 1 GPU, batch {first.get('batch')} x {first.get('seq')} "
              f"tokens, {first.get('steps')} timed steps; MFU = 6 * params * tokens/s / "
              f"{peak:g} TFLOPS (H100/H200 SXM dense bf16 peak)")
    else:
        print("GPT-2 124M training, 1 GPU: no run passed")
    eager = {r.get("dtype"): r for r in bench if r.get("impl") == "pytorch-eager" and bench_ok(r)}
    head = f"{'run':<34}{'tokens/s':>11}{'MFU':>8}{'peak GiB':>10}{'vs eager':>10}{'loss':>8}"
    print(head)
    print("-" * len(head))
    for r in bench:
        name = str(r.get("name", "?"))
        if not bench_ok(r):
            print(f"{name:<34} FAIL")
            print(wrapped(str(r.get("error", "")) or "failed without a message", " " * 36))
            continue
        base = eager.get(r.get("dtype"))
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        loss = number(r, "final_loss")
        loss_text = f"{loss:>8.3f}" if loss is not None else f"{'-':>8}"
        print(f"{name:<34}{r['tokens_per_s']:>11.0f}{100 * r['mfu']:>7.1f}%"
              f"{r['peak_mem_bytes'] / 2**30:>10.2f}{ratio:>10}{loss_text}")


def print_targets(bench, checks, unreadable):
    ok = [r for r in bench if bench_ok(r)]
    eager = {r["dtype"]: r for r in ok if r.get("impl") == "pytorch-eager"}
    by = {(r.get("impl"), r.get("dtype"), r.get("stage"), r.get("offload")): r for r in ok}
    s0 = by.get(("zerotorch", "bf16", 0, False))
    s3 = by.get(("zerotorch", "bf16", 3, False))
    eb = eager.get("bf16")
    print()
    print("targets:")
    if s0:
        print(f"  bf16 stage 0 MFU >= 40%:            {100 * s0['mfu']:.1f}%  "
              f"{'met' if s0['mfu'] >= 0.40 else 'NOT met'}")
    if s0 and eb:
        r = s0["tokens_per_s"] / eb["tokens_per_s"]
        print(f"  bf16 stage 0 >= 1.0x eager:          {r:.2f}x  "
              f"{'met' if r >= 1.0 else 'NOT met'}")
    if s0 and s3:
        r = s3["tokens_per_s"] / s0["tokens_per_s"]
        print(f"  stage 3 within 15% of stage 0:       {r:.2f}x  "
              f"{'met' if r >= 0.85 else 'NOT met'}")
    failed_runs = [str(r.get("name", "?")) for r in bench if not bench_ok(r)]
    if failed_runs:
        print(f"  training runs pass:                  {failed_runs} FAILED")
    failed = [str(c.get("check", "?")) for c in checks if not check_passed(c)]
    failed += ["(unreadable line)"] * len(unreadable)
    verdict = "all" if checks and not failed else failed or "not run"
    print(f"  GPU checks pass:                     {verdict}")


def main():
    bench, bench_unreadable = rows(sys.argv[1])
    checks, checks_unreadable = rows(sys.argv[2]) if len(sys.argv) > 2 else ([], [])
    steps = runs(sys.argv[3]) if len(sys.argv) > 3 else []
    if steps:
        print("steps (status, seconds):")
        for step in steps:
            name, status, seconds = (step + ["", "", ""])[:3]
            print(f"  {name:<34} {status:<44} {seconds:>5}")
        print()
    if checks or checks_unreadable:
        print_checks(checks, checks_unreadable)
    for line in bench_unreadable:
        print(f"unreadable benchmark line: {line[:200]}")
    if not bench:
        print("no benchmark rows")
    else:
        print_bench(bench)
    print_targets(bench, checks, checks_unreadable)


if __name__ == "__main__":
    main()
