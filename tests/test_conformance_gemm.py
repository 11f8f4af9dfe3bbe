"""The grouped-GEMM conformance ops (SPEC 12.5) on CPU: references assemble per-group oracle.gemm results in the
device's layout, and the comparisons catch planted errors (fast mode: outside the bound; exact mode: one ulp)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import ml_dtypes
import numpy as np
import pytest

import oracle
from conformance.backends import (
    FractionsBackend,
    OracleGroupedBackend,
    grouped_gemm_operands_by,
    grouped_gemm_plan,
    register_backend,
)
from conformance.cases import PLAIN_QUANT, Case, case_size, load_case, save_case
from conformance.cli import replay
from conformance.compare import compare
from conformance.generators import (
    EXACT_ALGORITHMS,
    FAST_ALGORITHMS,
    LONG_ELEMS,
    LONG_MACS,
    PAIR_CONTRACTION,
    PAIR_MACS,
    PAIR_ROWS,
    GemmShape,
    algorithm_runs,
    epilogues_of,
    generate,
    loaders_of,
)
from conformance.ops import (
    OPS,
    gemm_planes,
    grouped_gemm_b_splits,
    grouped_gemm_disagreeing,
    grouped_gemm_operands,
    reference,
)
from conformance.shrink import shrink
from oracle.rht import DEFAULT_RHT_SIGNS


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
        assert np.array_equal(ref[offs[g] : offs[g + 1]].view(np.uint32), y.astype(np.float32).view(np.uint32))


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


def _shrink_checking_every_step(case, fails, **kw):
    """``shrink(case, fails)``, asserting that every candidate it tries is a valid grouped case (the shrinker reads an
    exception from ``fails`` as "no failure", so the invalid candidates are recorded and checked afterwards)."""
    invalid = []

    def checked(cand):
        try:
            _assert_valid_grouped_case(cand)
        except AssertionError as exc:
            invalid.append(repr(exc))
        return fails(cand)

    small, tried = shrink(case, checked, deadline=time.monotonic() + 60, **kw)
    assert not invalid, invalid[:3]
    return small, tried


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_grouped_gemm_cases_shrink(kind):
    """Failing grouped-GEMM cases are minimized like the others: a planted failure (any nonzero value in the operand
    the kind reads first) shrinks to one group, one row and one 16-block, and every step is a valid case."""
    c = _case("grouped_gemm_exact", kind)
    first = {"fprop": "x", "dgrad": "dy", "wgrad": "dy"}[kind]

    def fails(cand):
        v = cand.arrays[first].astype(np.float32)
        return frozenset({"y"}) if cand.arrays["splits"].sum() > 0 and np.count_nonzero(v) > 0 else None

    small, tried = _shrink_checking_every_step(c, fails)
    _assert_valid_grouped_case(small)
    assert fails(small) and tried > 1
    assert small.arrays["splits"].size == 1 and int(small.arrays["splits"].sum()) == 1
    assert small.arrays["x"].shape[1] == 16 and case_size(small)[0] < case_size(c)[0] // 8


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_every_shrink_step_keeps_bias_and_c_in_shape(kind):
    """A failure that needs the bias (fprop, dgrad) or C (wgrad): every candidate the shrinker tries, not only the
    result, is a valid case, so a step that drops groups, K blocks or N columns cuts the bias and C with them."""
    extra = "c" if kind == "wgrad" else "bias"
    for i in range(400):
        c = generate("grouped_gemm_exact", 5, i, "grouped_gemm", {"kind": [kind], "groups_agree": [True]})
        if extra in c.arrays and (c.arrays["splits"] > 0).sum() >= 2:
            break
    else:
        raise AssertionError(f"no {kind} case with {extra} and two non-empty groups")

    def fails(cand):
        return frozenset({"y"}) if extra in cand.arrays and cand.arrays["splits"].sum() > 0 else None

    small, tried = _shrink_checking_every_step(c, fails, max_steps=200)
    assert fails(small) and tried > 2 and case_size(small) < case_size(c)


def test_disagreeing_grouped_gemm_case_shrinks_and_keeps_the_disagreement():
    """A failure that needs the disagreement (the reference has NaN) shrinks to a valid case that still has it."""
    c, _ = _disagreeing_case("grouped_gemm_exact", "dgrad")

    def fails(cand):
        return frozenset({"y"}) if np.isnan(np.asarray(reference(cand)["y"], np.float32)).any() else None

    small, tried = shrink(c, fails, deadline=time.monotonic() + 60, max_steps=400)
    _assert_valid_grouped_case(small)
    assert fails(small) and "b_splits" in small.options and case_size(small) < case_size(c)


def _varied_case(op: str, kind: str, want) -> object:
    """A grouped case of ``kind`` whose operand options (conformance.generators.gen_operand_quant) satisfy
    ``want(options)`` and that has two non-empty groups (operands under TE rules)."""
    for i in range(600):
        c = generate(op, 23, i, "grouped_gemm", {"kind": [kind], "operand_quant": ["varied"], "operand_rules": ["te"]})
        if want(c.options) and (c.arrays["splits"] > 0).sum() >= 2:
            return c
    raise AssertionError(f"no {kind} case with the wanted operand options")


def _sr(name):
    return lambda o: o[f"quant_{name}"]["rounding"] == "sr"


@pytest.mark.parametrize("kind,name", [("fprop", "a"), ("dgrad", "b"), ("wgrad", "a"), ("wgrad", "b")])
def test_sr_operands_use_each_groups_sr_stream(kind, name):
    """An SR-quantized operand of the reference is, group by group, oracle.quantize of that group's rows with
    rounding="sr" and counter offset + g (SPEC 10.2, 9.1): assembled here independently of oracle.group_quantize;
    and it differs from the round-to-nearest planes somewhere (the option takes effect)."""
    c = _varied_case("grouped_gemm_exact", kind, _sr(name))
    q = c.options[f"quant_{name}"]
    a, o = c.arrays, c.options
    src = {("fprop", "a"): "x", ("dgrad", "a"): "dy", ("wgrad", "a"): "dy", ("fprop", "b"): "w",
           ("dgrad", "b"): "w", ("wgrad", "b"): "x"}[(kind, name)]
    rows = grouped_gemm_b_splits(c) if name == "b" else a["splits"]
    col = not (kind == "fprop" or (kind == "dgrad" and name == "a"))
    rht = dict(rht=bool(o["rht"]), rht_signs=int(o["rht_signs"])) if src != "w" else {}
    block = tuple(o.get("b_block", (16, 16))) if src == "w" else (1, 16)
    planes = grouped_gemm_operands(c)[0 if name == "a" else 1]
    offs = np.concatenate([[0], np.cumsum(rows)])
    differs = False
    for g in range(rows.size):
        xg = a[src][offs[g]:offs[g + 1]]
        kw = dict(rowwise=not col, columnwise=col, block=block, rule=q["rule"], **rht)
        want = oracle.quantize(xg, rounding="sr", seed=q["seed"], offset=(q["offset"] + g) % 2**32, **kw)
        rn = oracle.quantize(xg, **kw)
        wp, rp = (want.col, rn.col) if col else (want.row, rn.row)
        assert np.array_equal(planes[g].data, wp.data) and np.array_equal(planes[g].scales, wp.scales), g
        assert planes[g].amax.tobytes() == wp.amax.tobytes()
        differs |= not np.array_equal(wp.data, rp.data)
    assert differs, "SR gave the round-to-nearest codes everywhere: the case does not exercise it"


def test_operand_rule_and_weight_blocks_reach_the_reference():
    """te_fused_rht (SPEC 5.3) and 1x16 weight blocks (SPEC 6.3) drawn for a case are the planes' rule and block."""
    c = _varied_case("grouped_gemm_exact", "fprop",
                     lambda o: o["quant_a"]["rule"] == "te_fused_rht" and list(o["b_block"]) == [1, 16])
    pa, pb = grouped_gemm_operands(c)
    assert {p.rule for p in pa} == {"te_fused_rht"} and {p.rule for p in pb} == {c.options["quant_b"]["rule"]}
    assert {tuple(p.block) for p in pb} == {(1, 16)} and {tuple(p.block) for p in pa} == {(1, 16)}
    c16 = _varied_case("grouped_gemm_exact", "dgrad", lambda o: list(o["b_block"]) == [16, 16])
    assert {tuple(p.block) for p in grouped_gemm_operands(c16)[1]} == {(16, 16)}


