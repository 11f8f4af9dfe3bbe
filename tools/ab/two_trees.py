"""Old tree against new tree: each tree's own benchmarks, alternating, in one GPU command, and one comparison table.

``prepare REV`` (here, in the git checkout) writes REV's tree into ``_ab_old/`` (git-ignored) with ``git archive``.
``run`` (on the GPU machine, with ``_ab_old/`` and ``.whl/`` carried) installs the wheels of ``.whl/`` into
/tmp/site, builds both trees' extensions in parallel (one NVFP4_BUILD_DIR each, under ``build/``, which is
git-ignored and so survives between commands on the same machine), then runs each tree's own
``benchmarks/bench_quantize.py`` and ``benchmarks/bench_grouped_gemm.py`` (the old tree with only itself on
PYTHONPATH) in the order old, new, old, new (``--rounds`` rounds, each benchmark's runs back to back), keeps every
output in ``--work`` and prints one table: row label, unit, old, new, new/old, the larger relative spread
of the two sides' rounds, and ``SLOWER`` where the new tree is slower by more than ``--threshold`` (time up, or
TFLOP/s or TB/s down). Rows are matched by their label text (bench_quantize: path and shape; bench_grouped_gemm:
case, kind and column); torch's own columns (grouped_mm, the matmul loop, weight dequantize + grouped_mm) are shown
as the machine's drift and never flagged. ``--mid DIR`` adds a third tree (``prepare REV --dir DIR``), built and
timed with the other two (old, mid, new in each round), and two more tables: mid against old, new against mid.
What comes back from the GPU machine is two files under ``$OUT/two_trees/`` (the device tool returns at most 8):
``table.txt`` and ``runs.tar.gz``, every build log and benchmark output of the run, both written again after each
benchmark run. ``table PATH`` prints the tables again from saved outputs, a folder of them or that archive.

    python3 tools/ab/two_trees.py prepare HEAD~1
    python3 tools/ab/two_trees.py run [--old _ab_old] [--mid _ab_mid] [--rounds 2]
        [--gemm-args "--iters 5 --reps 1 --sustain 0.2"]
    python3 tools/ab/two_trees.py table /tmp/two_trees_out/two_trees/runs.tar.gz

A GPU command runs at most 600 s: no benchmark run starts once the elapsed time plus the last run of the same
benchmark would pass ``--budget`` (default 540 s), and a run still going 50 s past it is stopped (the rows it printed
still count); ``--gemm-args "... --only E64"`` runs a subset of bench_grouped_gemm's rows. The builds stay in
``build/two_trees/`` on the machine, so a second command skips them.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDES = ("old", "mid", "new")  #: in the order they run; "mid" only with --mid
BENCHES = {"quant": "benchmarks/bench_quantize.py", "gemm": "benchmarks/bench_grouped_gemm.py"}
#: bench_grouped_gemm's columns measured on torch's own kernels (the machine's drift, never flagged)
TORCH_COLUMNS = {"grp_mm", "loop", "wdq+gmm", "grp_mm_s"}
#: builds both extensions of the tree on PYTHONPATH: device._build.load_extensions, or (a tree with one loader per
#: extension) device._build.load_extension and device._gemm_build.load_gemm_extension
BUILD = """
import importlib
b = importlib.import_module("device._build")
if hasattr(b, "load_extensions"):
    b.load_extensions()
else:
    b.load_extension()
    importlib.import_module("device._gemm_build").load_gemm_extension()
