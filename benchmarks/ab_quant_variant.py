"""A/B of the bf16 fast quantizer's variants (``NVFP4_QUANT_VARIANT``, read at every launch), in one process.

First every variant's outputs are compared with the first variant's, byte for byte, on a few single and grouped
calls (odd shapes, empty groups, NaN / Inf blocks, both rules); then ``--rounds`` rounds, each timing every variant in
turn (the order rotates per round) on the fused path of ``bench_quantize.py`` (row + RHT col, swizzled, amax; graph
replay after the 256 MB zeroing flush, median) and the quantize kernel alone (torch.profiler, mean of 5 calls).

    PYTHONPATH=.:benchmarks python benchmarks/ab_quant_variant.py --variants 0,1,2 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from bench_quantize import SHAPES, bench, skewed_splits
from profiling import profiled_kernels

import device

VAR = "NVFP4_QUANT_VARIANT"


def set_variant(v: str) -> None:
    os.environ[VAR] = v


def outputs(q) -> list[torch.Tensor]:
    """Every output buffer of a device quantize result (single or grouped), as uint8 views."""
    got = []
    for name in ("row_data", "row_scales", "col_data", "col_scales", "row_amax", "col_amax", "amax"):
        t = getattr(q, name, None)
        if isinstance(t, torch.Tensor):
            got.append(t.contiguous().view(torch.uint8).reshape(-1))
    for plane in ("row", "col"):
        p = getattr(q, plane, None)
        for name in ("data", "scales", "amax"):
            t = getattr(p, name, None) if p is not None else None
            if isinstance(t, torch.Tensor):
                got.append(t.contiguous().view(torch.uint8).reshape(-1))
    assert got, "no output buffers found"
    return got


def check_same_bytes(variants: list[str]) -> None:
    torch.manual_seed(1)
    cases = []
    for m, k in ((1, 16), (17, 48), (129, 272), (1000, 4096), (4097, 160)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 7
        x.view(-1)[:: max(1, x.numel() // 5)] = float("inf") if m > 100 else x.view(-1)[0]
        if m == 1000:
            x[5, 33] = float("nan")
        for rule in ("te", "torchao"):
            for sw in (True, False):
                cases.append((f"{m}x{k} {rule} swz={sw}",
                              lambda x=x, rule=rule, sw=sw: device.quantize(x, rowwise=True, columnwise=True,
                                                                           rht=True, swizzled=sw, rule=rule)))
    x = torch.randn(3000, 512, device="cuda", dtype=torch.bfloat16)
    sp = torch.tensor([0, 17, 1000, 0, 129, 1854, 0], dtype=torch.int64, device="cuda")
    cases.append(("grouped 3000x512", lambda: device.group_quantize(x, sp, rowwise=True, columnwise=True, rht=True)))
    bad = 0
    for name, fn in cases:
        set_variant(variants[0])
        ref = [t.clone() for t in outputs(fn())]
        for v in variants[1:]:
            set_variant(v)
            got = outputs(fn())
            same = len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
            if not same:
                bad += 1
                print(f"MISMATCH variant {v} vs {variants[0]}: {name}")
    torch.cuda.synchronize()
    print(f"bytes: {len(cases)} calls x {len(variants) - 1} variants against variant {variants[0]}: "
          f"{'all equal' if bad == 0 else f'{bad} differ'}")


def quant_kernel_us(fn) -> float:
    ks = [d for n, _, d in profiled_kernels(fn, calls=5) if "quantize_fast4" in n]
    return sum(ks) / max(1, len(ks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    variants = args.variants.split(",")
    check_same_bytes(variants)
    kw = dict(rowwise=True, columnwise=True, rht=True, swizzled=True)
    cases = []
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        cases.append((f"{m}x{k}", lambda x=x: device.quantize(x, **kw)))
    xg = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    for e in (8, 64):
        sd = skewed_splits(16384, e, seed=e).cuda()
        cases.append((f"grouped E={e}", lambda sd=sd: device.group_quantize(xg, sd, rowwise=True, columnwise=True,
                                                                          rht=True)))
    call = {(c, v): [] for c, _ in cases for v in variants}
    kern = {(c, v): [] for c, _ in cases for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for name, fn in cases:
            for v in order:
                set_variant(v)
                call[(name, v)].append(bench(fn, args.iters))
                kern[(name, v)].append(quant_kernel_us(fn))
    print(f"{'case':16s} " + " ".join(f"{'v' + v + ' call us':>24s} {'v' + v + ' kernel us':>24s}" for v in variants))
    for name, _ in cases:
        cells = []
        for v in variants:
            c, k = call[(name, v)], kern[(name, v)]
            cells.append(f"{statistics.median(c):7.1f} [{min(c):6.1f}-{max(c):6.1f}]".rjust(24))
            cells.append(f"{statistics.median(k):7.1f} [{min(k):6.1f}-{max(k):6.1f}]".rjust(24))
        print(f"{name:16s} " + " ".join(cells))


if __name__ == "__main__":
    main()
