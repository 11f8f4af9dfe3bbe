"""conformance.runner end to end with stand-in backends: the shrinker keeps the failing buffers, the failure record
describes the saved case, a failure that does not reproduce stays a failure, exit codes and the printed failures
(docs/conformance.md)."""

from __future__ import annotations

import numpy as np
from conformance_cases import quantize_case

from conformance.backends import Backend
from conformance.ops import reference
from conformance.runner import check_case


class _ReturnsNothing(Backend):
    name = "test-returns-nothing"
    ops = ("quantize",)

    def run(self, op, case):
        return {}


def test_a_case_the_reference_cannot_run_is_an_error_not_a_pass():
    """SPEC 7.3: rht=True on fp32 input is a TypeError of the oracle. docs/conformance.md: exit code 1 on any exception
    in the oracle or the backend; check_case's status is "error", its text "reference raised TypeError: ..."."""
    c = quantize_case(np.ones((16, 16), np.float32), rowwise=False, columnwise=True, rht=True)
    status, ms, ref, out, err = check_case(_ReturnsNothing(), c)
    assert status == "error" and ms == [] and err.startswith("reference raised TypeError")


# --- run()-level tests: failure records of the runner (shrink, save) -------------------------------------------

from conformance.backends import register_backend  # noqa: E402
from conformance.cases import load_case  # noqa: E402
from conformance.runner import RunConfig, run  # noqa: E402

_ROW = {"planes": ["row"], "rule": ["te"], "rounding": ["rn"], "rht": [False], "block": [[1, 16]], "min_rows": 4,
        "amax": ["computed"]}


class _RowBackend(Backend):
    ops = ("quantize",)

    def space(self, op):
        return dict(_ROW)


class _Drifts(_RowBackend):
    """Wrong row_data on cases of 2 rows or more, a wrong row_amax (only) on a 1-row case: two different failures."""

    name = "test-runner-drifts"

    def run(self, op, case):
        out = {k: np.array(v, copy=True) for k, v in reference(case).items()}
        if case.arrays["x"].shape[0] >= 2:
            out["row_data"].reshape(-1)[0] ^= 0x01
        else:
            out["row_amax"].view(np.uint32)[0] ^= 1
        return out


class _LastRow(_RowBackend):
    """Wrong low nibble of the first byte of the last row of row_data, whatever the case."""

    name = "test-runner-lastrow"

    def run(self, op, case):
        out = {k: np.array(v, copy=True) for k, v in reference(case).items()}
        out["row_data"][-1, 0] ^= 0x01
        return out


class _FailsOnce(_RowBackend):
    """Wrong row_data on its first call only (a flaky kernel): the shrinker and the re-check then see it pass."""

    name = "test-runner-failsonce"

    def __init__(self):
        self.calls = 0

    def run(self, op, case):
        self.calls += 1
        out = {k: np.array(v, copy=True) for k, v in reference(case).items()}
        if self.calls == 1:
            out["row_data"].reshape(-1)[0] ^= 0x01
        return out


for _cls in (_Drifts, _LastRow, _FailsOnce):
    register_backend(_cls.name, _cls)


def _cfg(tmp_path, backend):
    return RunConfig(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1,
                     shrink_time=20.0, backends=[backend], ops=["quantize"], max_cases=1)


def test_the_runner_shrinks_to_the_same_failing_buffers_only(tmp_path):
    """shrink.py: a smaller case is kept only when it fails with the same mismatching buffers. Every case of >= 2
    rows fails in row_data, a 1-row case only in row_amax: the shrunk case keeps >= 2 rows and reports row_data."""
    code, stats = run(_cfg(tmp_path, _Drifts.name))
    assert code == 1
    (f,) = stats.failures
    assert [m["buffer"] for m in f["mismatches"]] == ["row_data"]
    small, *_ = load_case(f["npz"])
    assert small.arrays["x"].shape[0] >= 2


def test_the_failure_record_locates_the_shrunk_cases_mismatch(tmp_path):
    """The failure record describes the saved (shrunk) case that its replay command runs: the wrong byte is in that
    case's last row."""
    code, stats = run(_cfg(tmp_path, _LastRow.name))
    assert code == 1
    (f,) = stats.failures
    small, *_ = load_case(f["npz"])
    assert tuple(f["shrunk_size"]) < tuple(f["original_size"])
    assert f["mismatches"][0]["where"]["row"] == small.arrays["x"].shape[0] - 1


