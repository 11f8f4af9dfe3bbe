"""Run statistics: the live progress line, the summary table (per backend and op; per option with ``detail``),
the JSON report (with what identifies the run) and the merge of shard reports."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["Progress", "Stats", "TaskStats", "compress_indices", "expand_indices", "merge_reports",
           "run_identity", "ReportError", "REPORT_VERSION"]

#: the JSON report's format: 2 has ``run`` (what identifies the run), ``startup_s`` and indices as ranges
REPORT_VERSION = 2


def compress_indices(indices) -> dict:
    """Case indices as ``{"count", "step", "ranges"}``: a range ``[first, last]`` covers ``first, first + step, ...,
    last``, where ``step`` is the gcd of the gaps between the sorted indices (a shard ``i/n``'s indices step by
    ``n``); ``[first, last, stride]`` covers ``first, first + stride, ..., last`` (the tail of a run whose workers
    ran different numbers of cases of an op: every W-th index)."""
    idx = sorted(set(int(i) for i in indices))
    step = 0
    for a, b in zip(idx, idx[1:], strict=False):
        step = math.gcd(step, b - a)
    step = step or 1
    ranges: list[list[int]] = []
    k = 0
    while k < len(idx):
        j = k
        while j + 1 < len(idx) and idx[j + 1] - idx[j] == step:
            j += 1
        if j == k and k + 2 < len(idx):  # a lone index: the start of a wider stride?
            stride = idx[k + 1] - idx[k]
            while j + 1 < len(idx) and idx[j + 1] - idx[j] == stride:
                j += 1
            if j - k >= 2:
                ranges.append([idx[k], idx[j], stride])
                k = j + 1
                continue
            j = k
        ranges.append([idx[k], idx[j]])
        k = j + 1
    return dict(count=len(idx), step=step, ranges=ranges)


def expand_indices(d) -> list[int]:
    """The indices of :func:`compress_indices`'s dict (or of a plain list, as a version 1 report has them)."""
    if d is None:
        return []
    if isinstance(d, list):
        return [int(i) for i in d]
    step = int(d.get("step", 1)) or 1
    return [i for r in d["ranges"] for i in range(int(r[0]), int(r[1]) + 1, int(r[2]) if len(r) > 2 else step)]


@dataclass
class TaskStats:
    """Counters of one (backend, op) pair; ``tags[key][value] = [cases, bad]``; ``extra``: compare counters;
    ``indices``: the case indices run (None where a report did not list them)."""

    backend: str
    op: str
    cases: int = 0
    passed: int = 0
    mismatched: int = 0
    errors: int = 0
    seconds: float = 0.0
    tags: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    indices: list | None = field(default_factory=list)

    def to_dict(self) -> dict:
        """This task's counts, rate, per-option tallies and case indices (as ranges) for the JSON report."""
        d = dict(backend=self.backend, op=self.op, cases=self.cases, passed=self.passed, mismatched=self.mismatched,
                 errors=self.errors, seconds=round(self.seconds, 3),
                 cases_per_s=round(self.cases / self.seconds, 2) if self.seconds else None,
                 options={k: {v: dict(cases=c[0], bad=c[1]) for v, c in sorted(vals.items())}
                          for k, vals in sorted(self.tags.items())},
                 extra=self.extra)
        if self.indices is not None:
            d["indices"] = compress_indices(self.indices)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TaskStats:
        """The inverse of :meth:`to_dict` (a report's ``ops`` entry)."""
        tags = {k: {v: [c["cases"], c["bad"]] for v, c in vals.items()} for k, vals in (d.get("options") or {}).items()}
        return cls(d["backend"], d["op"], int(d["cases"]), int(d["passed"]), int(d["mismatched"]), int(d["errors"]),
                   float(d.get("seconds") or 0.0), tags, dict(d.get("extra") or {}),
                   expand_indices(d["indices"]) if "indices" in d else None)

    def absorb(self, o: TaskStats) -> None:
        """Add another part of the same (backend, op) task (a shard's) to this one."""
        self.cases += o.cases
        self.passed += o.passed
        self.mismatched += o.mismatched
        self.errors += o.errors
        self.seconds += o.seconds
        for k, vals in o.tags.items():
            for v, (n, bad) in vals.items():
                c = self.tags.setdefault(k, {}).setdefault(v, [0, 0])
                c[0] += n
                c[1] += bad
        for k, v in o.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        self.indices = None if self.indices is None or o.indices is None else self.indices + o.indices


