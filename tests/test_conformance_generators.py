"""What conformance/generators.py draws and conformance/cases.py keeps, against docs/conformance.md ("What the
generators draw", "TE's variants", "Cases, seeds and shards", the saved .npz cases) and SPEC 10.2 (a 64-bit SR seed).
Expected values come from those documents or are worked by hand in the comments; none is taken from the generator's
own output. The counts are over fixed seeds, so each test draws the same cases on every run.
"""

from __future__ import annotations

import zlib
from collections import Counter

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import generated_cases

from conformance.cases import Case, case_size, load_case, save_case
from conformance.generators import (
    DTYPE_TINY,
    EDGE_ROWS,
    VALUE_KINDS,
    _amax_may_be_supplied,
    _four_over_six_ties,
    _nan_block,
    _row_amax_supply,
    _ties,
    _tree_order_values,
    case_rng,
    draw_rht_signs,
    gen_k,
    gen_rows,
    gen_splits,
    gen_values,
    generate,
)
from oracle.rht import DEFAULT_RHT_SIGNS

SMALL = 1 << 14


# ---------------------------------------------------------------------------------------------------------------
# seeds (docs: "a numpy PCG64 seeded by [seed, crc32(op), index]")
# ---------------------------------------------------------------------------------------------------------------

def test_case_rng_is_pcg64_of_seed_crc32_op_and_index():
    for seed, op, index in ((0, "quantize", 0), (7, "group_quantize", 5), (3, "e2m1", 123456)):
        want = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(op.encode()), index])))
        assert np.array_equal(case_rng(seed, op, index).integers(0, 2**63, 8), want.integers(0, 2**63, 8))
    # two ops of the same generator draw different cases for the same (seed, index)
    a = generate("e2m1", 0, 0, "codec", {})
    b = generate("e4m3", 0, 0, "codec", {})
    assert a.arrays["x"].shape != b.arrays["x"].shape or not np.array_equal(a.arrays["x"].view(np.uint32),
                                                                              b.arrays["x"].view(np.uint32))


def test_generate_keeps_the_case_coordinates():
    c = generate("quantize", 5, 17, "quantize", {"max_elems": SMALL})
    assert (c.op, c.seed, c.index) == ("quantize", 5, 17) and c.key() == "quantize/5/17"


# ---------------------------------------------------------------------------------------------------------------
# shapes (docs: rows 0..5000 biased to 0, 1 and the edges ... 255/256/257; K a multiple of 16 up to 2048,
# 3% of the quantize cases 4096, 5120 or 11328, within max_elems)
# ---------------------------------------------------------------------------------------------------------------

def test_rows_stay_in_range_and_reach_every_edge():
    rng = np.random.default_rng(1)
    rows = [gen_rows(rng, 5000) for _ in range(6000)]
    assert min(rows) == 0 and max(rows) <= 5000
    # the docs' edges (written out, not EDGE_ROWS: the test must not follow a changed constant)
    edges = (0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)
    assert set(edges) <= set(rows) and set(edges) <= set(EDGE_ROWS)
    # "biased to" the edges: each edge is drawn far more often than a log-uniform row count would give it (about
    # 0.02% for a row near 257 out of 0..5000); 1% of 6000 draws is a loose floor
    counts = Counter(rows)
    assert all(counts[r] >= 60 for r in edges), {r: counts[r] for r in edges}
    for lo, hi in ((5, 16), (0, 1), (17, 17)):
        got = {gen_rows(rng, hi, lo) for _ in range(400)}
        assert got <= set(range(lo, hi + 1)) and {lo, hi} <= got


def test_k_is_a_multiple_of_16_up_to_max_k():
    rng = np.random.default_rng(2)
    for max_k in (16, 48, 2048, 4096):
        ks = {gen_k(rng, max_k) for _ in range(2000)}
        assert all(k % 16 == 0 and 16 <= k <= max_k for k in ks), sorted(ks)[:5]
        assert max_k in ks and 16 in ks


def test_quantize_sizes_keep_max_elems_and_draw_the_wide_model_widths():
    wide = 0
    cases = generated_cases("quantize", 700, seed=4)
    for c in cases:
        m, k = c.arrays["x"].shape
        assert k % 16 == 0 and m * k <= 1 << 18, (m, k)
        assert k <= 2048 or k in (4096, 5120, 11328)
        wide += k in (4096, 5120, 11328)
    assert 5 <= wide <= 60  # about 3% of 700 = 21
    for c in generated_cases("quantize", 200, seed=4, max_elems=3000):
        m, k = c.arrays["x"].shape
        assert m * k <= 3000


# ---------------------------------------------------------------------------------------------------------------
# splits (docs: random, with zeros, one giant group, 128-aligned (T >= 128) or unaligned)
# ---------------------------------------------------------------------------------------------------------------

