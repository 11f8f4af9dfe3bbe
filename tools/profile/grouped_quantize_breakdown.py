"""Grouped quantize kernel times by split pattern (GPU; torch.profiler, mean of 5 calls).

Run from the repository root: ``PYTHONPATH=. python3 tools/profile/grouped_quantize_breakdown.py``.
One 16384x4096 bf16 input, rowwise + RHT columnwise + swizzled scales, quantized as a single tensor and as groups
of several split patterns (aligned, unaligned, skewed as in benchmarks/bench_quantize.py). Prints the quantize
kernel, the amax pass and the small kernels (setup, fills) of each call: what a group split costs against one tensor.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import device

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "benchmarks")]
from bench_quantize import skewed_splits  # noqa: E402
from profiling import profiled_kernels  # noqa: E402

T, K = 16384, 4096


def kernel_times(fn: Callable[[], object], calls: int = 5) -> dict[str, float]:
    """Mean device time per call of every kernel that ``fn`` launches, by (truncated) kernel name."""
    acc: dict[str, list[float]] = collections.defaultdict(list)
    for name, _, duration in profiled_kernels(fn, calls):
        acc[name[:48]].append(duration)
    return {k: sum(v) / calls for k, v in acc.items()}


def split_patterns() -> dict[str, list[int]]:
    """Named split patterns, each summing to T."""
    skew = skewed_splits(T, 64, 64).tolist()
    rounded = [(v // 128) * 128 for v in skew]
    rounded[0] += T - sum(rounded)
    return {
        "E=1": [T],
        "E=64, 256 rows each": [256] * 64,
        "E=128, 128 rows each": [128] * 128,
        "E=64, 272/240 (unaligned)": [272, 240] * 32,
        "E=64, 320/192": [320, 192] * 32,
        "E=64 skewed (bench)": skew,
        "E=64 skewed, rounded to 128": rounded,
        "E=8 skewed (bench)": skewed_splits(T, 8, 8).tolist(),
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    kw = dict(rowwise=True, columnwise=True, rht=True)
    cases: dict[str, Callable[[], object]] = {"single tensor": lambda: device.quantize(x, swizzled=True, **kw)}
    for name, splits in split_patterns().items():
        assert sum(splits) == T, name
        sd = torch.tensor(splits, dtype=torch.int64, device="cuda")
        cases[name] = lambda sd=sd: device.group_quantize(x, sd, **kw)
    print(f"device: {torch.cuda.get_device_name()}  input {T}x{K} bf16, row + RHT col + swizzled; us per call")
    print(f"{'split pattern':30s} {'quantize':>9s} {'amax':>7s} {'other':>7s}")
    for name, fn in cases.items():
        times = kernel_times(fn)
        quant = sum(v for k, v in times.items() if "quantize" in k)
        amax = sum(v for k, v in times.items() if "amax" in k)
        other = sum(times.values()) - quant - amax
        print(f"{name:30s} {quant:9.1f} {amax:7.1f} {other:7.1f}")


if __name__ == "__main__":
    main()
