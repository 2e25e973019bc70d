"""Prints bench/gpu_check.sh's table from its files: every step's status and time (so a failed or
skipped run shows up, not only the ones that printed a row), the GPU checks with every failing
case of each, then one row per training run with tokens/s, MFU, peak memory and the ratios to the
eager and the torch.compile baselines of the same dtype (a run that failed, with a non-finite loss
or no optimizer step, is shown as FAIL with its reason), then the speed targets with measured
values. Missing files are fine, and so is a line that is not JSON (a run killed mid-write): it is
reported.

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
    eager = baseline(bench, "pytorch-eager")
    compiled = baseline(bench, "pytorch-compile")
    head = (f"{'run':<56}{'tokens/s':>11}{'MFU':>8}{'peak GiB':>10}{'vs eager':>10}"
            f"{'vs compile':>12}{'loss':>8}")
    print(head)
    print("-" * len(head))
    for r in bench:
        name = str(r.get("name", "?"))
        if not bench_ok(r):
            print(f"{name:<56} FAIL")
            print(wrapped(str(r.get("error", "")) or "failed without a message", " " * 58))
            continue
        loss = number(r, "final_loss")
        loss_text = f"{loss:>8.3f}" if loss is not None else f"{'-':>8}"
        print(f"{name:<56}{r['tokens_per_s']:>11.0f}{100 * r['mfu']:>7.1f}%"
              f"{r['peak_mem_bytes'] / 2**30:>10.2f}{ratio(r, eager):>10}"
              f"{ratio(r, compiled):>12}{loss_text}")


def baseline(bench, impl):
    """The passing row of a PyTorch baseline per dtype."""
    return {r.get("dtype"): r for r in bench if r.get("impl") == impl and bench_ok(r)}


def ratio(r, base):
    b = base.get(r.get("dtype"))
    return f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}x" if b else "-"


def print_targets(bench, checks, unreadable):
    """The speed targets: every zerotorch run without offload at least as fast as the same step
    under torch.compile and at 30% MFU or more; every offload run at 0.8x or more of the same
    implementation, dtype and stage without offload."""
    ok = [r for r in bench if bench_ok(r)]
    compiled = baseline(bench, "pytorch-compile")
    # The offload rows' reference: the same step without offload (without a loss tile, with the
    # fused loss).
    plain = {(r.get("impl"), r.get("dtype"), r.get("stage")): r
             for r in ok if str(r.get("impl", "")).startswith("zerotorch") and not r["offload"]
             and not r.get("loss_tile") and r.get("fused_loss", True)}
    print()
    print("targets:")
    for r in ok:
        if not str(r.get("impl", "")).startswith("zerotorch"):
            continue
        name = str(r.get("name", "?"))
        if r.get("fused_loss") is False:
            # A comparison row (LibTorch's loss instead of the fused kernel), not a target: the
            # kernel's gain is the fused row's speed over it.
            base = plain.get((r.get("impl"), r.get("dtype"), r.get("stage")))
            if base:
                x = base["tokens_per_s"] / r["tokens_per_s"]
                print(f"  {str(base.get('name', '?')) + ' over ' + name + ':':<84}{x:>6.2f}x  "
                      "(the fused loss's gain)")
            continue
        if r.get("offload"):
            base = plain.get((r.get("impl"), r.get("dtype"), r.get("stage")))
            if base:
                x = r["tokens_per_s"] / base["tokens_per_s"]
                print(f"  {name + ' >= 0.8x without offload:':<84}{x:>6.2f}x  "
                      f"{'met' if x >= 0.8 else 'NOT met'}")
            continue
        print(f"  {name + ' MFU >= 30%:':<84}{100 * r['mfu']:>6.1f}%  "
              f"{'met' if r['mfu'] >= 0.30 else 'NOT met'}")
        base = compiled.get(r.get("dtype"))
        if base:
            x = r["tokens_per_s"] / base["tokens_per_s"]
            print(f"  {name + ' >= 1.0x torch.compile:':<84}{x:>6.2f}x  "
                  f"{'met' if x >= 1.0 else 'NOT met'}")
    failed_runs = [str(r.get("name", "?")) for r in bench if not bench_ok(r)]
    if failed_runs:
        print(f"  training runs pass:  {failed_runs} FAILED")
    failed = [str(c.get("check", "?")) for c in checks if not check_passed(c)]
    failed += ["(unreadable line)"] * len(unreadable)
    verdict = "all" if checks and not failed else failed or "not run"
    print(f"  GPU checks pass:     {verdict}")


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