def test_every_split_kind_is_what_its_name_says():
    rng = np.random.default_rng(3)
    by_kind: dict[str, list] = {}
    for _ in range(3000):
        s, kind = gen_splits(rng, 1024, 8)
        assert s.dtype == np.int64 and s.size == 8 and int(s.sum()) == 1024 and (s >= 0).all()
        by_kind.setdefault(kind, []).append(s)
    assert set(by_kind) == {"random", "zeros", "giant", "aligned", "unaligned"}
    # zeros: each group's weight set to 0 with probability 0.4, so P(no zero group of 8) = 0.6^8 < 2%
    assert np.mean([(s == 0).any() for s in by_kind["zeros"]]) > 0.8
    # giant: all T rows in one group
    assert all((s > 0).sum() == 1 for s in by_kind["giant"])
    # the giant group is any group, not always the same one
    assert len({int(np.argmax(s)) for s in by_kind["giant"]}) > 4
    # unaligned: sizes from 1, 15, 17, 63, 65, 127, 129 -- odd, so never all multiples of 16
    assert np.mean([(s % 16 != 0).any() for s in by_kind["unaligned"]]) > 0.9


# ---------------------------------------------------------------------------------------------------------------
# values (docs: normal, heavy-tailed, constant blocks, zeros (with -0), subnormals, near the maximum, integers,
# mixtures and E2M1 ties; NaN / +-Inf / -0 sprinkled into 20% of the cases)
# ---------------------------------------------------------------------------------------------------------------

def test_every_value_kind_is_drawn():
    rng = np.random.default_rng(4)
    kinds = Counter(gen_values(rng, 2, 16, "float32")[1] for _ in range(1500))
    assert set(kinds) == set(VALUE_KINDS), kinds


def test_subnormal_and_zero_kinds():
    rng = np.random.default_rng(5)
    for dtype in ("float32", "bfloat16", "float16"):
        v, _ = gen_values(rng, 16, 64, dtype, "subnormal", specials=False)
        assert (np.abs(v) < DTYPE_TINY[dtype]).all()  # below the least normal: subnormals (and flushed zeros)
        z, _ = gen_values(rng, 16, 64, dtype, "zeros", specials=False)
        assert (z == 0).all() and np.signbit(z).any() and (~np.signbit(z)).any()  # +0 and -0


def test_ties_tiles_have_12_on_the_diagonal_2688_in_most_and_vary_the_scale():
    rng = np.random.default_rng(6)
    with_2688, scales = 0, set()
    for _ in range(200):
        v = _ties(rng, 32, 48, "float32")
        r, c = np.indices(v.shape)
        diag = np.abs(v[(r % 16) == (c % 16)])
        top = np.abs(v).max()
        unit = diag.min() / 12  # 2^j
        assert unit == 2.0 ** np.round(np.log2(unit))
        # every diagonal element is 12 * 2^j but (at most) the one overwritten by 2688 * 2^j
        assert ((diag == 12 * unit) | (diag == 2688 * unit)).all() and (diag == 2688 * unit).sum() <= 1
        with_2688 += top == 2688 * unit
        scales.add(unit)
    assert 0.65 < with_2688 / 200 < 0.95  # 80%
    assert len(scales) > 10  # "times 2^j"


def test_specials_nan_inf_and_negative_inf_in_about_a_fifth_of_thegenerated_cases():
    seen = Counter()
    n = 0
    rng = np.random.default_rng(7)
    for _ in range(1000):
        v, _ = gen_values(rng, 8, 32, "float32", "normal")
        n += 1
        hit = ~np.isfinite(v) | ((v == 0) & np.signbit(v))
        seen["any"] += hit.any()
        seen["nan"] += np.isnan(v).any()
        seen["+inf"] += (v == np.inf).any()
        seen["-inf"] += (v == -np.inf).any()
        seen["-0"] += ((v == 0) & np.signbit(v)).any()
    assert 0.15 < seen["any"] / n < 0.25, seen
    assert min(seen["nan"], seen["+inf"], seen["-inf"], seen["-0"]) > 20, seen
    v, _ = gen_values(rng, 64, 64, "float32", "normal", specials=False)
    assert np.isfinite(v).all()


def test_gemm_exact_small_space_has_no_specials_and_small_sizes():
    for c in generated_cases("gemm_exact", 150, seed=8):
        a, b = c.arrays["a"].astype(np.float32), c.arrays["b"].astype(np.float32)
        assert np.isfinite(a).all() and np.isfinite(b).all()
        assert a.shape[0] <= 6 and b.shape[0] <= 6 and a.shape[1] <= 128


