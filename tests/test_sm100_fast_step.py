"""The argument of the device's mode-sm100 kernel (``device/csrc/gemm/sm100_copies.cu``, docs/design.md 4.6), checked
on the CPU against the specification's own scalar references: where its test passes, one k64 step of SPEC 12.7
(``oracle.sm100.mxf4nvf4_k64_step``) equals ``RZ(C + RN(p0 + p1))`` for the two chained wgmma partials of SPEC 12.6
(``oracle.tensor_core.wgmma_k16_step`` on the fp16 copies' values; chained only where the step's exponents spread by
at most 7), and ``RZ(C + RN(RN(V0 + V1) + RN(V2 + V3)))`` for the four per-group partials.

The kernel's test, for an output with per-row bounds (lo, hi) of its scale exponents e(s) over nonzero scale bytes:
L = lo_A + lo_B, H = hi_A + hi_B; H - L <= 27; the partials' magnitude sum m < 2^(L + 16); |C| < 2^(L + 28); and
|C| >= 2^(H - 12) unless C = 0. The warp-wide form of the kernel takes the band's and the tile's bounds (a smaller L,
a larger H): a stricter test of the same conditions.
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


def kernel_step(c: np.float32, a_codes, b_codes, a_scales, b_scales):
    """What sm100_copies returns for one output and step where its per-output test passes (None where it does not,
    the int64 step then runs), from SPEC 12.6's wgmma model on the fp16 copies' values v = E2M1 x scale."""
    lo_a, hi_a = bounds(a_scales)
    lo_b, hi_b = bounds(b_scales)
    lo, hi = lo_a + lo_b, hi_a + hi_b
    va = [float(decode_e2m1(np.uint8(x)) * scale_value(a_scales[i // 16])) for i, x in enumerate(a_codes)]
    vb = [float(decode_e2m1(np.uint8(x)) * scale_value(b_scales[i // 16])) for i, x in enumerate(b_codes)]

    def wgmma(acc, g):
        return wgmma_k16_step(acc, va[16 * g:16 * g + 16], vb[16 * g:16 * g + 16], operands="fp16")

    if hi - lo <= 7:  # chained: two wgmmas per fragment, the second with scale-d = 1
        p0, p1 = wgmma(wgmma(0.0, 0), 1), wgmma(wgmma(0.0, 2), 3)
        s = np.float32(p0) + np.float32(p1)
        m = abs(np.float32(p0)) + abs(np.float32(p1))
    else:  # per group
        v = [np.float32(wgmma(0.0, g)) for g in range(4)]
        s = (v[0] + v[1]) + (v[2] + v[3])
        m = (abs(v[0]) + abs(v[1])) + (abs(v[2]) + abs(v[3]))
    ac = abs(float(c))
    ok = (hi - lo <= 27 and float(m) < 2.0 ** (lo + 16) and ac < 2.0 ** (lo + 28)
          and (ac >= 2.0 ** (hi - 12) or c == 0))
    return rz32(Fraction(float(c)) + Fraction(float(s))) if ok else None


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
