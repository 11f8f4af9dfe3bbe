"""Exact arithmetic for the GEMM models (SPEC 12.3): exact integer dot products and correctly rounded
conversion of exact dyadic values (integer * 2**e) to float32 / bfloat16.

Nothing here rounds silently. float64 BLAS is used only on integer operands whose every partial sum
is an integer of at most 53 bits, so any summation order is exact. Rounding first tries a float64
estimate with a proven error bound and accepts it only where that bound cannot cross a rounding
boundary of the target format (Ziv's strategy); the other elements are rounded from Python integers.
"""

from __future__ import annotations

import numpy as np

__all__ = ["exact_int_matmul", "f32_to_int_exp", "round_certified", "round_dyadic"]

_FORMATS = {  # precision p (significand bits incl. the leading one), min normal exponent, max exponent
    "float32": (24, -126, 127),
    "bfloat16": (8, -126, 127),
}


def _bits(a: np.ndarray) -> int:
    return int(np.abs(a).max(initial=0)).bit_length()


def _limbs(a: np.ndarray, width: int, count: int) -> list[np.ndarray]:
    """Signed int64 array -> ``count`` float64 limbs of ``width`` bits, least significant first."""
    sign = np.where(a < 0, -1, 1)
    mag = np.abs(a)
    out = []
    for _ in range(count):
        out.append((sign * (mag & ((1 << width) - 1))).astype(np.float64))
        mag = mag >> width
    return out


def _trailing_zeros(a: np.ndarray) -> int:
    """Largest t with every entry of ``a`` divisible by 2**t (0 for an all-zero array)."""
    nz = np.abs(a[a != 0])
    if nz.size == 0:
        return 0
    return int(np.min(nz & -nz)).bit_length() - 1


def exact_int_matmul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """Exact ``a @ b.T`` for int64 matrices a [M, K], b [N, K] (|entries| < 2**40).

    Returns ``(s, shift)`` with the exact result equal to ``s * 2**shift``; ``s`` is int64 when it fits
    in 62 bits, else an object array of Python ints. Common powers of two are divided out first; then the
    operands are split into limbs of widths wa, wb with wa + wb + bitlen(K) <= 53, so each limb matmul
    has integer partial sums of at most 53 bits and float64 BLAS computes it exactly in any order.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ta, tb = _trailing_zeros(a), _trailing_zeros(b)
    a, b = a >> ta, b >> tb
    kbits = int(a.shape[1]).bit_length()
    budget = 53 - kbits
    if budget < 2:
        raise ValueError("K too large for the exact matmul")
    ba, bb = max(_bits(a), 1), max(_bits(b), 1)
    # choose limb widths minimizing the number of limb matmuls
    best = None
    for wa in range(1, budget):
        wb = budget - wa
        na, nb = -(-ba // wa), -(-bb // wb)
        if best is None or na * nb < best[0]:
            best = (na * nb, wa, wb, na, nb)
    _, wa, wb, na, nb = best
    al, bl = _limbs(a, wa, na), _limbs(b, wb, nb)
    fits = ba + bb + kbits <= 62
    s = np.zeros((a.shape[0], b.shape[0]), dtype=np.int64 if fits else object)
    for i in range(na):
        for j in range(nb):
            part = (al[i] @ bl[j].T).astype(np.int64)  # exact integer below 2**53
            if not fits:
                part = part.astype(object)
            s = s + (part << (i * wa + j * wb))
    return s, ta + tb


def f32_to_int_exp(x) -> tuple[np.ndarray, np.ndarray]:
    """Finite float32 x -> (m, e) int64 arrays with x == m * 2**e exactly, |m| < 2**24."""
    f, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(f, 24).astype(np.int64), e.astype(np.int64) - 24


def _round_f64(v: np.ndarray, fmt: str) -> np.ndarray:
    """Round float64 values to ``fmt`` (RNE, gradual underflow, overflow to inf), returned as float64."""
    p, emin, emax = _FORMATS[fmt]
    _, e = np.frexp(v)  # |v| in [2**(e-1), 2**e)
    lead = np.maximum(e.astype(np.int64) - 1, emin)
    q = np.ldexp(np.rint(np.ldexp(v, (p - 1) - lead)), lead - (p - 1))  # exact float64 ops
    return np.where(np.abs(q) >= np.ldexp(1.0, emax + 1), np.copysign(np.inf, v), q)


def round_certified(v: np.ndarray, err: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Round an estimate ``v`` of exact values x with |v - x| <= err to ``fmt``.

    Returns ``(r, ok)``: where ``ok``, r is provably the correctly rounded (RNE) value of x, because the
    whole interval [v - err, v + err] lies strictly inside r's rounding interval.
    """
    p, emin, emax = _FORMATS[fmt]
    r = _round_f64(v, fmt)
    a = np.abs(r)
    _, e = np.frexp(a)
    # frexp(0) gives e = 0: a zero result sits in the subnormal range, whose spacing is 2**(emin - p + 1)
    lead = np.where(a == 0, emin, np.maximum(e.astype(np.int64) - 1, emin))
    ulp_up = np.ldexp(1.0, lead - (p - 1))
    # below a power of two (normal range) the spacing halves
    pow2 = (a == np.ldexp(1.0, lead)) & (lead > emin)
    ulp_down = np.where(pow2, ulp_up / 2, ulp_up)
    d = np.abs(v) - a  # signed distance from r, away from zero positive
    ok = np.isfinite(r) & (d + err < ulp_up / 2) & (-d + err < ulp_down / 2)
    return r, ok


_bit_length = np.frompyfunc(int.bit_length, 1, 1)


def round_dyadic(n, unit_exp: int, fmt: str) -> np.ndarray:
    """Round the exact values ``n * 2**unit_exp`` (n: array of Python ints) to ``fmt`` once, RNE with
    gradual underflow and overflow to +-inf. Returns float64 values exactly representable in ``fmt``."""
    p, emin, emax = _FORMATS[fmt]
    n = np.asarray(n, dtype=object)
    if n.size == 0:
        return np.zeros(n.shape, np.float64)
    neg = (n < 0).astype(bool)
    mag = np.where(neg, -n, n)
    length = _bit_length(mag).astype(np.int64)
    lead_exp = length - 1 + unit_exp
    keep = np.where(lead_exp >= emin, p, p - (emin - lead_exp))
    shift = np.maximum(length - keep, 0)
    sh = shift.astype(object)
    q = mag >> sh
    rem = mag - (q << sh)
    half = np.left_shift(np.ones(n.shape, dtype=object), np.maximum(shift - 1, 0).astype(object))
    odd = (q & 1).astype(bool)
    up = (shift > 0) & ((rem > half).astype(bool) | ((rem == half).astype(bool) & odd))
    q = q + up.astype(np.int64).astype(object)
    val = np.ldexp(q.astype(np.float64), (shift + unit_exp).astype(np.int64))
    val = np.where(val >= np.ldexp(1.0, emax + 1), np.inf, val)
    return np.where(neg, -val, val)
