"""The longest sequence that trains under a per-rank memory budget, with and without Ulysses
sequence parallelism, and tokens/s at that length (bench/sequence_parallel/README.md).

  python bench/sequence_parallel/run_sequence.py --budget-mib 700 [--build-dir build]
      [--sps 1,2] [--step 1024] [--max-seq 32768] [--tile N] [--mlp-tile N] [--json FILE]

For each sequence-parallel size, a binary search over multiples of --step: a length fits when
zt_bench_sequence (2 ranks under mpirun, 2 steps) completes with the larger rank's peak resident
memory at or under the budget. Prints one row per size: the longest length that fits, its peak
and tokens/s, and the ratio to sp 1's length.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def probe(args, sp, seq):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
               os.path.join(args.build_dir, "bin", "zt_bench_sequence"), "--seq", str(seq),
               "--sp", str(sp), "--tile", str(args.tile), "--mlp-tile", str(args.mlp_tile),
               "--steps", "2", "--json", out.name]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"sp {sp} seq {seq} failed (rc {r.returncode}):\n{r.stdout[-2000:]}")
        row = json.load(open(out.name))
    fits = row["peak_rss_mib"] <= args.budget_mib
    print(f"  sp {sp} seq {seq:6d}: peak {row['peak_rss_mib']:.0f} MiB, "
          f"{row['tokens_per_s']:.0f} tokens/s -> {'fits' if fits else 'over'}", flush=True)
    return fits, row


def longest(args, sp):
    lo, hi, best = 1, args.max_seq // args.step, None  # in units of --step
    while lo <= hi:
        mid = (lo + hi) // 2
        fits, row = probe(args, sp, mid * args.step)
        if fits:
            best, lo = row, mid + 1
        else:
            hi = mid - 1
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-mib", type=float, required=True)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--sps", default="1,2")
    p.add_argument("--step", type=int, default=1024)
    p.add_argument("--max-seq", type=int, default=32768)
    p.add_argument("--tile", type=int, default=0,
                   help="positions per tile of the head and loss (0: the whole logits)")
    p.add_argument("--mlp-tile", type=int, default=0,
                   help="positions per tile of each layer's MLP (0: the whole sequence)")
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for sp in [int(s) for s in args.sps.split(",")]:
        best = longest(args, sp)
        if best is None:
            sys.exit(f"sp {sp}: not even {args.step} tokens fit in {args.budget_mib} MiB")
        rows.append(best)
    base = rows[0]["seq"]
    tiles = f", loss tiles of {args.tile}" if args.tile else ""
    tiles += f", MLP tiles of {args.mlp_tile}" if args.mlp_tile else ""
    print(f"\nbudget {args.budget_mib:.0f} MiB per rank, 2 ranks{tiles}")
    print("| sp | dp | longest sequence | x sp 1 | peak RSS (MiB) | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['sp']} | {r['dp']} | {r['seq']} | {r['seq'] / base:.2f} | "
              f"{r['peak_rss_mib']:.0f} | {r['tokens_per_s']:.0f} |")
    if args.json:
        json.dump({"budget_mib": args.budget_mib, "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
