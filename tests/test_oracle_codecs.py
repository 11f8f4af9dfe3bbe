"""SPEC 2-3: codecs against ml_dtypes / torch (independent implementations) and hand-worked vectors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from oracle.fp4_numpy import (
    decode_e2m1,
    decode_e4m3,
    encode_e2m1,
    encode_e4m3,
    encode_e4m3_reference,
    f32_to_bf16_bits,
    pack_fp4,
    unpack_fp4,
)


def _all_bf16() -> np.ndarray:
    return (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)


def _all_fp16() -> np.ndarray:
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _random_f32(n: int = 1_000_000) -> np.ndarray:
    rng = np.random.default_rng(1234)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).copy()
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 2.0**-10, 2.0**-9, 2.0**-6,
                         0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 1e-45, -1e-45, 3.4028235e38], np.float32)
    # dense region around the interesting magnitudes
    near = (rng.standard_normal(n // 2) * np.exp2(rng.integers(-12, 10, n // 2))).astype(np.float32)
    return np.concatenate([x, near, specials, -specials])


SOURCES = {"bf16": _all_bf16, "fp16": _all_fp16, "random_f32": _random_f32}


def _ref_e4m3(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _ref_e2m1(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x0F


@pytest.mark.parametrize("source", list(SOURCES))
def test_encode_e4m3_matches_ml_dtypes(source):
    x = SOURCES[source]()
    got = encode_e4m3(x)
    fin = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        ref = _ref_e4m3(x)
    assert np.array_equal(got[fin], ref[fin])
    assert np.all(got[~fin] == 0x7F)  # SPEC 3.2: NaN -> 0x7F


@pytest.mark.parametrize("source", list(SOURCES))
def test_encode_e2m1_matches_ml_dtypes(source):
    x = SOURCES[source]()
    got = encode_e2m1(x)
    fin = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        ref = _ref_e2m1(x)
    assert np.array_equal(got[fin], ref[fin])
    assert np.all(got[~fin] == 0x7)  # SPEC 3.1: NaN -> +6


@pytest.mark.parametrize("source", list(SOURCES))
def test_bf16_rounding_matches_ml_dtypes(source):
    x = SOURCES[source]()
    got = f32_to_bf16_bits(x)
    with np.errstate(invalid="ignore"):  # (ml_dtypes warns on the NaN inputs, compared separately below)
        ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    fin = ~np.isnan(x)
    assert np.array_equal(got[fin], ref[fin])
    # SPEC 3.3: a NaN becomes the canonical quiet NaN 0x7FC0 with x's sign (the payload is not kept)
    nan_bits = np.uint16(0x7FC0) | (np.signbit(x[~fin]).astype(np.uint16) << np.uint16(15))
    assert np.array_equal(got[~fin], nan_bits)


def test_decode_e4m3_matches_ml_dtypes_all_bytes():
    b = np.arange(256, dtype=np.uint8)
    ref = b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    got = decode_e4m3(b)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.array_equal(got[ok].view(np.uint32), ref[ok].view(np.uint32))  # -0.0 included


def test_decode_e2m1_matches_ml_dtypes_all_codes():
    c = np.arange(16, dtype=np.uint8)
    ref = c.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert np.array_equal(decode_e2m1(c).view(np.uint32), ref.view(np.uint32))


# Hand-worked vectors (SPEC 3.1): ties to even, saturation, signed zero, NaN.
E2M1_VECTORS = [
    (0.25, 0x0), (0.2500001, 0x1), (0.75, 0x2), (0.7499999, 0x1), (1.25, 0x2), (1.2500001, 0x3),
    (1.75, 0x4), (2.5, 0x4), (2.5000002, 0x5), (3.5, 0x6), (5.0, 0x6), (5.0000005, 0x7), (6.0, 0x7),
    (1e30, 0x7), (np.inf, 0x7), (-np.inf, 0xF), (-0.0, 0x8), (-1e-30, 0x8), (-0.25, 0x8), (-0.3, 0x9),
    (np.nan, 0x7), (-np.nan, 0x7), (-6.5, 0xF),
]


@pytest.mark.parametrize("value,code", E2M1_VECTORS)
def test_e2m1_hand_vectors(value, code):
    assert encode_e2m1(np.float32(value)) == code


E4M3_VECTORS = [
    (448.0, 0x7E), (464.0, 0x7E), (1e9, 0x7E), (np.inf, 0x7E), (-np.inf, 0xFE), (np.nan, 0x7F),
    (2.0**-9, 0x01), (2.0**-10, 0x00), (1.5 * 2.0**-10, 0x01), (2.0**-6, 0x08), (-0.0, 0x80),
    (1.0, 0x38), (1.0625, 0x38), (1.1875, 0x3A), (17.0, 0x58), (18.0, 0x59), (240.0, 0x77),
]


@pytest.mark.parametrize("value,byte", E4M3_VECTORS)
def test_e4m3_hand_vectors(value, byte):
    assert encode_e4m3(np.float32(value)) == byte


def test_python_and_float64_inputs_round_once_to_fp32():
    """SPEC 1.3: a float64 input (a Python float, a float64 array) is rounded to fp32 once, by RNE, then encoded."""
    # 0.25 + 2^-20 is an fp32 value above SPEC 3.1's 0.25 tie: index 1 (through fp16 it would become 0.25: index 0)
    assert int(encode_e2m1(0.25 + 2.0**-20)) == 0x1
    # 2^-10 + 2^-26 lies above E4M3's midpoint 2^-10 between 0 and 2^-9 (SPEC 3.2): byte 0x01 (through fp16: 0x00)
    assert encode_e4m3(np.array([2.0**-10 + 2.0**-26])).tolist() == [0x01]
    assert np.float32(2.0**-10 + 2.0**-26).astype(ml_dtypes.float8_e4m3fn).view(np.uint8) == 0x01  # (independent)


def test_codecs_keep_the_input_shape():
    """Every codec returns its input's shape, a 0-d value included (bytes checked against ml_dtypes)."""
    for shape in [(), (1,), (3, 2)]:
        x = np.full(shape, 1.1875, np.float32)
        e4 = encode_e4m3(x)
        assert e4.shape == shape and e4.dtype == np.uint8
        assert np.array_equal(e4, x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))  # 0x3A (tie to even)
        assert encode_e4m3_reference(x).shape == shape
        e2 = encode_e2m1(x)
        assert e2.shape == shape and np.array_equal(e2, x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8))
        assert decode_e4m3(e4).shape == shape and decode_e2m1(e2).shape == shape


