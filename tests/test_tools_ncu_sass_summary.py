"""tools/profile/ncu_sass_summary.py on a hand-made per-SASS-line CSV (ncu's layout: a kernel-name line, the header,
one row per line)."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "profile" / "ncu_sass_summary.py"
_spec = importlib.util.spec_from_file_location("ncu_sass_summary", SCRIPT)
summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summary)

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_wait"]
# 8 warps: two lines once per warp, a loop body of three lines four times per warp, one line once, two lines twice
LINES = [("0x7f00", "LDC R1, c[0x0][0x28]", 8), ("0x7f10", "S2R R0, SR_TID.X", 8),
         ("0x7f20", "FADD R2, R2, R3", 32), ("0x7f30", "@P0 FMUL R4, R2, 2", 32), ("0x7f40", "@P1 BRA 0x7f20", 32),
         ("0x7f50", "BAR.SYNC.DEFER_BLOCKING 0x0", 8), ("0x7f60", "LOP3.LUT R5, R5, 0xff, RZ, 0xc0, !PT", 16),
         ("0x7f70", "EXIT", 16)]


def rows() -> list[list[str]]:
    return [[a, s, "3", str(n), "3"] for a, s, n in LINES]


def test_straight_runs_and_warps():
    warps, runs = summary.straight_runs(HEADER, rows())
    assert warps == 8
    assert runs == [("0x7f00", "0x7f10", 2, 1.0), ("0x7f20", "0x7f40", 3, 4.0), ("0x7f50", "0x7f50", 1, 1.0),
                    ("0x7f60", "0x7f70", 2, 2.0)]


def test_runs_compare_the_counts_as_read():
    """1064 warps and three lines run 135 times each: one run (135 / 1064 * 1064 is not 135 in floating point)."""
    rows = [["0x0", "LDC R1, c[0x0][0x28]", "0", "1,064", "0"]] + [[f"0x{16 * i:x}", "FADD R2, R2, R3", "0", "135", "0"]
                                                                    for i in range(1, 4)]
    warps, runs = summary.straight_runs(HEADER, rows)
    assert warps == 1064
    assert [(first, last, count) for first, last, count, _ in runs] == [("0x0", "0x0", 1), ("0x10", "0x30", 3)]


def test_opcode_strips_the_predicate():
    assert [summary.opcode(s) for _, s, _ in LINES[2:5]] == ["FADD", "FMUL", "BRA"]


def test_the_report_prints_instructions_per_warp(tmp_path):
    path = tmp_path / "sass.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(HEADER)
        w.writerows(rows())
    out = subprocess.run([sys.executable, str(SCRIPT), str(path), "--top", "3"], capture_output=True, text=True,
                         check=True).stdout
    # 8 + 8 + 3 * 32 + 8 + 2 * 16 = 152 warp instructions, 19 per warp; the loop body is 12 of them (63.2%)
    assert "executed warp instructions 152" in out
    assert "(8 warps, 19.0 instructions per warp)" in out
    assert "0x7f20"[-6:] + " " + "0x7f40"[-6:] + "     3     4.00      12.0  63.2%" in out
    assert "    4.00      12.0  63.2%" in out.split("instructions per warp by executions per warp")[1]
