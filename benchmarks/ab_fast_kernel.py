"""A/B of fast-mode kernel choices (``fast_kernel=``) on given shapes, in one process, beside ``torch._grouped_mm``.

For each case: one call per kernel (every fast kernel gives the same bits, SPEC 12.6: the script checks that the
outputs are bit-identical to the first kernel's), then ``--rounds`` rounds of timings of every kernel and of
``torch._grouped_mm`` (BF16 operands; wgrad: BF16 output, fp32 is refused for BF16 inputs), TFLOP/s
(2 T N K / time) and each kernel's ratio to grouped_mm. Only the GEMM call is timed (a kernel's scratch decode
included). Used to set the size rules of ``device/gemm.py`` (docs/gemm.md, stop 37).

    PYTHONPATH=. python benchmarks/ab_fast_kernel.py --kernels auto,fused,dequant \
        --cases "64,16384,2048,1408,wgrad,f32;64,16384,2048,1408,wgrad,bf16"

A case is ``E,T,K,N,kind[,out]`` with kind fprop / dgrad / wgrad and out ``bf16`` (default) or ``f32``; balanced
splits. ``f32+c`` runs wgrad with ``accumulate=True`` into an fp32 buffer. A kernel may carry an environment setting
for its calls, ``fused@NVFP4_C_PREFETCH=0`` (set around each call, restored after); ``x:fused`` / ``x:dequant`` run
exact mode's kernels instead (compare them only with each other: exact and fast mode give different bits).
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from ab_env_switch import operands as env_switch_operands
from bench_grouped_gemm import timeit

from device.gemm import grouped_gemm

DEV = "cuda"


def operands(e: int, t: int, k: int, n: int, kind: str):
    """(a, b, output shape, the grouped_mm call) of one case with balanced splits: ab_env_switch's operands."""
    return env_switch_operands(e, t, k, n, False, kind)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="auto,fused,dequant", help="fast_kernel values, comma-separated")
    ap.add_argument("--cases", default="64,16384,2048,1408,wgrad,f32;64,16384,2048,1408,wgrad,bf16")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    print(f"fast_kernel A/B: {kernels} and torch._grouped_mm (bf16); TFLOP/s, {args.rounds} rounds, "
          f"{args.iters} calls each; {torch.cuda.get_device_name()}")
    print(f"{'case':34s} " + " ".join(f"{k[-15:]:>15s}" for k in kernels + ["grouped_mm"]) + "  ratios to grouped_mm")
    for spec in args.cases.split(";"):
        parts = spec.split(",")
        e, t, k, n = (int(v) for v in parts[:4])
        kind = parts[4]
        out_name = parts[5] if len(parts) > 5 else "bf16"
        acc = out_name == "f32+c"
        dt = torch.bfloat16 if out_name == "bf16" else torch.float32
        a, b, shape, gmm = operands(e, t, k, n, kind)
        c0 = torch.randn(shape, device=DEV, dtype=torch.float32) if acc else None
        outs = {kn: torch.empty(shape, dtype=dt, device=DEV) for kn in kernels}

        def call(kn: str, a=a, b=b, kind=kind, outs=outs, acc=acc) -> None:
            kernel, _, setting = kn.partition("@")
            var, _, val = setting.partition("=")
            old = os.environ.get(var) if var else None
            if var:
                os.environ[var] = val
            mode, _, kernel = kernel.rpartition(":")  # "x:dequant": exact mode's exact_kernel="dequant"
            kw = dict(mode="exact", exact_kernel=kernel) if mode == "x" else dict(mode="fast", fast_kernel=kernel)
            try:
                grouped_gemm(a, b, kind=kind, out=outs[kn], accumulate=acc, **kw)
            finally:
                if var and old is None:
                    del os.environ[var]
                elif var:
                    os.environ[var] = old

        same = []
        for kn in kernels:
            if acc:
                outs[kn].copy_(c0)
            call(kn)
        torch.cuda.synchronize()
        bits = torch.int16 if dt == torch.bfloat16 else torch.int32
        for kn in kernels[1:]:
            same.append(bool(torch.equal(outs[kn].view(bits), outs[kernels[0]].view(bits))))
        flops = 2.0 * t * n * k
        times: dict[str, list[float]] = {kn: [] for kn in kernels + ["grouped_mm"]}
        for _ in range(args.rounds):
            for kn in kernels:
                times[kn].append(timeit(lambda kn=kn: call(kn), args.iters, idle_s=0.3))
            times["grouped_mm"].append(timeit(gmm, args.iters, idle_s=0.3))
        tf = {kn: [flops / s / 1e12 for s in ts] for kn, ts in times.items()}
        g = statistics.median(tf["grouped_mm"])
        name = f"E{e} T{t} K{k} N{n} {kind} {out_name}"
        cells = " ".join(f"{min(v):7.1f}-{max(v):<7.1f}" for v in tf.values())
        ratios = " ".join(f"{kn}={statistics.median(tf[kn]) / g:.3f}" for kn in kernels)
        print(f"{name:34s} {cells}  {ratios}  same bits: {all(same)}", flush=True)
        del a, b, outs, c0
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
