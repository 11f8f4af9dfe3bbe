"""Where a grouped GEMM call's wall time goes (GPU): kernels, the gaps between them, and the host's enqueue time.

For each case (``ab_env_switch.CASES`` names), with ``fast_kernel`` / ``mode`` as given:
  * host: seconds to enqueue one call (mean over 20 calls, no synchronisation; if this exceeds the GPU time per
    call, back-to-back timings measure the host, not the kernels);
  * event: GPU seconds per call, 10 calls back to back (``bench_grouped_gemm.timeit``);
  * kernels: torch.profiler over 5 back-to-back calls; each kernel's mean duration per call, and the span per call
    minus the kernels' sum (launch gaps and idle time).

    PYTHONPATH=. python benchmarks/gemm_timeline.py --cases "E8 fprop,E64 fprop,E8 T512 fprop"
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from ab_env_switch import CASES, operands
from bench_grouped_gemm import timeit
from profiling import profiled_kernels

from device.gemm import grouped_gemm

DEV = "cuda"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="E8 fprop,E8 dgrad,E8 wgrad,E64 fprop,E64 dgrad,E64 wgrad,E8 T512 fprop")
    ap.add_argument("--mode", default="fast", choices=["fast", "exact"])
    ap.add_argument("--fast-kernel", default="auto")
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    for name, e, t, k, n, skew, kind in CASES:
        if name not in wanted:
            continue
        a, b, shape, _ = operands(e, t, k, n, skew, kind)
        odt = torch.float32 if kind == "wgrad" else torch.bfloat16
        out = torch.empty(shape, dtype=odt, device=DEV)
        kw = dict(fast_kernel=args.fast_kernel) if args.mode == "fast" else {}

        def fn(a=a, b=b, kind=kind, out=out, kw=kw) -> None:
            grouped_gemm(a, b, kind=kind, out=out, mode=args.mode, **kw)

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
        print(f"== {name} ({args.mode}, {args.fast_kernel}): host {host * 1e6:.1f} us/call, event {event * 1e6:.1f} "
              f"us/call, profiled span {span:.1f} us/call, kernels {busy:.1f} us, gaps {span - busy:.1f} us")
        for nm, ds in sorted(per.items(), key=lambda x: -sum(x[1])):
            print(f"   {sum(ds) / args.calls:9.1f} us  x{len(ds) / args.calls:g}  {nm[:110]}")
        flops = 2.0 * t * n * k
        print(f"   TFLOP/s: event {flops / event / 1e12:.1f}, kernels only {flops / busy / 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
