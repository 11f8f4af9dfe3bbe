"""Run one fused quantize call a few times (for ncu / compute-sanitizer): no timing, no checking.

    PYTHONPATH=. python benchmarks/quant_one_case.py --m 8192 --k 5120 [--e 0] [--reps 2]

--e 0: ``device.quantize`` (row + RHT col, swizzled scales); --e E > 0: ``device.group_quantize`` over the skewed
splits of ``bench_quantize.py`` (seed E).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--k", type=int, default=5120)
    ap.add_argument("--e", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    x = torch.randn((a.m, a.k), device="cuda", dtype=torch.bfloat16)
    kw = dict(rowwise=True, columnwise=True, rht=True)
    if a.e > 0:
        sys.path.insert(0, os.path.dirname(__file__))
        from bench_quantize import skewed_splits

        sd = skewed_splits(a.m, a.e, seed=a.e).cuda()
        fn = lambda: device.group_quantize(x, sd, **kw)  # noqa: E731
    else:
        fn = lambda: device.quantize(x, swizzled=True, **kw)  # noqa: E731
    for _ in range(a.reps):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
