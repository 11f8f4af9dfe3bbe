"""The grouped-GEMM conformance ops (SPEC 12.5) on CPU: references assemble per-group oracle.gemm results in the
device's layout, and the comparisons catch planted errors (fast mode: outside the bound; exact mode: one ulp)."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

import oracle
from conformance.cases import case_size
from conformance.compare import compare
from conformance.generators import generate
from conformance.ops import OPS, grouped_gemm_disagreeing, grouped_gemm_operands, reference
from conformance.shrink import shrink


def _case(op: str, kind: str, seed: int = 3):
    for i in range(200):
        c = generate(op, seed, i, "grouped_gemm", {"kind": [kind], "groups_agree": [True]})
        if c.arrays["splits"].sum() > 0 and (c.arrays["splits"] > 0).sum() >= 2:
            return c
    raise AssertionError("no case with two non-empty groups")


def test_reference_layout_matches_per_group_gemm():
    c = _case("grouped_gemm_exact", "fprop")
    ref = reference(c)["y"].astype(np.float32)
    pa, pb = grouped_gemm_operands(c)
    offs = np.concatenate([[0], np.cumsum(c.arrays["splits"])])
    for g in range(len(pa)):
        bias = None if "bias" not in c.arrays else c.arrays["bias"][g]
        y = oracle.gemm(pa[g], pb[g], model="sequential", out_dtype=c.options["out_dtype"], bias=bias)
        assert np.array_equal(ref[offs[g] : offs[g + 1]], y.astype(np.float32))


def test_fast_mode_bound_catches_error_and_names_group():
    c = _case("grouped_gemm", "wgrad")
    ref = reference(c)
    assert ref["y"].ndim == 3 and compare(c, ref, {"y": ref["y"].copy()}, mode="bound", stats={}) == []
    g = int(np.flatnonzero(c.arrays["splits"])[0])
    bad = ref["y"].copy()
    bad[g, 0, 0] = bad[g, 0, 0] * 1.01 + 1.0
    ms = compare(c, ref, {"y": bad}, mode="bound", stats={})
    assert ms and ms[0].where["group"] == g and ms[0].where["row"] == 0 and ms[0].where["col"] == 0


def test_exact_mode_catches_one_ulp():
    c = _case("grouped_gemm_exact", "dgrad")
    ref = reference(c)
    y = np.asarray(ref["y"]).copy()
    bits = y.view(np.uint16 if y.dtype == ml_dtypes.bfloat16 else np.uint32)
    bits[0, 0] ^= 1
    assert compare(c, ref, {"y": y}, mode=OPS["grouped_gemm_exact"].mode, stats={})


def test_empty_expert_wgrad_accumulate_keeps_c_bits():
    for i in range(400):
        c = generate("grouped_gemm_exact", 5, i, "grouped_gemm", {"kind": ["wgrad"], "groups_agree": [True]})
        if "c" in c.arrays and (c.arrays["splits"] == 0).any():
            break
    else:
        raise AssertionError("no wgrad case with accumulate and an empty expert")
    ref = reference(c)["y"]
    g = int(np.flatnonzero(c.arrays["splits"] == 0)[0])
    assert np.array_equal(ref[g].view(np.uint32), c.arrays["c"][g].view(np.uint32))  # -0.0 included


def test_fprop_cases_with_n_not_multiple_of_16_have_references():
    # fprop's N (weight rows per group = output columns) may be any size; the generator draws such N and the
    # reference is the per-group oracle.gemm on them
    for i in range(400):
        c = generate("grouped_gemm_exact", 11, i, "grouped_gemm", {"kind": ["fprop"], "groups_agree": [True]})
        if c.tags["n"] == "other" and c.arrays["splits"].sum() > 0:
            break
    else:
        raise AssertionError("no fprop case with N % 16 != 0")
    e = c.arrays["splits"].size
    n = c.arrays["w"].shape[0] // e
    assert n % 16 and c.arrays["dy"].shape[1] == n
    y = reference(c)["y"]
    assert y.shape == (int(c.arrays["splits"].sum()), n)
    pa, pb = grouped_gemm_operands(c)
    g = int(np.flatnonzero(c.arrays["splits"])[0])
    r0 = int(c.arrays["splits"][:g].sum())
    bias = None if "bias" not in c.arrays else c.arrays["bias"][g]
    yg = oracle.gemm(pa[g], pb[g], model="sequential", out_dtype=c.options["out_dtype"], bias=bias)
    assert np.array_equal(y[r0:r0 + c.arrays["splits"][g]].astype(np.float32), yg.astype(np.float32), equal_nan=True)


def _disagreeing_case(op: str, kind: str):
    """A case with disagreeing groups, one of them and one agreeing group with rows (fprop / dgrad output rows)."""
    for i in range(600):
        c = generate(op, 17, i, "grouped_gemm", {"kind": [kind], "groups_agree": [False]})
        bad, rows = grouped_gemm_disagreeing(c), c.arrays["splits"] > 0
        if "b_splits" in c.options and (bad & rows).any() and (~bad & rows).any():
            return c, bad
    raise AssertionError(f"no {kind} case with disagreeing groups and a non-empty agreeing one")


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_disagreeing_groups_are_nan_in_the_reference(kind):
    """SPEC 12.5 in the fuzz cases: b's groups with rows moved between two groups (same total, so the device's
    host checks pass); the reference is NaN exactly there and the per-group oracle.gemm elsewhere."""
    c, bad = _disagreeing_case("grouped_gemm_exact", kind)
    b_splits, splits = np.asarray(c.options["b_splits"]), c.arrays["splits"]
    e = splits.size
    n = c.arrays["w"].shape[0] // e
    assert b_splits.sum() == (splits.sum() if kind == "wgrad" else e * n) and bad.sum() == 2
    y = np.asarray(reference(c)["y"]).astype(np.float32)
    pa, pb = grouped_gemm_operands(c)
    offs = np.concatenate([[0], np.cumsum(splits)])
    for g in range(e):
        yg = y[g] if kind == "wgrad" else y[offs[g]:offs[g + 1]]
        if bad[g]:
            assert np.isnan(yg).all(), f"group {g} disagrees but is not NaN"
            continue
        if kind == "wgrad" and "c" in c.arrays and splits[g] == 0:
            continue  # C untouched (test_empty_expert_wgrad_accumulate_keeps_c_bits)
        kw = dict(out_dtype=c.options["out_dtype"])
        if "bias" in c.arrays:
            kw["bias"] = c.arrays["bias"][g]
        if "c" in c.arrays:
            kw["accumulate"] = c.arrays["c"][g]
        ref = oracle.gemm(pa[g], pb[g], model="sequential", **kw).astype(np.float32)
        assert np.array_equal(yg, ref, equal_nan=True), f"agreeing group {g} differs from oracle.gemm"


def test_disagreeing_groups_compare_as_nan():
    """A device result that is not NaN in a disagreeing group is a mismatch in both compare modes; any NaN payload
    passes."""
    c, bad = _disagreeing_case("grouped_gemm", "fprop")
    ref = reference(c)
    g = int(np.flatnonzero(bad & (c.arrays["splits"] > 0))[0])
    assert compare(c, ref, {"y": ref["y"].copy()}, mode="bound", stats={}) == []
    r0 = int(c.arrays["splits"][:g].sum())
    y = np.asarray(ref["y"]).copy()
    y[r0, 0] = 1.0
    assert compare(c, ref, {"y": y}, mode="bound", stats={})
    ce, _ = _disagreeing_case("grouped_gemm_exact", "fprop")
    refe = reference(ce)
    ye = np.asarray(refe["y"]).copy()
    bits = ye.view(np.uint16 if ye.dtype == ml_dtypes.bfloat16 else np.uint32)
    bits[np.isnan(ye.astype(np.float32))] ^= 1  # another NaN payload: still conformant
    assert compare(ce, refe, {"y": ye}, mode=OPS["grouped_gemm_exact"].mode, stats={}) == []


def _assert_valid_grouped_case(c):
    """The layout the device's host checks and the reference need (conformance/shrink.py keeps it)."""
    a, o = c.arrays, c.options
    s = a["splits"]
    e = s.size
    n = a["w"].shape[0] // e
    assert a["w"].shape[0] == e * n and a["dy"].shape == (int(s.sum()), n) and a["x"].shape[0] == int(s.sum())
    assert a["x"].shape[1] == a["w"].shape[1]
    if "b_splits" in o:
        want = s.sum() if o["kind"] == "wgrad" else e * n
        assert len(o["b_splits"]) == e and sum(o["b_splits"]) == want
    for name, shape in (("bias", (e, n if o["kind"] == "fprop" else a["x"].shape[1])),
                        ("c", (e, n, a["x"].shape[1]))):
        if name in a:
            assert a[name].shape == shape
    reference(c)  # runs


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_grouped_gemm_cases_shrink(kind):
    """Failing grouped-GEMM cases are minimized like the others: a planted failure (any nonzero value in the operand
    the kind reads first) shrinks to one group, one row and one 16-block, and every step is a valid case."""
    c = _case("grouped_gemm_exact", kind)
    first = {"fprop": "x", "dgrad": "dy", "wgrad": "dy"}[kind]

    def fails(cand):
        v = cand.arrays[first].astype(np.float32)
        return frozenset({"y"}) if cand.arrays["splits"].sum() > 0 and np.count_nonzero(v) > 0 else None

    small, tried = shrink(c, fails, deadline=time.monotonic() + 60)
    _assert_valid_grouped_case(small)
    assert fails(small) and tried > 1
    assert small.arrays["splits"].size == 1 and int(small.arrays["splits"].sum()) == 1
    assert small.arrays["x"].shape[1] == 16 and case_size(small)[0] < case_size(c)[0] // 8


def test_disagreeing_grouped_gemm_case_shrinks_and_keeps_the_disagreement():
    """A failure that needs the disagreement (the reference has NaN) shrinks to a valid case that still has it."""
    c, _ = _disagreeing_case("grouped_gemm_exact", "dgrad")

    def fails(cand):
        return frozenset({"y"}) if np.isnan(np.asarray(reference(cand)["y"], np.float32)).any() else None

    small, tried = shrink(c, fails, deadline=time.monotonic() + 60, max_steps=400)
    _assert_valid_grouped_case(small)
    assert fails(small) and "b_splits" in small.options and case_size(small) < case_size(c)