class Stats:
    """Aggregates the per-case records the workers send (``kind == "case"``).

    ``started``: when the command started (``time.monotonic()``); ``first_case``: when the first case started (the
    budget counts from there; what comes before is the start-up: imports, backend set-up, extension builds).
    """

    def __init__(self, started: float | None = None) -> None:
        self.tasks: dict[tuple[str, str], TaskStats] = {}
        self.failures: list[dict] = []
        self.skipped: list[dict] = []
        self.started = time.monotonic() if started is None else started
        self.clock = None  # an object whose get() gives the first case's start (the runner's budget clock)
        self.no_case_reason: str | None = None
        self.shards: int | None = None  # a merge of this many shard reports
        self.shard: tuple[int, int] | None = None  # the run's shard i/n
        self._fixed: tuple[float, float] | None = None  # (elapsed, start-up) of a report read back

    def add(self, rec: dict) -> None:
        """Account one case record: backend, op, index, status (pass / mismatch / error), seconds, tags, extra."""
        key = (rec["backend"], rec["op"])
        t = self.tasks.setdefault(key, TaskStats(*key))
        t.cases += 1
        t.seconds += rec["seconds"]
        if t.indices is not None:
            t.indices.append(rec["index"])
        bad = rec["status"] != "pass"
        if rec["status"] == "pass":
            t.passed += 1
        elif rec["status"] == "mismatch":
            t.mismatched += 1
        else:
            t.errors += 1
        for k, v in rec.get("tags", {}).items():
            c = t.tags.setdefault(k, {}).setdefault(str(v), [0, 0])
            c[0] += 1
            c[1] += int(bad)
        for k, v in rec.get("extra", {}).items():
            t.extra[k] = t.extra.get(k, 0) + v
        if bad and rec.get("failure"):
            self.failures.append(rec["failure"])

    @property
    def first_case(self) -> float | None:
        """When the first case started (``time.monotonic()``; None before it, or for a report read back)."""
        return self.clock.get() if self.clock is not None else None

    @property
    def cases(self) -> int:
        """Cases run so far, over every (backend, op) task."""
        return sum(t.cases for t in self.tasks.values())

    @property
    def mismatched(self) -> int:
        """Cases that mismatched so far."""
        return sum(t.mismatched for t in self.tasks.values())

    @property
    def errors(self) -> int:
        """Cases that raised so far."""
        return sum(t.errors for t in self.tasks.values())

    @property
    def bad(self) -> int:
        """Cases that mismatched or raised so far."""
        return self.mismatched + self.errors

    @property
    def startup_s(self) -> float | None:
        """Seconds from the command's start to the first case (None while no case has started)."""
        if self._fixed is not None:
            return self._fixed[1]
        return None if self.first_case is None else max(0.0, self.first_case - self.started)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the command started (start-up included)."""
        return self._fixed[0] if self._fixed is not None else time.monotonic() - self.started

    @property
    def running_s(self) -> float:
        """Seconds since the first case started (the part the budget counts)."""
        return max(0.0, self.elapsed_s - (self.startup_s if self.startup_s is not None else self.elapsed_s))

    def totals(self) -> dict:
        """The report's totals: cases, passed, mismatched, errors and skipped ops."""
        ts = self.tasks.values()
        return dict(cases=self.cases, passed=sum(t.passed for t in ts), mismatched=self.mismatched,
                    errors=self.errors, skipped_ops=len(self.skipped))

    def table(self, detail: bool = False) -> str:
        """The summary table: one row per (backend, op) (cases, pass, mismatch, error, cases/s), the skipped ops and
        a total line; ``detail`` adds an option column with one row per option value and the comparison counters.
        Columns are as wide as their longest backend and op names."""
        names = list(self.tasks) + [(s["backend"], s["op"]) for s in self.skipped]
        wb = max([len("backend")] + [len(b) for b, _ in names])
        wo = max([len("op")] + [len(op) for _, op in names])
        labels = [f"{k}={v}" for t in self.tasks.values() for k, vals in t.tags.items() for v in vals]
        wopt = max([36] + [len(x) for x in labels]) if detail else 0  # (as wide as the longest option label)
        opt = f" {'option':<{wopt}}" if detail else ""
        rule = "-" * (wb + wo + 41 + (wopt + 1 if detail else 0))
        lines = [f"{'backend':<{wb}} {'op':<{wo}}{opt} {'cases':>7} {'pass':>7} {'mismatch':>8} {'error':>6} "
                 f"{'cases/s':>8}", rule]
        pad = f"{'':<{wb}} {'':<{wo}}"
        for (b, op), t in sorted(self.tasks.items()):
            rate = f"{t.cases / t.seconds:8.1f}" if t.seconds else f"{'-':>8}"
            all_ = f" {'(all)':<{wopt}}" if detail else ""
            lines.append(f"{b:<{wb}} {op:<{wo}}{all_} {t.cases:>7} {t.passed:>7} {t.mismatched:>8} {t.errors:>6} "
                         f"{rate}")
            if not detail:
                continue
            for k, vals in sorted(t.tags.items()):
                for v, (n, bad) in sorted(vals.items()):
                    lines.append(f"{pad} {k + '=' + v:<{wopt}} {n:>7} {n - bad:>7} {bad:>8}")
            if t.extra:
                lines.append(f"{pad} " + ", ".join(f"{k}={v}" for k, v in sorted(t.extra.items())))
        for s in self.skipped:
            lines.append(f"{s['backend']:<{wb}} {s['op']:<{wo}} SKIPPED: {s['reason']}")
        tot = self.totals()
        lines.append(rule)
        su = self.startup_s
        when = f"{self.running_s:.1f}s" + (f" + {su:.1f}s start-up" if su is not None else "")
        shards = f", {self.shards} shard{'s' if self.shards != 1 else ''}" if self.shards else ""
        if self.shard is not None and self.shard[1] > 1:
            shards = f", shard {self.shard[0]}/{self.shard[1]}"
        lines.append(f"total: {tot['cases']} cases, {tot['passed']} passed, {tot['mismatched']} mismatched, "
                     f"{tot['errors']} errors, {len(self.skipped)} skipped ops{shards}, {when}")
        return "\n".join(lines)

    def summary(self, detail: bool = False, fail_log=None, max_failures: int = 20) -> str:
        """The table, then the first ``max_failures`` failures with their replay commands."""
        lines = [self.table(detail)]
        for n, f in enumerate(self.failures):
            if n == max_failures:
                where = f" in {fail_log}" if fail_log else ""
                lines.append(f"... {len(self.failures) - max_failures} more failures{where}")
                break
            at = f"seed={f['seed']} index={f['index']}" if "seed" in f else "(worker crash)"
            what = f.get("replay") or f.get("error") or "; ".join(f.get("mismatch_text", [])[:1])
            if f.get("replay") and f.get("error") and f["replay"].startswith("python -m conformance case"):
                what = f"{f['error']}\n  reproduce: {f['replay']}"  # a lost case: why, and how to rebuild it
            lines.append(f"FAILED {f['op']} [{f['backend']}] {at}: {what}")
        return "\n".join(lines)

    def to_json(self, config: dict, exit_code: int, run: dict | None = None) -> dict:
        """The ``--report`` document."""
        su = self.startup_s
        doc = dict(version=REPORT_VERSION, run=run or {}, config=config, elapsed_s=round(self.elapsed_s, 3),
                   startup_s=None if su is None else round(su, 3), totals=self.totals(), exit_code=exit_code,
                   no_case_reason=self.no_case_reason,
                   ops=[t.to_dict() for _, t in sorted(self.tasks.items())], skipped=self.skipped,
                   failures=self.failures)
        return doc

    def write_json(self, path, config: dict, exit_code: int, run: dict | None = None) -> None:
        """Write the JSON report (:meth:`to_json`) to ``path``."""
        write_json(path, self.to_json(config, exit_code, run))

    @classmethod
    def from_report(cls, doc: dict) -> Stats:
        """The statistics of a JSON report (:meth:`to_json`, version 1 or 2)."""
        st = cls()
        for d in doc.get("ops") or []:
            t = TaskStats.from_dict(d)
            st.tasks[(t.backend, t.op)] = t
        st.failures = list(doc.get("failures") or [])
        st.skipped = list(doc.get("skipped") or [])
        st.no_case_reason = doc.get("no_case_reason")
        st._fixed = (float(doc.get("elapsed_s") or 0.0), doc.get("startup_s"))
        return st


