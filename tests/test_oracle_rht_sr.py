"""SPEC 7 (RHT) against an independent float64 matrix transform, SPEC 3.4 / 10 (stochastic rounding, Philox)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_scalar import rht_block, rht_block_is_plain, sr_random_byte_source, te_amax, te_sr_plane

import oracle
from oracle.fp4_numpy import decode_e2m1, round_to_bf16, unpack_fp4
from oracle.philox import philox4x32, sr_random_bytes
from oracle.rht import hadamard16, rht_sign_vector
from oracle.rounding import sr_encode_e2m1

# ---- Philox4x32-10: Random123 known-answer vectors (kat_vectors) -------------------------------------------
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


@pytest.mark.parametrize("ctr,key,out", KAT)
def test_philox_known_answers(ctr, key, out):
    assert philox4x32(np.array(ctr, np.uint32), np.array(key, np.uint32)).tolist() == out


def test_philox_vectorized_equals_single_calls():
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2**32, (50, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    batch = philox4x32(ctr, key)
    for i in range(50):
        assert np.array_equal(batch[i], philox4x32(ctr[i], key))


def test_philox_with_one_key_per_counter():
    """philox4x32 with a key per counter (shape [n, 2]) gives each counter its own key's output."""
    ctr = np.array([k[0] for k in KAT], np.uint32)
    key = np.array([k[1] for k in KAT], np.uint32)
    assert philox4x32(ctr, key).tolist() == [k[2] for k in KAT]


