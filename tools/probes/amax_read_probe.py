"""How fast can any kernel read X for a max-reduction? Our amax pass against Triton tilings and torch, one GPU run.

The fused quantize spends about a third of its time in the amax pass (SPEC 4), which must read all of X before any
scale is known. This script answers whether a different read pattern would read X faster: it times our amax pass
(the amax kernel of ``device.quantize``, with and without the RHT column amax) next to Triton max-|x| reductions over
2-D tiles of several shapes (forward and reverse tile order, 4 or 8 warps) and flat 1-D blocks, plus `torch.amax`
and `x.clone()` for reference. Every timing is the kernels' own duration (torch.profiler) of one call made after a
256 MB L2 flush, the median of --reps calls; for ``device.quantize`` only its amax kernel counts. Needs a CUDA GPU
and Triton.

    PYTHONPATH=. python3 tools/probes/amax_read_probe.py [--reps 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

import device

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from profiling import kernel_function  # noqa: E402

SHAPES = ((8192, 5120), (16384, 4096))
TILES = ((128, 128), (16, 1024), (32, 512), (64, 256), (16, 256), (32, 256))


@triton.jit
def _tile_absmax(x_ptr, out_ptr, K, BR: tl.constexpr, BC: tl.constexpr, REV: tl.constexpr):
    pid = tl.program_id(0)
    if REV:
        pid = tl.num_programs(0) - 1 - pid
    nct = K // BC
    rows = ((pid // nct) * BR + tl.arange(0, BR))[:, None].to(tl.int64)
    cols = ((pid % nct) * BC + tl.arange(0, BC))[None, :]
    bits = tl.load(x_ptr + rows * K + cols).to(tl.int16, bitcast=True).to(tl.int32) & 0x7FFF
    tl.store(out_ptr + pid, tl.max(tl.max(bits, axis=1), axis=0))


@triton.jit
def _flat_absmax(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(x_ptr + offs).to(tl.int16, bitcast=True).to(tl.int32) & 0x7FFF
    tl.store(out_ptr + pid, tl.max(bits, axis=0))


def kernel_us(fn: Callable[[], object], reps: int, keep: Callable[[str], bool] | None = None) -> float:
    """Median over ``reps`` calls of ``fn`` of the summed duration (us) of its GPU kernels (those whose function name
    ``keep`` accepts; all when None), each call made after zeroing a 256 MB buffer (the inputs evicted from L2)."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    fn()  # warm-up (Triton compiles here)
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        times.append(sum(ev.time_range.elapsed_us() for ev in prof.events()
                         if ev.device_type.name == "CUDA" and (keep is None or keep(kernel_function(ev.name)))))
    return statistics.median(times)


def _amax_pass(name: str) -> bool:
    """Whether a kernel of device.quantize is its amax pass (not the quantize kernel, not the zeroing of the amax)."""
    return "amax" in name and "quantize" not in name and "zero" not in name


def _cases(x: torch.Tensor) -> list:
    """(name, launch, bytes moved, which kernels count) of every reader of x."""
    m, k = x.shape
    nbytes = x.numel() * 2
    out = torch.empty(m * k // 256, dtype=torch.int32, device="cuda")
    cases = [
        ("ours: amax pass, row + RHT col",
         lambda: device.quantize(x, rowwise=True, columnwise=True, rht=True, swizzled=True), nbytes, _amax_pass),
        ("ours: amax pass, row only", lambda: device.quantize(x, rowwise=True, swizzled=True), nbytes, _amax_pass),
        ("torch.amax", lambda: torch.amax(x), nbytes, None),
        ("x.clone()", lambda: x.clone(), 2 * nbytes, None),
    ]
    for br, bc in TILES:
        if m % br or k % bc:
            continue
        for rev in (False, True):
            for nw in (4, 8):
                grid = ((m // br) * (k // bc),)
                cases.append((f"triton {br}x{bc} tiles, reverse={int(rev)}, {nw} warps",
                              lambda br=br, bc=bc, rev=rev, nw=nw, grid=grid: _tile_absmax[grid](
                                  x, out, k, BR=br, BC=bc, REV=rev, num_warps=nw), nbytes, None))
    for blk in (4096, 8192, 16384):
        for nw in (4, 8):
            grid = (x.numel() // blk,)
            cases.append((f"triton flat {blk}, {nw} warps",
                          lambda blk=blk, nw=nw, grid=grid: _flat_absmax[grid](x, out, BLOCK=blk, num_warps=nw),
                          nbytes, None))
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="timed calls per reader (median)")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  (TB/s = bytes read / time; clone counts read + write)")
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        print(f"\n{m}x{k} bf16, {x.numel() * 2 / 1e6:.1f} MB")
        print(f"{'reader':46s} | {'time':>9s} | {'TB/s':>5s}")
        for name, fn, nb, keep in _cases(x):
            us = kernel_us(fn, args.reps, keep)
            print(f"{name:46s} | {us:6.1f} us | {nb / us / 1e6:5.2f}")


if __name__ == "__main__":
    main()
