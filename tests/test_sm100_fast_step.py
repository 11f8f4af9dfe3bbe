"""The argument of the device's mode-sm100 kernel (``device/csrc/gemm/sm100_copies.cu``, docs/design.md 4.6), checked
on the CPU against the specification's own scalar references: where its tests pass, one k64 step of SPEC 12.7
(``oracle.sm100.mxf4nvf4_k64_step``) equals ``RZ(C + p)`` for one chain of four wgmma steps of SPEC 12.6
(``oracle.tensor_core.wgmma_k16_step`` on the fp16 copies' values) where the step's exponents spread by at most 7 and
its chain-4 bound (sum over the groups of 576 sA sB) lies below 2^(L + 16), ``RZ(C + RN(p0 + p1))`` for two chains of
two under that spread otherwise, and ``RZ(C + RN(RN(V0 + V1) + RN(V2 + V3)))`` for the four per-group partials.

The kernel's tests, for an output with per-row bounds (lo, hi) of its scale exponents e(s) over nonzero scale bytes,
L = lo_A + lo_B, H = hi_A + hi_B, and the partials' magnitude sum m (the chain-4 bound on that path) < 2^(L + 16) in
both:
* the running test, over a tile's steps: H <= L_min + 27 and c_max < 2^(L_min + 28), with L_min the least L so far and
  c_max a bound on |C| carried from step to step;
* the per-step test, where the running one fails: H - L <= 27, |C| < 2^(L + 28) and |C| >= 2^(H - 12) unless C = 0.
The warp-wide forms take the band's and the tile's bounds (a smaller L, a larger H): stricter tests of the same
conditions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from oracle.fp4_numpy import decode_e2m1
from oracle.sm100 import mxf4nvf4_k64_step
from oracle.tensor_core import wgmma_k16_step

E4M3_MAX_BYTE = 0x7E


def scale_value(byte: int) -> Fraction:
    """An E4M3 scale byte's value (SPEC 2.2; bytes 0x00..0x7E here)."""
    ef, mant = byte >> 3, byte & 7
    return Fraction(mant, 512) if ef == 0 else Fraction(8 + mant, 8) * Fraction(2) ** (ef - 7)


def scale_exp(byte: int) -> int:
    """SPEC 12.7's e(s): floor(log2 s) of a normal scale, -6 of a subnormal one."""
    return max(byte >> 3, 1) - 7


def bounds(scales) -> tuple[int, int]:
    """(lo, hi): the least and largest e(s) over the nonzero scale bytes (64, -64 when there is none)."""
    e = [scale_exp(b) for b in scales if b]
    return (min(e), max(e)) if e else (64, -64)


def rz32(v: Fraction) -> np.float32:
    """v rounded toward zero to fp32 (normal range; v a multiple of 2^-20 here)."""
    if v == 0:
        return np.float32(0.0)
    e = math.floor(math.log2(abs(v)))
    while Fraction(2) ** e > abs(v):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(v):
        e += 1
    unit = Fraction(2) ** (e - 23)
    q = abs(v) // unit * unit
    return np.float32(float(q if v > 0 else -q))


def ru32(v: Fraction) -> np.float32:
    """v rounded up to fp32 (v >= 0, in the normal range or zero)."""
    r = np.float32(float(v))
    return np.nextafter(r, np.float32(np.inf)) if Fraction(float(r)) < v else r


def chain4_bound(a_scales, b_scales) -> np.float32:
    """The kernel's chain-4 bound (chain4_bound in sm100_copies.cu) for one row and column: sum over the groups of
    576 sA_g sB_g, rounded up to fp32."""
    return ru32(sum(576 * scale_value(a) * scale_value(b) for a, b in zip(a_scales, b_scales, strict=True)))