# ---------------------------------------------------------------------------------------------------------------
# quantize options (docs: dtype f32 / f16 / bf16; planes row / col / both; four rules; RHT (bf16 with a columnwise
# plane) with the default or a random 16-bit sign mask; RN or SR (seed and counter offset, 2^32 - 1 included);
# 1x16 or 16x16; swizzled or compact; an amax computed or supplied (one value, a row / col pair, per group;
# sometimes 0, Inf or NaN))
# ---------------------------------------------------------------------------------------------------------------

def test_quantize_options_cover_the_documented_values():
    seen = Counter()
    for c in generated_cases("quantize", 500, seed=9, max_elems=SMALL) + generated_cases("group_quantize", 300, seed=9, max_elems=SMALL):
        o, a = c.options, c.arrays
        dtype = a["x"].dtype.name
        planes = "both" if o["rowwise"] and o["columnwise"] else ("row" if o["rowwise"] else "col")
        seen.update([f"{c.op}:dtype={dtype}", f"planes={planes}", f"rule={o['rule']}", f"rounding={o['rounding']}",
                     f"block={o['block'][0]}x{o['block'][1]}", f"swizzled={o['swizzled']}"])
        if o["rht"]:
            assert dtype == "bfloat16" and o["columnwise"], o
            seen["rht"] += 1
            seen["rht_random_mask"] += o["rht_signs"] != DEFAULT_RHT_SIGNS
        if o["rounding"] == "sr":
            seen["sr_offset_max"] += o["offset"] == 2**32 - 1
            seen["sr_offset_0"] += o["offset"] == 0
            seen["sr_seed_high"] += o["seed"] >= 2**32  # SPEC 10.2: key = (seed mod 2^32, seed >> 32)
        else:
            assert o["seed"] == 0 and o["offset"] == 0
        if "amax" in a and c.tags["amax"] in ("one", "pair"):
            amax = a["amax"]
            e = a["splits"].size if "splits" in a else None
            want = {"one": 1, "pair": 2}[c.tags["amax"]]
            assert amax.shape == ((want,) if e is None else (want, e)), (amax.shape, c.tags["amax"], e)
            seen[f"amax={c.tags['amax']}"] += 1
            seen["amax_nan"] += np.isnan(amax).any()
            seen["amax_inf"] += np.isinf(amax).any()
            seen["amax_zero"] += (amax == 0).any()
    for key in ("block=1x16", "block=16x16", "swizzled=True", "swizzled=False",
                *(f"{op}:dtype={d}" for op in ("quantize", "group_quantize") for d in ("float32", "float16", "bfloat16")),
                "planes=row", "planes=col", "planes=both",
                "rule=te", "rule=te_fused_rht", "rule=torchao", "rule=torchao_noscale", "rounding=sr", "rht",
                "rht_random_mask", "sr_offset_max", "sr_offset_0", "sr_seed_high", "amax=one", "amax=pair",
                "amax_nan", "amax_inf", "amax_zero"):
        assert seen[key] > 0, (key, seen)


def test_random_rht_sign_masks_use_all_16_bits():
    rng = np.random.default_rng(10)
    masks = [draw_rht_signs(rng, {}, (0.0, 1.0)) for _ in range(300)]
    assert all(kind == "random" and 0 <= m < 1 << 16 for m, kind in masks)
    assert np.bitwise_or.reduce([m for m, _ in masks]) == 0xFFFF
    assert any(m >= 0x8000 for m, _ in masks)
    assert draw_rht_signs(rng, {}, (1.0, 0.0)) == (DEFAULT_RHT_SIGNS, "default")


def test_rht_op_draws_default_and_random_masks():
    masks = {c.options["rht_signs"] for c in generated_cases("rht", 60, seed=11)}
    assert DEFAULT_RHT_SIGNS in masks and len(masks - {DEFAULT_RHT_SIGNS}) > 5


# ---------------------------------------------------------------------------------------------------------------
# TE's variants (docs: row-scaled amax = each row's max |x| times 1, 2, 0.5 or 1 + 2^-20, sometimes 0, Inf or NaN;
# 4over6 special amax 0, +Inf or NaN; tie values with u = 2^j, j in [-4, 4])
# ---------------------------------------------------------------------------------------------------------------

def test_row_amax_supply_factors_and_specials():
    x = np.array([[1.0, -3.0, 2.0], [0.5, 0.25, -0.125], [0.0, 0.0, 0.0], [np.nan, 8.0, np.inf]])
    row_max = np.array([3.0, 0.5, 1.0, 8.0])  # (a row without a finite nonzero value: 1; NaN / Inf ignored)
    ratios, specials = set(), Counter()
    rng = np.random.default_rng(12)
    for _ in range(400):
        a = _row_amax_supply(rng, x)
        assert a.dtype == np.float32 and a.shape == (4,)
        assert sum(np.isnan(v) or np.isinf(v) or v == 0 for v in a.tolist()) <= 1  # ("now and then one of them")
        for v, r in zip(a.tolist(), row_max.tolist(), strict=True):
            if np.isnan(v) or np.isinf(v) or v == 0:
                specials["nan" if np.isnan(v) else ("inf" if np.isinf(v) else "zero")] += 1
            else:
                ratios.add(float(np.float32(v)) / r)
    assert ratios == {1.0, 2.0, 0.5, float(np.float32(1 + 2.0**-20))}, ratios
    assert set(specials) == {"nan", "inf", "zero"}, specials