def write_json(path, doc: dict) -> None:
    """Write ``doc`` as indented JSON (creating the folder)."""
    path = Path(path)
    if path.parent != Path("."):
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")


# ---------------------------------------------------------------------------------------------------------------
# what identifies a run
# ---------------------------------------------------------------------------------------------------------------

def _version(dist: str, module: str) -> str | None:
    """The installed version of ``dist`` when ``module`` is importable (not imported: torch takes seconds)."""
    import importlib.metadata
    import importlib.util

    mod = sys.modules.get(module)
    try:
        if mod is None and importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        v = getattr(mod, "__version__", None) if mod is not None else None
        return str(v) if v is not None else None


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def project_identity() -> dict:
    """The project's git commit (when the package is in its checkout; ``git_dirty``: tracked files changed) and the
    installed package version (``nvfp4-oracle``; null when not installed)."""
    import importlib.metadata

    pkg = Path(__file__).resolve().parent
    commit = dirty = None
    top = _git(["rev-parse", "--show-toplevel"], pkg)
    if top and Path(top).resolve() == pkg.parent:
        commit = _git(["rev-parse", "HEAD"], pkg)
        status = _git(["status", "--porcelain", "--untracked-files=no"], pkg)
        dirty = None if status is None else bool(status)
    try:
        version = importlib.metadata.version("nvfp4-oracle")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return dict(git_commit=commit, git_dirty=dirty, package_version=version)


