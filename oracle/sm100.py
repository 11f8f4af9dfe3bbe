"""Bit-exact model of Blackwell's block-scaled NVFP4 MMA and of a CUTLASS SM100 GEMM epilogue (SPEC 12.7).

The accumulator is a chain of ``tcgen05.mma ... kind::mxf4nvf4.block16`` k64 steps (E2M1 operands, one UE4M3 scale
per 16 elements) in K order from C = +0, a K that is not a multiple of 64 padded with zero codes and zero scale bytes.
One step (SPEC 12.7): each group of 16 E2M1 products is summed exactly and multiplied by its two scales; every
addend (the four group values and C) is truncated toward zero to a multiple of 2^(E - 35), E the largest addend
exponent (a group counts with the exponent of its scale product, a group without a nonzero product or with a zero
scale and a zero C with -139); the truncated addends are added exactly and the sum is rounded toward zero to fp32
(a zero result is +0). A NaN scale makes the step NaN.

The model works on integers in units of 2^-20: every group value is an integer multiple of 2^-20 (E2M1 values are
multiples of 1/2, UE4M3 scales multiples of 2^-9), truncation to a coarser power of two and rounding toward zero keep
that, so the accumulator is always ``A * 2^-20`` with an integer A, held in float64. A step's addends are exact there:
a group value is below 2^(E + 12) (SPEC 12.7: ``|P_g| <= 576`` and each scale below 2^(e(s) + 1)), so after the
truncation to multiples of 2^(E - 35) the five addends and their sum have at most 50 significant bits; the fp32 RZ
then clears the low 29 significand bits of the sum's float64 encoding.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .dequantize import nan_scale_rows
from .fp4_numpy import decode_e2m1
from .planes import QuantizedPlane
from .tensor_core import _RZ24, _exponent_f64
from .tensor_core import _fp32_rz as _fp32_rz_fraction

__all__ = ["STEP_K", "WINDOW", "E_ZERO", "mxf4nvf4_k64_step", "sm100_epilogue", "sm100_sum"]

STEP_K = 64  # K of one tcgen05.mma kind::mxf4nvf4 instruction (four 16-element groups)
WINDOW = 35  # addends are truncated at 2^(E - 35) (SPEC 12.7)
E_ZERO = -139  # the exponent of a zero group and of a zero C (SPEC 12.7): below every real one
_GROUPS = STEP_K // 16
_UNIT_EXP = -20  # the model's integers count units of 2^-20
# K of 2^13 k64 steps or more is refused (SPEC 12.7: K rounded up to 64 stays below 2^19; mode sm100 refuses the same)
_MAX_STEPS = 1 << 13


def _ue4m3_parts(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per scale byte (SPEC 12.7: UE4M3, the sign bit ignored): ``(m, x, e, nan)`` with value ``m * 2^x`` (m an
    integer 0..15), ``e`` the exponent the step gives it (floor(log2) of a normal value, -6 of a subnormal one) and
    whether it is NaN (0x7F / 0xFF); a NaN byte gets m = 0."""
    b = scales.astype(np.int64) & 0x7F
    ef, mant = b >> 3, b & 7
    nan = b == 0x7F
    m = np.where(nan, 0, np.where(ef > 0, mant + 8, mant))
    return m, np.maximum(ef, 1) - 10, np.maximum(ef, 1) - 7, nan


