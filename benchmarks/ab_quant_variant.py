"""A/B of quantizer switches read from the environment at every launch, in one process.

A side is a set of environment assignments (``"A=1 B=2"``; sides separated by ``;``). First every side's outputs are
compared with the first side's, byte for byte, on a few single and grouped
calls (odd shapes, empty groups, NaN / Inf blocks, both rules); then ``--rounds`` rounds, each timing every variant in
turn (the order rotates per round) on the fused path of ``bench_quantize.py`` (row + RHT col, swizzled, amax; graph
replay after the 256 MB zeroing flush, median), the quantize kernel, the amax pass and the grouped setup kernel alone
(torch.profiler, mean of 5 calls).

    PYTHONPATH=.:benchmarks python benchmarks/ab_quant_variant.py --sides "X=0;X=1" --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

import torch
from bench_quantize import SHAPES, bench, skewed_splits
from profiling import profiled_kernels

import device

_SET: set[str] = set()


def set_variant(side: str) -> None:
    """Apply one side's assignments; variables that another side set and this one does not are removed."""
    pairs = dict(kv.split("=", 1) for kv in side.split())
    for name in _SET - set(pairs):
        os.environ.pop(name, None)
    for name, value in pairs.items():
        os.environ[name] = value
        _SET.add(name)


def outputs(q) -> list[torch.Tensor]:
    """Every tensor field of a device quantize result (single or grouped: data, scales, amaxes, the offset table), as
    uint8 views."""
    got = [t.contiguous().view(torch.uint8).reshape(-1)
           for t in (getattr(q, f.name) for f in dataclasses.fields(q)) if isinstance(t, torch.Tensor)]
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
    # the setup kernel's scan: many groups (several 256-group chunks), sizes past T (capped), negative sizes, E = 1
    gen = torch.Generator().manual_seed(7)
    for name, sizes in (("E=600", torch.randint(0, 12, (600,), generator=gen)),
                        ("E=300 over T", torch.randint(0, 25, (300,), generator=gen)),
                        ("E=40 negatives", torch.randint(-50, 150, (40,), generator=gen)),
                        ("E=1", torch.tensor([3000])), ("E=2000 zeros", torch.zeros(2000, dtype=torch.int64))):
        spg = sizes.to(torch.int64).cuda()
        cases.append((f"grouped 3000x512 {name}", lambda spg=spg: device.group_quantize(
            x, spg, rowwise=True, columnwise=True, rht=True)))
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
                print(f"MISMATCH side {v!r} against {variants[0]!r}: {name}")
    torch.cuda.synchronize()
    print(f"bytes: {len(cases)} calls x {len(variants) - 1} sides against side 0: "
          f"{'all equal' if bad == 0 else f'{bad} differ'}")


def kernel_us(fn) -> tuple[float, float, float]:
    """Mean torch.profiler time of the quantize kernel, the amax pass and the grouped setup kernel over 5 calls (0
    where the call has no such kernel)."""
    ev = profiled_kernels(fn, calls=5)
    q = [d for n, _, d in ev if "quantize_" in n]
    a = [d for n, _, d in ev if "amax_" in n and "zero_amax" not in n]
    s = [d for n, _, d in ev if "group_setup" in n]
    return sum(q) / max(1, len(q)), sum(a) / max(1, len(a)), sum(s) / max(1, len(s))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sides", required=True, help='environment assignments per side, e.g. "X=0;X=1 Y=2"')
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    variants = [v.strip() for v in args.sides.split(";")]
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
    amax = {(c, v): [] for c, _ in cases for v in variants}
    setup = {(c, v): [] for c, _ in cases for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for name, fn in cases:
            for v in order:
                set_variant(v)
                call[(name, v)].append(bench(fn, args.iters))
                q, am, st = kernel_us(fn)
                kern[(name, v)].append(q)
                amax[(name, v)].append(am)
                setup[(name, v)].append(st)
    for i, v in enumerate(variants):
        print(f"side {i}: {v or '(nothing set)'}")
    print("median [min-max] us: call (graph, flushed) | quantize kernel | amax pass | grouped setup kernel")
    for name, _ in cases:
        for i, v in enumerate(variants):
            cells = [f"{statistics.median(d[(name, v)]):7.1f} [{min(d[(name, v)]):6.1f}-{max(d[(name, v)]):6.1f}]"
                     for d in (call, kern, amax, setup)]
            print(f"{name:16s} side {i}  " + " | ".join(cells))


if __name__ == "__main__":
    main()