def test_a_failure_that_does_not_reproduce_keeps_its_mismatch(tmp_path):
    """A case that mismatched once and passes on the re-check is still reported as the mismatch it was (a failure
    record never says "pass"); exit code 1 (docs: any mismatch)."""
    code, stats = run(_cfg(tmp_path, _FailsOnce.name))
    assert code == 1
    (f,) = stats.failures
    assert f["status"] == "mismatch" and [m["buffer"] for m in f["mismatches"]] == ["row_data"]


class _Correct(_RowBackend):
    name = "test-runner-correct"

    def run(self, op, case):
        return reference(case)


register_backend(_Correct.name, _Correct)


def test_exit_code_0_for_a_run_of_exactly_one_passing_case(tmp_path):
    """docs/conformance.md: exit 0 when at least one case ran and nothing mismatched or raised."""
    code, stats = run(_cfg(tmp_path, _Correct.name))
    assert (code, stats.cases, stats.bad) == (0, 1, 0)


def test_a_missing_buffer_is_described_as_missing():
    """backends.Backend.expected_outputs: a buffer expected but not returned is a mismatch that says so."""
    from conformance.generators import generate

    c = generate("quantize", 0, 0, "quantize", {"planes": ["row"], "rule": ["te"], "rounding": ["rn"]})
    status, ms, *_ = check_case(_ReturnsNothing(), c)
    assert status == "mismatch" and ms
    assert all(m.count == -1 and "missing from test-returns-nothing's outputs" in str(m) for m in ms)


def test_the_first_three_failures_of_a_backend_and_op_are_printed(tmp_path):
    """docs/conformance.md: the first three failures of each (backend, op) are printed on stderr as they happen.
    Five cases, each mismatching: three MISMATCH lines."""
    import io

    err = io.StringIO()
    cfg = _cfg(tmp_path, _LastRow.name)
    cfg.max_cases = 5
    code, stats = run(cfg, stdout=io.StringIO(), stderr=err)
    assert code == 1 and stats.mismatched == 5
    assert err.getvalue().count("MISMATCH quantize [test-runner-lastrow]") == 3


def test_every_failure_record_says_how_to_draw_its_case_again(tmp_path):
    """Past the three cases a worker shrinks and saves per failing buffer set, a failure record is not saved; it still
    holds the command that draws the case again (``case OP --seed --index --backend --save``), and that command's
    case is the failing one."""
    import io
    import json
    import shlex

    from conformance.cli import main

    cfg = _cfg(tmp_path, _LastRow.name)
    cfg.max_cases, cfg.shrink_time = 6, 0.1
    code, stats = run(cfg, stdout=io.StringIO(), stderr=io.StringIO())
    assert code == 1 and stats.mismatched == 6
    records = [json.loads(line) for line in (tmp_path / "art" / "failures.jsonl").read_text().splitlines()]
    unsaved = [r for r in records if "npz" not in r]
    assert len(unsaved) == 3 and all(r["replay"].startswith("python -m conformance case quantize --seed 0 --index ")
                                     for r in unsaved), unsaved
    first = shlex.split(unsaved[0]["replay"].split(";")[0])[3:]  # (after "python -m conformance")
    save = tmp_path / "again.npz"
    first[first.index("--save") + 1] = str(save)
    assert main(first) == 0 and save.exists()
    assert main(["replay", str(save)]) == 1  # the backend still mismatches on it


class _ReturnsNoY(Backend):
    name = "test-runner-no-y"
    ops = ("rht", "gemm", "gemm_exact", "dequantize")

    def run(self, op, case):
        return {}


def test_a_missing_y_of_a_bound_or_rht_op_is_a_missing_buffer():
    """An op compared in bound mode (GEMMs, SPEC 12.4), in rht mode, or in bytes mode with its y normalized (the exact
    GEMM's zero signs, dequantize's NaNs) whose backend returns no y is a mismatch that names the missing buffer, not
    an error of the backend."""
    from conformance.generators import generate
    from conformance.ops import OPS

    for op in ("rht", "gemm", "gemm_exact", "dequantize"):
        c = generate(op, 0, 0, OPS[op].generator)
        status, ms, *_ = check_case(_ReturnsNoY(), c)
        assert status == "mismatch" and [(m.buffer, m.count) for m in ms] == [("y", -1)], op
        assert "y: missing from test-runner-no-y's outputs" in str(ms[0])