def _cuda_identity(gpus: list[str]) -> dict:
    """CUDA runtime (torch's), driver version and GPU names of the ``cuda:N`` devices used (null without them)."""
    out: dict = dict(cuda_runtime=None, cuda_driver=None, gpus=None)
    if not gpus:
        return out
    torch = sys.modules.get("torch")
    try:
        if torch is None:
            import torch  # noqa: PLC0415
        out["cuda_runtime"] = torch.version.cuda
        out["gpus"] = [torch.cuda.get_device_name(int(g.split(":")[1])) for g in gpus]
    except Exception:  # noqa: BLE001,S110 -- null where it cannot be told
        pass
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0 and r.stdout.strip():
            out["cuda_driver"] = r.stdout.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def run_identity(*, seed: int, shard, max_cases, budget, gpus: list[str] | None = None,
                 argv: list[str] | None = None) -> dict:
    """The report's ``run`` entry: the command line, seed, shard, case cap, budget, host, start time, the project's
    commit or version and the versions of Python, numpy, torch, torchao, ml_dtypes, mmasim and (when a GPU is used)
    CUDA (null for what is absent)."""
    import numpy as np

    cmd = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    versions = dict(python=platform.python_version(), numpy=np.__version__, torch=_version("torch", "torch"),
                    torchao=_version("torchao", "torchao"), ml_dtypes=_version("ml_dtypes", "ml_dtypes"),
                    mmasim=_version("mmasim", "mmasim"))
    versions.update(_cuda_identity(list(gpus or [])))
    return dict(command=shlex.join(cmd), argv=list(argv) if argv is not None else None, seed=seed,
                shard=list(shard) if shard is not None else None, max_cases=max_cases, budget_s=budget,
                host=platform.node(), pid=os.getpid(),
                started_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                project=project_identity(), versions=versions)