@pytest.mark.parametrize("offset", [77, 2**31 + 3])
def test_sr_counter_mapping(offset):
    """SPEC 10.2: element (r, c) of plane p uses byte c%4 of word (c%16)/4 of Philox((c/16, r, p, offset+g), seed);
    counter word 3 is (offset + g) mod 2^32, so an offset past 2^31 keeps its top bit."""
    seed = 0x123456789ABCDEF0
    rb = sr_random_bytes(3, 48, seed=seed, offset=offset, plane=1, group=2)
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    for r in range(3):
        for c in (0, 5, 17, 47):
            w = philox4x32(np.array([c // 16, r, 1, (offset + 2) % 2**32], np.uint32), key)[(c % 16) // 4]
            assert rb[r, c] == (int(w) >> (8 * (c % 4))) & 0xFF


# ---- SR rounding rule (SPEC 3.4) -----------------------------------------------------------------------------
SR_VECTORS = [  # (y, byte, code)
    (0.3, 0, 0x0), (0.3, 255, 0x1), (0.3, 102, 0x0), (0.3, 103, 0x1),  # 0.3 + u*0.5 crosses 0.5 at u = 0.4
    (-0.3, 255, 0x9), (2.2, 0, 0x4), (2.2, 205, 0x5), (2.2, 204, 0x4), (5.5, 64, 0x7), (5.5, 63, 0x6),
    (6.0, 255, 0x7), (100.0, 0, 0x7), (-np.inf, 3, 0xF), (np.nan, 9, 0x7), (-np.nan, 9, 0x7), (-0.0, 0, 0x8),
    (-0.0, 255, 0x8),
    (1.75, 128, 0x4), (1.75, 127, 0x3),
]


@pytest.mark.parametrize("y,byte,code", SR_VECTORS)
def test_sr_hand_vectors(y, byte, code):
    assert sr_encode_e2m1(np.float32(y), np.uint8(byte)) == code


@given(st.floats(min_value=0, max_value=float(np.float32(5.99)), width=32))
@settings(max_examples=200, deadline=None)
def test_sr_is_unbiased_over_all_bytes(y):
    """Averaged over the 256 random bytes, SR reproduces y to within step/256 (no bias)."""
    y = np.float32(y)
    codes = sr_encode_e2m1(np.full(256, y, np.float32), np.arange(256, dtype=np.uint8))
    mean = decode_e2m1(codes).astype(np.float64).mean()
    step = 0.5 if y < 2 else (1.0 if y < 4 else 2.0)
    assert abs(mean - float(y)) <= step / 256 + 1e-7


def _sr_row_codes_by_hand(x: np.ndarray, seed: int, offset: int) -> np.ndarray:
    """The rowwise SR plane's codes by spec_scalar.te_sr_plane, its random bytes from the Philox function (checked
    against Random123's known answers above) at the counters (c/16, r, 0, offset) of SPEC 10.2."""
    return te_sr_plane(x, te_amax(x), sr_random_byte_source(philox4x32, seed, 0, offset))[0]


def test_quantize_sr_uses_counter_mapping_and_group_offset():
    """The rowwise SR plane of quantize and of group_quantize's groups (offset + g, SPEC 10.2) against the element-wise
    transcription above; the scale bytes are the round-to-nearest ones."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 32)).astype(np.float32)
    t = oracle.quantize(x, rounding="sr", seed=9, offset=4)
    assert np.array_equal(t.row.scales, oracle.quantize(x).row.scales)  # scales are always RN
    assert np.array_equal(unpack_fp4(t.row.data, 32), _sr_row_codes_by_hand(x, 9, 4))
    g = oracle.group_quantize(x, [2, 3], rounding="sr", seed=9, offset=4)
    assert np.array_equal(unpack_fp4(g.row_planes[0].data, 32), _sr_row_codes_by_hand(x[:2], 9, 4))
    assert np.array_equal(unpack_fp4(g.row_planes[1].data, 32), _sr_row_codes_by_hand(x[2:], 9, 5))
    big_seed = 0x123456789ABCDEF0  # both key words nonzero
    t = oracle.quantize(x, rounding="sr", seed=big_seed, offset=0)
    assert np.array_equal(unpack_fp4(t.row.data, 32), _sr_row_codes_by_hand(x, big_seed, 0))


# ---- RHT (SPEC 7) ---------------------------------------------------------------------------------------------
def test_sign_mask_default():
    assert rht_sign_vector().tolist() == [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def _narrow_bf16(rng, shape):
    """bf16 values whose exponents span <= 8 binades, so all fp32 butterfly sums are exact."""
    v = rng.integers(-255, 256, shape) * np.exp2(rng.integers(-4, 4, shape) - 6.0)
    return v.astype(np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.torch
def test_rht_matches_torch_matmul_when_exact():
    import torch

    rng = np.random.default_rng(0)
    x = _narrow_bf16(rng, (64, 64))
    for mask in (0xD7E8, 0, 0xFFFF, 0x1234):
        s = torch.tensor(rht_sign_vector(mask), dtype=torch.float64)
        h = torch.tensor(hadamard16(), dtype=torch.float64)
        xt = torch.from_numpy(x.astype(np.float32)).double().reshape(-1, 16)
        ref = ((xt * s) @ h / 4).to(torch.bfloat16).float().numpy().reshape(64, 64)
        assert np.array_equal(oracle.rht(x, mask), ref)


def test_rht_matches_scalar_spec_everywhere():
    """Bit for bit (the sign of a zero result too: -0 encodes as E2M1 0x8, +0 as 0x0) on random blocks, an Inf and a
    NaN block, and blocks of zeros: +0 only, -0 only, mixed, and single nonzero values among zeros."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((12, 32)) * np.exp2(rng.integers(-40, 40, (12, 32)))).astype(ml_dtypes.bfloat16)
    x[0, 0] = np.inf
    x[1, 3] = np.nan
    x[2] = 0.0
    x[3] = -0.0
    x[4] = np.where(rng.random(32) < 0.5, -0.0, 0.0)
    x[5] = np.where(rng.random(32) < 0.5, -0.0, 0.0)
    x[5, [2, 20]] = [1.5, -3.0]
    x[6, :16] = 0.0  # a zero-padded block next to a random one
    for mask in (0xD7E8, 0xFFFF, 0x0001):
        y = oracle.rht(x, mask)
        xf = x.astype(np.float32)
        got_zero_signs = set()
        for r in range(12):
            for b in range(2):
                ref = round_to_bf16(np.array(rht_block(xf[r, 16 * b : 16 * b + 16], mask), np.float32))
                got = np.asarray(y[r, 16 * b : 16 * b + 16], np.float32)
                nan = np.isnan(ref)
                assert np.array_equal(np.isnan(got), nan), (mask, r, b)
                assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32)), (mask, r, b)
                got_zero_signs |= {bool(np.signbit(v)) for v in got[got == 0]}
        assert got_zero_signs == {False, True}  # premise: both signs of zero occur among the results


@given(st.integers(0, 2**16 - 1), st.integers(0, 2**31))
@settings(max_examples=50, deadline=None)
def test_rht_inverse(mask, seed):
    """H16/4 is orthogonal and symmetric: x = s * (H y / 4) up to the bf16 rounding of y."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 16)).astype(ml_dtypes.bfloat16)
    y = oracle.rht(x, mask).astype(np.float64)
    back = (y @ hadamard16() / 4) * rht_sign_vector(mask)
    scale = np.abs(x.astype(np.float64)).max(axis=1, keepdims=True)
    assert np.all(np.abs(back - x.astype(np.float64)) <= scale * 2.0**-7)


def test_columnwise_rht_plane_and_amax():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 32)).astype(ml_dtypes.bfloat16)
    t = oracle.quantize(x, columnwise=True, rht=True)
    xt = np.zeros((32, 32), np.float32)
    xt[:, :20] = x.astype(np.float32).T
    src = oracle.rht(xt.astype(ml_dtypes.bfloat16))  # padding zeros are mixed in (SPEC 6.2)
    assert t.col.amax == np.abs(src).max()
    assert t.row.amax == np.abs(x.astype(np.float32)).max()
    ref = oracle.quantize(src.astype(ml_dtypes.bfloat16), amax=t.col.amax).row
    assert np.array_equal(t.col.data, ref.data) and np.array_equal(t.col.scales, ref.scales)


# ---- SPEC 7.4: on plain blocks 7.2 gives the exact sum's bytes (what a tensor-core RHT must match) ---------------
def _plain(x: np.ndarray) -> np.ndarray:
    """SPEC 7.4's predicate per row of x [n, 16] (bf16 values as float32), with r = the start of the row's trailing
    zeros: spec_scalar.rht_block_is_plain, the scalar transcription, row by row."""
    zero = (x.view(np.uint32) & 0x7FFFFFFF) == 0
    r = 16 - np.cumprod(zero[:, ::-1], axis=1).sum(axis=1)
    return np.array([rht_block_is_plain(x[i], int(r[i])) for i in range(len(x))])


def _exact_form(x: np.ndarray) -> np.ndarray:
    """RN_bf16(S_j / 4) with the exact sum S_j (float64 is exact here: |S| / q < 2^24)."""
    s = rht_sign_vector(0xD7E8).astype(np.float64)
    exact = (x.astype(np.float64) * s) @ hadamard16() / 4
    return round_to_bf16(exact.astype(np.float32))  # exact / 4 is an fp32 number (SPEC 7.4)


def _random_blocks(rng, n: int, span_max: int, lo: int = 27, hi: int = 249) -> np.ndarray:
    """n blocks of bf16 values (as float32): r >= 2 nonzero values then 16 - r signed zeros; the exponent fields of
    the nonzero values lie in [e0, e0 + span] with both ends taken (positions p, q < r), inside [lo, hi]."""
    span = rng.integers(0, span_max + 1, n)
    e0 = rng.integers(lo, hi - span + 1)
    fields = e0[:, None] + rng.integers(0, span[:, None] + 1, (n, 16))
    r = rng.integers(2, 17, n)
    rows = np.arange(n)
    p = rng.integers(0, r)
    q = (p + 1 + rng.integers(0, r - 1)) % r  # another position below r
    fields[rows, p] = e0
    fields[rows, q] = e0 + span
    mant = rng.integers(0, 128, (n, 16))
    mant[rows, p] = rng.choice([0, 127], n)  # extremes of the significand
    mant[rows, q] = rng.choice([0, 127], n)
    sign = rng.integers(0, 2, (n, 16))
    bits = (sign << 15) | (fields << 7) | mant
    bits = np.where(np.arange(16)[None, :] < r[:, None], bits, sign << 15)  # the zero suffix, either sign
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_rht_plain_blocks_are_exact_sums():
    """SPEC 7.4: on plain blocks 7.2's butterfly gives RN_bf16(S / 4) of the exact sum, and never -0.0."""
    rng = np.random.default_rng(74)
    x = _random_blocks(rng, 40000, 12)
    # extremes: 16 values of the largest significand at the largest field (sums near 2^127), the smallest field,
    # exact cancellations (outputs +0.0), a single nonzero value followed by signed zeros
    top = np.full((2, 16), ((249 << 7) | 127) << 16, np.uint32).view(np.float32)
    top[1, ::2] *= -1
    low = np.full((1, 16), ((27 << 7) | 1) << 16, np.uint32).view(np.float32)
    cancel = np.zeros((3, 16), np.float32)
    cancel[0, :2] = 1.5
    cancel[1, :4] = [1.0, -1.0, 1.0, -1.0]
    cancel[2, 0] = -3.0
    cancel[2, 1:] = -0.0
    x = np.concatenate([x, top, low, cancel])
    plain = _plain(x)
    assert plain.mean() > 0.999  # the generator makes plain blocks
    # the predicate's edges: fields 27 and 249 and a span of 12 are plain, field 26, field 250 and a span of 13 not
    def block(*fields):
        return (np.array([(f << 7) | 1 for f in fields] + [0] * (16 - len(fields)), np.uint32) << 16).view(
            np.float32)[None]

    edges = np.concatenate([block(27, 39), block(249, 237), block(26, 30), block(250, 240), block(100, 113)])
    assert _plain(edges).tolist() == [True, True, False, False, False]
    x = x[plain]
    got = oracle.rht(x.astype(ml_dtypes.bfloat16), 0xD7E8)
    want = _exact_form(x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # bytes, signs of zero included
    assert not np.any((got == 0) & np.signbit(got))


def test_rht_blocks_that_are_not_plain_can_differ():
    """The conditions of SPEC 7.4 matter (hand-built blocks): with a wide span the butterfly rounds away a tiny
    term that decides a bf16 tie, and a zero before nonzero inputs can give -0.0 where the exact sum is zero."""
    wide = np.zeros((1, 16), np.float32)
    wide[0, :3] = [4.0, 2.0**-6, 2.0**-30]  # S_0 / 4 = 1 + 2^-8 + 2^-32: just above a bf16 tie
    zero_first = np.zeros((1, 16), np.float32)
    zero_first[0, :8] = -0.0
    zero_first[0, 14:] = [0.5, -0.5]
    for x in (wide, zero_first):
        assert not _plain(x)[0]
    got = oracle.rht(wide.astype(ml_dtypes.bfloat16), 0xD7E8)
    exact = (4.0 + 2.0**-6 + 2.0**-30) / 4  # above the tie 1 + 2^-8 of bf16's grid near 1: rounds to 1 + 2^-7
    assert 1 + 2.0**-8 < exact < 1 + 2.0**-7 and got[0, 0] == 1.0
    y = oracle.rht(zero_first.astype(ml_dtypes.bfloat16), 0xD7E8)
    ex = _exact_form(zero_first)
    assert np.any((y == 0) & np.signbit(y)) and not np.any((ex == 0) & np.signbit(ex))


def test_sr_seed_range():
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
        sr_random_bytes(1, 16, seed=2**64, offset=0, plane=0)


def test_sr_offset_range():
    """SPEC 10.2's counter word 3 is (offset + group) mod 2^32 of an offset in [0, 2^32): 2^32 itself is refused, not
    wrapped to 0."""
    assert sr_random_bytes(1, 16, seed=0, offset=2**32 - 1, plane=0).shape == (1, 16)
    for bad in (2**32, -1):
        with pytest.raises(ValueError, match=r"offset must be in \[0, 2\*\*32\)"):
            sr_random_bytes(1, 16, seed=0, offset=bad, plane=0)