def test_a_supplied_amax_is_drawn_only_where_the_space_names_one_or_pair():
    assert _amax_may_be_supplied({}) and _amax_may_be_supplied({"amax": ["one"]})
    assert _amax_may_be_supplied({"amax": ["pair"]}) and _amax_may_be_supplied({"amax": ["computed", "pair"]})
    assert not _amax_may_be_supplied({"amax": ["computed"]})
    space = dict(rule=["te"], rounding=["rn"], rht=[False], block=[[1, 16]], row_scaled=[True], amax=["computed"])
    cases = generated_cases("quantize", 120, seed=22, **space) + generated_cases("group_quantize", 60, seed=22, **space)
    assert all(c.options.get("row_scaled") for c in cases)
    assert not [c.index for c in cases if {"amax", "col_amax"} & set(c.arrays) or c.tags.get("amax") == "rows"]


def test_row_nan_cases_hold_their_nan_and_the_specials_tag_says_what_x_holds():
    """docs: 25% of the row-scaled cases take a NaN at a random element (tag row_nan); the specials tag names the
    non-finite values x holds."""
    cases = generated_cases("quantize", 300, seed=23, max_elems=1 << 12, rule=["te"], rounding=["rn"], rht=[False],
                            block=[[1, 16]], row_scaled=[True])
    tagged = [c for c in cases if c.tags.get("row_nan") == "yes"]
    assert 0.15 * len(cases) < len(tagged) < 0.35 * len(cases), len(tagged)
    for c in cases:
        x = c.arrays["x"].astype(np.float32)
        holds = "+".join(n for n, f in (("nan", np.isnan), ("inf", np.isinf)) if f(x).any()) or "none"
        assert c.tags["specials"] == holds, (c.index, c.tags)
        assert c.tags.get("row_nan") != "yes" or np.isnan(x).any(), c.index


def test_grouped_row_scaled_col_amax_is_each_groups_own():
    """docs: col_amax [E, K] is, per group, each column's max |x| over the group's rows (1 where it has no finite
    nonzero value) times 1, 2, 0.5 or 1 + 2^-20, now and then one value 0, Inf or NaN."""
    seen = 0
    for c in generated_cases("group_quantize", 200, seed=24, max_elems=1 << 12, rule=["te"], rounding=["rn"],
                             rht=[False], block=[[1, 16]], row_scaled=[True]):
        if ("col_amax" not in c.arrays or c.options.get("splits_rule", "exact") != "exact"
                or c.arrays["x"].dtype != np.float32):  # (fp32: the draw's float64 values kept to 2^-24)
            continue
        x, ca = c.arrays["x"].astype(np.float64), c.arrays["col_amax"].astype(np.float64)
        ends = np.cumsum(c.arrays["splits"])
        for g, (e0, e1) in enumerate(zip(np.r_[0, ends[:-1]], ends, strict=True)):
            xg = np.where(np.isfinite(x[e0:e1]), np.abs(x[e0:e1]), 0.0)
            m = xg.max(axis=0) if e1 > e0 else np.zeros(x.shape[1])
            m = np.where(m > 0, m, 1.0)
            special = ~np.isfinite(ca[g]) | (ca[g] == 0)
            assert special.sum() <= 1, (c.index, g)
            normal = ~special & (m >= 2.0**-126)  # (a subnormal max keeps fewer bits in fp32)
            r = ca[g][normal] / m[normal]
            near = np.min(np.abs(r[:, None] / np.array([1.0, 2.0, 0.5, 1.0 + 2.0**-20]) - 1.0), axis=1)
            assert (near < 2.0**-22).all(), (c.index, g)  # (two fp32 roundings: x's and the product's)
            seen += 1
    assert seen >= 30, seen


