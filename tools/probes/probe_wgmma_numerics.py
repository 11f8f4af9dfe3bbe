"""Probe of Hopper wgmma numerics (fp16 x fp16 -> fp32, through Triton's tl.dot, which compiles to wgmma on sm_90):
subnormal operands, the alignment window inside one k16 step, how the accumulator joins it, negative terms, and
whether terms are truncated one by one. Evidence for SPEC 12.4's accumulation assumption; prints one line per probe.

    PYTHONPATH=. python3 tools/probes/probe_wgmma_numerics.py        (needs a GPU and triton)

Each probe is a list of k16 steps; each step a list of (a, b) pairs at K positions 0, 1, ... (fp16 values). Only
element (0, 0) of a 64x64 tile is nonzero; it is sum_k a_k b_k accumulated by consecutive wgmma k16 instructions.
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, K: tl.constexpr):
    offs_m = tl.arange(0, 64)
    offs_n = tl.arange(0, 64)
    offs_k = tl.arange(0, 16)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k0 in range(0, K, 16):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * 64 + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * 64 + offs_n[None, :], acc)


def tc_dot(steps: list[list[tuple[float, float]]], dtype=torch.float16) -> float:
    k = 16 * len(steps)
    a = torch.zeros((64, k), dtype=dtype)
    b = torch.zeros((k, 64), dtype=dtype)
    for s, pairs in enumerate(steps):
        for i, (x, y) in enumerate(pairs):
            if x or y:
                a[0, 16 * s + i] = x
                b[16 * s + i, 0] = y
                assert float(a[0, 16 * s + i]) == x and float(b[16 * s + i, 0]) == y, (x, y)
    a, b = a.cuda(), b.cuda()
    c = torch.empty((64, 64), dtype=torch.float32, device="cuda")
    global _LAST
    _LAST = _dot_kernel[(1,)](a, b, c, K=k, num_warps=4)
    return float(c[0, 0].cpu())


_LAST = None


def show(name: str, steps, dtype=torch.float16) -> None:
    got = tc_dot(steps, dtype)
    exact = sum(Fraction(x) * Fraction(y) for st in steps for x, y in st)
    bits = np.array([got], np.float32).view(np.uint32)[0]
    diff = Fraction(got) - exact
    print(f"{name:58s} got {got!r:>24} (0x{bits:08x})  exact {float(exact)!r:>24}  got-exact {float(diff):.3e}")


def pad(pairs, n=16):
    return list(pairs) + [(0.0, 0.0)] * (n - len(pairs))


def at(pos: dict[int, tuple[float, float]]):
    return [pos.get(i, (0.0, 0.0)) for i in range(16)]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    tc_dot([pad([(1.0, 1.0)])])
    try:
        ok = "wgmma" in _LAST.asm["ptx"]
    except Exception as ex:  # noqa: BLE001
        ok = f"unknown ({type(ex).__name__})"
    print("ptx uses wgmma:", ok, "| torch", torch.__version__, "| triton", triton.__version__, "|",
          torch.cuda.get_device_name())
    print("# A. single products with fp16 subnormal operands (exact products expected)")
    for ea, eb in [(15, 0), (24, 0), (24, 24), (20, 20), (14, 14), (24, 10), (18, 23)]:
        show(f"2^-{ea} * 2^-{eb}", [pad([(2.0**-ea, 2.0**-eb)])])
    show("3*2^-24 * 5*2^-24", [pad([(3 * 2.0**-24, 5 * 2.0**-24)])])
    show("2^-14*2^-14 + 2^-24*2^-24 (one step)", [pad([(2.0**-14, 2.0**-14), (2.0**-24, 2.0**-24)])])
    show("7*2^-24*2^-14 + 2^-24*2^-24 (one step)", [pad([(7 * 2.0**-24, 2.0**-14), (2.0**-24, 2.0**-24)])])
    print("# B. alignment window in one step: 1 - 1 + v (v survives iff kept)")
    for e in range(22, 30):
        v = 2.0**-e
        show(f"[1, -1, 2^-{e}] one step", [pad([(1.0, 1.0), (-1.0, 1.0), (2.0 ** -(e // 2), 2.0 ** -(e - e // 2))])])
    print("# C. individual truncation: 1 - 1 + v + v, v = 2^-25, 2^-26")
    for e in (25, 26):
        v2 = (2.0 ** -(e // 2), 2.0 ** -(e - e // 2))
        show(f"[1, -1, 2^-{e}, 2^-{e}] one step", [pad([(1.0, 1.0), (-1.0, 1.0), v2, v2])])
        show(f"[1, -1, 4 x 2^-{e}] one step", [pad([(1.0, 1.0), (-1.0, 1.0), v2, v2, v2, v2])])
    print("# D. grouping inside a step: 1 at 0, -1 at j, 2^-30 at k (kept -> 2^-30 is not aligned with the 1)")
    tiny = (2.0**-15, 2.0**-15)
    for j, k in [(1, 2), (1, 15), (15, 1), (8, 1), (8, 9), (4, 5), (2, 3), (3, 1), (7, 1), (8, 15), (15, 8)]:
        show(f"1@0 -1@{j} 2^-30@{k}", [at({0: (1.0, 1.0), j: (-1.0, 1.0), k: tiny})])
    show("2^-30@0 1@8 -1@9", [at({0: tiny, 8: (1.0, 1.0), 9: (-1.0, 1.0)})])
    show("2^-30@0 1@1 -1@9", [at({0: tiny, 1: (1.0, 1.0), 9: (-1.0, 1.0)})])
    print("# E. the accumulator and the alignment")
    show("step1 2^-30 | step2 1, -1", [pad([tiny]), pad([(1.0, 1.0), (-1.0, 1.0)])])
    show("step1 1 | step2 -1, 2^-30", [pad([(1.0, 1.0)]), pad([(-1.0, 1.0), tiny])])
    for e in range(22, 28):
        v = (2.0 ** -(e // 2), 2.0 ** -(e - e // 2))
        show(f"step1 1 | step2 -1, 2^-{e}", [pad([(1.0, 1.0)]), pad([(-1.0, 1.0), v])])
    print("# F. negative small terms onto 1 (truncation direction)")
    for e in (24, 25, 26):
        v = (-(2.0 ** -(e // 2)), 2.0 ** -(e - e // 2))
        show(f"step1 1 | step2 16 x -2^-{e}", [pad([(1.0, 1.0)]), [v] * 16])
        show(f"one step 1, 15 x -2^-{e}", [[(1.0, 1.0)] + [v] * 15])
        show(f"step1 -1 | step2 16 x +2^-{e}", [pad([(-1.0, 1.0)]), [(-v[0], v[1])] * 16])
    print("# G. larger products than the accumulator (accumulator truncated?)")
    for e in (24, 25, 26):
        v = (2.0 ** -(e // 2), 2.0 ** -(e - e // 2))
        show(f"step1 2^-{e} | step2 1", [pad([v]), pad([(1.0, 1.0)])])
        show(f"step1 2^-{e} | step2 1, -1, 1", [pad([v]), pad([(1.0, 1.0), (-1.0, 1.0), (1.0, 1.0)])])
        show(f"step1 3*2^-{e} | step2 -1, 1", [pad([(3 * v[0], v[1])]), pad([(-1.0, 1.0), (1.0, 1.0)])])
    print("# H. zero operands next to a large partner (do zeros count in the alignment?)")
    show("0 x 2^15, 2^-13 x 2^-13", [pad([(0.0, 2.0**15), (2.0**-13, 2.0**-13)])])
    show("step1 2^-26 | step2 0 x 2^15", [pad([(2.0**-13, 2.0**-13)]), pad([(0.0, 2.0**15)])])
    print("# I. a subnormal fp16 operand counts at exponent -14 (SPEC 12.6 step 2)")
    show("step1 15*2^-45 | step2 2^-22 x 0.1640625", [pad([(15 * 2.0**-23, 2.0**-22)]), pad([(2.0**-22, 0.1640625)])])
    show("step1 15*2^-45 | step2 2^-14 x 0.1640625*2^-8", [pad([(15 * 2.0**-23, 2.0**-22)]),
                                                          pad([(2.0**-14, 0.1640625 * 2.0**-8)])])
    print("# J. the same probes with bf16 operands")
    bf = torch.bfloat16
    for e in (25, 26):
        show(f"bf16 [1, -1, 2^-{e}] one step", [pad([(1.0, 1.0), (-1.0, 1.0), (2.0 ** -(e // 2), 2.0 ** -(e - e // 2))])], bf)
    show("bf16 step1 3*2^-26 | step2 -1, 1", [pad([(3 * 2.0**-13, 2.0**-13)]), pad([(-1.0, 1.0), (1.0, 1.0)])], bf)
    show("bf16 one step 1, 15 x -2^-25", [[(1.0, 1.0)] + [(-(2.0**-12), 2.0**-13)] * 15], bf)
    show("bf16 step1 15*2^-45 | step2 2^-22 x 0.1640625", [pad([(15 * 2.0**-23, 2.0**-22)]),
                                                            pad([(2.0**-22, 0.1640625)])], bf)
    show("bf16 1.5 x 1.5, -2.25, 2^-25 (product significand >= 2)", [pad([(1.5, 1.5), (-1.5, 1.5), (2.0**-12, 2.0**-13)])], bf)
    show("bf16 1.5 x 1.5, -2.25, 2^-26", [pad([(1.5, 1.5), (-1.5, 1.5), (2.0**-13, 2.0**-13)])], bf)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
