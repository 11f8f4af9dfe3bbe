"""README.md's Python examples run as written: the oracle's on the CPU; on a GPU every example, in the README's order
in one namespace (each device example continues the one before it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _needs_gpu(code: str) -> bool:
    return "device." in code or "cuda" in code


def _run(code: str, namespace: dict) -> None:
    exec(compile(code, str(README), "exec"), namespace)  # (the README's own example)


def test_the_readme_has_oracle_and_device_examples():
    examples = _examples()
    assert any(not _needs_gpu(c) for c in examples), "no CPU example found in README.md"
    assert any(_needs_gpu(c) for c in examples), "no device example found in README.md"


def test_the_oracle_examples_run():
    for code in _examples():
        if not _needs_gpu(code):
            _run(code, {})


@pytest.mark.cuda
def test_every_example_runs_on_a_gpu():
    namespace: dict = {}
    for code in _examples():
        _run(code, namespace)
