"""The repository describes the system as it is: no tracked file carries the vocabulary of the work that built it.

Words like "stop 36" (a work session), "call 2" (one GPU call of a session), "helper-19" or references to the
deleted work journals mean nothing to a reader of the project; the history is ``git log``. This test reads every
tracked text file (``git ls-files``) and fails on any such phrase, naming the file and line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS_FILE = Path(__file__).resolve()

#: the journal's phrases (case-sensitive where the capitalised word has other meanings)
JOURNAL = re.compile(
    r"\b[Ss]tops? \d+\b"            # "stop 36", "stops 15 and 16"
    r"|\bcall \d+\b"                # "call 2"
    r"|\bhelper-\d+\b"              # "helper-19"
    r"|\b[Ss]ession\b"              # "this session", "a GPU session"
    r"|\bNOTES\.md\b"               # the deleted journals
    r"|docs/gemm\.md|docs/device\.md"
    r"|NVFP4-FACTS\.md"             # a file outside the repository
)


def journal_phrases(text: str) -> list[tuple[int, str]]:
    """(line number, phrase) of every journal phrase in ``text``."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in JOURNAL.finditer(text)]


def test_the_pattern_finds_the_journal_phrases():
    text = ("fine: gpu_session.sh, a stopped kernel, stop-gap, the 2 calls, recall 5\n"
            "(docs/gemm.md, stop 36) and stops 15 and 16\ncall 2 of helper-19's session\nsee device/NOTES.md\n")
    assert [p for _, p in journal_phrases(text)] == [
        "docs/gemm.md", "stop 36", "stops 15", "call 2", "helper-19", "session", "NOTES.md"]
    assert [n for n, _ in journal_phrases(text)] == [2, 2, 2, 3, 3, 3, 4]


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and path != THIS_FILE:
            data = path.read_bytes()
            if b"\0" not in data[:8192]:  # (text files only)
                files.append(path)
    return files


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_no_tracked_file_carries_journal_vocabulary():
    files = tracked_text_files()
    assert len(files) > 100, f"only {len(files)} tracked files read: the file walk is broken"
    found = []
    for path in files:
        for line, phrase in journal_phrases(path.read_text(errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{line}: {phrase!r}")
    assert not found, "journal vocabulary in tracked files:\n" + "\n".join(found)