# ---------------------------------------------------------------------------------------------------------------
# merging shard reports
# ---------------------------------------------------------------------------------------------------------------

class ReportError(ValueError):
    """Reports that cannot be read or merged; the message says which and why (one line)."""


def read_report(path) -> dict:
    """A JSON report written by ``run --report`` (or ``merge --report``)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportError(f"{path}: a directory, not a report") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a JSON report (binary content)") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read it ({e})") from None
    except ValueError as e:
        raise ReportError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict) or not isinstance(doc.get("ops"), list):
        raise ReportError(f"{path}: not a conformance report (no 'config' and 'ops')")
    if doc.get("version", 1) not in range(1, REPORT_VERSION + 1):
        raise ReportError(f"{path}: report version {doc.get('version')!r}; this reader knows versions 1 to "
                          f"{REPORT_VERSION}")
    return doc


def _shard_of(doc: dict):
    s = doc["config"].get("shard")
    return tuple(s) if isinstance(s, (list, tuple)) and len(s) == 2 else None


def merge_reports(docs: list[tuple[str, dict]]) -> tuple[Stats, dict, list[str]]:
    """Merge shard reports of one campaign: ``(stats, merged report, problems)``.

    The reports must share the seed, the case cap (``--cases``), the ops and the backends (a GPU backend's device
    number aside: each shard may run on its own GPU) and split the case space the same way (one shard count, no shard
    twice): :class:`ReportError` otherwise. ``problems`` lists what makes the merge incomplete
    (missing shards, a shard whose own exit code was 2).
    """
    if not docs:
        raise ReportError("no reports to merge")
    def backends(config: dict) -> list:  # device:cuda:N -> device:cuda
        return sorted({re.sub(r"^device:cuda:\d+$", "device:cuda", b) for b in config.get("backends_used") or []})

    for key, what, value in (("seed", "seeds", lambda c: c.get("seed")),
                             ("max_cases", "case caps (--cases)", lambda c: c.get("max_cases")),
                             ("ops", "op lists (--ops)", lambda c: sorted(c["ops"]) if c.get("ops") else None),
                             ("backends", "backends", backends)):
        vals = {}
        for path, doc in docs:
            vals.setdefault(json.dumps(value(doc["config"])), []).append(path)
        if len(vals) > 1:
            listing = "; ".join(f"{key}={v}: {', '.join(ps)}" for v, ps in vals.items())
            raise ReportError(f"cannot merge reports of different {what}: {listing}")
    shards: dict[int, str] = {}
    of = [(path, _shard_of(doc)) for path, doc in docs]
    for path, s in of:
        if s is None:
            raise ReportError(f"{path}: no shard i/n in its config (an incomplete merge cannot be merged again)")
    counts = {s[1] for _, s in of}
    if len(counts) > 1:  # (before the duplicates: shard 0/2 and 0/1 are not the same shard twice)
        listing = "; ".join(f"{path}: {s[0]}/{s[1]}" for path, s in of)
        raise ReportError(f"cannot merge shards of different shard counts ({listing}): they do not partition one "
                          "case space")
    for path, s in of:
        if s[0] in shards:
            raise ReportError(f"shard {s[0]}/{s[1]} appears twice: {shards[s[0]]} and {path}")
        shards[s[0]] = path
    (n,) = counts
    problems = []
    missing = [i for i in range(n) if i not in shards]
    if missing:
        problems.append(f"incomplete: no report for shard{'s' if len(missing) > 1 else ''} "
                        + ", ".join(f"{i}/{n}" for i in missing))
    merged = Stats()
    merged.shards = len(docs)
    skipped_seen = set()
    elapsed = startup = 0.0
    for path, doc in docs:
        try:
            st = Stats.from_report(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ReportError(f"{path}: a malformed report ({type(e).__name__}: {e})") from None
        for key, t in st.tasks.items():
            if key in merged.tasks:
                merged.tasks[key].absorb(t)
            else:
                merged.tasks[key] = t
        merged.failures += st.failures
        for s in st.skipped:
            k = json.dumps(s, sort_keys=True)
            if k not in skipped_seen:
                skipped_seen.add(k)
                merged.skipped.append(s)
        elapsed = max(elapsed, st.elapsed_s)
        startup = max(startup, st.startup_s or 0.0)
        if doc.get("exit_code") == 2:
            problems.append(f"{path}: shard {_shard_of(doc)[0]}/{n} ran no case"
                            + (f" ({doc['no_case_reason']})" if doc.get("no_case_reason") else ""))
    merged._fixed = (elapsed, startup)
    code = 1 if merged.bad else (2 if problems or merged.cases == 0 else 0)
    first = docs[0][1]
    config = dict(first["config"])
    config["shard"] = [0, 1] if not missing else None
    sources = [dict(report=path, shard=list(_shard_of(doc)), exit_code=doc.get("exit_code"), totals=doc.get("totals"),
                    run=doc.get("run")) for path, doc in sorted(docs, key=lambda pd: _shard_of(pd[1]))]
    run = dict(command=shlex.join(list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])),
               seed=config.get("seed"), max_cases=config.get("max_cases"), shards=n,
               started_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), project=project_identity())
    doc = merged.to_json(config, code, run)
    doc["merged_from"] = sources
    doc["problems"] = problems
    return merged, doc, problems


# ---------------------------------------------------------------------------------------------------------------
# progress
# ---------------------------------------------------------------------------------------------------------------

class Progress:
    """A live status line on stderr: rewritten in place on a TTY, else printed at most every ``interval`` s.

    It shows the time since the first case against the budget (``--cases N`` instead when capped), the op of the
    latest case, the cases so far (and their rate) and the mismatches and errors so far.
    """

    def __init__(self, stats: Stats, enabled: bool = True, interval: float = 10.0, stream=None,
                 budget: float | None = None, max_cases: int | None = None):
        self.stats = stats
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.interval = 0.25 if self.tty else interval
        self.last = 0.0
        self.budget = budget
        self.max_cases = max_cases
        self.op: str | None = None  # the op of the latest case started or finished

    def line(self) -> str:
        """The status text."""
        st = self.stats
        if st.first_case is None:
            return f"[start-up {time.monotonic() - st.started:5.1f}s] loading backends, no case yet"
        el = time.monotonic() - st.first_case
        limit = f"--cases {self.max_cases}" if self.max_cases is not None else (
            f"{self.budget:g}s" if self.budget is not None else "-")
        n = st.cases
        errs = f", {st.errors} errors" if st.errors else ""
        return (f"[{el:6.1f}s / {limit}] {self.op or '-'}: {n} cases ({n / el if el > 0 else 0:.1f}/s), "
                f"{st.mismatched} mismatches{errs}")

    def update(self, force: bool = False) -> None:
        """Print the status line if the interval has passed (or ``force``): rewritten in place on a TTY."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        line = self.line()
        if self.tty:
            self.stream.write("\r" + line + "   ")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the in-place status line."""
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
