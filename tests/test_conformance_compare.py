"""conformance.compare on hand-made outputs: what must mismatch (another dtype, a finite value for an infinite exact
value, the sign of a dequantized zero, Inf against NaN), what may not (an exact zero's sign, a NaN payload), and where
a difference is located (bytes, nibbles, swizzled and grouped scales, offsets, amaxes, GEMM elements, RHT blocks).
Expected values worked out by hand from SPEC.md and docs/conformance.md."""
from __future__ import annotations

import numpy as np
import pytest
from conformance_cases import QUANTIZE_OPTIONS, quantize_case

from conformance.cases import Case
from conformance.compare import compare
from conformance.ops import reference


def test_a_buffer_of_another_dtype_with_the_same_bytes_mismatches():
    """bytes mode compares the same dtype and shape: row_amax is fp32 [1] (SPEC 4); an int32 view of the same four
    bytes is not the buffer the op defines."""
    c = quantize_case(np.ones((2, 32), np.float32))
    ref = reference(c)
    out = dict(ref, row_amax=ref["row_amax"].view(np.int32))
    ms = compare(c, ref, out)
    assert [m.buffer for m in ms] == ["row_amax"]
    assert ms[0].where.get("shape") == "differs"


def test_the_first_of_two_differing_bytes_is_located_and_both_counted():
    """x = ones [2, 32]: row_data is [2, 16] bytes (SPEC 6.1). Flat byte 0 (row 0, elements 0/1, block 0) gets its
    low nibble changed and flat byte 31 (row 1, byte 15: elements 30/31, block 1) its high nibble: 2 bytes differ,
    the first at row 0, block 0, nibble lo, element 0."""
    c = quantize_case(np.ones((2, 32), np.float32))
    ref = reference(c)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"].reshape(-1)[0] ^= 0x01
    out["row_data"].reshape(-1)[31] ^= 0x10
    (m,) = compare(c, ref, out)
    assert m.buffer == "row_data" and m.count == 2
    assert (m.where["row"], m.where["block"], m.where["nibble"], m.where["element"]) == (0, 0, "lo", 0)


def test_a_longer_buffer_counts_its_extra_bytes():
    """row_amax is fp32 [1]; a backend's [2] holding the right value and one more has 4 bytes too many, none of the
    common 4 differing: 4 bytes differ."""
    c = quantize_case(np.ones((2, 32), np.float32))
    ref = reference(c)
    out = dict(ref, row_amax=np.concatenate([ref["row_amax"], ref["row_amax"]]))
    (m,) = compare(c, ref, out)
    assert m.buffer == "row_amax" and m.count == 4 and "(4 bytes differ)" in str(m)


def _gemm_case():
    return Case("gemm", 0, 0, {}, {}, {})


def test_equal_to_exact_counts_bit_equal_elements_only():
    """docs/conformance.md: equal_to_exact counts bit-equal elements. y = [[1, 2, 3]] fp32; the backend's 1 is one ulp
    up (0x3F800001: three of its four bytes equal), within a bound of 1: 3 elements, 2 bit-equal, no mismatch."""
    yref = np.array([[1.0, 2.0, 3.0]], np.float32)
    y = yref.copy()
    y.view(np.uint32)[0, 0] = 0x3F800001
    ref = {"y": yref, "bound": np.ones((1, 3))}
    stats = {}
    assert compare(_gemm_case(), ref, {"y": y}, "bound", stats) == []
    assert stats == {"elements": 3, "equal_to_exact": 2}


def test_a_gemm_output_of_another_dtype_mismatches():
    """SPEC 12.2: the output is cast to the output dtype (fp32 or bf16). A backend that returns fp32 where the case
    asks for bf16 (the same value, 1.0, well within the bound) did not produce the op's output."""
    import ml_dtypes

    ref = {"y": np.array([[1.0]], ml_dtypes.bfloat16), "bound": np.ones((1, 1))}
    (m,) = compare(_gemm_case(), ref, {"y": np.array([[1.0]], np.float32)}, "bound", {})
    assert m.buffer == "y" and m.where.get("shape") == "differs"