def _padded(plane: QuantizedPlane, kp: int) -> tuple[np.ndarray, np.ndarray]:
    """Doubled E2M1 values (int64 -12..12) ``[rows, kp]`` and scale bytes ``[rows, kp / 16]``, zero-padded from K to
    ``kp`` (SPEC 12.7: zero codes and zero scale bytes)."""
    r, k = plane.rows, plane.cols
    q = np.zeros((r, kp), np.int64)
    q[:, :k] = (decode_e2m1(plane.codes()) * 2).astype(np.int64)
    s = np.zeros((r, kp // 16), np.uint8)
    s[:, : k // 16] = plane.scales
    return q, s


def sm100_sum(a_plane: QuantizedPlane, b_plane: QuantizedPlane) -> np.ndarray:
    """The fp32 accumulator [M, N] of A . B^T as a chain of Blackwell k64 block-scaled MMA steps (SPEC 12.7).

    Args:
        a_plane, b_plane: K-major planes A [M, K], B [N, K] (same K, a multiple of 16); their E2M1 codes and scale
            bytes are the instruction's operands (the amaxes are not used: alpha belongs to the epilogue).
    Returns float32 [M, N]; rows or columns with a NaN scale byte give NaN. A K of 2^13 k64 steps or more (above
    524224) raises ValueError.
    """
    if a_plane.cols != b_plane.cols:
        raise ValueError(f"K mismatch: {a_plane.cols} vs {b_plane.cols}")
    m, n, k = a_plane.rows, b_plane.rows, a_plane.cols
    steps = -(-k // STEP_K)
    if steps >= _MAX_STEPS:
        raise ValueError(f"K={k} too large for the model (at most {(_MAX_STEPS - 1) * STEP_K})")
    kp = steps * STEP_K
    qa, sa = _padded(a_plane, kp)
    qb, sb = _padded(b_plane, kp)
    ma, xa, ea, _ = _ue4m3_parts(sa)
    mb, xb, eb, _ = _ue4m3_parts(sb)
    acc = np.zeros((m, n), np.float64)  # integers: units of 2^-20
    for j in range(steps):
        cols, grp = slice(STEP_K * j, STEP_K * (j + 1)), slice(_GROUPS * j, _GROUPS * (j + 1))
        a4 = qa[:, cols].reshape(m, _GROUPS, 16).transpose(1, 0, 2).astype(np.float64)  # [4, M, 16]
        b4 = qb[:, cols].reshape(n, _GROUPS, 16).transpose(1, 2, 0).astype(np.float64)  # [4, 16, N]
        d = np.matmul(a4, b4)  # [4, M, N]: 4 x each group's sum of E2M1 products (integers, |d| <= 2304)
        nonzero = np.matmul((a4 != 0).astype(np.float64), (b4 != 0).astype(np.float64)) > 0  # a nonzero product
        gma, gmb = ma[:, grp].T[:, :, None], mb[:, grp].T[:, None, :]
        live = nonzero & (gma > 0) & (gmb > 0)
        terms = np.ldexp(d * (gma * gmb), xa[:, grp].T[:, :, None] + xb[:, grp].T[:, None, :] + 18)
        e_groups = np.where(live, ea[:, grp].T[:, :, None] + eb[:, grp].T[:, None, :], E_ZERO)
        e_c = np.where(acc != 0, _exponent_f64(acc) + _UNIT_EXP, E_ZERO)
        e_max = np.maximum(e_groups.max(axis=0), e_c)
        unit = np.ldexp(1.0, np.maximum(e_max - WINDOW - _UNIT_EXP, 0))  # 2^(E - 35) in units of 2^-20, at least 1
        total = (np.trunc(terms / unit) * unit).sum(axis=0) + np.trunc(acc / unit) * unit
        acc = (total.view(np.int64) & _RZ24).view(np.float64) + 0.0  # fp32 RZ; a zero sum is +0
    out = np.ldexp(acc, _UNIT_EXP).astype(np.float32)  # exact: 24 bits, at least 2^-20
    return np.where(nan_scale_rows(a_plane)[:, None] | nan_scale_rows(b_plane)[None, :], np.float32(np.nan), out)


# ---------------------------------------------------------------------------------------------------------------
# one step, scalar and exact (the SPEC 12.7 text as written; for hand-worked vectors and tests)
# ---------------------------------------------------------------------------------------------------------------

_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _e2m1_value(code: int) -> Fraction:
    v = Fraction(_E2M1[code & 7])
    return -v if code & 8 else v


def _fp32_rz(v: Fraction) -> float:
    """v rounded toward zero to fp32 (24 significant bits; quantum 2^-149 below 2^-126); a zero is +0.0. Raises
    ValueError at or above 2^128 (outside the model)."""
    if abs(v) >= 2**128:
        raise ValueError("the step's sum reaches 2^128: outside the model")
    r = float(_fp32_rz_fraction(abs(v)))
    return -r if v < 0 else r


def mxf4nvf4_k64_step(c, a_codes, b_codes, a_scales, b_scales) -> np.float32:
    """One Blackwell k64 block-scaled step ``D = C + sum_g (sfA_g sfB_g) sum_{i<16} a_{16g+i} b_{16g+i}`` exactly as
    SPEC 12.7 states (scalar reference in exact arithmetic).

    Args:
        c: the fp32 accumulator C (finite or NaN).
        a_codes, b_codes: 64 E2M1 codes each (0..15).
        a_scales, b_scales: 4 scale bytes each (UE4M3: the sign bit is ignored; 0x7F / 0xFF are NaN).
    """
    a_codes, b_codes = [int(x) for x in a_codes], [int(x) for x in b_codes]
    a_scales, b_scales = [int(x) & 0x7F for x in a_scales], [int(x) & 0x7F for x in b_scales]
    if len(a_codes) != STEP_K or len(b_codes) != STEP_K or len(a_scales) != _GROUPS or len(b_scales) != _GROUPS:
        raise ValueError("a step takes 64 codes and 4 scale bytes per operand")
    c = float(np.float32(c))
    if math.isnan(c) or 0x7F in a_scales or 0x7F in b_scales:
        return np.float32(np.nan)
    if math.isinf(c):
        raise ValueError("an infinite C is outside the model")

    def scale(byte: int) -> tuple[Fraction, int]:
        ef, mant = byte >> 3, byte & 7
        if ef == 0:
            return Fraction(mant, 512), -6
        return Fraction(8 + mant, 8) * Fraction(2) ** (ef - 7), ef - 7

    addends, exps = [], []
    for g in range(_GROUPS):
        (sa, ea), (sb, eb) = scale(a_scales[g]), scale(b_scales[g])
        prods = [_e2m1_value(a_codes[16 * g + i]) * _e2m1_value(b_codes[16 * g + i]) for i in range(16)]
        if sa == 0 or sb == 0 or not any(prods):
            addends.append(Fraction(0))
            exps.append(E_ZERO)
        else:
            addends.append(sum(prods, Fraction(0)) * sa * sb)
            exps.append(ea + eb)
    if c != 0:
        addends.append(Fraction(c))
        exps.append(max(math.frexp(c)[1] - 1, -126))
    else:
        exps.append(E_ZERO)
    unit = Fraction(2) ** (max(exps) - WINDOW)
    total = sum((math.trunc(t / unit) * unit for t in addends), Fraction(0))
    return np.float32(_fp32_rz(total))


# ---------------------------------------------------------------------------------------------------------------
# the epilogue
# ---------------------------------------------------------------------------------------------------------------

def _fma_f32(a, b, c) -> np.ndarray:
    """fp32 fused multiply-add ``RN(a * b + c)`` (one rounding, IEEE special values) of float32 arrays, vectorized.

    The product is exact in float64 (24 + 24 significant bits, exponents far inside float64's range). The sum's
    float64 rounding ``s`` and its exact error ``err`` come from Knuth's TwoSum (no overflow at these magnitudes); where
    ``err`` is not 0 and ``s`` is even, ``s`` is replaced by its float64 neighbour toward the exact sum, which rounds the
    sum to odd. Rounding a round-to-odd float64 (53 bits) to fp32 (at most 24) gives the correctly rounded fp32 of the
    exact sum (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
    odd", IEEE TC 2008: 53 >= 24 + 2)."""
    a64, b64, c64 = (np.asarray(x, np.float32).astype(np.float64) for x in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64
        s = p + c64
        bp = s - p
        err = (p - (s - bp)) + (c64 - bp)
        finite = np.isfinite(s)
        odd = (np.where(finite, s, 0.0).view(np.int64) & 1) == 1
        fix = finite & (err != 0) & ~odd
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def sm100_epilogue(acc: np.ndarray, alpha, *, c=None, bias=None) -> np.ndarray:
    """The fp32 result of the CUTLASS SM100 grouped GEMM's epilogue (SPEC 12.7), before the cast to the output dtype.

    Without a bias: ``z = RN(alpha * acc)`` (LinearCombination's multiply node); with a bias: ``z = RN(alpha * acc +
    bias)``, one fused multiply-add (the bias EVT's ``homogeneous_multiply_add``). Then ``y = RN(beta * C + z)`` in one
    fused multiply-add: with C (accumulating, beta = 1) ``RN(C + z)``; without C and without a bias (beta = 0, C read
    as 0) ``RN(0 + z)``, so a -0 becomes +0; with a bias and no C, ``y = z``.

    Args:
        acc: float32 [M, N] accumulator (:func:`sm100_sum`).
        alpha: fp32 scalar, or a float32 array broadcasting to [M, N] (one alpha per output row or column, SPEC 12.8).
        c: optional float32 [M, N] C (beta = 1).
        bias: optional float32 [N] (a bfloat16 bias widened exactly).
    """
    al = np.asarray(alpha, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        if bias is None:
            z = (al * acc).astype(np.float32)
        else:
            z = _fma_f32(al, acc, np.asarray(bias, np.float32)[None, :])
        if c is not None:
            return (np.asarray(c, np.float32) + z).astype(np.float32)
        if bias is None:
            return (z + np.float32(0.0)).astype(np.float32)
        return z
