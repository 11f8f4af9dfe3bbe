"""SPEC 5.6 (4over6 block-scale selection): hand-worked blocks, exhaustive ties, the error modes and paths, 16x16
tile sums, G = 256, and an independent torch implementation of 5.6 compared on random inputs."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from spec_scalar import e2m1_rn, e4m3_rn, e4m3_value

import oracle
from oracle.four_over_six import tile_error_sum

F = np.float32
MAP6_24, MAP4_24 = 0x48, 0x4C  # E4M3(4.0), E4M3(6.0): the two bytes of a block with max 24 when S_enc = 1


def pack(codes) -> list:
    """SPEC 2.3: element 2i in the low nibble."""
    return [(codes[i] & 0xF) | ((codes[i + 1] & 0xF) << 4) for i in range(0, len(codes), 2)]


def rn_f32(q: Fraction) -> np.float32:
    """The fp32 nearest to an exact rational (ties to even), by comparing the neighbours exactly."""
    f = np.float32(float(q))
    best = min((f, np.nextafter(f, F(np.inf)), np.nextafter(f, F(-np.inf))),
               key=lambda c: (abs(Fraction(float(c)) - q), int(np.asarray(c).view(np.uint32)) & 1))
    return np.float32(best)


# ---------------------------------------------------------------- hand-worked blocks (amax 2688: S_enc = 1, v = p)
# With A = 2688 and G = 448, S_enc = 1 and the input-domain value ((p * 2688) / 2688) is p itself, so a block's
# error is |p - x| summed. A block max of 24 gives base = 24 / 6 = 4: map-to-6 byte E4M3(4) = 0x48 (multiplier
# 1/4), map-to-4 byte E4M3(6) = 0x4C (multiplier fp32(1/6)).

def test_hand_block_map_to_4_wins():
    # scale 6 represents every value exactly (24 = 4*6, 18 = 3*6, ...): err_4 = 0;
    # scale 4 misses 18 (4.5 -> 4: 16), 9 (2.25 -> 2: 8) and 3 (0.75 -> 1: 4): err_6 = 2 * (2 + 1 + 1) = 8
    x = np.array([[24, 18, 12, 9, 6, 3, 0, 0, -24, -18, -12, -9, -6, -3, 0, 0]], np.float32)
    codes = [6, 5, 4, 3, 2, 1, 0, 0, 0xE, 0xD, 0xC, 0xB, 0xA, 0x9, 0, 0]
    for mode in ("mae", "mse"):
        t = oracle.quantize(x, amax=2688.0, four_over_six=mode)
        assert t.row.scales.tolist() == [[MAP4_24]]
        assert t.row.data.tolist() == [pack(codes)] == [[0x56, 0x34, 0x12, 0x00, 0xDE, 0xBC, 0x9A, 0x00]]


def test_hand_block_map_to_6_wins():
    # scale 4 is exact for 24, 16, 8, 4, 2: err_6 = 0; scale 6 gives 16 -> 18, 8 -> 9, 4 -> 3, 2 -> 3: err_4 = 5
    x = np.array([[24, 16, 8, 4, 2] + [0] * 11], np.float32)
    t = oracle.quantize(x, amax=2688.0, four_over_six="mae")
    assert t.row.scales.tolist() == [[MAP6_24]]
    assert t.row.data.tolist() == [pack([7, 6, 4, 2, 1] + [0] * 11)]


def test_hand_block_mae_and_mse_choose_differently():
    # [24, 20, 16, 16]: map-to-6 errors 0, 4 (20/4 = 5 ties to 4: 16), 0, 0 -> MAE 4, MSE 16;
    # map-to-4 errors 0, 2 (20/6 -> 3: 18), 2, 2 (16/6 -> 3: 18) -> MAE 6, MSE 12.
    x = np.array([[24, 20, 16, 16] + [0] * 12], np.float32)
    mae = oracle.quantize(x, amax=2688.0, four_over_six="mae")
    mse = oracle.quantize(x, amax=2688.0, four_over_six="mse")
    assert mae.row.scales.tolist() == [[MAP6_24]]
    assert mae.row.data.tolist() == [pack([7, 6, 6, 6] + [0] * 12)]
    assert mse.row.scales.tolist() == [[MAP4_24]]
    assert mse.row.data.tolist() == [pack([6, 5, 5, 5] + [0] * 12)]


def test_hand_block_tie_keeps_map_to_6():
    # [24, 14]: 14/4 = 3.5 -> 4 (16, error 2); 14/6 -> 2.33 -> 2 (12, error 2): a tie in both modes
    x = np.array([[24, 14] + [0] * 14], np.float32)
    for mode in ("mae", "mse"):
        for fast in (False, True):
            t = oracle.quantize(x, amax=2688.0, four_over_six=mode, four_over_six_fast_math=fast)
            assert t.row.scales.tolist() == [[MAP6_24]]
            assert t.row.data.tolist() == [pack([7, 6] + [0] * 14)]


def test_all_zero_block_and_nan_element_keep_map_to_6():
    x = np.zeros((2, 16), np.float32)
    x[1, :3] = [24, 18, np.nan]  # map-to-4 would win without the NaN; a NaN error keeps map-to-6
    t = oracle.quantize(x, amax=2688.0, four_over_six="mae")
    assert t.row.scales.tolist() == [[0x00], [MAP6_24]]
    assert t.row.data.tolist()[0] == [0] * 8
    assert t.row.data.tolist()[1] == pack([7, 6, 7] + [0] * 13)  # 18/4 = 4.5 -> 4; NaN -> 0x7 (SPEC 3.1)


def _scalar_candidates(blk, s_enc, s_dec) -> dict:
    """SPEC 5.6's two candidates of one block with scalar fp32 steps: {4: (byte, d, codes), 6: (byte, d, codes)}."""
    flt_max = F(np.finfo(np.float32).max)
    base = F(rn_f32(Fraction(float(F(np.max(np.abs(blk))))) / 6) * s_enc)
    out = {}
    for c, sf in ((4, F(base * F(1.5))), (6, base)):
        byte = e4m3_rn(min(sf, F(448.0)))
        d = F(e4m3_value(byte))
        ds = F(d * s_dec)
        m = min(rn_f32(1 / Fraction(float(ds))), flt_max) if ds else flt_max
        out[c] = (byte, d, [e2m1_rn(F(v * m)) for v in blk])
    return out


