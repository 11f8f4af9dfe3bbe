"""docs/conformance.md's plugin backend ("Adding a backend or an op") runs as written: its code, saved as
``mypkg/mod.py``, is loaded by ``python -m conformance run --backend mypkg.mod:MyKernels`` over a stand-in
``mykernel`` module. With a stand-in that returns SPEC's bytes (the oracle's) the run passes; with one that flips a
code nibble it fails, so the run compares what the example returns. The example's space asks for cases whose amax the
kernel computes: ``mykernel.quantize`` is not given ``case.arrays["amax"]``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "conformance.md"

# The stand-ins for the user's kernel module: the oracle's bytes, or those bytes with the first code nibble flipped.
_KERNEL = '''
import numpy as np
import oracle

def quantize(x, *, swizzled=True, **options):
    plane = oracle.quantize(x, **options).row
    data = plane.data.copy()
    data.reshape(-1)[:1] ^= {flip}
    return data, plane.scales, plane.amax

def swizzle(scales):
    return oracle.swizzle.swizzle_scales(scales)
'''


def _plugin_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if "class MyKernels(Backend)" in b]
    assert len(found) == 1, "docs/conformance.md should hold one plugin example (class MyKernels)"
    return found[0]


def _run_example(tmp_path: Path, flip: int) -> subprocess.CompletedProcess:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "mod.py").write_text(_plugin_example())
    (tmp_path / "mykernel.py").write_text(_KERNEL.format(flip=flip))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    cmd = [sys.executable, "-m", "conformance", "run", "--backend", "mypkg.mod:MyKernels", "--ops", "quantize",
           "--cases", "12", "--no-progress", "--artifacts", str(tmp_path / "artifacts")]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flip, exit_code", [(0, 0), (1, 1)], ids=["spec-bytes", "flipped-nibble"])
def test_the_documented_plugin_backend_runs(tmp_path, flip, exit_code):
    r = _run_example(tmp_path, flip)
    assert r.returncode == exit_code, r.stdout + r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("mine "))
    cases, passed, mismatched, errors = (int(v) for v in row.split()[2:6])
    assert cases == 12 and errors == 0 and passed + mismatched == 12
    if flip:  # (a case with no rows has no code to flip and passes)
        assert mismatched > 0
    else:
        assert mismatched == 0
