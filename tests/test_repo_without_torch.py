"""torch is an optional extra (pyproject's ``torch`` and ``device``): without it the suite must still collect, its
torch tests skipping by their marker, and the conformance runner's device backend must report itself unavailable
instead of raising. Run in a subprocess whose ``import torch`` raises ImportError (a stub package first on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env_without_torch(tmp_path: Path) -> dict:
    for name in ("torch", "torchao"):
        stub = tmp_path / "blocked" / name
        stub.mkdir(parents=True)
        # (ModuleNotFoundError, as a missing package raises: pytest.importorskip skips on it alone)
        (stub / "__init__.py").write_text(f'raise ModuleNotFoundError("No module named {name!r}", name={name!r})\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "blocked"), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_the_suite_collects_without_torch(tmp_path):
    """Every test module imports without torch (a module-level ``import torch`` fails the whole run)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                       cwd=ROOT, env=_env_without_torch(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " collected" in r.stdout and "error" not in r.stdout.splitlines()[-1], r.stdout[-500:]


def test_a_device_run_without_torch_reports_the_device_unavailable(tmp_path):
    """``python -m conformance run --device all`` without torch: every device op listed as skipped, exit 2 (no case
    ran), no traceback (the device package's modules, imported on first access, need torch)."""
    r = subprocess.run([sys.executable, "-m", "conformance", "run", "--device", "all", "--cases", "1",
                        "--artifacts", str(tmp_path / "art")],
                       cwd=tmp_path, env=_env_without_torch(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "device:cuda:0 grouped_linear" in r.stdout and "9 skipped ops" in r.stdout, r.stdout[-2000:]
