"""Run one grouped-GEMM case a few times (for ncu / compute-sanitizer): no timing, no checking.

    PYTHONPATH=. python benchmarks/gemm_one_case.py --kind fprop --e 8 --t 16384 --k 4096 --n 14336 [--mode fast]
        [--kernel auto]   (fast_kernel= in fast mode, exact_kernel= in exact mode)
"""

from __future__ import annotations

import argparse

import torch

import device
from device.gemm import grouped_gemm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="fprop", choices=["fprop", "dgrad", "wgrad"])
    ap.add_argument("--mode", default="fast", choices=["fast", "exact"])
    ap.add_argument("--e", type=int, default=8)
    ap.add_argument("--t", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=14336)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kernel", default="auto", help="fast_kernel= (fast mode) or exact_kernel= (exact mode)")
    a = ap.parse_args()
    dev = "cuda"
    st = torch.full((a.e,), a.t // a.e, dtype=torch.int64, device=dev)
    st[-1] += a.t - int(st.sum())
    wsplits = torch.full((a.e,), a.n, dtype=torch.int64, device=dev)
    x = torch.randn((a.t, a.k), device=dev, dtype=torch.bfloat16)
    dy = torch.randn((a.t, a.n), device=dev, dtype=torch.bfloat16)
    w = torch.randn((a.e * a.n, a.k), device=dev, dtype=torch.bfloat16)
    if a.kind == "fprop":
        aq = device.group_quantize(x, st, rowwise=True)
        bq = device.group_quantize(w, wsplits, rowwise=True, block=(16, 16))
    elif a.kind == "dgrad":
        aq = device.group_quantize(dy, st, rowwise=True)
        bq = device.group_quantize(w, wsplits, rowwise=False, columnwise=True, block=(16, 16))
    else:
        aq = device.group_quantize(dy, st, rowwise=False, columnwise=True)
        bq = device.group_quantize(x, st, rowwise=False, columnwise=True)
    for _ in range(a.reps):
        if a.mode == "fast":
            grouped_gemm(aq, bq, kind=a.kind, mode=a.mode, fast_kernel=a.kernel)
        else:
            grouped_gemm(aq, bq, kind=a.kind, mode=a.mode, exact_kernel=a.kernel)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
