"""The edges of the scale swizzle, the grouped layout, the planes, dequantize and the bias gradient (SPEC 8, 9, 11,
13, 16.4): offsets past 2^31 / 2^32, refusals and their messages, the fields a grouped tensor records, dequantize of
negative, -0, NaN, subnormal scale bytes and an infinite amax. Expected values are worked by hand from SPEC.md or
decoded with ml_dtypes, never read back from the oracle function under test.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import oracle
from oracle.dequantize import block_decode_scales, dequantize, scaled_ints
from oracle.grouped import cut_splits, grouped_capacities
from oracle.planes import QuantizedPlane
from oracle.swizzle import grouped_scale_offsets, swizzle_scales, swizzled_offset, unswizzle_scales

E4M3 = ml_dtypes.float8_e4m3fn
E2M1 = ml_dtypes.float4_e2m1fn
RCP_2688 = np.float32(1.0 / 2688.0)  # SPEC 11.1: fp32(1/(6*448))


def _e4m3(byte) -> np.float32:
    """An E4M3 byte's value, decoded by ml_dtypes (independent of oracle.fp4_numpy)."""
    return np.array([byte], np.uint8).view(E4M3).astype(np.float32)[0]


def _e2m1(code) -> np.float32:
    return np.array([code], np.uint8).view(E2M1).astype(np.float32)[0]


def _plane(code: int, scale_byte: int, amax, rule: str = "te", rows: int = 1) -> QuantizedPlane:
    """A [rows, 16] plane whose 16 codes are all `code` and whose one scale byte per row is `scale_byte`."""
    data = np.full((rows, 8), code | (code << 4), np.uint8)
    scales = np.full((rows, 1), scale_byte, np.uint8)
    return QuantizedPlane(data, scales, amax, (rows, 16), rule=rule)


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


# ------------------------------------------------------------------------------------------------ SPEC 8 (swizzle)


def test_swizzled_offset_is_int64_past_2_31():
    """SPEC 8.2 by hand for r = 2^25, Cp = 64: tile = (2^25 / 128) * 16 = 2^22, byte (2^22 * 32) * 16 = 2^31; c = 5 adds
    one tile (512 bytes) and c % 4 = 1. An int32 result would wrap to a negative offset."""
    got = swizzled_offset(np.array([2**25, 2**25]), np.array([0, 5]), 64)
    assert got.dtype == np.int64
    assert got.tolist() == [2**31, 2**31 + 512 + 1]


@pytest.mark.parametrize("dtype", [np.int8, np.bool_])
def test_swizzle_refuses_one_byte_non_uint8(dtype):
    """SPEC 8: scale bytes are uint8 E4M3 bytes; a one-byte int8/bool array is refused like any other dtype."""
    with pytest.raises(TypeError, match="must be uint8"):
        swizzle_scales(np.zeros((4, 4), dtype))
    with pytest.raises(TypeError, match="swizzled scales must be uint8"):
        unswizzle_scales(np.zeros(512, dtype), 4, 4)


def test_unswizzle_refuses_a_longer_buffer_with_its_message():
    """SPEC 8.2: 4 x 4 scales swizzle to exactly 512 bytes; a 1024-byte buffer (e.g. two tiles) is refused by the
    size check, not by a NumPy reshape error."""
    with pytest.raises(ValueError, match=r"1024 bytes does not match rows=4, cols=4 \(512 bytes\)"):
        unswizzle_scales(np.zeros(1024, np.uint8), 4, 4)


def test_unswizzle_returns_uint8():
    compact = np.arange(1, 13, dtype=np.uint8).reshape(3, 4)
    buf = np.zeros(512, np.uint8)
    for r in range(3):  # SPEC 8.2: rows < 32, one tile: byte r * 16 + c
        buf[r * 16 : r * 16 + 4] = compact[r]
    got = unswizzle_scales(buf, 3, 4)
    assert got.dtype == np.uint8 and np.array_equal(got, compact)


# ------------------------------------------------------------------------------------------------ SPEC 9 (grouped)


