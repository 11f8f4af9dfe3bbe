"""tools/ab/two_trees.py: the saved outputs of a run read back from their folder and from runs.tar.gz, and the table
of two trees' rows (values and ratios worked out here by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("two_trees", ROOT / "tools" / "ab" / "two_trees.py")
two_trees = importlib.util.module_from_spec(_spec)
sys.modules["two_trees"] = two_trees
_spec.loader.exec_module(two_trees)

HEADER = "case                kind    fast  grp_mm fast/gmm |  fast_s"


def gemm_output(fast: float, grp_mm: float, fast_s: float) -> str:
    """bench_grouped_gemm's table with one row (a ratio column, which the parser leaves out, and a sustained one)."""
    return f"{HEADER}\nE8 T512 K4096 N14336 fprop {fast} {grp_mm} {fast / grp_mm:.2f} | {fast_s}\n"


def quant_output(us: float) -> str:
    """bench_quantize's table with one row."""
    return f"path | shape | time | frac\n-----\nfused | 8192x5120 | {us} us | 0.63\n"


def test_outputs_come_back_as_two_files_and_read_the_same(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    runs = {"gemm_old_1.txt": gemm_output(300.0, 200.0, 290.0), "gemm_new_1.txt": gemm_output(330.0, 200.0, 300.0),
            "gemm_old_2.txt": gemm_output(310.0, 210.0, 290.0), "gemm_new_2.txt": gemm_output(340.0, 210.0, 300.0),
            "quant_old_1.txt": quant_output(100.0), "quant_new_1.txt": quant_output(80.0)}
    for name, text in runs.items():
        (work / name).write_text(text)
    (work / "build_old.log").write_text("built\n")
    (work / "gemm_new_1.err").write_text("")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    text = two_trees.tables(two_trees.read_outputs(work), 0.03)
    two_trees.save(work, text)
    back = sorted(p.name for p in (tmp_path / "out" / "two_trees").iterdir())
    assert back == ["runs.tar.gz", "table.txt"]
    archive = tmp_path / "out" / "two_trees" / "runs.tar.gz"
    assert two_trees.read_outputs(archive) == two_trees.read_outputs(work)
    assert (tmp_path / "out" / "two_trees" / "table.txt").read_text() == text + "\n"
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines()}
    # fast: old mean (300 + 310) / 2 = 305, new (330 + 340) / 2 = 335, new/old 335 / 305 = 1.098; spread of the old
    # side (310 - 300) / 305 = 3.3%, of the new side 10 / 335 = 3.0%
    assert rows["gemm: E8 T512 K4096 N14336 fprop fast"][-4:] == ["305.00", "335.00", "1.098", "3.3%"]
    # grouped_mm is torch's: shown, never flagged; the ratio column fast/gmm is not a row
    assert rows["gemm: E8 T512 K4096 N14336 fprop grp_mm"][-1] == "(torch)"
    assert not any("fast/gmm" in row for row in rows)
    # quantize: 100 -> 80 us, new/old 0.800 (faster: no flag)
    assert rows["quant: fused 8192x5120"][-4:] == ["100.00", "80.00", "0.800", "0.0%"]
    assert "SLOWER" not in text