def test_pack_low_nibble_first_and_roundtrip():
    codes = np.array([[0x1, 0x2, 0xF, 0x8, 0x7]], np.uint8)
    packed = pack_fp4(codes)
    assert packed.tolist() == [[0x21, 0x8F, 0x07]]  # element 2i low nibble, 2i+1 high nibble
    assert np.array_equal(unpack_fp4(packed, 5), codes)
    rng = np.random.default_rng(0)
    c = rng.integers(0, 16, (7, 64), dtype=np.uint8)
    assert np.array_equal(unpack_fp4(pack_fp4(c), 64), c)


def test_codec_errors():
    with pytest.raises(TypeError):
        decode_e4m3(np.zeros(3, np.int32))
    with pytest.raises(ValueError):
        unpack_fp4(np.zeros((2, 3), np.uint8), 8)
    with pytest.raises(TypeError):
        encode_e4m3(np.array(["a"]))


@pytest.mark.parametrize("source", list(SOURCES))
def test_e4m3_table_equals_direct_rule(source):
    from oracle.fp4_numpy import encode_e4m3_reference

    x = SOURCES[source]()
    assert np.array_equal(encode_e4m3(x), encode_e4m3_reference(x))


def test_round_to_bf16_equals_spec_formula():
    from oracle.fp4_numpy import round_to_bf16

    x = _random_f32()
    fin = ~np.isnan(x)
    got = round_to_bf16(x)
    with np.errstate(invalid="ignore"):  # (NaN inputs: compared as a class below)
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)  # ml_dtypes' round to nearest even
    assert np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32))
    assert np.all(np.isnan(got[~fin]))