def test_grouped_offsets_are_int64_past_2_32():
    """SPEC 9.2 by hand, splits [2^21, 0], K = 4096 (K/16 = 256 scale columns): rowwise data 2^21 * 4096 / 2 = 2^32;
    rowwise scales 2^21 * 256 = 2^29; columnwise data 4096 * 2^21 / 2 = 2^32; columnwise scales
    4096 * roundup(2^17, 4) = 2^29. Every array is int64 [E+1] with a leading 0."""
    o = grouped_scale_offsets([2**21, 0], 4096)
    want = {"row_offsets": 2**21, "row_data": 2**32, "row_scale": 2**29, "col_data": 2**32, "col_scale": 2**29}
    for name, v in want.items():
        assert o[name].dtype == np.int64, name
        assert o[name].tolist() == [0, v, v], name


def test_splits_of_bools_are_refused():
    """SPEC 9.1 / check_splits: splits are integers; a bool array is not."""
    with pytest.raises(TypeError, match="integers"):
        oracle.group_quantize(np.zeros((2, 16), np.float32), np.array([True, True]))


def test_cumulative_offsets_hint_with_an_empty_group():
    """Cumulative offsets [100, 100, 300] (group 1 empty) are non-decreasing and end at T: the hint applies."""
    with pytest.raises(ValueError, match="cumulative offsets"):
        oracle.group_quantize(np.zeros((300, 16), np.float32), [100, 100, 300])


def test_no_cumulative_hint_when_the_last_size_exceeds_t():
    """[100, 400] cannot be offsets of 300 rows (the last offset would be T): plain 'add up to' message, no hint."""
    with pytest.raises(ValueError, match="add up to 500 but x has 300 rows") as ei:
        oracle.group_quantize(np.zeros((300, 16), np.float32), [100, 400])
    assert "cumulative" not in str(ei.value)


def test_cut_splits_refuses_empty():
    """cut_splits: a non-empty 1-D integer array (SPEC 9.1: E >= 1)."""
    with pytest.raises(ValueError, match="non-empty 1-D sequence of group sizes"):
        cut_splits(np.zeros(0, np.int64), 8)


@pytest.mark.parametrize("splits", ["16,16", [16.0, 16.0], np.zeros((2, 1)), [31, True], [True, False]])
def test_splits_that_are_not_integers_are_a_type_error(splits):
    """Every function taking splits refuses a string, floats (whatever their shape) and bools among the sizes with
    TypeError, as device.group_quantize and device.GroupedLinear do (np.asarray would read [31, True] as [31, 1])."""
    x = np.zeros((32, 16), np.float32)
    for call in (lambda: oracle.group_quantize(x, splits), lambda: cut_splits(splits, 32),
                 lambda: oracle.grouped_bias_grad(x, splits)):
        with pytest.raises(TypeError, match="splits must be integers"):
            call()


def test_cut_splits_beyond_int32():
    """SPEC 9.4 by hand with T = 2^40 rows (no array of that size is needed): [2^40, 2^40] -> [2^40, 0];
    [2^33, 2^40] -> [2^33, 2^40 - 2^33]. int64 throughout (an int32 intermediate would wrap)."""
    got = cut_splits(np.array([2**40, 2**40], np.int64), 2**40)
    assert got.dtype == np.int64 and got.tolist() == [2**40, 0]
    got = cut_splits(np.array([2**33, 2**40], np.int64), 2**40)
    assert got.tolist() == [2**33, 2**40 - 2**33]


@pytest.mark.parametrize("amax, match", [
    (np.ones((2, 3), np.float32), r"shape \[E\] or \[E, 2\]"),
    (np.ones(3, np.float32), r"one value \(or pair\) per group \(2\)"),
    (np.ones((3, 2), np.float32), r"one value \(or pair\) per group \(2\)"),
    (([1.0, 1.0], [1.0, -1.0]), ">= 0"),
    (np.array([True, True]), "amax must hold real numbers"),
])
def test_group_amax_refusals(amax, match):
    """SPEC 4.3 / 9.1: a supplied per-group amax is E values, [E, 2] pairs or a (row, col) tuple, every value >= 0."""
    with pytest.raises(ValueError, match=match):
        oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], columnwise=True, amax=amax)


