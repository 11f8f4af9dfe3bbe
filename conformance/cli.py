"""Command line of ``python -m conformance``: ``run``, ``replay``, ``case`` and ``merge``.

``run``: fuzz every usable backend against the oracle for ``--budget`` (default 60s, counted from the first case),
print a summary table (one row per backend and op; ``--detail``: per option), write ``--report`` JSON, save shrunk
failures under ``--artifacts`` (plus ``failures.jsonl``). Exit 0 only when at least one case ran and nothing
mismatched; 1 on a mismatch or an exception; 2 when nothing ran (the reason is printed) or on a usage error.
``replay``: re-run one saved case against the current oracle and backend; exit 1 while it still mismatches, 2 when
it cannot run (an unreadable file, a backend whose space lacks the case: one line on stderr).
``case``: print (or save) case ``--index`` of ``--seed`` for one op, to inspect the generator.
``merge``: combine the JSON reports of the shards of one run (``--shard i/n`` or ``--shard auto``) into one table
and one exit code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

import numpy as np

__all__ = ["main", "entry", "parse_budget", "shard_from_env"]


def parse_budget(s: str) -> float:
    """``"60s"``, ``"2m"``, ``"1h"``, ``"90"`` -> seconds (more than 0)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad budget {s!r} (use e.g. 60s, 5m, 1h)")
    v = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if not v > 0:
        raise argparse.ArgumentTypeError(f"bad budget {s!r}: it must be more than 0 (use e.g. 60s, 5m, 1h)")
    return v


#: the launcher variables ``--shard auto`` reads, in this order
SHARD_VARIABLES = ("RANK and WORLD_SIZE (torchrun), SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm job "
                   "array) or SLURM_PROCID and SLURM_NTASKS (srun)")


