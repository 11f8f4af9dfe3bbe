"""Run statistics: the live progress line, the final summary table (per op and option) and the JSON report."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

__all__ = ["Progress", "Stats", "TaskStats"]


@dataclass
class TaskStats:
    """Counters of one (backend, op) pair; ``tags[key][value] = [cases, bad]``; ``extra``: compare counters."""

    backend: str
    op: str
    cases: int = 0
    passed: int = 0
    mismatched: int = 0
    errors: int = 0
    seconds: float = 0.0
    tags: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    indices: list = field(default_factory=list)

    def to_dict(self, with_indices: bool) -> dict:
        """This task's counts, rate and per-option tallies for the JSON report (case indices only if asked)."""
        d = dict(backend=self.backend, op=self.op, cases=self.cases, passed=self.passed, mismatched=self.mismatched,
                 errors=self.errors, seconds=round(self.seconds, 3),
                 cases_per_s=round(self.cases / self.seconds, 2) if self.seconds else None,
                 options={k: {v: dict(cases=c[0], bad=c[1]) for v, c in sorted(vals.items())}
                          for k, vals in sorted(self.tags.items())},
                 extra=self.extra)
        if with_indices:
            d["indices"] = sorted(self.indices)
        return d


class Stats:
    """Aggregates the per-case records the workers send (``kind == "case"``)."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[str, str], TaskStats] = {}
        self.failures: list[dict] = []
        self.skipped: list[dict] = []
        self.started = time.monotonic()

    def add(self, rec: dict) -> None:
        """Account one case record: backend, op, index, status (pass / mismatch / error), seconds, tags, extra."""
        key = (rec["backend"], rec["op"])
        t = self.tasks.setdefault(key, TaskStats(*key))
        t.cases += 1
        t.seconds += rec["seconds"]
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
    def cases(self) -> int:
        """Cases run so far, over every (backend, op) task."""
        return sum(t.cases for t in self.tasks.values())

    @property
    def bad(self) -> int:
        """Cases that mismatched or raised so far."""
        return sum(t.mismatched + t.errors for t in self.tasks.values())

    def totals(self) -> dict:
        """The report's totals: cases, passed, mismatched, errors and skipped ops."""
        ts = self.tasks.values()
        return dict(cases=self.cases, passed=sum(t.passed for t in ts), mismatched=sum(t.mismatched for t in ts),
                    errors=sum(t.errors for t in ts), skipped_ops=len(self.skipped))

    def table(self, per_option: bool = True) -> str:
        """The summary table: one line per (backend, op), then one per option value (columns as wide as their
        longest backend and op names)."""
        names = list(self.tasks) + [(s["backend"], s["op"]) for s in self.skipped]
        wb = max([len("backend")] + [len(b) for b, _ in names])
        wo = max([len("op")] + [len(op) for _, op in names])
        rule = "-" * (wb + wo + 77)
        lines = [f"{'backend':<{wb}} {'op':<{wo}} {'option':<36} {'cases':>7} {'pass':>7} {'mismatch':>8} {'error':>6} "
                 f"{'cases/s':>8}", rule]
        pad = f"{'':<{wb}} {'':<{wo}}"
        for (b, op), t in sorted(self.tasks.items()):
            rate = f"{t.cases / t.seconds:8.1f}" if t.seconds else f"{'-':>8}"
            lines.append(f"{b:<{wb}} {op:<{wo}} {'(all)':<36} {t.cases:>7} {t.passed:>7} {t.mismatched:>8} {t.errors:>6} "
                         f"{rate}")
            if per_option:
                for k, vals in sorted(t.tags.items()):
                    for v, (n, bad) in sorted(vals.items()):
                        lines.append(f"{pad} {(k + '=' + v)[:36]:<36} {n:>7} {n - bad:>7} {bad:>8}")
            if t.extra:
                lines.append(f"{pad} " + ", ".join(f"{k}={v}" for k, v in sorted(t.extra.items())))
        for s in self.skipped:
            lines.append(f"{s['backend']:<{wb}} {s['op']:<{wo}} {'SKIPPED':<36} {s['reason']}")
        tot = self.totals()
        lines.append(rule)
        lines.append(f"total: {tot['cases']} cases, {tot['passed']} passed, {tot['mismatched']} mismatched, "
                     f"{tot['errors']} errors, {len(self.skipped)} skipped ops, {time.monotonic() - self.started:.1f}s")
        return "\n".join(lines)

    def to_json(self, config: dict, exit_code: int) -> dict:
        """The ``--report`` document."""
        with_idx = self.cases <= 20000
        return dict(version=1, config=config, elapsed_s=round(time.monotonic() - self.started, 3),
                    totals=self.totals(), exit_code=exit_code,
                    ops=[t.to_dict(with_idx) for _, t in sorted(self.tasks.items())],
                    skipped=self.skipped, failures=self.failures)

    def write_json(self, path, config: dict, exit_code: int) -> None:
        """Write the JSON report (:meth:`to_json`) to ``path``."""
        with open(path, "w") as f:
            json.dump(self.to_json(config, exit_code), f, indent=1, default=str)
            f.write("\n")


class Progress:
    """A live status line on stderr: rewritten in place on a TTY, else printed at most every ``interval`` s."""

    def __init__(self, stats: Stats, enabled: bool = True, interval: float = 10.0, stream=None):
        self.stats = stats
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.interval = 0.25 if self.tty else interval
        self.last = 0.0

    def update(self, force: bool = False) -> None:
        """Print the status line if the interval has passed (or ``force``): rewritten in place on a TTY."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        el = now - self.stats.started
        n = self.stats.cases
        line = f"[{el:6.1f}s] {n} cases ({n / el if el else 0:.1f}/s), {self.stats.bad} mismatches"
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
