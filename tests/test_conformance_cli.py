"""The conformance command line as a newcomer meets it: replay of unreadable files, the budget and its start-up, runs
that execute no case, the progress line, pipes to ``head``, the summary table, mismatch texts that name both sides,
the report's run identity, ``--shard auto`` and ``merge``."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import quantize_case

from conformance import backends as B
from conformance.backends import Backend, register_backend
from conformance.cases import Case, CaseFileError, case_size, load_case, save_case
from conformance.cli import main, merge, replay, shard_from_env
from conformance.generators import generate
from conformance.ops import OPS, reference
from conformance.report import Progress, Stats, compress_indices, expand_indices
from conformance.runner import RunConfig, check_case, run
from oracle.rht import DEFAULT_RHT_SIGNS

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
PY = [sys.executable, "-m", "conformance"]


def _cfg(tmp_path, **kw) -> RunConfig:
    base = dict(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1, shrink_time=5.0)
    base.update(kw)
    return RunConfig(**base)


def _cli(args, timeout=120, **kw):
    return subprocess.run(PY + args, cwd=kw.pop("cwd", ROOT), env=kw.pop("env", ENV), capture_output=True, text=True,
                          timeout=timeout, **kw)


class SlowSetUp(Backend):
    """Seconds of one-time set-up (a GPU context, extension builds) before a correct e2m1."""

    name = "test-cli-slowsetup"
    ops = ("e2m1",)
    warmup_s = 2.5

    def warmup(self, ops):
        time.sleep(self.warmup_s)

    def run(self, op, case):
        return reference(case)


register_backend(SlowSetUp.name, SlowSetUp)


# ---------------------------------------------------------------------------------------------------------------
# 1. replay never crashes
# ---------------------------------------------------------------------------------------------------------------

def _e2m1_case():
    return generate("e2m1", 0, 1, OPS["e2m1"].generator, dict(OPS["e2m1"].space))


def _good_case(path: Path) -> Path:
    return save_case(path, _e2m1_case(), backend="mldtypes", extra=dict(backend_spec="mldtypes"))


def _unreadable(kind: str, tmp: Path) -> Path:
    p = tmp / f"{kind}.npz"
    if kind == "truncated":
        data = _good_case(tmp / "good.npz").read_bytes()
        p.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "npy":
        p = tmp / "array.npy"
        np.save(p, np.arange(5))
    elif kind == "random":
        p.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif kind == "missing":
        pass
    elif kind == "directory":
        p.mkdir()
    elif kind == "no_fields":
        np.savez(p, a=np.arange(3))
    elif kind == "bad_meta":
        np.savez(p, meta=np.array("{not json"), options=np.array("{}"))
    elif kind == "damaged_member":  # a zip whose member's bytes were overwritten: CRC / inflate error
        _good_case(p)
        data = bytearray(p.read_bytes())
        with zipfile.ZipFile(p) as z:
            info = z.infolist()[0]
        h = info.header_offset
        start = h + 30 + int.from_bytes(data[h + 26 : h + 28], "little") + int.from_bytes(data[h + 28 : h + 30], "little")
        data[start : start + info.compress_size] = b"\xff" * info.compress_size
        p.write_bytes(bytes(data))
    return p


UNREADABLE = {  # kind -> what the message says
    "truncated": "truncated or damaged .npz",
    "empty": "empty file",
    "npy": ".npy array",
    "random": "not an .npz archive",
    "missing": "no such file",
    "directory": "a directory",
    "no_fields": "without the case entries",
    "bad_meta": "not JSON",
    "damaged_member": "damaged",
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE))
def test_load_case_names_what_is_wrong(kind, tmp_path):
    p = _unreadable(kind, tmp_path)
    with pytest.raises(CaseFileError) as e:
        load_case(p)
    assert UNREADABLE[kind] in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kind", sorted(UNREADABLE))
def test_replay_of_an_unreadable_file_is_one_line_and_exit_2(kind, tmp_path):
    p = _unreadable(kind, tmp_path)
    r = _cli(["replay", str(p)])
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr  # no traceback
    assert lines[0].startswith(f"error: cannot replay {p}: ") and UNREADABLE[kind] in lines[0]


def test_replay_of_a_good_case_still_runs(tmp_path, capsys):
    p = _good_case(tmp_path / "good.npz")
    assert main(["replay", str(p)]) == 0
    assert "PASS" in capsys.readouterr().out


def test_replay_of_a_case_without_its_input_cannot_run(tmp_path, capsys):
    """A saved case missing an input array (an edited or foreign file) is a case that cannot run: exit 2 with the
    oracle's reason, not exit 1 ("still fails"), which would blame the backend."""
    case = generate("e2m1", 0, 1, OPS["e2m1"].generator, dict(OPS["e2m1"].space))
    no_input = Case(case.op, case.seed, case.index, {}, dict(case.options), dict(case.tags))
    p = save_case(tmp_path / "no_input.npz", no_input, backend="mldtypes",
                  extra=dict(backend_spec="mldtypes"))
    assert main(["replay", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot replay {p}: reference raised KeyError"), err


@pytest.mark.torch
def test_replay_on_a_backend_whose_space_lacks_the_case_is_refused(tmp_path, capsys):
    """A te / 4over6 case replayed with ``--backend torchao`` (whose quantize space is the torchao rules without
    4over6) is refused with exit 2 naming the options, rather than run as torchao's own rule and reported as a
    mismatch."""
    case = generate("quantize", 0, 0, OPS["quantize"].generator, dict(OPS["quantize"].space))
    case = case.replace(options={"rule": "te", "four_over_six": "mse", "rounding": "rn", "rht": False,
                                 "block": [1, 16]})
    p = save_case(tmp_path / "te.npz", case, backend="oracle", extra=dict(backend_spec="oracle"))
    assert main(["replay", str(p), "--backend", "torchao"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "options rule='te', four_over_six='mse'" in err[0] and "torchao's space" in err[0], err


def test_a_space_check_reads_tuples_kinds_and_defaults():
    """A backend space given as tuples restricts as lists do; rht_signs compares as its kind (the space lists
    "default" / "random", the case holds the mask); an option the case does not record counts as its default."""
    from conformance.cli import _outside_space

    class Narrow(Backend):
        name, ops = "narrow", ("quantize",)

        def __init__(self, space):
            self._space = space

        def space(self, op):
            return self._space

    case = generate("quantize", 0, 0, OPS["quantize"].generator, dict(OPS["quantize"].space))
    case = case.replace(options={"rule": "te", "rht_signs": DEFAULT_RHT_SIGNS})
    case.options.pop("four_over_six", None)
    assert _outside_space(case, Narrow({"rule": ("torchao",)})) == "options rule='te'"
    assert _outside_space(case, Narrow({"rht_signs": ["default"]})) == ""
    assert _outside_space(case, Narrow({"rht_signs": ["random"]})) == f"options rht_signs={DEFAULT_RHT_SIGNS}"
    assert _outside_space(case, Narrow({"four_over_six": ["mae"]})) == "options four_over_six=None"


# ---------------------------------------------------------------------------------------------------------------
# 2. run: budget, runs without cases, usage errors, progress, pipes
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_the_budget_counts_from_the_first_case(tmp_path, workers, capsys):
    budget = 1.5  # shorter than the set-up: a budget that counted from the start would run no case
    code, stats = run(_cfg(tmp_path, backends=[SlowSetUp.name], budget=budget, workers=workers))
    assert code == 0 and stats.cases > 10, stats.no_case_reason
    assert stats.startup_s >= SlowSetUp.warmup_s
    assert stats.tasks[(SlowSetUp.name, "e2m1")].seconds < budget * workers
    total = capsys.readouterr().out.splitlines()[-1]
    assert total.startswith("total: ") and "s start-up" in total


def test_a_run_without_cases_says_why(tmp_path, capsys):
    code, stats = run(_cfg(tmp_path, backends=["mldtypes"], ops=["quantize"], max_cases=2))
    err = capsys.readouterr().err
    assert code == 2 and stats.cases == 0
    assert "no case ran: no selected backend can run the ops asked for (--ops quantize)" in err
    assert "mldtypes implements none of the ops asked for" in err
    code, stats = run(_cfg(tmp_path, backends=["mldtypes"], ops=["e2m1"], max_cases=2, shard=(3, 4)))
    assert code == 2 and "the case cap --cases 2 leaves shard 3/4 no case" in capsys.readouterr().err
    r = _cli(["run", "--backend", "mldtypes", "--backend", "composed", "--ops", "gemm", "--budget", "5s",
              "--no-progress", "--artifacts", str(tmp_path / "a")])
    assert r.returncode == 2
    assert "no case ran: " in r.stderr and "composed implements none" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("budget", ["0", "0s", "0.0m", "-5", "-1s", "soon", "5 minutes", ""])
def test_a_budget_of_zero_negative_or_garbage_is_a_usage_error(budget, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", f"--budget={budget}", "--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and f"bad budget {budget!r}" in err
    with pytest.raises(SystemExit) as e:  # (argparse reads "-1s" after a space as an option: a usage error too)
        main(["run", "--budget", budget, "--no-progress"])
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err


def test_the_progress_line_shows_time_budget_op_cases_and_mismatches(tmp_path):
    err = io.StringIO()
    code, stats = run(_cfg(tmp_path, backends=["test-cli-flip-e2m1"], ops=["e2m1"], budget=1.0, progress=True),
                      stdout=io.StringIO(), stderr=err)
    line = [ln for ln in err.getvalue().splitlines() if ln.startswith("[")][-1]
    n = stats.cases
    assert code == 1
    assert line.startswith("[") and " / 1s] e2m1: " in line and f"{n} cases" in line
    assert f"{stats.mismatched} mismatches" in line and stats.mismatched > 0
    # capped runs show the cap; before the first case the line says it is starting
    st = Stats()
    p = Progress(st, stream=io.StringIO(), max_cases=20)
    assert p.line().startswith("[start-up ")
    err = io.StringIO()
    run(_cfg(tmp_path, backends=["mldtypes"], ops=["e4m3"], max_cases=4, progress=True), stdout=io.StringIO(),
        stderr=err)
    assert "/ --cases 4] e4m3: 4 cases" in err.getvalue() and "0 mismatches" in err.getvalue()


class FlipE2M1(Backend):
    """Planted bug: every e2m1 code off by one (a backend that mismatches on every case)."""

    name = "test-cli-flip-e2m1"
    ops = ("e2m1",)

    def run(self, op, case):
        out = reference(case)
        return {k: v ^ np.uint8(1) for k, v in out.items()}


register_backend(FlipE2M1.name, FlipE2M1)


class FlipOddE2M1(FlipE2M1):
    """Planted bug on odd case indices only: of two shards (index mod 2), shard 1 mismatches and shard 0 passes."""

    name = "test-cli-flip-odd-e2m1"

    def run(self, op, case):
        return reference(case) if case.index % 2 == 0 else super().run(op, case)


register_backend(FlipOddE2M1.name, FlipOddE2M1)


def _reports(tmp_path: Path, seed=0, cases=6, shards=2, backend="mldtypes", ops="e2m1") -> list[Path]:
    paths = []
    for i in range(shards):
        p = tmp_path / f"s{seed}-{i}.json"
        code, _ = run(_cfg(tmp_path, backends=[backend], ops=[ops], max_cases=cases, seed=seed, shard=(i, shards),
                           report=str(p)), stdout=io.StringIO(), stderr=io.StringIO())
        paths.append(p)
    return paths


def _closed_pipe(args, tmp_path) -> subprocess.CompletedProcess:
    """Run with stdout a pipe whose reader is already gone (as ``| head`` once it has its lines)."""
    p = subprocess.Popen(PY + args, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    return subprocess.CompletedProcess(args, p.returncode, "", err)


@pytest.mark.parametrize("cmd", ["run", "run-detail", "case", "replay", "merge"])
def test_a_closed_pipe_ends_every_subcommand_quietly_with_141(cmd, tmp_path):
    args = {
        "run": ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "5", "--no-progress", "--report", "r.json"],
        "run-detail": ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "5", "--detail"],
        "case": ["case", "grouped_gemm", "--index", "3"],
        "replay": ["replay", str(_good_case(tmp_path / "c.npz"))],
        "merge": ["merge", *map(str, _reports(tmp_path))] if cmd == "merge" else [],
    }[cmd]
    r = _closed_pipe(args, tmp_path)
    assert r.returncode == 141, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr and "Exception ignored" not in r.stderr
    if cmd == "run":  # the report is written before the table
        assert json.loads((tmp_path / "r.json").read_text())["totals"]["cases"] == 5


@pytest.mark.skipif(shutil.which("head") is None or shutil.which("bash") is None, reason="needs bash and head")
def test_piping_to_head_prints_the_first_lines(tmp_path):
    cmd = (f"{sys.executable} -m conformance run --backend mldtypes --ops e2m1,e4m3,bf16 --cases 50 --detail "
           f"--no-progress --artifacts {tmp_path}/a | head -3; echo \"status ${{PIPESTATUS[0]}}\"")
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("backend ") and len(lines) == 4, r.stdout
    assert lines[-1] in ("status 141", "status 0")  # 0 only if the table fit the pipe before head left
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr


# ---------------------------------------------------------------------------------------------------------------
# 3. the table and mismatch texts
# ---------------------------------------------------------------------------------------------------------------

def test_the_default_table_has_one_row_per_backend_and_op(tmp_path):
    out = io.StringIO()
    code, stats = run(_cfg(tmp_path, backends=["mldtypes", "composed"], ops=["e2m1", "e4m3", "layout"],
                           max_cases=20), stdout=out)
    lines = out.getvalue().splitlines()
    assert code == 0
    assert lines[0].split() == ["backend", "op", "cases", "pass", "mismatch", "error", "cases/s"]
    rows = lines[2:-2]
    assert [r.split()[:5] for r in rows] == [["composed", "layout", "20", "20", "0"], ["mldtypes", "e2m1", "20", "20", "0"],
                                             ["mldtypes", "e4m3", "20", "20", "0"]]
    assert set(lines[-2]) == {"-"} and lines[-1].startswith("total: 60 cases, 60 passed, 0 mismatched, 0 errors")
    out = io.StringIO()
    run(_cfg(tmp_path, backends=["mldtypes"], ops=["e2m1"], max_cases=20, detail=True), stdout=out)
    detail = out.getvalue()
    assert "option" in detail.splitlines()[0] and "(all)" in detail and "values=" in detail


def test_a_mismatch_names_both_sides_by_backend(tmp_path, monkeypatch):
    """A planted oracle bug reads as the oracle's value against ml_dtypes', not as "got" (ml_dtypes) being wrong."""
    import conformance.runner as R

    real = R.reference

    def wrong_oracle(case):
        out = real(case)
        return {k: v ^ np.uint8(1) for k, v in out.items()} if case.op == "e2m1" else out

    monkeypatch.setattr(R, "reference", wrong_oracle)
    case = generate("e2m1", 0, 0, OPS["e2m1"].generator, dict(OPS["e2m1"].space))
    status, ms, *_ = check_case(B.make_backend("mldtypes"), case)
    assert status == "mismatch"
    text = str(ms[0])
    assert "oracle=0x" in text and "  mldtypes=0x" in text and "ref " not in text and "got " not in text
    assert ms[0].to_dict()["ref_name"] == "oracle" and ms[0].to_dict()["got_name"] == "mldtypes"
    err = io.StringIO()
    code, stats = run(_cfg(tmp_path, backends=["mldtypes"], ops=["e2m1"], max_cases=2), stdout=io.StringIO(),
                      stderr=err)
    assert code == 1 and "oracle=0x" in stats.failures[0]["mismatch_text"][0]
    assert "mldtypes=0x" in err.getvalue()


# ---------------------------------------------------------------------------------------------------------------
# 4. the report identifies the run
# ---------------------------------------------------------------------------------------------------------------

def _installed(dist: str):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_report_identifies_the_run(tmp_path):
    rep = tmp_path / "r.json"
    r = _cli(["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "30", "--seed", "4", "--shard", "1/3",
              "--report", str(rep), "--no-progress", "--artifacts", str(tmp_path / "a")])
    assert r.returncode == 0, r.stderr
    doc = json.loads(rep.read_text())
    run_ = doc["run"]
    assert run_["seed"] == 4 and run_["shard"] == [1, 3] and run_["max_cases"] == 30
    assert "-m conformance run --backend mldtypes" in run_["command"] and "--shard 1/3" in run_["command"]
    assert run_["argv"][:2] == ["run", "--backend"]
    v = run_["versions"]
    assert v["python"] == platform.python_version() and v["numpy"] == np.__version__
    assert v["ml_dtypes"] == _installed("ml_dtypes")
    for dist in ("torch", "torchao", "mmasim"):
        assert v[dist] == _installed(dist), dist  # null when absent
    assert v["cuda_runtime"] is None and v["cuda_driver"] is None and v["gpus"] is None  # no GPU used
    proj = run_["project"]
    if (ROOT / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        assert proj["git_commit"] == head and isinstance(proj["git_dirty"], bool)
    assert proj["package_version"] == _installed("nvfp4-oracle")
    assert doc["startup_s"] > 0 and doc["elapsed_s"] >= doc["startup_s"]
    (op,) = doc["ops"]
    assert op["indices"] == dict(count=10, step=3, ranges=[[1, 28]])  # shard 1/3 of the indices 0..29


def test_indices_are_ranges():
    assert compress_indices([]) == dict(count=0, step=1, ranges=[])
    assert compress_indices([5]) == dict(count=1, step=1, ranges=[[5, 5]])
    assert compress_indices([0, 1, 2, 3, 7, 8, 9]) == dict(count=7, step=1, ranges=[[0, 3], [7, 9]])
    assert compress_indices([2, 10, 6, 14, 30]) == dict(count=5, step=4, ranges=[[2, 14], [30, 30]])
    # two workers, the second one ran more cases: the odd tail is one strided range
    tail = list(range(208)) + list(range(209, 258, 2))
    assert compress_indices(tail) == dict(count=233, step=1, ranges=[[0, 207], [209, 257, 2]])
    assert compress_indices([1, 2, 3, 10, 20]) == dict(count=5, step=1, ranges=[[1, 3], [10, 10], [20, 20]])
    rng = np.random.default_rng(0)
    for _ in range(500):
        idx = sorted(set(rng.integers(0, 300, rng.integers(1, 80)).tolist()))
        assert expand_indices(compress_indices(idx)) == idx
    assert expand_indices([3, 1]) == [3, 1]  # a version 1 report's list


def test_a_version_1_report_reads_back(tmp_path):
    doc = dict(version=1, config=dict(seed=0, shard=[0, 1], max_cases=3), elapsed_s=1.0, exit_code=0,
               totals=dict(cases=3), skipped=[], failures=[],
               ops=[dict(backend="mldtypes", op="e2m1", cases=3, passed=3, mismatched=0, errors=0, seconds=0.1,
                         options={"values": {"ties": dict(cases=3, bad=0)}}, extra={}, indices=[0, 1, 2])])
    st = Stats.from_report(doc)
    assert st.tasks[("mldtypes", "e2m1")].indices == [0, 1, 2] and "values=ties" in st.table(detail=True)


# ---------------------------------------------------------------------------------------------------------------
# 6. shards: --shard auto, merge, torchrun
# ---------------------------------------------------------------------------------------------------------------

def test_shard_auto_reads_torchrun_and_slurm():
    assert shard_from_env(dict(RANK="3", WORLD_SIZE="8", SLURM_PROCID="0", SLURM_NTASKS="1")) == (3, 8)
    assert shard_from_env(dict(SLURM_PROCID="2", SLURM_NTASKS="4")) == (2, 4)
    assert shard_from_env(dict(SLURM_ARRAY_TASK_ID="5", SLURM_ARRAY_TASK_COUNT="4", SLURM_ARRAY_TASK_MIN="3",
                               SLURM_PROCID="0", SLURM_NTASKS="1")) == (2, 4)
    assert shard_from_env(dict(SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_TASK_COUNT="8")) == (2, 8)


@pytest.mark.parametrize("env", [{}, dict(RANK="2", WORLD_SIZE="2"), dict(RANK="x", WORLD_SIZE="2"),
                                 dict(SLURM_ARRAY_TASK_ID="9", SLURM_ARRAY_TASK_COUNT="4")])
def test_shard_auto_without_a_launcher_is_a_usage_error(env, monkeypatch, capsys):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
              "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        main(["run", "--shard", "auto", "--cases", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "--shard auto" in err
    if not env:
        for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
            assert var in err


def test_shard_auto_gives_each_shard_its_own_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code = main(["run", "--shard", "auto", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "6", "--no-progress",
                 "--report", str(tmp_path / "r.json"), "--artifacts", str(tmp_path / "a")])
    assert code == 0
    assert "total: 3 cases, 3 passed, 0 mismatched, 0 errors, 0 skipped ops, shard 1/2, " in capsys.readouterr().out
    doc = json.loads((tmp_path / "r-1of2.json").read_text())
    assert doc["config"]["shard"] == [1, 2] and doc["ops"][0]["indices"]["ranges"] == [[1, 5]]
    code = main(["run", "--shard", "auto", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "6", "--no-progress",
                 "--report", str(tmp_path / "t-{shard}-of-{nshards}.json"), "--artifacts", str(tmp_path / "a")])
    assert code == 0 and (tmp_path / "t-1-of-2.json").exists()


def test_merge_gives_one_table_and_exit_code(tmp_path, capsys):
    paths = _reports(tmp_path, cases=9, shards=3)
    full = tmp_path / "full.json"
    run(_cfg(tmp_path, backends=["mldtypes"], ops=["e2m1"], max_cases=9, report=str(full)), stdout=io.StringIO())
    capsys.readouterr()
    out = tmp_path / "merged.json"
    assert main(["merge", *map(str, paths), "--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[2].split()[:5] == ["mldtypes", "e2m1", "9", "9", "0"]
    assert "total: 9 cases, 9 passed, 0 mismatched, 0 errors, 0 skipped ops, 3 shards" in text
    doc, ref = json.loads(out.read_text()), json.loads(full.read_text())
    assert doc["ops"][0]["indices"] == ref["ops"][0]["indices"] == dict(count=9, step=1, ranges=[[0, 8]])
    assert doc["ops"][0]["options"] == ref["ops"][0]["options"]
    assert doc["exit_code"] == 0 and doc["config"]["shard"] == [0, 1] and len(doc["merged_from"]) == 3
    # the merged report merges again with nothing else (it is the whole run, shard 0/1)
    assert main(["merge", str(out)]) == 0
    capsys.readouterr()
    assert main(["merge", *map(str, paths), "--detail"]) == 0
    assert "values=" in capsys.readouterr().out


def test_merge_refuses_what_is_not_one_run(tmp_path, capsys):
    a = _reports(tmp_path, seed=0, cases=4)
    b = _reports(tmp_path, seed=1, cases=4)
    assert merge([str(a[0]), str(b[1])]) == 2
    err = capsys.readouterr().err
    assert "cannot merge reports of different seeds: seed=0: " in err and "seed=1: " in err
    (tmp_path / "c").mkdir()
    c = _reports(tmp_path / "c", seed=0, cases=5)
    assert merge([str(a[0]), str(c[1])]) == 2
    assert "different case caps" in capsys.readouterr().err
    assert merge([str(a[0]), str(a[0])]) == 2
    assert "shard 0/2 appears twice" in capsys.readouterr().err
    assert merge([str(a[0])]) == 2  # shard 1/2 missing: a table, and exit 2
    cap = capsys.readouterr()
    assert "mldtypes" in cap.out and "incomplete: no report for shard 1/2" in cap.err
    (tmp_path / "junk.json").write_text("{")
    assert merge([str(tmp_path / "junk.json")]) == 2 and "not JSON" in capsys.readouterr().err
    assert merge([str(tmp_path / "none.json")]) == 2 and "no such file" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", np.arange(4.0))  # a binary file given as a report
    assert merge([str(tmp_path / "x.npy")]) == 2 and "not a JSON report" in capsys.readouterr().err


def test_merge_refuses_to_write_over_a_shard_and_reports_it_cannot_read(tmp_path, capsys):
    a = _reports(tmp_path, seed=0, cases=4)
    before = a[0].read_text()
    assert merge([str(a[0]), str(a[1])], report=str(a[0])) == 2
    assert "is one of the reports to merge" in capsys.readouterr().err and a[0].read_text() == before
    assert merge([str(a[0]), str(a[1])], report="") == 2 and "an empty path" in capsys.readouterr().err
    for name, change in (("no_op", lambda d: d["ops"][0].pop("op")),  # (a field a table row needs)
                         ("text_seconds", lambda d: d.update(elapsed_s="x")),
                         ("version", lambda d: d.update(version=99))):
        doc = json.loads(a[1].read_text())
        change(doc)
        bad = tmp_path / f"{name}.json"
        bad.write_text(json.dumps(doc))
        assert merge([str(a[0]), str(bad)]) == 2, name
        assert ("report version 99" if name == "version" else "a malformed report") in capsys.readouterr().err


def test_run_refuses_empty_and_clashing_output_paths_before_any_case(tmp_path):
    base = ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "2", "--no-progress"]
    for extra, words in ((["--artifacts", ""], "an empty path"),
                         (["--report", "", "--artifacts", "art"], "an empty path"),
                         (["--report", "out", "--artifacts", "out"], "out is the --artifacts folder")):
        r = _cli(base + extra, cwd=tmp_path)
        assert r.returncode == 2 and words in r.stderr, extra
        assert sorted(os.listdir(tmp_path)) == [], extra  # nothing written, no case run
    r = _cli(["case", "e2m1", "--save", ""], cwd=tmp_path)
    assert r.returncode == 2 and "cannot save the case: an empty path" in r.stderr
    r = _cli(["case", "quantize", "--backend", "mldtypes"], cwd=tmp_path)  # (its options would mean nothing)
    assert r.returncode == 2 and "backend mldtypes does not implement op 'quantize'" in r.stderr


def test_a_device_backend_names_a_cuda_device(tmp_path):
    r = _cli(["case", "e2m1", "--backend", "device:tpu"])
    assert r.returncode == 2 and "unknown device in backend 'device:tpu'" in r.stderr


@pytest.mark.parametrize("spec", ["os:path", "oracle:quantize"])
def test_a_plugin_that_cannot_be_built_is_a_usage_error(tmp_path, spec):
    """A module:attr that is not a class or factory (a module, a function with required arguments)."""
    for args in (["run", "--backend", spec, "--ops", "e2m1", "--cases", "1", "--no-progress", "--artifacts",
                  str(tmp_path / "a")], ["case", "e2m1", "--backend", spec]):
        r = _cli(args)
        assert r.returncode == 2 and f"cannot build backend {spec!r}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_merge_fails_when_a_shard_mismatched(tmp_path, capsys):
    reports = _reports(tmp_path, cases=4, backend=FlipOddE2M1.name)
    assert [json.loads(p.read_text())["exit_code"] for p in reports] == [0, 1]  # only shard 1 mismatched
    assert merge([str(p) for p in reports]) == 1
    assert "FAILED e2m1 [test-cli-flip-odd-e2m1]" in capsys.readouterr().out


def test_merge_refuses_shards_of_other_backends_or_ops(tmp_path, capsys):
    """Shards that ran different backends or ops do not partition one campaign's cases (the merge used to add them
    up and exit 0, each op holding half its cases)."""
    a = _reports(tmp_path / "a", cases=4, ops="bf16")
    b = _reports(tmp_path / "b", cases=4, backend="torch", ops="bf16")
    c = _reports(tmp_path / "c", cases=4, ops="e4m3")
    assert merge([str(a[0]), str(b[1])]) == 2
    assert "different backends" in capsys.readouterr().err
    assert merge([str(a[0]), str(c[1])]) == 2
    assert "different op lists" in capsys.readouterr().err
    assert merge([str(a[0]), str(a[1])]) == 0


def test_unwritable_outputs_are_refused_before_the_run(tmp_path, capsys):
    """A --report that is a folder, --artifacts that is a file, a merge --report or a case --save into a folder:
    exit 2 with one line before any case runs (they used to raise a traceback, --report after the whole budget)."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    base = ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "2", "--no-progress"]
    assert main(base + ["--report", str(tmp_path / "folder"), "--artifacts", str(tmp_path / "art")]) == 2
    assert "cannot write the report" in capsys.readouterr().err
    assert main(base + ["--artifacts", str(tmp_path / "file")]) == 2
    assert "cannot write failing cases" in capsys.readouterr().err
    assert main(base + ["--artifacts", str(tmp_path / "file" / "sub")]) == 2
    capsys.readouterr()
    reports = _reports(tmp_path, cases=2)
    assert merge([str(p) for p in reports], report=str(tmp_path / "folder")) == 2
    assert "cannot write the merged report" in capsys.readouterr().err
    assert main(["case", "e2m1", "--save", str(tmp_path / "folder")]) == 2
    assert "cannot save the case" in capsys.readouterr().err
    assert main(base + ["--report", str(tmp_path / "new" / "r.json"), "--artifacts", str(tmp_path / "art")]) == 0


def test_a_folder_that_refuses_files_is_refused_whoever_runs(tmp_path, capsys, monkeypatch):
    """The check writes a file instead of reading permission bits, which pass root everywhere (/proc x was accepted
    and the first failure raised FileNotFoundError mid-run): a folder whose file creation fails is refused."""
    import tempfile

    from conformance.cli import _unwritable

    real = tempfile.TemporaryFile

    def refusing(*a, dir=None, **kw):
        if dir is not None and str(dir).startswith(str(tmp_path / "ro")):
            raise PermissionError(13, "Permission denied")
        return real(*a, dir=dir, **kw)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(tempfile, "TemporaryFile", refusing)
    assert _unwritable(str(tmp_path / "ro" / "art"), folder=True) == \
        f"{tmp_path / 'ro' / 'art'}: {tmp_path / 'ro'} is not writable (Permission denied)"
    assert _unwritable(str(tmp_path / "ok" / "art"), folder=True) is None
    assert not (tmp_path / "ok").exists() and list((tmp_path).iterdir()) == [tmp_path / "ro"]  # nothing stays
    base = ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "2", "--no-progress"]
    assert main(base + ["--artifacts", str(tmp_path / "ro" / "art")]) == 2
    assert "cannot write failing cases" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--case-timeout", "-1"), ("--case-timeout", "0"), ("--case-timeout", "nan"),
                                         ("--shrink-time", "-1"), ("--shrink-time", "inf")])
def test_time_options_are_finite_and_positive(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--backend", "mldtypes", "--cases", "1", flag, value])
    assert e.value.code == 2 and "seconds" in capsys.readouterr().err


def test_device_all_without_a_gpu_runs_no_case(tmp_path, monkeypatch):
    """--device all never falls back to the CPU backends (a GPU campaign on machines without a usable GPU used to
    exit 0 on the CPU self-conformance); it reports the missing GPU as --device cuda:0 does."""
    monkeypatch.setattr(B, "cuda_devices", lambda: [])
    code, stats = run(_cfg(tmp_path, device="all", max_cases=1), stdout=io.StringIO(), stderr=io.StringIO())
    assert code == 2 and "device:cuda:0" in stats.no_case_reason


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun (installed with torch) missing")
def test_torchrun_shards_merge_to_the_unsharded_run(tmp_path):
    """2 shards under ``torchrun --shard auto`` merge to the per-op counts of the unsharded run (same seed and cap)."""
    common = ["--seed", "11", "--cases", "40", "--backend", "mldtypes", "--backend", "composed", "--ops",
              "e2m1,layout", "--no-progress", "--artifacts", str(tmp_path / "art")]
    tr = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "conformance", "run", "--shard",
                         "auto", "--report", str(tmp_path / "shard.json"), *common],
                        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert tr.returncode == 0, tr.stdout + tr.stderr
    shards = sorted(tmp_path.glob("shard-*of2.json"))
    assert [p.name for p in shards] == ["shard-0of2.json", "shard-1of2.json"]
    full = _cli(["run", "--report", str(tmp_path / "full.json"), *common], cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    m = _cli(["merge", *map(str, shards), "--report", str(tmp_path / "merged.json")], cwd=tmp_path)
    assert m.returncode == 0, m.stderr
    merged = {(o["backend"], o["op"]): o for o in json.loads((tmp_path / "merged.json").read_text())["ops"]}
    unsharded = {(o["backend"], o["op"]): o for o in json.loads((tmp_path / "full.json").read_text())["ops"]}
    assert set(merged) == set(unsharded) == {("mldtypes", "e2m1"), ("composed", "layout")}
    for key, o in unsharded.items():
        assert (merged[key]["cases"], merged[key]["passed"]) == (o["cases"], o["passed"]) == (40, 40), key
        assert merged[key]["indices"] == o["indices"] and merged[key]["options"] == o["options"]
    for p in shards:
        assert json.loads(p.read_text())["ops"][0]["cases"] == 20
    assert "total: 80 cases, 80 passed" in m.stdout and "2 shards" in m.stdout


def test_merge_refuses_what_is_not_a_shard_of_one_campaign(tmp_path, capsys):
    """merge: a directory, JSON that is not a report, a report whose config names no shard, shards of different shard
    counts: exit 2 and one line naming the file and the reason."""
    a = _reports(tmp_path, cases=4)  # shards 0/2, 1/2
    (tmp_path / "d").mkdir()
    (tmp_path / "three").mkdir()
    b = _reports(tmp_path / "three", cases=4, shards=3)  # shards 0/3, 1/3, 2/3
    doc = json.loads(a[0].read_text())
    del doc["config"]["shard"]
    merged = tmp_path / "no_shard.json"
    merged.write_text(json.dumps(doc))
    (tmp_path / "empty.json").write_text("{}")
    for paths, words in (([tmp_path / "d"], "a directory, not a report"),
                         ([tmp_path / "empty.json"], "not a conformance report (no 'config' and 'ops')"),
                         ([merged], "no shard i/n in its config"),
                         ([a[0], b[1]], f"cannot merge shards of different shard counts ({a[0]}: 0/2; {b[1]}: 1/3)"),
                         # (the same index under two counts: not "shard 0/2 appears twice")
                         ([a[0], b[0]], f"cannot merge shards of different shard counts ({a[0]}: 0/2; {b[0]}: 0/3)")):
        assert merge([str(p) for p in paths]) == 2
        assert words in capsys.readouterr().err, words


@pytest.mark.parametrize("meta, words", [
    ("[]", "its 'meta' or 'options' entry is not a JSON object"),
    ("{}", "its 'meta' entry lacks ['op', 'seed', 'index']"),
    ('{"op": "e2m1", "seed": "x", "index": 0}', "cannot read it as a saved case"),
])
def test_load_case_names_a_malformed_meta(meta, words, tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, meta=np.array(meta), options=np.array("{}"))
    with pytest.raises(CaseFileError, match=re.escape(words)):
        load_case(p)


def test_usage_errors_of_shards_and_plugins(tmp_path, capsys, monkeypatch):
    """--shard outside i/n with 0 <= i < n is a usage error; a module:attr backend whose object has no run(), or whose
    ops name an op conformance does not have, is refused before any case runs (exit 2)."""
    for bad in ("3/2", "x"):
        with pytest.raises(SystemExit) as e:
            main(["run", "--shard", bad])
        assert e.value.code == 2 and f"bad shard {bad!r}" in capsys.readouterr().err
    mod = tmp_path / "weird_plugins.py"
    mod.write_text("class NoRun:\n    name = 'norun'\n\n"
                   "class Unknown:\n    name, ops = 'unknown-ops', ('quantize', 'fft')\n"
                   "    def run(self, op, case):\n        return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for attr, words in (("NoRun", "did not produce a Backend (an object with a run(op, case) method)"),
                        ("Unknown", "lists unknown ops ['fft']")):
        assert main(["run", "--backend", f"weird_plugins:{attr}", "--cases", "1", "--no-progress",
                     "--artifacts", str(tmp_path / "art")]) == 2
        assert words in capsys.readouterr().err, words


def _case(**kw) -> Case:
    base = dict(op="e2m1", seed=3, index=7, arrays={"x": np.array([1.0, 0.0, -2.0], np.float32)},
                options={"rule": "te"}, tags={"values": "normal", "dtype": "float32"})
    base.update(kw)
    return Case(**base)


def test_a_cases_key_is_op_seed_index():
    """docs: a case is identified by (op, seed, index), written op/seed/index."""
    assert _case().key() == "e2m1/3/7"


def test_replace_keeps_the_tags_and_copies_them():
    c = _case()
    r = c.replace(options={"rule": "torchao"})
    assert r.tags == {"values": "normal", "dtype": "float32"} and r.tags is not c.tags
    assert r.options == {"rule": "torchao"} and c.options == {"rule": "te"}


@pytest.mark.parametrize("options, complexity", [
    ({"rht_signs": json.loads(json.dumps(DEFAULT_RHT_SIGNS))}, 0),  # the default mask, as a saved case reads it back
    ({"rht_signs": 0x1234}, 1),
    ({"rule": "torchao", "quant_a": {"rule": "torchao"}}, 1),  # the operand's rule is the case's own: only rule counts
    ({"rule": "te", "quant_a": {"rule": "torchao"}}, 1),
    ({"quant_b": {"rule": "te", "offset": 3}}, 1),  # a nonzero counter offset alone is a non-plain part
    ({"quant_b": {"rule": "te", "rounding": "sr", "seed": 5, "offset": 1}}, 2),
    ({"global_scale_max": 448}, 0),
    ({"global_scale_max": 256}, 1),
    ({"b_block": [16, 16]}, 1),  # a single GEMM's b in 16x16 blocks is not plain
    ({"b_block": [16, 16], "kind": "fprop"}, 1),  # a grouped GEMM's weights in 16x16 blocks are (kind counts 1)
    ({"b_block": [1, 16], "kind": "fprop"}, 2),
    ({"kernel": "auto", "block": [1, 16], "rounding": "rn"}, 0),
])
def test_the_shrinkers_option_count_counts_non_plain_options(options, complexity):
    """case_size's third entry: one per option off its plain value (docs/conformance.md's shrinking: simpler options
    are fewer of them)."""
    assert case_size(_case(options=options))[2] == complexity


def test_a_saved_case_reads_back_its_identity_tags_and_extra_meta(tmp_path):
    p = save_case(tmp_path / "c.npz", _case(), backend="mine", extra=dict(backend_spec="pkg.mod:Mine"))
    back, meta, _, _ = load_case(p)
    assert (back.op, back.seed, back.index) == ("e2m1", 3, 7)
    assert back.tags == {"values": "normal", "dtype": "float32"}
    assert meta["backend"] == "mine" and meta["backend_spec"] == "pkg.mod:Mine"
    assert back.arrays["x"].tolist() == [1.0, 0.0, -2.0]


def test_ml_dtypes_outputs_are_stored_as_unsigned_bit_patterns(tmp_path):
    """docs/conformance.md: a saved case loads with plain numpy.load(allow_pickle=False), ml_dtypes arrays stored as
    their bit patterns: a float8 output is a uint8 entry (1 byte) and a bf16 input a uint16 entry, each with the
    same bytes, and load_case gives back the ml_dtypes arrays."""
    b = np.array([0x00, 0x38, 0x7E, 0xFF], np.uint8)
    x = np.array([0x3F80, 0x8000], np.uint16)
    c = _case(arrays={"x": x.view(ml_dtypes.bfloat16)})
    p = save_case(tmp_path / "c.npz", c, backend="mine", out={"bytes": b.view(ml_dtypes.float8_e4m3fn)})
    with np.load(p, allow_pickle=False) as z:
        assert z["out__bytes"].dtype == np.uint8 and z["out__bytes"].tolist() == b.tolist()
        assert z["in__x"].dtype == np.uint16 and z["in__x"].tolist() == x.tolist()
    back, _, _, out = load_case(p)
    assert out["bytes"].dtype == ml_dtypes.float8_e4m3fn and back.arrays["x"].dtype == ml_dtypes.bfloat16


def test_an_npz_without_options_names_the_missing_entry(tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, meta=np.array(json.dumps(dict(op="e2m1", seed=0, index=0))))
    with pytest.raises(CaseFileError, match=re.escape("an .npz archive without the case entries ['options']")):
        load_case(p)


def test_a_meta_without_index_is_named(tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, meta=np.array(json.dumps(dict(op="e2m1", seed=0))), options=np.array("{}"))
    with pytest.raises(CaseFileError, match=re.escape("its 'meta' entry lacks ['index']")):
        load_case(p)


def test_an_empty_zip_archive_is_an_npz_without_the_case_entries(tmp_path):
    """An empty .npz (a zip with no members starts with the end record PK\\x05\\x06) is an archive, just not a
    case: the message says which entries it lacks, not that it is no archive."""
    p = tmp_path / "c.npz"
    np.savez(p)
    assert p.read_bytes()[:4] == b"PK\x05\x06"
    with pytest.raises(CaseFileError, match=re.escape("without the case entries ['meta', 'options'] (its entries: none)")):
        load_case(p)


def test_options_that_are_not_a_json_object_are_refused(tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, meta=np.array(json.dumps(dict(op="e2m1", seed=0, index=0))), options=np.array("[1, 2]"))
    with pytest.raises(CaseFileError, match=re.escape("its 'meta' or 'options' entry is not a JSON object")):
        load_case(p)


def test_an_entry_of_python_objects_is_named_as_pickled_data(tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, meta=np.array(json.dumps(dict(op="e2m1", seed=0, index=0))), options=np.array("{}"),
             in__x=np.array([None, 1], dtype=object))
    with pytest.raises(CaseFileError, match=re.escape("an entry holds Python objects (pickled data)")):
        load_case(p)




class _FlipOneNibble(Backend):
    """quantize with the oracle's bytes, one code bit of row 0, element 0 flipped; its space allows only torchao."""

    name, ops = "test-cli-flip-nibble", ("quantize",)

    def space(self, op):
        return {"rule": ["torchao"]}

    def run(self, op, case):
        out = {k: np.array(v, copy=True) for k, v in reference(case).items()}
        out["row_data"][0, 0] ^= 0x01
        return out


class _Unavailable(Backend):
    name, ops = "test-cli-unavailable", ("e2m1",)

    def available(self):
        return "its library is missing"

    def run(self, op, case):
        return reference(case)


class _QuantizeOnly(Backend):
    name, ops = "test-cli-quantize-only", ("quantize",)

    def run(self, op, case):
        return reference(case)


for _b in (_FlipOneNibble, _Unavailable, _QuantizeOnly):
    register_backend(_b.name, _b)


def test_shard_auto_of_a_stepped_job_array_needs_an_index_on_the_step():
    """A Slurm array --array=1-5:2 (ids 1, 3, 5): id 5 is shard 2 of 3; an id off the step (4) is refused."""
    env = dict(SLURM_ARRAY_TASK_ID="5", SLURM_ARRAY_TASK_COUNT="3", SLURM_ARRAY_TASK_MIN="1", SLURM_ARRAY_TASK_STEP="2")
    assert shard_from_env(env) == (2, 3)
    with pytest.raises(argparse.ArgumentTypeError, match="not 0 <= i < n"):
        shard_from_env(dict(env, SLURM_ARRAY_TASK_ID="4"))


def test_budget_units_are_seconds_minutes_and_hours():
    """--budget: s, m and h are 1, 60 and 3600 seconds; a bare number is seconds."""
    from conformance.cli import parse_budget

    assert [parse_budget(s) for s in ("45", "45s", "0.5m", "1h", "0.25h")] == [45, 45, 30, 3600, 900]


@pytest.mark.parametrize("args, words", [
    (["run", "--shard", "2/2"], "bad shard '2/2'"),
    (["run", "--cases", "0"], "must be an integer >= 1, got 0"),
    (["run", "--cases", "abc"], "must be an integer >= 1, got 'abc'"),
    (["run", "--workers", "0"], "must be an integer >= 1, got 0"),
    (["run", "--ops", ","], "names no op"),
    (["run", "--case-timeout", "0"], "must be a finite number of seconds > 0"),
    (["run", "--shrink-time", "-1"], "must be a finite number of seconds >= 0"),
    (["case", "e2m1", "--seed", "-1"], "a seed is an integer >= 0, got -1"),
    (["case", "e2m1", "--index", "x"], "a case index is an integer >= 0, got 'x'"),
])
def test_option_values_outside_their_range_are_usage_errors(args, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_the_smallest_values_of_seeds_indices_and_shrink_time_are_accepted(capsys):
    from conformance.cli import _parser

    assert main(["case", "e2m1", "--seed", "0", "--index", "0"]) == 0
    assert "case e2m1/0/0" in capsys.readouterr().out
    args = _parser().parse_args(["run", "--shrink-time", "0", "--cases", "1", "--workers", "1", "--device", "cuda"])
    assert args.shrink_time == 0 and args.max_cases == 1 and args.workers == 1 and args.device == "cuda:0"


def test_replay_builds_the_backend_from_its_recorded_spec(tmp_path, capsys):
    """The meta's backend_spec (what make_backend takes) wins over its display name, which need not build anything."""
    p = save_case(tmp_path / "c.npz", _e2m1_case(), backend="mldtypes as shown in a table",
                  extra=dict(backend_spec="mldtypes"))
    assert main(["replay", str(p)]) == 0
    assert "PASS" in capsys.readouterr().out


def test_replay_on_the_cases_own_backend_skips_the_space_check(tmp_path, capsys):
    """A shrunk case may hold options outside its own backend's space (rule te for a torchao-only space): replayed
    with --backend naming that same backend it still runs (and reports its mismatch, exit 1)."""
    c = quantize_case(np.ones((1, 16), np.float32))
    p = save_case(tmp_path / "c.npz", c, backend=_FlipOneNibble.name, extra=dict(backend_spec=_FlipOneNibble.name))
    assert main(["replay", str(p), "--backend", _FlipOneNibble.name]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and captured.err == ""


def test_replay_prints_diagnose_reading_of_the_backends_bytes(tmp_path, capsys):
    """docs/conformance.md: one code bit flipped in a one-block case replays with the line
    "diagnose: row plane: closest te, 1 of 1 blocks differ"."""
    c = quantize_case(np.ones((1, 16), np.float32))
    p = save_case(tmp_path / "c.npz", c, backend=_FlipOneNibble.name, extra=dict(backend_spec=_FlipOneNibble.name))
    assert replay(str(p)) == 1
    out = capsys.readouterr().out
    assert "  diagnose: row plane: closest te, 1 of 1 blocks differ" in out.splitlines(), out


def test_replay_on_an_unavailable_backend_cannot_run(tmp_path, capsys):
    p = save_case(tmp_path / "c.npz", _e2m1_case(), backend=_Unavailable.name, extra=dict(backend_spec=_Unavailable.name))
    assert main(["replay", str(p)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (f"error: cannot replay {p}: backend {_Unavailable.name} is unavailable: "
                                    "its library is missing")


def test_replay_on_a_backend_without_the_cases_op_cannot_run(tmp_path, capsys):
    p = _good_case(tmp_path / "c.npz")
    assert main(["replay", str(p), "--backend", _QuantizeOnly.name]) == 2
    err = capsys.readouterr().err
    assert f"backend {_QuantizeOnly.name} does not implement op 'e2m1' (its ops: quantize)" in err


def test_a_case_saved_with_a_backend_records_its_spec(tmp_path, capsys):
    p = tmp_path / "c.npz"
    assert main(["case", "e2m1", "--seed", "2", "--index", "3", "--backend", "mldtypes", "--save", str(p)]) == 0
    back, meta, _, _ = load_case(p)
    assert (back.seed, back.index, meta["backend"], meta["backend_spec"]) == (2, 3, "mldtypes", "mldtypes")


def test_shard_auto_over_one_shard_keeps_the_report_path(tmp_path, monkeypatch, capsys):
    """--shard auto from a launcher of one process (WORLD_SIZE=1): the report path gets no -0of1 suffix."""
    for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    code = main(["run", "--shard", "auto", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "2", "--no-progress",
                 "--workers", "1", "--report", str(tmp_path / "r.json"), "--artifacts", str(tmp_path / "a")])
    assert code == 0 and (tmp_path / "r.json").exists() and not (tmp_path / "r-0of1.json").exists()


def test_the_artifacts_path_takes_the_shard_index(tmp_path, capsys):
    """--artifacts with {shard} / {nshards}: shard 1/3 saves its failing case under a1of3."""
    code = main(["run", "--shard", "1/3", "--backend", _FlipOneNibble.name, "--ops", "quantize", "--cases", "3",
                 "--no-progress", "--workers", "1", "--shrink-time", "0",
                 "--artifacts", str(tmp_path / "a{shard}of{nshards}")])
    assert code == 1
    assert list((tmp_path / "a1of3").glob("quantize-*-i1.npz"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a1of3"]


def test_run_forwards_its_options_to_the_runner(tmp_path, monkeypatch):
    """The run command's options reach RunConfig as given: --no-progress turns the progress line off (and its
    absence leaves it on), the shard, seed, case cap and time options are forwarded unchanged."""
    import conformance.runner as runner

    seen = []
    monkeypatch.setattr(runner, "run", lambda cfg: (seen.append(cfg), (0, None))[1])
    common = ["run", "--backend", "mldtypes", "--ops", "e2m1", "--seed", "5", "--cases", "7", "--shard", "1/4",
              "--shrink-time", "2", "--case-timeout", "9", "--workers", "3", "--artifacts", str(tmp_path / "a")]
    assert main([*common, "--no-progress"]) == 0
    assert main(common) == 0
    quiet, loud = seen
    assert quiet.progress is False and loud.progress is True
    assert (quiet.seed, quiet.max_cases, tuple(quiet.shard), quiet.shrink_time, quiet.case_timeout, quiet.workers) == (
        5, 7, (1, 4), 2.0, 9.0, 3)
    assert quiet.ops == ["e2m1"] and quiet.backends == ["mldtypes"]


def test_merging_shards_of_one_commit_adds_no_commit_note(tmp_path, capsys):
    """merge notes different commits of the shards on stderr; shards run here, from one commit, get no such note."""
    import io

    from conformance.runner import RunConfig, run

    paths = []
    for i in range(2):
        p = tmp_path / f"r{i}.json"
        run(RunConfig(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1,
                      backends=["mldtypes"], ops=["e2m1"], max_cases=4, shard=(i, 2), report=str(p)),
            stdout=io.StringIO(), stderr=io.StringIO())
        paths.append(p)
    assert main(["merge", *map(str, paths)]) == 0
    captured = capsys.readouterr()
    assert "total: 4 cases, 4 passed" in captured.out
    assert "note: the shards ran different commits" not in captured.err


def test_replay_of_a_case_the_oracle_refuses_is_a_failing_case(tmp_path, capsys):
    """docs/conformance.md: a case whose inputs the oracle refuses (K = 17, not a multiple of 16: SPEC 1.3) replays as
    a failure, "ERROR: reference raised ValueError: ..." and exit 1; only a missing input array cannot run (exit 2)."""
    c = quantize_case(np.ones((1, 17), np.float32))
    p = save_case(tmp_path / "c.npz", c, backend=_QuantizeOnly.name, extra=dict(backend_spec=_QuantizeOnly.name))
    assert main(["replay", str(p)]) == 1
    captured = capsys.readouterr()
    assert "ERROR: reference raised ValueError" in captured.out and captured.err == ""
    c.arrays.pop("x")
    p = save_case(tmp_path / "d.npz", c, backend=_QuantizeOnly.name, extra=dict(backend_spec=_QuantizeOnly.name))
    assert main(["replay", str(p)]) == 2
    assert "error: cannot replay" in capsys.readouterr().err


def test_budget_with_cases_is_noted(tmp_path, capsys):
    """--cases replaces the budget (docs/conformance.md): a --budget given with it is named as ignored on stderr; the
    case cap alone says nothing of a budget."""
    args = ["run", "--backend", "mldtypes", "--ops", "e2m1", "--cases", "3", "--no-progress", "--artifacts",
            str(tmp_path / "a")]
    assert main([*args, "--budget", "1s"]) == 0
    err = capsys.readouterr().err
    assert "note: --budget is ignored with --cases (the run ends after case indices 0..2 of each op)" in err
    assert main(args) == 0
    assert "--budget" not in capsys.readouterr().err


@pytest.mark.parametrize("option,value,message", [
    ("--budget", "-5s", "bad budget '-5s'"),
    ("--shrink-time", "-2", "got -2"),
    ("--case-timeout", "-1.5", "got -1.5"),
])
def test_negative_durations_get_the_options_own_message(capsys, option, value, message):
    """A negative duration after its option (``--budget -5s``) is refused by the option's check, as ``--budget=-5s``
    is, not by argparse's "expected one argument" (it read "-5s" as an option)."""
    with pytest.raises(SystemExit) as e:
        main(["run", option, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {option}:" in err and message in err and "expected one argument" not in err


def test_replaying_a_case_of_a_backend_registered_in_process_says_how(tmp_path, capsys):
    """A case saved by a backend that register_backend added in the run's process names that backend, which a new
    process does not know: replay says to give it as --backend package.module:attr (it said only "unknown backend");
    with --backend given, the case replays."""
    from conformance.cases import load_case, save_case

    path = tmp_path / "c.npz"
    assert main(["case", "e2m1", "--backend", FlipE2M1.name, "--save", str(path)]) == 0
    case, _, _, _ = load_case(str(path))
    save_case(tmp_path / "gone.npz", case, backend="test-cli-gone", extra={"backend_spec": "test-cli-gone"})
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "gone.npz")]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'test-cli-gone'" in err and "give it as --backend package.module:attr" in err
    assert main(["replay", str(tmp_path / "gone.npz"), "--backend", "mldtypes"]) == 0