def _e2m1_index_three_roundings(a: np.ndarray) -> np.ndarray:
    """SPEC 3.6 as the bf16 fast quantizer computes it (fp32 RN arithmetic; RN(a/2 + c) via float64, exact)."""
    magic = np.float32(1.5 * 2.0**23)
    with np.errstate(over="ignore"):
        r2 = a * np.float32(2) + magic  # 2a is exact: one rounding, as the FMA
        r1 = a + np.float32(magic + 2)
        rh = (a.astype(np.float64) * 0.5 + float(magic + 4)).astype(np.float32)  # a/2 + c exact in float64
    m = np.minimum(np.minimum(r2, r1), np.minimum(rh, np.float32(magic + 7)))
    return (m.view(np.uint32) - magic.view(np.uint32)).astype(np.int64)


def test_e2m1_three_roundings_form_equals_threshold_sum():
    """SPEC 3.6 against the threshold sum of SPEC 3.1 (written out here, not the oracle's encoder): every fp32
    magnitude below 8 whose low 8 bits are 0, 1, 2, 0x80, 0xFE or 0xFF, every pattern within 4096 ulps of each
    tie and grid point, subnormals, and large values up to +Inf."""
    k = np.arange(0x41000000 >> 8, dtype=np.uint32) << 8
    bits = [k | low for low in (0, 1, 2, 0x80, 0xFE, 0xFF)]
    points = np.array([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7], np.float32).view(np.uint32)
    bits.append((points[:, None].astype(np.int64) + np.arange(-4096, 4097)).ravel().astype(np.uint32))
    bits.append(np.arange(0, 1 << 20, dtype=np.uint32))  # subnormals and the smallest normals
    a = np.concatenate(bits).view(np.float32)
    a = np.concatenate([a, np.array([8, 100, 2.0**22, 2.0**24, 3.4028235e38, np.inf], np.float32)])
    t = a.astype(np.float64)
    expect = ((t > 0.25).astype(np.int64) + (t >= 0.75) + (t > 1.25) + (t >= 1.75) + (t > 2.5) + (t >= 3.5)
              + (t > 5))
    got = _e2m1_index_three_roundings(a)
    bad = np.flatnonzero(got != expect)
    assert bad.size == 0, f"{bad.size} mismatches, first a={a[bad[0]]!r} got {got[bad[0]]} want {expect[bad[0]]}"
    # without the clamp term the form is only valid below 7: check that the claim of SPEC 3.6 is tight
    below = a < 7
    magic = np.float32(1.5 * 2.0**23)
    r2, r1 = a[below] * np.float32(2) + magic, a[below] + np.float32(magic + 2)
    rh = (a[below].astype(np.float64) * 0.5 + float(magic + 4)).astype(np.float32)
    unclamped = (np.minimum(np.minimum(r2, r1), rh).view(np.uint32) - magic.view(np.uint32)).astype(np.int64)
    assert np.array_equal(unclamped, expect[below])
    assert _e2m1_index_three_roundings(np.array([7.0], np.float32))[0] == 7
    # the second form of SPEC 3.6 (a < 7): one constant added per candidate, the minimum over 16-bit lanes
    c = [(a[below] + np.float32(v)).view(np.uint32) for v in (0.75 * 2.0**23, 1.5 * 2.0**23 + 2, 3 * 2.0**23 + 8)]
    low = np.minimum(np.minimum(c[0] & 0xFFFF, c[1] & 0xFFFF), c[2] & 0xFFFF).astype(np.int64)
    high = np.minimum(np.minimum(c[0] >> 16, c[1] >> 16), c[2] >> 16)
    assert np.all(high == 0x4AC0)
    assert np.array_equal(low, expect[below])


