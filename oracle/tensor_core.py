"""Bit-exact model of Hopper's wgmma fp32 accumulation over dequantized NVFP4 operands (SPEC 12.6).

One wgmma k16 step per 16-block, in K order, each step adding 16 exact products to the fp32 accumulator the way
the tensor core does (measured on H100, SPEC 12.6): every addend is truncated toward zero at 2^(E - 25), where E is
the largest exponent among the addends as the hardware sees it, the truncated addends are summed exactly, and the
sum is truncated (round toward zero) to fp32. The model presents the operands as ``value * 2^-14`` in bf16 or
fp16; a subnormal operand counts at its format's minimum normal exponent, which is how fp16 operands at that scale
break the SPEC 12.4 bound and bf16 operands (always normal here) do not. The device's fast kernel presents the fp16
values themselves (``|value| >= 2^-10``, all normal); with normal operands the model commutes with the common 2^-14
scaling, so ``operands="bf16"`` gives its bits (SPEC 12.6).
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from .dequantize import nan_scale_rows, scaled_ints
from .planes import QuantizedPlane

__all__ = ["OPERAND_FORMATS", "tensor_core_sum", "wgmma_k16_step"]

# SPEC 12.6: minimum normal exponent of each operand format (a subnormal operand counts at this exponent)
OPERAND_FORMATS = {"bf16": -126, "fp16": -14}
_PRESENT_EXP = -14  # operands are presented to the tensor core as value * 2^-14 (products carry 2^-28)
_WINDOW = 25  # addends are truncated at 2^(E - 25)
_FP32_EMIN = -126  # fp32's least normal exponent: e(C) of a subnormal accumulator (SPEC 12.6 step 2)
_FP32_BITS = 24
_UNIT_EXP = -20  # the model's integers count units of 2^-20 (true scale): products of two 2^-10 operand units
_PRODUCT_SHIFT = 2 * _PRESENT_EXP  # presented products = true products * 2^-28


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bit length of non-negative int64 values (0 for 0), vectorized: the binary exponent of x as a float64 (its
    exponent field; 0 for 0), one less where that conversion rounded x up to the next power of two (possible from
    2^53 on)."""
    e = np.maximum((x.astype(np.float64).view(np.int64) >> 52) - 1022, 0)
    return e - (((x >> np.maximum(e - 1, 0)) == 0) & (x > 0))


def _exponent_seen(v: np.ndarray, emin: int) -> np.ndarray:
    """Exponent the tensor core uses for an operand v * 2^-10 presented as v * 2^-24: floor(log2), at least emin."""
    e = _bit_length(np.abs(v)) - 1 - 10 + _PRESENT_EXP
    return np.maximum(e, emin)


def _trailing_zeros(x: np.ndarray) -> np.ndarray:
    """Trailing zero bits of non-negative int64 values (x = 0: _NO_TZ)."""
    return np.where(x > 0, _bit_length(x & -x) - 1, _NO_TZ)


_NO_TZ = 1 << 20  # trailing zeros of 0 (above any shift): a zero product is never truncated
_NO_ADDEND16 = -16000  # exponent of an absent addend: below any real one (within +-64); two still fit in int16
_CHUNK_ELEMS = 1 << 25  # rows of A per chunk: about this many M x N x K elements (the block dot products: 16 MB)


