"""Where a grouped GEMM call's wall time goes (GPU): kernels, the gaps between them, and the host's enqueue time.

For each case (tools/ab/ab_plans.py's ``E,T,K,N,kind[,out][,skew|ragged8][,bias]``), under one plan (ab_plans.py's
syntax: ``auto``, or ``algorithm=... loader=... epilogue=... mode=... sms=...``):
  * host: seconds to enqueue one call (mean over 20 calls, no synchronisation; if this exceeds the GPU time per
    call, back-to-back timings measure the host, not the kernels);
  * event: GPU seconds per call, 10 calls back to back (``bench_grouped_gemm.timeit``);
  * kernels: torch.profiler over ``--calls`` back-to-back calls; each kernel's mean duration per call, and the span
    per call minus the kernels' sum (launch gaps and idle time).

    PYTHONPATH=. python tools/profile/gemm_timeline.py --cases "8,16384,4096,14336,fprop;8,512,4096,14336,fprop"
    PYTHONPATH=. python tools/profile/gemm_timeline.py --plan "mode=exact" --cases "64,16384,2048,1408,wgrad"
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "ab"), str(ROOT / "benchmarks"), str(ROOT / "tools" / "profile")]
from ab_plans import OUT_DTYPES, gemm_call, operands, parse_cases, parse_plan  # noqa: E402
from bench_grouped_gemm import timeit  # noqa: E402
from profiling import profiled_kernels  # noqa: E402

DEV = "cuda"
#: E8 T16384 K4096 N14336 (fprop, dgrad, wgrad), E64 T16384 K2048 N1408 (the same), E8 T512 fprop
DEFAULT_CASES = ("8,16384,4096,14336,fprop;8,16384,4096,14336,dgrad;8,16384,4096,14336,wgrad;"
                 "64,16384,2048,1408,fprop;64,16384,2048,1408,dgrad;64,16384,2048,1408,wgrad;8,512,4096,14336,fprop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES,
                    help='";"-separated cases E,T,K,N,kind[,out][,skew|ragged8][,bias]')
    ap.add_argument("--plan", default="auto", help='one plan, e.g. "auto", "mode=exact", "algorithm=fused_128x256"')
    ap.add_argument("--calls", type=int, default=5, help="back-to-back calls under the profiler")
    args = ap.parse_args()
    plan = parse_plan(args.plan)
    for c in parse_cases(args.cases):
        a, b, shape, _ = operands(c)
        out = torch.zeros(shape, dtype=OUT_DTYPES[c.out], device=DEV)
        fn = gemm_call(plan, a, b, c, out)
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        host = (time.perf_counter() - t0) / 20
        torch.cuda.synchronize()
        event = timeit(fn, 10, idle_s=0.3)
        ev = profiled_kernels(fn, args.calls)
        span = (ev[-1][1] + ev[-1][2] - ev[0][1]) / args.calls
        per: dict[str, list[float]] = defaultdict(list)
        for nm, _, d in ev:
            per[nm].append(d)
        busy = sum(d for _, _, d in ev) / args.calls
        print(f"== {c.label} ({plan.text}, mode {plan.mode}): host {host * 1e6:.1f} us/call, event "
              f"{event * 1e6:.1f} us/call, profiled span {span:.1f} us/call, kernels {busy:.1f} us, gaps "
              f"{span - busy:.1f} us")
        for nm, ds in sorted(per.items(), key=lambda x: -sum(x[1])):
            print(f"   {sum(ds) / args.calls:9.1f} us  x{len(ds) / args.calls:g}  {nm[:110]}")
        print(f"   TFLOP/s: event {c.flops / event / 1e12:.1f}, kernels only {c.flops / busy / 1e6:.1f}", flush=True)
        del a, b, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
