"""Command line: ``python -m conformance run ...`` and ``python -m conformance replay CASE.npz``.

``run``: fuzz every usable backend against the oracle for ``--budget`` (default 60s), print a summary table,
write ``--report`` JSON, save shrunk failures under ``--artifacts`` (plus ``failures.jsonl``). Exit 0 only when
at least one case ran and nothing mismatched; 1 on a mismatch or an exception; 2 when nothing ran.
``replay``: re-run one saved case against the current oracle and backend; exit 1 while it still mismatches.
``case``: print (or save) case ``--index`` of ``--seed`` for one op, to inspect the generator.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np

__all__ = ["main", "parse_budget"]


def parse_budget(s: str) -> float:
    """``"60s"``, ``"2m"``, ``"1h"``, ``"90"`` -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad budget {s!r} (use e.g. 60s, 5m, 1h)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _shard(s: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", s)
    if not m or not (0 <= int(m.group(1)) < int(m.group(2))):
        raise argparse.ArgumentTypeError(f"bad shard {s!r} (use i/n with 0 <= i < n)")
    return int(m.group(1)), int(m.group(2))


def _positive_int(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _seed(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {v}")
    return v


def _device(s: str) -> str:
    if s in ("auto", "cpu", "all", "cuda") or re.fullmatch(r"cuda:\d+", s):
        return "cuda:0" if s == "cuda" else s
    raise argparse.ArgumentTypeError(f"bad device {s!r} (use auto, cpu, all, cuda or cuda:N)")


def _parser() -> argparse.ArgumentParser:
    from .ops import OPS

    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="fuzz backends against the oracle")
    r.add_argument("--budget", type=parse_budget, default=60.0, help="wall-clock budget (default 60s)")
    r.add_argument("--seed", type=_seed, default=0)
    r.add_argument("--ops", type=lambda s: [x for x in s.split(",") if x], default=None,
                   help=f"comma-separated subset of: {','.join(OPS)}")
    r.add_argument("--device", type=_device, default="auto",
                   help="auto (GPU if usable, else CPU self-conformance), cpu, cuda:N, all")
    r.add_argument("--backend", action="append", dest="backends", default=None,
                   help="backend spec (repeatable): a built-in name, device:cuda:N or module:attr; overrides --device")
    r.add_argument("--shard", type=_shard, default=(0, 1), help="i/n: run only case indices = i mod n")
    r.add_argument("--workers", type=_positive_int, default=None,
                   help="worker processes (default min(cpu_count, 8); 1 runs in this process, where a backend that "
                        "kills the process or hangs cannot be caught)")
    r.add_argument("--cases", type=_positive_int, default=None, dest="max_cases",
                   help="stop after this many cases per op and worker (deterministic runs)")
    r.add_argument("--report", default=None, help="write the JSON report here")
    r.add_argument("--artifacts", default="artifacts/conformance", help="where failing cases are saved")
    r.add_argument("--shrink-time", type=float, default=10.0, help="seconds per failure for shrinking")
    r.add_argument("--case-timeout", type=float, default=300.0,
                   help="seconds one case (with its shrinking) may take before its worker is killed and the case "
                        "reported as an error (worker processes only; default 300)")
    r.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    rp = sub.add_parser("replay", help="re-run one saved case")
    rp.add_argument("npz")
    rp.add_argument("--backend", default=None, help="run it on this backend instead of the recorded one")
    c = sub.add_parser("case", help="print one generated case")
    c.add_argument("op", choices=list(OPS))
    c.add_argument("--seed", type=_seed, default=0)
    c.add_argument("--index", type=_seed, default=0)
    c.add_argument("--backend", default=None, help="apply this backend's option restrictions")
    c.add_argument("--save", default=None, help="save it as .npz (replayable with --backend)")
    return p


def replay(path: str, backend: str | None = None, out=None) -> int:
    """Re-run a saved case; print the diff; 0 if it now passes, 1 if it still fails, 2 if it cannot run."""
    from .backends import make_backend
    from .cases import load_case
    from .runner import check_case

    out = out or sys.stdout
    try:
        case, meta, _, _ = load_case(path)
    except (OSError, ValueError, KeyError) as e:
        print(f"cannot load case {path!r}: {type(e).__name__}: {e}", file=out)
        return 2
    spec = backend or meta.get("backend_spec") or meta["backend"]
    try:
        b = make_backend(spec)
    except Exception as e:  # noqa: BLE001
        print(f"cannot build backend {spec!r}: {e}", file=out)
        return 2
    reason = b.available()
    if reason:
        print(f"backend {b.name} unavailable: {reason}", file=out)
        return 2
    if case.op not in (b.ops or ()):
        print(f"backend {b.name} does not implement op {case.op!r} (its ops: {', '.join(b.ops or ())})", file=out)
        return 2
    shapes = ", ".join(f"{k}={v.dtype}{list(v.shape)}" for k, v in case.arrays.items())
    print(f"case {case.key()} on {b.name}: {shapes}\noptions: {json.dumps(case.options)}", file=out)
    status, ms, _, _, err = check_case(b, case)
    if status == "pass":
        print("PASS: the case no longer mismatches", file=out)
        return 0
    print(f"{status.upper()}" + (f": {err}" if err else ""), file=out)
    for m in ms:
        print(f"  {m}", file=out)
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
    space = case_space(b, args.op) if b else dict(OPS[args.op].space)
    case = generate(args.op, args.seed, args.index, OPS[args.op].generator, space)
    print(f"case {case.key()}\noptions: {json.dumps(case.options)}\ntags: {json.dumps(case.tags)}")
    for k, v in case.arrays.items():
        with np.printoptions(threshold=40, edgeitems=3):
            print(f"{k}: {v.dtype}{list(v.shape)}\n{v}")
    if args.save:
        save_case(args.save, case, backend=b.name if b else "", extra=dict(backend_spec=backend_spec(b) if b else None))
        print(f"saved {args.save}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.cmd == "replay":
        return replay(args.npz, args.backend)
    if args.cmd == "case":
        return _show_case(args)
    from .ops import OPS
    from .runner import RunConfig, run

    if args.ops:
        unknown = [o for o in args.ops if o not in OPS]
        if unknown:
            print(f"unknown ops {unknown}; known: {','.join(OPS)}", file=sys.stderr)
            return 2
    cfg = RunConfig(budget=args.budget, seed=args.seed, ops=args.ops, device=args.device, shard=args.shard,
                    workers=args.workers, report=args.report, artifacts=args.artifacts, backends=args.backends,
                    max_cases=args.max_cases, shrink_time=args.shrink_time, case_timeout=args.case_timeout,
                    progress=not args.no_progress, argv=argv)
    from .backends import BackendSpecError

    try:
        code, _ = run(cfg)
    except BackendSpecError as e:  # a backend that cannot be built or lists unknown ops: a usage error
        print(f"error: {e}", file=sys.stderr)
        return 2
    return code
