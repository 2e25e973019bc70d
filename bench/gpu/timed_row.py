"""What the Python rows of bench/gpu_check.sh share with zt-gpu-bench's: the timed steps and the
JSON row (its fields: tokens/s, MFU = 6 * params * tokens/s over the peak, peak memory).

parser() holds the arguments every row takes (dtype, shape of the run, peak, JSON file, device,
--tiny); timed(step, warmup, steps, device) runs step() `warmup` times, then `steps` times between two
device synchronisations, and returns (seconds of the timed steps, the last step's result); the
allocator's peak is reset first. row(...) builds the row; emit(row, path) prints it as one JSON
line and appends it to path (when given).
"""
import argparse
import json
import time

import torch


def parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="2 layers of width 64, vocabulary 512")
    return ap


def timed(step, warmup, steps, device):
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = step()
    sync()
    return time.perf_counter() - start, out


def row(a, device, params, seconds, **fields):
    """The row of a run of a.steps steps of a.batch x a.seq tokens (argparse's a, which also
    gives dtype and peak_tflops), the fields given first."""
    cuda = device.type == "cuda"
    tokens_per_s = a.batch * a.seq * a.steps / seconds
    out = dict(fields)
    out.update({
        "dtype": a.dtype, "params": params, "batch": a.batch, "seq": a.seq, "steps": a.steps,
        "step_s": seconds / a.steps, "tokens_per_s": tokens_per_s,
        "mfu": 6.0 * params * tokens_per_s / (a.peak_tflops * 1e12),
        "peak_tflops": a.peak_tflops,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
    })
    return out


def emit(r, path):
    line = json.dumps(r)
    print(line, flush=True)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
