"""Tests of the conformance runner (CPU, fast): generators, planted bugs found / shrunk / saved / replayed,
report and exit codes, shards."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import QUANTIZE_OPTIONS

import oracle
from conformance import backends as B
from conformance.backends import Backend, ComposedBackend, register_backend
from conformance.cases import case_size, load_case, save_case
from conformance.cli import main, parse_budget, replay
from conformance.compare import compare, rht_exact_domain
from conformance.generators import VALUE_KINDS as G_VALUE_KINDS
from conformance.generators import generate
from conformance.ops import OPS, reference
from conformance.report import expand_indices
from conformance.runner import RunConfig, check_case, run

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------------------
# test-only backends
# ---------------------------------------------------------------------------------------------------------------

class OracleQuantize(Backend):
    """A correct backend: the oracle itself (every case passes)."""

    name = "test-oracle"
    ops = ("quantize",)

    def run(self, op, case):
        return reference(case)


class FlipNibble(OracleQuantize):
    """Planted bug: the high nibble of the first rowwise data byte whose high code is +-6 gets bit 0 flipped."""

    name = "test-flip"

    def run(self, op, case):
        out = reference(case)
        d = out.get("row_data")
        if d is not None and d.size:
            hit = np.flatnonzero((d.reshape(-1) >> 4) & 7 == 7)
            if hit.size:
                d = d.copy()
                d.reshape(-1)[hit[0]] ^= 0x10
                out["row_data"] = d
        return out


class BadSwizzle(ComposedBackend):
    """Planted bug: grouped scales swizzled with the 128 rows of a tile split as (32, 4) instead of (4, 32)."""

    name = "test-badswizzle"
    ops = ("group_quantize",)

    def run(self, op, case):
        out = self._group(case)
        if "row_scales" in out:
            ref_offs = out["row_scale_offsets"]
            k = case.arrays["x"].shape[1]
            parts = []
            for g in range(case.arrays["splits"].size):
                chunk = out["row_scales_compact"][ref_offs[g] : ref_offs[g + 1]]
                cp = (k // 16 + 3) // 4 * 4
                comp = chunk.reshape(-1, cp)
                t = comp.reshape(-1, 32, 4, cp // 4, 4).transpose(0, 3, 2, 1, 4)  # wrong: 32 and 4 swapped
                parts.append(np.ascontiguousarray(t).reshape(-1))
            out["row_scales"] = np.concatenate(parts) if parts else out["row_scales"]
        return out


class Unavailable(Backend):
    name = "test-unavailable"
    ops = ("quantize",)

    def available(self):
        return "library missing (test)"


class SlowStart(Backend):
    """A backend with seconds of one-time set-up (as a GPU backend's context and JIT extensions): correct only after
    :meth:`warmup`, which the runner must call once per worker, before the first case and outside its timing."""

    name = "test-slowstart"
    ops = ("e2m1", "e4m3")
    warmup_s = 1.5

    def __init__(self):
        self.warm = 0

    def warmup(self, ops):
        import time

        assert ops == self.ops, ops
        time.sleep(self.warmup_s)
        self.warm += 1

    def run(self, op, case):
        if self.warm != 1:
            raise RuntimeError(f"warmup ran {self.warm} times before this case")
        return reference(case)


class DropsColumnwise(OracleQuantize):
    """Planted bug: the columnwise plane is never returned (a kernel that ignores columnwise=True)."""

    name = "test-dropcol"

    def run(self, op, case):
        return {k: v for k, v in reference(case).items() if not k.startswith("col_")}


class WritesItsInput(OracleQuantize):
    """Planted bug: zeroes its input in place, then returns the oracle's outputs of the zeroed input."""

    name = "test-inplace"

    def run(self, op, case):
        case.arrays["x"][...] = 0
        return reference(case)


class DiesOnCase(OracleQuantize):
    """Planted crash: the process ends (as a segfault in native code would) on the case with index 1."""

    name = "test-dies"

    def run(self, op, case):
        if case.index == 1:
            os._exit(0)
        return reference(case)


class HangsOnCase(OracleQuantize):
    """Planted hang on the case with index 1."""

    name = "test-hangs"

    def run(self, op, case):
        if case.index == 1:
            import time

            time.sleep(3600)
        return reference(case)


class ExitsOnCase(OracleQuantize):
    """``sys.exit(0)`` inside run, and ``None`` returned on another case."""

    name = "test-exits"

    def run(self, op, case):
        if case.index == 0:
            raise SystemExit(0)
        return None


class RaisesTwoKinds(OracleQuantize):
    """A backend whose name holds colons (as device:cuda:0) raising ValueError on even cases, KeyError on odd ones."""

    name = "test:raises:2"

    def run(self, op, case):
        raise (ValueError if case.index % 2 == 0 else KeyError)(f"planted {case.index}")


class HangsInSetUp(OracleQuantize):
    """Planted hang in the warm-up of worker processes (a GPU context that never comes)."""

    name = "test-hangs-in-setup"

    def warmup(self, ops):
        import time

        time.sleep(3600)


class UnprintableError(OracleQuantize):
    """An exception whose own __str__ raises, on the case with index 1; prints to stdout on every case."""

    name = "test-unprintable"

    def run(self, op, case):
        print(f"kernel log: case {case.index}")
        if case.index == 1:
            class KernelError(Exception):
                def __str__(self):
                    raise RuntimeError("no message")

            raise KernelError()
        return reference(case)


for _cls in (OracleQuantize, FlipNibble, BadSwizzle, Unavailable, SlowStart, DropsColumnwise, WritesItsInput,
             DiesOnCase, HangsOnCase, ExitsOnCase, RaisesTwoKinds, HangsInSetUp, UnprintableError):
    register_backend(_cls.name, _cls)


def _cfg(tmp_path, **kw) -> RunConfig:
    base = dict(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1, shrink_time=20.0)
    base.update(kw)
    return RunConfig(**base)


# ---------------------------------------------------------------------------------------------------------------
# generators
# ---------------------------------------------------------------------------------------------------------------

def _same(c1, c2) -> bool:
    if c1.options != c2.options or set(c1.arrays) != set(c2.arrays):
        return False
    return all(np.array_equal(c1.arrays[k].view(np.uint8), c2.arrays[k].view(np.uint8)) for k in c1.arrays)


@pytest.mark.parametrize("op", sorted(OPS))
def test_generator_is_deterministic_per_seed_and_index(op):
    gen = OPS[op].generator
    space = OPS[op].space
    a = [generate(op, 7, i, gen, space) for i in range(6)]
    b = [generate(op, 7, i, gen, space) for i in (5, 3, 1, 0, 2, 4)]  # other order: same cases
    b = dict(zip((5, 3, 1, 0, 2, 4), b, strict=True))
    assert all(_same(a[i], b[i]) for i in range(6))
    assert not all(_same(a[0], generate(op, 8, 0, gen, space)) for _ in range(1))  # another seed differs
    assert sum(_same(a[0], a[i]) for i in range(1, 6)) == 0


def test_dequantize_op_catches_a_wrong_factor_order():
    """The dequantize op (SPEC 11 on arbitrary bytes) is sensitive: ml_dtypes' decoders with the SPEC order
    ((sf * amax) * fp32(1/(6G)), G = 448 or 256 as the case draws it) conform, the other association
    (sf * (amax * fp32(1/(6G)))) is reported on most cases."""
    from conformance.independent import mld_dequantize

    caught = 0
    gs = set()
    for i in range(60):
        c = generate("dequantize", 11, i, "dequantize", dict(OPS["dequantize"].space, rule=["te"]))
        a, ref = c.arrays, reference(c)
        g = int(c.options.get("global_scale_max", 448))
        gs.add(g)
        got = mld_dequantize(a["data"], a["scales"], a["amax"][0], "te", g)
        assert not compare(c, ref, {"y": got}, OPS["dequantize"].mode)
        r, cols = a["data"].shape[0], 2 * a["data"].shape[1]
        q = np.stack((a["data"] & 15, a["data"] >> 4), -1).reshape(r, cols).view(ml_dtypes.float4_e2m1fn)
        sf = a["scales"].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        with np.errstate(all="ignore"):
            f = (sf * (a["amax"][0] * np.float32(1.0 / (6.0 * g)))).astype(np.float32)
            y = (q.astype(np.float32).reshape(r, cols // 16, 16) * f[:, :, None]).reshape(r, cols).astype(np.float32)
        caught += bool(compare(c, ref, {"y": y}, OPS["dequantize"].mode))
    assert caught >= 20
    assert gs == {448, 256}


def test_dequantize_op_torchao_factors():
    """The dequantize op's torchao rules (SPEC 11.1): ml_dtypes' decoders with P * E4M3 (P = amax / 2688) and with
    E4M3 alone conform, and so does torchao's own ``NVFP4Tensor.dequantize`` (when torchao is installed); the TE
    factor on the same bytes is reported (unless every value is 0 or NaN)."""
    from conformance.independent import import_torchao, mld_dequantize, torchao_dequantize

    with_torchao = import_torchao() is not None
    caught = seen = 0
    for rule in ("torchao", "torchao_noscale"):
        for i in range(30):
            c = generate("dequantize", 12, i, "dequantize", dict(OPS["dequantize"].space, rule=[rule], min_rows=1))
            assert c.options["rule"] == rule
            a, ref = c.arrays, reference(c)
            assert not compare(c, ref, {"y": mld_dequantize(a["data"], a["scales"], a["amax"][0], rule)}, "bytes")
            if with_torchao:
                got = torchao_dequantize(a["data"], a["scales"], a["amax"][0], rule)
                assert not compare(c, ref, {"y": got}, "bytes")
            te = mld_dequantize(a["data"], a["scales"], a["amax"][0], "te")
            if np.isfinite(ref["y"]).any() and (ref["y"][np.isfinite(ref["y"])] != 0).any():
                seen += 1
                caught += bool(compare(c, ref, {"y": te}, "bytes"))
    assert seen >= 20 and caught >= seen - 2


def test_generator_covers_the_edges():
    space = OPS["group_quantize"].space
    cases = [generate("group_quantize", 0, i, "group_quantize", space) for i in range(150)]
    rows = {c.arrays["x"].shape[0] for c in cases}
    assert rows & {0, 1} and rows & {15, 16, 17} and rows & {127, 128, 129}
    tags = {(k, v) for c in cases for k, v in c.tags.items()}
    for t in [("values", "ties"), ("rounding", "sr"), ("rht", "True"), ("block", "16x16"), ("splits", "giant"),
              ("splits", "zeros"), ("layout", "compact"), ("rule", "torchao")]:
        assert t in tags, t
    assert any((c.arrays["splits"] == 0).any() for c in cases)


@pytest.mark.parametrize("kind", [k for k in G_VALUE_KINDS])
def test_values_of_every_kind_for_any_width(kind):
    from conformance.generators import gen_values

    for k in (7, 16, 37):
        v, got = gen_values(np.random.default_rng(k), 5, k, "bfloat16", kind)
        assert got == kind and v.shape == (5, k)


def test_ties_values_land_on_e2m1_ties():
    # the "ties" kind: S_enc = 2^-j, block scale 2, so x * m lands exactly on the SPEC 3.1 midpoints
    from conformance.generators import _ties

    rng = np.random.default_rng(0)
    v = _ties(rng, 16, 32, "float32").astype(np.float32)
    t = oracle.quantize(v, amax=np.float32(np.abs(v).max()))
    scaled = np.abs(v) / np.float32(np.abs(v).max() / 2688) / 2  # value * S_enc / decoded scale
    assert set(np.unique(oracle.fp4_numpy.decode_e4m3(t.row.scales))) <= {2.0, 448.0}
    mids = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0}
    assert len(mids & set(np.unique(scaled[:, :16]).tolist())) >= 5


# ---------------------------------------------------------------------------------------------------------------
# planted bugs: found, shrunk, saved, replayed
# ---------------------------------------------------------------------------------------------------------------

def test_flipped_nibble_is_found_shrunk_saved_and_replayed(tmp_path, capsys):
    code, stats = run(_cfg(tmp_path, backends=["test-flip"], ops=["quantize"], max_cases=4))
    assert code == 1
    assert stats.totals()["mismatched"] >= 1
    f = stats.failures[0]
    assert f["mismatches"][0]["buffer"] == "row_data"
    assert f["mismatches"][0]["where"]["nibble"] == "hi"
    assert "(6)" in f["mismatches"][0]["ref"] or "(-6)" in f["mismatches"][0]["ref"]
    assert tuple(f["shrunk_size"]) < tuple(f["original_size"])
    assert f["shrunk_size"][0] <= 16 * 16  # a single row block or tile suffices
    # saved, loadable without pickles, with a failures.jsonl line and a replay command
    case, meta, ref, out = load_case(f["npz"])
    assert case.arrays["x"].size == f["shrunk_size"][0]
    assert not np.array_equal(ref["row_data"], out["row_data"])
    # the shrunk case rounds to nearest (shrinking simplifies the options), so oracle.diagnose reads its rowwise bytes:
    # one block apart from rule te's
    assert case.options["rounding"] == "rn", case.options
    assert f["diagnosis"][0] == f"row plane: closest te, 1 of {ref['row_scales'].size} blocks differ", f["diagnosis"]
    lines = (tmp_path / "art" / "failures.jsonl").read_text().splitlines()
    assert len(lines) == stats.totals()["mismatched"]
    assert json.loads(lines[0])["replay"] == f"python -m conformance replay {f['npz']}"
    capsys.readouterr()
    assert replay(f["npz"]) == 1
    shown = capsys.readouterr().out
    assert "row_data" in shown and "diagnose: row plane: closest " in shown, shown
    assert replay(f["npz"], backend="test-oracle") == 0  # "fixed" implementation


def test_bad_swizzle_is_found_and_located(tmp_path):
    code, stats = run(_cfg(tmp_path, backends=["test-badswizzle"], ops=["group_quantize"], max_cases=6))
    assert code == 1
    f = stats.failures[0]
    bufs = {m["buffer"]: m for m in f["mismatches"]}
    assert set(bufs) == {"row_scales"}
    w = bufs["row_scales"]["where"]
    assert {"group", "row", "block"} <= set(w)
    case, *_ = load_case(f["npz"])
    assert case.arrays["splits"].size == 1 and case_size(case) < tuple(f["original_size"])
    # row 0 lands right under both splits: the bug needs a second row (and a nonzero scale there)
    assert 2 <= case.arrays["splits"][0] <= 16 and case.arrays["x"].shape[1] == 16
    assert w["row"] >= 1 and w["group"] == 0


def test_compare_names_the_first_differing_nibble():
    case = generate("quantize", 3, 0, "quantize", {"planes": ["row"], "rounding": ["rn"], "min_rows": 2})
    x = np.zeros((2, 32), np.float32)
    x[1, 16:] = np.arange(16, dtype=np.float32)
    case = case.replace({"x": x}, {"rule": "te", "block": [1, 16], "rht": False})
    case.arrays.pop("amax", None)
    ref = reference(case)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"][1, 9] ^= 0x01  # row 1, byte 9: elements 18 (lo) / 19, block 1
    out["row_scales"][1, 1] ^= 0x08
    ms = {m.buffer: m for m in compare(case, ref, out)}
    assert set(ms) == {"row_data", "row_scales"}
    w = ms["row_data"].where
    assert (w["row"], w["block"], w["nibble"], w["element"]) == (1, 1, "lo", 18)
    assert ms["row_data"].ref.startswith("[0x") and "(" in ms["row_data"].got
    assert (ms["row_scales"].where["row"], ms["row_scales"].where["block"]) == (1, 1)


# ---------------------------------------------------------------------------------------------------------------
# report, exit codes, shards
# ---------------------------------------------------------------------------------------------------------------

def test_exit_codes_and_json_report(tmp_path, capsys):
    rep = tmp_path / "r.json"
    code, _ = run(_cfg(tmp_path, backends=["test-oracle"], ops=["quantize"], max_cases=3, report=str(rep)))
    assert code == 0
    out = capsys.readouterr().out
    assert "test-oracle" in out and "quantize" in out and "total: 3 cases" in out
    assert "rule=" not in out  # the per-option rows come with --detail only
    doc = json.loads(rep.read_text())
    assert doc["exit_code"] == 0 and doc["totals"]["cases"] == 3 and doc["totals"]["mismatched"] == 0
    (op,) = doc["ops"]
    assert op["op"] == "quantize" and op["backend"] == "test-oracle"
    assert op["indices"] == dict(count=3, step=1, ranges=[[0, 2]])
    assert sum(v["cases"] for v in op["options"]["rule"].values()) == 3
    code, stats = run(_cfg(tmp_path, backends=["test-unavailable"], report=str(rep)))
    assert code == 2 and stats.cases == 0
    doc = json.loads(rep.read_text())
    assert doc["skipped"] == [dict(backend="test-unavailable", op="quantize", reason="library missing (test)")]
    assert "library missing (test)" in doc["no_case_reason"]
    out = capsys.readouterr()
    assert "SKIPPED" in out.out and "test-unavailable is unavailable" in out.err
    assert "no case ran: every selected backend is unavailable: " in out.err


def test_generator_error_costs_one_case_not_the_run(tmp_path, capsys, monkeypatch):
    import conformance.generators as G

    real = G.GENERATORS["quantize"]

    def flaky(rng, space):
        out = real(rng, space)
        if out[0]["x"].shape[0] % 2 == 0:  # some indices, deterministically
            raise ValueError("planted generator defect")
        return out

    monkeypatch.setitem(G.GENERATORS, "quantize", flaky)
    n_bad = sum(real(G.case_rng(0, "quantize", i), OPS["quantize"].space)[0]["x"].shape[0] % 2 == 0 for i in range(6))
    assert 0 < n_bad < 6
    code, stats = run(_cfg(tmp_path, backends=["test-oracle"], ops=["quantize"], max_cases=6))
    assert code == 1 and stats.cases == 6 and len(stats.failures) == n_bad
    out = capsys.readouterr().out
    assert "FAILED quantize [test-oracle] seed=0 index=" in out and "planted generator defect" in out


def test_warmup_runs_once_per_worker_and_is_not_charged_to_an_op(tmp_path):
    budget = 4.0
    code, stats = run(_cfg(tmp_path, backends=["test-slowstart"], budget=budget))
    assert code == 0, [f.get("error") for f in stats.failures]
    e2m1, e4m3 = (stats.tasks[("test-slowstart", op)] for op in ("e2m1", "e4m3"))
    # both ops ran many cases (the set-up was charged to neither, so the scheduler kept alternating them) ...
    assert e2m1.cases > 20 and e4m3.cases > 20
    # ... the case timings leave out the set-up, and so does the budget: it is reported as the start-up
    assert e2m1.seconds + e4m3.seconds < budget
    assert stats.startup_s >= SlowStart.warmup_s
    assert e2m1.seconds + e4m3.seconds > budget - SlowStart.warmup_s


def test_shards_partition_the_case_space(tmp_path):
    idx = []
    for i in range(3):
        _, stats = run(_cfg(tmp_path, backends=["test-oracle"], ops=["quantize"], max_cases=7, shard=(i, 3)))
        got = stats.tasks[("test-oracle", "quantize")].indices
        assert all(j % 3 == i for j in got)
        idx.append(set(got))
    assert not (idx[0] & idx[1] or idx[0] & idx[2] or idx[1] & idx[2])
    assert set().union(*idx) == set(range(7))  # the case cap is the index range 0..6, whatever the shards


def test_workers_partition_the_case_space(tmp_path):
    _, stats = run(_cfg(tmp_path, backends=["test-oracle"], ops=["quantize"], max_cases=5, workers=2))
    assert sorted(stats.tasks[("test-oracle", "quantize")].indices) == list(range(5))


def test_cli_subprocess_exit_codes(tmp_path):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    base = [sys.executable, "-m", "conformance", "run", "--no-progress", "--artifacts", str(tmp_path / "a")]
    ok = subprocess.run(base + ["--backend", "mldtypes", "--ops", "e2m1,e4m3", "--budget", "3s"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "e2m1" in ok.stdout and "0 mismatched" in ok.stdout
    bad = subprocess.run(base + ["--backend", "test_conformance:FlipNibble", "--ops", "quantize", "--cases", "6"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    npz = next((tmp_path / "a").glob("quantize-test-flip-*[0-9].npz"))
    rp = subprocess.run([sys.executable, "-m", "conformance", "replay", str(npz)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
    assert rp.returncode == 1 and "row_data" in rp.stdout
    assert main(["run", "--ops", "nope"]) == 2


def test_budget_parsing():
    assert parse_budget("60s") == 60 and parse_budget("2m") == 120 and parse_budget("1.5") == 1.5
    for bad in ("soon", "0", "0s", "0.0m", "-5", "-1s", "", "1x", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_budget(bad)


def test_saved_case_round_trips_bf16_without_pickle(tmp_path):
    case = generate("rht", 1, 2, "rht", {})
    p = save_case(tmp_path / "c.npz", case, backend="torch", ref={"y": np.arange(3, dtype=np.uint16)})
    back, meta, ref, _ = load_case(p)
    assert back.arrays["x"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(back.arrays["x"].view(np.uint16), case.arrays["x"].view(np.uint16))
    assert back.options == case.options and meta["backend"] == "torch" and ref["y"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------------
# the oracle self-conformance on a few cases
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["mldtypes", "composed", "fractions", "oracle-seq", "oracle-tc", "oracle-grouped"])
def test_self_conformance_small(tmp_path, backend):
    code, stats = run(_cfg(tmp_path, backends=[backend], max_cases=5))
    assert code == 0, [f.get("mismatch_text") for f in stats.failures]


class TorchaoFinite(B.TorchaoBackend):
    """torchao on finite inputs only (NaN inputs hit the open finding tested below)."""

    name = "test-torchao-finite"

    def space(self, op):
        return {**super().space(op), "specials": False}


register_backend(TorchaoFinite.name, TorchaoFinite)


def test_self_conformance_torch(tmp_path):
    pytest.importorskip("torch")
    if B.make_backend("torchao").available():
        pytest.skip("torchao missing")
    code, stats = run(_cfg(tmp_path, backends=["torch", "test-torchao-finite"], max_cases=6))
    assert code == 0, [f.get("mismatch_text") for f in stats.failures]


def test_torchao_nan_amax_on_bf16():
    """Regression: a bf16 NaN gives torch.max the canonical NaN 0x7FC00000, as SPEC 4.1 models it."""
    b = B.make_backend("torchao")
    if b.available():
        pytest.skip("torchao missing")
    case = generate("quantize", 0, 0, "quantize", b.space("quantize"))
    x = np.zeros((1, 16), ml_dtypes.bfloat16)
    x[0, 13] = np.nan
    case = case.replace({"x": x}, {"rule": "torchao", "rowwise": True, "columnwise": False})
    status, ms, *_ = check_case(b, case)
    assert status == "pass", [str(m) for m in ms]


def test_group_quantize_reference_has_the_device_tile_table():
    """The grouped reference holds the device's row_tile_offsets (offset row 1, read by its GEMM): hand-worked
    prefix sums of ceil(m_g / 128), of the cut sizes when the splits do not add up (SPEC 9.4); the composed
    backend, which has no tile table, is not asked for it."""
    from conformance.cases import Case
    from conformance.runner import reference

    x = np.zeros((300, 32), np.float32)
    case = Case("group_quantize", 0, 0, {"x": x, "splits": np.array([0, 129, 128, 1, 42], np.int64)},
                dict(QUANTIZE_OPTIONS), {})
    assert reference(case)["row_tile_offsets"].tolist() == [0, 0, 2, 3, 4, 5]
    cut = case.replace({"splits": np.array([200, 200, 5], np.int64)}, options={"splits_rule": "cut"})
    assert reference(cut)["row_tile_offsets"].tolist() == [0, 2, 3, 3]  # cut sizes 200, 100, 0
    assert "row_tile_offsets" not in B.ComposedBackend().expected_outputs("group_quantize", case, ["row_tile_offsets"])


def test_loose_splits_cases_reference_the_cut_sizes():
    """Device spaces draw group_quantize cases whose splits do not add up to T (SPEC 9.4); their reference is the
    oracle on the rows left with the cut sizes: offsets end at the cut total, buffers and tails sized from T."""
    from conformance import ops as O
    from conformance.generators import generate
    from conformance.runner import reference

    space = {**O.OPS["group_quantize"].space, "max_elems": 1 << 16, "rule": ["te"], "loose_splits": True}
    seen = set()
    for i in range(400):
        case = generate("group_quantize", 11, i, O.OPS["group_quantize"].generator, space)
        if case.options.get("splits_rule") != "cut":
            continue
        seen.add(case.tags["splits"])
        s, x = case.arrays["splits"], case.arrays["x"]
        # SPEC 9.4 written out, in Python integers (the "garbage" splits' int64 sums would overflow)
        hi = [min(v, x.shape[0]) for v in itertools.accumulate(max(int(v), 0) for v in s)]
        ref = reference(case)
        assert ref["row_offsets"].tolist() == [0, *hi]
        cap = oracle.grouped_capacities(x.shape[0], x.shape[1], s.size)
        if case.options["rowwise"]:
            assert ref["row_data"].size + ref["row_data_tail"].size == cap["row_data"]
    assert {"loose_offsets", "loose_negative", "loose_over", "loose_under", "loose_garbage"} <= seen


def _fast_quantize_input(case) -> bool:
    """The inputs the device's fast bf16 quantize kernels take (docs/design.md 3.1: bf16, 1x16 blocks, round to nearest
    or stochastic rounding, no RHT or its default mask), not 4over6 (its own kernel, SPEC 5.6)."""
    o = case.options
    return (case.arrays["x"].dtype == ml_dtypes.bfloat16 and list(o["block"]) == [1, 16]
            and (not o["rht"] or o["rht_signs"] == 0xD7E8) and not o.get("four_over_six"))


@pytest.mark.parametrize("op", ["quantize", "group_quantize"])
def test_quantize_kernel_is_drawn_on_fast_inputs_for_backends_that_name_it(op):
    """A space naming the quantize kernels (the device's) draws auto / general on exactly the fast kernels' inputs,
    as the last draw (the case is otherwise the one drawn without the key); a space without it draws none, and a
    space allowing only "auto" draws only that."""
    base = {**OPS[op].space, "max_elems": 1 << 14}
    seen, sr_seen = set(), set()
    for i in range(120):
        plain = generate(op, 13, i, OPS[op].generator, base)
        c = generate(op, 13, i, OPS[op].generator, {**base, "quantize_kernel": ["auto", "general"]})
        assert "quantize_kernel" not in plain.options and "quantize_kernel" not in plain.tags
        kernel = c.options.pop("quantize_kernel", None)
        assert (kernel is not None) == _fast_quantize_input(c) and c.tags.get("quantize_kernel") == kernel
        assert _same(c, plain)
        seen.add(kernel)
        sr_seen.add((kernel, c.options["rounding"]))
        only_auto = generate(op, 13, i, OPS[op].generator, {**base, "quantize_kernel": ["auto"]})
        assert only_auto.options.get("quantize_kernel") in (None, "auto")
    assert seen == {None, "auto", "general"}
    assert ("general", "sr") in sr_seen and ("general", "rn") in sr_seen  # both roundings meet the general kernels


class _QuantizeDevice:
    """A stand-in for ``device`` on the CPU that records the plan forced (``testing.force_plan``) during each
    quantize / group_quantize call."""

    def __init__(self):
        import contextlib

        self.active, self.seen = None, []
        outer = self

        class Testing:
            @contextlib.contextmanager
            def force_plan(self, *, algorithm=None, loader=None, epilogue=None, quantize=None):
                outer.active = dict(algorithm=algorithm, loader=loader, epilogue=epilogue, quantize=quantize)
                try:
                    yield
                finally:
                    outer.active = None

        self.testing = Testing()

    def quantize(self, x, **kw):
        self.seen.append(self.active)

    def group_quantize(self, x, splits, **kw):
        self.seen.append(self.active)


@pytest.mark.parametrize("op", ["quantize", "group_quantize"])
def test_device_backend_forces_the_general_quantize_kernels_for_the_call(op, monkeypatch):
    """The device backend names the quantize kernels in its space, and a case that drew "general" runs under
    device.testing.force_plan(quantize="general"), any other case without a forced plan."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = B.DeviceBackend.__new__(B.DeviceBackend)  # (its __init__ wants a GPU)
    be.dev, be._mod = "cpu", _QuantizeDevice()
    monkeypatch.setattr(B.DeviceBackend, "_quantize_outputs", staticmethod(lambda res: {}))
    monkeypatch.setattr(B.DeviceBackend, "_group_outputs", staticmethod(lambda res: {}))
    space = {**OPS[op].space, **be.space(op), "max_elems": 1 << 14}
    assert space["quantize_kernel"] == ["auto", "general"]
    kernels = []
    for i in range(40):
        c = generate(op, 13, i, OPS[op].generator, space)
        be.run(op, c)
        kernel = c.options.get("quantize_kernel", "auto")
        want = None if kernel == "auto" else dict(algorithm=None, loader=None, epilogue=None, quantize="general")
        assert be._mod.seen[-1] == want and be._mod.active is None
        kernels.append(kernel)
    assert "general" in kernels and "auto" in kernels


def test_shrinker_lets_the_device_choose_the_quantize_kernel_when_the_failure_allows():
    from conformance.shrink import shrink

    space = {**OPS["quantize"].space, "max_elems": 1 << 14, "quantize_kernel": ["general"]}
    c = next(c for i in range(100) if (c := generate("quantize", 13, i, "quantize", space)).options.get(
        "quantize_kernel") == "general" and c.arrays["x"].shape[0] > 0)
    small, _ = shrink(c, lambda cand: frozenset({"row_data"}), deadline=time.monotonic() + 30)
    assert small.options["quantize_kernel"] == "auto" and case_size(small)[2] < case_size(c)[2]
    small, _ = shrink(c, lambda cand: frozenset({"row_data"}) if cand.options["quantize_kernel"] == "general" else None,
                      deadline=time.monotonic() + 30)
    assert small.options["quantize_kernel"] == "general"


# ---------------------------------------------------------------------------------------------------------------
# a backend that misbehaves must not pass
# ---------------------------------------------------------------------------------------------------------------

def test_missing_output_buffers_are_mismatches(tmp_path):
    code, stats = run(_cfg(tmp_path, backends=["test-dropcol"], ops=["quantize"], max_cases=12))
    assert code == 1
    assert all(m["buffer"].startswith("col_") and m["count"] == -1 for f in stats.failures for m in f["mismatches"])
    assert any(f["mismatches"] for f in stats.failures)


def test_a_backend_writing_its_input_does_not_corrupt_the_saved_case(tmp_path):
    code, stats = run(_cfg(tmp_path, backends=["test-inplace"], ops=["quantize"], max_cases=6))
    assert code == 1
    f = next(f for f in stats.failures if f.get("npz"))
    case, *_ = load_case(f["original_npz"])
    assert np.any(np.asarray(case.arrays["x"], np.float32) != 0)  # the input as generated, not the zeroed copy
    assert replay(f["npz"]) == 1  # the saved case still fails


def test_exit_and_bad_return_values_are_errors(tmp_path):
    code, stats = run(_cfg(tmp_path, backends=["test-exits"], ops=["quantize"], max_cases=2))
    assert code == 1 and stats.totals()["errors"] == 2
    errs = " | ".join(f["error"] for f in stats.failures)
    assert "SystemExit" in errs and "not a dict" in errs


def test_exceptions_of_two_types_are_two_failures(tmp_path):
    """A backend raising ValueError and KeyError has two failures, each shrunk and saved up to the per-failure cap
    (3): eight cases save six, not the three of one "error" signature (a backend name with colons included)."""
    code, stats = run(_cfg(tmp_path, backends=["test:raises:2"], ops=["quantize"], max_cases=8, shrink_time=2.0))
    assert code == 1 and stats.totals()["errors"] == 8
    saved = [f for f in stats.failures if "npz" in f]
    assert len(saved) == 6, [f.get("note") or f["error"][:60] for f in stats.failures]
    assert {"ValueError", "KeyError"} <= {f["error"].split()[2].rstrip(":") for f in saved}


def _indices_run(stats) -> list[int]:
    rows = [o for o in stats.to_json({}, 0, {})["ops"] if o["op"] == "quantize"]
    return sorted(i for o in rows for i in expand_indices(o["indices"]))


def test_a_worker_that_dies_is_a_failure(tmp_path, capsys):
    """The case a worker dies on is an error, and a new process of that worker runs the rest of its share: every
    index of a --cases run is accounted for once (the dead worker's later cases used to be lost silently)."""
    code, stats = run(_cfg(tmp_path, backends=["test-dies"], ops=["quantize"], workers=2, max_cases=12))
    assert code == 1
    (f,) = [f for f in stats.failures]
    assert f["index"] == 1 and "died" in f["error"] and "conformance case quantize" in f["replay"]
    assert "FAILED quantize [test-dies] seed=0 index=1" in capsys.readouterr().out
    assert _indices_run(stats) == list(range(12)) and stats.totals()["passed"] == 11


def test_a_hanging_case_times_out(tmp_path):
    cfg = _cfg(tmp_path, backends=["test-hangs"], ops=["quantize"], workers=2, max_cases=8, case_timeout=4.0)
    code, stats = run(cfg)
    assert code == 1
    (f,) = [f for f in stats.failures]
    assert f["index"] == 1 and "timed out" in f["error"]
    assert _indices_run(stats) == list(range(8))


def test_a_set_up_that_hangs_is_stopped(tmp_path):
    """A worker process hanging in its backend's warm-up is killed after the case timeout and reported; the run
    ends with its table and report (it used to wait forever)."""
    t0 = time.monotonic()
    cfg = _cfg(tmp_path, backends=["test-hangs-in-setup"], ops=["quantize"], workers=2, max_cases=4, case_timeout=3.0,
               report=str(tmp_path / "r.json"))
    code, stats = run(cfg)
    assert code in (1, 2) and time.monotonic() - t0 < 60
    assert any("set-up of its backends" in f["error"] for f in stats.failures)
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == code


@pytest.mark.parametrize("workers", [1, 2])
def test_an_unprintable_exception_and_printing_backend(tmp_path, capsys, workers):
    """An exception whose __str__ raises is an error of its case (it used to end the run), and what a backend prints
    goes to stderr, not into the table's stdout."""
    code, stats = run(_cfg(tmp_path, backends=["test-unprintable"], ops=["quantize"], workers=workers, max_cases=4))
    assert code == 1 and stats.totals()["errors"] == 1 and stats.totals()["passed"] == 3
    (f,) = stats.failures
    assert "KernelError" in f["error"] and "str() of the exception raised RuntimeError" in f["error"]
    if workers == 1:
        assert "kernel log" not in capsys.readouterr().out


def test_requested_ops_without_a_backend_are_reported_skipped(tmp_path, capsys):
    code, stats = run(_cfg(tmp_path, backends=["test-oracle"], ops=["quantize", "e4m3"], max_cases=2))
    assert code == 0 and stats.cases == 2
    assert dict(backend="(none)", op="e4m3", reason="no selected backend implements this op") in stats.skipped
    assert "SKIPPED" in capsys.readouterr().out


def test_an_unavailable_device_lists_every_device_op_as_skipped(tmp_path, monkeypatch):
    """Without a usable GPU the device backend's report names all nine ops a device run covers (docs/conformance.md's
    backend table) as skipped, not only the two quantize ops, so reports and merges count what was not run."""
    import device

    monkeypatch.setattr(device, "is_available", lambda: False)
    code, stats = run(_cfg(tmp_path, backends=["device:cuda:0"], max_cases=2))
    skipped = sorted(s["op"] for s in stats.skipped if s["backend"] == "device:cuda:0")
    assert skipped == sorted(["quantize", "group_quantize", "dequantize", "layout", "grouped_gemm",
                              "grouped_gemm_exact", "grouped_gemm_tc", "grouped_gemm_sm100", "grouped_linear"]), \
        stats.skipped


def test_failures_jsonl_holds_this_run_only(tmp_path):
    for _ in range(2):
        code, stats = run(_cfg(tmp_path, backends=["test-flip"], ops=["quantize"], max_cases=4))
    lines = (tmp_path / "art" / "failures.jsonl").read_text().splitlines()
    assert code == 1 and len(lines) == len(stats.failures)


def test_cli_usage_errors_exit_2(tmp_path, capsys):
    from conformance.cli import main

    art = str(tmp_path / "art")
    assert main(["run", "--backend", "nosuch", "--cases", "1", "--artifacts", art]) == 2
    assert main(["run", "--backend", "nosuch_module_xyz:Thing", "--cases", "1", "--artifacts", art]) == 2
    assert "PYTHONPATH" in capsys.readouterr().err
    for bad in (["--device", "gpu"], ["--workers", "0"], ["--seed", "-1"], ["--cases", "0"]):
        with pytest.raises(SystemExit) as e:
            main(["run", *bad])
        assert e.value.code == 2
    assert main(["replay", str(tmp_path / "nope.npz")]) == 2
    code, stats = run(_cfg(tmp_path, backends=["test-flip"], ops=["quantize"], max_cases=4))
    npz = next(f["npz"] for f in stats.failures if f.get("npz"))
    capsys.readouterr()
    assert main(["replay", npz, "--backend", "mldtypes"]) == 2
    assert "does not implement op 'quantize'" in capsys.readouterr().err


class PlainPlugin:
    """A plugin that does not subclass Backend: only ``ops`` and ``run``."""

    ops = ("e4m3",)

    def run(self, op, case):
        return reference(case)


def test_plugin_without_the_backend_base_class(tmp_path):
    import conformance.backends as CB

    b = CB.make_backend("test_conformance:PlainPlugin")
    assert b.available() is None and b.space("e4m3") == {} and b.name == "PlainPlugin"
    code, stats = run(_cfg(tmp_path, backends=["test_conformance:PlainPlugin"], ops=["e4m3"], max_cases=3))
    assert code == 0 and stats.cases == 3


class TypoSpace(OracleQuantize):
    name = "test-typospace"

    def space(self, op):
        return {"rules": ["te"]}  # a typo of "rule": would silently restrict nothing


register_backend(TypoSpace.name, TypoSpace)


def test_unknown_space_keys_are_a_usage_error(tmp_path):
    import conformance.backends as CB

    with pytest.raises(CB.BackendSpecError, match="rules"):
        run(_cfg(tmp_path, backends=["test-typospace"], ops=["quantize"], max_cases=1))


def test_mismatch_texts_for_wrong_keys_and_shapes():
    case = generate("quantize", 3, 0, "quantize", {"planes": ["row"], "rounding": ["rn"], "min_rows": 2})
    ref = reference(case)
    out = {k: v.copy() for k, v in ref.items()}
    out["data"] = out.pop("row_data")
    out["row_amax"] = out["row_amax"].reshape(())
    text = {m.buffer: str(m) for m in compare(case, ref, out)}
    assert text["data"].startswith("data: backend returned it, but it is not an output of op quantize (its buffers: ")
    assert "row_data" in text["data"]
    assert text["row_amax"].startswith("row_amax: dtype/shape differs: oracle=float32[1]  backend=float32[]")


def test_rht_outputs_of_another_dtype_or_shape_mismatch():
    """The rht op's outputs are bf16 bits (uint16) in X's shape: the same values as int64, or flattened, mismatch
    (the tolerance comparison reshapes to blocks of 16, which would hide both)."""
    case = generate("rht", 0, 0, "rht")
    ref = reference(case)
    assert compare(case, ref, dict(ref), "rht") == []
    for bad in (ref["y"].astype(np.int64), ref["y"].reshape(-1)):
        ms = compare(case, ref, {"y": bad}, "rht")
        assert ms and ms[0].buffer == "y", (bad.dtype, bad.shape)


def test_rht_tolerance_blocks_refuse_infinite_outputs():
    """A block outside the exact domain is compared within a tolerance that grows with the larger magnitude of the
    two outputs: an Inf output made it Inf, so +-Inf passed for every such block (a whole output of +Inf passed)."""
    case = next(c for i in range(20) if not rht_exact_domain((c := generate("rht", 0, i, "rht")).arrays["x"]).all())
    ref = reference(case)
    tolerance_blocks = ~rht_exact_domain(case.arrays["x"])
    for bits in (0x7F80, 0xFF80):
        y = ref["y"].reshape(-1, 16).copy()
        y[np.flatnonzero(tolerance_blocks)[0], 0] = bits
        ms = compare(case, ref, {"y": y.reshape(ref["y"].shape)}, "rht")
        assert ms and ms[0].buffer == "y", hex(bits)
    ms = compare(case, ref, {"y": np.full_like(ref["y"], 0x7F80)}, "rht")
    assert ms and ms[0].count >= int(tolerance_blocks.sum()) * 16


def test_device_backend_returns_its_amax_buffers_as_written():
    """DeviceBackend's quantize outputs: the amax buffers themselves (a float64 or two-element buffer is reported,
    not cast to the reference's float32 [1]); checked with CPU tensors in the device result class."""
    torch = pytest.importorskip("torch")
    from device._results import DeviceNVFP4Tensor

    x = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32)
    q = oracle.quantize(x, columnwise=True)

    def result(amax_row):
        return DeviceNVFP4Tensor(shape=(32, 64), row_data=torch.from_numpy(q.row.data),
                                 row_scales=torch.from_numpy(q.row.scales), row_amax=amax_row,
                                 col_data=torch.from_numpy(q.col.data), col_scales=torch.from_numpy(q.col.scales),
                                 col_amax=torch.tensor([q.col.amax]), swizzled=False, options=dict(q.options))

    good = B.DeviceBackend._quantize_outputs(result(torch.tensor([q.row.amax])))
    assert good["row_amax"].dtype == np.float32 and good["row_amax"].shape == (1,)
    assert good["row_amax"].view(np.uint32)[0] == np.float32(q.row.amax).view(np.uint32)
    f64 = B.DeviceBackend._quantize_outputs(result(torch.tensor([float(q.row.amax), 123.0], dtype=torch.float64)))
    assert f64["row_amax"].dtype == np.float64 and f64["row_amax"].shape == (2,)


def test_aligned_splits_are_aligned():
    """Splits tagged "aligned": T >= 128 and every group but the last a multiple of 128 rows (the leftover rows used
    to go to a random group, and a T below 128 was tagged aligned with random sizes)."""
    from conformance.generators import gen_splits

    rng = np.random.default_rng(5)
    seen = 0
    for _ in range(3000):
        total, groups = int(rng.integers(0, 700)), int(rng.integers(1, 9))
        s, kind = gen_splits(rng, total, groups)
        assert int(s.sum()) == total
        if kind == "aligned":
            seen += 1
            assert total >= 128 and all(int(v) % 128 == 0 for v in s[:-1]), (total, s.tolist())
    assert seen > 100


def test_codec_specials_mix_kinds_within_a_case():
    """A codec case with specials draws each special element on its own (NaN, +-Inf or -0): one value used to fill
    every chosen element, so no grid or ties case held NaN and Inf together."""
    both = 0
    for i in range(400):
        case = generate("e2m1", 1, i, "codec")
        if case.tags.get("values") not in ("grid", "ties"):
            continue
        x = case.arrays["x"]
        both += bool(np.isnan(x).any() and np.isinf(x).any())
    assert both > 10


def test_saved_case_keeps_ml_dtypes_and_object_outputs(tmp_path):
    """A backend's outputs as ml_dtypes arrays (float8, float4) are saved as their bit patterns and read back with
    their dtype; an output numpy cannot store plainly (None) is kept as text: the case loads without pickles (these
    used to make the saved case unreadable, so replay refused it)."""
    import ml_dtypes

    case = generate("e4m3", 0, 3, "codec")
    b = np.arange(16, dtype=np.uint8)
    out = {"bytes": b.view(ml_dtypes.float8_e4m3fn), "nibbles": (b & 0xF).view(ml_dtypes.float4_e2m1fn),
           "x": None}
    path = save_case(tmp_path / "c.npz", case, backend="b", out=out)
    _, _, _, got = load_case(path)
    assert got["bytes"].dtype == ml_dtypes.float8_e4m3fn and got["bytes"].view(np.uint8).tolist() == b.tolist()
    assert got["nibbles"].dtype == ml_dtypes.float4_e2m1fn and got["nibbles"].view(np.uint8).tolist() == (b & 0xF).tolist()
    assert str(got["x"]) == "None"
    with np.load(path, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
