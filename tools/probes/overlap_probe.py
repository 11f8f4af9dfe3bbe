"""Would the copies_cutlass GEMM plan gain from decoding beside the GEMM instead of before it?

The fast plan for large groups (``copies_cutlass``) first writes fp16 copies of both operand planes (memory bound,
about 17% of an E8 fprop call on the H100) and then runs CUTLASS's grouped GEMM (compute bound). Decoding the next
chunk of groups while the GEMM runs the previous one would hide most of the decode, if (1) a GEMM capped to fewer
SMs (``device.set_num_sms``) loses little, and (2) memory-bound work on the freed SMs runs at a useful rate beside it.

This probe measures both with the real GEMM and a stand-in for the decode (an elementwise bf16 kernel, `neg`, moving
as many bytes as the weight decode: the fp4 plane read, the fp16 copy written), kernel times from torch.profiler:

  A. the copies_cutlass call as is (decode kernels + CUTLASS GEMM), every SM;
  B. the same with device.set_num_sms(SMs - free);
  C. B with the stand-in on a side stream, started after a spin of --delay-us (past the call's own decode, so that it
     runs beside the GEMM, not beside the decode; the stand-in's CTAs can only use the free SMs: the persistent GEMM
     CTAs fill the others' register files). Overlap shows as C's wall time below B's plus the stand-in's. A stand-in
     launched before the GEMM's CTAs are resident takes every SM first and the two serialize (measured with a 480 us
     spin against a 480 us decode): a real overlapped design must start each chunk's GEMM before the next chunk's
     decode.

    PYTHONPATH=. python tools/probes/overlap_probe.py [--free 16] [--delay-us 1000] [--iters 5]
"""

from __future__ import annotations

import argparse
import contextlib
from collections import defaultdict
from collections.abc import Iterator

import torch

import device
from device import testing
from device.gemm import grouped_gemm

DEV = "cuda"


@contextlib.contextmanager
def num_sms(n: int | None) -> Iterator[None]:
    """The GEMM's persistent grid capped at ``n`` SMs inside the body (None: unchanged), the previous cap restored
    after."""
    if n is None:
        yield
        return
    previous = device.get_num_sms()
    device.set_num_sms(n)
    try:
        yield
    finally:
        device.set_num_sms(previous)


def kernel_times(fn, iters: int) -> dict[str, float]:
    """Average device time per call (us) of each kernel name that ``fn`` launches, and the wall time per call."""
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts) as prof:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for ev in prof.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time_total > 0:
            per[ev.key[:60]] += ev.device_time_total / iters  # kernels (CUDA events) only
    per["<wall per call>"] = start.elapsed_time(end) * 1000.0 / iters
    return dict(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--free", type=int, default=16, help="SMs left to the side stream in B and C")
    ap.add_argument("--iters", type=int, default=5, help="profiled calls per measurement")
    ap.add_argument("--delay-us", type=float, default=1000.0, help="C: the side stream's spin before the stand-in")
    ap.add_argument("--e", type=int, default=8, help="groups (experts)")
    ap.add_argument("--t", type=int, default=16384, help="tokens, balanced over the groups")
    ap.add_argument("--k", type=int, default=4096, help="hidden size (the contraction)")
    ap.add_argument("--n", type=int, default=14336, help="weight rows per group")
    args = ap.parse_args()
    e, t, k, n = args.e, args.t, args.k, args.n
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn((t, k), device=DEV, dtype=torch.bfloat16)
    w = torch.randn((e * n, k), device=DEV, dtype=torch.bfloat16) * 0.05
    aq = device.group_quantize(x, torch.full((e,), t // e, dtype=torch.int64, device=DEV))
    bq = device.group_quantize(w, torch.full((e,), n, dtype=torch.int64, device=DEV), block=(16, 16))
    out = torch.empty((t, n), dtype=torch.bfloat16, device=DEV)
    # the stand-in for the weight decode: read e*n*k/2 bytes, write e*n*k*2 bytes -> a bf16 neg of 1.25x that
    copy_elems = e * n * k * 5 // 8
    src = torch.empty(copy_elems, dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()
    capped = sms - args.free

    def gemm(sms=None):
        with testing.force_plan(algorithm="copies_cutlass"), num_sms(sms):
            return grouped_gemm(aq, bq, kind="fprop", out=out)

    clock_khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 1_755_000)
    delay_cycles = int(args.delay_us * clock_khz / 1000)

    def stand_in():
        torch.neg(src, out=dst)

    def overlapped():
        side.wait_stream(torch.cuda.current_stream())
        gemm(capped)
        with torch.cuda.stream(side):
            torch.cuda._sleep(delay_cycles)
            stand_in()
        torch.cuda.current_stream().wait_stream(side)

    flops = 2.0 * t * n * k
    print(f"E{e} T{t} K{k} N{n} fprop, {sms} SMs, capped GEMM {capped} SMs, stand-in copy "
          f"{2 * copy_elems * 2 / 1e6:.0f} MB moved, side-stream delay {delay_cycles} cycles ({clock_khz} kHz)")
    for name, fn in (("A: copies_cutlass, every SM", lambda: gemm()),
                     (f"B: copies_cutlass, set_num_sms({capped})", lambda: gemm(capped)),
                     ("stand-in alone (every SM)", stand_in),
                     ("C: B + the copy on a side stream", overlapped)):
        per = kernel_times(fn, args.iters)
        wall = per.pop("<wall per call>")
        tops = f", {flops / wall / 1e6:.1f} TFLOP/s" if "alone" not in name else ""
        print(f"\n{name}: wall {wall:.1f} us per call{tops}")
        for key, us in sorted(per.items(), key=lambda kv: -kv[1])[:6]:
            print(f"    {us:9.1f} us  {key}")


if __name__ == "__main__":
    main()
