"""The argument of the device's mode-sm100 kernel (``device/csrc/gemm/sm100_copies.cu``, docs/design.md 4.6), checked
on the CPU against the specification's own scalar references: where its tests pass, one k64 step of SPEC 12.7
(``oracle.sm100.mxf4nvf4_k64_step``) equals ``RZ(C + RN(p0 + p1))`` for the two chained wgmma partials of SPEC 12.6
(``oracle.tensor_core.wgmma_k16_step`` on the fp16 copies' values; chained only where the step's exponents spread by
at most 7), and ``RZ(C + RN(RN(V0 + V1) + RN(V2 + V3)))`` for the four per-group partials.

The kernel's tests, for an output with per-row bounds (lo, hi) of its scale exponents e(s) over nonzero scale bytes,
L = lo_A + lo_B, H = hi_A + hi_B, and the partials' magnitude sum m < 2^(L + 16) in both:
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


def partials(a_codes, b_codes, a_scales, b_scales):
    """The kernel's partials of one output and step from SPEC 12.6's wgmma model on the fp16 copies' values
    v = E2M1 x scale: (s, m, lo, hi), s their fp32 sum, m the fp32 sum of their magnitudes, lo and hi the step's L and H.
    Chained (two wgmmas per fragment, the second with scale-d = 1) where the exponents spread by at most 7, else four
    per-group partials."""
    lo_a, hi_a = bounds(a_scales)
    lo_b, hi_b = bounds(b_scales)
    lo, hi = lo_a + lo_b, hi_a + hi_b
    va = [float(decode_e2m1(np.uint8(x)) * scale_value(a_scales[i // 16])) for i, x in enumerate(a_codes)]
    vb = [float(decode_e2m1(np.uint8(x)) * scale_value(b_scales[i // 16])) for i, x in enumerate(b_codes)]

    def wgmma(acc, g):
        return wgmma_k16_step(acc, va[16 * g:16 * g + 16], vb[16 * g:16 * g + 16], operands="fp16")

    if hi - lo <= 7:
        p0, p1 = np.float32(wgmma(wgmma(0.0, 0), 1)), np.float32(wgmma(wgmma(0.0, 2), 3))
        return p0 + p1, abs(p0) + abs(p1), lo, hi
    v = [np.float32(wgmma(0.0, g)) for g in range(4)]
    return (v[0] + v[1]) + (v[2] + v[3]), (abs(v[0]) + abs(v[1])) + (abs(v[2]) + abs(v[3])), lo, hi


def step_test(c: np.float32, m: np.float32, lo: int, hi: int) -> bool:
    """The kernel's per-step test of one output: nothing cut by SPEC 12.7's window, the partials add exactly."""
    ac = abs(float(c))
    return (hi - lo <= 27 and float(m) < 2.0 ** (lo + 16) and ac < 2.0 ** (lo + 28)
            and (ac >= 2.0 ** (hi - 12) or c == 0))


def kernel_step(c: np.float32, a_codes, b_codes, a_scales, b_scales):
    """What sm100_copies returns for one output and step where its per-step test passes (None where it does not,
    the int64 step then runs)."""
    s, m, lo, hi = partials(a_codes, b_codes, a_scales, b_scales)
    return rz32(Fraction(float(c)) + Fraction(float(s))) if step_test(c, m, lo, hi) else None


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


def kernel_tile(steps):
    """The kernel's accumulator of one output over a tile's steps ((codes A, codes B, scales A, scales B) each), C
    from +0: the running test, else the per-step test, else SPEC 12.7's step. Returns the accumulator after each step
    and the number of steps that only the running test let through."""
    c, run, out, only_running = np.float32(0.0), RunningBounds(), [], 0
    for a, b, sa, sb in steps:
        s, m, lo, hi = partials(a, b, sa, sb)
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


@pytest.mark.parametrize("spread, zeros, c_binades, min_fast", [
    (1, 0.0, (0, 30), 300),     # typical: chained, fast
    (3, 0.1, (-10, 40), 200),   # chained and per group, C from tiny to huge
    (8, 0.3, (-20, 45), 40),    # wide spreads: per group, many slow steps
])
def test_where_the_kernels_test_passes_its_step_is_spec_12_7(spread, zeros, c_binades, min_fast):
    rng = np.random.default_rng(1000 + spread)
    fast = 0
    for _ in range(400):
        c, ac, bc, sa, sb = random_step(rng, spread, zeros, c_binades)
        got = kernel_step(c, ac, bc, sa, sb)
        if got is None:
            continue
        fast += 1
        want = mxf4nvf4_k64_step(c, ac, bc, sa, sb)
        assert np.array_equal(np.float32(got).view(np.uint32), np.float32(want).view(np.uint32)), (c, sa, sb, got, want)
    assert fast >= min_fast, f"only {fast} of 400 steps took the fast path: the test checks too little"


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
        assert kernel_step(c, a, b, scales, scales) is None
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


def test_the_running_test_over_a_tile_is_spec_12_7_step_by_step():
    rng = np.random.default_rng(77)
    only_running = 0
    for _ in range(100):
        steps = random_tile(rng, 12)
        got, n = kernel_tile(steps)
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
        s, m, lo, hi = partials(*steps[1])
        assert naive == rz32(Fraction(float(got[0])) + Fraction(float(s))) and naive != want
        run = RunningBounds()
        run.t_min = 2.0 ** (bounds(steps[0][2])[0] * 2 + 16)
        run.c_max = np.float32(abs(got[0]))
        assert not run.ok(m, lo, hi)
