"""Summarise Nsight Compute's per-SASS-line CSV (`ncu -i REP --page source --csv --print-source sass`, as written
by `tools/gpu_session.sh ncu`): executed instructions and stall samples per opcode, the lines with the most stall
samples and their top stall reasons, the stall reasons in total, the samples of the spin loops that wait on each
mbarrier (the branch after a `SYNCS.PHASECHK...TRYWAIT`, grouped by the barrier's address operand), and where one
warp's instructions go: the runs of consecutive lines executed equally often with the most instructions per warp, and
the instructions per warp by how often their lines ran per warp (once per tile, once per row, ...).

    python tools/profile/ncu_sass_summary.py ncu_0_sass.csv [--top 20]
"""

from __future__ import annotations

import argparse
import collections
import csv
import re

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def _number(text: str) -> float:
    """A CSV cell as a number ("20,480" too); 0 for an empty or non-numeric cell."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the CSV: its first line names the kernel, its second is the header."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[1], rows[2:]


def opcode(source: str) -> str:
    """The SASS opcode of a line (predicate and operands stripped)."""
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split()[0] if text else "?"


def barrier_waits(header: list[str], rows: list[list[str]], lookahead: int = 6) -> dict[str, float]:
    """Stall samples of each mbarrier's spin loop: the conditional branch that follows a TRYWAIT on that barrier
    (within `lookahead` lines), keyed by the TRYWAIT's address operand."""
    col = {h: i for i, h in enumerate(header)}
    waits: dict[str, float] = collections.Counter()
    for i, row in enumerate(rows):
        m = re.search(r"TRYWAIT P(\d), \[([^\]]+)\]", row[col["Source"]])
        if not m:
            continue
        pred = f"@!P{m.group(1)}"
        for later in rows[i + 1:i + 1 + lookahead]:
            if later[col["Source"]].strip().startswith(pred) and "BRA" in later[col["Source"]]:
                waits[m.group(2)] += _number(later[col[SAMPLES]])
                break
    return dict(waits)


def straight_runs(header: list[str], rows: list[list[str]]) -> tuple[float, list[tuple[str, str, int, float]]]:
    """(warps, runs): the kernel's warps (the executions of its first line, which every warp runs once; 1 when that
    count is missing) and its runs of consecutive lines with the same executed count (a run may join two basic blocks
    that happen to run equally often), each as (first address, last address, lines, executions per warp)."""
    col = {h: i for i, h in enumerate(header)}
    lines = [(r[col["Address"]], _number(r[col[EXECUTED]])) for r in rows]
    warps = lines[0][1] if lines and lines[0][1] > 0 else 1.0
    runs: list[tuple[str, str, int, float]] = []
    counts: list[float] = []  # each run's executed count, compared as read (no division)
    for address, n in lines:
        if counts and counts[-1] == n:
            first, _, count, per_warp = runs[-1]
            runs[-1] = (first, address, count + 1, per_warp)
        else:
            runs.append((address, address, 1, n / warps))
            counts.append(n)
    return warps, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu's per-SASS-line CSV (--page source --csv --print-source sass)")
    ap.add_argument("--top", type=int, default=20, help="opcodes and lines to list")
    a = ap.parse_args()
    header, rows = read_rows(a.csv)
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    executed = sum(_number(r[col[EXECUTED]]) for r in rows)
    samples = sum(_number(r[col[SAMPLES]]) for r in rows)
    print(f"executed warp instructions {executed:,.0f}, stall samples {samples:,.0f}")

    by_op_exec: dict[str, float] = collections.Counter()
    by_op_samples: dict[str, float] = collections.Counter()
    for r in rows:
        op = opcode(r[col["Source"]])
        by_op_exec[op] += _number(r[col[EXECUTED]])
        by_op_samples[op] += _number(r[col[SAMPLES]])
    print("\nopcode                         executed  samples")
    for op, n in sorted(by_op_exec.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"{op:28s} {100 * n / executed:8.1f}% {100 * by_op_samples[op] / samples:7.1f}%")

    print("\nlines with the most stall samples (address, share, executed, source, top reasons)")
    for r in sorted(rows, key=lambda r: -_number(r[col[SAMPLES]]))[:a.top]:
        top = sorted(((_number(r[col[c]]), c[len("stall_"):]) for c in reasons), reverse=True)[:3]
        share = 100 * _number(r[col[SAMPLES]]) / samples
        print(f"{r[col['Address']][-6:]} {share:5.1f}% {_number(r[col[EXECUTED]]):>11,.0f}  "
              f"{r[col['Source']].strip()[:60]:60s} {', '.join(f'{name} {n:.0f}' for n, name in top)}")

    print("\nstall reasons")
    totals = {c[len("stall_"):]: sum(_number(r[col[c]]) for r in rows) for c in reasons}
    for name, n in sorted(totals.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{name:24s} {100 * n / samples:5.1f}%")

    print("\nmbarrier spin loops (samples, share)")
    for bar, n in sorted(barrier_waits(header, rows).items(), key=lambda kv: -kv[1]):
        print(f"{bar:28s} {n:8.0f} {100 * n / samples:5.1f}%")

    warps, runs = straight_runs(header, rows)
    print(f"\nruns of lines executed equally often, with the most instructions per warp ({warps:,.0f} warps, "
          f"{executed / warps:,.1f} instructions per warp): first and last address, lines, executions per warp, "
          "instructions per warp, share")
    for first, last, count, per_warp in sorted(runs, key=lambda r: -r[2] * r[3])[:a.top]:
        print(f"{first[-6:]} {last[-6:]} {count:5d} {per_warp:8.2f} {count * per_warp:9.1f} "
              f"{100 * count * per_warp * warps / executed:5.1f}%")
    print("\ninstructions per warp by executions per warp")
    by_runs: dict[float, float] = collections.Counter()
    for _, _, count, per_warp in runs:
        by_runs[round(per_warp, 2)] += count * per_warp
    for per_warp, n in sorted(by_runs.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"{per_warp:8.2f} {n:9.1f} {100 * n * warps / executed:5.1f}%")


if __name__ == "__main__":
    main()