print("built the extensions of", b.__file__)
"""


# ---------------------------------------------------------------------------------------------------------------
# parsing the benchmarks' tables
# ---------------------------------------------------------------------------------------------------------------

#: one measured row: label -> (value, unit, higher is better, a torch baseline)
Rows = dict[str, tuple[float, str, bool, bool]]


def parse_quant(text: str) -> Rows:
    """bench_quantize.py's table: ``path | shape | time | frac | vs copy | note`` cells joined by " | " after a header
    row and a dashed rule. The time cell is "<us> us" (lower is better) or, for the copy bandwidth, "<x> TB/s"."""
    rows: Rows = {}
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) >= 3 and cells[0] == "path" and cells[1] == "shape":
            in_table = True
            continue
        if not in_table or len(cells) < 3:
            continue
        label = f"{cells[0]} {cells[1]}".strip()
        if m := re.fullmatch(r"([0-9.]+) us", cells[2]):
            rows[label] = (float(m.group(1)), "us", False, False)
        elif m := re.fullmatch(r"([0-9.]+) TB/s", cells[2]):
            rows[label] = (float(m.group(1)), "TB/s", True, False)
    return rows


def parse_gemm(text: str) -> Rows:
    """bench_grouped_gemm.py's table: a header ``case kind <columns...>`` (whitespace-separated, a ``|`` between the
    burst and the sustained columns), then rows whose last tokens are one value per column, preceded by the kind;
    the case name (which has spaces) is the rest. Ratio columns (a "/" in the name) are left out."""
    rows: Rows = {}
    cols: list[str] = []
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) > 2 and tokens[0] == "case" and tokens[1] == "kind":
            cols = tokens[2:]
            continue
        if not cols or len(tokens) < len(cols) + 2:
            continue
        values = tokens[-len(cols):]
        if any((c == "|") != (v == "|") for c, v in zip(cols, values, strict=True)):
            continue
        kind = tokens[-len(cols) - 1]
        case = " ".join(tokens[: -len(cols) - 1])
        for c, v in zip(cols, values, strict=True):
            if c == "|" or "/" in c:
                continue
            try:
                x = float(v)
            except ValueError:
                continue
            if not math.isnan(x):
                rows[f"{case} {kind} {c}"] = (x, "TFLOP/s", True, c in TORCH_COLUMNS)
    return rows


PARSERS = {"quant": parse_quant, "gemm": parse_gemm}


def _spread(values: list[float]) -> float:
    """(max - min) / mean of one side's rounds."""
    mean = statistics.mean(values)
    return (max(values) - min(values)) / abs(mean) if mean else 0.0


def table(outputs: dict[tuple[str, str], list[str]], threshold: float, base: str = "old", other: str = "new") -> str:
    """The comparison table of saved outputs ((bench, side) -> the texts of its rounds): side ``other`` against side
    ``base`` (the columns old and new)."""
    body: list[tuple[str, str, float, float, float, float, str]] = []
    only: list[str] = []
    flagged = 0
    for bench, parse in PARSERS.items():
        parsed = {"old": [parse(t) for t in outputs.get((bench, base), [])],
                  "new": [parse(t) for t in outputs.get((bench, other), [])]}
        labels: list[str] = []
        for side in ("new", "old"):
            for rows in parsed[side]:
                labels += [x for x in rows if x not in labels]
        speeds = []
        for label in labels:
            got = {side: [r[label][0] for r in parsed[side] if label in r] for side in ("old", "new")}
            if not got["old"] or not got["new"]:
                only.append(f"{bench}: {label} (only in the {'old' if got['old'] else 'new'} tree)")
                continue
            _, unit, higher, baseline = next(r[label] for r in parsed["new"] if label in r)
            old, new = statistics.mean(got["old"]), statistics.mean(got["new"])
            if old <= 0 or new <= 0:
                continue
            ratio = new / old
            speed = ratio if higher else 1 / ratio  # new speed / old speed
            flag = "(torch)" if baseline else ""
            if not baseline:
                speeds.append(speed)
                if 1 / speed > 1 + threshold:
                    flag = "SLOWER"
                    flagged += 1
            body.append((f"{bench}: {label}", unit, old, new, ratio, max(_spread(got[s]) for s in got), flag))
        if speeds:
            gm = math.exp(statistics.mean(math.log(x) for x in speeds))
            body.append((f"{bench}: geometric mean of new speed / old speed, {len(speeds)} rows", "", math.nan,
                         math.nan, gm, math.nan, ""))
    width = max([12] + [len(b[0]) for b in body])
    lines = [f"{base} tree (old) against {other} tree (new)",
             f"{'row':{width}s} {'unit':>7s} {'old':>9s} {'new':>9s} {'new/old':>8s} {'spread':>7s}"]
    for name, unit, old, new, ratio, spread, flag in body:
        cells = [f"{x:9.2f}" if not math.isnan(x) else " " * 9 for x in (old, new)]
        sp = f"{100 * spread:6.1f}%" if not math.isnan(spread) else ""
        lines.append(f"{name:{width}s} {unit:>7s} {cells[0]} {cells[1]} {ratio:8.3f} {sp:>7s} {flag}".rstrip())
    lines += only
    lines.append(f"{flagged} row(s) of ours slower by more than {100 * threshold:g}% (new/old: of the values; spread: "
                 "the larger (max - min) / mean of the two trees' rounds)")
    return "\n".join(lines)