def test_fo6_tree_values_hold_the_searched_tiles_in_both_planes():
    """docs: golden vector 16's tiles: tile (rows 0-15, columns 0-15) for the rowwise plane and, transposed, tile
    (rows 0-15, columns 16-31) for the columnwise plane; one 6, every other value in [-3, 3]; all times 2^j, j in
    [-4, 4]."""
    from oracle.vectors import tree_order_tiles

    scales = set()
    for seed in range(8):
        mode = ("mae", "mse")[seed % 2]
        x = _tree_order_values(np.random.default_rng(seed), 32, 48, mode)
        if x is None:
            continue
        rows, cols = (t.astype(np.float64) for t in tree_order_tiles(np.random.default_rng(seed), 2, mode))
        scale = x[31, 47] / 6.0
        assert scale in {2.0**j for j in range(-4, 5)}, scale
        assert np.array_equal(x[:16, :16], rows * scale) and np.array_equal(x[:16, 16:32], cols.T * scale)
        assert np.abs(x).max() == 6.0 * scale and (np.abs(np.delete(x.reshape(-1), -1)) <= 3.0 * scale).all()
        scales.add(scale)
    assert len(scales) >= 3, scales
    for c in generated_cases("quantize", 600, seed=25, rule=["te"], rounding=["rn"], rht=[False], block=[[16, 16]],
                             four_over_six=["mae", "mse"]):
        if c.tags.get("values") == "fo6_tree":
            assert "amax" not in c.arrays and "splits" not in c.arrays, c.index


def test_4over6_special_amax_draws_zero_inf_and_nan():
    got = set()
    for op in ("quantize", "group_quantize"):
        for c in generated_cases(op, 1500, seed=13, max_elems=1 << 12, rule=["te"], rounding=["rn"], four_over_six=["mae"]):
            if c.tags.get("amax") == "special":
                a = c.arrays["amax"].reshape(-1)
                got |= {"nan" if np.isnan(v) else ("inf" if np.isinf(v) else ("zero" if v == 0 else "finite"))
                        for v in a.tolist()}
    assert {"nan", "inf", "zero"} <= got, got


def test_special_amax_cases_keep_their_zero_and_tiny_blocks():
    """docs (_special_amax): a case tagged amax "special" holds one all-zero block and one block of +-the dtype's
    least normal value (where x has two blocks), whatever was drawn after them: 4over6's tie values come before
    them, and a case that already has them takes no ties."""
    seen = Counter()
    for op in ("quantize", "group_quantize"):
        for c in generated_cases(op, 1500, seed=31, max_elems=1 << 12, rule=["te"], rounding=["rn"], rht=[False]):
            if c.tags.get("amax") != "special":
                continue
            x = c.arrays["x"].astype(np.float64)
            blocks = x.reshape(-1, 16) if x.shape[1] % 16 == 0 else None
            if blocks is None or blocks.shape[0] < 2:
                continue
            tiny = DTYPE_TINY[str(c.arrays["x"].dtype)]
            assert (blocks == 0).all(axis=1).any(), (op, c.index)
            assert (np.abs(blocks) == tiny).all(axis=1).any(), (op, c.index)
            seen[(op, c.tags["te_variant"].split(":")[0], c.tags.get("values"))] += 1
    assert {k[1] for k in seen} >= {"plain", "4over6"}, seen
    assert any(k[2] == "fo6_ties" for k in seen), seen


def test_te_variants_leave_the_cases_own_draws_alone():
    """docs (_te_variants, _apply_te_variants): TE's variants, and the values and amaxes they bring, come from child
    streams, so the case's own stream is the same whichever variants its space offers: a case has the same other
    options where the space offers no variant as where it offers them all (and, where none was drawn, the same
    arrays and tags). The space names the quantize kernels, as a device backend's does: that draw follows the
    variants' in the case's own stream (4over6 takes no kernel draw)."""
    variant_keys = {"four_over_six", "four_over_six_fast_math", "global_scale_max", "row_scaled"}
    kernels = dict(quantize_kernel=["auto", "general"])
    compared = Counter()
    for op in ("quantize", "group_quantize"):
        full = generated_cases(op, 400, seed=32, max_elems=1 << 12, **kernels)
        plain = generated_cases(op, 400, seed=32, max_elems=1 << 12, four_over_six=[None], row_scaled=[False],
                                **kernels)
        for a, b in zip(full, plain, strict=True):
            drop = variant_keys | ({"quantize_kernel"} if a.options.get("four_over_six") else set())
            assert ({k: v for k, v in a.options.items() if k not in drop}
                    == {k: v for k, v in b.options.items() if k not in drop}), (op, a.index)
            compared[a.tags["te_variant"].split(":")[0]] += 1
            if a.tags["te_variant"] == "plain":
                assert a.arrays.keys() == b.arrays.keys(), (op, a.index)
                for k in a.arrays:
                    assert np.array_equal(a.arrays[k], b.arrays[k], equal_nan=True), (op, a.index, k)
                assert a.tags == b.tags, (op, a.index)
    assert compared["plain"] > 300 and compared["row_scaled"] > 20 and compared["4over6"] > 20, compared


def test_4over6_tie_units_span_the_documented_powers():
    rng = np.random.default_rng(14)
    units = set()
    for _ in range(200):
        v = _four_over_six_ties(rng, 16, 32, (1, 16))
        rest = np.sort(np.abs(v).reshape(-1))[:-1]  # drop the amax element
        units.add(float(rest.max() / 12))
    assert units <= {2.0**j for j in range(-4, 5)} and len(units) >= 7, units


