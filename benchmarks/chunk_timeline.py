"""Kernel timeline of one call of the chunked dequantize-first path (docs/gemm.md, stop 39): for each kernel of the
call, its start and end relative to the call's first kernel (torch.profiler, device times), so that one can see
whether each chunk's decode runs beside the previous chunk's GEMM and where the gaps are.

    PYTHONPATH=. python benchmarks/chunk_timeline.py --kind dgrad --chunks 1,4 --side-sms 8
"""

from __future__ import annotations

import argparse
import os

import torch
from ab_env_switch import operands
from torch.profiler import ProfilerActivity, profile

from device.gemm import grouped_gemm


def timeline(call) -> list[tuple[str, float, float]]:
    """(kernel name, start us, end us) of every kernel that `call` launched, in start order, times from the first."""
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    ks = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
          if e.device_type == torch.autograd.DeviceType.CUDA]
    ks.sort(key=lambda k: k[1])
    t0 = ks[0][1] if ks else 0.0
    return [(n, s - t0, e - t0) for n, s, e in ks]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="fprop", choices=["fprop", "dgrad", "wgrad"])
    ap.add_argument("--chunks", default="1,4")
    ap.add_argument("--side-sms", default="8")
    args = ap.parse_args()
    a, b, shape, _ = operands(8, 16384, 4096, 14336, False, args.kind)
    out = torch.empty(shape, dtype=torch.float32 if args.kind == "wgrad" else torch.bfloat16, device="cuda")
    os.environ["NVFP4_DQ_SIDE_SMS"] = args.side_sms
    for chunks in args.chunks.split(","):
        os.environ["NVFP4_DQ_CHUNKS"] = chunks
        ks = timeline(lambda: grouped_gemm(a, b, kind=args.kind, out=out, mode="fast", fast_kernel="dequant"))
        print(f"--- E8 {args.kind}, NVFP4_DQ_CHUNKS={chunks}, NVFP4_DQ_SIDE_SMS={args.side_sms}: "
              f"{ks[-1][2] if ks else 0:.1f} us from the first kernel's start to the last one's end")
        for name, s, e in ks:
            short = name if len(name) < 60 else name[:57] + "..."
            print(f"  {s:9.1f} {e:9.1f} {e - s:8.1f}  {short}")


if __name__ == "__main__":
    main()