def _scalar_block(blk, a, mode="mae"):
    """SPEC 5.6 for one block with scalar fp32 steps (G = 448, input-domain error): (byte, codes) chosen, and the
    two candidates' bytes."""
    s_enc = min(rn_f32(Fraction(2688) / Fraction(float(a))), F(np.finfo(np.float32).max))
    s_dec = rn_f32(1 / Fraction(float(s_enc)))
    cand = {}
    for c, (byte, d, codes) in _scalar_candidates(blk, s_enc, s_dec).items():
        err = F(0.0)
        for v, code in zip(blk, codes, strict=True):
            diff = F(rn_f32(Fraction(float(F(F(oracle.fp4_numpy.E2M1_VALUES[code]) * d) * a)) / 2688) - v)
            err = F(err + (abs(diff) if mode == "mae" else F(diff * diff)))
        cand[c] = (byte, codes, err)
    pick = 4 if cand[4][2] < cand[6][2] else 6
    return cand[pick][0], cand[pick][1], {c: cand[c][0] for c in cand}


def test_block_scale_divides_by_six_first():
    """SPEC 5.6's base = (b / 6) * S_enc, not 5.2's b * (S_enc * fp32(1/6)): block maxima where the two orders give
    different E4M3 bytes (A = 2688, S_enc = 1: fp32(b / 6) against fp32(b * fp32(1/6)) on either side of an E4M3
    rounding midpoint)."""
    rcp6 = F(F(1.0) / F(6.0))
    teeth = 0
    for b in (0.1113281175494194, 0.2226562350988388, 0.1132812574505806, 0.2265625149011612):
        blk = np.array([b] + [0.0] * 15, np.float32)
        byte, codes, cands = _scalar_block(blk, F(2688.0))
        other = {6: e4m3_rn(F(blk[0] * rcp6)), 4: e4m3_rn(F(F(blk[0] * rcp6) * F(1.5)))}
        teeth += cands[4] != other[4] or cands[6] != other[6]
        t = oracle.quantize(blk.reshape(1, 16), amax=2688.0, four_over_six="mae")
        assert t.row.scales[0, 0] == byte and t.row.data[0].tolist() == pack(codes), b
    assert teeth == 4


