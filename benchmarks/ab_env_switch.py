"""A/B of a kernel switch read from the environment at every launch (a loader's on / off variable), in one process.

For each case: one call with the variable at each of ``--values`` (default "1,0"; the outputs must be bit-identical
to the first value's: the script says so), then two rounds of timings of each and of ``torch._grouped_mm`` (BF16),
TFLOP/s and the ratios.

    PYTHONPATH=. python benchmarks/ab_env_switch.py --var NVFP4_EXACT_TMA --mode exact --exact-kernel fused \
        --cases "E64 fprop,E64 dgrad"

Variables: ``NVFP4_EXACT_TMA`` (fused exact kernel, opt-in), ``NVFP4_XF16_TMA`` (exact kernel over fp16 copies, with
``--exact-kernel dequant``), ``NVFP4_SWAP_TMA`` (swapped fast kernel, ``--mode fast --fast-kernel swapped``),
``NVFP4_SWAP_GROUP_MAPS`` (its dgrad through per-group weight maps, opt-in; off: the cp.async loader),
``NVFP4_EXACT_CONV_ALL_B`` (with ``NVFP4_EXACT_TMA=1`` in the environment: the fused exact kernel's converter
converts all of B, opt-in), ``NVFP4_GEMM_PDL`` (a call's kernels chained by programmatic dependent launch, on by
default). Other variables in the environment hold for every side.
"""

from __future__ import annotations

import argparse
import os

import torch
from bench_grouped_gemm import splits_for, timeit

import device
from device.gemm import grouped_gemm

DEV = "cuda"

#: name, E, T, K, N, skewed splits, kind
CASES = [
    ("E64 fprop", 64, 16384, 2048, 1408, False, "fprop"),
    ("E64 dgrad", 64, 16384, 2048, 1408, False, "dgrad"),
    ("E8 T512 fprop", 8, 512, 4096, 14336, False, "fprop"),
    ("E8 T512 dgrad", 8, 512, 4096, 14336, False, "dgrad"),
    ("E8 fprop", 8, 16384, 4096, 14336, False, "fprop"),
    ("E8 dgrad", 8, 16384, 4096, 14336, False, "dgrad"),
    ("E8 skew fprop", 8, 16384, 4096, 14336, True, "fprop"),
    ("E8 wgrad", 8, 16384, 4096, 14336, False, "wgrad"),
    ("E64 wgrad", 64, 16384, 2048, 1408, False, "wgrad"),
]


def operands(e: int, t: int, k: int, n: int, skew: bool, kind: str):
    """(a, b, output shape, the grouped_mm call) of one case."""
    st = torch.tensor(splits_for(e, t, skew), dtype=torch.int64, device=DEV)
    wsplits = torch.full((e,), n, dtype=torch.int64, device=DEV)
    offs = st.cumsum(0).to(torch.int32)
    x = torch.randn((t, k), device=DEV, dtype=torch.bfloat16)
    w = torch.randn((e * n, k), device=DEV, dtype=torch.bfloat16) * 0.05
    if kind == "fprop":
        a = device.group_quantize(x, st, rowwise=True)
        b = device.group_quantize(w, wsplits, rowwise=True, block=(16, 16))
        return a, b, (t, n), lambda: torch._grouped_mm(x, w.view(e, n, k).transpose(1, 2), offs=offs)
    dy = torch.randn((t, n), device=DEV, dtype=torch.bfloat16)
    if kind == "wgrad":  # fp32 output (the issue's); grouped_mm writes bf16
        a = device.group_quantize(dy, st, rowwise=False, columnwise=True)
        b = device.group_quantize(x, st, rowwise=False, columnwise=True)
        dyt = dy.t().contiguous()
        return a, b, (e, n, k), lambda: torch._grouped_mm(dyt, x, offs=offs)
    a = device.group_quantize(dy, st, rowwise=True)
    b = device.group_quantize(w, wsplits, rowwise=False, columnwise=True, block=(16, 16))
    return a, b, (t, k), lambda: torch._grouped_mm(dy, w.view(e, n, k), offs=offs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--var", default="NVFP4_EXACT_TMA")
    ap.add_argument("--values", default="1,0", help="comma-separated values of the variable, the first the reference")
    ap.add_argument("--mode", default="exact", choices=["exact", "fast"])
    ap.add_argument("--exact-kernel", default="fused")
    ap.add_argument("--fast-kernel", default="auto")
    ap.add_argument("--out-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--wgrad-out", default="float32", choices=["float32", "bfloat16", "float32+acc"],
                    help="wgrad's output: fp32, bf16, or fp32 accumulated into (a zeroed main_grad, then in place)")
    ap.add_argument("--cases", default="E64 fprop,E64 dgrad", help="comma-separated case names (substrings)")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    dt = torch.float32 if args.out_dtype == "float32" else torch.bfloat16
    kernel_kw = dict(exact_kernel=args.exact_kernel) if args.mode == "exact" else dict(fast_kernel=args.fast_kernel)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    print(f"{args.var}: {' / '.join(values)}, mode={args.mode} {kernel_kw}, out {args.out_dtype} (wgrad: "
          f"{args.wgrad_out}); TFLOP/s, two rounds")
    accumulate = args.wgrad_out == "float32+acc"
    for name, e, t, k, n, skew, kind in CASES:
        if wanted and not any(w == name for w in wanted):
            continue
        a, b, shape, gmm = operands(e, t, k, n, skew, kind)
        odt = (torch.bfloat16 if args.wgrad_out == "bfloat16" else torch.float32) if kind == "wgrad" else dt
        acc = accumulate and kind == "wgrad"
        outs = {v: torch.zeros(shape, dtype=odt, device=DEV) for v in values}

        def call(v: str, a=a, b=b, kind=kind, outs=outs, acc=acc) -> None:
            os.environ[args.var] = v
            grouped_gemm(a, b, kind=kind, out=outs[v], mode=args.mode, accumulate=acc, **kernel_kw)

        for v in values:
            call(v)
        torch.cuda.synchronize()
        bits = torch.int16 if odt == torch.bfloat16 else torch.int32
        same = all(torch.equal(outs[v].view(bits), outs[values[0]].view(bits)) for v in values)
        flops = 2.0 * t * n * k
        tf: dict[str, list[float]] = {v: [] for v in [*values, "gmm"]}
        for _ in range(2):
            for v in tf:
                fn = gmm if v == "gmm" else (lambda v=v: call(v))
                tf[v].append(flops / timeit(fn, args.iters, idle_s=0.3) / 1e12)
        best_gmm = max(tf["gmm"])
        cols = "  ".join(f"{v}: {min(tf[v]):.1f}-{max(tf[v]):.1f} ({max(tf[v]) / best_gmm:.3f})" for v in values)
        print(f"{name:16s} bits equal: {same}  {cols}  grouped_mm {min(tf['gmm']):.1f}-{best_gmm:.1f}", flush=True)
    os.environ.pop(args.var, None)


if __name__ == "__main__":
    main()
