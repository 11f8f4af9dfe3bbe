"""SPEC 4-6: scale rules, blocks and planes; hand-worked vectors and a scalar re-implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from spec_scalar import assert_te_plane, te_amax, te_quantize_row_blocks, tile_maxima

import oracle
from oracle.dequantize import block_decode_scales
from oracle.fp4_numpy import pack_fp4, unpack_fp4
from oracle.quantize import plane_block_amax
from oracle.scale_rules import global_encode_scale

# SPEC 5.2 hand-worked block: amax supplied as 2688 -> S_enc = 1, S_dec = 1; block amax 12 ->
# sf = 12 * fp32(1/6) = 2.0 exactly after rounding -> byte 0x40, multiplier 0.5; codes by SPEC 3.1.
HAND_BLOCK = [12, 5, 7, -1, 0.5, 1.5, 2.5, 3.5, 10, 11, -0.0, np.nan, -3, 9, 0.4, -12]
HAND_CODES = [0x7, 0x4, 0x6, 0x9, 0x0, 0x2, 0x2, 0x4, 0x6, 0x7, 0x8, 0x7, 0xB, 0x6, 0x0, 0xF]
HAND_PACKED = [0x47, 0x96, 0x20, 0x42, 0x76, 0x78, 0x6B, 0xF0]


def test_hand_block_te_rule():
    x = np.array([HAND_BLOCK], np.float32)
    t = oracle.quantize(x, amax=2688.0)
    assert t.row.scales.tolist() == [[0x40]]
    assert t.row.data.tolist() == [HAND_PACKED]
    assert unpack_fp4(t.row.data, 16).tolist() == [HAND_CODES]


@pytest.mark.parametrize("dtype", [">f4", ">f2"])
def test_hand_block_in_the_other_byte_order(dtype):
    """A byte-swapped array (an .npy written on a big-endian machine) holds the same values: the hand-worked bytes."""
    x = np.array([HAND_BLOCK], dtype)
    assert not x.dtype.isnative
    t = oracle.quantize(x, amax=2688.0)
    assert t.row.scales.tolist() == [[0x40]]
    assert t.row.data.tolist() == [HAND_PACKED]


def test_hand_global_scales():
    assert global_encode_scale(2688.0) == 1.0
    assert global_encode_scale(0.0) == 1.0  # amax 0 -> 1
    assert global_encode_scale(np.inf) == 1.0  # 2688/inf = 0 -> 1
    assert global_encode_scale(np.nan) == np.float32(np.finfo(np.float32).max)  # fminf drops NaN
    assert global_encode_scale(1e-45) == np.float32(np.finfo(np.float32).max)  # overflow clamps
    assert global_encode_scale(np.inf, "te_fused_rht") == 0.0
    assert global_encode_scale(np.nan, "te_fused_rht") == 1.0
    assert global_encode_scale(0.0, "te_fused_rht") == 1.0


def test_scale_underflow_saturates_codes():
    # amax 2688 -> S_enc 1; block amax 1e-4 -> sf 1.7e-5 < 2**-10 -> byte 0, multiplier FLT_MAX -> +-6
    x = np.full((1, 16), 1e-4, np.float32)
    x[0, 1] = -1e-4
    x[0, 2] = 0.0
    t = oracle.quantize(x, amax=2688.0)
    assert t.row.scales.tolist() == [[0]]
    codes = unpack_fp4(t.row.data, 16)[0]
    assert codes[0] == 0x7 and codes[1] == 0xF and codes[2] == 0x0


def test_scale_saturates_at_448():
    # amax 1 -> S_enc 2688; block amax 12 -> sf ~ 5376 -> 448 (0x7E)
    x = np.full((1, 16), 12.0, np.float32)
    t = oracle.quantize(x, amax=1.0)
    assert t.row.scales.tolist() == [[0x7E]]
    assert set(unpack_fp4(t.row.data, 16)[0].tolist()) == {0x7}


def test_zero_and_negative_zero_tensor():
    x = np.zeros((3, 32), np.float32)
    x[1] = -0.0
    t = oracle.quantize(x, columnwise=True)
    assert t.row.amax == 0 and t.col.amax == 0
    assert np.all(t.row.scales == 0) and np.all(t.col.scales == 0)
    assert np.all(t.row.data[0] == 0) and np.all(t.row.data[1] == 0x88)


def test_nan_ignored_inf_saturates():
    x = np.ones((1, 32), np.float32)
    x[0, 0] = np.nan
    x[0, 17] = -np.inf
    t = oracle.quantize(x)
    assert t.row.amax == np.inf
    codes = unpack_fp4(t.row.data, 32)[0]
    assert codes[0] == 0x7 and codes[17] == 0xF
    assert t.row.scales[0, 1] == 0x7E  # block holding -Inf gets 448


def test_all_nan_tensor_amax_is_zero():
    """SPEC 4.1: rule "te"'s amax folds fmaxf from 0 and ignores NaN, so an all-NaN tensor has amax +0; its block has
    b = 0, so sf = 0 (byte 0x00), and every NaN element encodes as 0x7 (SPEC 3.1)."""
    x = np.full((1, 16), np.nan, np.float32)
    q = oracle.quantize(x).row
    assert q.amax == 0.0 and not np.signbit(q.amax)
    assert q.scales.tolist() == [[0x00]]
    assert q.data.tolist() == [[0x77] * 8]


def test_all_nan_block_beside_a_finite_block_hand_worked():
    """SPEC 5.2: b folds fmaxf from +0, so an all-NaN block of a tensor whose amax is 6 (4.1: NaN-ignoring) has b = 0:
    byte E4M3(0 * ...) = 0x00 and every NaN code 0x7 (3.1), while the finite block's sf = 6 * (448 * fp32(1/6)) rounds
    to 448 (0x7E) and its 6 encodes as 0x7 (m = 1 / (448 / 448) = 1). A NaN-propagating block max would give that
    block byte 0x7E instead. 16x16 tiles (6.3) keep the same rule per tile."""
    x = np.zeros((1, 32), np.float32)
    x[0, :16] = np.nan
    x[0, 16] = 6.0
    q = oracle.quantize(x).row
    assert q.amax == 6.0
    assert q.scales.tolist() == [[0x00, 0x7E]]
    assert q.data[0, :8].tolist() == [0x77] * 8 and q.data[0, 8] == 0x07 and q.data[0, 9:].tolist() == [0] * 7
    x16 = np.zeros((16, 32), np.float32)
    x16[:, :16] = np.nan
    x16[0, 16] = 6.0
    assert oracle.quantize(x16, block=(16, 16)).row.scales[:, 0].tolist() == [0x00] * 16


def test_a_tiny_negative_amax_is_the_negative_zero_it_rounds_to():
    """SPEC 4.3: a supplied amax is checked as the fp32 value it rounds to: -1e-50 becomes -0.0, which is allowed (and
    quantizes as amax 0: S_enc = 1, 5.1), while -1e-30 stays negative in fp32 and is refused. Ones under S_enc = 1:
    sf = 1 * fp32(1/6) lies between E4M3's 1.25 and 1.375 times 2^-3, nearer 1.375: byte 0x23; m = 1 / 0.171875 =
    5.82 > 5, so every code is 0x7."""
    x = np.ones((1, 16), np.float32)
    q = oracle.quantize(x, amax=-1e-50).row
    assert q.amax == 0.0 and np.signbit(q.amax)
    assert q.scales.tolist() == [[0x23]] and q.data.tolist() == [[0x77] * 8]
    with pytest.raises(ValueError, match=">= 0"):
        oracle.quantize(x, amax=-1e-30)


def test_te_fused_rht_infinite_amax_hand_worked():
    """SPEC 5.3 with SPEC 5.2 under amax = +Inf: S_enc = min(2688 / Inf, FLT_MAX) = 0 and S_dec = 1 / 0 = +Inf, and
    the fminf of each step absorbs the NaNs that follow."""
    x = np.zeros((1, 48), np.float32)
    x[0, 0], x[0, 1] = np.inf, 1.0  # block 0: b = Inf; block 1: all zero
    x[0, 32] = 1000.0               # block 2: b = 1000
    q = oracle.quantize(x, rule="te_fused_rht").row
    assert q.amax == np.inf
    # block 0: sf = fminf(Inf * (0 * fp32(1/6)) = NaN, FLT_MAX) = FLT_MAX -> 0x7E; m = fminf(1 / (448 * Inf), FLT_MAX)
    #          = 0: Inf * 0 = NaN -> 0x7, 1 * 0 = 0 -> 0x0
    # block 1: sf = 0 -> 0x00; m = fminf(1 / (0 * Inf) = NaN, FLT_MAX) = FLT_MAX; zeros -> 0x0
    # block 2: sf = 1000 * 0 = 0 -> 0x00; m = FLT_MAX; 1000 * FLT_MAX = Inf -> 0x7 (rule "te": byte 0x72, code 6)
    assert q.scales.tolist() == [[0x7E, 0x00, 0x00]]
    assert q.data.tolist() == [[0x07] + [0] * 7 + [0] * 8 + [0x07] + [0] * 7]


def test_scale_product_order_hand_worked():
    """SPEC 5.2 forms S_enc * fp32(1/6) first (14.3). By hand: amax 100 gives S_enc = fp32(26.88); a block max b of
    37.500004 (bits 0x42160001, one ulp above 37.5) gives sf = b * fp32(26.88 * fp32(1/6)) = 168.00002, just above
    the midpoint 168 of the E4M3 neighbours 160 (0x72) and 176 (0x73), so the byte is 0x73. The other order,
    (b / 6) * S_enc, gives exactly 168, a tie, and the even byte 0x72. The block's max then encodes 6: its
    multiplier is 1 / (176 / 26.88) = 0.1527..., and 37.500004 * 0.1527... = 5.727, nearer 6 than 4 (code 0x7)."""
    b = np.array([0x42160001], np.uint32).view(np.float32)[0]
    amax = np.float32(100.0)
    s_enc = np.float32(np.float32(2688.0) / amax)
    rcp6 = np.array([0x3E2AAAAB], np.uint32).view(np.float32)[0]
    e4m3 = lambda v: int(np.float32(v).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))  # noqa: E731
    assert e4m3(b * np.float32(s_enc * rcp6)) == 0x73 and e4m3(np.float32(b / np.float32(6)) * s_enc) == 0x72  # premise
    x = np.zeros((1, 16), np.float32)
    x[0, 0] = b
    t = oracle.quantize(x, amax=amax)
    assert t.row.scales.tolist() == [[0x73]]
    assert unpack_fp4(t.row.data, 16)[0].tolist() == [0x7] + [0x0] * 15


def test_multiplier_is_one_over_scale_times_s_dec_hand_worked():
    """SPEC 5.2's multiplier is fminf(1 / (decode(byte) * S_dec)), not S_enc / decode(byte). By hand: the row
    [7, 0.875, 0 x 14] has amax 7, S_enc = 2688 / 7 = 384 exactly, sf = 7 * fp32(384 * fp32(1/6)) = 448 -> byte 0x7E;
    S_dec = fp32(1/384); 448 * S_dec = fp32(7/6); m = fp32(1 / fp32(7/6)) = 0x3F5B6DB6 (just below 6/7), so
    0.875 * m = 0.74999994 lies below the E2M1 midpoint 0.75 and encodes 0.5 (code 0x1), and 7 * m encodes 6 (0x7):
    data byte 0x17. S_enc / 448 = 0x3F5B6DB7 would make 0.875 * m exactly 0.75, a tie to the even index 2."""
    f = np.float32
    s_dec = f(f(1.0) / f(384.0))
    m = f(f(1.0) / f(f(448.0) * s_dec))
    assert m.view(np.uint32) == 0x3F5B6DB6 and f(f(384.0) / f(448.0)).view(np.uint32) == 0x3F5B6DB7  # premises
    assert f(f(0.875) * m) < f(0.75) and f(f(0.875) * f(f(384.0) / f(448.0))) == f(0.75)
    x = np.zeros((1, 16), np.float32)
    x[0, :2] = [7.0, 0.875]
    t = oracle.quantize(x)
    assert t.row.amax == 7.0 and t.row.scales.tolist() == [[0x7E]]
    assert t.row.data.tolist() == [[0x17] + [0x00] * 7]


def test_rht_columnwise_amax_counts_the_padding_hand_worked():
    """SPEC 4.2: with RHT the columnwise amax runs over every position of the plane's source, the zero padding of
    6.2 included. By hand: x [3, 16] is zero but for column 0 = (1, -1, -1). The columnwise source row 0 is
    (1, -1, -1, 0 x 13); the default sign mask 0xD7E8 has bits 0-2 clear (signs +1), and the Hadamard rows give
    (H[j,0] - H[j,1] - H[j,2]) / 4 = (-1, 1, 1, 3) / 4, repeating with period 4. So the amax is 0.75 (positions 3,
    7, ... come from the padding; the 3 real tokens alone would give 0.25); S_enc = 2688 / 0.75 = 3584, the block's
    byte saturates at 0x7E, m = 1 / (448 / 3584) = 8, and the codes are -2, 2, 2, 6 = 0xC, 0x4, 0x4, 0x7."""
    x = np.zeros((3, 16), np.float32)
    x[:, 0] = [1.0, -1.0, -1.0]
    t = oracle.quantize(x.astype(ml_dtypes.bfloat16), rowwise=False, columnwise=True, rht=True)
    assert np.float32(t.col.amax) == np.float32(0.75)
    assert t.col.scales[0].tolist() == [0x7E]
    assert unpack_fp4(t.col.data[:1], 16)[0].tolist() == [0xC, 0x4, 0x4, 0x7] * 4


def _random_input(rng, m, k, specials=True):
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))).astype(np.float32)
    if specials and m and k:
        for v in (np.nan, np.inf, -np.inf, -0.0, 1e-40, 0.0):
            x[rng.integers(m), rng.integers(k)] = v
        x[rng.integers(m), :16] = 0.0
    return x


@pytest.mark.parametrize("specials", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_te_rule_matches_scalar_spec(seed, specials):
    """Without specials the amax is finite and moderate, so S_enc is not 1 and the block scales are mid-range."""
    rng = np.random.default_rng(seed)
    m, k = int(rng.integers(1, 9)), 16 * int(rng.integers(1, 5))
    x = _random_input(rng, m, k, specials)
    t = oracle.quantize(x)
    amax = te_amax(x)
    assert np.float32(t.row.amax).tobytes() == amax.tobytes()
    assert_te_plane(t.row.data, t.row.scales, x, amax)


@pytest.mark.parametrize("specials", [True, False])
@pytest.mark.parametrize("m", [1, 16, 17, 40])
def test_2d_blocks_match_scalar_spec(m, specials):
    """16x16 blocks (SPEC 6.3) against the scalar transcription: each row's block maxima come from its whole tile
    (only the rows that exist at the M edge), for the rowwise plane and the columnwise plane (X^T padded). With
    specials the amax is +Inf (S_enc = 1, saturated or zero tile scales); without, the tile scales are mid-range."""
    rng = np.random.default_rng(100 + m)
    x = _random_input(rng, m, 48, specials)
    t = oracle.quantize(x, columnwise=True, block=(16, 16))
    amax = te_amax(x)
    assert np.float32(t.row.amax).tobytes() == amax.tobytes() == np.float32(t.col.amax).tobytes()
    maxima = tile_maxima(x.astype(np.float32))
    if not specials:  # premise: some tile scale byte is neither 0x00 nor saturated
        assert any(0 < b < 0x7E for r in range(m) for b in te_quantize_row_blocks(x[r], amax, maxima[r])[1])
    assert_te_plane(t.row.data, t.row.scales, x, amax, maxima, "row plane")
    xt = np.zeros((48, t.col.cols), np.float32)
    xt[:, :m] = x.T
    assert_te_plane(t.col.data, t.col.scales, xt, amax, tile_maxima(xt), "col plane")


def test_2d_block_hand_worked():
    """SPEC 6.3 by hand: a 16 x 32 input, amax 2688 (S_enc = 1), one 12.0 at (5, 3) and everything else 0.5.
    Tile 0's max is 12 for all 16 rows: scale 12/6 = 2 -> E4M3 0x40, so the 0.5s encode 0.25 -> code 0 (tie to
    even) and 12 encodes 6 (code 7); tile 1's max is 0.5: scale 0.5/6 = 0.0833 lies between the E4M3 values
    0.078125 and 0.0859375 = 1.375 * 2^-4 (byte 0x1B), nearer the latter; multiplier 1/0.0859375 = 11.64, so
    0.5 -> 5.82 -> 6 (code 7)."""
    x = np.full((16, 32), 0.5, np.float32)
    x[5, 3] = 12.0
    t = oracle.quantize(x, amax=np.float32(2688.0), block=(16, 16))
    assert t.row.scales[:, 0].tolist() == [0x40] * 16
    assert t.row.scales[:, 1].tolist() == [0x1B] * 16
    codes = unpack_fp4(t.row.data, 32)
    want = np.zeros((16, 32), np.uint8)
    want[:, 16:] = 7
    want[5, 3] = 7
    assert np.array_equal(codes, want)



def test_plane_block_amax_hand_worked():
    """SPEC 5.2 / 5.4 / 6.3 block maxima by hand on a 3 x 32 input: row 0 holds -3 and 2 in block 0 and a NaN in
    block 1; row 1 holds 5 in block 1; row 2 is all zeros. 1x16: te ignores the NaN (block 1 of row 0 is 0), torchao
    keeps it; 16x16: one tile per 16 columns over rows 0-2 (rows 3-15 count as zeros), repeated on every row."""
    x = np.zeros((3, 32), np.float32)
    x[0, 1], x[0, 7], x[0, 20], x[1, 30] = -3.0, 2.0, np.nan, 5.0
    te = plane_block_amax(x, block=(1, 16), rule="te")
    assert te.dtype == np.float32 and te.tolist() == [[3.0, 0.0], [0.0, 5.0], [0.0, 0.0]]
    ao = plane_block_amax(x, block=(1, 16), rule="torchao")
    assert ao[0, 0] == 3.0 and np.isnan(ao[0, 1]) and ao[1:].tolist() == [[0.0, 5.0], [0.0, 0.0]]
    tiles = plane_block_amax(x, block=(16, 16), rule="te")
    assert tiles.tolist() == [[3.0, 5.0]] * 3
    tiles_ao = plane_block_amax(x, block=(16, 16), rule="torchao")
    assert tiles_ao[:, 0].tolist() == [3.0] * 3 and np.isnan(tiles_ao[:, 1]).all()

def test_columnwise_is_rowwise_of_padded_transpose():
    rng = np.random.default_rng(3)
    x = _random_input(rng, 21, 48)
    t = oracle.quantize(x, rowwise=True, columnwise=True)
    assert t.col.shape == (48, 32) and t.col.valid_cols == 21
    xt = np.zeros((48, 32), np.float32)
    xt[:, :21] = x.T
    ref = oracle.quantize(xt, amax=t.row.amax).row
    assert np.array_equal(t.col.data, ref.data) and np.array_equal(t.col.scales, ref.scales)
    assert t.col.amax == t.row.amax


@pytest.mark.parametrize("m", [1, 16, 17, 40])
def test_2d_blocks_transpose_symmetry(m):
    rng = np.random.default_rng(m)
    x = _random_input(rng, m, 64, specials=False)
    t = oracle.quantize(x, columnwise=True, block=(16, 16))
    codes_r = unpack_fp4(t.row.data, 64)
    codes_c = unpack_fp4(t.col.data, t.col.cols)
    assert np.array_equal(codes_r, codes_c[:, :m].T)
    # one scale per tile, replicated: rowwise [m, 4] vs columnwise [64, mp/16]
    tiles_r = t.row.scales[::16]  # [ceil(m/16), 4]
    tiles_c = t.col.scales[::16]  # [4, ceil(m/16)]
    assert np.array_equal(tiles_r, tiles_c.T)
    assert np.all(t.row.scales == np.repeat(tiles_r, 16, axis=0)[:m])


@pytest.mark.parametrize("block, rounding, rht, fo6", [
    ((16, 16), "rn", False, None), ((1, 16), "rn", False, None), ((16, 16), "sr", False, None),
    ((16, 16), "rn", True, None), ((16, 16), "rn", False, "mse")])
def test_planes_are_transposes_says_when_the_planes_are(block, rounding, rht, fo6):
    """SPEC 6.3's claim, as planes_are_transposes states it, against the planes oracle.quantize writes: where it says
    so, the columnwise codes and scales equal the rowwise ones transposed; under 1x16 blocks, SR or the RHT this
    48 x 64 input's planes differ. Under 4over6 it says no without a counterexample here: the two planes sum a
    tile's errors in different orders (SPEC 5.6), so only near-tie tiles can choose differently."""
    from oracle.quantize import planes_are_transposes

    x = (np.random.default_rng(5).standard_normal((48, 64)) * 3).astype(ml_dtypes.bfloat16)
    t = oracle.quantize(x, columnwise=True, block=block, rounding=rounding, rht=rht, four_over_six=fo6, seed=1)
    same = (np.array_equal(unpack_fp4(t.row.data, 64), unpack_fp4(t.col.data, 48).T)
            and np.array_equal(t.row.scales[::16], t.col.scales[::16].T))
    says = planes_are_transposes(block, rounding, rht, fo6)
    assert says == planes_are_transposes("16x16" if block == (16, 16) else "1x16", rounding, rht, fo6)
    assert says == (block == (16, 16) and rounding == "rn" and not rht and fo6 is None)  # SPEC 6.3, by hand
    if says:
        assert same
    elif fo6 is None:
        assert not same