# ---------------------------------------------------------------- exhaustive ties

def _errors_s_enc_1(values, scale_mult, step):
    """Per-element |p - x| and (p - x)^2 for one candidate with S_enc = 1 and A = 2688 (v = p), in Fractions."""
    out = []
    for v in values:
        code = e2m1_rn(F(F(v) * scale_mult))
        p = Fraction(float(oracle.fp4_numpy.E2M1_VALUES[code])) * step
        d = p - Fraction(v)
        out.append((abs(d), d * d, code))
    return out


def test_exhaustive_two_element_blocks_ties_and_modes():
    """Every block [24, v, w, 0, ...] with v, w in {0, 0.5, ..., 24}: each error is an exact small dyadic number, so
    fp32 sums are exact and the expected choice follows from Fractions. Ties (equal errors, different candidates)
    must keep map-to-6; MAE and MSE must choose by their own sums."""
    grid = [i / 2 for i in range(49)]
    pairs = list(itertools.product(grid, grid))
    x = np.zeros((len(pairs), 16), np.float32)
    x[:, 0] = 24
    x[:, 1:3] = np.array(pairs, np.float32)
    e6 = {v: _errors_s_enc_1([v], F(0.25), 4)[0] for v in grid}
    e4 = {v: _errors_s_enc_1([v], F(1.0) / F(6.0), 6)[0] for v in grid}  # map-to-4: multiplier fp32(1/6)
    results = {m: oracle.quantize(x, amax=2688.0, four_over_six=m).row for m in ("mae", "mse")}
    ties = {"mae": 0, "mse": 0}
    differ = 0
    for r, (v, w) in enumerate(pairs):
        want = {}
        for mi, m in enumerate(("mae", "mse")):
            s6, s4 = e6[v][mi] + e6[w][mi], e4[v][mi] + e4[w][mi]
            codes6 = [7, e6[v][2], e6[w][2]] + [0] * 13
            codes4 = [6, e4[v][2], e4[w][2]] + [0] * 13
            pick4 = s4 < s6
            if s4 == s6 and codes4 != codes6:
                ties[m] += 1
            want[m] = pick4
            got = results[m]
            assert got.scales[r, 0] == (MAP4_24 if pick4 else MAP6_24), (m, v, w, s4, s6)
            assert got.data[r].tolist() == pack(codes4 if pick4 else codes6), (m, v, w)
        differ += want["mae"] != want["mse"]
    # the enumeration holds many exact ties between different candidates, and blocks where the modes disagree
    assert ties["mae"] > 100 and ties["mse"] > 50, ties
    assert differ > 50, differ


def test_exhaustive_ties_in_a_16x16_tile():
    """Tiles whose rows are [24, v, 0, ...] (row 0) and [w, 0, ...] (rows 1..15) with v, w on the half grid: the
    tile sums are exact, ties keep map-to-6 on all 16 rows."""
    grid = [i / 2 for i in range(0, 49, 3)]
    n_ties = 0
    xs = []
    for v, w in itertools.product(grid, grid):
        t = np.zeros((16, 16), np.float32)
        t[0, :2] = [24, v]
        t[1:, 0] = w
        xs.append(t)
    x = np.concatenate(xs)
    got = oracle.quantize(x, amax=2688.0, four_over_six="mae", block=(16, 16)).row
    for i, (v, w) in enumerate(itertools.product(grid, grid)):
        e6 = _errors_s_enc_1([v, w], F(0.25), 4)
        e4 = _errors_s_enc_1([v, w], F(1.0) / F(6.0), 6)
        s6 = e6[0][0] + 15 * e6[1][0]
        s4 = e4[0][0] + 15 * e4[1][0]
        pick4 = s4 < s6
        n_ties += s4 == s6 and (e4[0][2], e4[1][2]) != (e6[0][2], e6[1][2])
        want = MAP4_24 if pick4 else MAP6_24
        assert (got.scales[16 * i : 16 * i + 16, 0] == want).all(), (v, w, s4, s6)
    assert n_ties > 5, n_ties


# ---------------------------------------------------------------- 16x16 tiles

