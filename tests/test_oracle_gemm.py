"""SPEC 12: GEMM alpha, sequential model, exact model (vs fractions.Fraction) and the error bound."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from conformance import independent as ind
from oracle.exact import exact_int_matmul, round_certified, round_dyadic
from oracle.fp4_numpy import decode_e2m1, decode_e4m3
from oracle.gemm import NEAR_OVERFLOW
from oracle.planes import QuantizedPlane


def _fraction_round(v: Fraction, dtype) -> float:
    """Independent RNE of an exact rational to float32/bfloat16: take the finite neighbours of a nearby
    value (by bit pattern) and keep the closest by exact distance, the even bit pattern on a tie."""
    ut = np.uint32 if dtype == np.float32 else np.uint16
    maxf = float(ml_dtypes.finfo(dtype).max)
    f = np.array(float(v), np.float64).astype(np.float32).astype(dtype)
    if not np.isfinite(f):
        f = np.array(np.copysign(maxf, float(v)), dtype)
    bits = int(f.view(ut))
    cands = []
    for d in range(-2, 3):
        c = np.array(max(bits + d, 0) if bits < (1 << (8 * np.dtype(ut).itemsize - 1)) else bits + d, ut).view(dtype)
        if np.isfinite(c):
            cands.append(c)
    cands += [np.array(0.0, dtype), np.array(-0.0, dtype)]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(c.view(ut)) & 1))
    top = Fraction(maxf)
    half_ulp_at_max = (Fraction(2) ** (127 - (23 if dtype == np.float32 else 7))) / 2
    if abs(v) >= top + half_ulp_at_max:
        return float(np.copysign(np.inf, float(v)))
    return float(best)


def _fraction_gemm(a, b, alpha, c=None, bias=None, out=np.float32):
    qa, qb = decode_e2m1(a.codes()), decode_e2m1(b.codes())
    sa, sb = decode_e4m3(a.scales), decode_e4m3(b.scales)
    res = np.zeros((a.rows, b.rows), np.float64)
    for i in range(a.rows):
        for j in range(b.rows):
            s = sum(
                Fraction(float(sa[i, k // 16])) * Fraction(float(sb[j, k // 16])) * Fraction(float(qa[i, k])) * Fraction(float(qb[j, k]))
                for k in range(a.cols)
            )
            v = Fraction(float(alpha)) * s
            if c is not None:
                v += Fraction(float(c[i, j]))
            if bias is not None:
                v += Fraction(float(bias[j]))
            res[i, j] = _fraction_round(v, out)
    return res


def _planes(rng, m, n, k, spread=20):
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-spread, spread, (m, k // 16)).repeat(16, 1))).astype(np.float32)
    w = (rng.standard_normal((n, k)) * np.exp2(rng.integers(-spread, spread, (n, k // 16)).repeat(16, 1))).astype(np.float32)
    return oracle.quantize(x).row, oracle.quantize(w).row


def test_alpha_is_left_to_right_hand_worked():
    """SPEC 12.1: alpha = fp32(fp32(A * B) * fp32(1/7225344)), left to right. With amaxes 3 and 7: A * B = 21 exactly,
    and the exact product 21 * fp32(1/7225344), rounded to nearest by fractions (independently of numpy), has bits
    0x36430C31. Associating the other way, 3 * fp32(7 * fp32(1/7225344)), rounds twice and gives 0x36430C32."""
    from conformance.independent import round_fraction

    rcp = np.float32(1.0 / 7225344.0)
    want = np.float32(round_fraction(21 * Fraction(float(rcp)), "float32"))
    assert want.view(np.uint32) == 0x36430C31
    other = np.float32(np.float32(3.0) * np.float32(np.float32(7.0) * rcp))
    assert other.view(np.uint32) == 0x36430C32  # premise: the order matters for these amaxes
    a = oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), 3.0, (1, 16))
    b = oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), 7.0, (1, 16))
    assert np.float32(oracle.gemm_alpha(a, b)).view(np.uint32) == 0x36430C31


def test_alpha_rule():
    a = oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), 3.0, (1, 16))
    b = oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), 5.0, (1, 16))
    assert oracle.gemm_alpha(a, b) == np.float32(np.float32(15.0) * np.float32(1 / 7225344))
    b.rule = "torchao"
    with pytest.raises(ValueError):
        oracle.gemm_alpha(a, b)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_exact_model_equals_fractions(seed, out):
    rng = np.random.default_rng(seed)
    a, b = _planes(rng, 3, 4, 48)
    c = rng.standard_normal((3, 4)).astype(np.float32) * 1e-3
    bias = rng.standard_normal(4).astype(np.float32)
    alpha = oracle.gemm_alpha(a, b)
    dt = np.float32 if out == "float32" else ml_dtypes.bfloat16
    for kwargs in ({}, {"accumulate": c}, {"bias": bias}, {"accumulate": c, "bias": bias}):
        got = oracle.gemm(a, b, model="exact", out_dtype=out, **kwargs).astype(np.float64)
        ref = _fraction_gemm(a, b, alpha, kwargs.get("accumulate"), kwargs.get("bias"), dt)
        assert np.array_equal(got, ref), kwargs


def test_exact_fallback_path_equals_fractions():
    """Force every element through the integer rounding path (certification switched off)."""
    rng = np.random.default_rng(11)
    a, b = _planes(rng, 3, 3, 32)
    import sys

    g = sys.modules["oracle.gemm"]

    orig = g.round_certified
    g.round_certified = lambda v, err, fmt: (np.zeros_like(v), np.zeros(v.shape, bool))
    try:
        got = oracle.gemm(a, b, model="exact", out_dtype="float32", bias=np.ones(3, np.float32)).astype(np.float64)
    finally:
        g.round_certified = orig
    ref = _fraction_gemm(a, b, oracle.gemm_alpha(a, b), None, np.ones(3, np.float32), np.float32)
    assert np.array_equal(got, ref)


def test_round_dyadic_ties_and_subnormals():
    # 2**25 + 2 at unit 2**-1 is 2**24 + 1: a tie between 2**24 and 2**24 + 2 -> even (2**24)
    n = np.array([2**25 + 2, 2**25 + 6, 3, 1, -3], dtype=object)
    assert round_dyadic(n, -1, "float32").tolist() == [2.0**24, 2.0**24 + 4, 1.5, 0.5, -1.5]
    # 3 * 2**-151 = 1.5 smallest subnormals -> tie -> 2 * 2**-149 (even); 2**-151 -> 0
    assert round_dyadic(np.array([3, 1], dtype=object), -150, "float32").tolist() == [2.0**-148, 0.0]
    assert round_dyadic(np.array([1], dtype=object), 128, "float32").tolist() == [np.inf]


@given(st.integers(-(2**60), 2**60), st.integers(-170, 40))
@settings(max_examples=300, deadline=None)
def test_round_certified_agrees_with_dyadic(n, e):
    v = np.array([np.ldexp(float(n), e)])
    err = np.abs(v) * 2.0**-50
    r, ok = round_certified(v, err, "float32")
    exact = round_dyadic(np.array([n], dtype=object), e, "float32")
    if ok[0]:
        assert r[0] == exact[0]


def test_exact_int_matmul_large_values():
    rng = np.random.default_rng(0)
    a = rng.integers(-(2**30), 2**30, (5, 70))
    b = rng.integers(-(2**30), 2**30, (4, 70))
    s, shift = exact_int_matmul(a, b)
    ref = np.array([[sum(int(a[i, k]) * int(b[j, k]) for k in range(70)) for j in range(4)] for i in range(5)], dtype=object)
    assert np.array_equal(np.asarray(s, dtype=object) * (2**shift), ref)


@pytest.mark.parametrize("out", ["float32", "bfloat16"])
@pytest.mark.parametrize("seed", range(3))
def test_sequential_within_bound(seed, out):
    rng = np.random.default_rng(100 + seed)
    a, b = _planes(rng, 16, 12, 256, spread=6)
    c = rng.standard_normal((16, 12)).astype(np.float32)
    for kwargs in ({}, {"accumulate": c}, {"bias": c[0]}):
        ys = oracle.gemm(a, b, model="sequential", out_dtype=out, **kwargs)
        ye = oracle.gemm(a, b, model="exact", out_dtype=out, **kwargs)
        bound = oracle.gemm_error_bound(a, b, out_dtype=out, **kwargs)
        assert oracle.within_bound(ys, ye, bound).all()


def test_bound_catches_a_wrong_result():
    rng = np.random.default_rng(3)
    a, b = _planes(rng, 8, 8, 128, spread=3)
    ye = oracle.gemm(a, b, model="exact", out_dtype="float32")
    bound = oracle.gemm_error_bound(a, b, out_dtype="float32")
    wrong = ye.astype(np.float64) * (1 + 2.0**-10)  # a 2**-10 relative error is far outside
    assert not oracle.within_bound(wrong, ye, bound).all()


def test_sequential_hand_case():
    """Two blocks: A row = [1]*16 | [2]*16 with scale bytes, B row likewise; computed by hand."""
    ca = np.array([[0x2] * 16 + [0x4] * 16], np.uint8)  # 1.0 and 2.0
    cb = np.array([[0x1] * 16 + [0xF] * 16], np.uint8)  # 0.5 and -6.0
    from oracle.fp4_numpy import pack_fp4

    a = oracle.QuantizedPlane(pack_fp4(ca), np.array([[0x38, 0x40]], np.uint8), 2688.0, (1, 32))  # scales 1, 2
    b = oracle.QuantizedPlane(pack_fp4(cb), np.array([[0x38, 0x30]], np.uint8), 2688.0, (1, 32))  # scales 1, 0.5
    # block 0: 1*1 * 16*(1*0.5) = 8 ; block 1: 2*0.5 * 16*(2*-6) = -192 ; sum -184 ; alpha = 1 for amax 2688
    alpha = oracle.gemm_alpha(a, b)
    assert alpha == np.float32(np.float32(2688.0 * 2688.0) * np.float32(1 / 7225344))
    y = oracle.gemm(a, b, model="sequential", out_dtype="float32", alpha=1.0)
    assert y.tolist() == [[-184.0]]
    assert oracle.gemm(a, b, model="exact", out_dtype="float32", alpha=1.0).tolist() == [[-184.0]]


@pytest.mark.parametrize("model", ["sequential", "exact", "tensor_core", "sm100"])
def test_gemm_alpha_per_row_and_column(model):
    """An alpha array (SPEC 12.8's shapes) scales each output row / column / element by its own value: with powers of
    two, which commute with every rounding away from the subnormals and overflow, Y(alpha = 2^e) = 2^e * Y(alpha = 1)
    exactly, in every model."""
    rng = np.random.default_rng(5)
    a, b = _planes(rng, 6, 5, 64)
    y1 = oracle.gemm(a, b, model=model, out_dtype="float32", alpha=1.0)
    er, ec = rng.integers(-6, 7, (6, 1)), rng.integers(-6, 7, (1, 5))
    for e in (er, ec, er + ec):
        y = oracle.gemm(a, b, model=model, out_dtype="float32", alpha=np.exp2(e).astype(np.float32))
        assert np.array_equal(y, (y1 * np.exp2(e)).astype(np.float32)), e
    assert np.array_equal(oracle.gemm(a, b, model=model, out_dtype="float32", alpha=np.float32([1.0])), y1)
    # a row-scaled A (SPEC 5.7, 12.8): its per-row alpha times 2^e per column, given as an [M, N] array
    ar = oracle.quantize((rng.standard_normal((6, 64)) * np.exp2(np.arange(6))[:, None]).astype(np.float32),
                         row_scaled=True).row
    base = oracle.gemm_alpha(ar, b)
    y0 = oracle.gemm(ar, b, model=model, out_dtype="float32")
    y = oracle.gemm(ar, b, model=model, out_dtype="float32", alpha=(base * np.exp2(ec)).astype(np.float32))
    assert base.shape == (6, 1) and np.array_equal(y, (y0 * np.exp2(ec)).astype(np.float32))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(model="fast"), ValueError, "model must be"),
        (dict(out_dtype="float16"), ValueError, "out_dtype must be one of"),
        (dict(accumulate=np.zeros((2, 3), np.float64)), TypeError, "accumulate must be float32"),
        # C is [M, N] = (2, 3) and the bias [N] = (3,) (SPEC 12.2): shapes that would broadcast are refused too
        (dict(accumulate=np.zeros((2, 2), np.float32)), ValueError, r"accumulate must have shape \(2, 3\)"),
        (dict(accumulate=np.zeros((1, 3), np.float32)), ValueError, r"accumulate must have shape \(2, 3\)"),
        (dict(accumulate=np.zeros((2, 1), np.float32)), ValueError, r"accumulate must have shape \(2, 3\)"),
        (dict(alpha=np.ones(3)), ValueError, "alpha must be a single real number"),
        (dict(alpha=np.ones((3, 1), np.float32)), ValueError, r"\[M, 1\], \[1, N\] or \[M, N\]"),
        (dict(alpha=np.ones((2, 3), complex)), ValueError, "alpha must be a single real number"),
        (dict(bias=np.zeros(5, np.float32)), ValueError, r"bias must have shape \(3,\)"),
        (dict(bias=np.zeros(1, np.float32)), ValueError, r"bias must have shape \(3,\)"),
        (dict(bias=np.zeros(3, np.int32)), TypeError, "bias must be float32 or bfloat16"),
    ],
)
def test_gemm_bad_args(kwargs, exc, match):
    rng = np.random.default_rng(0)
    a, b = _planes(rng, 2, 3, 32)
    with pytest.raises(exc, match=match):
        oracle.gemm(a, b, **kwargs)


def test_gemm_mismatched_k():
    rng = np.random.default_rng(0)
    a, _ = _planes(rng, 2, 3, 32)
    _, b = _planes(rng, 2, 3, 48)
    with pytest.raises(ValueError):
        oracle.gemm(a, b)


def test_infinite_alpha_only_requires_non_finite():
    """SPEC 12.4: with alpha = Inf the bound is NaN and any non-finite result passes; finite ones fail."""
    rng = np.random.default_rng(4)
    a, b = _planes(rng, 4, 3, 32)
    bound = oracle.gemm_error_bound(a, b, alpha=np.inf, out_dtype="float32")
    assert np.all(np.isnan(bound))
    ye = oracle.gemm(a, b, model="exact", out_dtype="float32", alpha=np.inf)
    assert oracle.within_bound(np.full(ye.shape, np.nan), ye, bound).all()
    assert oracle.within_bound(-ye, ye, bound).all()
    assert not oracle.within_bound(np.zeros(ye.shape), ye, bound).any()


def _plane(codes_per_block, scale_bytes, amax=2688.0):
    from oracle.fp4_numpy import pack_fp4

    codes = np.concatenate([np.asarray(c, np.uint8) for c in codes_per_block])[None, :]
    return oracle.QuantizedPlane(pack_fp4(codes), np.array([scale_bytes], np.uint8), amax, (1, codes.shape[1]))


def test_sequential_model_adds_blocks_in_k_order():
    """SPEC 12.2 hand case: block terms 2**24, 1, -2**24. In K order 2**24 + 1 rounds (tie to even) to 2**24,
    so the result is 0; any other order (or the exact model) gives 1."""
    four, mfour, one, half = [0x6] * 16, [0xE] * 16, [0x2, 0x2] + [0] * 14, [0x1, 0x1] + [0] * 14
    a = _plane([four, one, four], [0x78, 0x38, 0x78])  # scales 256, 1, 256
    b = _plane([four, half, mfour], [0x78, 0x38, 0x78])
    # terms: 256*256*(16*4*4) = 2**24; 1*1*(2*1*0.5) = 1; 256*256*(16*4*-4) = -2**24
    assert oracle.gemm(a, b, model="sequential", out_dtype="float32", alpha=1.0).tolist() == [[0.0]]
    assert oracle.gemm(a, b, model="exact", out_dtype="float32", alpha=1.0).tolist() == [[1.0]]


def test_exact_model_rounds_to_smallest_subnormal():
    """Review case: the exact value 2**-150 + 2**-169 rounds up to 2**-149 (the float64 estimate is 0)."""
    a = _plane([[0x4] + [0] * 15, [0x1] + [0] * 15], [0x78, 0x01])  # 2.0 * 256 and 0.5 * 2**-9
    b = _plane([[0x4] + [0] * 15, [0x1] + [0] * 15], [0x78, 0x01])
    alpha = np.array(0x00080001, np.uint32).view(np.float32)
    c = np.array([[-(2**19 + 1) * 2.0**-131]], np.float32)
    y = oracle.gemm(a, b, model="exact", out_dtype="float32", alpha=alpha, accumulate=c)
    s = Fraction(2**18) + Fraction(1, 2**20)
    v = Fraction(float(alpha)) * s + Fraction(float(c[0, 0]))
    assert v == Fraction(1, 2**150) + Fraction(1, 2**169)
    assert y.tolist() == [[2.0**-149]]


@given(st.integers(1, 2**40), st.integers(-175, 60), st.floats(-0.45, 0.45))
@settings(max_examples=300, deadline=None)
def test_round_certified_with_inexact_estimates(n, e, jitter):
    """An estimate off by up to err must either be declined or round exactly like the exact value."""
    exact = np.ldexp(float(n), e)
    err = abs(exact) * 2.0**-45 + 2.0**-1074
    v = np.array([exact + jitter * err])
    r, ok = round_certified(v, np.array([err]), "float32")
    ref = round_dyadic(np.array([n], dtype=object), e, "float32")
    if ok[0]:
        assert r[0] == ref[0]


def test_bound_allows_overflow_near_the_threshold():
    """Review case: sequential overflows to Inf where the exact value is finite; the bound accepts it (no NaN)."""
    a = _plane([[0x4] + [0] * 15], [0x38])  # 2.0
    b = _plane([[0x2] + [0] * 15], [0x38])  # 1.0
    c = np.array([[-(2.0**127)]], np.float32)
    ys = oracle.gemm(a, b, model="sequential", out_dtype="float32", alpha=2.0**127, accumulate=c)
    ye = oracle.gemm(a, b, model="exact", out_dtype="float32", alpha=2.0**127, accumulate=c)
    bound = oracle.gemm_error_bound(a, b, out_dtype="float32", alpha=2.0**127, accumulate=c)
    assert np.isinf(ys[0, 0]) and np.isfinite(ye[0, 0]) and bound[0, 0] == NEAR_OVERFLOW
    assert oracle.within_bound(ys, ye, bound).all()
    assert not oracle.within_bound(np.full_like(ys, np.nan), ye, bound).any()  # NaN for a finite value still fails


@pytest.mark.parametrize("case", ["sign_lost", "opposite_inf", "inf_minus_inf"])
def test_every_model_within_the_bound_near_overflow(case):
    """SPEC 12.4 near the overflow threshold (B = +inf), on three hand-built elements where every model is right and
    the old rule (the exact value's sign) rejected them: RN(alpha * 3) against C = -RN(alpha * 3) leaves +0 for an
    exact -2^-23 alpha; alpha * 6 rounds to +Inf against C = bias = -FLT_MAX (exact -2^127, finite); and against
    C = -Inf that +Inf gives NaN (exact -Inf)."""
    one = _plane([[0x2] + [0] * 15], [0x38])  # 1.0
    fmax = np.finfo(np.float32).max
    if case == "sign_lost":
        b = _plane([[0x5] + [0] * 15], [0x38])  # 3.0
        alpha = np.float32(np.float32(1 + 2.0**-23) * np.float32(2.0**126))
        kw = dict(alpha=alpha, accumulate=np.array([[-np.float32(alpha * np.float32(3))]], np.float32))
    else:
        b = _plane([[0x7] + [0] * 15], [0x38])  # 6.0
        c = -fmax if case == "opposite_inf" else -np.inf
        kw = dict(alpha=np.float32(2.0**126), accumulate=np.array([[c]], np.float32))
        if case == "opposite_inf":
            kw["bias"] = np.array([-fmax], np.float32)
    ye = oracle.gemm(one, b, model="exact", out_dtype="float32", **kw)
    bound = oracle.gemm_error_bound(one, b, out_dtype="float32", **kw)
    # a finite exact value is marked NEAR_OVERFLOW, an infinite one (C = -Inf) +inf
    assert bound[0, 0] == (np.inf if case == "inf_minus_inf" else NEAR_OVERFLOW)
    got = {m: oracle.gemm(one, b, model=m, out_dtype="float32", **kw) for m in ("sequential", "tensor_core", "sm100")}
    want_sequential = {"sign_lost": 0.0, "opposite_inf": np.inf, "inf_minus_inf": np.nan}[case]
    assert np.array_equal(got["sequential"], [[want_sequential]], equal_nan=True), got["sequential"]
    for m, y in got.items():
        assert oracle.within_bound(y, ye, bound).all(), (m, y, ye)
    if case == "inf_minus_inf":
        assert np.isneginf(ye[0, 0]) and not oracle.within_bound(np.array([[np.inf]]), ye, bound).any()


def test_gemm_rejects_rht_mismatch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    plain = oracle.quantize(x, columnwise=True).col
    rotated = oracle.quantize(x, columnwise=True, rht=True).col
    with pytest.raises(ValueError):
        oracle.gemm(plain, rotated)


def test_gemm_rejects_different_rht_masks():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    a = oracle.quantize(x, rowwise=False, columnwise=True, rht=True).col
    b = oracle.quantize(x, rowwise=False, columnwise=True, rht=True, rht_signs=0x1234).col
    assert a.rht_signs == 0xD7E8 and b.rht_signs == 0x1234
    with pytest.raises(ValueError):
        oracle.gemm(a, b)
    oracle.gemm(a, a)  # same mask: fine


def _exact_values(plane) -> list[list[Fraction]]:
    """The plane's dequantized values E2M1 * E4M3 (no per-tensor factor) as Fractions, decoded with ml_dtypes from
    the raw bytes (SPEC 2.3: element 2i in the low nibble), independently of the oracle's decoders."""
    lo, hi = plane.data & 0xF, plane.data >> 4
    codes = np.stack([lo, hi], axis=2).reshape(plane.data.shape[0], -1)
    vals = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = plane.scales.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return [[Fraction(float(vals[r, k])) * Fraction(float(scales[r, k // 16])) for k in range(codes.shape[1])]
            for r in range(codes.shape[0])]


@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_error_bound_is_the_spec_formula(out):
    """gemm_error_bound equals SPEC 12.4's B, evaluated here in exact rational arithmetic from P = sum |a_k b_k|
    of the raw bytes, up to how the oracle forms P (an fp32 BLAS sum, off by up to (K + 2) 2^-23 either way, then
    inflated by (1 + (K + 2) 2^-23), so within [P, P (1 + (K + 2) 2^-23)^2]) and float64 rounding: a bound made
    looser or tighter by any constant factor fails."""
    rng = np.random.default_rng(11)
    k = 64
    a, b = _planes(rng, 3, 4, k, spread=4)
    c = rng.standard_normal((3, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    alpha = np.float32(0.75)
    va, vb = _exact_values(a), _exact_values(b)
    u_a, u, eta = Fraction(1, 2**23), Fraction(1, 2**24), Fraction(1, 2**150)
    u_o, eta_o = (Fraction(1, 2**24), Fraction(1, 2**150)) if out == "float32" else (Fraction(1, 2**8), Fraction(1, 2**134))
    g = k * u_a / (1 - k * u_a)
    for kwargs in ({}, {"accumulate": c}, {"bias": bias}, {"accumulate": c, "bias": bias}):
        got = oracle.gemm_error_bound(a, b, alpha=alpha, out_dtype=out, **kwargs)
        for i in range(3):
            for j in range(4):
                p = sum(abs(x * y) for x, y in zip(va[i], vb[j], strict=True))

                def formula(p, i=i, j=j, kwargs=kwargs):
                    t = Fraction(float(alpha)) * p * (1 + g)
                    t += abs(Fraction(float(c[i, j]))) if "accumulate" in kwargs else 0
                    t += abs(Fraction(float(bias[j]))) if "bias" in kwargs else 0
                    return (Fraction(float(alpha)) * g * p + 3 * u * t * (1 + u) ** 3 + u_o * t * (1 + u) ** 4
                            + u_o * t + 4 * eta + 3 * eta_o)

                low, high = formula(p), formula(p * (1 + (k + 2) * u_a) ** 2)
                assert p > 0  # premise: the products do not all vanish
                assert low * (1 - Fraction(1, 2**40)) <= Fraction(float(got[i, j])) <= high * (1 + Fraction(1, 2**40)), (kwargs, i, j)


@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_round_certified_certifies_typical_estimates(out):
    """The properties above only check the certified cases; this one checks that certification happens at all:
    on 5,000 random dyadic values with estimate errors of 2^-50 and 2^-45 relative, at least 99% are certified
    and every certified one rounds like round_dyadic (a certifier that declined everything would make the exact
    model fall back to Python integers everywhere: still correct, but the tests above would prove nothing)."""
    rng = np.random.default_rng(0)
    n = rng.integers(-(2**60), 2**60, 5000)
    e = rng.integers(-170, 41, 5000)
    v = np.ldexp(n.astype(np.float64), e)  # exact dyadic values (n rounded to float64 first: still dyadic)
    for rel in (2.0**-50, 2.0**-45):
        r, ok = round_certified(v, np.abs(v) * rel + 2.0**-1074, out)
        assert ok.mean() >= 0.99
        idx = np.flatnonzero(ok)[:500]
        mant, ex = np.frexp(v[idx])
        ref = np.array([round_dyadic(np.array([int(np.ldexp(m, 53))], dtype=object), int(x) - 53, out)[0]
                        for m, x in zip(mant, ex, strict=True)])
        assert np.array_equal(r[idx], ref)


def _one_row(blocks, amax=1.0, rule="te") -> oracle.QuantizedPlane:
    """A 1-row plane (TE rule, amax 1 unless given) of 16-blocks given as (code filling the block or None, lane-0
    code, scale byte)."""
    from oracle.fp4_numpy import pack_fp4

    codes = [c for fill, lane0, _ in blocks for c in ([fill] * 16 if fill is not None else [lane0] + [0] * 15)]
    scales = np.array([[s for _, _, s in blocks]], np.uint8)
    return oracle.QuantizedPlane(pack_fp4(np.array([codes], np.uint8)), scales, np.float32(amax), (1, len(codes)),
                                 rule)


@pytest.mark.parametrize("case", ["above_midpoint", "below_binade_midpoint"])
def test_exact_model_next_to_an_fp32_midpoint(case):
    """SPEC 12.3 where alpha * S + C + bias lies within 2^-31 of a midpoint between fp32 neighbours (2^23 - 1/4), so
    a float64 estimate without its error term rounds to the wrong side; the second case is just below a power of two,
    where the rounding interval below is half the one above. Operands: E2M1 codes with E4M3 scales 2^7 (0x78), 2^-10
    (0x18) and 2^-9 * 1/8 (0x01); alpha = 1 + 2^-23. The side of the midpoint is checked with fractions here."""
    alpha = np.float32(1 + 2.0**-23)
    midpoint = Fraction(2**23) - Fraction(1, 4)
    if case == "above_midpoint":  # S = 16 * 4 * 2^14 * ... = 2^23 - 2^-7 - 2^-17
        a = _one_row([(0x6, None, 0x78), (None, 0x2, 0x18), (None, 0x2, 0x01)])
        b = _one_row([(0x4, None, 0x78), (None, 0xC, 0x18), (None, 0xC, 0x01)])
        s = Fraction(2**23) - Fraction(1, 2**7) - Fraction(1, 2**17)
        c, bias = -(1.25 - 2.0**-7 - 2.0**-17), 2.0**-29 - 2.0**-31 - 2.0**-41
        want = 2.0**23  # v is above the midpoint
    else:  # S = 2^23 - 2^-8
        a = _one_row([(0x6, None, 0x78), (None, 0x2, 0x18)])
        b = _one_row([(0x4, None, 0x78), (None, 0xA, 0x18)])
        s = Fraction(2**23) - Fraction(1, 2**8)
        c, bias = -(1.25 - 2.0**-8), None
        want = 2.0**23 - 0.5  # v is below the midpoint
    v = Fraction(float(alpha)) * s + Fraction(c) + Fraction(bias or 0)
    assert 0 < abs(v - midpoint) < Fraction(1, 2**30) and (v > midpoint) == (want == 2.0**23)
    kw = dict(alpha=alpha, accumulate=np.array([[c]], np.float32),
              bias=None if bias is None else np.array([bias], np.float32))
    assert oracle.gemm(a, b, model="exact", out_dtype="float32", **kw)[0, 0] == np.float32(want)


def test_round_certified_below_a_power_of_two():
    """v's estimate 2^k - 2^(k-25) (the midpoint below 2^k, where fp32's spacing halves) with the exact value just
    below it: the certified rounding gives 2^k - 2^(k-24), never 2^k."""
    for k in (0, 23, -100):
        est = np.array([2.0**k - 2.0**(k - 25)])
        r, ok = round_certified(est, np.array([2.0**(k - 60)]), "float32")
        assert not ok[0] or r[0] == np.float32(2.0**k - 2.0**(k - 24))
        r, ok = round_certified(est - 2.0**(k - 40), np.array([2.0**(k - 60)]), "float32")
        assert ok[0] and r[0] == np.float32(2.0**k - 2.0**(k - 24))


def test_within_bound_at_its_edge():
    """The check is |y - y_exact| <= B exactly: y_exact +- B passes, the next float64 beyond fails."""
    rng = np.random.default_rng(8)
    a, b = _planes(rng, 4, 4, 64, spread=3)
    ye = oracle.gemm(a, b, model="exact", out_dtype="float32").astype(np.float64)
    bound = oracle.gemm_error_bound(a, b, out_dtype="float32")
    assert np.isfinite(bound).all() and (bound > 0).all()
    for sign in (1.0, -1.0):
        edge = ye + sign * bound
        over = np.abs(edge - ye) > bound  # (the float64 sum rounded outward: step back inside)
        edge[over] = np.nextafter(edge[over], ye[over])
        assert oracle.within_bound(edge, ye, bound).all()
        beyond = np.nextafter(edge, sign * np.inf)
        assert not oracle.within_bound(beyond, ye, bound)[np.abs(beyond - ye) > bound].any()
        assert (np.abs(beyond - ye) > bound).any()


def test_exact_model_nan_scale_rows():
    """SPEC 12.3 under the torchao rules: a NaN scale byte (0x7F) in a row of A makes that row's outputs NaN in every
    model, the exact one included."""
    from oracle.fp4_numpy import pack_fp4

    codes = pack_fp4(np.full((2, 16), 0x2, np.uint8))
    a = oracle.QuantizedPlane(codes, np.array([[0x7F], [0x38]], np.uint8), np.float32(2688.0), (2, 16), "torchao")
    b = oracle.QuantizedPlane(codes[:1], np.array([[0x38]], np.uint8), np.float32(2688.0), (1, 16), "torchao")
    for model in ("sequential", "tensor_core", "exact"):
        y = np.asarray(oracle.gemm(a, b, model=model, out_dtype="float32"))
        assert np.isnan(y[0, 0]) and np.isfinite(y[1, 0]), model


# E2M1 codes 0x1 = 0.5, 0x2 = 1, 0x3 = 1.5, 0x4 = 2, 0x6 = 4 (SPEC 2.1); E4M3 bytes 0x38 = 1, 0x01 = 2^-9,
# 0x02 = 2^-8, 0x7F = NaN (SPEC 2.2)

def test_torchao_alpha_uses_both_amaxes():
    """SPEC 12.1, rule torchao: alpha = P_A * P_B with P = amax / 2688; amaxes 2688 and 5376 give 1 * 2 = 2."""
    a = _one_row([(None, 0x2, 0x38)], amax=2688.0, rule="torchao")
    b = _one_row([(None, 0x2, 0x38)], amax=5376.0, rule="torchao")
    assert oracle.gemm_alpha(a, b) == np.float32(2.0) and oracle.gemm_alpha(b, a) == np.float32(2.0)


def test_torchao_with_torchao_noscale_has_no_alpha():
    """SPEC 12.1: a torchao plane against a torchao_noscale one is no pairing of 12.1's table: refused, either way."""
    a = _one_row([(None, 0x2, 0x38)], amax=2688.0, rule="torchao")
    b = _one_row([(None, 0x2, 0x38)], amax=2688.0, rule="torchao_noscale")
    for x, y in ((a, b), (b, a)):
        with pytest.raises(ValueError):
            oracle.gemm_alpha(x, y)
        with pytest.raises(ValueError):
            oracle.gemm(x, y)


def test_python_float_alpha_is_applied_in_fp32():
    """SPEC 12.1 / 12.2: alpha is an fp32 value. alpha = 0.3 (a Python float) is fp32(0.3) = 10066330 * 2^-25; times
    acc = 1.5 * 2 = 3 that is 15099495 * 2^-24 exactly, 0x3F666667, where the float64 product 0.9 would round to
    0x3F666666."""
    a, b = _one_row([(None, 0x3, 0x38)]), _one_row([(None, 0x4, 0x38)])
    for model in ("sequential", "tensor_core", "exact"):
        y = oracle.gemm(a, b, alpha=0.3, model=model, out_dtype="float32")
        assert y.view(np.uint32)[0, 0] == 0x3F666667, model


def test_exact_certification_accounts_for_c_and_bias():
    """SPEC 12.3 with C = 2^30 and bias = -2^30 cancelling: alpha = 1 + 2^-23 and S = 1 * 1 + 2^-10 * 2^-10 =
    1 + 2^-20 give v = 1 + 2^-20 + 2^-23 + 2^-43, which rounds to 1 + 2^-20 + 2^-23. The float64 estimate
    fl(fl(alpha S + 2^30) - 2^30) = 1 + 2^-20 + 2^-22 is one fp32 ulp off, so its error term must count |C| + |bias|."""
    a = _one_row([(None, 0x2, 0x38), (None, 0x1, 0x01)])  # 1, then 0.5 * 2^-9 = 2^-10
    b = _one_row([(None, 0x2, 0x38), (None, 0x1, 0x01)])
    alpha = np.float32(1 + 2.0**-23)
    v = Fraction(float(alpha)) * (1 + Fraction(1, 2**20))
    assert v == 1 + Fraction(1, 2**20) + Fraction(1, 2**23) + Fraction(1, 2**43)
    y = oracle.gemm(a, b, alpha=alpha, model="exact", out_dtype="float32",
                    accumulate=np.array([[2.0**30]], np.float32), bias=np.array([-(2.0**30)], np.float32))
    assert y[0, 0] == np.float32(1 + 2.0**-20 + 2.0**-23) == _fraction_round(v, np.float32)


def test_exact_model_per_row_alpha_on_the_integer_path(monkeypatch):
    """SPEC 12.8 with 12.3 on the exact model's integer path (the float64 certification switched off, so every element
    takes it): A row-scaled with amaxes 3 and 5, B's amax 7: alpha_m = fp32(fp32(A_m * 7) * fp32(1 / 7225344)) per
    row; S = 1.5 * 2 = 3 in both rows; y = RN_fp32(alpha_m * 3), rounded here from fractions."""
    import sys

    from oracle.fp4_numpy import pack_fp4

    codes = pack_fp4(np.array([[0x3] + [0] * 15] * 2, np.uint8))
    a = oracle.QuantizedPlane(codes, np.full((2, 1), 0x38, np.uint8), np.array([3.0, 5.0], np.float32), (2, 16),
                              row_scaled=True)
    b = _one_row([(None, 0x4, 0x38)], amax=7.0)
    rcp = np.float32(1.0) / np.float32(7225344)
    alphas = [np.float32(np.float32(np.float32(x) * np.float32(7.0)) * rcp) for x in (3.0, 5.0)]
    assert alphas[0] != alphas[1]
    want = [_fraction_round(Fraction(float(al)) * 3, np.float32) for al in alphas]
    monkeypatch.setattr(sys.modules["oracle.gemm"], "round_certified",
                        lambda v, err, fmt: (np.zeros_like(v), np.zeros(v.shape, bool)))
    y = oracle.gemm(a, b, model="exact", out_dtype="float32")
    assert y[:, 0].tolist() == want


def test_bias_is_added_in_fp32_before_the_bf16_cast():
    """SPEC 12.2: y = fp32(fp32(alpha * acc) + bias), then RNE to bf16. acc = 1 + 2^-8 (1 * 1 + (1 * 2^-8) * 1),
    alpha = 1, bias = 2^-30: fp32(1 + 2^-8 + 2^-30) = 1 + 2^-8, a bf16 tie between 1 and 1 + 2^-7, which goes to 1
    (even); the exact sum rounded straight to bf16 would give 1 + 2^-7."""
    a = _one_row([(None, 0x2, 0x38), (None, 0x2, 0x02)])
    b = _one_row([(None, 0x2, 0x38), (None, 0x2, 0x38)])
    for model in ("sequential", "tensor_core"):
        y = oracle.gemm(a, b, alpha=np.float32(1), model=model, out_dtype="bfloat16",
                        bias=np.array([2.0**-30], np.float32))
        assert y.dtype == ml_dtypes.bfloat16 and float(y[0, 0]) == 1.0, model


def test_bound_is_unbounded_at_the_bf16_overflow_threshold_for_both_outputs():
    """SPEC 12.4: no bound (NEAR_OVERFLOW, the exact value being finite) wherever T (1+u)^4 + B reaches 2^128 - 2^119
    (bf16's threshold, the lower one), for fp32 output too. C = 2^128 - 2^118 (an fp32 value) with one product of 1: T lies above that threshold, below 2^128."""
    a, b = _one_row([(None, 0x2, 0x38)]), _one_row([(None, 0x2, 0x38)])
    c = np.array([[2.0**128 - 2.0**118]], np.float32)
    assert float(c[0, 0]) == 2.0**128 - 2.0**118
    for out in ("float32", "bfloat16"):
        bound = oracle.gemm_error_bound(a, b, alpha=np.float32(1), accumulate=c, out_dtype=out)
        assert bound[0, 0] == NEAR_OVERFLOW, out


def test_a_nan_scale_row_has_an_infinite_bound_and_must_give_nan():
    """SPEC 12.4: an element whose exact value is NaN (here a torchao NaN scale byte 0x7F in A's row) has B = +Inf,
    and within_bound then accepts a NaN only."""
    from oracle.fp4_numpy import pack_fp4

    assert oracle.within_bound(np.array([np.nan]), np.array([np.nan]), np.array([np.inf]))[0]
    assert not oracle.within_bound(np.array([1.0]), np.array([np.nan]), np.array([np.inf]))[0]
    a = oracle.QuantizedPlane(pack_fp4(np.array([[0x2] + [0] * 15], np.uint8)), np.array([[0x7F]], np.uint8),
                              np.float32(2688), (1, 16), "torchao")
    b = _one_row([(None, 0x2, 0x38)], amax=2688.0, rule="torchao")
    ye = oracle.gemm(a, b, model="exact", out_dtype="float32")
    bound = oracle.gemm_error_bound(a, b, out_dtype="float32")
    assert np.isnan(ye[0, 0]) and np.isposinf(bound[0, 0])
    assert oracle.within_bound(ye, ye, bound).all() and not oracle.within_bound(np.zeros_like(ye), ye, bound).any()


def test_error_bound_at_least_the_spec_formula_for_long_k():
    """SPEC 12.4 for K = 8192 (1 * 1 in every lane: P = 8192, alpha = 1, fp32 output): gemm_error_bound is at least
    B = g P + 3u T (1+u)^3 + u_o T (1+u)^4 + u_o T + 4 eta + 3 eta_o with g = K u_a / (1 - K u_a) and T = P (1 + g),
    in fractions (g = K u_a alone falls below B here)."""
    from oracle.fp4_numpy import pack_fp4

    k = 8192
    codes = pack_fp4(np.full((1, k), 0x2, np.uint8))
    a = oracle.QuantizedPlane(codes, np.full((1, k // 16), 0x38, np.uint8), np.float32(1), (1, k))
    b = oracle.QuantizedPlane(codes.copy(), np.full((1, k // 16), 0x38, np.uint8), np.float32(1), (1, k))
    u_a, u, eta = Fraction(1, 2**23), Fraction(1, 2**24), Fraction(1, 2**150)
    p = Fraction(k)
    g = k * u_a / (1 - k * u_a)
    t = p * (1 + g)
    want = g * p + 3 * u * t * (1 + u) ** 3 + u * t * (1 + u) ** 4 + u * t + 4 * eta + 3 * eta
    assert Fraction(float(oracle.gemm_error_bound(a, b, alpha=np.float32(1), out_dtype="float32")[0, 0])) >= want


@pytest.mark.parametrize("k", [15, 31, 63])
def test_exact_int_matmul_at_its_documented_limit(k):
    """exact_int_matmul gives a @ b.T exactly for |entries| < 2^40 (SPEC 12.3's limbs keep every partial sum below
    2^53): every entry 2^40 - 1 (all bits set), one of them negative; exact results in Python integers."""
    a = np.full((2, k), 2**40 - 1, np.int64)
    a[1, 0] = -(2**40 - 1)
    b = np.full((1, k), 2**40 - 1, np.int64)
    s, shift = exact_int_matmul(a, b)
    got = [int(x) * 2**shift for x in np.asarray(s, dtype=object).ravel()]
    assert got == [k * (2**40 - 1) ** 2, (k - 2) * (2**40 - 1) ** 2]


@pytest.mark.parametrize("mid", [1.5 - 2.0**-24, 1.0 - 2.0**-25, 3.0 * 2.0**-100 - 2.0**-123])
def test_round_certified_declines_an_interval_across_the_lower_midpoint(mid):
    """SPEC 12.3: an estimate just above the fp32 midpoint below it, with an error reaching across that midpoint, is
    not certified; a shorter error is, with the estimate's rounding. Midpoints: 1.5 - 2^-24, 1 - 2^-25 (below a power
    of two), 3 * 2^-100 - 2^-123."""
    est = np.array([mid + abs(mid) * 2.0**-52])
    _, ok = round_certified(est, np.array([abs(mid) * 2.0**-50]), "float32")
    assert not ok[0]
    r, ok = round_certified(est, np.array([abs(mid) * 2.0**-54]), "float32")
    assert ok[0] and r[0] == float(np.float32(est[0]))


def test_round_certified_declines_an_interval_that_ends_on_a_midpoint():
    """v = 1 + 3 * 2^-24 - 2^-50 with error 2^-50: the value may be the midpoint 1 + 3 * 2^-24 itself, which rounds to
    1 + 2^-22 (even), not to RN(v) = 1 + 2^-23: not certified."""
    _, ok = round_certified(np.array([1 + 3 * 2.0**-24 - 2.0**-50]), np.array([2.0**-50]), "float32")
    assert not ok[0]


@pytest.mark.parametrize("fmt, v, want", [
    # float32: subnormal quantum 2^-149 (emin -126, 24 bits); halfway cases round to even
    ("float32", Fraction(3, 2**150), 2.0**-148),  # 1.5 quanta -> 2
    ("float32", Fraction(1, 2**150), 0.0),  # 0.5 quanta -> 0 (even)
    ("float32", Fraction(2**-128) + Fraction(2**-150), 2.0**-128),  # half a quantum above 2^21 quanta: a tie, to even
    ("float32", Fraction(2**-128) + Fraction(2**-151), 2.0**-128),  # a quarter of a quantum: rounds down
    # bfloat16: subnormal quantum 2^-133 (emin -126, 8 bits)
    ("bfloat16", Fraction(3, 2**134), 2.0**-132),
    ("bfloat16", Fraction(2**-128) + Fraction(2**-135), 2.0**-128),
    ("bfloat16", -Fraction(2**-128) - Fraction(2**-135), -2.0**-128),
])
def test_round_fraction_rounds_subnormals_to_the_formats_fixed_quantum(fmt, v, want):
    """Gradual underflow: below 2^-126 the quantum stays 2^(-126 - (p - 1)) (2^-149 for fp32, 2^-133 for bf16),
    ties to even, worked by hand."""
    got = ind.round_fraction(v, fmt)
    assert got == want and np.signbit(got) == np.signbit(want), (got, want)


@pytest.mark.parametrize("fmt, largest, half_ulp", [("float32", 2.0**128 - 2.0**104, 2**103),
                                                    ("bfloat16", 2.0**128 - 2.0**120, 2**119)])
def test_round_fraction_overflows_to_infinity_exactly_at_two_to_the_128(fmt, largest, half_ulp):
    """The largest finite value stays; halfway above it the tie goes to the even neighbour 2^128, which does not fit:
    +-Inf (RNE overflow; fp32's largest is (2^24 - 1) 2^104, bf16's (2^8 - 1) 2^120)."""
    assert ind.round_fraction(Fraction(largest), fmt) == largest
    top = Fraction(int(largest)) + half_ulp
    assert ind.round_fraction(top, fmt) == float("inf")
    assert ind.round_fraction(-top, fmt) == float("-inf")


def test_fraction_gemm_a_negative_nan_scale_makes_its_rows_outputs_nan():
    """E4M3 0xFF is NaN like 0x7F (SPEC 2.2: the sign bit does not matter): the row of A with a 0xFF scale gives NaN
    in every output, the other row the exact 1 * 1 * 16 = 16 (codes 0x2 = 1.0, scales 0x38 = 1.0)."""
    data = np.full((2, 8), 0x22, np.uint8)
    scales = np.full((2, 1), 0x38, np.uint8)
    a_scales = scales.copy()
    a_scales[1, 0] = 0xFF
    pa = QuantizedPlane(data, a_scales, np.float32(1), (2, 16))
    pb = QuantizedPlane(data.copy(), scales, np.float32(1), (2, 16))
    y = ind.fraction_gemm(pa, pb, alpha=1.0, bias=None, c=None, out_dtype="float32")
    assert y.dtype == np.float32 and y.shape == (2, 2)
    assert np.array_equal(y[0], [16.0, 16.0]) and np.isnan(y[1]).all(), y


def test_a_finite_exact_value_that_rounds_to_inf_accepts_any_value_but_nan():
    """SPEC 12.4 near overflow: the claim is about the exact real value v, not its rounding. One row of four 16-blocks:
    block 0 sixteen 4.0 (code 0x6) under scale 256 (0x78), blocks 1-3 one 1.0 each (scale 0x38): dotted with itself,
    S = 16 * 1024^2 + 3 = 2^24 + 3, which the sequential fp32 sum keeps at 2^24 (each + 1 is a tie to even). With
    alpha = (2^24 - 1) 2^55 and C = FLT_MAX = (2^24 - 1) 2^104: sequential alpha * 2^24 = (2^24 - 1) 2^79 (exact) is
    below half of FLT_MAX's ulp 2^104, so y = FLT_MAX; v = FLT_MAX + 2^103 + 2^80 - 3 * 2^55 is finite but past fp32's
    overflow threshold FLT_MAX + 2^103, so the exact model gives +Inf. B is NEAR_OVERFLOW: FLT_MAX and +-Inf pass,
    NaN does not."""
    codes = np.array([[0x6] * 16 + ([0x2] + [0] * 15) * 3], np.uint8)
    data = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    p = QuantizedPlane(data, np.array([[0x78, 0x38, 0x38, 0x38]], np.uint8), np.float32(1.0), (1, 64), "te")
    kw = dict(alpha=np.float32((2**24 - 1) * 2.0**55), out_dtype="float32",
              accumulate=np.full((1, 1), np.finfo(np.float32).max, np.float32))
    ys = oracle.gemm(p, p, model="sequential", **kw)
    ye = oracle.gemm(p, p, model="exact", **kw)
    bound = oracle.gemm_error_bound(p, p, **kw)
    assert ys[0, 0] == np.finfo(np.float32).max and np.isposinf(ye[0, 0]) and bound[0, 0] == NEAR_OVERFLOW
    for y in (ys, oracle.gemm(p, p, model="tensor_core", **kw), np.array([[np.inf]]), np.array([[-np.inf]])):
        assert oracle.within_bound(y, ye, bound).all(), y
    assert not oracle.within_bound(np.array([[np.nan]]), ye, bound).any()


def test_the_bound_refuses_a_contraction_of_2_to_the_23():
    """SPEC 12.4: g = K u_a / (1 - K u_a) needs K u_a < 1 (u_a = 2^-23), so K >= 2^23 is refused."""
    k = 1 << 23
    p = QuantizedPlane(np.zeros((1, k // 2), np.uint8), np.zeros((1, k // 16), np.uint8), np.float32(1.0), (1, k), "te")
    with pytest.raises(ValueError, match="K < 2\\*\\*23"):
        oracle.gemm_error_bound(p, p, out_dtype="float32")