def test_a_finite_output_where_the_exact_value_is_infinite_mismatches():
    """SPEC 12.4: where B = +inf and the exact value is infinite, y must be that value or NaN; a finite 1.0 is not."""
    ref = {"y": np.array([[np.inf, 2.0]], np.float32), "bound": np.array([[np.inf, 0.0]])}
    (m,) = compare(_gemm_case(), ref, {"y": np.array([[1.0, 2.0]], np.float32)}, "bound", {})
    assert (m.where["row"], m.where["col"], m.count) == (0, 0, 1)


def test_bound_mismatch_location_and_values():
    """A 2 x 3 fp32 output, bound 0 everywhere, the backend's element [1, 2] is 5 instead of 0: one element,
    at row 1, col 2 (no group: a 2-D output), oracle 0.0, backend 5.0."""
    yref = np.zeros((2, 3), np.float32)
    y = yref.copy()
    y[1, 2] = 5.0
    (m,) = compare(_gemm_case(), {"y": yref, "bound": np.zeros((2, 3))}, {"y": y}, "bound", {})
    assert m.count == 1 and m.where == {"op": "gemm", "row": 1, "col": 2, "bound": 0.0}
    assert (m.ref, m.got) == ("0.0", "5.0")


def _rht_case(x):
    import ml_dtypes

    return Case("rht", 0, 0, {"x": np.asarray(x, np.float32).reshape(1, 16).astype(ml_dtypes.bfloat16)},
                {"rht_signs": 0}, {})


def test_rht_tolerance_scales_with_sum_abs_x_times_2_pow_minus_23():
    """SPEC 14.2 / 7.2, signs +1: x = [2^20, 2^20, 1, 0 ...] spans 20 binades (a tolerance block). Butterfly: y_1 =
    (x0 - x1 + x2) / 4 = 0.25 exactly (bf16 0x3E80). tol = sum|x| 2^-23 + ulp + 2^-133 = (2^21 + 1) 2^-23 + ulp:
    0.25 + 2^-23 + ulp. A backend's 0.625 (0x3F20; ulp 2^-8) is 0.375 away: above 0.2539, a mismatch (it would pass
    a tolerance with 2^-22)."""
    x = np.zeros(16)
    x[0] = x[1] = 2.0**20
    x[2] = 1.0
    c = _rht_case(x)
    ref = reference(c)
    assert ref["y"][0, 1] == 0x3E80
    y = ref["y"].copy()
    y[0, 1] = 0x3F20
    (m,) = compare(c, ref, {"y": y}, "rht", {})
    assert (m.where["element"], m.where["exact_domain"]) == (1, False)


@pytest.mark.parametrize("span, ref_bits, exact", [(12, 0x4480, True), (13, 0x4500, False)])
def test_the_exact_domain_ends_at_a_span_of_12_binades(span, ref_bits, exact):
    """SPEC 14.2: span <= 12 is the exact domain. x = [2^span, 1, 0 ...] (exponents span and 0), and the backend's
    y_0 one bf16 ulp above the reference, within the tolerance either way:
    - span 12: y_0 = 4097 / 4 = 1024.25, RNE 1024 (0x4480); 1032 (0x4481) is within 4097 2^-23 + 8 but must mismatch;
    - span 13: y_0 = 8193 / 4 = 2048.25, RNE 2048 (0x4500); 2064 (0x4501) is 15.75 away, within 8193 2^-23 + 16, and
      passes (it would mismatch if the exact domain reached span 13)."""
    x = np.zeros(16)
    x[0], x[1] = 2.0**span, 1.0
    c = _rht_case(x)
    ref = reference(c)
    assert ref["y"][0, 0] == ref_bits
    y = ref["y"].copy()
    y[0, 0] = ref_bits + 1
    stats = {}
    found = compare(c, ref, {"y": y}, "rht", stats)
    if exact:
        (m,) = found
        assert m.where["exact_domain"] is True and stats["blocks_exact_domain"] == 1
    else:
        assert found == [] and stats.get("blocks_exact_domain", 0) == 0