def read_outputs(path: Path) -> dict[tuple[str, str], list[str]]:
    """Saved outputs ``<bench>_<side>_<round>.txt`` of a ``run``: a folder of them, or ``runs.tar.gz``."""
    texts: dict[str, str] = {}
    if path.is_dir():
        texts = {p.name: p.read_text() for p in path.glob("*_*_*.txt")}
    else:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.endswith(".txt"):
                    texts[Path(m.name).name] = tar.extractfile(m).read().decode()
    outputs: dict[tuple[str, str], list[str]] = {}
    for name in sorted(texts):
        bench, side, _ = name.removesuffix(".txt").split("_", 2)
        if bench in BENCHES and side in SIDES:
            outputs.setdefault((bench, side), []).append(texts[name])
    return outputs


def tables(outputs: dict[tuple[str, str], list[str]], threshold: float) -> str:
    """new against old; with a mid tree also mid against old and new against mid."""
    pairs = [("old", "new")]
    if any(side == "mid" for _, side in outputs):
        pairs += [("old", "mid"), ("mid", "new")]
    return "\n\n".join(table(outputs, threshold, a, b) for a, b in pairs)


# ---------------------------------------------------------------------------------------------------------------
# prepare / run
# ---------------------------------------------------------------------------------------------------------------

def prepare(args: argparse.Namespace) -> int:
    dest = ROOT / args.dir
    if dest.exists():
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", args.rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        return 1
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], capture_output=True, text=True)
    print(f"the tree of {rev.stdout.strip()} in {dest}")
    return 0


def tree_env(tree: Path, build_dir: Path, jobs: int) -> dict[str, str]:
    """The environment of one tree's processes: only that tree (and the wheels of /tmp/site) on PYTHONPATH."""
    env = dict(os.environ)
    env.update(PYTHONPATH=f"{tree}:/tmp/site", NVFP4_BUILD_DIR=str(build_dir), PYTHONUNBUFFERED="1",
               PYTHONWARNINGS="ignore", MAX_JOBS=str(jobs))
    return env


def build(side: str, tree: Path, build_dir: Path, jobs: int, log: Path) -> tuple[str, int, float]:
    """Build one tree's extensions; (side, exit status, seconds)."""
    for lock in build_dir.rglob("lock"):  # a build killed earlier leaves torch's lock, and every later load waits
        lock.unlink()
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, "-c", BUILD], cwd=tree, env=tree_env(tree, build_dir, jobs), stdout=f,
                            stderr=subprocess.STDOUT).returncode
    return side, rc, time.time() - t0


