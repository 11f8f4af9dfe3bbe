"""The grouped-GEMM conformance ops (SPEC 12.5) on CPU: references assemble per-group oracle.gemm results in the
device's layout, and the comparisons catch planted errors (fast mode: outside the bound; exact mode: one ulp)."""

from __future__ import annotations

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
    register_backend,
)
from conformance.cases import PLAIN_QUANT, case_size, load_case, save_case
from conformance.cli import replay
from conformance.compare import compare
from conformance.generators import (
    LOADER_SWITCHES,
    LONG_ELEMS,
    LONG_MACS,
    PAIR_CONTRACTION,
    PAIR_MACS,
    PAIR_ROWS,
    generate,
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


def test_cases_saved_before_operand_options_replay_with_the_old_operands():
    """A case without the quant_a / quant_b / b_block options (saved by an earlier version) is quantized as before:
    TE rule, round-to-nearest, weights in 16x16 blocks."""
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


class _OracleAsDevice:
    """A stand-in for the ``device`` module on the CPU: group_quantize runs oracle.group_quantize on the torch
    tensors it is given (keywords as passed) and grouped_gemm records its operands and returns zeros."""

    def __init__(self, torch):
        self.torch, self.calls = torch, []

    def group_quantize(self, x, splits, *, swizzled=True, **kw):
        xs = x.view(self.torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
        return oracle.group_quantize(xs, splits.numpy(), **kw)

    def grouped_gemm(self, a, b, *, kind, out_dtype, **kw):
        self.calls.append((a, b, kind))
        self.kw = kw
        self.env_seen = {k: os.environ.get(k) for k in LOADER_SWITCHES}
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


def test_device_backend_sets_the_loader_switches_for_the_gemm_call_only(monkeypatch):
    """A case's loader_env (the device GEMM's loader switches, read at every launch) is in the environment during
    device.grouped_gemm and gone afterwards; a variable set before the case is restored."""
    torch = pytest.importorskip("torch")
    from conformance.backends import DeviceBackend

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    for name in LOADER_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NVFP4_SWAP_TMA", "before")
    be = DeviceBackend.__new__(DeviceBackend)
    be.dev, be._mod = "cpu", _OracleAsDevice(torch)
    seen = set()
    for i in range(60):
        c = generate("grouped_gemm", 29, i, "grouped_gemm", {"loaders": ["varied"], "kind": ["fprop"]})
        env = c.options["loader_env"]
        assert set(env) == set(LOADER_SWITCHES) and set(env.values()) <= {"0", "1"}
        assert c.tags["loaders"] == "varied" and all(c.tags[f"loader {k[len('NVFP4_'):]}"] == v for k, v in env.items())
        be._grouped_gemm("grouped_gemm", c)
        assert be._mod.env_seen == env
        assert os.environ["NVFP4_SWAP_TMA"] == "before" and "NVFP4_EXACT_TMA" not in os.environ
        seen |= {(k, v) for k, v in env.items()}
    assert len(seen) == 2 * len(LOADER_SWITCHES)  # every switch drawn both ways
    c = generate("grouped_gemm", 29, 0, "grouped_gemm", {"loaders": ["default"]})
    be._grouped_gemm("grouped_gemm", c)
    assert c.tags["loaders"] == "default" and not any(t.startswith("loader ") for t in c.tags)
    assert c.options["loader_env"] == {} and be._mod.env_seen["NVFP4_SWAP_TMA"] == "before"


def test_shrinker_drops_loader_switches_the_failure_does_not_need():
    c = generate("grouped_gemm", 29, 3, "grouped_gemm", {"loaders": ["varied"], "groups_agree": [True]})
    need = next(iter(c.options["loader_env"]))

    def fails(cand):
        return frozenset({"y"}) if cand.options["loader_env"].get(need) == c.options["loader_env"][need] else None

    small, _ = shrink(c, fails, deadline=time.monotonic() + 60)
    assert small.options["loader_env"] == {need: c.options["loader_env"][need]}


def test_dequantize_cases_shrink():
    """A dequantize failure shrinks to the rows and 16-blocks that carry it (helper-19's audit: the shrinker had no
    dequantize branch, so such a case was saved at full size)."""
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
# stop 39's draws: bf16 bias, random RHT sign masks for wgrad's operands, long contractions
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
    per group on average, device/csrc/gemm_kernels.cu pick_tile), PAIR_MACS multiply-adds at most."""
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


def test_a_backend_space_can_restrict_the_operand_keys():
    """A plugin backend that implements only TE-rule, round-to-nearest operands says so in ``space()`` with the
    operand keys (SPACE_KEYS); case_space accepts them and every drawn case then keeps to them, while the same draws
    without the restriction do use the other rules, SR and 1x16 weight blocks."""
    from conformance.runner import case_space

    class TeOnly(OracleGroupedBackend):
        name = "test-te-only"

        def space(self, op):
            return {"groups_agree": [True], "operand_rules": ["te"], "operand_quant": ["default"],
                    "b_block": [[16, 16]], "loaders": ["default"]}

    def draws(space):
        cases = [generate("grouped_gemm", 45, i, "grouped_gemm", {**space, "kind": ["fprop"]}) for i in range(60)]
        rules = {c.options[f"quant_{s}"]["rule"] for c in cases for s in "ab"}
        rounding = {c.options[f"quant_{s}"]["rounding"] for c in cases for s in "ab"}
        blocks = {tuple(c.options["b_block"]) for c in cases}
        loaders = {c.tags.get("loaders") for c in cases}
        return rules, rounding, blocks, loaders

    restricted = draws(case_space(TeOnly(), "grouped_gemm"))
    assert restricted == ({"te"}, {"rn"}, {(16, 16)}, {"default"})
    free = draws(case_space(OracleGroupedBackend(), "grouped_gemm"))
    assert {"torchao", "torchao_noscale"} <= free[0] and "sr" in free[1] and (1, 16) in free[2]
    assert "varied" in free[3]