def shard_from_env(env=None) -> tuple[int, int]:
    """``(i, n)`` for ``--shard auto``: torchrun's RANK / WORLD_SIZE, else a Slurm job array's task (its index in
    the array's range), else srun's SLURM_PROCID / SLURM_NTASKS."""
    env = os.environ if env is None else env

    def num(name: str) -> int:
        try:
            return int(env[name])
        except ValueError:
            raise argparse.ArgumentTypeError(f"--shard auto: {name}={env[name]!r} is not an integer") from None

    if "RANK" in env and "WORLD_SIZE" in env:
        i, n, src = num("RANK"), num("WORLD_SIZE"), "RANK / WORLD_SIZE"
    elif "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        tid, n = num("SLURM_ARRAY_TASK_ID"), num("SLURM_ARRAY_TASK_COUNT")
        lo = num("SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in env else 0
        step = num("SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in env else 1
        i, src = ((tid - lo) // step if step > 0 and (tid - lo) % step == 0 else -1), "SLURM_ARRAY_TASK_ID"
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        i, n, src = num("SLURM_PROCID"), num("SLURM_NTASKS"), "SLURM_PROCID / SLURM_NTASKS"
    else:
        raise argparse.ArgumentTypeError(f"--shard auto needs the variables of a launcher: {SHARD_VARIABLES}; none "
                                         "is set (use --shard i/n)")
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard auto: {src} give shard {i} of {n}, not 0 <= i < n (a job array "
                                         "with gaps? use --shard i/n)")
    return i, n


class _AutoShard(tuple):
    """A shard that ``--shard auto`` took from the launcher's variables."""


def _shard(s: str) -> tuple[int, int]:
    if s == "auto":
        return _AutoShard(shard_from_env())
    m = re.fullmatch(r"(\d+)/(\d+)", s)
    if not m or not (0 <= int(m.group(1)) < int(m.group(2))):
        raise argparse.ArgumentTypeError(f"bad shard {s!r} (use i/n with 0 <= i < n, or auto)")
    return int(m.group(1)), int(m.group(2))


def _int_at_least(lo: int, what: str | None = None):
    """An argparse type: an integer >= ``lo``, refused as ``what`` ("a seed is an integer >= 0, ...") or, without
    one, as the option's value ("must be an integer >= 1, ...")."""
    head = f"{what} is" if what else "must be"

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{head} an integer >= {lo}, got {s!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{head} an integer >= {lo}, got {v}")
        return v

    parse.__name__ = "integer"
    return parse


_positive_int = _int_at_least(1)
_seed = _int_at_least(0, "a seed")
_index = _int_at_least(0, "a case index")


def _seconds(minimum_exclusive: bool):
    """An argparse type: finite seconds, > 0 (``minimum_exclusive``) or >= 0."""
    def parse(s: str) -> float:
        v = float(s)
        if not math.isfinite(v) or (v <= 0 if minimum_exclusive else v < 0):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds {'> 0' if minimum_exclusive else '>= 0'}"
                                             f", got {s}")
        return v

    parse.__name__ = "seconds"
    return parse


def _unwritable(path: str, folder: bool = False) -> str | None:
    """Why ``path`` (a file to write, or with ``folder`` a folder to create or fill) cannot be written, or None: it
    is checked before a run, so that a bad path costs no budget. The check writes a temporary file in the nearest
    existing folder and removes it (permission bits alone pass root everywhere, /proc included); nothing stays."""
    if not path:
        return "an empty path"
    p = os.path.abspath(path)
    if os.path.exists(p):
        if folder != os.path.isdir(p):
            return f"{path} is {'not a folder' if folder else 'a folder'}"
        target = p if folder else os.path.dirname(p)
    else:
        target = os.path.dirname(p)
        while not os.path.exists(target):
            target = os.path.dirname(target)
        if not os.path.isdir(target):
            return f"{path}: {target} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as e:
        return f"{path}: {target} is not writable ({e.strerror or e})"
    return None


def _op_list(s: str) -> list[str]:
    ops = [x for x in s.split(",") if x]
    if not ops:
        raise argparse.ArgumentTypeError(f"names no op: {s!r}")
    return ops


def _device(s: str) -> str:
    if s in ("auto", "cpu", "all", "cuda") or re.fullmatch(r"cuda:\d+", s):
        return "cuda:0" if s == "cuda" else s
    raise argparse.ArgumentTypeError(f"bad device {s!r} (use auto, cpu, all, cuda or cuda:N)")


def _parser() -> argparse.ArgumentParser:
    from .backends import BACKENDS
    from .ops import OPS

    p = argparse.ArgumentParser(prog="python -m conformance", description=(__doc__ or "").replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="fuzz backends against the oracle")
    r.add_argument("--budget", type=parse_budget, default=None,
                   help="wall-clock budget from the first case, more than 0 (default 60s; start-up is not counted; "
                        "--cases replaces it)")
    r.add_argument("--seed", type=_seed, default=0,
                   help="the run's seed: case i of an op is the same for a seed on every machine (default 0)")
    r.add_argument("--ops", type=_op_list, default=None,
                   help=f"comma-separated subset of: {','.join(OPS)}")
    r.add_argument("--device", type=_device, default="auto",
                   help="auto (GPU if usable, else CPU self-conformance), cpu, cuda (cuda:0), cuda:N, all")
    r.add_argument("--backend", action="append", dest="backends", default=None,
                   help=f"backend spec (repeatable): a built-in name ({', '.join(sorted(BACKENDS))}), device:cuda:N "
                        "or module:attr; overrides --device")
    r.add_argument("--shard", type=_shard, default=(0, 1),
                   help="i/n: run only case indices = i mod n; auto: i and n from torchrun (RANK, WORLD_SIZE) or "
                        "Slurm (SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT, SLURM_PROCID / SLURM_NTASKS)")
    r.add_argument("--workers", type=_positive_int, default=None,
                   help="worker processes (default min(cpu_count, 8), and 1 with --cases; at least one per GPU with "
                        "device backends; 1 runs in this process, where a backend that kills the process or hangs "
                        "cannot be caught)")
    r.add_argument("--cases", type=_positive_int, default=None, dest="max_cases",
                   help="run the case indices 0..N-1 of each op (split over shards and workers) instead of a budget")
    r.add_argument("--report", default=None,
                   help="write the JSON report here ({shard} and {nshards} in the path are replaced; with --shard auto "
                        "and more than one shard, a path without {shard} gets -IofN before its suffix)")
    r.add_argument("--artifacts", default="artifacts/conformance",
                   help="where failing cases are saved (default artifacts/conformance; {shard} and {nshards} are "
                        "replaced as in --report)")
    r.add_argument("--shrink-time", type=_seconds(False), default=10.0,
                   help="seconds per failure for shrinking (default 10)")
    r.add_argument("--case-timeout", type=_seconds(True), default=300.0,
                   help="seconds one case (with its shrinking) may take before its worker is killed and the case "
                        "reported as an error (worker processes only; default 300)")
    r.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    r.add_argument("--detail", action="store_true", help="one table row per option value, and the comparison counters")
    rp = sub.add_parser("replay", help="re-run one saved case")
    rp.add_argument("npz", help="a case saved by run (under --artifacts) or by case --save")
    rp.add_argument("--backend", default=None, help="run it on this backend instead of the recorded one")
    c = sub.add_parser("case", help="print one generated case")
    c.add_argument("op", choices=list(OPS))
    c.add_argument("--seed", type=_seed, default=0, help="the run's seed (default 0)")
    c.add_argument("--index", type=_index, default=0, help="the case's index under that seed (default 0)")
    c.add_argument("--backend", default=None, help="apply this backend's option restrictions")
    c.add_argument("--save", default=None, help="save it as .npz (replayable with --backend)")
    m = sub.add_parser("merge", help="combine the JSON reports of a run's shards")
    m.add_argument("reports", nargs="+", metavar="REPORT", help="run --report files, one per shard")
    m.add_argument("--detail", action="store_true", help="one table row per option value, and the comparison counters")
    m.add_argument("--report", default=None, help="write the merged JSON report here")
    return p


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _outside_space(case, backend) -> str:
    """The case's options that lie outside ``backend``'s generator space for the case's op, as ``"options a=..., b=..."``
    (empty when none). Only space keys that are also option names are compared (``rule``, ``block``, ``rht``, the
    4over6 keys, ...; an option the case does not record counts as its default, and ``rht_signs`` as its kind,
    "default" or "random"): the others restrict how values and sizes are drawn, which a saved case no longer shows."""
    from oracle.rht import DEFAULT_RHT_SIGNS

    from .cases import TE_VARIANT_DEFAULTS
    from .runner import case_space

    def norm(v):
        return [norm(e) for e in v] if isinstance(v, (list, tuple)) else v

    def drawn(k, v):  # the value as the space lists it
        return ("default" if v == DEFAULT_RHT_SIGNS else "random") if k == "rht_signs" else norm(v)

    options = {**TE_VARIANT_DEFAULTS, **case.options}
    bad = [f"{k}={options[k]!r}" for k, allowed in case_space(backend, case.op).items()
           if k in options and isinstance(allowed, (list, tuple)) and drawn(k, options[k]) not in norm(allowed)]
    return f"options {', '.join(bad)}" if bad else ""


def replay(path: str, backend: str | None = None, out=None, err=None) -> int:
    """Re-run a saved case; print the diff; 0 if it now passes, 1 if it still fails, 2 if it cannot run (the reason
    in one line on ``err``, stderr by default): among those reasons, a ``backend`` other than the case's own whose
    space does not hold the case's options (it would run another call and report a false mismatch)."""
    from .backends import make_backend
    from .cases import CaseFileError, load_case
    from .ops import OPS
    from .runner import REFERENCE_RAISED, check_case

    out = out or sys.stdout
    err = err or sys.stderr

    def cannot(why: str) -> int:
        print(f"error: cannot replay {path}: {_one_line(why)}", file=err)
        return 2

    try:
        case, meta, _, _ = load_case(path)
    except CaseFileError as e:
        return cannot(str(e))
    if case.op not in OPS:
        return cannot(f"the case's op {case.op!r} is not an op of this version (known: {','.join(OPS)})")
    own = meta.get("backend_spec") or meta.get("backend")
    spec = backend or own
    if not spec:
        return cannot("the case names no backend (give --backend)")
    try:
        b = make_backend(spec)
    except Exception as e:  # noqa: BLE001
        hint = ""
        if backend is None and ":" not in spec:  # (a name registered in the saving process: gone in this one)
            hint = ("; a backend registered in the run's process (register_backend) is not known here: give it as "
                    "--backend package.module:attr")
        return cannot(f"backend {spec!r}: {e}{hint}")
    reason = b.available()
    if reason:
        return cannot(f"backend {b.name} is unavailable: {reason}")
    if case.op not in (b.ops or ()):
        return cannot(f"backend {b.name} does not implement op {case.op!r} (its ops: {', '.join(b.ops or ())})")
    # on a backend other than the one the case was drawn (and shrunk) for, its options must lie in that backend's
    # space; the shrinker's simpler options may leave the own backend's space, and such cases still replay there
    outside = _outside_space(case, b) if backend and backend != own else ""
    if outside:
        return cannot(f"the case's {outside} lie outside backend {b.name}'s space (a case drawn for it, "
                      f"`python -m conformance case {case.op} --backend {spec} ...`, replays there)")
    shapes = ", ".join(f"{k}={v.dtype}{list(v.shape)}" for k, v in case.arrays.items())
    print(f"case {case.key()} on {b.name}: {shapes}\noptions: {json.dumps(case.options)}", file=out)
    status, ms, ref, got, error = check_case(b, case)
    if status == "error" and error.startswith(f"{REFERENCE_RAISED} KeyError"):  # an input array is missing
        return cannot(error)
    if status == "pass":
        print("PASS: the backend's outputs match the oracle's", file=out)
        return 0
    print(f"{status.upper()}" + (f": {error}" if error else ""), file=out)
    for m in ms:
        print(f"  {m}", file=out)
    if status == "mismatch":
        from .diagnosis import failure_hypotheses

        for line in failure_hypotheses(case, got or {}, ref or {}):
            print(f"  diagnose: {line}", file=out)
    return 1


def _show_case(args) -> int:
    from .backends import BackendSpecError, make_backend
    from .cases import save_case
    from .generators import generate
    from .ops import OPS
    from .runner import backend_spec, case_space

    try:
        b = make_backend(args.backend) if args.backend else None
    except BackendSpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    why = _unwritable(args.save) if args.save is not None else None
    if why:
        print(f"error: cannot save the case: {why}", file=sys.stderr)
        return 2
    if b is not None and args.op not in (b.ops or ()):
        print(f"error: backend {b.name} does not implement op {args.op!r} (its ops: {', '.join(b.ops or ())})",
              file=sys.stderr)
        return 2
    space = case_space(b, args.op) if b else dict(OPS[args.op].space)
    case = generate(args.op, args.seed, args.index, OPS[args.op].generator, space)
    print(f"case {case.key()}\noptions: {json.dumps(case.options)}\ntags: {json.dumps(case.tags)}")
    for k, v in case.arrays.items():
        with np.printoptions(threshold=40, edgeitems=3):
            print(f"{k}: {v.dtype}{list(v.shape)}\n{v}")
    if args.save is not None:
        save_case(args.save, case, backend=b.name if b else "", extra=dict(backend_spec=backend_spec(b) if b else None))
        print(f"saved {args.save}")
    return 0


def merge(paths: list[str], detail: bool = False, report: str | None = None, out=None, err=None) -> int:
    """``merge``: one table and one exit code for the shard reports ``paths`` (0 only when every shard ran cases,
    none is missing and nothing mismatched or raised; 1 on a mismatch or error; 2 otherwise)."""
    from .report import ReportError, merge_reports, read_report, write_json

    out = out or sys.stdout
    err = err or sys.stderr
    why = _unwritable(report) if report is not None else None
    if why is None and report is not None and any(_same_path(report, p) for p in paths):
        why = f"{report} is one of the reports to merge"
    if why:
        print(f"error: cannot write the merged report: {why}", file=err)
        return 2
    try:
        stats, doc, problems = merge_reports([(p, read_report(p)) for p in paths])
    except ReportError as e:
        print(f"error: {_one_line(e)}", file=err)
        return 2
    commits = {((src.get("run") or {}).get("project") or {}).get("git_commit") for src in doc["merged_from"]}
    if report is not None:
        write_json(report, doc)
    print(stats.summary(detail), file=out)
    if len(commits) > 1:
        print(f"note: the shards ran different commits: {', '.join(sorted(str(c) for c in commits))}", file=err)
    for p in problems:
        print(f"merge: {p}", file=err)
    return doc["exit_code"]


def _same_path(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name the same file (an existing one: the same inode; else the same absolute path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _process_start() -> float:
    """``time.monotonic()`` when this process started (Linux: ``/proc/self/stat``), else now: the start-up that a
    run reports includes the interpreter's and the imports' time."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 600 else now


def _shard_path(path: str | None, shard: tuple[int, int]) -> str | None:
    """``{shard}`` / ``{nshards}`` replaced; with ``--shard auto`` over several shards, a path without ``{shard}``
    gets ``-IofN`` before its suffix (every shard runs the same command line)."""
    if path is None:
        return None
    i, n = shard
    if isinstance(shard, _AutoShard) and n > 1 and "{shard}" not in path:
        root, ext = os.path.splitext(path)
        path = f"{root}-{i}of{n}{ext}"
    return path.replace("{shard}", str(i)).replace("{nshards}", str(n))


_DURATION_OPTIONS = ("--budget", "--shrink-time", "--case-timeout")


def _joined_negative_durations(argv: list[str]) -> list[str]:
    """``--budget -5s`` as ``--budget=-5s``: argparse reads a value that starts with "-" and is not a plain number as an
    option ("expected one argument"); joined, the option's own check names the bad value."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in _DURATION_OPTIONS and i + 1 < len(argv) and argv[i + 1][:1] == "-" and argv[i + 1][1:2].isdigit():
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    started = _process_start() if argv is None else time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(_joined_negative_durations(argv))
    if args.cmd == "replay":
        return replay(args.npz, args.backend)
    if args.cmd == "case":
        return _show_case(args)
    if args.cmd == "merge":
        return merge(args.reports, args.detail, args.report)
    from .ops import OPS
    from .runner import RunConfig, run

    if args.ops:
        unknown = [o for o in args.ops if o not in OPS]
        if unknown:
            print(f"unknown ops {unknown}; known: {','.join(OPS)}", file=sys.stderr)
            return 2
    report = _shard_path(args.report, args.shard)
    artifacts = args.artifacts.replace("{shard}", str(args.shard[0])).replace("{nshards}", str(args.shard[1]))
    for what, why in (("the report", _unwritable(report) if report is not None else None),
                      ("failing cases under --artifacts", _unwritable(artifacts, folder=True)),
                      ("the report", f"{report} is the --artifacts folder"
                       if report and _same_path(report, artifacts) else None)):
        if why:
            print(f"error: cannot write {what}: {why}", file=sys.stderr)
            return 2
    if args.budget is not None and args.max_cases is not None:
        print(f"note: --budget is ignored with --cases (the run ends after case indices 0..{args.max_cases - 1} of "
              "each op)", file=sys.stderr)
    cfg = RunConfig(budget=60.0 if args.budget is None else args.budget, seed=args.seed, ops=args.ops,
                    device=args.device, shard=tuple(args.shard),
                    workers=args.workers, report=report, artifacts=artifacts,
                    backends=args.backends, max_cases=args.max_cases, shrink_time=args.shrink_time,
                    case_timeout=args.case_timeout, progress=not args.no_progress, argv=argv, detail=args.detail,
                    started=started)
    if report != args.report and not args.no_progress:
        print(f"shard {args.shard[0]}/{args.shard[1]}: report {report}", file=sys.stderr)
    from .backends import BackendSpecError

    try:
        code, _ = run(cfg)
    except BackendSpecError as e:  # a backend that cannot be built or lists unknown ops: a usage error
        print(f"error: {e}", file=sys.stderr)
        return 2
    return code


def entry(argv: list[str] | None = None) -> int:
    """``python -m conformance``: :func:`main`, with a reader that goes away (``... | head``) ending the command
    quietly: the rest of the output is dropped (stdout goes to ``os.devnull``) and the exit code is 141 (128 +
    SIGPIPE, as a shell reports a command that a closed pipe stopped)."""
    try:
        code = main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                try:
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, stream.fileno())
                except (OSError, ValueError):
                    pass
        return 141