def test_hand_tile_sum_overrides_a_row_that_prefers_map_to_4():
    # row 0 = [24, 18]: alone it picks map-to-4 (errors 0 vs 2); rows 1..15 = [16]: map-to-4 error 2 each (16/6 -> 3:
    # 18), map-to-6 error 0. Tile sums: err_4 = 30, err_6 = 2 -> the whole tile takes map-to-6.
    x = np.zeros((16, 16), np.float32)
    x[0, :2] = [24, 18]
    x[1:, 0] = 16
    t = oracle.quantize(x, amax=2688.0, four_over_six="mae", block=(16, 16))
    assert (t.row.scales == MAP6_24).all()
    assert t.row.data[0].tolist() == pack([7, 6] + [0] * 14)  # 18/4 = 4.5 -> 4
    assert t.row.data[1].tolist() == pack([6] + [0] * 15)  # 16/4 = 4
    # without rows 1..15 the tile sum is row 0's: map-to-4 on every row (zero rows encode to 0 either way)
    x[1:] = 0
    t = oracle.quantize(x, amax=2688.0, four_over_six="mae", block=(16, 16))
    assert (t.row.scales == MAP4_24).all()
    assert t.row.data[0].tolist() == pack([6, 5] + [0] * 14)


def test_tile_error_sum_is_the_spec_tree():
    # e0 = 1, e1..e15 = 2^-24. In element order the sum stays 1 (each + 2^-24 ties back to 1); the tree of SPEC 5.6
    # gives e0 + e8 = 1 (tie), then + (e4 + e12) = 1 + 2^-23, + ((e2+e10) + (e6+e14)) = 1 + 3 * 2^-23, and the odd
    # half adds 8 * 2^-24 = 2^-21: 1 + 7 * 2^-23, exactly.
    e = np.full((16, 1), 2.0**-24, np.float32)
    e[0] = 1.0
    got = tile_error_sum(e)
    assert got.shape == (16, 1)
    assert (got == F(1 + 7 * 2.0**-23)).all()
    # 20 rows: the second tile has rows 16..19 and adds +0 for the absent 20..31
    e2 = np.arange(20, dtype=np.float32).reshape(20, 1)
    got2 = tile_error_sum(e2)
    assert (got2[:16] == sum(range(16))).all() and (got2[16:] == 16 + 17 + 18 + 19).all()


# ---------------------------------------------------------------- global_scale_max = 256

def test_global_scale_max_256_hand():
    # A = 1536 with G = 256: S_enc = 1536 / 1536 = 1, so the hand block of map-to-4 gives the same bytes
    x = np.array([[24, 18, 12, 9, 6, 3, 0, 0, -24, -18, -12, -9, -6, -3, 0, 0]], np.float32)
    t = oracle.quantize(x, amax=1536.0, four_over_six="mae", global_scale_max=256)
    assert t.row.scales.tolist() == [[MAP4_24]]
    assert t.row.global_scale_max == 256 and t.options["global_scale_max"] == 256
    # dequantize (SPEC 11.1): f = (6 * 1536) * fp32(1/1536)
    f = F(F(6.0) * F(1536.0)) * F(rn_f32(Fraction(1, 1536)))
    want = np.array([[4, 3, 2, 1.5, 1, 0.5, 0, 0, -4, -3, -2, -1.5, -1, -0.5, 0, 0]], np.float32) * f
    assert oracle.dequantize(t.row).tobytes() == want.astype(np.float32).tobytes()
    # A = 2688 with G = 256: S_enc = fp32(1536 / 2688) = fp32(4/7); base = (24 / 6) * S_enc
    s_enc = rn_f32(Fraction(1536, 2688))
    base = F(F(F(24.0) / F(6.0)) * s_enc)
    b6, b4 = e4m3_rn(base), e4m3_rn(F(base * F(1.5)))
    assert (b6, b4) == (0x41, 0x46)  # 2.2857 -> 2.25, 3.4286 -> 3.5
    t = oracle.quantize(x[:, :16], amax=2688.0, four_over_six="mae", global_scale_max=256)
    # in the input domain a code q dequantizes to q * sf / S_enc: 3.9375 q (map-to-6) or 6.125 q (map-to-4); the
    # half-block 24, 18, 12, 9, 6, 3 rounds to 6, 4, 3, 2, 1.5, 1 (errors summing to 4.97) or to 4, 3, 2, 1.5, 1, 0.5
    # (1.5): map-to-4 wins by far more than any rounding of the sums
    assert t.row.scales[0, 0] == b4