def test_nd_input_flattened():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 32)).astype(np.float32)
    a = oracle.quantize(x)
    b = oracle.quantize(x.reshape(6, 32))
    assert a.shape == (6, 32) and np.array_equal(a.row.data, b.row.data)


def test_empty_input():
    t = oracle.quantize(np.zeros((0, 32), np.float32), columnwise=True)
    assert t.row.data.shape == (0, 16) and t.row.scales.shape == (0, 2)
    assert t.col.shape == (32, 0) and t.row.swizzled_scales().size == 0
    assert t.col.swizzled_scales().size == 0


def test_dtypes_are_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    a = oracle.quantize(x)
    b = oracle.quantize(x.astype(np.float32))
    assert np.array_equal(a.row.data, b.row.data)
    h = rng.standard_normal((4, 32)).astype(np.float16)
    assert np.array_equal(oracle.quantize(h).row.data, oracle.quantize(h.astype(np.float32)).row.data)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(x=np.zeros((4, 20), np.float32)), ValueError, "K=20 must be a multiple of 16"),
        (dict(x=np.zeros((4, 32), np.float64)), TypeError, "got dtype float64"),
        (dict(x=[[1.0] * 16]), TypeError, "must be a NumPy array"),
        (dict(x=np.zeros((4, 32), np.int32)), TypeError, "got dtype int32"),
        (dict(x=np.array(1.0, np.float32)), ValueError, "at least one dimension"),
        (dict(x=np.zeros((4, 32), np.float32), rht=True, columnwise=True), TypeError, "rht=True needs bfloat16"),
        (dict(x=np.zeros((4, 32), ml_dtypes.bfloat16), rht=True), ValueError, "applies to the columnwise plane"),
        (dict(x=np.zeros((4, 32), np.float32), rule="nope"), ValueError, "rule must be one of"),
        (dict(x=np.zeros((4, 32), np.float32), block=(16, 1)), ValueError, "block must be"),
        (dict(x=np.zeros((4, 32), np.float32), rounding="up"), ValueError, "rounding must be"),
        (dict(x=np.zeros((4, 32), np.float32), rowwise=False), ValueError, "at least one of rowwise / columnwise"),
        (dict(x=np.zeros((4, 32), np.float32), seed=-1), ValueError, "seed must be in"),
        (dict(x=np.zeros((4, 32), np.float32), offset=2**32), ValueError, "offset must be in"),
        (dict(x=np.zeros((4, 32), ml_dtypes.bfloat16), rht=True, columnwise=True, rht_signs=1 << 16), ValueError,
         "16-bit"),
    ],
)
def test_bad_inputs(kwargs, exc, match):
    x = kwargs.pop("x")
    with pytest.raises(exc, match=match):
        oracle.quantize(x, **kwargs)