# ---------------------------------------------------------------------------------------------------------------
# codecs, layout, dequantize, grouped GEMM, mma
# ---------------------------------------------------------------------------------------------------------------

def test_codec_cases_hold_grid_values_ties_and_their_neighbours():
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    ties = (grid[1:] + grid[:-1]) / 2
    kinds, near = Counter(), Counter()
    for c in generated_cases("e2m1", 200, seed=15):
        kinds[c.tags["values"]] += 1
        x = np.abs(c.arrays["x"][np.isfinite(c.arrays["x"])])
        if c.tags["values"] == "ties":
            on = np.isin(x, ties).mean()
            near["ties_exact"] += on > 0.2
            near["ties_off"] += on < 0.8  # +-1 ulp around a tie
        if c.tags["values"] == "grid":
            on = np.isin(x, grid).mean()
            near["grid_off"] += on < 0.9
    assert {"grid", "ties", "random_bits", "wide"} <= set(kinds), kinds
    assert near["ties_exact"] and near["ties_off"] and near["grid_off"], near


def test_layout_scale_bytes_are_nonzero():
    for c in generated_cases("layout", 200, seed=16):
        s = c.arrays["scales"]
        assert s.dtype == np.uint8 and (s != 0).all() and s.shape[0] <= 700 and 1 <= s.shape[1] <= 40


def test_dequantize_draws_every_offset_signed_subnormal_scales_and_each_amax_kind():
    seen = Counter()
    for c in generated_cases("dequantize", 400, seed=17):
        o, a = c.options, c.arrays
        seen[f"offset={o['offset']}"] += 1
        amax = float(a["amax"][0])
        seen["amax=nan"] += np.isnan(amax)
        seen["amax=inf"] += np.isinf(amax)
        seen["amax=0"] += amax == 0
        if c.tags["scales"] == "subnormal":
            s = a["scales"]
            assert ((s & 0x7F) < 8).all()  # E4M3 exponent field 0: subnormals and zeros only
            seen["signed"] += bool((s & 0x80).any())
    for key in ("offset=0", "offset=8", "offset=24", "amax=nan", "amax=inf", "amax=0", "signed"):
        assert seen[key] > 0, (key, seen)


def test_grouped_gemm_draws_many_experts_wide_operands_rht_and_every_rule_family():
    seen = Counter()
    for c in generated_cases("grouped_gemm", 300, seed=18):
        a, o = c.arrays, c.options
        e = a["splits"].size
        n, k = a["w"].shape[0] // e, a["x"].shape[1]
        seen["E32/64"] += e in (32, 64)
        if c.tags["contraction"] == "normal":
            # N, K 16..128, a quarter up to 512 (fprop's N of any size below 16 * (8 or 32)): above 144 only then
            assert k % 16 == 0 and 16 <= k <= 512 and 1 <= n <= 512, (n, k)
            seen["wide"] += max(n, k) > 144
        seen["rht"] += bool(o["rht"])
        seen[f"rules={c.tags['operand_rules']}"] += 1
        if "b_splits" in o:
            want = a["splits"] if o["kind"] == "wgrad" else np.full(e, n)
            b = np.asarray(o["b_splits"])
            assert b.sum() == want.sum() and (b != want).sum() == 2  # rows moved between two groups
    for key in ("E32/64", "wide", "rht", "rules=te", "rules=torchao", "rules=torchao_noscale"):
        assert seen[key] > 0, (key, seen)


def test_mma_nan_scale_bytes_are_both_patterns():
    pats = set()
    for c in generated_cases("mma_sm100", 400, seed=19):
        if c.tags["nan_scales"] == "True":
            for s in (c.arrays["a_scales"], c.arrays["b_scales"]):
                pats |= set(np.unique(s[(s & 0x7F) == 0x7F]).tolist())
        else:
            assert not any(((s & 0x7F) == 0x7F).any() for s in (c.arrays["a_scales"], c.arrays["b_scales"]))
    assert pats == {0x7F, 0xFF}


# ---------------------------------------------------------------------------------------------------------------
# cases.py: save / load round trip, case_size
# ---------------------------------------------------------------------------------------------------------------