def partials(a_codes, b_codes, a_scales, b_scales, chain4: bool = True):
    """The kernel's partials of one output and step from SPEC 12.6's wgmma model on the fp16 copies' values
    v = E2M1 x scale: (s, m, lo, hi, path), s their fp32 sum, m a bound on the fp32 sum of their magnitudes, lo and hi
    the step's L and H. Where the exponents spread by at most 7: one chain of four wgmmas (scale-d = 1 after the first)
    where ``chain4`` and the chain-4 bound lies below 2^(L + 16), m that bound; else two chains of two, m the sum of
    their magnitudes. Wider spreads: four per-group partials."""
    lo_a, hi_a = bounds(a_scales)
    lo_b, hi_b = bounds(b_scales)
    lo, hi = lo_a + lo_b, hi_a + hi_b
    va = [float(decode_e2m1(np.uint8(x)) * scale_value(a_scales[i // 16])) for i, x in enumerate(a_codes)]
    vb = [float(decode_e2m1(np.uint8(x)) * scale_value(b_scales[i // 16])) for i, x in enumerate(b_codes)]

    def wgmma(acc, g):
        return wgmma_k16_step(acc, va[16 * g:16 * g + 16], vb[16 * g:16 * g + 16], operands="fp16")

    if hi - lo <= 7:
        bound = chain4_bound(a_scales, b_scales)
        if chain4 and float(bound) < 2.0 ** (lo + 16):
            return np.float32(wgmma(wgmma(wgmma(wgmma(0.0, 0), 1), 2), 3)), bound, lo, hi, "chain4"
        p0, p1 = np.float32(wgmma(wgmma(0.0, 0), 1)), np.float32(wgmma(wgmma(0.0, 2), 3))
        return p0 + p1, abs(p0) + abs(p1), lo, hi, "chained"
    v = [np.float32(wgmma(0.0, g)) for g in range(4)]
    return (v[0] + v[1]) + (v[2] + v[3]), (abs(v[0]) + abs(v[1])) + (abs(v[2]) + abs(v[3])), lo, hi, "per_group"


def step_test(c: np.float32, m: np.float32, lo: int, hi: int) -> bool:
    """The kernel's per-step test of one output: nothing cut by SPEC 12.7's window, the partials add exactly."""
    ac = abs(float(c))
    return (hi - lo <= 27 and float(m) < 2.0 ** (lo + 16) and ac < 2.0 ** (lo + 28)
            and (ac >= 2.0 ** (hi - 12) or c == 0))


def kernel_step(c: np.float32, a_codes, b_codes, a_scales, b_scales, chain4: bool = True):
    """What sm100_copies returns for one output and step where its per-step test passes (None where it does not,
    the int64 step then runs), and the partials' path."""
    s, m, lo, hi, path = partials(a_codes, b_codes, a_scales, b_scales, chain4)
    return (rz32(Fraction(float(c)) + Fraction(float(s))) if step_test(c, m, lo, hi) else None), path


class RunningBounds:
    """The kernel's running test of one output over a tile's steps (RunningBounds in sm100_copies.cu): t_min =
    2^(L_min + 16) over the steps so far, c_max >= |C| (grown by the step's magnitude sum rounded up where the running
    test passed, else |C| again); the step adds RZ(C + s) where H <= L_min + 27, m < 2^(L + 16) and
    c_max < 2^(L_min + 28)."""

    def __init__(self):
        self.t_min, self.c_max = math.inf, np.float32(0.0)

    def ok(self, m: np.float32, lo: int, hi: int) -> bool:
        self.t_min = min(self.t_min, 2.0 ** (lo + 16))
        return (hi - lo <= 27 and float(m) < 2.0 ** (lo + 16) and 2.0 ** (hi - 12) <= self.t_min / 2
                and float(self.c_max) < 4096 * self.t_min)


def kernel_tile(steps, chain4: bool = True):
    """The kernel's accumulator of one output over a tile's steps ((codes A, codes B, scales A, scales B) each), C
    from +0: the running test, else the per-step test, else SPEC 12.7's step. Returns the accumulator after each step
    and the number of steps that only the running test let through."""
    c, run, out, only_running = np.float32(0.0), RunningBounds(), [], 0
    for a, b, sa, sb in steps:
        s, m, lo, hi, _ = partials(a, b, sa, sb, chain4)
        if run.ok(m, lo, hi):
            only_running += not step_test(c, m, lo, hi)
            c = rz32(Fraction(float(c)) + Fraction(float(s)))
            run.c_max = ru32(Fraction(float(run.c_max)) + Fraction(float(m)))
        else:
            c = (rz32(Fraction(float(c)) + Fraction(float(s))) if step_test(c, m, lo, hi)
                 else mxf4nvf4_k64_step(c, a, b, sa, sb))
            run.c_max = np.float32(abs(c))
        out.append(np.float32(c))
    return out, only_running


def random_step(rng, spread: int, zeros: float, c_binades: tuple[int, int]):
    """Codes, scale bytes (exponent fields within `spread` of a random centre, some zero) and an fp32 C on the 2^-20
    grid with |C| in 2^c_binades (or 0)."""
    codes = rng.integers(0, 16, size=(2, 64))
    codes[rng.random((2, 64)) < zeros] = 0
    centre = int(rng.integers(1 + spread, 16 - spread)) if spread < 7 else 8
    fields = np.clip(centre + rng.integers(-spread, spread + 1, size=(2, 4)), 0, 15)
    scales = np.minimum(fields * 8 + rng.integers(0, 8, size=(2, 4)), E4M3_MAX_BYTE)
    scales[rng.random((2, 4)) < zeros / 2] = 0
    if rng.random() < 0.1:
        c = np.float32(0.0)
    else:
        c = np.float32(rng.choice([-1, 1]) * 2.0 ** rng.uniform(*c_binades))
        c = np.float32(math.trunc(float(c) * 2**20) / 2**20)  # a multiple of 2^-20, as every accumulator is
    return c, codes[0], codes[1], [int(x) for x in scales[0]], [int(x) for x in scales[1]]


@pytest.mark.parametrize("chain4", [True, False], ids=["chain4", "two_chains"])
@pytest.mark.parametrize("spread, zeros, c_binades, min_fast, min_chain4", [
    (1, 0.0, (0, 30), 300, 100),   # typical: chained (one chain of four or two of two), fast
    (3, 0.1, (-10, 40), 200, 40),  # chained and per group, C from tiny to huge
    (8, 0.3, (-20, 45), 40, 0),    # wide spreads: per group, many slow steps
])
def test_where_the_kernels_test_passes_its_step_is_spec_12_7(spread, zeros, c_binades, min_fast, min_chain4, chain4):
    rng = np.random.default_rng(1000 + spread)
    fast, paths = 0, {"chain4": 0, "chained": 0, "per_group": 0}
    for _ in range(400):
        c, ac, bc, sa, sb = random_step(rng, spread, zeros, c_binades)
        got, path = kernel_step(c, ac, bc, sa, sb, chain4)
        if got is None:
            continue
        fast += 1
        paths[path] += 1
        want = mxf4nvf4_k64_step(c, ac, bc, sa, sb)
        assert np.array_equal(np.float32(got).view(np.uint32), np.float32(want).view(np.uint32)), (c, sa, sb, got, want)
    assert fast >= min_fast, f"only {fast} of 400 steps took the fast path: the test checks too little"
    assert paths["chain4"] >= (min_chain4 if chain4 else 0) and (chain4 or paths["chain4"] == 0), paths
    assert paths["chained"] >= (min_fast // 4 if spread < 8 and not chain4 else 0), paths


def test_one_chain_of_four_at_its_bound():
    """The chain-4 bound decides exactly where one chain of four wgmmas is SPEC 12.7's step (L = 0, H = 6 and 7 below:
    chained spreads):
    * bound 576 (64 + 32 + 15 + 117/64) = 64,989 < 2^16: the four groups (codes 6, and one 0.5 x 0.5 product at scales
      9/8 and 13/8) add to 64,923.64453125, every bit from 2^15 to 2^-8 used, exactly in the chain;
    * bound above 2^16: group 0 (16 products 6 x 6 at scales 16 and 8: 73,728) plus group 1 (one product 0.5 x 0.5 at
      scales 9/8: 81 / 256) rounds to 73,728.3125 in the chain, and group 2 cancels group 0: the chain returns 0.3125
      where the step is 0.31640625 (two chains of two fail their magnitude test too)."""
    six, half = 0x7, 0x1
    tight_a = [six] * 48 + [six] * 15 + [half]
    tight = (tight_a, list(tight_a), [0x50, 0x48, 0x40, 0x39], [0x50, 0x50, 0x4F, 0x3D])
    got, path = kernel_step(np.float32(0.0), *tight)
    assert path == "chain4" and float(chain4_bound(tight[2], tight[3])) == 576 * (64 + 32 + 15 + 117 / 64)
    want = mxf4nvf4_k64_step(np.float32(0.0), *tight)
    assert float(want) == 64923.64453125 and np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32)

    cancel_a = [six] * 16 + [half] + [0] * 15 + [six | 0x8] * 16 + [0] * 16
    cancel_b = [six] * 16 + [half] + [0] * 15 + [six] * 16 + [0] * 16
    over = (cancel_a, cancel_b, [0x58, 0x39, 0x58, 0], [0x50, 0x39, 0x50, 0])
    got, path = kernel_step(np.float32(0.0), *over)
    assert path == "chained" and got is None
    want = mxf4nvf4_k64_step(np.float32(0.0), *over)
    assert float(want) == 81 / 256
    lo, hi = bounds(over[2])[0] + bounds(over[3])[0], bounds(over[2])[1] + bounds(over[3])[1]
    assert (lo, hi) == (0, 7) and float(chain4_bound(over[2], over[3])) >= 2.0**16
    va = [float(decode_e2m1(np.uint8(x)) * scale_value(over[2][i // 16])) for i, x in enumerate(over[0])]
    vb = [float(decode_e2m1(np.uint8(x)) * scale_value(over[3][i // 16])) for i, x in enumerate(over[1])]
    chain = 0.0
    for g in range(4):
        chain = wgmma_k16_step(chain, va[16 * g:16 * g + 16], vb[16 * g:16 * g + 16], operands="fp16")
    assert float(chain) == 0.3125 != float(want)


def test_the_tests_thresholds_on_c_are_needed():
    """Steps that the kernel's test rejects only for C would be wrong on the fast path, each by one fp32 ulp against
    SPEC 12.7's step (loosening either threshold by a few binades would let them through):
    * |C| < 2^(L + 28): one subnormal-scale group (L = H = -12) whose product is tiny and negative beside C = 2^16;
      the window 2^(16 - 35) drops the product, which RZ(C + s) keeps.
    * |C| >= 2^(H - 12): C = -(8 + 2^-20) beside one product 0.25 x 448^2 (H = 16); the window 2^-19 drops C's last
      bit, which RZ(C + s) keeps."""
    cases = [
        (np.float32(2.0**16), [0x1] + [0] * 63, [0x9] + [0] * 63, [0x01, 0, 0, 0], Fraction(-1, 4) * scale_value(1) ** 2),
        (np.float32(-(8 + 2.0**-20)), [0x1] + [0] * 63, [0x1] + [0] * 63, [0x7E, 0, 0, 0],
         Fraction(1, 4) * scale_value(0x7E) ** 2),
    ]
    for c, a, b, scales, s in cases:
        assert kernel_step(c, a, b, scales, scales)[0] is None
        want = mxf4nvf4_k64_step(c, a, b, scales, scales)
        naive = rz32(Fraction(float(c)) + s)
        assert float(naive) != float(want), (c, float(want))


def random_tile(rng, steps: int):
    """A tile's steps whose scales drift by a few binades from step to step and now and then jump up by 7-11 (C then
    lies far below the step's H, which only the running test accepts), some codes and groups zero."""
    level, out = int(rng.integers(2, 5)), []
    for _ in range(steps):
        jump = rng.random() < 0.2
        level = int(np.clip(level + (rng.integers(7, 12) if jump else rng.integers(-2, 3)), 2, 14))
        codes = rng.integers(0, 16, size=(2, 64))
        codes[rng.random((2, 64)) < 0.2] = 0
        fields = np.clip(level + rng.integers(-1, 2, size=(2, 4)), 1, 15)
        scales = np.minimum(fields * 8 + rng.integers(0, 8, size=(2, 4)), E4M3_MAX_BYTE)
        scales[rng.random((2, 4)) < 0.1] = 0
        out.append((codes[0], codes[1], [int(x) for x in scales[0]], [int(x) for x in scales[1]]))
        if jump:
            level = int(rng.integers(2, 5))
    return out


@pytest.mark.parametrize("chain4", [True, False], ids=["chain4", "two_chains"])
def test_the_running_test_over_a_tile_is_spec_12_7_step_by_step(chain4):
    rng = np.random.default_rng(77)
    only_running = 0
    for _ in range(100):
        steps = random_tile(rng, 12)
        got, n = kernel_tile(steps, chain4)
        only_running += n
        want = np.float32(0.0)
        for k, (a, b, sa, sb) in enumerate(steps):
            want = mxf4nvf4_k64_step(want, a, b, sa, sb)
            assert np.float32(got[k]).view(np.uint32) == np.float32(want).view(np.uint32), (k, got[k], want)
    assert only_running >= 15, f"only {only_running} steps passed the running test alone: it is barely exercised"


def test_the_running_tests_bounds_are_needed():
    """Two-step tiles where the running test rejects the second step for one bound only, and RZ(C + s) would be one
    fp32 ulp off SPEC 12.7's step:
    * H <= L_min + 27: step 1 leaves C = 2^-20 (one product 0.5 x 0.5 at subnormal scales 2^-9, L = H = -12); step 2
      has one live group at scales 448 (H = 16) whose two products cancel. The window 2^(16 - 35) drops C, which
      RZ(C + 0) keeps (c_max = 2^-20 and m = 25088 pass their bounds).
    * c_max < 2^(L_min + 28): step 1 leaves C = 2^16 (4 x 4 at scales 64, L = H = 12); step 2 adds -2^-20 (L = H = -12,
      so L_min + 28 = 16). The window 2^(16 - 35) drops the product, which RZ(C + s) keeps."""
    one = [0x1] + [0] * 63
    cancel_a, cancel_b = [0x1, 0x1] + [0] * 62, [0x1, 0x9] + [0] * 62
    tiny, big = [0x01, 0, 0, 0], [0x7E, 0, 0, 0]
    four, at64 = [0x6] + [0] * 63, [0x68, 0, 0, 0]
    tiles = [
        ([(one, one, tiny, tiny), (cancel_a, cancel_b, big, big)], np.float32(2.0**-20)),
        ([(four, four, at64, at64), (one, [0x9] + [0] * 63, tiny, tiny)], np.float32(2.0**16 - 2.0**-8)),
    ]
    for steps, naive in tiles:
        got, _ = kernel_tile(steps)
        want = mxf4nvf4_k64_step(mxf4nvf4_k64_step(np.float32(0.0), *steps[0]), *steps[1])
        assert np.float32(got[1]).view(np.uint32) == np.float32(want).view(np.uint32)
        s, m, lo, hi, _ = partials(*steps[1])
        assert naive == rz32(Fraction(float(got[0])) + Fraction(float(s))) and naive != want
        run = RunningBounds()
        run.t_min = 2.0 ** (bounds(steps[0][2])[0] * 2 + 16)
        run.c_max = np.float32(abs(got[0]))
        assert not run.ok(m, lo, hi)