def test_blocks_that_may_overflow_or_hold_non_finite_inputs_are_not_checked():
    """SPEC 14.2: blocks with Inf, NaN or 16 max|x| >= FLT_MAX are not checked (docs: counted as unchecked).
    [2^124, 2^124, 0 ...] (span 0): 16 * 2^124 = 2^128 > FLT_MAX; [inf, 1, 0 ...]: an Inf input. Any output passes
    there."""
    for first, second in ((2.0**124, 2.0**124), (np.inf, 1.0)):
        x = np.zeros(16)
        x[0], x[1] = first, second
        c = _rht_case(x)
        ref = reference(c)
        y = ref["y"].copy()
        y[0, 3] ^= 0x0001
        stats = {}
        assert compare(c, ref, {"y": y}, "rht", stats) == [], first
        assert (stats["blocks_exact_domain"], stats["blocks_unchecked_overflow"]) == (0, 1), first


def test_dequantize_compares_the_sign_of_zero():
    """SPEC 11.2: a dequantized value's sign of zero is defined bit for bit (E2M1 code 0x8 is -0: -0 * f = -0); only
    gemm_exact (SPEC 12.3) compares zero as a value. A backend's +0 for the oracle's -0 is a mismatch at row 0, col 1 (one byte: 0x80)."""
    c = Case("dequantize", 0, 0, {}, {}, {})
    ref = {"y": np.array([[1.5, -0.0]], np.float32)}
    (m,) = compare(c, ref, {"y": np.array([[1.5, 0.0]], np.float32)}, "bytes")
    assert m.buffer == "y" and m.count == 1 and (m.where["row"], m.where["col"]) == (0, 1)


def test_gemm_exact_zero_sign_is_not_compared():
    """SPEC 12.3: the sign of an exact zero output is not defined by the exact model: -0 for +0 passes."""
    c = Case("gemm_exact", 0, 0, {}, {}, {})
    assert compare(c, {"y": np.array([[0.0, 2.0]], np.float32)}, {"y": np.array([[-0.0, 2.0]], np.float32)}) == []


def test_nan_is_compared_as_a_class_but_inf_is_a_value():
    """SPEC 11.2 / 12.2 / 12.3 / 12.6 / 12.7: a NaN's payload is not compared (0x7FC00001 for 0x7FC00000 passes),
    but +Inf (overflow to Inf, 12.3) is a value: a NaN for it, or -Inf, is a mismatch."""
    nan2 = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    for op in ("gemm_exact", "dequantize", "mma_sm100", "mma_tc"):
        c = Case(op, 0, 0, {}, {}, {})
        ref = {"y": np.array([[np.nan, np.inf]], np.float32)}
        assert compare(c, ref, {"y": np.array([[nan2, np.inf]], np.float32)}) == [], op
        for bad in (np.nan, -np.inf):
            (m,) = compare(c, ref, {"y": np.array([[np.nan, bad]], np.float32)})
            assert (m.buffer, m.where["col"]) == ("y", 1), (op, bad)


def _gcase():
    """group_quantize of x = ones [3, 32], splits [1, 1, 1] (SPEC 9): three groups of one row each."""
    return Case("group_quantize", 0, 0, {"x": np.ones((3, 32), np.float32), "splits": np.array([1, 1, 1])},
                dict(QUANTIZE_OPTIONS), {})


def test_a_grouped_amax_is_located_in_its_group():
    """SPEC 9.1: one fp32 amax per group and plane; row_amax is fp32 [3], group 2's amax is bytes 8..11. Changing
    group 2's amax from 1.0 (0x3F800000) to 2.0 is a mismatch located in group 2, decoded as 1.0 and 2.0."""
    c = _gcase()
    ref = reference(c)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["row_amax"].reshape(-1)[2] = 2.0
    (m,) = compare(c, ref, out)
    assert (m.buffer, m.where["group"]) == ("row_amax", 2)
    assert m.ref.startswith("1.0 (0x3F800000)") and m.got.startswith("2.0 (0x40000000)")


def test_a_wrong_offset_is_located_by_its_index():
    """SPEC 9.2: offsets are int64 [E+1]; row_data_offsets with K = 32 (16 bytes a row) are [0, 16, 32, 48]. A 33 at
    index 2 (bytes 16..23) is located at index 2, decoded 32 and 33."""
    c = _gcase()
    ref = reference(c)
    assert list(ref["row_data_offsets"]) == [0, 16, 32, 48]
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["row_data_offsets"][2] = 33
    (m,) = compare(c, ref, out)
    assert (m.buffer, m.where["index"], m.ref, m.got) == ("row_data_offsets", 2, "32", "33")