def _e2m1_index_bit_form(a: np.ndarray, threshold: float) -> np.ndarray:
    """SPEC 3.6's bit form on a = min(|y|, 6) (NaN -> 6), with the rounding of the encoding above ``threshold`` (1
    in the general kernels, 2 in e2m1_biased) and the magic-constant sum below it."""
    a = np.fmin(np.abs(a), np.float32(6)).astype(np.float32)
    a = np.where(np.isnan(a), np.float32(6), a)
    b = a.view(np.uint32).astype(np.int64)
    idx_bits = ((b + 0x1FFFFF + ((b >> 22) & 1)) >> 22) - 252
    if threshold == 1:
        low = (a * np.float32(2) + np.float32(1.5 * 2.0**23)).view(np.uint32).astype(np.int64) - 0x4B400000
    else:
        low = (a + np.float32(1.5 * 2.0**22)).view(np.uint32).astype(np.int64) - 0x4AC00000
    return np.where(a < threshold, low, idx_bits)


@pytest.mark.parametrize("threshold", [1, 2])
def test_e2m1_bit_form_equals_threshold_sum(threshold):
    """SPEC 3.6's bit form (numerics.cuh's e2m1_rn, fast_bf16.cuh's e2m1_biased) against the threshold sum of SPEC
    3.1 written out here: every fp32 magnitude up to 8 whose low 8 bits are 0, 1, 0x80 or 0xFF, every pattern within
    4096 ulps of each tie and grid point, subnormals, large values, +Inf and NaN (index 7)."""
    k = np.arange(0x41000000 >> 8, dtype=np.uint32) << 8
    bits = [k | low for low in (0, 1, 0x80, 0xFF)]
    points = np.array([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6], np.float32).view(np.uint32)
    bits.append((points[:, None].astype(np.int64) + np.arange(-4096, 4097)).ravel().astype(np.uint32))
    bits.append(np.arange(0, 1 << 20, dtype=np.uint32))
    a = np.concatenate(bits).view(np.float32)
    a = np.concatenate([a, -a, np.array([100, 2.0**24, 3.4028235e38, np.inf, -np.inf], np.float32)])
    t = np.abs(a.astype(np.float64))
    expect = ((t > 0.25).astype(np.int64) + (t >= 0.75) + (t > 1.25) + (t >= 1.75) + (t > 2.5) + (t >= 3.5)
              + (t > 5))
    got = _e2m1_index_bit_form(a, threshold)
    bad = np.flatnonzero(got != expect)
    assert bad.size == 0, f"{bad.size} mismatches, first a={a[bad[0]]!r} got {got[bad[0]]} want {expect[bad[0]]}"
    assert _e2m1_index_bit_form(np.array([np.nan], np.float32), threshold)[0] == 7


def test_e2m1_sr_floor_form_equals_spec_3_4():
    """SPEC 3.7 (the bf16 fast quantizer's stochastic rounding) against SPEC 3.4 written out here with float64
    floors, for every random byte: every fp32 magnitude below 8 whose low 12 bits are 0 or 0xFFF, 512 ulps around
    each grid point and step change, subnormals, and large values up to +Inf."""
    k = np.arange(0x41000000 >> 12, dtype=np.uint32) << 12
    points = np.array([0.5, 1, 1.5, 2, 3, 4, 6, 7, 8], np.float32).view(np.uint32)
    near = (points[:, None].astype(np.int64) + np.arange(-512, 513)).ravel().astype(np.uint32)
    a = np.concatenate([k, k | 0xFFF, near, np.arange(0, 1 << 12, dtype=np.uint32)]).view(np.float32)
    a = np.concatenate([a, np.array([100, 2.0**22, 2.0**24, 3.4028235e38, np.inf], np.float32)])
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    # SPEC 3.4's step(a), as a float32
    step_a = np.where(a < 2, np.float32(0.5), np.where(a < 4, np.float32(1), np.float32(2))).astype(np.float32)
    # SPEC 3.7's P: the bits of a clamped to [1.0, 4.0], mantissa cleared
    p = (np.clip(a.view(np.uint32), 0x3F800000, 0x40800000) & 0xFF800000).view(np.float32)
    for r in range(256):
        u_step = (np.float32(r / 256) * step_a).astype(np.float32)  # exact
        r512 = (np.array([(r << 15) | 0x3F800000], np.uint32).view(np.float32) * np.float32(0.5) - np.float32(0.5))
        assert r512[0] == np.float32(r / 512)  # fma(1 + r/256, 0.5, -0.5) is exact
        prod = (r512[0] * p).astype(np.float32)
        assert np.array_equal(prod, u_step)  # (r / 512) P = u step(a), exactly
        with np.errstate(over="ignore", invalid="ignore"):
            j = (a + u_step).astype(np.float32).astype(np.float64)  # SPEC 3.4's j: one fp32 rounding
            step_j = np.where(j < 2, 0.5, np.where(j < 4, 1.0, 2.0))
            expect = np.searchsorted(grid, np.minimum(np.floor(j / step_j) * step_j, 6.0))
            cap = 2.0**22  # a floor past M's exact range is at least 7 (SPEC 3.7): the cap's value
            got = np.minimum(np.minimum(np.minimum(np.floor(np.minimum(2 * j, cap)), np.floor(np.minimum(j, cap)) + 2),
                                        np.floor(np.minimum(j / 2, cap)) + 4), 7).astype(np.int64)
        bad = np.flatnonzero(got != expect)
        assert bad.size == 0, f"r={r}: {bad.size} mismatches, first a={a[bad[0]]!r}"


