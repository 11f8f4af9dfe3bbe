"""Run one fused quantize call a few times (for ncu / compute-sanitizer): no timing, no checking.

    PYTHONPATH=. python tools/profile/quant_one_case.py --m 8192 --k 5120 [--e 0] [--reps 2] [--quantize general]
    PYTHONPATH=. python tools/profile/quant_one_case.py --four-over-six mse [--fast-math] [--block 16]

--e 0: ``device.quantize`` (row + RHT col, swizzled scales); --e E > 0: ``device.group_quantize`` over the skewed
splits of benchmarks/bench_quantize.py (seed E). ``--four-over-six`` runs the 4over6 quantizer instead (SPEC 5.6:
row + col planes, swizzled scales, no RHT; ``--block 16`` for 16x16 blocks), as bench_quantize's 4over6 rows.
``--quantize`` forces the quantize kernels through ``device.testing.force_plan`` (default: the planner's choice).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

import device
from device import testing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=8192, help="rows")
    ap.add_argument("--k", type=int, default=5120, help="columns")
    ap.add_argument("--e", type=int, default=0, help="0: one tensor; E > 0: E skewed groups")
    ap.add_argument("--reps", type=int, default=2, help="calls (ncu: --launch-skip 1 profiles the second)")
    ap.add_argument("--quantize", choices=["general", "fast_bf16"], help="force these quantize kernels")
    ap.add_argument("--four-over-six", choices=["mae", "mse"], help="the 4over6 quantizer with this error")
    ap.add_argument("--fast-math", action="store_true", help="4over6's fast-math error domain")
    ap.add_argument("--block", type=int, choices=[1, 16], default=1, help="4over6 block rows: 1 (1x16) or 16 (16x16)")
    a = ap.parse_args()
    if (a.fast_math or a.block != 1) and not a.four_over_six:
        ap.error("--fast-math and --block belong to --four-over-six")
    x = torch.randn((a.m, a.k), device="cuda", dtype=torch.bfloat16)
    kw = dict(rowwise=True, columnwise=True, rht=True)
    if a.four_over_six:
        kw = dict(rowwise=True, columnwise=True, block=(a.block, 16), four_over_six=a.four_over_six,
                  four_over_six_fast_math=a.fast_math)
    if a.e > 0:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
        from bench_quantize import skewed_splits

        sd = skewed_splits(a.m, a.e, seed=a.e).cuda()
        fn = lambda: device.group_quantize(x, sd, **kw)  # noqa: E731
    else:
        fn = lambda: device.quantize(x, swizzled=True, **kw)  # noqa: E731
    with testing.force_plan(quantize=a.quantize) if a.quantize else contextlib.nullcontext():
        for _ in range(a.reps):
            fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