def test_saved_case_round_trips_every_field(tmp_path):
    x = np.array([[1.0, -0.0, np.nan, 3.0]], np.float32).astype(ml_dtypes.bfloat16)
    case = Case("group_quantize", 3, 9, {"x": x, "splits": np.array([1], np.int64),
                                         "amax": np.array([2.0], np.float32)},
                {"rule": "te", "rounding": "sr", "seed": 2**40 + 1, "offset": 2**32 - 1, "block": [1, 16],
                 "splits_rule": "cut"}, {"dtype": "bfloat16", "values": "mixed"})
    out = {"row_data": np.array([0x12, 0x34], np.uint8)}
    ref = {"row_amax": np.array([2.0], np.float32)}
    back, meta, r, o = load_case(save_case(tmp_path / "c.npz", case, backend="b", ref=ref, out=out))
    assert (back.op, back.seed, back.index) == ("group_quantize", 3, 9)
    assert back.options == case.options and back.tags == case.tags
    assert set(back.arrays) == set(case.arrays)
    for k, v in case.arrays.items():
        assert back.arrays[k].dtype == v.dtype and back.arrays[k].tobytes() == v.tobytes(), k
    assert o["row_data"].tolist() == [0x12, 0x34] and r["row_amax"].tobytes() == ref["row_amax"].tobytes()
    assert meta["tags"] == case.tags


def test_case_size_worked_by_hand():
    x = np.array([[0.0, 1.0], [-0.0, 2.0]], np.float32).astype(ml_dtypes.bfloat16)  # 4 elements, 2 nonzero
    splits = np.array([0, 2], np.int64)  # 2 elements, 1 nonzero
    plain = dict(rowwise=True, columnwise=False, rht=False, rht_signs=DEFAULT_RHT_SIGNS, block=[1, 16], rule="te",
                 rounding="rn", seed=0, offset=0, swizzled=False)
    c = Case("group_quantize", 0, 0, {"x": x, "splits": splits}, plain)
    assert case_size(c) == (6, 3, 1)  # only rowwise=True is not a plain value
    # each non-plain option adds one: SR, a seed, a random sign mask, 16x16 blocks, G = 256
    c2 = c.replace(options=dict(rounding="sr", seed=5, rht_signs=0x1234, block=[16, 16], global_scale_max=256))
    assert case_size(c2) == (6, 3, 6)
    assert case_size(c.replace(options=dict(global_scale_max=448))) == (6, 3, 1)
    # a GEMM operand: one per non-plain part (rule other than TE and the case's, SR, a seed or an offset)
    g = Case("grouped_gemm", 0, 0, {"x": x}, dict(kind="fprop", b_block=[16, 16],
                                                  quant_a=dict(rule="te", rounding="rn", seed=0, offset=0)))
    assert case_size(g)[2] == 1  # "fprop"
    g2 = g.replace(options=dict(b_block=[1, 16], quant_a=dict(rule="torchao", rounding="sr", seed=0, offset=7)))
    assert case_size(g2)[2] == 1 + 1 + 3


# ---------------------------------------------------------------------------------------------------------------
# size limits of a backend's space
# ---------------------------------------------------------------------------------------------------------------

def test_space_max_rows_limits_the_rows_of_quantize_and_dequantizegenerated_cases():
    """SPACE_KEYS and docs/conformance.md list max_rows among a backend's size limits: it caps every op's rows."""
    for op in ("quantize", "group_quantize"):
        for c in generated_cases(op, 100, seed=20, max_rows=10, max_elems=SMALL):
            assert c.arrays["x"].shape[0] <= 10, (op, c.arrays["x"].shape)
    for c in generated_cases("dequantize", 100, seed=20, max_rows=10):
        assert c.arrays["data"].shape[0] <= 10


# ---------------------------------------------------------------------------------------------------------------
# more documented draws
# ---------------------------------------------------------------------------------------------------------------

def test_group_quantize_splits_add_up_to_t_without_the_loose_splits_flag():
    """Only device backends (space flag loose_splits) get splits that do not add up to T (docs, SPEC 9.4)."""
    for c in generated_cases("group_quantize", 300, seed=21, max_elems=SMALL):
        assert "splits_rule" not in c.options and not c.tags["splits"].startswith("loose_")
        assert int(c.arrays["splits"].sum()) == c.arrays["x"].shape[0] and (c.arrays["splits"] >= 0).all()


def test_4over6_tie_values_in_half_the_16x16generated_cases():
    """docs: tie values in 30% of the 4over6 cases, 50% with 16x16 blocks (binomial sd about 0.03 over 300)."""
    share = {}
    for block in ([16, 16], [1, 16]):
        cs = generated_cases("quantize", 300, seed=22, max_elems=1 << 12, rule=["te"], rounding=["rn"], rht=[False],
                    four_over_six=["mae", "mse"], block=[block], row_scaled=[False])
        fo6 = [c for c in cs if c.options.get("four_over_six")]
        assert len(fo6) > 250
        share[tuple(block)] = np.mean([c.tags["values"] == "fo6_ties" for c in fo6])
    assert 0.4 < share[(16, 16)] < 0.6 and 0.2 < share[(1, 16)] < 0.4, share