def test_group_amax_nan_is_accepted():
    """SPEC 4.3 (grouped._group_amax): every supplied value must be >= 0, +Inf or NaN; NaN is kept as the amax."""
    g = oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], amax=[np.nan, np.inf])
    assert np.isnan(g.row_amax[0]) and g.row_amax[1] == np.inf


def test_row_scaled_amax_must_be_one_dimensional():
    """SPEC 5.7: a row-scaled amax is T values; a [T, 1] column is refused."""
    with pytest.raises(ValueError, match=r"one real number per row \(8\)"):
        oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], row_scaled=True, amax=np.ones((8, 1)))


def test_row_scaled_supplied_amax_slices_per_group():
    """SPEC 5.7 / 9.1: with row_scaled, group g's planes take the supplied amaxes of its own rows, in row order."""
    amax = np.arange(1, 9, dtype=np.float32) * 100
    g = oracle.group_quantize(np.ones((8, 16), np.float32), [3, 0, 5], row_scaled=True, amax=amax)
    assert g.row_planes[0].amax.tolist() == [100, 200, 300]
    assert g.row_planes[2].amax.tolist() == [400, 500, 600, 700, 800]
    assert g.row_amax.dtype == np.float32 and g.row_amax.tolist() == amax.tolist()


def test_capacities_refuse_negative_rows():
    with pytest.raises(ValueError, match="total_rows >= 0"):
        grouped_capacities(-1, 16, 2)


def test_capacities_of_k_zero_are_zero():
    """SPEC 1.3 / 9.3: K = 0 is a multiple of 16 (group_quantize accepts it); every 9.3 size has a factor K or
    roundup(K/16, 4) or roundup(K, 128), all 0, so every capacity is 0 (not a refusal)."""
    assert grouped_capacities(4, 0, 2) == {"row_data": 0, "row_scale": 0, "col_data": 0, "col_scale": 0}


def test_group_quantize_offset_fields_hand_example():
    """SPEC 9.2's drawing, read from the GroupedNVFP4Tensor itself (not recomputed with grouped_scale_offsets):
    splits [3, 0, 130], K = 64."""
    x = np.ones((133, 64), np.float32)
    g = oracle.group_quantize(x, [3, 0, 130], columnwise=True)
    assert g.row_offsets.tolist() == [0, 3, 3, 133]
    assert g.row_data_offsets.tolist() == [0, 96, 96, 4256]
    assert g.row_scale_offsets.tolist() == [0, 512, 512, 1536]
    assert g.col_data_offsets.tolist() == [0, 512, 512, 5120]
    assert g.col_scale_offsets.tolist() == [0, 512, 512, 2048]
    for a in (g.row_offsets, g.row_data_offsets, g.row_scale_offsets, g.col_data_offsets, g.col_scale_offsets):
        assert a.dtype == np.int64
    b = g.buffers()
    assert b["row_data"].size == 4256 and b["row_scales"].size == 1536 and b["row_scales_compact"].size == 1536
    assert b["col_data"].size == 5120 and b["col_scales"].size == 2048 and b["col_scales_compact"].size == 2048
    assert set(b) == {"row_offsets"} | {f"{p}_{f}" for p in ("row", "col") for f in
                                        ("data", "scales", "scales_compact", "amax", "data_offsets", "scale_offsets")}
    assert b["row_amax"].dtype == np.float32 and b["row_amax"].shape == (3,)
    assert g.row_amax.dtype == np.float32 and g.col_amax.dtype == np.float32
    assert g.num_groups == 3  # the empty group counts (SPEC 9.1)


def test_grouped_buffers_omit_planes_not_requested():
    g = oracle.group_quantize(np.ones((4, 16), np.float32), [4])
    assert set(g.buffers()) == {"row_offsets", "row_data", "row_scales", "row_scales_compact", "row_amax",
                                "row_data_offsets", "row_scale_offsets"}


def test_group_quantize_flattens_nd_input_shape():
    """SPEC 1.3: an N-D input is flattened to 2-D [M, K]; the grouped tensor's shape is that 2-D shape."""
    g = oracle.group_quantize(np.ones((2, 3, 16), np.float32), [6])
    assert tuple(g.shape) == (6, 16)