def test_dequantize_error_bound():
    """SPEC 11 + 5.2: away from saturation and scale underflow, |x*m - q| <= half the E2M1 step, so the
    dequantized error is at most half a step of the block's grid (plus fp32 rounding of the factor)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 256)) * np.exp2(rng.integers(-8, 8, (64, 1)))).astype(np.float32)
    t = oracle.quantize(x)
    deq = oracle.dequantize(t.row).astype(np.float64)
    f = block_decode_scales(t.row).astype(np.float64)
    f = np.repeat(f, 16, axis=1)
    q = np.abs(deq / f)
    step = np.where(q < 2, 0.5, np.where(q < 4, 1.0, 2.0))
    err = np.abs(deq - x)
    # half a grid step (at q = 6 that is 1, which also covers x*m pushed past 6 by the scale byte's rounding: at most
    # 6 * (1 + 2^-4), SPEC 5.2's E4M3 scale being within 2^-4 of its target)
    allowed = step / 2 * f * (1 + 2.0**-20) + np.abs(x) * 2.0**-21
    assert np.all(err <= allowed)


def test_pack_matches_quantize_layout():
    x = np.array([HAND_BLOCK], np.float32)
    t = oracle.quantize(x, amax=2688.0)
    assert np.array_equal(t.row.data, pack_fp4(np.array([HAND_CODES], np.uint8)))


def test_dequantize_op_order_is_spec_order():
    """SPEC 11: f = (float(sf) * amax) * fp32(1/2688), left to right; find inputs where the other association
    differs and check the oracle follows the SPEC order (expected computed with np.float32 scalars here)."""
    rcp = np.float32(1.0 / 2688.0)
    rng = np.random.default_rng(0)
    for _ in range(10000):
        amax = np.float32(rng.uniform(1, 1000))
        sf_byte = np.uint8(rng.integers(1, 0x7F))
        sf = oracle.fp4_numpy.decode_e4m3(np.array([sf_byte]))[0]
        spec = np.float32(np.float32(sf * amax) * rcp)
        other = np.float32(sf * np.float32(amax * rcp))
        if spec != other:
            break
    else:
        raise AssertionError("no distinguishing case found")
    plane = oracle.QuantizedPlane(np.full((1, 8), 0x22, np.uint8), np.array([[sf_byte]], np.uint8), amax, (1, 16))
    assert oracle.dequantize(plane)[0, 0] == spec  # code 0x2 = 1.0, so the value is f itself


def test_dequantize_empty_plane():
    """SPEC 11 on a plane with no rows (an empty expert's, or a 0-row input): an empty float32 result, not an error
    (the conformance fuzz's first dequantize run found numpy's reshape(0, -1, 16) failing here)."""
    plane = oracle.QuantizedPlane(np.zeros((0, 24), np.uint8), np.zeros((0, 3), np.uint8), np.float32(1.0), (0, 48))
    y = oracle.dequantize(plane)
    assert y.shape == (0, 48) and y.dtype == np.float32


def test_columnwise_sr_uses_plane_1_counters():
    """SPEC 10.2 for the columnwise plane: element (r=k, c=token) takes Philox((c/16, r, 1, offset), seed)."""
    from spec_scalar import sr_scalar

    from oracle.philox import philox4x32

    x = np.zeros((16, 16), np.float32)
    x[:, 0] = [12, 5, 7, -1, 0.5, 1.5, 2.5, 3.5, 10, 11, -0.0, 0.3, -3, 9, 0.4, -12]
    seed, offset = 99, 5
    t = oracle.quantize(x, rowwise=False, columnwise=True, amax=2688.0, rounding="sr", seed=seed, offset=offset)
    words = philox4x32(np.array([0, 0, 1, offset], np.uint32), np.array([seed, 0], np.uint32))
    got = unpack_fp4(t.col.data, 16)[0]  # plane row k = 0: the 16 tokens of column 0, multiplier 0.5
    for c in range(16):
        byte = (int(words[c // 4]) >> (8 * (c % 4))) & 0xFF
        assert got[c] == sr_scalar(np.float32(x[c, 0]) * np.float32(0.5), byte), c


@pytest.mark.parametrize(
    "amax,exc",
    [(-1.0, ValueError), ((None, 2.0), ValueError), ((1.0, 2.0, 3.0), ValueError), ("big", ValueError),
     (np.array([[1.0]]), ValueError)],
)
def test_bad_supplied_amax(amax, exc):
    with pytest.raises(exc):
        oracle.quantize(np.ones((2, 16), np.float32), columnwise=True, amax=amax)


def test_supplied_amax_forms():
    x = np.ones((2, 16), np.float32)
    a = oracle.quantize(x, columnwise=True, amax=np.array([2688.0, 1.0]))
    assert a.row.amax == 2688.0 and a.col.amax == 1.0
    g = oracle.group_quantize(np.ones((3, 16), np.float32), [1, 2], columnwise=True, amax=np.array([[2688.0, 1.0], [5.0, 6.0]]))
    assert g.row_amax.tolist() == [2688.0, 5.0] and g.col_amax.tolist() == [1.0, 6.0]
    with pytest.raises(ValueError):
        oracle.group_quantize(np.ones((3, 16), np.float32), [1, 2], amax=[1.0, -5.0])
    with pytest.raises(ValueError):
        oracle.group_quantize(np.ones((3, 16), np.float32), [1, 2], amax=[1.0, 2.0, 3.0])


def test_integer_options_and_zero_k():
    with pytest.raises(TypeError):
        oracle.quantize(np.ones((2, 16), np.float32), rounding="sr", seed=1.7)
    with pytest.raises(TypeError):
        oracle.quantize(np.ones((2, 16), ml_dtypes.bfloat16), columnwise=True, rht=True, rht_signs=1.9)
    t = oracle.quantize(np.zeros((2, 4, 0), np.float32), columnwise=True)  # SPEC 13: K = 0, empty planes, amax 0
    assert t.shape == (8, 0) and t.row.data.shape == (8, 0) and t.row.scales.shape == (8, 0)
    assert t.col.data.shape == (0, 8) and t.row.amax == 0 and t.col.amax == 0
    with pytest.raises(ValueError):
        oracle.grouped_capacities(-5, 16, 1)


def test_torch_tensors_and_block_strings_are_accepted():
    """A torch bf16 tensor is read as its bf16 values (torch's .numpy() has no bfloat16); "16x16" means (16, 16)."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    rng = np.random.default_rng(5)
    xb = rng.standard_normal((32, 48)).astype(ml_dtypes.bfloat16)
    xt = torch.from_numpy(xb.view(np.int16).copy()).view(torch.bfloat16)
    a = oracle.quantize(xt, columnwise=True, rht=True, block="16x16")
    b = oracle.quantize(xb, columnwise=True, rht=True, block=(16, 16))
    for p in ("row", "col"):
        assert np.array_equal(getattr(a, p).data, getattr(b, p).data)
        assert np.array_equal(getattr(a, p).scales, getattr(b, p).scales)
    for bad in (16, "1x8", "big"):
        with pytest.raises(ValueError, match="block must be"):
            oracle.quantize(xb, block=bad)


def test_a_numpy_scalar_is_refused_as_a_scalar():
    """A NumPy scalar is not an array of values to quantize: the message says so (not "got float32")."""
    with pytest.raises(TypeError, match="NumPy scalar"):
        oracle.quantize(np.float32(3.0))
    with pytest.raises(ValueError, match="at least one dimension"):
        oracle.quantize(np.array(3.0, dtype=np.float32))


def test_a_masked_array_is_refused():
    """A masked array's mask would be dropped by the conversion (its masked elements quantized as stored): quantize,
    group_quantize and diagnose refuse it and name the way out."""
    x = np.ma.array(np.ones((2, 16), np.float32), mask=np.zeros((2, 16), bool))
    x[0, 3] = np.ma.masked
    with pytest.raises(TypeError, match="masked array.*x.filled"):
        oracle.quantize(x)
    with pytest.raises(TypeError, match="masked array"):
        oracle.group_quantize(x, [1, 1])
    q = oracle.quantize(x.data).row
    with pytest.raises(TypeError, match="masked array"):
        oracle.diagnose(x, q.data, q.scales)


def _masked(a):
    return np.ma.array(a, mask=np.ones(np.shape(a), bool))


def test_masked_arrays_are_refused_wherever_an_array_is_taken():
    """Every other array argument (amaxes, alpha, C, bias, their bytes, a plane's bytes, the bound check's outputs,
    the layouts' scales) refuses a masked array too, instead of reading its masked elements as stored."""
    x = np.ones((32, 32), np.float32)
    q = oracle.quantize(x)
    p = q.row
    calls = {
        "quantize amax": lambda: oracle.quantize(x, amax=_masked(np.float32(5.0))),
        "group_quantize amax": lambda: oracle.group_quantize(x, [16, 16], amax=_masked(np.ones(2, np.float32))),
        "gemm alpha": lambda: oracle.gemm(p, p, alpha=_masked(np.float32(2.0))),
        "gemm accumulate": lambda: oracle.gemm(p, p, out_dtype="float32", accumulate=_masked(np.zeros((32, 32)))),
        "gemm bias": lambda: oracle.gemm(p, p, bias=_masked(np.zeros(32, np.float32))),
        "diagnose amax": lambda: oracle.diagnose(x, p.data, p.scales, amax=_masked(np.float32(1.0))),
        "diagnose data": lambda: oracle.diagnose(x, _masked(p.data), p.scales),
        "diagnose scales": lambda: oracle.diagnose(x, p.data, _masked(p.scales)),
        "from_te_fields data": lambda: oracle.from_te_fields(rowwise_data=_masked(p.data), rowwise_scale_inv=te_s,
                                                             amax_rowwise=np.float32(1.0)),
        "from_te_fields amax": lambda: oracle.from_te_fields(rowwise_data=p.data, rowwise_scale_inv=te_s,
                                                             amax_rowwise=_masked(np.float32(1.0))),
        "QuantizedPlane data": lambda: oracle.QuantizedPlane(_masked(p.data), p.scales, p.amax, (32, 32)),
        "within_bound": lambda: oracle.within_bound(_masked(np.zeros((2, 2))), np.zeros((2, 2)), 0.0),
        "swizzle_scales": lambda: oracle.swizzle.swizzle_scales(_masked(p.scales)),
        "swizzle_scales_8x4": lambda: oracle.swizzle.swizzle_scales_8x4(_masked(p.scales)),
        "unswizzle_scales": lambda: oracle.swizzle.unswizzle_scales(_masked(np.zeros(512, np.uint8)), 32, 2),
        "unswizzle_scales_8x4": lambda: oracle.swizzle.unswizzle_scales_8x4(_masked(np.zeros(128, np.uint8)), 32, 2),
    }
    te_s = np.zeros((128, 4), np.uint8)  # TE's padded rowwise scales of 32 x 32
    oracle.from_te_fields(rowwise_data=p.data, rowwise_scale_inv=te_s, amax_rowwise=np.float32(1.0))
    for name, call in calls.items():
        try:
            call()
        except TypeError as e:
            assert "masked array" in str(e), (name, e)
        else:
            pytest.fail(f"{name}: a masked array was taken")


def test_plane_contracts():
    """A rowwise plane has no padding (valid_cols = K, SPEC 6.2 pads the columnwise plane only); a plane takes G = 448
    or 256 (SPEC 5.6, 11.1) and one amax per row when row-scaled (SPEC 5.7); rule te_fused_rht dequantizes by 11.1's
    TE factor (decode(byte) * A) * fp32(1/2688)."""
    from oracle.dequantize import dequantize
    from oracle.planes import QuantizedPlane

    assert oracle.quantize(np.ones((32, 64), np.float32)).row.valid_cols == 64
    d, s = np.zeros((2, 8), np.uint8), np.zeros((2, 1), np.uint8)
    with pytest.raises(ValueError, match="global_scale_max"):
        QuantizedPlane(d, s, 1.0, (2, 16), global_scale_max=0)
    with pytest.raises(ValueError, match="amax"):
        QuantizedPlane(d, s, np.ones(3, np.float32), (2, 16), row_scaled=True)
    data = np.full((1, 8), 0x22, np.uint8)  # E2M1 1.0 in both nibbles
    scales = np.full((1, 1), 0x38, np.uint8)  # E4M3 1.0
    amax = np.float32(5377.0)  # (decode * A) * fp32(1/2688) differs from A / 2688 here
    want = np.float32(np.float32(1.0 * amax) * np.float32(1.0 / 2688.0))
    assert want != np.float32(amax / np.float32(2688.0))
    out = dequantize(QuantizedPlane(data, scales, amax, (1, 16), rule="te_fused_rht"))
    assert np.all(out.view(np.uint32) == want.view(np.uint32))


def test_results_compare_byte_for_byte():
    """``==`` on planes, tensors and grouped tensors: every field the same, arrays by dtype, shape and bytes (a NaN
    amax equals the same NaN), numbers by value whatever their type; the call's recorded options are not compared (a
    seed under round to nearest changes no byte); a differing byte, amax, block or shape makes them unequal. (The
    dataclass default compared arrays with ``==`` and raised "truth value of an array is ambiguous".)"""
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    a, b = oracle.quantize(x, columnwise=True), oracle.quantize(x, columnwise=True)
    assert a == b and a.row == b.row and not (a.row != b.row)
    assert oracle.quantize(x, amax=np.nan) == oracle.quantize(x, amax=np.nan)
    assert a == oracle.quantize(x, columnwise=True, seed=3)  # (RN reads no seed)
    assert oracle.quantize(x, rht_signs=np.uint16(0xD7E8)) == oracle.quantize(x)
    assert a == oracle.from_te_fields(**oracle.to_te_fields(a))
    flipped = oracle.QuantizedPlane(a.row.data ^ np.uint8(1), a.row.scales, a.row.amax, a.row.shape)
    assert flipped != oracle.QuantizedPlane(a.row.data, a.row.scales, a.row.amax, a.row.shape)
    assert a != oracle.quantize(x, columnwise=True, amax=10.0)
    assert a != oracle.quantize(x, columnwise=True, block=(16, 16))
    assert a.row != a.col and a != a.row and (a == 3) is False
    g = oracle.group_quantize(x, [10, 0, 22], columnwise=True)
    assert g == oracle.group_quantize(x, [10, 0, 22], columnwise=True)
    assert g != oracle.group_quantize(x, [11, 0, 21], columnwise=True)
    with pytest.raises(TypeError, match="unhashable"):
        hash(a.row)


def test_first_nan_states_the_x86_two_nan_rule_hand_worked():
    """SPEC 3.5: of two NaN operands x86 keeps the first's payload, quieted; with one NaN operand, that one's (the
    result passes through). first_nan states the first case instead of leaving it to NumPy's vector loops."""
    from oracle.scale_rules import first_nan

    bits = np.array([0x7FA00000, 0xFFF00000, 0x3F800000], np.uint32)  # signaling NaN, negative quiet NaN, 1.0
    first = bits.view(np.float32)
    result = np.array([0x7FC00000, 0x7FC00000, 0x40000000], np.uint32).view(np.float32)
    got = first_nan(first, result).view(np.uint32)
    assert got.tolist() == [0x7FE00000, 0xFFF00000, 0x40000000]
    same = np.ones(3, np.float32)  # no NaN first: the result itself
    assert first_nan(same, result) is result


def test_torchao_nan_codes_do_not_depend_on_numpys_vector_loops():
    """SPEC 3.5 under both torchao rules, on a NaN block (x's NaN 0x7FC00000, index 3): torchao_noscale's multiplier
    is the NaN byte's 0x7FF00000 (index 4), torchao's carries P's canonical 0x7FC00000 (index 3); every element of
    the block gets its multiplier's code, in both planes (the columnwise block of plane row 20: tokens 0-15, 12 of
    them padding zeros). The same bytes come from a Python with NumPy's dispatched
    SIMD loops turned off (NPY_DISABLE_CPU_FEATURES), whose NaN x NaN products keep the other operand's payload."""
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np, oracle\n"
        "x = np.full((4, 64), 0.75, np.float32); x[1, 20] = np.nan\n"
        "for rule in ('torchao_noscale', 'torchao'):\n"
        "    q = oracle.quantize(x, rule=rule, columnwise=True)\n"
        "    print(rule, (q.row.data[1, 8:12] & 0xF).tolist(), (q.row.data[1, 8:12] >> 4).tolist(),\n"
        "          (q.col.data[20] & 0xF).tolist(), (q.col.data[20] >> 4).tolist())\n")
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatched
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__ as dispatched
    outs = []
    for disabled in ("", " ".join(dispatched)):
        env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=disabled)
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    want = "".join(f"{rule} {[i] * 4} {[i] * 4} {[i] * 8} {[i] * 8}\n" for rule, i in (("torchao_noscale", 4),
                                                                                    ("torchao", 3)))
    assert outs == [want, want], outs