def test_gemm_alpha_modes():
    """docs: alpha automatic, huge, tiny or random."""
    seen = Counter()
    for c in generated_cases("gemm", 200, seed=23):
        mode, alpha = c.tags["alpha"], c.options["alpha"]
        seen[mode] += 1
        if mode == "auto":
            assert alpha is None
        elif mode == "tiny":
            assert 0 < alpha < 2.0**-100
        elif mode == "huge":
            assert alpha >= 2.0**90
    assert set(seen) == {"auto", "huge", "tiny", "random"}, seen


def test_sr_operands_draw_the_counter_offset_that_wraps():
    """An SR operand's groups use counter offset + g mod 2^32 (SPEC 10.2, docs: per group offset + g): the offsets
    drawn include 0 and 2^32 - 1 (where offset + g wraps), as the quantize cases' do."""
    offsets = set()
    for c in generated_cases("grouped_gemm_exact", 300, seed=24, operand_quant=["varied"], operand_rounding=["sr"]):
        for name in ("a", "b"):
            q = c.options[f"quant_{name}"]
            assert q["rounding"] == "sr"
            offsets.add(q["offset"])
    assert {0, 2**32 - 1} <= offsets and len(offsets) > 10


def test_gemm_draws_empty_a_operands():
    """docs ("Shared: rows 0..5000 biased to 0, 1 ..."): the single GEMM's M reaches 0 (an empty A), N at least 1."""
    ms = Counter(c.arrays["a"].shape[0] for c in generated_cases("gemm", 300, seed=25))
    assert ms[0] > 0 and all(c.arrays["b"].shape[0] >= 1 for c in generated_cases("gemm", 50, seed=25)), ms


def test_supplied_amax_is_not_always_the_inputs_max():
    """A supplied amax (SPEC 4.3) is the input's max |x| times 1, 2, 0.5 or 1 + 2^-20 (the factors the row-scaled
    supply documents; the same list in _amax_supply): a supply always equal to max |x| would leave an amax that is
    not the data's untested."""
    ratios = set()
    for c in generated_cases("quantize", 600, seed=26, max_elems=SMALL, specials=False, dtype=["float32"], amax=["one"]):
        x = np.abs(c.arrays["x"].astype(np.float64))
        if c.tags["amax"] != "one" or x.size == 0 or x.max() == 0 or not np.isfinite(c.arrays["amax"]).all():
            continue
        ratios.add(round(float(c.arrays["amax"][0]) / float(x.max()), 3))
    assert {1.0, 2.0, 0.5} <= ratios, ratios


def _nan_block_shape(nan: np.ndarray) -> str | None:
    """Which of _nan_block's blocks the NaN positions of an [m, k] mask form, on the 16-grid and clipped at the edges:
    "row" (one row, columns 16j .. 16j + 15), "col" (rows 16i .. 16i + 15 of one column), "tile", else None."""
    m, k = nan.shape
    rows, cols = np.flatnonzero(nan.any(1)), np.flatnonzero(nan.any(0))
    if rows.size == 0:
        return None
    r0, c0 = rows[0] // 16 * 16, cols[0] // 16 * 16
    r_span, c_span = np.arange(r0, min(r0 + 16, m)), np.arange(c0, min(c0 + 16, k))
    want = {"row": (rows[:1], c_span), "col": (r_span, cols[:1]), "tile": (r_span, c_span)}
    for name, (r, c) in want.items():
        block = np.zeros_like(nan)
        block[np.ix_(r, c)] = True
        if np.array_equal(nan, block):
            return name
    return None


@pytest.mark.parametrize("m, k", [(1, 16), (1, 17), (15, 17), (17, 1), (33, 40), (64, 64)])
def test_nan_block_is_one_whole_block_on_the_16_grid(m, k):
    """docs/conformance.md: the whole NaN block is a rowwise 16-block, a columnwise 16-block or a 16x16 tile on the
    16-grid, clipped at the edges; every form occurs."""
    seen = set()
    for seed in range(60):
        v = np.zeros((m, k))
        _nan_block(np.random.default_rng(seed), v)
        shape = _nan_block_shape(np.isnan(v))
        assert shape is not None, (seed, np.argwhere(np.isnan(v)).tolist())
        seen.add(shape)
    assert len(seen) == 3 or min(m, k) == 1  # (with one row or one column, two forms are the same set)


def test_some_quantize_cases_hold_a_whole_nan_block_beside_finite_values():
    """docs/conformance.md: a quarter of the cases sprinkled with specials (a fifth of all) also hold one whole NaN
    block, so about one case in twenty: among 300 quantize cases, some hold an all-NaN rowwise 16-block (on the
    16-grid) beside finite values."""
    found = 0
    for case in generated_cases("quantize", 300):
        x = np.asarray(case.arrays["x"], np.float32)
        m, k = x.shape
        if m == 0 or not np.isfinite(x).any():
            continue
        blocks = np.isnan(x).reshape(m, k // 16, 16).all(axis=2)
        found += bool(blocks.any())
    assert found >= 3, found
