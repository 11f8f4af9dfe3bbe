"""How fast can any kernel read X for a max-reduction? Our amax pass against Triton tilings and torch, one GPU run.

The fused quantize spends about a third of its time in the amax pass (SPEC 4), which must read all of X before any
scale is known. This script answers whether a different read pattern would read X faster: it times our amax pass
(`amax_fast4_bf16`, with and without the RHT column amax) next to Triton max-|x| reductions over 2-D tiles of
several shapes (forward and reverse tile order, 4 or 8 warps) and flat 1-D blocks, plus `torch.amax` and
`x.clone()` for reference. Every timing is `bench_quantize.bench`: the launch captured in a CUDA graph, each replay
timed after a 256 MB L2 flush, the median of 15. Needs a CUDA GPU, Triton and the built extension
(`device/_build.py`).

    PYTHONPATH=. python3 benchmarks/amax_read_probe.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_quantize import bench  # noqa: E402

REPS = 15
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


def _cases(ext, x: torch.Tensor) -> list:
    """(name, launch, bytes moved) of every reader of x."""
    m, k = x.shape
    nbytes = x.numel() * 2
    out = torch.empty(m * k // 256, dtype=torch.int32, device="cuda")
    amax = torch.zeros(2, device="cuda")
    row_tiles = (m + 127) // 128
    cases = [
        ("ours: amax pass, row + RHT col",
         lambda: ext.amax_(x, None, 1, row_tiles, amax[0:1], amax[1:2], True, 0xD7E8, False, False, None, None), nbytes),
        ("ours: amax pass, row only",
         lambda: ext.amax_(x, None, 1, row_tiles, amax[0:1], None, False, 0xD7E8, False, False, None, None),
         nbytes),
        ("torch.amax", lambda: torch.amax(x), nbytes),
        ("x.clone()", lambda: x.clone(), 2 * nbytes),
    ]
    for br, bc in TILES:
        if m % br or k % bc:
            continue
        for rev in (False, True):
            for nw in (4, 8):
                grid = ((m // br) * (k // bc),)
                cases.append((f"triton {br}x{bc} tiles, reverse={int(rev)}, {nw} warps",
                              lambda br=br, bc=bc, rev=rev, nw=nw, grid=grid: _tile_absmax[grid](
                                  x, out, k, BR=br, BC=bc, REV=rev, num_warps=nw), nbytes))
    for blk in (4096, 8192, 16384):
        for nw in (4, 8):
            grid = (x.numel() // blk,)
            cases.append((f"triton flat {blk}, {nw} warps",
                          lambda blk=blk, nw=nw, grid=grid: _flat_absmax[grid](x, out, BLOCK=blk, num_warps=nw),
                          nbytes))
    return cases


def main() -> None:
    from device._build import load_extension

    ext = load_extension()
    print(f"device: {torch.cuda.get_device_name()}  (TB/s = bytes read / time; clone counts read + write)")
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        print(f"\n{m}x{k} bf16, {x.numel() * 2 / 1e6:.1f} MB")
        print(f"{'reader':46s} | {'time':>9s} | {'TB/s':>5s}")
        for name, fn, nb in _cases(ext, x):
            us = bench(fn, iters=REPS)
            print(f"{name:46s} | {us:6.1f} us | {nb / us / 1e6:5.2f}")


if __name__ == "__main__":
    main()