def test_cases_saved_without_operand_options_replay_with_the_default_operands():
    """A saved case without the quant_a / quant_b / b_block options is quantized with the defaults: TE rule,
    round-to-nearest, weights in 16x16 blocks."""
    c = _varied_case("grouped_gemm_exact", "dgrad", lambda o: _sr("a")(o) and _sr("b")(o))
    for key in ("quant_a", "quant_b", "b_block"):
        del c.options[key]
    pa, pb = grouped_gemm_operands(c)
    splits, e = c.arrays["splits"], c.arrays["splits"].size
    dyq = oracle.group_quantize(c.arrays["dy"], splits, columnwise=True, rht=bool(c.options["rht"]),
                                rht_signs=int(c.options["rht_signs"]))
    wq = oracle.group_quantize(c.arrays["w"], np.full(e, c.arrays["w"].shape[0] // e), columnwise=True,
                               block=(16, 16))
    for got, want in ((pa, dyq.row_planes), (pb, wq.col_planes)):
        for p, q in zip(got, want, strict=True):
            assert np.array_equal(p.data, q.data) and np.array_equal(p.scales, q.scales) and p.rule == "te"


class _FakeTesting:
    """A stand-in for ``device.testing``: force_plan takes the keywords of the real one (a typo raises TypeError) and
    makes them the active plan for the block; nested use is refused, as a leak from an earlier call would be."""

    def __init__(self):
        self.active = None
        self.entered = 0

    @contextlib.contextmanager
    def force_plan(self, *, algorithm=None, loader=None, epilogue=None, quantize=None):
        assert self.active is None, "force_plan entered twice"
        self.active = dict(algorithm=algorithm, loader=loader, epilogue=epilogue, quantize=quantize)
        self.entered += 1
        try:
            yield
        finally:
            self.active = None


class _OracleAsDevice:
    """A stand-in for the ``device`` module on the CPU: group_quantize runs oracle.group_quantize on the torch
    tensors it is given (keywords as passed); grouped_gemm records its operands, its keywords and the forced plan and
    grid cap in force during the call (``testing.force_plan``, ``set_num_sms``), and returns zeros."""

    def __init__(self, torch, num_sms=None):
        self.torch, self.calls = torch, []
        self.testing = _FakeTesting()
        self.num_sms = num_sms

    def set_num_sms(self, n):
        assert n is None or (isinstance(n, int) and n >= 1), n
        self.num_sms = n

    def get_num_sms(self):
        return self.num_sms

    def group_quantize(self, x, splits, *, swizzled=True, **kw):
        assert self.testing.active is None, "a GEMM case's operands quantized under a forced plan"
        xs = x.view(self.torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
        return oracle.group_quantize(xs, splits.numpy(), **kw)

    def grouped_gemm(self, a, b, *, kind, out_dtype, **kw):
        self.calls.append((a, b, kind))
        self.kw, self.out_dtype = kw, out_dtype
        self.plan_seen, self.num_sms_seen = self.testing.active, self.num_sms
        return self.torch.zeros((1,), dtype=out_dtype)


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_device_backend_quantizes_operands_like_the_reference(kind, monkeypatch):
    """The device backend's operands (device.group_quantize with the case's splits, b_splits, RHT, rule, rounding
    and blocks) are byte for byte the reference's planes: run with the oracle standing in for the device."""
    torch = pytest.importorskip("torch")
    from conformance.backends import DeviceBackend

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = DeviceBackend.__new__(DeviceBackend)  # (its __init__ wants a GPU)
    be.dev, be._mod = "cpu", _OracleAsDevice(torch)
    for want in (_sr("a"), _sr("b"), lambda o: o["quant_b"]["rule"] == "te_fused_rht"):
        c = _varied_case("grouped_gemm_exact", kind, want)
        be._grouped_gemm("grouped_gemm_exact", c)
        lhs, rhs, k = be._mod.calls[-1]
        assert k == kind
        pick = {"fprop": ("row_planes", "row_planes"), "dgrad": ("row_planes", "col_planes"),
                "wgrad": ("col_planes", "col_planes")}[kind]
        for got, want_planes in ((getattr(lhs, pick[0]), grouped_gemm_operands(c)[0]),
                                 (getattr(rhs, pick[1]), grouped_gemm_operands(c)[1])):
            for p, q in zip(got, want_planes, strict=True):
                assert np.array_equal(p.data, q.data) and np.array_equal(p.scales, q.scales)
                assert p.amax.tobytes() == q.amax.tobytes() and p.rule == q.rule and p.block == q.block


def test_gemm_cases_vary_operand_quantization():
    """The single-GEMM cases (CPU backends) draw SR and 16x16 blocks for their operands too; the planes follow."""
    seen = set()
    for i in range(200):
        c = generate("gemm_exact", 4, i, "gemm", {"small": True, "operand_quant": ["varied"]})
        pa, pb = gemm_planes(c)
        assert pa.rule == pb.rule == c.options["rule"] and tuple(pa.block) == (1, 16)
        assert tuple(pb.block) == tuple(c.options["b_block"])
        seen |= {tuple(pb.block), c.options["quant_a"]["rounding"], c.options["quant_b"]["rounding"]}
    assert seen == {(1, 16), (16, 16), "rn", "sr"}


def test_shrinker_puts_operand_quantization_back_to_default_when_the_failure_allows():
    """A failure that does not need SR or 1x16 weight blocks shrinks to a case with the plain operand options;
    one that needs SR on operand a keeps exactly that."""
    c = _varied_case("grouped_gemm_exact", "fprop",
                     lambda o: _sr("a")(o) and _sr("b")(o) and list(o["b_block"]) == [1, 16])

    def any_rows(cand):
        return frozenset({"y"}) if cand.arrays["splits"].sum() > 0 else None

    small, _ = shrink(c, any_rows, deadline=time.monotonic() + 60)
    assert small.options["quant_a"]["rounding"] == small.options["quant_b"]["rounding"] == "rn"
    assert list(small.options["b_block"]) == [16, 16] and case_size(small)[2] < case_size(c)[2]

    def needs_sr_a(cand):
        return frozenset({"y"}) if cand.options["quant_a"]["rounding"] == "sr" else None

    small, _ = shrink(c, needs_sr_a, deadline=time.monotonic() + 60)
    assert small.options["quant_a"] == c.options["quant_a"] and small.options["quant_b"]["rounding"] == "rn"


def test_shrinker_keeps_operand_rules_the_device_accepts():
    """Grouped cases under a torchao rule (option operand_rules): every shrink candidate pairs rules that SPEC 12.1
    accepts (both TE rules or both the same torchao rule: the device refuses others), a failure that does not need the
    rule shrinks to TE operands, and one that needs it keeps it on both with round-to-nearest."""
    from conformance.shrink import _grouped_gemm_candidates

    c = None
    for i in range(600):
        c = generate("grouped_gemm_exact", 29, i, "grouped_gemm",
                     {"kind": ["fprop"], "operand_quant": ["varied"], "operand_rules": ["torchao"]})
        if _sr("a")(c.options) and (c.arrays["splits"] > 0).sum() >= 2:
            break
    assert c.options["quant_a"]["rule"] == c.options["quant_b"]["rule"] == "torchao"
    te_rules = ("te", "te_fused_rht")
    for cand in _grouped_gemm_candidates(c):
        ra, rb = cand.options["quant_a"]["rule"], cand.options["quant_b"]["rule"]
        assert (ra in te_rules and rb in te_rules) or ra == rb, (ra, rb)

    def any_rows(cand):
        return frozenset({"y"}) if cand.arrays["splits"].sum() > 0 else None

    small, _ = shrink(c, any_rows, deadline=time.monotonic() + 60)
    assert small.options["quant_a"]["rule"] == small.options["quant_b"]["rule"] == "te"

    def needs_torchao(cand):
        return frozenset({"y"}) if cand.options["quant_a"]["rule"] == "torchao" else None

    small, _ = shrink(c, needs_torchao, deadline=time.monotonic() + 60)
    assert small.options["quant_a"] == small.options["quant_b"] == dict(PLAIN_QUANT, rule="torchao")
    _assert_valid_grouped_case(small)


def _fake_device_backend(torch, monkeypatch, num_sms=None):
    from conformance.backends import DeviceBackend

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = DeviceBackend.__new__(DeviceBackend)  # (its __init__ wants a GPU)
    be.dev, be._mod = "cpu", _OracleAsDevice(torch, num_sms)
    return be


def _forced(o: dict) -> dict | None:
    """The force_plan keywords a grouped-GEMM case's options ask for (None: no force_plan at all)."""
    plan = dict(algorithm=None if o["algorithm"] == "auto" else o["algorithm"], loader=o["loader"],
                epilogue=o["epilogue"], quantize=None)
    return plan if any(plan.values()) else None


@pytest.mark.parametrize("op", ["grouped_gemm", "grouped_gemm_exact"])
def test_device_backend_forces_the_plan_for_the_gemm_call_only(op, monkeypatch):
    """A case's plan (algorithm, loader, epilogue) is the active device.testing.force_plan during device.grouped_gemm
    and only then (not while its operands are quantized, not after); its num_sms is the grid cap during the call, and
    the cap set before the case is back afterwards; a case with the default plan enters no force_plan."""
    torch = pytest.importorskip("torch")
    be = _fake_device_backend(torch, monkeypatch, num_sms=7)
    seen = set()
    for i in range(150):
        c = generate(op, 29, i, "grouped_gemm", OPS[op].space)
        o = c.options
        entered = be._mod.testing.entered
        be._grouped_gemm(op, c)
        assert be._mod.plan_seen == _forced(o), (o["algorithm"], o["loader"], o["epilogue"])
        assert be._mod.testing.entered == entered + (_forced(o) is not None)
        assert be._mod.num_sms_seen == (o["num_sms"] or 7) and be._mod.num_sms == 7
        assert be._mod.testing.active is None
        seen |= {("algorithm", o["algorithm"]), ("loader", o["loader"]), ("epilogue", o["epilogue"]),
                 ("num_sms", o["num_sms"])}
    names = ["auto", *(EXACT_ALGORITHMS if op == "grouped_gemm_exact" else FAST_ALGORITHMS)]
    assert {v for k, v in seen if k == "algorithm"} == set(names)
    assert {v for k, v in seen if k == "num_sms"} == {0, 1, 2, 3, 5, 8}
    assert {v for k, v in seen if k == "loader"} == {None, "cp_async", "tma"}
    want_epilogues = {None, "tma_store"} | ({"staged"} if op == "grouped_gemm" else set())
    assert {v for k, v in seen if k == "epilogue"} == want_epilogues


def test_device_backend_restores_the_grid_cap_when_the_gemm_raises(monkeypatch):
    """A device call that raises (a refused plan) leaves no forced plan and the grid cap as it was."""
    torch = pytest.importorskip("torch")
    be = _fake_device_backend(torch, monkeypatch, num_sms=None)

    def refuses(*a, **k):
        raise ValueError("plan refused")

    be._mod.grouped_gemm = refuses
    c = _drawn("grouped_gemm", {"kind": ["fprop"]}, lambda c: c.options["num_sms"] and c.options["algorithm"] != "auto")
    with pytest.raises(ValueError, match="plan refused"):
        be._grouped_gemm("grouped_gemm", c)
    assert be._mod.num_sms is None and be._mod.testing.active is None


@pytest.mark.parametrize("op,old,want", [
    ("grouped_gemm", dict(fast_kernel="skinny", max_ctas=3), ("fused_64x256", 3)),
    ("grouped_gemm_tc", dict(fast_kernel="large"), ("fused_128x256", 0)),
    ("grouped_gemm", dict(fast_kernel="pair", max_ctas=0), ("fused_pair_256x256", 0)),
    ("grouped_gemm", dict(fast_kernel="swapped", exact_kernel="hybrid"), ("swapped_64x256", 0)),
    ("grouped_gemm", dict(fast_kernel="dequant", max_ctas=8), ("copies_cutlass", 8)),
    ("grouped_gemm", dict(fast_kernel="fused"), ("auto", 0)),
    ("grouped_gemm_tc", dict(fast_kernel="auto", exact_kernel="dequant"), ("auto", 0)),
    ("grouped_gemm_exact", dict(fast_kernel="skinny", exact_kernel="fused", max_ctas=5), ("exact_fused", 5)),
    ("grouped_gemm_exact", dict(exact_kernel="dequant"), ("exact_copies", 0)),
    ("grouped_gemm_exact", dict(exact_kernel="hybrid", max_ctas=1), ("exact_hybrid", 1)),
    ("grouped_gemm_exact", dict(exact_kernel="auto"), ("auto", 0)),
    ("grouped_gemm_exact", {}, ("auto", 0)),
])
def test_cases_saved_with_kernel_names_replay_with_the_mapped_plan(op, old, want, monkeypatch):
    """A case saved with fast_kernel / exact_kernel / max_ctas / loader_env replays on the device with the algorithm
    those named (by the op's mode) and max_ctas as the grid cap; its loader switches stay out of the environment."""
    c = _case(op, "fprop")
    for key in ("algorithm", "loader", "epilogue", "num_sms"):
        del c.options[key]
    env = {"NVFP4_SWAP_TMA": "0", "NVFP4_GEMM_PDL": "0"}
    c = c.replace(options=dict(old, loader_env=env))
    assert grouped_gemm_plan(c) == dict(algorithm=want[0], loader=None, epilogue=None, num_sms=want[1])
    torch = pytest.importorskip("torch")
    for name in env:
        monkeypatch.delenv(name, raising=False)
    be = _fake_device_backend(torch, monkeypatch)
    be._grouped_gemm(op, c)
    assert be._mod.plan_seen == (None if want[0] == "auto" else
                                 dict(algorithm=want[0], loader=None, epilogue=None, quantize=None))
    assert be._mod.num_sms_seen == (want[1] or None)
    assert not set(env) & set(os.environ)


def _shape(kind, out_dtype, t=64, k=64, n=64, e=2, bias=False, c=False) -> GemmShape:
    arrays = {"x": np.zeros((t, k)), "w": np.zeros((e * n, k)), "splits": np.zeros(e, np.int64)}
    arrays.update({"bias": np.zeros(1)} if bias else {})
    arrays.update({"c": np.zeros(1)} if c else {})
    return GemmShape.of(kind, out_dtype, arrays)


def test_plan_rules_say_where_each_algorithm_loader_and_epilogue_runs():
    """The generator's rules of what a case may force, on hand-picked shapes (the device refuses anything else with
    ValueError): algorithms by kind, bias and alignment; loaders per algorithm; epilogues per dtype, kind and C."""
    f32, bf16 = "float32", "bfloat16"
    for name, shape, runs in [
        ("swapped_64x256", _shape("wgrad", f32), False), ("swapped_64x256", _shape("dgrad", f32), True),
        ("swapped_256x128", _shape("wgrad", f32), True),
        ("exact_hybrid", _shape("wgrad", f32), False),
        ("exact_hybrid", _shape("fprop", f32, k=64), True), ("exact_hybrid", _shape("fprop", f32, k=48), False),
        ("exact_hybrid", _shape("dgrad", f32, n=96), True), ("exact_hybrid", _shape("dgrad", f32, n=80), False),
        ("copies_cutlass", _shape("fprop", bf16, bias=True), True),
        ("copies_cutlass", _shape("fprop", f32, bias=True), False),
        ("copies_cutlass", _shape("fprop", bf16, n=24), True), ("copies_cutlass", _shape("fprop", bf16, n=20), False),
        ("copies_cutlass", _shape("fprop", f32, n=20), True), ("copies_cutlass", _shape("fprop", f32, n=22), False),
        ("fused_pair_256x256", _shape("wgrad", bf16, c=True), True), ("exact_fused", _shape("dgrad", f32, n=17), True),
    ]:
        assert algorithm_runs(name, shape) == runs, (name, shape)
    assert not algorithm_runs("skinny", _shape("fprop", f32))  # (a fast_kernel name is not an algorithm)
    assert loaders_of("swapped_64x256", _shape("fprop", f32, k=64)) == ("cp_async", "tma")
    assert loaders_of("swapped_64x256", _shape("fprop", f32, k=48)) == ("cp_async",)
    assert loaders_of("swapped_64x256", _shape("fprop", f32, k=64, t=0)) == ("cp_async",)  # (no token row to map)
    assert loaders_of("swapped_64x256", _shape("dgrad", f32, n=64)) == ("cp_async",)
    assert loaders_of("swapped_256x128", _shape("dgrad", f32, n=64)) == ("cp_async", "tma")
    assert loaders_of("swapped_256x128", _shape("dgrad", f32, n=48)) == ("cp_async",)
    assert loaders_of("swapped_256x128", _shape("dgrad", f32, n=64, t=0)) == ("cp_async",)
    assert loaders_of("exact_copies", _shape("wgrad", bf16)) == ("cp_async", "tma")
    for name in ("auto", "fused_64x256", "fused_128x256", "fused_pair_256x256", "copies_cutlass", "exact_fused",
                 "exact_hybrid"):
        assert loaders_of(name, _shape("fprop", f32)) == ()
    assert epilogues_of("fused_128x256", _shape("wgrad", f32)) == ("staged", "tma_store")
    assert epilogues_of("fused_128x256", _shape("wgrad", f32, c=True)) == ("staged",)
    assert epilogues_of("fused_64x256", _shape("wgrad", f32)) == ("staged",)
    assert epilogues_of("fused_pair_256x256", _shape("wgrad", f32)) == ("staged",)
    assert epilogues_of("exact_copies", _shape("wgrad", f32)) == ("tma_store",)
    assert epilogues_of("exact_copies", _shape("fprop", f32)) == ()
    assert epilogues_of("exact_copies", _shape("wgrad", bf16)) == ()
    assert epilogues_of("fused_128x256", _shape("fprop", f32)) == ("staged",)
    for name in ("fused_64x256", "fused_128x256", "fused_pair_256x256"):
        assert epilogues_of(name, _shape("fprop", bf16, bias=True)) == ("staged", "tma_store")
        assert epilogues_of(name, _shape("wgrad", bf16)) == ("staged", "tma_store")
        assert epilogues_of(name, _shape("fprop", bf16, n=20)) == ("staged",)  # rows 40 bytes apart
        assert epilogues_of(name, _shape("dgrad", bf16, t=0)) == ("staged",)  # no output row
    for name in ("auto", "copies_cutlass", "swapped_64x256", "exact_fused", "exact_hybrid"):
        assert epilogues_of(name, _shape("wgrad", f32)) == epilogues_of(name, _shape("fprop", bf16)) == ()


@pytest.mark.parametrize("op", ["grouped_gemm", "grouped_gemm_tc", "grouped_gemm_exact"])
def test_drawn_plans_are_ones_the_device_accepts(op):
    """Every drawn plan keeps to the rules for its case's sizes and its op's mode, and its tags say what it is."""
    for i in range(300):
        c = generate(op, 31, i, "grouped_gemm", OPS[op].space)
        o, t = c.options, c.tags
        g = GemmShape.of(o["kind"], o["out_dtype"], c.arrays)
        names = EXACT_ALGORITHMS if op == "grouped_gemm_exact" else FAST_ALGORITHMS
        assert o["algorithm"] == "auto" or (o["algorithm"] in names and algorithm_runs(o["algorithm"], g))
        assert o["loader"] is None or o["loader"] in loaders_of(o["algorithm"], g)
        assert o["epilogue"] is None or o["epilogue"] in epilogues_of(o["algorithm"], g)
        assert o["num_sms"] in (0, 1, 2, 3, 5, 8)
        assert (t["algorithm"], t["loader"], t["epilogue"]) == (o["algorithm"], o["loader"] or "default",
                                                                o["epilogue"] or "default")
        assert t["grid"] == {0: "one CTA per SM", 1: "1 SM"}.get(o["num_sms"], f"{o['num_sms']} SMs")
        assert not {"fast_kernel", "exact_kernel", "max_ctas", "loader_env"} & set(o)


def test_plan_draws_leave_the_other_draws_in_place():
    """Restricting the plan (no forced algorithm, loader, epilogue or grid) changes no array or other option of a
    case: the plan's draws keep their places in the case's streams."""
    off = {"algorithm": ["auto"], "loader": [None], "epilogue": [None], "num_sms": [0]}
    plan_keys = {"algorithm", "loader", "epilogue", "num_sms"}
    forced = 0
    for op in ("grouped_gemm", "grouped_gemm_exact"):
        for i in range(80):
            free = generate(op, 37, i, "grouped_gemm", OPS[op].space)
            plain = generate(op, 37, i, "grouped_gemm", {**OPS[op].space, **off})
            assert plain.options["algorithm"] == "auto" and plain.options["num_sms"] == 0
            assert plain.options["loader"] is None and plain.options["epilogue"] is None
            assert set(free.arrays) == set(plain.arrays)
            for k in free.arrays:
                assert np.array_equal(_bits(np.asarray(free.arrays[k])), _bits(np.asarray(plain.arrays[k])))
            strip = lambda o: {k: v for k, v in o.items() if k not in plan_keys}  # noqa: E731
            assert strip(free.options) == strip(plain.options)
            forced += free.options["algorithm"] != "auto"
    assert forced > 40


def test_a_restricted_algorithm_space_keeps_to_the_mode():
    """A backend space naming algorithms of both modes draws, in each op, only that mode's names it lists."""
    space = {"algorithm": ["fused_pair_256x256", "exact_copies"]}
    for op, want in (("grouped_gemm", "fused_pair_256x256"), ("grouped_gemm_exact", "exact_copies")):
        got = {generate(op, 3, i, "grouped_gemm", {**OPS[op].space, **space}).options["algorithm"] for i in range(40)}
        assert got == {want}
    got = {generate("grouped_gemm", 3, i, "grouped_gemm", {"algorithm": ["exact_copies"]}).options["algorithm"]
           for i in range(20)}
    assert got == {"auto"}


def test_shrinker_drops_the_plan_options_the_failure_does_not_need():
    """A failure that needs the forced algorithm keeps it and loses the loader, epilogue and grid cap; one that needs
    none of the plan goes back to the device's own choice."""
    c = _drawn("grouped_gemm_exact", {"kind": ["fprop"], "groups_agree": [True]},
               lambda c: c.options["algorithm"] == "exact_copies" and c.options["loader"]
               and c.options["epilogue"] is None and c.options["num_sms"] and c.arrays["splits"].sum() > 0)

    def needs_algorithm(cand):
        return frozenset({"y"}) if cand.options["algorithm"] == "exact_copies" else None

    small, _ = shrink(c, needs_algorithm, deadline=time.monotonic() + 60)
    assert (small.options["algorithm"], small.options["loader"], small.options["num_sms"]) == ("exact_copies", None, 0)

    def needs_the_loader(cand):
        return frozenset({"y"}) if cand.options["loader"] == c.options["loader"] else None

    small, _ = shrink(c, needs_the_loader, deadline=time.monotonic() + 60)
    assert small.options["loader"] == c.options["loader"] and small.options["num_sms"] == 0

    def any_rows(cand):
        return frozenset({"y"}) if cand.arrays["splits"].sum() > 0 else None

    small, _ = shrink(c, any_rows, deadline=time.monotonic() + 60)
    assert (small.options["algorithm"], small.options["loader"], small.options["num_sms"]) == ("auto", None, 0)


@pytest.mark.parametrize("algorithm,loader", [("exact_hybrid", None), ("swapped_64x256", "tma")])
def test_shrink_candidates_never_force_a_plan_their_sizes_refuse(algorithm, loader):
    """Fewer 16-blocks of K can take a case out of its forced plan's reach (the hybrid kernel and the swapped kernel's
    TMA loader need a contraction % 32 == 0): such candidates go back to the device's own choice, and every candidate
    asks only for what its own sizes allow."""
    from conformance.shrink import _grouped_gemm_candidates, _grouped_gemm_smaller

    op = "grouped_gemm_exact" if algorithm.startswith("exact") else "grouped_gemm"
    # K of 2 mod 4 16-blocks: halving the blocks leaves an odd count, a contraction of 16 mod 32
    c = _drawn(op, {"kind": ["fprop"]}, lambda c: c.options["algorithm"] == algorithm and c.options["loader"] == loader
               and c.arrays["x"].shape[1] >= 128 and c.arrays["x"].shape[1] // 16 % 4 == 2, seed=47)

    def valid(o, g):
        name = o["algorithm"]
        return (algorithm_runs(name, g) and (o["loader"] is None or o["loader"] in loaders_of(name, g))
                and (o["epilogue"] is None or o["epilogue"] in epilogues_of(name, g)))

    refused = 0
    for raw, cand in zip(_grouped_gemm_smaller(c), _grouped_gemm_candidates(c), strict=True):
        g = GemmShape.of(c.options["kind"], c.options["out_dtype"], cand.arrays)
        assert valid(cand.options, g)
        if not valid(raw.options, g):
            refused += 1
            key, default = ("algorithm", "auto") if loader is None else ("loader", None)
            assert cand.options[key] == default
    assert refused > 0


def test_dequantize_cases_shrink():
    """A dequantize failure shrinks to the rows and 16-blocks that carry it."""
    from conformance import ops as O

    c = next(c for i in range(200)
             if (c := generate("dequantize", 3, i, O.OPS["dequantize"].generator, O.OPS["dequantize"].space)).arrays[
                 "data"].shape[0] >= 40 and c.arrays["scales"].shape[1] >= 4)
    r, b = 37 % c.arrays["data"].shape[0], 2
    code = int(c.arrays["data"][r, 8 * b])

    def fails(cand):  # "fails" while some row still holds the planted byte in some block's first data byte
        d = cand.arrays["data"]
        return {"planted"} if d.size and (d[:, ::8] == code).any() else None

    small, tried = shrink(c, fails, deadline=time.monotonic() + 60)
    assert tried > 1 and case_size(small) < case_size(c)
    assert small.arrays["data"].shape[0] == 1 and small.arrays["scales"].shape == (1, 1)
    assert small.arrays["data"].shape[1] == 8 and fails(small)


# ---------------------------------------------------------------------------------------------------------------
# bf16 bias, random RHT sign masks for wgrad's operands, long contractions
# ---------------------------------------------------------------------------------------------------------------

def _drawn(op: str, space: dict, want, seed: int = 41):
    """The first case of ``op`` under ``space`` (the op's own space updated) that satisfies ``want(case)``."""
    for i in range(400):
        c = generate(op, seed, i, "grouped_gemm", {**OPS[op].space, **space})
        if want(c):
            return c
    raise AssertionError(f"no {op} case under {space} with the wanted property")


def _check_long_sizes(c) -> None:
    """A long-contraction case: fprop's K or dgrad's N in [1024, 8192] or a wgrad group of 2048+ tokens. "long": 1 to 3
    groups, the other dimensions small (LONG_MACS multiply-adds, LONG_ELEMS weight elements); "long+rows": the sizes
    for which the device's size rules pick the pair tiles (PAIR_ROWS+ output rows and a PAIR_CONTRACTION+ contraction
    per group on average), PAIR_MACS multiply-adds at most."""
    a, kind, tag = c.arrays, c.options["kind"], c.tags["contraction"]
    e, (t, k), n = a["splits"].size, a["x"].shape, a["dy"].shape[1]
    assert tag in ("long", "long+rows") and 1 <= e <= 3
    if kind == "wgrad":  # (output rows per group: N; contraction: the tokens of a group)
        assert a["splits"].max() >= 2048
        rows, contraction, few_rows = n, t // e, t * n * k <= 2 * LONG_MACS
    else:
        length, width = (k, n) if kind == "fprop" else (n, k)
        assert 1024 <= length <= 8192 and length % 16 == 0 and width <= 32
        rows, contraction = t // e, length
        few_rows = t * width * length <= LONG_MACS and a["w"].size <= 2 * LONG_ELEMS
    if tag == "long":
        assert few_rows
    else:
        assert rows >= PAIR_ROWS and contraction >= PAIR_CONTRACTION and t * n * k <= PAIR_MACS * 5 // 4


def test_grouped_gemm_generator_draws_bias_dtype_rht_signs_and_long_contractions():
    """Over a few hundred cases every value of the new tags is drawn, and each case is what its tags say: the bias's
    dtype, wgrad's RHT sign mask (default, random; none without RHT), long contractions' sizes."""
    seen = {name: set() for name in ("bias_dtype", "rht_signs", "contraction")}
    for i in range(300):
        c = generate("grouped_gemm", 41, i, "grouped_gemm", OPS["grouped_gemm"].space)
        a, o, tags = c.arrays, c.options, c.tags
        for name in seen:
            seen[name].add(tags[name])
        assert tags["bias_dtype"] == (a["bias"].dtype.name if "bias" in a else "none")
        assert (tags["rht_signs"] == "none") == (not o["rht"])
        assert 0 <= o["rht_signs"] < 1 << 16 and (tags["rht_signs"] == "random" or o["rht_signs"] == DEFAULT_RHT_SIGNS)
        if tags["contraction"] != "normal":
            _check_long_sizes(c)
        else:
            assert a["x"].shape[1] <= 512 and a["dy"].shape[1] <= 512 and a["x"].shape[0] <= 600
    assert seen == {"bias_dtype": {"none", "float32", "bfloat16"}, "rht_signs": {"none", "default", "random"},
                    "contraction": {"normal", "long", "long+rows"}}


@pytest.mark.parametrize("tag", ["long", "long+rows"])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_long_contraction_cases_have_references(kind, tag):
    """Forced long contractions of every kind and both sizes: the sizes, and the references of all three ops (the
    tensor-core model's within seconds) that the CPU backend oracle-grouped reproduces."""
    for op in ("grouped_gemm", "grouped_gemm_tc", "grouped_gemm_exact"):
        c = _drawn(op, {"kind": [kind], "contraction": ["long"], "groups_agree": [True]},
                   lambda c: c.tags["contraction"] == tag and c.arrays["splits"].sum() > 0)
        _check_long_sizes(c)
        t0 = time.monotonic()
        ref = reference(c)
        assert time.monotonic() - t0 < 5.0
        out = OracleGroupedBackend().run(op, c)
        assert compare(c, ref, out, mode=OPS[op].mode, stats={}) == []


def _bits(y: np.ndarray) -> np.ndarray:
    """The bits of a float array (bf16, fp32, fp64) as unsigned integers: equal bits, NaN payloads included."""
    return np.ascontiguousarray(y).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[y.dtype.itemsize])


@pytest.mark.parametrize("kind", ["fprop", "dgrad"])
def test_bf16_bias_reference_is_the_oracle_on_the_widened_bias(kind):
    """A bf16 bias (SPEC 12.5) is kept as drawn; the reference is oracle.grouped_gemm with its exact fp32 widening,
    bit for bit (exact and tensor-core ops; fast mode's exact value and bound), and equals the reference of the same
    case given the widened values as a float32 bias."""
    space = {"kind": [kind], "groups_agree": [True], "bias_dtype": ["bfloat16"]}
    for op, model in (("grouped_gemm_exact", "sequential"), ("grouped_gemm_tc", "tensor_core"), ("grouped_gemm", "exact")):
        c = _drawn(op, space, lambda c: "bias" in c.arrays and c.arrays["splits"].sum() > 0)
        bias = c.arrays["bias"]
        assert bias.dtype == ml_dtypes.bfloat16 and c.tags["bias_dtype"] == "bfloat16"
        wide = bias.astype(np.float32)
        assert np.array_equal(wide.view(np.uint32), bias.view(np.uint16).astype(np.uint32) << 16)  # exact widening
        a = c.arrays
        lhs, rhs = grouped_gemm_operands_by(oracle.group_quantize, c, a, a["splits"], grouped_gemm_b_splits(c))
        kw = dict(kind=kind, out_dtype=c.options["out_dtype"], bias=wide)
        want = np.asarray(oracle.grouped_gemm(lhs, rhs, model=model, **kw))
        ref = reference(c)
        got = ref["y"]
        if op == "grouped_gemm":
            want = want.astype(np.float32)
            assert np.array_equal(_bits(ref["bound"]), _bits(oracle.grouped_gemm_error_bound(lhs, rhs, **kw)))
        assert got.dtype == want.dtype and np.array_equal(_bits(got), _bits(want))
        as_f32 = reference(c.replace({"bias": wide}))
        assert all(np.array_equal(_bits(as_f32[k]), _bits(ref[k])) for k in ref)


def test_device_backend_passes_the_bias_in_its_dtype(monkeypatch):
    """The device backend hands device.grouped_gemm the bias as drawn: a torch bfloat16 tensor with the case's bits,
    or float32."""
    torch = pytest.importorskip("torch")
    from conformance.backends import DeviceBackend

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = DeviceBackend.__new__(DeviceBackend)  # (its __init__ wants a GPU)
    be.dev, be._mod = "cpu", _OracleAsDevice(torch)
    for dtype, tdtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        c = _drawn("grouped_gemm", {"kind": ["fprop"], "bias_dtype": [dtype]}, lambda c: "bias" in c.arrays)
        be._grouped_gemm("grouped_gemm", c)
        got = be._mod.kw["bias"]
        assert got.dtype == tdtype and tuple(got.shape) == c.arrays["bias"].shape
        assert np.array_equal(got.float().numpy(), c.arrays["bias"].astype(np.float32))


def test_random_rht_sign_mask_reaches_both_wgrad_operands(monkeypatch):
    """wgrad's random RHT sign mask is the mask of both operands' columnwise planes, in the reference and in what the
    device backend quantizes (the oracle standing in for device), and changes the planes (the option takes effect)."""
    torch = pytest.importorskip("torch")
    from conformance.backends import DeviceBackend

    c = _drawn("grouped_gemm_exact", {"kind": ["wgrad"], "rht_signs": ["random"], "groups_agree": [True]},
               lambda c: c.options["rht"] and c.options["rht_signs"] != DEFAULT_RHT_SIGNS
               and c.arrays["splits"].sum() > 0)
    assert c.tags["rht_signs"] == "random"
    mask = c.options["rht_signs"]
    pa, pb = grouped_gemm_operands(c)
    assert {p.rht_signs for p in pa + pb} == {mask} and all(p.rht for p in pa + pb)
    da, _ = grouped_gemm_operands(c.replace(options={"rht_signs": DEFAULT_RHT_SIGNS}))
    assert any(not np.array_equal(p.data, q.data) for p, q in zip(pa, da, strict=True))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = DeviceBackend.__new__(DeviceBackend)
    be.dev, be._mod = "cpu", _OracleAsDevice(torch)
    be._grouped_gemm("grouped_gemm_exact", c)
    lhs, rhs, _ = be._mod.calls[-1]
    for got, want in ((lhs.col_planes, pa), (rhs.col_planes, pb)):
        for p, q in zip(got, want, strict=True):
            assert p.rht_signs == mask and np.array_equal(p.data, q.data) and np.array_equal(p.scales, q.scales)


def test_shrinker_puts_the_rht_sign_mask_back_to_default_when_the_failure_allows():
    c = _drawn("grouped_gemm_exact", {"kind": ["wgrad"], "rht_signs": ["random"], "groups_agree": [True]},
               lambda c: c.options["rht_signs"] != DEFAULT_RHT_SIGNS and c.arrays["splits"].sum() > 0)

    def needs_rht(cand):
        return frozenset({"y"}) if cand.options["rht"] else None

    small, _ = shrink(c, needs_rht, deadline=time.monotonic() + 60)
    assert small.options["rht"] and small.options["rht_signs"] == DEFAULT_RHT_SIGNS

    def needs_the_mask(cand):
        return frozenset({"y"}) if cand.options["rht"] and cand.options["rht_signs"] == c.options["rht_signs"] else None

    small, _ = shrink(c, needs_the_mask, deadline=time.monotonic() + 60)
    assert small.options["rht_signs"] == c.options["rht_signs"]


class _DropsBf16Bias(OracleGroupedBackend):
    """oracle-grouped with a planted bug: a bfloat16 bias is ignored."""

    name = "test-drops-bf16-bias"

    def run(self, op, case):
        if "bias" in case.arrays and case.arrays["bias"].dtype == ml_dtypes.bfloat16:
            del case.arrays["bias"]
        return super().run(op, case)


register_backend(_DropsBf16Bias.name, _DropsBf16Bias)


def test_bf16_bias_case_is_saved_and_replayed(tmp_path, capsys):
    """A saved bf16-bias case (npz: the bias as uint16 bits, its dtype in meta) loads with the same bf16 bias and
    replays: the planted bug still mismatches, the oracle's grouped API passes."""
    c = _drawn("grouped_gemm_exact", {"kind": ["fprop"], "bias_dtype": ["bfloat16"], "groups_agree": [True]},
               lambda c: "bias" in c.arrays and c.arrays["splits"].sum() > 0
               and np.isfinite(reference(c)["y"].astype(np.float32)).any())
    path = save_case(tmp_path / "case.npz", c, backend=_DropsBf16Bias.name, ref=reference(c),
                     extra=dict(backend_spec=_DropsBf16Bias.name))
    back, meta, _, _ = load_case(path)
    assert back.arrays["bias"].dtype == ml_dtypes.bfloat16 and back.tags["bias_dtype"] == "bfloat16"
    assert np.array_equal(back.arrays["bias"].view(np.uint16), c.arrays["bias"].view(np.uint16))
    assert replay(str(path)) == 1
    assert replay(str(path), backend="oracle-grouped") == 0
    capsys.readouterr()


def test_gemm_generator_draws_bf16_bias_checked_by_fractions():
    """The single-GEMM cases draw a float32 or bfloat16 bias (tag bias_dtype); for bf16-bias cases the independent
    Fraction evaluation (conformance.independent, its own decode of the planes) agrees with oracle.gemm's exact model
    under the comparison of the gemm_exact op, and that reference equals the one given the bias widened to float32."""
    seen = set()
    checked = 0
    for i in range(400):
        c = generate("gemm_exact", 43, i, "gemm", {**OPS["gemm_exact"].space, "specials": False, "small": True})
        tag = c.tags["bias_dtype"]
        seen.add(tag)
        assert tag == (c.arrays["bias"].dtype.name if "bias" in c.arrays else "none")
        if tag != "bfloat16" or checked >= 6:
            continue
        ref = reference(c)
        out = FractionsBackend().run("gemm_exact", c)
        assert compare(c, ref, out, mode=OPS["gemm_exact"].mode, stats={}) == []
        wide = dict(c.arrays, bias=c.arrays["bias"].astype(np.float32))
        ref_wide = reference(dataclasses.replace(c, arrays=wide))
        assert np.array_equal(_bits(ref["y"]), _bits(ref_wide["y"]))
        checked += 1
    assert seen == {"none", "float32", "bfloat16"} and checked == 6


def test_a_backend_space_can_restrict_the_operand_and_plan_keys():
    """A plugin backend that implements only TE-rule, round-to-nearest operands and has no kernels to force says so in
    ``space()`` with the operand and plan keys (SPACE_KEYS); case_space accepts them and every drawn case then keeps
    to them, while the same draws without the restriction do use the other rules, SR, 1x16 weight blocks, forced
    algorithms and capped grids."""
    from conformance.runner import case_space

    class TeOnly(OracleGroupedBackend):
        name = "test-te-only"

        def space(self, op):
            return {"groups_agree": [True], "operand_rules": ["te"], "operand_quant": ["default"],
                    "b_block": [[16, 16]], "algorithm": ["auto"], "num_sms": [0]}

    def draws(space):
        cases = [generate("grouped_gemm", 45, i, "grouped_gemm", {**space, "kind": ["fprop"]}) for i in range(60)]
        rules = {c.options[f"quant_{s}"]["rule"] for c in cases for s in "ab"}
        rounding = {c.options[f"quant_{s}"]["rounding"] for c in cases for s in "ab"}
        blocks = {tuple(c.options["b_block"]) for c in cases}
        plans = {(c.tags["algorithm"], c.tags["loader"], c.tags["epilogue"], c.tags["grid"]) for c in cases}
        return rules, rounding, blocks, plans

    restricted = draws(case_space(TeOnly(), "grouped_gemm"))
    assert restricted == ({"te"}, {"rn"}, {(16, 16)}, {("auto", "default", "default", "one CTA per SM")})
    free = draws(case_space(OracleGroupedBackend(), "grouped_gemm"))
    assert {"torchao", "torchao_noscale"} <= free[0] and "sr" in free[1] and (1, 16) in free[2]
    assert {p[0] for p in free[3]} >= {"auto", *FAST_ALGORITHMS} and "one CTA per SM" in {p[3] for p in free[3]}
    assert "2 SMs" in {p[3] for p in free[3]} and "staged" in {p[2] for p in free[3]}


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["grouped_gemm", "grouped_gemm_tc", "grouped_gemm_exact",
                                "quantize", "group_quantize"])
def test_device_accepts_every_drawn_plan(op):
    """On a GPU: the device runs every plan the generator draws for it (a forced plan it cannot run would raise
    ValueError) and conforms under each; the grid cap is as it was after every case."""
    from conformance.backends import DeviceBackend
    from conformance.runner import case_space, check_case

    be = DeviceBackend("cuda:0")
    assert be.available() is None, be.available()
    before = be._mod.get_num_sms()
    seen = set()
    for i in range(60):  # (seed 53's quantize draws force the general kernel first at draw 57)
        c = generate(op, 53, i, OPS[op].generator, case_space(be, op))
        o = c.options
        status, ms, _, _, err = check_case(be, c)
        plan = {k: o[k] for k in ("algorithm", "loader", "epilogue", "num_sms", "quantize_kernel") if k in o}
        assert status == "pass", (i, plan, err, [str(m) for m in ms])
        assert be._mod.get_num_sms() == before
        seen.add(o.get("algorithm", o.get("quantize_kernel")))
    if op.startswith("grouped"):
        assert len(seen - {"auto"}) >= 3, seen
    else:
        assert "general" in seen, seen


@pytest.mark.parametrize("op", ["grouped_gemm", "grouped_gemm_exact"])
def test_device_backend_asks_for_the_cases_output_dtype(op, monkeypatch):
    """device.grouped_gemm gets the case's out dtype (bf16 as torch.bfloat16: the device's bf16 epilogue is what
    is checked); the fast op's y comes back as float32 (its reference is within the bound in fp32), the byte-for-byte
    ops' bf16 y as ml_dtypes bfloat16."""
    torch = pytest.importorskip("torch")
    be = _fake_device_backend(torch, monkeypatch)
    seen = set()
    for i in range(60):
        c = generate(op, 31, i, "grouped_gemm", OPS[op].space)
        y = be._grouped_gemm(op, c)["y"]
        bf16 = c.options["out_dtype"] == "bfloat16"
        assert be._mod.out_dtype == (torch.bfloat16 if bf16 else torch.float32), c.options["out_dtype"]
        assert y.dtype == (ml_dtypes.bfloat16 if bf16 and op != "grouped_gemm" else np.float32)
        seen.add(bf16)
    assert seen == {True, False}


def test_device_backend_expects_the_scale_layout_it_asked_for():
    """quantize: the swizzled buffer only when asked for; group_quantize: its scales buffer (swizzled) or the padded
    compact one, as asked (docs/conformance.md: the device writes one scale layout per call)."""
    from conformance.backends import DeviceBackend

    be = DeviceBackend.__new__(DeviceBackend)  # (its __init__ wants a GPU)
    q = {"row_data", "row_scales", "row_scales_swizzled", "row_amax", "col_scales", "col_scales_swizzled"}
    g = {"row_data", "row_scales", "row_scales_compact", "row_amax", "col_scales", "col_scales_compact"}

    def case(op, swizzled):
        return Case(op, 0, 0, {}, {"swizzled": swizzled}, {})

    assert be.expected_outputs("quantize", case("quantize", True), q) == q
    assert be.expected_outputs("quantize", case("quantize", False), q) == q - {"row_scales_swizzled",
                                                                                "col_scales_swizzled"}
    assert be.expected_outputs("group_quantize", case("group_quantize", True), g) == g - {"row_scales_compact",
                                                                                          "col_scales_compact"}
    assert be.expected_outputs("group_quantize", case("group_quantize", False), g) == g - {"row_scales",
                                                                                           "col_scales"}


def test_device_group_outputs_cut_each_buffer_at_its_last_offset():
    """_group_outputs of a device result (built here on the CPU from oracle.group_quantize's buffers, zero-padded to
    the worst-case capacities of SPEC 9.3, with one planted byte at the end of each tail): the data and scales up to
    the last offset are the oracle's, and each tail is the rest of its buffer (capacity minus the last offset bytes,
    e.g. 2560 - 2048 = 512 for the columnwise codes of splits [7, 0, 33], K = 64), planted byte included."""
    torch = pytest.importorskip("torch")
    from conformance.backends import DeviceBackend
    from device._results import DeviceGroupedNVFP4Tensor

    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    splits = [7, 0, 33]
    b = oracle.group_quantize(x, splits, rowwise=True, columnwise=True).buffers()
    cap = oracle.grouped_capacities(40, 64, 3)

    def padded(a, n):
        out = np.zeros(n, np.uint8)
        out[: a.size], out[-1] = a, 0x5A
        return torch.from_numpy(out)

    tiles = np.concatenate([[0], np.cumsum(-(-np.asarray(splits) // 128))])
    offsets = np.stack([b["row_offsets"], tiles, b["row_data_offsets"], b["row_scale_offsets"], b["col_data_offsets"],
                        b["col_scale_offsets"]]).astype(np.int64)
    res = DeviceGroupedNVFP4Tensor(
        shape=(40, 64), splits=torch.tensor(splits), row_data=padded(b["row_data"], cap["row_data"] + 16),
        row_scales=padded(b["row_scales"], cap["row_scale"]), col_data=padded(b["col_data"], cap["col_data"]),
        col_scales=padded(b["col_scales"], cap["col_scale"]), row_amax=torch.from_numpy(b["row_amax"]),
        col_amax=torch.from_numpy(b["col_amax"]), offsets=torch.from_numpy(offsets), swizzled=True, options={})
    out = DeviceBackend._group_outputs(res)
    for p, extra in (("row", 16), ("col", 0)):
        for buf, name in (("data", f"{p}_data"), ("scale", f"{p}_scales")):
            assert out[name].tobytes() == b[name].tobytes(), name
            tail = out[f"{name}_tail"]
            assert tail.size == cap[f"{p}_{buf}"] + (extra if buf == "data" else 0) - b[name].size, name
            assert tail[-1] == 0x5A and not tail[:-1].any(), name
    assert out["col_data_tail"].size == 512