def tensor_core_sum(a_plane: QuantizedPlane, b_plane: QuantizedPlane, *, operands: str = "bf16") -> np.ndarray:
    """The fp32 accumulator [M, N] of A . B^T as Hopper's wgmma computes it (SPEC 12.6).

    Args:
        a_plane, b_plane: K-major planes A [M, K], B [N, K] (same K, a multiple of 16).
        operands: "bf16" (the device kernels' choice) or "fp16": the format the dequantized values (times 2^-14)
            are presented in.
    Returns float32 [M, N] in the operands' true scale (the device kernels' accumulator times 2^28). Rows or
    columns with a NaN scale give NaN.
    """
    if operands not in OPERAND_FORMATS:
        raise ValueError(f"operands must be one of {sorted(OPERAND_FORMATS)}, got {operands!r}")
    if a_plane.cols != b_plane.cols:
        raise ValueError(f"K mismatch: {a_plane.cols} vs {b_plane.cols}")
    emin = OPERAND_FORMATS[operands]
    ia, ib = scaled_ints(a_plane), scaled_ints(b_plane)  # units of 2^-10 (SPEC 12.3)
    m, k = ia.shape
    n = ib.shape[0]
    if k and int(np.abs(ia).max(initial=0)) * int(np.abs(ib).max(initial=0)) * k >= 2**62:
        raise ValueError("K too large for the int64 model")
    acc = np.zeros((m, n), np.float64)  # units of 2^-20 (true scale)
    ta, tb = _Operand(ia, emin), _Operand(ib, emin)
    rows = max(1, _CHUNK_ELEMS // max(1, n * k))
    for r0 in range(0, m, rows):  # rows of A are independent
        acc[r0:r0 + rows] = _accumulate(ta.rows(slice(r0, r0 + rows)), tb)
    out = np.ldexp(acc, _UNIT_EXP).astype(np.float32)  # exact: acc has at most 24 bits
    return np.where(nan_scale_rows(a_plane)[:, None] | nan_scale_rows(b_plane)[None, :], np.float32(np.nan), out)


class _Operand:
    """What _accumulate needs of one operand's integers i [R, K] (units of 2^-10), per 16-block: the exponents the
    tensor core sees (int16; an operand of 0: _NO_ADDEND16), the fewest trailing zero bits of the row's nonzero
    values, the values as float64, magnitudes and signs."""

    def __init__(self, i: np.ndarray, emin: int, _parts=None):
        if _parts is not None:
            self.e, self.emax, self.tz, self.f, self.mag, self.sign = _parts
            return
        r, k = i.shape
        self.e = np.where(i != 0, _exponent_seen(i, emin), _NO_ADDEND16).astype(np.int16).reshape(r, k // 16, 16)
        self.emax = self.e.max(axis=2).astype(np.int64)
        self.mag, self.sign = np.abs(i), np.sign(i)
        self.tz = _trailing_zeros(self.mag).reshape(r, k // 16, 16).min(axis=2)
        self.f = i.astype(np.float64).reshape(r, k // 16, 16)

    def rows(self, sl: slice) -> _Operand:
        """The same for rows ``sl``."""
        return _Operand(None, 0, (self.e[sl], self.emax[sl], self.tz[sl], self.f[sl], self.mag[sl], self.sign[sl]))


def _exponent_f64(x: np.ndarray) -> np.ndarray:
    """floor(log2 |x|) of float64 values that are zero or at least 1 in magnitude (their exponent field; 0 gives
    -1023, which callers mask)."""
    return ((x.view(np.int64) >> 52) & 0x7FF) - 1023


_RZ24 = np.int64(-(1 << 29))  # keeps a float64's sign, exponent and 24 leading significand bits: fp32's RZ


def _accumulate(a: _Operand, b: _Operand) -> np.ndarray:
    """The SPEC 12.6 accumulator [M, N] (units of 2^-20, float64 holding integers) of operands A [M, K], B [N, K].

    Step j needs, per output, E (the largest addend exponent), the truncation unit 2^shift it implies, and the sum
    of the block's products each truncated toward zero to a multiple of 2^shift. A product whose trailing zero bits
    (those of its two factors added) reach the shift is kept whole. So where every factor pair of the block has
    enough trailing zeros (checked with each row's fewest over the block, a lower bound), the truncated sum is the
    plain dot product, computed for all blocks at once in float64 (exact: 16 products of at most 2^43 units); only
    the other outputs sum their truncated products one by one. The accumulator is truncated and the sum rounded to
    fp32 per step, as SPEC 12.6 states. Both stay exact in float64: after the truncation every addend is a multiple
    of 2^shift below 2^(shift + 26) (E is the largest addend's exponent and 2^shift its 2^(E - 25); where the
    shift is clamped at 0, integers below 2^26), so the 17 addends' sum has at most 31 significant bits; rounding it
    toward zero to 24 bits clears the low significand bits of its float64 encoding (sign and magnitude, so clearing
    rounds toward zero)."""
    m, nblk = a.tz.shape
    n = b.tz.shape[0]
    # the exact block dot products [blocks, M, N], units of 2^-20
    dots = np.matmul(a.f.transpose(1, 0, 2), b.f.transpose(1, 2, 0))
    acc = np.zeros((m, n), np.float64)
    for j in range(nblk):
        # E in the presented scale: products carry 2^-28 (two operands times 2^-14). First with an upper bound of
        # the products' part, the sum of the two rows' largest exponents in the block (ub): where neither a product
        # nor the accumulator has a bit below the truncation unit ub implies, the exact E cannot change the step.
        nonzero = acc != 0
        acc_exp = _exponent_f64(acc)
        e_acc = np.where(nonzero, acc_exp + _UNIT_EXP + _PRODUCT_SHIFT, _NO_ADDEND16)
        ub = a.emax[:, j, None] + b.emax[None, :, j]
        # truncation unit 2^(E - 25) presented = 2^(E - 25 + 28) true = 2^(E + 23) units of 2^-20
        shift = np.maximum(np.maximum(ub, e_acc) - _WINDOW - _PRODUCT_SHIFT - _UNIT_EXP, 0)
        tz_prod = a.tz[:, j, None] + b.tz[None, :, j]  # at most the trailing zeros of any product of the block
        tz_acc = np.where(nonzero, acc_exp - (_FP32_BITS - 1), _NO_TZ)  # acc has at most 24 significant bits
        # the outputs where a product or the accumulator may lose bits (shift from ub: an upper bound; with the
        # exact E the shift can only drop, so no other output loses a bit)
        mi, ni = np.nonzero((tz_prod < shift) | (tz_acc < shift))
        kept = dots[j]  # the block's sum where no product loses a bit
        if mi.size:  # E from the block's products (max of e(a) + e(b); int16, sentinels low)
            e_prod = (a.e[mi, j] + b.e[ni, j]).max(axis=1).astype(np.int64)
            sh = np.maximum(np.maximum(e_prod, e_acc[mi, ni]) - _WINDOW - _PRODUCT_SHIFT - _UNIT_EXP, 0)
            cut = tz_prod[mi, ni] < sh
            if cut.any():  # |product| >> shift, signed, summed, << shift (each truncated toward zero)
                blk = slice(16 * j, 16 * j + 16)
                ci, cn, csh = mi[cut], ni[cut], sh[cut]
                units = (a.mag[ci, blk] * b.mag[cn, blk]) >> csh[:, None]
                kept = kept.copy()
                kept[ci, cn] = ((units * a.sign[ci, blk] * b.sign[cn, blk]).sum(axis=1) << csh).astype(np.float64)
            low = tz_acc[mi, ni] < sh  # accumulators with a bit below the truncation unit
            if low.any():  # toward zero to a multiple of 2^shift (exact scalings by powers of two)
                li, ln = mi[low], ni[low]
                unit = np.ldexp(1.0, sh[low].astype(np.int32))
                acc[li, ln] = np.trunc(acc[li, ln] / unit) * unit
        acc = ((kept + acc).view(np.int64) & _RZ24).view(np.float64)
    return acc


def _exponent(x: float) -> int:
    """floor(log2 |x|) of a nonzero float (exact, via frexp)."""
    return math.frexp(x)[1] - 1


def _fp32_rz(v: Fraction) -> Fraction:
    """v rounded toward zero to fp32: 24 significant bits, on the grid 2^-149 below 2^-126 (subnormal); v is below
    fp32's overflow threshold."""
    if v == 0:
        return v
    mag = abs(v)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    unit = Fraction(2) ** max(e - 23, -149)
    return (mag // unit) * unit * (1 if v > 0 else -1)


def wgmma_k16_step(c: float, a, b, operands: str = "bf16") -> np.float32:
    """One wgmma k16 step, D = C + sum a_k b_k, exactly as SPEC 12.6 states (scalar reference, exact arithmetic).

    Args:
        c: the fp32 accumulator C.
        a, b: 16 operand values each, exactly representable in ``operands`` ("bf16" or "fp16").
    """
    if operands not in OPERAND_FORMATS:
        raise ValueError(f"operands must be one of {sorted(OPERAND_FORMATS)}, got {operands!r}")
    cast = ml_dtypes.bfloat16 if operands == "bf16" else np.float16
    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) != 16 or len(b) != 16:
        raise ValueError("a and b must have 16 values each")
    for x in a + b:
        if float(cast(x)) != x:
            raise ValueError(f"{x!r} is not a {operands} number")
    c = float(np.float32(c))
    emin = OPERAND_FORMATS[operands]
    terms, exps = [], []
    for x, y in zip(a, b, strict=True):
        if x != 0 and y != 0:
            terms.append(Fraction(x) * Fraction(y))
            exps.append(max(_exponent(x), emin) + max(_exponent(y), emin))
    if c != 0:
        terms.append(Fraction(c))
        exps.append(max(_exponent(c), _FP32_EMIN))  # step 2: a subnormal C counts as fp32's least normal exponent
    if not terms:
        return np.float32(c + 0.0)
    unit = Fraction(2) ** (max(exps) - _WINDOW)
    total = sum(((abs(t) // unit) * unit * (1 if t > 0 else -1) for t in terms), Fraction(0))
    return np.float32(float(_fp32_rz(total)))