def test_global_scale_max_gemm_alpha():
    x = np.ones((1, 16), np.float32)
    a = oracle.quantize(x, amax=3.0, four_over_six="mae", global_scale_max=256).row
    b6 = oracle.quantize(x, amax=5.0, four_over_six="mse", global_scale_max=256).row
    b8 = oracle.quantize(x, amax=5.0).row
    assert oracle.gemm_alpha(a, b6) == F(F(15.0) * rn_f32(Fraction(1, 36 * 256 * 256)))
    assert oracle.gemm_alpha(a, b8) == F(F(15.0) * rn_f32(Fraction(1, 36 * 256 * 448)))
    assert oracle.gemm_alpha(b8, b8) == F(F(25.0) * rn_f32(Fraction(1, 7225344)))


# ---------------------------------------------------------------- options

@pytest.mark.parametrize("kwargs, message", [
    (dict(global_scale_max=256), "only with 4over6"),
    (dict(four_over_six_fast_math=True), "four_over_six='mae' or 'mse'"),
    (dict(four_over_six="max"), "four_over_six must be"),
    (dict(four_over_six="mae", rule="torchao"), "rule 'te' only"),
    (dict(four_over_six="mae", rule="te_fused_rht"), "rule 'te' only"),
    (dict(four_over_six="mse", rounding="sr"), "rounding='rn'"),
    (dict(four_over_six="mse", global_scale_max=384), "448 or 256"),
    (dict(four_over_six="mse", rht=True, columnwise=True), "rht=True"),
])
def test_refused_combinations(kwargs, message):
    import ml_dtypes
    x = np.ones((16, 32), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=message):
        oracle.quantize(x, **kwargs)
    with pytest.raises(ValueError, match=message):
        oracle.group_quantize(x, [16], **kwargs)


@pytest.mark.parametrize("change, message", [
    (dict(mode="MAE"), "mode must be one of"),  # (quantize lower-cases its keyword; the helpers take it as given)
    (dict(mode="bogus"), "mode must be one of"),
    (dict(global_scale_max=300), "448 or 256"),
    (dict(global_scale_max=448.0), "the integer 448 or 256"),
    (dict(domain="fast"), "domain must be one of"),
    (dict(block=(16, 1)), "block must be"),
    (dict(block=16), "block must be"),
])
def test_four_over_six_scales_checks_its_arguments(change, message):
    """The public helper refuses what oracle.quantize would: no argument is read as a default it does not name."""
    from oracle.four_over_six import four_over_six_scales

    y = np.ones((16, 32), np.float32)
    kw = dict(amax=1.0, mode="mae", domain="input", global_scale_max=448, block=(1, 16))
    four_over_six_scales(y, np.ones((16, 2), np.float32), **kw)
    with pytest.raises(ValueError, match=message):
        four_over_six_scales(y, np.ones((16, 2), np.float32), **{**kw, **change})


def test_options_are_recorded():
    x = np.ones((16, 32), np.float32)
    t = oracle.quantize(x, four_over_six="MSE", four_over_six_fast_math=True, columnwise=True)
    for p in (t.row, t.col):
        assert (p.four_over_six, p.four_over_six_fast_math, p.global_scale_max, p.row_scaled) == ("mse", True, 448, False)
    assert t.options["four_over_six"] == "mse" and t.options["four_over_six_fast_math"] is True
    plain = oracle.quantize(x)
    assert plain.row.four_over_six is None and plain.options["four_over_six"] is None


# ---------------------------------------------------------------- independent implementation (torch, from SPEC 5.6)
# (the tests that use it carry the torch marker: without torch they skip, and the tests above still run)

try:
    import torch
except ImportError:
    torch = None

_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _div(a: torch.Tensor, b) -> torch.Tensor:
    """a / b with b materialized at a's shape: torch's CPU division by a scalar multiplies by the reciprocal."""
    return a / torch.as_tensor(b, dtype=torch.float32).expand(a.shape).contiguous()


def _e2m1_codes(y: torch.Tensor) -> torch.Tensor:
    a = y.abs()
    idx = sum((a > 0.25, a >= 0.75, a > 1.25, a >= 1.75, a > 2.5, a >= 3.5, a > 5.0), torch.zeros_like(a, dtype=torch.int64))
    codes = idx | (torch.signbit(y).to(torch.int64) << 3)
    return torch.where(torch.isnan(y), torch.full_like(codes, 7), codes)


