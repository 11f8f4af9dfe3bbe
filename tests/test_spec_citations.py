"""SPEC.md's section numbers as the code and docs cite them.

Every numeric rule lives once in SPEC.md under a section number, and the oracle, the CUDA kernels, the tests and
the docs cite it as ``SPEC 12.6`` (also ``SPEC 12.4 / 12.6``, ``SPEC 5.1, 5.2``, ``SPEC 3.1-3.3``). These tests
check that every such citation names a section SPEC.md defines, and that every file SPEC 15's table names exists.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parent.parent
SPEC = ROOT / "SPEC.md"
CITING_DIRS = ("oracle", "device", "conformance", "tests", "docs", "benchmarks", "tools")
CITING_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".cpp", ".md"}

# "SPEC 12.6", "SPEC 12", "SPEC.md 8.2", "SPEC section 9.3", then more numbers joined by ", ", " and ", " or ",
# "/", "-", " to " or "; " ("SPEC 12.4 / 12.6", "SPEC 3.1-3.3").
CITATION = re.compile(
    r"SPEC(?:\.md)?,? (?:§|section |sections )?(\d+(?:\.\d+)*)((?:(?:, | and | or | ?/ ?|-| to |; )\d+(?:\.\d+)+)*)"
)


def defined_sections(spec_text: str) -> set[str]:
    """Section numbers SPEC.md defines: its "## N." headings and the "N.M" numbers that open a paragraph."""
    top = set(re.findall(r"(?m)^## (\d+)\.", spec_text))
    numbered = set(re.findall(r"(?m)^(\d+\.\d+(?:\.\d+)?)\s", spec_text))
    return top | numbered


def cited_sections(text: str) -> list[tuple[str, int]]:
    """Every section number cited in `text` as (number, line)."""
    found = []
    for m in CITATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for number in [m.group(1), *re.findall(r"\d+(?:\.\d+)+", m.group(2) or "")]:
            found.append((number, line))
    return found


def citing_files() -> list[Path]:
    files = [ROOT / "README.md", SPEC]
    for d in CITING_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            # (this file cites an undefined section on purpose, to test the pattern)
            if p.suffix in CITING_SUFFIXES and "_scratch" not in p.parts and p.is_file() and p != THIS_FILE:
                files.append(p)
    return files


def test_every_section_is_defined_once():
    """A number opens one line of SPEC.md only: a wrapped line that begins with a cited number ("12.6 (E = ...") would
    read as a second definition, and keep a citation of that number valid after the section itself moved."""
    opened = re.findall(r"(?m)^(\d+\.\d+(?:\.\d+)?)\s", SPEC.read_text())
    assert sorted({n for n in opened if opened.count(n) > 1}) == []


def test_the_citation_pattern_reads_joined_numbers():
    text = "x (SPEC 12.4 / 12.6) y\nSPEC 3.1-3.3 and SPEC.md 8.2, SPEC 5.1, 5.2 or 5.4\nSPEC 99.9"
    assert cited_sections(text) == [
        ("12.4", 1), ("12.6", 1), ("3.1", 2), ("3.3", 2), ("8.2", 2), ("5.1", 2), ("5.2", 2), ("5.4", 2), ("99.9", 3)
    ]


def test_defined_sections_reads_the_spec_headings():
    sections = defined_sections(SPEC.read_text())
    # the top-level sections and a sample of numbered rules, written out here from SPEC.md's headings
    assert {str(n) for n in range(1, 16)} <= sections
    assert {"1.1", "3.1", "3.2", "5.4", "8.2", "9.4", "12.2", "12.6"} <= sections
    assert "99.9" not in sections


def test_every_spec_citation_names_a_defined_section():
    sections = defined_sections(SPEC.read_text())
    dangling = []
    count = 0
    for path in citing_files():
        for number, line in cited_sections(path.read_text(errors="replace")):
            count += 1
            if number not in sections:
                dangling.append(f"{path.relative_to(ROOT)}:{line}: SPEC {number}")
    assert count > 500, f"only {count} citations found: the pattern or the file walk is broken"
    assert not dangling, "citations of sections SPEC.md does not define:\n" + "\n".join(dangling)


def spec15_files(spec_text: str) -> list[str]:
    """The file names (or globs) in SPEC 15's table, e.g. `oracle/gemm.py`, `gemm/fused.cuh`, `device/gemm.py`."""
    table = spec_text.split("## 15.", 1)[1]
    return sorted(set(re.findall(r"`([\w*./]+\.(?:py|cu|cuh|h|cpp))`", table)))


@pytest.mark.parametrize("name", spec15_files(SPEC.read_text()))
def test_every_file_spec15_names_exists(name: str):
    # repository paths (oracle/..., tests/..., device/...), else device/csrc/ paths (SPEC 15's device column)
    top = name.split("/", 1)[0]
    pattern = ROOT / name if top in ("oracle", "tests", "device", "conformance") else ROOT / "device" / "csrc" / name
    assert glob.glob(str(pattern)), f"SPEC 15 names {name}, which does not exist"