def test_both_nibbles_wrong_names_the_low_element():
    """A data byte holds element 2j in its low nibble and 2j+1 in its high one (SPEC 2 / 6.1): byte 0 of row 0 with
    both nibbles changed is nibble "both", first element 0."""
    c = quantize_case(np.ones((2, 32), np.float32))
    ref = reference(c)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"].reshape(-1)[0] ^= 0x11
    (m,) = compare(c, ref, out)
    assert (m.where["row"], m.where["nibble"], m.where["element"]) == (0, "both", 0)


def _flip_one(c, key, byte):
    ref = reference(c)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out[key].reshape(-1)[byte] ^= 0x01
    (m,) = compare(c, ref, out)
    assert m.buffer == key
    return m.where


def test_swizzled_scale_bytes_are_located_by_the_spec_8_2_formula():
    """SPEC 8.2: byte = ((r/128 * Cp/4 + c/4) * 32 + r%32) * 16 + (r%128)/32 * 4 + c%4.
    x [3, 32] (C = 2, Cp = 4): (r, c) = (1, 0) is byte 16, a real scale; (3, 0) is byte 48, padding (rows 0..2).
    x [129, 128] (C = Cp = 8): (128, 0) is byte (1 * 2 * 32) * 16 = 1024, a real scale."""
    w = _flip_one(quantize_case(np.ones((3, 32), np.float32)), "row_scales_swizzled", 16)
    assert (w["row"], w["block"], w.get("padding", False)) == (1, 0, False)
    w = _flip_one(quantize_case(np.ones((3, 32), np.float32)), "row_scales_swizzled", 48)
    assert (w["row"], w["block"], w.get("padding", False)) == (3, 0, True)
    w = _flip_one(quantize_case(np.ones((129, 128), np.float32)), "row_scales_swizzled", 1024)
    assert (w["row"], w["block"], w.get("padding", False)) == (128, 0, False)


def test_grouped_padded_compact_scales_are_located_row_major_over_cp_columns():
    """SPEC 9.2 / 8.1: a group's padded compact scales are [roundup(m_g, 128), roundup(K/16, 4)] row-major. splits
    [3, 1], K = 32: C = 2, Cp = 4; group 0's byte 4 is (row 1, block 0), a real scale; its byte 2 is (row 0, block 2),
    a padding column."""
    c = Case("group_quantize", 0, 0, {"x": np.ones((4, 32), np.float32), "splits": np.array([3, 1])}, dict(QUANTIZE_OPTIONS), {})
    w = _flip_one(c, "row_scales_compact", 4)
    assert (w["group"], w["row"], w["block"], w.get("padding", False)) == (0, 1, 0, False)
    w = _flip_one(c, "row_scales_compact", 2)
    assert (w["group"], w["row"], w["block"], w.get("padding", False)) == (0, 0, 2, True)


def test_columnwise_data_rows_are_padded_token_rows():
    """SPEC 6.2: the columnwise plane of X [3, 32] is [K = 32, Mp = 16], data [32, 8] bytes. Flat byte 8 is row 1,
    byte 0: elements 0/1, block 0."""
    c = Case("quantize", 0, 0, {"x": np.ones((3, 32), np.float32)}, dict(QUANTIZE_OPTIONS, rowwise=False, columnwise=True), {})
    w = _flip_one(c, "col_data", 8)
    assert (w["plane"], w["row"], w["block"], w["element"]) == ("col", 1, 0, 0)


def test_codec_mismatch_names_its_input_with_nan_inputs_left_out():
    """docs/conformance.md (mldtypes e2m1): NaN inputs are left out, so output element j is the j-th non-NaN input.
    x = [NaN, 1, 2]: outputs are the codes of 1 (0x2) and 2 (0x4); a wrong code at element 1 names input 2.0."""
    c = Case("e2m1", 0, 0, {"x": np.array([np.nan, 1.0, 2.0], np.float32)}, {}, {})
    ref = reference(c)
    (key,) = ref
    assert list(np.asarray(ref[key]).reshape(-1)) == [0x2, 0x4]
    out = {key: np.array(ref[key], copy=True)}
    out[key].reshape(-1)[1] = 0x5
    (m,) = compare(c, ref, out)
    assert m.where["element"] == 1 and m.where["input"].startswith("2.0")