def _tree16(e: torch.Tensor) -> torch.Tensor:
    """SPEC 5.6's tile tree over dim 1 (size 16), written out."""
    r = [e[:, i] for i in range(16)]
    return (((r[0] + r[8]) + (r[4] + r[12])) + ((r[2] + r[10]) + (r[6] + r[14]))) + (
        ((r[1] + r[9]) + (r[5] + r[13])) + ((r[3] + r[11]) + (r[7] + r[15])))


def ref_4over6(x: np.ndarray, *, amax, mode: str, fast: bool, g: int = 448, tile: bool = False):
    """SPEC 5.6 for a float32 matrix (rows = plane rows); ``amax`` one number or one per row (SPEC 5.7).
    Returns (scale bytes, codes, map-to-4 chosen) per block."""
    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    rows, cols = xt.shape
    nb = cols // 16
    a = torch.from_numpy(np.broadcast_to(np.asarray(amax, np.float32).reshape(-1), (rows,)).copy()).reshape(rows, 1, 1)
    flt_max = torch.tensor(np.finfo(np.float32).max)
    s_enc = torch.fmin(_div(torch.full_like(a, 6.0 * g), a), flt_max)
    s_enc = torch.where((a == 0) | (s_enc == 0), torch.ones_like(s_enc), s_enc)
    s_dec = _div(torch.ones_like(s_enc), s_enc)
    x3 = xt.reshape(rows, nb, 16)
    ab = torch.where(torch.isnan(x3), torch.zeros_like(x3), x3.abs())
    rp = -(-rows // 16) * 16
    if tile:
        pad = torch.zeros(rp, nb, 16)
        pad[:rows] = ab
        b = pad.reshape(rp // 16, 16, nb, 16).amax(dim=(1, 3)).repeat_interleave(16, dim=0)[:rows]
    else:
        b = ab.amax(dim=2)
    base = _div(b.unsqueeze(-1), 6.0) * s_enc  # [rows, nb, 1]
    out = {}
    for c in (4, 6):
        sf = base * torch.tensor(1.5) if c == 4 else base
        byte = torch.minimum(sf, torch.tensor(448.0)).to(torch.float8_e4m3fn)
        d = byte.to(torch.float32)
        m = torch.fmin(_div(torch.ones_like(d), d * s_dec), flt_max)
        codes = _e2m1_codes(x3 * m)
        q = torch.tensor(_E2M1)[codes]
        err = torch.zeros(rows, nb)
        for i in range(16):
            p = q[:, :, i] * d[:, :, 0]
            if fast:
                diff = p - x3[:, :, i] * s_enc[:, :, 0]
            else:
                diff = _div(p * a[:, :, 0], float(6 * g)) - x3[:, :, i]
            err = err + (diff.abs() if mode == "mae" else diff * diff)
        if tile:
            pad = torch.zeros(rp, nb)
            pad[:rows] = err
            err = _tree16(pad.reshape(rp // 16, 16, nb)).repeat_interleave(16, dim=0)[:rows]
        out[c] = (byte.view(torch.uint8)[:, :, 0], codes.reshape(rows, cols), err)
    pick4 = out[4][2] < out[6][2]
    scales = torch.where(pick4, out[4][0], out[6][0]).numpy().astype(np.uint8)
    codes = torch.where(pick4.repeat_interleave(16, dim=1), out[4][1], out[6][1]).numpy()
    return scales, codes, pick4.numpy()


def _packed(codes: np.ndarray) -> np.ndarray:
    c = codes.astype(np.uint8)
    return (c[:, 0::2] & 0xF) | (c[:, 1::2] << 4)


def _random_input(rng, rows: int, cols: int) -> np.ndarray:
    """Blocks of varied magnitude with zeros, exact grid values, NaN and near-tie values."""
    x = rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-3, 3, (rows, cols // 16))).repeat(16, axis=1)
    x[rng.random((rows, cols)) < 0.05] = 0.0
    grid = rng.random((rows, cols)) < 0.1
    x[grid] = np.round(x[grid] * 2) / 2
    x = x.astype(np.float32)
    x[rng.random((rows, cols)) < 0.003] = np.nan
    return x


CONFIGS = list(itertools.product(("mae", "mse"), (False, True), (448, 256), ((1, 16), (16, 16))))


@pytest.mark.torch
@pytest.mark.parametrize("seed, mode, fast, g, block", [(i, *c) for i, c in enumerate(CONFIGS)])
def test_matches_independent_torch_implementation(seed, mode, fast, g, block):
    rng = np.random.default_rng(seed)  # one fixed seed per config (its index)
    x = _random_input(rng, 45, 96)  # 45 rows: the last 16x16 tile has 13 rows
    tile = block == (16, 16)
    for amax in (None, 1.0, 0.0):  # computed, supplied below the block maxima (saturating scales), zero
        t = oracle.quantize(x, amax=amax, four_over_six=mode, four_over_six_fast_math=fast, global_scale_max=g,
                            block=block, columnwise=True)
        a = F(np.nanmax(np.abs(x))) if amax is None else F(amax)
        scales, codes, _ = ref_4over6(x, amax=a, mode=mode, fast=fast, g=g, tile=tile)
        assert np.array_equal(t.row.scales, scales), (amax, "row scales")
        assert np.array_equal(t.row.data, _packed(codes)), (amax, "row data")
        xt = np.zeros((x.shape[1], 48), np.float32)  # SPEC 6.2: X^T with the tokens padded to 48
        xt[:, :45] = x.T
        scales_c, codes_c, _ = ref_4over6(xt, amax=a, mode=mode, fast=fast, g=g, tile=tile)
        assert np.array_equal(t.col.scales, scales_c), (amax, "col scales")
        assert np.array_equal(t.col.data, _packed(codes_c)), (amax, "col data")
        assert t.col.amax == a


def _tie_pairs() -> list:
    """(v, w) on the half grid where the blocks [24, v, w, 0, ...] tie exactly (S_enc = 1, A = 2688, MAE)."""
    grid = [i / 2 for i in range(49)]
    e6 = {v: _errors_s_enc_1([v], F(0.25), 4)[0][0] for v in grid}
    e4 = {v: _errors_s_enc_1([v], F(1.0) / F(6.0), 6)[0][0] for v in grid}
    return [(v, w) for v, w in itertools.product(grid, grid) if e6[v] + e6[w] == e4[v] + e4[w] and e6[v] + e6[w] > 0]


def _scaled_tie_blocks(k: np.float32) -> tuple[np.ndarray, np.float32]:
    """The tie blocks of :func:`_tie_pairs` times k, with A = fp32(2688 k): in exact arithmetic every block still ties
    in both domains, so the fp32 roundings of each path decide, and the two paths often disagree."""
    pairs = _tie_pairs()
    x = np.zeros((len(pairs), 16), np.float32)
    x[:, 0] = 24
    x[:, 1:3] = np.array(pairs, np.float32)
    return (x * k).astype(np.float32), F(F(2688.0) * k)


@pytest.mark.torch
def test_global_scale_max_256_hand_block_matches_the_torch_implementation():
    """The hand block of test_global_scale_max_256_hand at A = 2688, G = 256: the byte the oracle keeps is the
    independent implementation's."""
    x = np.array([[24, 18, 12, 9, 6, 3, 0, 0, -24, -18, -12, -9, -6, -3, 0, 0]], np.float32)
    t = oracle.quantize(x, amax=2688.0, four_over_six="mae", global_scale_max=256)
    assert t.row.scales.tolist() == ref_4over6(x, amax=2688.0, mode="mae", fast=False, g=256)[0].tolist()


@pytest.mark.torch
def test_fast_math_and_input_domain_choose_differently():
    """The two error paths round differently: on near-tie blocks the reference implementation finds blocks where they
    choose differently, and the oracle follows each path."""
    x, a = _scaled_tie_blocks(F(0.7))
    for mode in ("mae", "mse"):
        picks = {}
        for fast in (False, True):
            scales, codes, picks[fast] = ref_4over6(x, amax=a, mode=mode, fast=fast)
            t = oracle.quantize(x, amax=a, four_over_six=mode, four_over_six_fast_math=fast)
            assert np.array_equal(t.row.scales, scales) and np.array_equal(t.row.data, _packed(codes))
        assert (picks[False] != picks[True]).sum() > 10, mode


@pytest.mark.torch
def test_fast_math_difference_checked_with_scalars():
    """Blocks where the paths disagree, re-derived with scalar fp32 steps and Fractions (SPEC 5.6 line by line):
    the input-domain value of p is RN(RN(p * A) / 2688), the product-domain reference RN(x * S_enc)."""
    x, a = _scaled_tie_blocks(F(0.7))
    _, _, p_exact = ref_4over6(x, amax=a, mode="mae", fast=False)
    _, _, p_fast = ref_4over6(x, amax=a, mode="mae", fast=True)
    rows = np.argwhere(p_exact[:, 0] != p_fast[:, 0])[:, 0]
    assert rows.size > 10
    s_enc = rn_f32(Fraction(2688) / Fraction(float(a)))
    s_dec = rn_f32(1 / Fraction(float(s_enc)))
    for r in rows[:8]:
        blk = x[r]
        errs = {}
        for c, (byte, d, codes) in _scalar_candidates(blk, s_enc, s_dec).items():
            exact = fast = F(0.0)
            for v, code in zip(blk, codes, strict=True):
                p = F(F(oracle.fp4_numpy.E2M1_VALUES[code]) * d)
                exact = F(exact + abs(F(rn_f32(Fraction(float(F(p * a))) / 2688) - v)))
                fast = F(fast + abs(F(p - F(v * s_enc))))
            errs[c] = (exact, fast, byte)
        pick_exact, pick_fast = errs[4][0] < errs[6][0], errs[4][1] < errs[6][1]
        assert pick_exact != pick_fast
        for fast, pick in ((False, pick_exact), (True, pick_fast)):
            t = oracle.quantize(blk.reshape(1, 16), amax=a, four_over_six="mae", four_over_six_fast_math=fast)
            assert t.row.scales[0, 0] == errs[4 if pick else 6][2]


@pytest.mark.torch
def test_16x16_planes_need_not_be_transposes():
    """SPEC 5.6 / 6.3: the columnwise plane sums a tile's errors along X^T's rows. Tiles whose rows are scaled tie
    blocks (exact ties in exact arithmetic, decided by rounding) choose differently in the two planes; each plane
    matches the reference on its own source."""
    pairs = _tie_pairs()
    rng = np.random.default_rng(0)
    k = F(3.3)
    tiles = []
    for _ in range(64):
        tile = np.zeros((16, 16), np.float32)
        for r in range(16):
            tile[r, rng.choice(16, 3, replace=False)] = [24, *pairs[rng.integers(len(pairs))]]
        tiles.append(tile)
    x = (np.concatenate(tiles, axis=1) * k).astype(np.float32).reshape(16, 8, 128).transpose(1, 0, 2).reshape(128, 128)
    a = F(F(2688.0) * k)
    t = oracle.quantize(x, amax=a, four_over_six="mae", block=(16, 16), columnwise=True)
    assert (t.row.scales[::16] != t.col.scales[::16].T).sum() > 0
    s_r, c_r, _ = ref_4over6(x, amax=a, mode="mae", fast=False, tile=True)
    s_c, c_c, _ = ref_4over6(np.ascontiguousarray(x.T), amax=a, mode="mae", fast=False, tile=True)
    assert np.array_equal(t.row.scales, s_r) and np.array_equal(t.row.data, _packed(c_r))
    assert np.array_equal(t.col.scales, s_c) and np.array_equal(t.col.data, _packed(c_c))


@pytest.mark.torch
def test_grouped_matches_independent_per_group():
    rng = np.random.default_rng(5)
    x = _random_input(rng, 70, 64)
    splits = [20, 0, 50]
    g = oracle.group_quantize(x, splits, four_over_six="mse", four_over_six_fast_math=True, block=(16, 16))
    assert g.options["four_over_six"] == "mse"
    start = 0
    for e, m in enumerate(splits):
        plane = g.row_planes[e]
        xs = x[start : start + m]
        start += m
        if m == 0:
            assert plane.data.size == 0
            continue
        scales, codes, _ = ref_4over6(xs, amax=F(np.nanmax(np.abs(xs))), mode="mse", fast=True, tile=True)
        assert np.array_equal(plane.scales, scales) and np.array_equal(plane.data, _packed(codes))
        assert plane.four_over_six == "mse"