@pytest.mark.parametrize("call, exc, match", [
    (lambda: decode_e2m1(np.zeros(4, np.float32)), TypeError, "E2M1 codes must be an integer array"),
    (lambda: pack_fp4(np.zeros((1, 4), np.float32)), TypeError, "E2M1 codes must be an integer array"),
    (lambda: unpack_fp4(np.zeros((1, 2), np.int8), 4), TypeError, "packed FP4 data must be uint8"),
    (lambda: unpack_fp4(np.zeros((1, 2), np.uint8), 6), ValueError, "packed last dimension 2 does not hold 6 codes"),
])
def test_codec_refusals(call, exc, match):
    """The packing and code helpers refuse what is not codes (SPEC 2.1, 2.3: integer codes, two per uint8 byte)."""
    with pytest.raises(exc, match=match):
        call()


def test_codecs_refuse_values_float32_cannot_hold():
    """The fp32 codecs take float32 values: a float64 or integer input whose every value is a float32 value is
    taken exactly (Python floats such as 2.5), one that is not is a ValueError instead of a silent second rounding
    (2.5000001 would become 2.5 first, then E2M1 2 by the tie rule, where the real value rounds to 3)."""
    from oracle import fp4_numpy as F

    assert F.encode_e2m1(2.5).tolist() == 4 and F.encode_e2m1([np.nan, np.inf, 3]).tolist() == [7, 7, 5]
    assert F.encode_e4m3(np.array([1.0625])).tolist() == [0x38]  # a tie between 1 (0x38) and 1.125 (0x39): even
    for f, bad in ((F.encode_e2m1, [2.5000001]), (F.encode_e4m3, [1.0625 + 1e-9]), (F.encode_e4m3, [1e300]),
                   (F.f32_to_bf16_bits, [1 + 2**-8 + 1e-12]), (F.encode_e2m1, np.array([2**30 + 1]))):
        with pytest.raises(ValueError, match="is not a float32 value"):
            f(np.asarray(bad))


def test_bf16_bits_and_fp4_codes_are_checked():
    from oracle import fp4_numpy as F

    assert F.bf16_bits_to_f32(np.array([0x3F80, 0xBF80], np.uint16)).tolist() == [1.0, -1.0]
    assert F.bf16_bits_to_f32([0x4040]).tolist() == [3.0]
    with pytest.raises(TypeError, match="integers"):
        F.bf16_bits_to_f32(np.array([1.0], np.float32))
    for bad in ([0x1FFFF], [-1]):
        with pytest.raises(ValueError, match="0..0xFFFF"):
            F.bf16_bits_to_f32(np.array(bad))
    assert F.pack_fp4(np.array([1, 15], np.uint8)).tolist() == [0xF1]
    with pytest.raises(ValueError, match="0..15"):
        F.pack_fp4(np.array([16, 17], np.uint8))