def test_group_sr_stream_wraps_mod_2_32():
    """SPEC 9.1 / 10.2: group g draws from counter word (offset + g) mod 2^32. offset = 2^32 - 1, splits [1, 1]:
    group 0 uses word 2^32 - 1, group 1 wraps to word 0. Each group is one row of 16 values with supplied amax 2688
    (S_enc = 1) and block amax 12 (multiplier 0.5, as in test_columnwise_sr_uses_plane_1_counters); the codes are
    SPEC 3.4 on x * 0.5 with the bytes of Philox((0, 0, plane 0, word), (seed, 0))."""
    from spec_scalar import sr_scalar

    from oracle.fp4_numpy import unpack_fp4
    from oracle.philox import philox4x32

    row = np.array([12, 5, 7, -1, 0.5, 1.5, 2.5, 3.5, 10, 11, -0.0, 0.3, -3, 9, 0.4, -12], np.float32)
    x = np.stack([row, row])
    seed = 99
    g = oracle.group_quantize(x, [1, 1], amax=[2688.0, 2688.0], rounding="sr", seed=seed, offset=2**32 - 1)
    for grp, word in ((0, 2**32 - 1), (1, 0)):
        words = philox4x32(np.array([0, 0, 0, word], np.uint32), np.array([seed, 0], np.uint32))
        got = unpack_fp4(g.row_planes[grp].data, 16)[0]
        for c in range(16):
            byte = (int(words[c // 4]) >> (8 * (c % 4))) & 0xFF
            assert got[c] == sr_scalar(np.float32(row[c]) * np.float32(0.5), byte), (grp, c)


def test_group_quantize_records_its_options():
    g = oracle.group_quantize(np.ones((4, 16), np.float32), [4], rounding="sr", seed=7, offset=11)
    assert g.options["seed"] == 7 and g.options["offset"] == 11 and g.options["rounding"] == "sr"


# ------------------------------------------------------------------------------------------------ planes


def test_row_scaled_plane_refuses_too_few_amaxes():
    """SPEC 5.7: one amax per row; one amax for two rows is refused (not broadcast)."""
    d, s = np.zeros((2, 8), np.uint8), np.zeros((2, 1), np.uint8)
    with pytest.raises(ValueError, match=r"one amax per row \(2\), got 1"):
        QuantizedPlane(d, s, np.ones(1, np.float32), (2, 16), row_scaled=True)


def test_plane_refuses_other_global_scale_max():
    d, s = np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8)
    for g in (512, 447, 6):
        with pytest.raises(ValueError, match="global_scale_max must be the integer 448 or 256"):
            QuantizedPlane(d, s, 1.0, (1, 16), global_scale_max=g)


def test_plane_amax_types():
    d, s = np.zeros((2, 8), np.uint8), np.zeros((2, 1), np.uint8)
    p = QuantizedPlane(d, s, 3.0, (2, 16))
    assert type(p.amax) is np.float32
    p = QuantizedPlane(d, s, [1.0, 2.0], (2, 16), row_scaled=True)
    assert p.amax.dtype == np.float32 and p.amax.shape == (2,)


def test_plane_repr_mentions_only_non_default_g():
    d, s = np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8)
    assert "global_scale_max" not in repr(QuantizedPlane(d, s, 1.0, (1, 16)))
    assert "global_scale_max=256" in repr(QuantizedPlane(d, s, 1.0, (1, 16), global_scale_max=256))


def test_tensor_buffers_amax_is_float32_of_shape_1():
    """NVFP4Tensor.buffers(): row_amax float32 [1] (a kernel's amax buffer), swizzled scales padded per SPEC 8.2."""
    t = oracle.quantize(np.ones((2, 16), np.float32))
    b = t.buffers()
    assert b["row_amax"].dtype == np.float32 and b["row_amax"].shape == (1,)
    assert b["row_scales_swizzled"].size == 128 * 4
    # SPEC 8.2: rows 0 and 1 at bytes 0 and 16; every other byte (padding) 0x00
    want = np.zeros(512, np.uint8)
    want[0], want[16] = t.row.scales[0, 0], t.row.scales[1, 0]
    assert np.array_equal(b["row_scales_swizzled"], want)


# ------------------------------------------------------------------------------------------------ SPEC 11 (dequantize)


def test_dequantize_negative_scale_byte_te():
    """SPEC 11.2: any scale byte is valid. 0xB8 is E4M3 -1.0; code 0x2 (+1.0), amax 2688:
    f = (-1 * 2688) * fp32(1/2688) = -1.0 (value -1.0)."""
    p = _plane(0x2, 0xB8, 2688.0)
    sf = _e4m3(0xB8)
    assert sf == -1.0
    f = np.float32(np.float32(sf * np.float32(2688.0)) * RCP_2688)
    got = dequantize(p)
    assert _bits(got).tolist() == [[_bits(f * _e2m1(0x2)).item()] * 16]
    assert got[0, 0] == -1.0


def test_dequantize_negative_scale_byte_torchao_noscale():
    """SPEC 11.1 torchao_noscale: f = decode(byte); 0xC0 = -2.0, code 0x3 (1.5) -> -3.0."""
    p = _plane(0x3, 0xC0, 1.0, rule="torchao_noscale")
    assert _e4m3(0xC0) == -2.0
    assert np.all(dequantize(p) == np.float32(-3.0))
    assert block_decode_scales(p).tolist() == [[-2.0]]


def test_dequantize_torchao_noscale_has_no_per_tensor_factor():
    """SPEC 11.1: torchao_noscale's f is decode(byte) alone (amax 2688 would give P = 1 and hide it; 5376 gives 2)."""
    p = _plane(0x2, 0x38, 5376.0, rule="torchao_noscale")
    assert np.all(dequantize(p) == np.float32(1.0))


@pytest.mark.parametrize("byte", [0x7F, 0xFF])
def test_dequantize_nan_scale_makes_the_block_nan(byte):
    """SPEC 11.2: a NaN scale byte (0x7F / 0xFF) makes its block NaN, under every rule; the other row's block is not."""
    for rule in ("te", "torchao", "torchao_noscale"):
        data = np.full((2, 8), 0x22, np.uint8)
        scales = np.array([[byte], [0x38]], np.uint8)
        got = dequantize(QuantizedPlane(data, scales, 2688.0, (2, 16), rule=rule))
        assert np.all(np.isnan(got[0])), rule
        assert np.all(got[1] == 1.0), rule


def test_dequantize_negative_zero_scale_keeps_signs():
    """SPEC 11.2: the sign of zero is defined. Scale byte 0x80 (-0.0), amax 2688: f = (-0 * 2688) * fp32(1/2688) = -0.0;
    code +1.0 gives -0.0, code -1.0 (0xA) gives +0.0."""
    data = np.zeros((1, 8), np.uint8)
    data[0, :4] = 0x22  # elements 0..7: +1.0
    data[0, 4:] = 0xAA  # elements 8..15: -1.0
    got = dequantize(QuantizedPlane(data, np.array([[0x80]], np.uint8), 2688.0, (1, 16)))
    assert _bits(got[0, :8]).tolist() == [0x80000000] * 8
    assert _bits(got[0, 8:]).tolist() == [0] * 8


def test_dequantize_subnormal_scales():
    """SPEC 2.2 / 11.1: subnormal E4M3 scales are m * 2^-9, not flushed. Byte 0x01 = 2^-9, 0x07 = 7 * 2^-9;
    amax 2688, code 6.0 (0x7): f = (sf * 2688) * fp32(1/2688)."""
    for byte, sf in ((0x01, 2.0**-9), (0x07, 7 * 2.0**-9), (0x81, -(2.0**-9))):
        assert _e4m3(byte) == np.float32(sf)
        f = np.float32(np.float32(np.float32(sf) * np.float32(2688.0)) * RCP_2688)
        got = dequantize(_plane(0x7, byte, 2688.0))
        assert _bits(got).tolist() == [[_bits(np.float32(6.0) * f).item()] * 16], hex(byte)
        assert got[0, 0] != 0


def test_dequantize_infinite_amax():
    """SPEC 13: a tensor amax of +Inf makes every factor sf * Inf: NaN for sf = 0 (byte 0x00), +-Inf otherwise."""
    data = np.full((3, 8), 0x22, np.uint8)
    scales = np.array([[0x00], [0x38], [0xB8]], np.uint8)
    got = dequantize(QuantizedPlane(data, scales, np.inf, (3, 16)))
    assert np.all(np.isnan(got[0])) and np.all(got[1] == np.inf) and np.all(got[2] == -np.inf)


def test_dequantize_factor_not_rounded_through_float16():
    """SPEC 11.1 in fp32: sf = 2^-9 (byte 0x01), amax 1: f = (2^-9 * 1) * fp32(1/2688) ~ 7.3e-7, below float16's
    subnormal quantum region (an fp16 intermediate would lose it)."""
    sf = _e4m3(0x01)
    f = np.float32(np.float32(sf * np.float32(1.0)) * RCP_2688)
    got = dequantize(_plane(0x2, 0x01, 1.0))
    assert _bits(got).tolist() == [[_bits(f).item()] * 16]
    assert _bits(block_decode_scales(_plane(0x2, 0x01, 1.0))).tolist() == [[_bits(f).item()]]


def test_dequantize_is_float32():
    got = dequantize(_plane(0x2, 0x38, 2688.0))
    assert got.dtype == np.float32 and got.shape == (1, 16)


def test_dequantize_refuses_non_planes():
    with pytest.raises(TypeError, match="dequantize takes a QuantizedPlane"):
        dequantize(oracle.quantize(np.ones((1, 16), np.float32)))  # an NVFP4Tensor, not its plane


def test_dequantize_per_block_signs_and_codes():
    """SPEC 11.1 elementwise: value_i = E2M1(code_i) * f, with every code 0..15 in one block (signs per element)."""
    codes = np.arange(16, dtype=np.uint8)
    data = (codes[0::2] | (codes[1::2] << 4)).reshape(1, 8)  # SPEC 2.3: element 2i low nibble
    p = QuantizedPlane(data, np.array([[0x40]], np.uint8), 2688.0, (1, 16))  # 0x40 = 2.0
    f = np.float32(np.float32(_e4m3(0x40) * np.float32(2688.0)) * RCP_2688)
    want = np.array([_e2m1(c) * f for c in codes], np.float32)
    assert _bits(dequantize(p)[0]).tolist() == _bits(want).tolist()


def test_scaled_ints_zero_for_nan_scales():
    """SPEC 12.3 (scaled_ints): integer multiples of 2^-10; a NaN scale counts as 0 there (handled separately)."""
    data = np.full((2, 8), 0x22, np.uint8)  # +1.0 -> 2 * 1.0 = 2
    p = QuantizedPlane(data, np.array([[0x7F], [0x38]], np.uint8), 1.0, (2, 16))
    got = scaled_ints(p)
    assert got[0].tolist() == [0] * 16
    assert got[1].tolist() == [2 * 512] * 16  # 2 * (2^9 * 1.0)


# ------------------------------------------------------------------------------------------------ SPEC 16.4


def test_bias_grad_refuses_numpy_scalars_as_non_arrays():
    with pytest.raises(TypeError, match="NumPy array"):
        oracle.grouped_bias_grad(np.float32(1.0), [1])


def test_row_scaled_grouped_tensor_has_e_zero_col_amaxes():
    """GroupedNVFP4Tensor: a plane not requested has amaxes 0, float32 [E]; a row-scaled tensor (SPEC 5.7) of the
    rowwise plane alone keeps one row amax per row and E zeros for the columnwise plane it does not have."""
    g = oracle.group_quantize(np.ones((5, 16), np.float32), [2, 0, 3], row_scaled=True)
    assert g.row_amax.dtype == np.float32 and g.row_amax.tolist() == [1.0] * 5
    assert g.col_amax.dtype == np.float32 and g.col_amax.tolist() == [0.0, 0.0, 0.0]
