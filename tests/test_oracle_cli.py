"""The debugging CLI (`python -m oracle explain|quantize`) end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np

import oracle


def _run(*args):
    return subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True, text=True)


def test_explain_prints_every_block(tmp_path):
    x = np.zeros((2, 32), np.float32)
    x[1, :16] = [12, 5, 7, -1, 0.5, 1.5, 2.5, 3.5, 10, 11, -0.0, np.nan, -3, 9, 0.4, -12]
    np.save(tmp_path / "x.npy", x)
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "1", "--amax", "2688")
    assert r.returncode == 0, r.stderr
    assert "block 0:" in r.stdout and "block 1:" in r.stdout
    assert "scale=0x40" in r.stdout and "multiplier=0.5" in r.stdout  # SPEC 5.2 hand-worked block
    code_line = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("code")][0]
    assert code_line.split()[1:5] == ["0x7", "0x4", "0x6", "0x9"]


def test_quantize_writes_all_buffers(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 48)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--rht", "--rounding", "sr", "--seed", "3")
    assert r.returncode == 0, r.stderr
    d = np.load(tmp_path / "o.npz", allow_pickle=False)
    ref = oracle.quantize(x, columnwise=True, rht=True, rounding="sr", seed=3)
    assert np.array_equal(d["row_data"], ref.row.data) and np.array_equal(d["col_scales"], ref.col.scales)
    assert np.array_equal(d["col_scales_swizzled"], ref.col.swizzled_scales())
    assert d["col_amax"].view(np.uint32) == np.float32(ref.col.amax).view(np.uint32)
    assert json.loads(str(d["options_json"]))["rounding"] == "sr"


def test_cli_reports_bad_input(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 20), np.float32))
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "0")
    assert r.returncode == 2 and "multiple of 16" in r.stderr


def test_cli_missing_file_and_bad_row(tmp_path):
    r = _run("quantize", str(tmp_path / "nope.npy"), str(tmp_path / "o.npz"))
    assert r.returncode == 2 and "error:" in r.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float32))
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "5")
    assert r.returncode == 2 and "outside" in r.stderr


def test_cli_amax_pair_and_dtype_conversion(tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--amax", "2688", "7", "--input-dtype", "float32")
    assert r.returncode == 0, r.stderr
    d = np.load(tmp_path / "o.npz", allow_pickle=False)
    assert float(d["row_amax"]) == 2688.0 and float(d["col_amax"]) == 7.0
    ref = oracle.quantize(x.astype(np.float32), columnwise=True, amax=(2688.0, 7.0))
    assert np.array_equal(d["row_data"], ref.row.data)
