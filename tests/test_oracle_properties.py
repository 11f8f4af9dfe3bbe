"""Hypothesis properties of the oracle (issue 2, item 7)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_scalar import assert_te_plane, e4m3_values, te_amax

import oracle
from oracle.dequantize import block_decode_scales
from oracle.fp4_numpy import unpack_fp4

specials = st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 448.0, 3e38, 0.25, 5.0])
values = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False), specials)


@st.composite
def matrices(draw, max_rows=40, max_kb=4, finite=False):
    m = draw(st.integers(0, max_rows))
    k = 16 * draw(st.integers(1, max_kb))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))).astype(np.float32)
    if not finite and m:
        for v in draw(st.lists(values, max_size=6)):
            x[rng.integers(m), rng.integers(k)] = v
    return x


@given(matrices())
@settings(max_examples=60, deadline=None)
def test_te_rule_equals_scalar_transcription(x):
    t = oracle.quantize(x)
    amax = te_amax(x)  # SPEC 4.1 (rule te), computed independently
    assert np.float32(t.row.amax).tobytes() == amax.tobytes()
    assert_te_plane(t.row.data, t.row.scales, x, amax)


_E4M3_MIDPOINTS = [(a + b) / 2 for a, b in zip(e4m3_values()[1:-1], e4m3_values()[2:], strict=True)]


@st.composite
def blocks_at_scale_midpoints(draw):
    """(x [2, 64], amax): every 16-block's max b is chosen so that SPEC 5.2's sf = b * (S_enc * fp32(1/6)) lies
    within a few ulps of a midpoint between two E4M3 values, where the rounding of the scale byte depends on the
    exact order of 5.2's products (SPEC 14.3); the other elements are random fractions of b."""
    amax = np.float32(draw(st.sampled_from([100.0, 1.0, 3.0, 7.0, 448.0, 1e-3, 12345.0, 2688.0])))
    s_enc = np.float32(np.float32(2688.0) / amax)
    mult = np.float32(s_enc * np.float32(1.0 / 6.0))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-1, 1, (2, 64))).astype(np.float32)
    for r in range(2):
        for j in range(4):
            mid = np.float32(draw(st.sampled_from(_E4M3_MIDPOINTS)))
            ulps = draw(st.integers(-3, 3))  # b moved by a few fp32 ulps around mid / mult
            b = (np.array([mid / mult], np.float32).view(np.int32) + ulps).view(np.float32)[0]
            if not 0 < b <= amax:
                b = np.float32(amax)
            x[r, 16 * j:16 * j + 16] *= b
            x[r, 16 * j + int(rng.integers(16))] = b * (1 if rng.random() < 0.5 else -1)
    return x, amax


@given(blocks_at_scale_midpoints())
@settings(max_examples=80, deadline=None)
def test_te_scale_bytes_at_e4m3_midpoints(case):
    """Block maxima whose scales land next to E4M3 rounding midpoints: the oracle's scale bytes and codes equal
    the scalar transcription of SPEC 5.1 / 5.2, which forms S_enc * fp32(1/6) before multiplying by b."""
    x, amax = case
    t = oracle.quantize(x, amax=amax)
    assert_te_plane(t.row.data, t.row.scales, x, amax)


@given(matrices(), st.sampled_from(["te", "te_fused_rht", "torchao", "torchao_noscale"]))
@settings(max_examples=60, deadline=None)
def test_2d_blocks_row_col_transpose_symmetry(x, rule):
    """SPEC 6.3: without RHT, 16x16 rowwise and columnwise codes are transposes (RN), scales too."""
    t = oracle.quantize(x, columnwise=True, block=(16, 16), rule=rule)
    m, k = x.shape
    cr = unpack_fp4(t.row.data, k)
    cc = unpack_fp4(t.col.data, t.col.cols)
    assert np.array_equal(cr, cc[:, :m].T)
    if rule.startswith("te"):  # TE multipliers are finite, so the zero padding quantizes to zero codes
        assert np.all(cc[:, m:] & 0x7 == 0)  # (torchao: a NaN tile scale turns 0 * NaN into a NaN code, SPEC 3.5)
    assert np.array_equal(t.row.scales[::16], t.col.scales[::16].T[: (m + 15) // 16])


@given(matrices(finite=True))
@settings(max_examples=60, deadline=None)
def test_dequantize_error_bound(x):
    """SPEC 11: each dequantized element is within half an E2M1 step of x times the block factor, except
    where the element saturated (|x| beyond 6 block factors plus the grid's half step) or the block's scale
    underflowed to 0. Elements encoded as +-6 are checked too (half the step below 6 is 1 block factor)."""
    t = oracle.quantize(x)
    if x.size == 0:
        return
    f = np.repeat(block_decode_scales(t.row).astype(np.float64), 16, axis=1)
    deq = oracle.dequantize(t.row).astype(np.float64)
    q = np.abs(unpack_fp4(t.row.data, x.shape[1]).astype(np.int64))
    mag = oracle.fp4_numpy.E2M1_VALUES[q & 7].astype(np.float64)
    step = np.where(mag < 2, 0.5, np.where(mag < 4, 1.0, 2.0))  # spacing below the chosen value
    ok_block = f > 0
    sat = np.abs(x) > 7 * f  # past 6 + the half step: only a clamp could bring it to 6
    err = np.abs(deq - x)
    # step/2 of the grid in block units, plus fp32 rounding of f and of the product
    bound = (step / 2) * f * (1 + 2.0**-18) + np.abs(x) * 2.0**-22
    good = ok_block & ~sat
    assert np.all(err[good] <= bound[good])


@given(matrices(max_rows=70), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_sr_keeps_the_rn_scales(x, seed, offset):
    """SPEC 3.4 / 5.2: stochastic rounding changes the codes only; every scale byte is round-to-nearest's. (SR's codes
    are checked against the scalar SPEC transcription with its Philox bytes in test_oracle_cli and the golden vector
    quantize_16x16_sr.)"""
    a = oracle.quantize(x, columnwise=True, rounding="sr", seed=seed, offset=offset)
    rn = oracle.quantize(x, columnwise=True)
    assert np.array_equal(a.row.scales, rn.row.scales) and np.array_equal(a.col.scales, rn.col.scales)


@given(matrices(max_rows=50, finite=True), st.integers(0, 2**16 - 1))
@settings(max_examples=30, deadline=None)
def test_columnwise_fast_path_equals_plane_definition(x, mask):
    """The X-layout columnwise path equals quantizing the SPEC 6.2 plane (padded, RHT'd X^T) row by row."""
    xb = x.astype(ml_dtypes.bfloat16)
    t = oracle.quantize(xb, rowwise=False, columnwise=True, rht=True, rht_signs=mask)
    from oracle.quantize import columnwise_source

    src = columnwise_source(xb.astype(np.float32), True, mask)
    amax = te_amax(src)  # SPEC 4.2: of the RHT'd plane, NaN-ignoring (formed here, not read from t)
    assert np.float32(t.col.amax).tobytes() == amax.tobytes()
    ref = oracle.quantize(src, amax=amax).row
    assert np.array_equal(t.col.data, ref.data) and np.array_equal(t.col.scales, ref.scales)