def run(args: argparse.Namespace) -> int:
    t_start = time.time()
    trees = {"old": (ROOT / args.old).resolve()}  # in SIDES' order: the order of the builds and of each round
    if args.mid:
        trees["mid"] = (ROOT / args.mid).resolve()
    trees["new"] = ROOT
    sides = tuple(trees)
    for side, tree in trees.items():
        missing = [s for s in BENCHES.values() if not (tree / s).is_file()]
        if missing or not (tree / "device").is_dir():
            print(f"{side} tree {tree}: no device/ or {', '.join(missing)} (run 'prepare REV --dir "
                  f"{args.mid if side == 'mid' else args.old}' and carry that folder)")
            return 2
    out = Path(args.work)  # every log and output; $OUT/two_trees gets the table and an archive of this folder
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.txt"), *out.glob("*.err"), *out.glob("*.log")]:
        stale.unlink()
    builds = {side: (ROOT / args.build_root / side).resolve() for side in sides}
    for d in builds.values():
        d.mkdir(parents=True, exist_ok=True)
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", "/tmp/site", *map(str, wheels)], check=True)
    jobs = max(1, (os.cpu_count() or 2) // len(sides))
    with ThreadPoolExecutor(len(sides)) as pool:
        done = list(pool.map(lambda s: build(s, trees[s], builds[s], jobs, out / f"build_{s}.log"), sides))
    for side, rc, secs in done:
        print(f"build {side}: rc {rc}, {secs:.0f} s ({trees[side]})", flush=True)
        if rc:
            print("\n".join((out / f"build_{side}.log").read_text().splitlines()[-20:]))
            save(out, "")
            return 1
    extra = {"quant": shlex.split(args.quant_args), "gemm": shlex.split(args.gemm_args)}
    chosen = [b for b in args.benches.split(",") if b]
    if not chosen:  # (build only: a later command on the same machine runs the benchmarks)
        save(out, "")
        return 0
    last: dict[str, float] = {}
    for bench, script in BENCHES.items():
        if bench not in chosen:
            continue
        for r in range(1, args.rounds + 1):
            for side in sides:
                elapsed = time.time() - t_start
                if elapsed + last.get(bench, 0.0) > args.budget:
                    print(f"{bench} {side} round {r}: skipped ({elapsed:.0f} s used of the {args.budget:.0f} s budget)")
                    continue
                # no run goes on past the budget by more than 50 s (its rows printed so far still count)
                limit = max(30.0, min(args.run_timeout, args.budget + 50.0 - elapsed))
                t0 = time.time()
                path = out / f"{bench}_{side}_{r}.txt"
                try:
                    with open(path, "w") as f, open(out / f"{bench}_{side}_{r}.err", "w") as e:
                        rc = subprocess.run([sys.executable, script, *extra[bench]], cwd=trees[side],
                                            env=tree_env(trees[side], builds[side], jobs), stdout=f, stderr=e,
                                            timeout=limit).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                last[bench] = time.time() - t0
                print(f"{bench} {side} round {r}: rc {rc}, {last[bench]:.0f} s", flush=True)
                if rc != 0:
                    print("\n".join((out / f"{bench}_{side}_{r}.err").read_text().splitlines()[-10:]))
                save(out, tables(read_outputs(out), args.threshold))  # (what a call killed later still returns)
    text = tables(read_outputs(out), args.threshold)
    print()
    print(text)
    save(out, text)
    return 0


def save(work: Path, text: str) -> None:
    """``$OUT/two_trees/table.txt`` (the printed tables) and ``runs.tar.gz`` (every file of the work folder)."""
    dest = Path(os.environ.get("OUT", "/tmp/two_trees_out")) / "two_trees"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "table.txt").write_text(text + "\n")
    with tarfile.open(dest / "runs.tar.gz", "w:gz") as tar:
        for p in sorted(work.iterdir()):
            if p.is_file():
                tar.add(p, arcname=p.name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare", help="write a revision's tree into the old tree's folder (git archive)")
    p.add_argument("rev", help="the old revision, e.g. HEAD~1")
    p.add_argument("--dir", default="_ab_old", help="the folder, relative to the repository root (git-ignored)")
    r = sub.add_parser("run", help="build both trees, run their benchmarks alternately, print the table")
    r.add_argument("--old", default="_ab_old", help="the old tree, relative to the repository root")
    r.add_argument("--mid", default="", help="a third tree (e.g. one of two changes), relative to the repository "
                   "root: built and timed with the others, compared with both")
    r.add_argument("--rounds", type=int, default=2, help="runs of each benchmark per tree (old, new, old, new, ...)")
    r.add_argument("--quant-args", default="--quick --no-compile", help="bench_quantize.py's arguments")
    r.add_argument("--gemm-args", default="--iters 5 --reps 1 --sustain 0.2", help="bench_grouped_gemm.py's arguments")
    r.add_argument("--build-root", default="build/two_trees", help="the builds' folder (one per tree inside)")
    r.add_argument("--threshold", type=float, default=0.03, help="flag rows slower by more than this fraction")
    r.add_argument("--benches", default="quant,gemm",
                   help="comma-separated benchmarks to run (quant, gemm); empty: build both trees only")
    r.add_argument("--budget", type=float, default=540.0, help="seconds after which no new benchmark run starts")
    r.add_argument("--run-timeout", type=float, default=300.0, help="seconds one benchmark run may take")
    r.add_argument("--work", default="/tmp/two_trees_runs", help="the folder of the build logs and the benchmarks' "
                   "outputs (not under $OUT: $OUT/two_trees gets table.txt and runs.tar.gz of it)")
    t = sub.add_parser("table", help="print the table of a run's saved outputs")
    t.add_argument("dir", type=Path, help="the folder of <bench>_<side>_<round>.txt files, or a run's runs.tar.gz")
    t.add_argument("--threshold", type=float, default=0.03, help="flag rows slower by more than this fraction")
    args = ap.parse_args()
    if args.what == "prepare":
        return prepare(args)
    if args.what == "run":
        return run(args)
    print(tables(read_outputs(args.dir), args.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
