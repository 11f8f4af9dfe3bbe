"""SPEC 8 (swizzle) and SPEC 9 (grouped layout): hand-worked layouts, properties, grouped == per group."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from oracle.grouped import cut_splits, grouped_capacities
from oracle.swizzle import (
    grouped_scale_offsets,
    swizzle_scales,
    swizzle_scales_8x4,
    swizzled_offset,
    unswizzle_scales,
    unswizzle_scales_8x4,
)


def test_swizzle_hand_positions():
    """SPEC 8.2 drawing: byte 0..3 = (0, 0..3), 4..7 = (32, 0..3), 8 = (64, 0), 12 = (96, 0), 16 = (1, 0);
    the second tile (columns 4..7) starts at 512, the second row tile at 512 * Cp/4."""
    rows, cols = 200, 6  # padded to 256 x 8: 2 x 2 tiles
    compact = np.zeros((rows, cols), np.uint8)
    marks = {(0, 0): 1, (0, 3): 2, (32, 0): 3, (64, 0): 4, (96, 1): 5, (1, 0): 6, (31, 2): 7, (0, 4): 8, (128, 0): 9, (199, 5): 10}
    for (r, c), v in marks.items():
        compact[r, c] = v
    buf = swizzle_scales(compact)
    assert buf.size == 256 * 8
    expected = {0: 1, 3: 2, 4: 3, 8: 4, 13: 5, 16: 6, 31 * 16 + 2: 7, 512: 8, 1024: 9}
    # (199, 5): tile (1, 1) -> 3 * 512; r%32 = 7 -> 7*16; (r%128)//32 = 2 -> 8; c%4 = 1
    expected[3 * 512 + 7 * 16 + 8 + 1] = 10
    for pos, v in expected.items():
        assert buf[pos] == v, pos
    assert np.count_nonzero(buf) == len(expected)  # every padding byte is 0


def test_swizzled_offset_formula_matches_buffer():
    rng = np.random.default_rng(0)
    compact = rng.integers(1, 255, (300, 9), dtype=np.uint8)
    buf = swizzle_scales(compact)
    r, c = np.meshgrid(np.arange(300), np.arange(9), indexing="ij")
    assert np.array_equal(buf[swizzled_offset(r, c, 12)], compact)


@pytest.mark.parametrize("swizzle, unswizzle, tile_rows", [(swizzle_scales, unswizzle_scales, 128),
                                                             (swizzle_scales_8x4, unswizzle_scales_8x4, 8)],
                         ids=["128x4", "8x4"])
@given(st.integers(0, 400), st.integers(0, 20), st.integers(0, 2**31))
@settings(max_examples=60, deadline=None)
def test_swizzle_roundtrip(swizzle, unswizzle, tile_rows, rows, cols, seed):
    """SPEC 8.2 / 8.3: the buffer holds roundup(rows, tile rows) * roundup(C, 4) bytes, unswizzles to the compact
    scales, and its padding bytes are zero."""
    rng = np.random.default_rng(seed)
    compact = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    buf = swizzle(compact)
    assert buf.size == (rows + tile_rows - 1) // tile_rows * tile_rows * ((cols + 3) // 4 * 4)
    assert np.array_equal(unswizzle(buf, rows, cols), compact)
    assert np.count_nonzero(buf) == np.count_nonzero(compact)  # padding bytes are zero


def test_swizzle_8x4_hand_positions():
    """SPEC 8.3: 9 x 5 compact scales pad to 16 x 8, four 8x4 tiles of 32 bytes in the order (rows 0-7, cols 0-3),
    (rows 0-7, cols 4-7), (rows 8-15, cols 0-3), (rows 8-15, cols 4-7), each tile row-major (4 bytes per row)."""
    compact = np.zeros((9, 5), np.uint8)
    marks = {(0, 0): 1, (0, 3): 2, (1, 0): 3, (3, 2): 4, (7, 3): 5, (0, 4): 6, (5, 4): 7, (8, 0): 8, (8, 3): 9,
             (8, 4): 10}
    for (r, c), v in marks.items():
        compact[r, c] = v
    buf = swizzle_scales_8x4(compact)
    assert buf.shape == (16 * 8,)
    # byte of (r, c): tile (r // 8, c // 4) at 32 * (2 * (r // 8) + c // 4), then 4 * (r % 8) + c % 4
    expected = {0: 1, 3: 2, 4: 3, 14: 4, 31: 5, 32: 6, 52: 7, 64: 8, 67: 9, 96: 10}
    assert {int(i): int(buf[i]) for i in np.flatnonzero(buf)} == expected  # and every padding byte is 0
    assert np.array_equal(unswizzle_scales_8x4(buf, 9, 5), compact)


def test_swizzle_8x4_errors():
    with pytest.raises(TypeError, match="must be uint8"):
        swizzle_scales_8x4(np.zeros((4, 4), np.int32))
    with pytest.raises(TypeError, match="must be uint8"):
        unswizzle_scales_8x4(np.zeros(32, np.int8), 4, 4)
    # 4 x 4 compact scales: roundup(4, 8) * roundup(4, 4) = 32 bytes
    with pytest.raises(ValueError, match=r"16 bytes does not match rows=4, cols=4 \(32 bytes\)"):
        unswizzle_scales_8x4(np.zeros(16, np.uint8), 4, 4)
    with pytest.raises(ValueError, match="must be 1-D"):
        unswizzle_scales_8x4(np.zeros((8, 4), np.uint8), 4, 4)


def test_grouped_offsets_hand_example():
    """SPEC 9.2 drawing: splits [3, 0, 130], K = 64."""
    o = grouped_scale_offsets([3, 0, 130], 64)
    assert o["row_offsets"].tolist() == [0, 3, 3, 133]
    assert o["row_data"].tolist() == [0, 96, 96, 4256]
    assert o["row_scale"].tolist() == [0, 512, 512, 1536]
    assert o["col_data"].tolist() == [0, 512, 512, 5120]
    assert o["col_scale"].tolist() == [0, 512, 512, 2048]


def test_swizzle_errors():
    with pytest.raises(TypeError, match="must be uint8"):
        swizzle_scales(np.zeros((4, 4), np.int32))
    with pytest.raises(ValueError, match="must be 2-D"):
        swizzle_scales(np.zeros(4, np.uint8))
    # SPEC 8.2: 4 x 4 compact scales swizzle to roundup(4, 128) * roundup(4, 4) = 512 bytes, one 1-D buffer
    with pytest.raises(ValueError, match=r"100 bytes does not match rows=4, cols=4 \(512 bytes\)"):
        unswizzle_scales(np.zeros(100, np.uint8), 4, 4)
    with pytest.raises(ValueError, match="must be 1-D"):
        unswizzle_scales(np.zeros((128, 4), np.uint8), 4, 4)
    with pytest.raises(ValueError, match="splits must be >= 0"):
        grouped_scale_offsets([1, -1], 16)


splits_strategy = st.lists(st.sampled_from([0, 0, 1, 5, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200]), min_size=1, max_size=9)


@given(splits_strategy, st.sampled_from([16, 48, 64]), st.booleans(), st.sampled_from(["rn", "sr"]),
       st.sampled_from([(1, 16), (16, 16)]), st.integers(0, 2**31))
@settings(max_examples=25, deadline=None)
def test_grouped_equals_per_group(splits, k, use_rht, rounding, block, seed):
    rng = np.random.default_rng(seed)
    t = sum(splits)
    x = rng.standard_normal((t, k)).astype(ml_dtypes.bfloat16)
    opts = dict(columnwise=True, rht=use_rht, rounding=rounding, block=block, seed=seed, offset=3)
    g = oracle.group_quantize(x, splits, **opts)
    assert np.array_equal(g.row_offsets, np.concatenate([[0], np.cumsum(splits)]))  # SPEC 9.2: first row of each group
    offs = grouped_scale_offsets(splits, k)  # (against SPEC 9.2's worked example: test_grouped_offsets_hand_example)
    start = 0
    for i, m in enumerate(splits):
        ref = oracle.quantize(x[start : start + m], **{**opts, "offset": 3 + i})
        start += m
        for plane, rp, buf, sbuf, cbuf, do, so in (
            ("row", ref.row, g.row_data, g.row_scales, g.row_scales_compact, offs["row_data"], offs["row_scale"]),
            ("col", ref.col, g.col_data, g.col_scales, g.col_scales_compact, offs["col_data"], offs["col_scale"]),
        ):
            assert np.array_equal(buf[do[i] : do[i + 1]], rp.data.reshape(-1)), plane
            assert np.array_equal(sbuf[so[i] : so[i + 1]], rp.swizzled_scales()), plane
            comp = cbuf[so[i] : so[i + 1]].reshape(-1, (rp.scales.shape[1] + 3) // 4 * 4) if so[i + 1] > so[i] else None
            if comp is not None:
                assert np.array_equal(comp[: rp.rows, : rp.scales.shape[1]], rp.scales)
                assert np.count_nonzero(comp) == np.count_nonzero(rp.scales)
        assert g.row_amax[i] == ref.row.amax and g.col_amax[i] == ref.col.amax
    assert g.row_data.size == offs["row_data"][-1] and g.col_scales.size == offs["col_scale"][-1]
    cap = oracle.grouped_capacities(t, k, len(splits))
    assert offs["row_scale"][-1] <= cap["row_scale"] and offs["col_data"][-1] <= cap["col_data"]
    assert offs["col_scale"][-1] <= cap["col_scale"] and offs["row_data"][-1] == cap["row_data"]


def test_capacity_hand_cases():
    # SPEC 9.3: T = 129 in E = 2 groups needs at most 2 row tiles ([1, 128]); T = 512 in E = 8 at most 39 column
    # blocks of 16 tokens and 15 of 64 (seven groups of 1 row and one of 505); T < E keeps E units of each (T = 3,
    # E = 8 needs at most 3), so T = 0 leaves no buffer but the rowwise data empty
    cap = oracle.grouped_capacities(129, 16, 2)
    offs = grouped_scale_offsets([1, 128], 16)
    assert offs["row_scale"][-1] == 256 * 4 == cap["row_scale"]
    cap = oracle.grouped_capacities(512, 64, 8)
    assert cap["col_data"] == 64 * 39 * 16 // 2 and cap["col_scale"] == 128 * 15 * 4
    assert cap["row_scale"] == 128 * 11 * 4  # 7 + ceil(505 / 128)
    cap = oracle.grouped_capacities(3, 16, 8)
    assert cap == {"row_data": 24, "row_scale": 128 * 8 * 4, "col_data": 16 * 8 * 16 // 2, "col_scale": 128 * 8 * 4}
    cap = oracle.grouped_capacities(0, 16, 4)
    assert cap == {"row_data": 0, "row_scale": 128 * 4 * 4, "col_data": 16 * 4 * 16 // 2, "col_scale": 128 * 4 * 4}


@pytest.mark.parametrize("t,e", [(0, 1), (1, 3), (5, 2), (17, 2), (33, 3), (40, 4), (129, 2), (130, 3)])
def test_capacity_is_the_largest_over_every_split(t, e):
    # SPEC 9.3: with T >= E the capacities are the maxima of the SPEC 9.2 sizes over every split of t rows into e
    # groups, enumerated (K = 16, so the rowwise scales are 128 x 4 bytes per row tile); with T < E, E units
    best = dict.fromkeys(("row_scale", "col_data", "col_scale"), 0)
    for cuts in itertools.combinations_with_replacement(range(t + 1), e - 1):
        splits = np.diff([0, *cuts, t])
        offs = grouped_scale_offsets(list(splits), 16)
        for name in best:
            best[name] = max(best[name], int(offs[name][-1]))
    if t < e:  # the largest is t units of each; the capacity keeps e
        assert best == {"row_scale": 512 * t, "col_data": 128 * t, "col_scale": 512 * t}
        best = {"row_scale": 512 * e, "col_data": 128 * e, "col_scale": 512 * e}
    cap = oracle.grouped_capacities(t, 16, e)
    assert {name: cap[name] for name in best} == best


@pytest.mark.parametrize(
    "splits,exc",
    [([1, 2], ValueError), ([4, -1, 1], ValueError), ([], ValueError), ([[4]], ValueError), ([1.5, 2.5], TypeError)],
)
def test_group_quantize_bad_splits(splits, exc):
    with pytest.raises(exc):
        oracle.group_quantize(np.zeros((4, 16), np.float32), splits)


@pytest.mark.parametrize("splits,t,want", [
    ([100, 100, 150, 300], 300, [100, 100, 100, 0]),  # cumulative offsets passed as sizes
    ([-5, 120, 200], 300, [0, 120, 180]),  # a negative size counts as 0, the last group is cut at T
    ([50, 0, 70], 300, [50, 0, 70]),  # a sum below T: unchanged, rows 120.. belong to no group
    ([-1, -2], 10, [0, 0]),
    ([400, 7], 300, [300, 0]),
    ([3, 0, 4], 7, [3, 0, 4]),  # valid splits are their own cut
    ([2**62, 2**62, 5], 300, [300, 0, 0]),  # sizes whose int64 running sum would overflow (SPEC 9.4's clamp)
    ([5, 2**63 - 1, 2**63 - 1], 300, [5, 295, 0]),
    ([-2**63, 2**63 - 1, 9], 300, [0, 300, 0]),
])
def test_cut_splits_hand_cases(splits, t, want):
    """SPEC 9.4 by hand."""
    got = oracle.cut_splits(np.array(splits, np.int64), t)
    assert got.dtype == np.int64 and got.tolist() == want


def test_group_quantize_all_empty_groups_and_amax():
    x = np.zeros((0, 32), np.float32)
    g = oracle.group_quantize(x, [0, 0, 0], columnwise=True)
    assert g.row_data.size == 0 and g.col_scales.size == 0 and np.all(g.row_amax == 0)
    y = np.ones((4, 32), np.float32)
    g = oracle.group_quantize(y, [1, 3], amax=[2688.0, 2688.0])
    # supplied amax 2688 -> S_enc 1; block amax 1 -> sf = fp32(1/6) = 0.1666667 -> E4M3 1.375 * 2**-3 = 0x23
    assert np.all(g.row_planes[0].scales == 0x23) and np.all(g.row_planes[1].scales == 0x23)


def test_cumulative_offsets_as_splits_get_a_hint():
    with pytest.raises(ValueError, match="cumulative offsets"):
        oracle.group_quantize(np.zeros((300, 16), np.float32), [100, 200, 300])


def test_grouped_offsets_need_k_multiple_of_16():
    """SPEC 1 / 9.2: K is a multiple of 16."""
    with pytest.raises(ValueError, match="K=24 must be a multiple of 16"):
        grouped_scale_offsets([16], 24)


def test_grouped_amaxes_of_planes_and_groups():
    """A plane not asked for has amax 0 per group (GroupedNVFP4Tensor's docstring); a negative supplied group amax is
    refused (SPEC 4.3); a (row, col) pair of per-group amaxes lands on its planes."""
    x = np.ones((32, 16), np.float32)
    assert np.array_equal(oracle.group_quantize(x, [16, 16]).col_amax, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=">= 0"):
        oracle.group_quantize(x, [16, 16], amax=[0.5, -0.5])
    g = oracle.group_quantize(x, [16, 16], columnwise=True, amax=([1.0, 2.0], [3.0, 4.0]))
    assert g.row_amax.tolist() == [1.0, 2.0] and g.col_amax.tolist() == [3.0, 4.0]


@pytest.mark.parametrize("call, exc, match", [
    (lambda: unswizzle_scales(np.zeros(512, np.int32), 4, 4), TypeError, "swizzled scales must be uint8"),
    (lambda: cut_splits([[4, 4]], 8), ValueError, "non-empty 1-D sequence of group sizes"),
    (lambda: cut_splits([4.0, 4.0], 8), TypeError,  # a float is not rounded (as group_quantize's splits)
     "splits must be integers"),
    (lambda: grouped_scale_offsets([4.0, 4.0], 16), TypeError, "integer group sizes"),
    (lambda: grouped_scale_offsets([], 16), ValueError, "integer group sizes"),
    (lambda: oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], columnwise=True, amax=([1.0, 1.0],)),
     ValueError, r"a tuple amax must be \(row_amaxes, col_amaxes\)"),
    (lambda: oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], amax=np.array(["1", "2"])), ValueError,
     "amax must hold real numbers"),
    (lambda: oracle.group_quantize(np.ones((8, 16), np.float32), [4, 4], row_scaled=True, amax=np.ones(7)),
     ValueError, r"one real number per row \(8\)"),
    (lambda: grouped_capacities(8, 24, 2), ValueError,
     "K a multiple of 16"),
    (lambda: grouped_capacities(8, 16, 0), ValueError,
     "num_groups >= 1"),
])
def test_grouped_layout_refusals(call, exc, match):
    """Refusals of the grouped layout helpers (SPEC 8.2's 1-D uint8 buffer, 9.1's splits and amaxes, 9.3's sizes)."""
    with pytest.raises(exc, match=match):
        call()
