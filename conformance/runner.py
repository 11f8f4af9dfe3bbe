"""Scheduling: which backends and ops run, the case index space (seed, shards, workers), budgets,
worker processes, failure shrinking and saving.

Case indices: shard ``i/n``, worker ``w`` of ``W``, the j-th case of an op gets index ``i + n * (w + W * j)``,
so shards and workers partition the index space of each op and every case is rebuilt from
``(op, seed, index)`` and the backend's option space (see :func:`conformance.generators.generate`). A case cap
(``max_cases = N``) runs the
indices ``0 .. N-1`` of each op, whatever the shards and workers.

The budget counts from the first case: the start-up before it (imports, backend set-up, extension builds) is
reported, not spent.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import queue as queue_mod
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import backends as B
from .cases import Case, case_size, save_case
from .compare import Mismatch, compare
from .diagnosis import failure_hypotheses
from .generators import SPACE_KEYS, generate
from .ops import OPS, reference
from .report import Progress, Stats, run_identity
from .shrink import shrink

__all__ = ["RunConfig", "run", "check_case", "select_backends", "case_space"]


@dataclass
class RunConfig:
    """Options of a conformance run: ``python -m conformance run``'s (:mod:`conformance.cli`), for :func:`run`.

    Attributes:
        budget: wall-clock seconds from the first case (``--budget``, which also takes "60s" / "5m").
        seed: the run's seed; ops: the ops to run (None: every op a selected backend offers).
        device: "auto", "cpu", "cuda", "cuda:N" or "all" (``--device``); backends: backend specs
            (``--backend``, which override ``device``; None: the device's backends).
        shard: ``(i, n)``: only the case indices equal to i mod n.
        workers: worker processes (None: ``min(cpu_count, 8)``, 1 with ``max_cases``; at least one per GPU with
            device backends; 1 runs in this process).
        report: the JSON report's path (None: none); artifacts: the folder failing cases are saved in. ``{shard}`` /
            ``{nshards}`` in them are replaced by the command line, not here.
        max_cases: run the case indices 0 .. N-1 of each op instead of a budget (``--cases``).
        shrink_time: seconds per failure for shrinking; case_timeout: seconds one case (with its shrinking) may take
            in a worker process before the worker is killed and the case reported as an error.
        progress: the progress line on stderr (``--no-progress`` clears it); detail: the summary table's per-option
            rows and the comparison counters (``--detail``).
        argv: the command line, recorded in the report; started: when the command started (``time.monotonic()``;
            None: when :func:`run` is called), so that the report's times include start-up.
    """

    budget: float = 60.0
    seed: int = 0
    ops: list[str] | None = None
    device: str = "auto"
    shard: tuple[int, int] = (0, 1)
    workers: int | None = None
    report: str | None = None
    artifacts: str = "artifacts/conformance"
    backends: list[str] | None = None
    max_cases: int | None = None
    shrink_time: float = 10.0
    case_timeout: float = 300.0
    progress: bool = True
    argv: list[str] = field(default_factory=list)
    detail: bool = False  # the summary table's per-option rows
    started: float | None = None  # when the command started (time.monotonic()); None: when run() is called


class _LocalClock:
    """When the first case started (the budget counts from there): one process."""

    def __init__(self) -> None:
        self.t0: float | None = None

    def start(self) -> float:
        """The first case's start, set now by the first caller."""
        if self.t0 is None:
            self.t0 = time.monotonic()
        return self.t0

    def get(self) -> float | None:
        return self.t0


class _SharedClock(_LocalClock):
    """The same over worker processes: a shared double (0: not yet), set once under its lock (the monotonic clock
    is system-wide on the platforms that fork or spawn these workers)."""

    def __init__(self, value) -> None:
        self.value = value

    def start(self) -> float:
        with self.value.get_lock():
            if self.value.value == 0.0:
                self.value.value = time.monotonic()
            return self.value.value

    def get(self) -> float | None:
        return self.value.value or None


def _deadline(cfg: RunConfig, t0: float) -> float:
    """The end of the budget that starts at ``t0``, less a little for the joins and the table."""
    return t0 + cfg.budget - min(2.0, 0.03 * cfg.budget)


def case_space(backend: B.Backend, op: str) -> dict:
    """The generator space of ``op`` for ``backend``: the op's base space updated by the backend's restrictions
    (keys of :data:`conformance.generators.SPACE_KEYS` only)."""
    own = backend.space(op) or {}
    unknown = sorted(set(own) - SPACE_KEYS)
    if unknown:
        raise B.BackendSpecError(f"backend {backend.name}: space({op!r}) has unknown keys {unknown}; known: "
                                 f"{', '.join(sorted(SPACE_KEYS))}")
    return {**OPS[op].space, **own}


def check_case(backend: B.Backend, case: Case, stats: dict | None = None) -> tuple[str, list[Mismatch], dict, dict, str]:
    """Run reference and backend on ``case`` and compare.

    Returns ``(status, mismatches, ref, out, error)``: status "pass", "mismatch" or "error" (an exception in
    the reference or the backend; ``error`` holds its traceback's last line).
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_case(backend, case, stats)


#: the start of check_case's error text when the oracle, not the backend, raised (the case cannot run)
REFERENCE_RAISED = "reference raised"

#: reference entries that are not outputs of the op (the bound a GEMM output is checked against, SPEC 12.4)
_NOT_OUTPUTS = {"bound": ("bound",)}


def _text(e: BaseException) -> str:
    """str(e), or a placeholder where the exception's own __str__ raises."""
    try:
        return str(e)
    except Exception as inner:  # noqa: BLE001
        return f"<str() of the exception raised {type(inner).__name__}>"


def _check_case(backend: B.Backend, case: Case, stats: dict | None):
    ref, out = {}, {}
    try:
        ref = reference(case)
    except Exception as e:  # noqa: BLE001
        return "error", [], ref, out, f"{REFERENCE_RAISED} {type(e).__name__}: {_text(e)}"
    try:
        # the backend gets copies: a kernel that writes into its input must not change the case that is reported,
        # shrunk and saved; what it prints goes to stderr (stdout holds the table, and a closed pipe there must not
        # turn into errors of the backend)
        with contextlib.redirect_stdout(sys.stderr):
            out = backend.run(case.op, case.replace({k: np.array(v, copy=True) for k, v in case.arrays.items()}))
        if not isinstance(out, dict):
            raise TypeError(f"run() returned {type(out).__name__}, not a dict of output arrays")
        mode = OPS[case.op].mode
        keys = [k for k in ref if k not in _NOT_OUTPUTS.get(mode, ())]
        missing = sorted(set(backend.expected_outputs(case.op, case, keys)) - set(out))
        names = ("oracle", backend.name)
        ms = [Mismatch(k, -1, {"op": case.op}, "(present)", "(missing)", *names) for k in missing]
        ms += compare(case, ref, out, mode, stats, names=names)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 -- SystemExit from a backend is an error of the case, too
        try:
            tb = traceback.format_exc().strip().splitlines()[-3:]
        except Exception:  # noqa: BLE001 -- (an exception whose __str__ raises)
            tb = []
        return "error", [], ref, out, f"{backend.name} raised {type(e).__name__}: {_text(e)} | " + " / ".join(tb)
    return ("mismatch" if ms else "pass"), ms, ref, out, ""


_RAISED = re.compile(r"(\S+) raised (\w+)")  # check_case's error text: "<who> raised <exception type>: ..."


def _signature(status: str, ms: list[Mismatch], err: str) -> frozenset | None:
    """What a failure is, for shrinking (a smaller case must fail the same way) and for the saved-case cap: the set
    of mismatching buffers, or who raised which exception type (a backend name may hold colons: device:cuda:0)."""
    if status == "pass":
        return None
    if status == "error":
        m = _RAISED.match(err)
        return frozenset({"error:" + (f"{m.group(1)} {m.group(2)}" if m else err.split(":")[0])})
    return frozenset(m.buffer for m in ms)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


def backend_spec(b: B.Backend) -> str:
    """The string that rebuilds ``b`` through :func:`conformance.backends.make_backend`."""
    return getattr(b, "spec", None) or b.name


def _handle_failure(b: B.Backend, case: Case, status, ms, ref, out, err, cfg: RunConfig, hard_deadline: float) -> dict:
    """Shrink a failing case, save the original and the shrunk case, return the failure record."""
    def fails(c: Case):
        st, m2, *_rest = check_case(b, c)
        return _signature(st, m2, _rest[-1])

    t0 = time.monotonic()
    small, tried = shrink(case, fails, deadline=min(hard_deadline, t0 + cfg.shrink_time))
    s_status, s_ms, s_ref, s_out, s_err = check_case(b, small)
    if s_status == "pass":  # should not happen; keep the original
        small, s_status, s_ms, s_ref, s_out, s_err = case, status, ms, ref, out, err
    art = Path(cfg.artifacts)
    stem = f"{_safe(case.op)}-{_safe(b.name)}-s{case.seed}-i{case.index}"
    spec = backend_spec(b)
    extra = dict(backend_spec=spec, status=s_status, error=s_err, mismatches=[m.to_dict() for m in s_ms],
                 shrunk_from=list(case_size(case)), size=list(case_size(small)))
    path = save_case(art / f"{stem}.npz", small, backend=b.name, ref=s_ref, out=s_out, extra=extra)
    orig = save_case(art / f"{stem}.orig.npz", case, backend=b.name, ref=ref, out=out,
                     extra=dict(backend_spec=spec, status=status, error=err, mismatches=[m.to_dict() for m in ms]))
    diagnosis = failure_hypotheses(small, s_out, s_ref) if s_status == "mismatch" and s_out and s_ref else []
    return dict(op=case.op, backend=b.name, backend_spec=spec, seed=case.seed, index=case.index, status=s_status,
                error=s_err or err, options=case.options, tags=case.tags,
                mismatches=[m.to_dict() for m in (s_ms or ms)], mismatch_text=[str(m) for m in (s_ms or ms)],
                diagnosis=diagnosis,
                original_size=list(case_size(case)), shrunk_size=list(case_size(small)), shrink_tried=tried,
                shrink_seconds=round(time.monotonic() - t0, 2), npz=str(path), original_npz=str(orig),
                replay=f"python -m conformance replay {path}")


_SAVE_PER_SIGNATURE = 3  # failing cases shrunk and saved per worker, backend, op and set of failing buffers


def _tasks(backends: list[B.Backend], ops: list[str] | None) -> list[tuple[B.Backend, str]]:
    return [(b, op) for b in backends for op in b.ops if op in OPS and (ops is None or op in ops)]


def worker_main(wid: int, nworkers: int, specs: list[str], cfg: RunConfig, clock: _LocalClock,
                emit: Callable[[dict], None], resume: dict | None = None) -> None:
    """One worker: generate, run, compare its share of every task until the budget or ``max_cases`` ends.

    The budget's clock starts with the first case of any worker (``clock``); a worker still setting up by then
    gets the rest of it. ``resume``: (backend name, op) -> the numbers j of this worker's cases of that task that are
    accounted for (a worker started again after its process died skips them; its j-th case has the index
    ``shard_i + shard_n (wid + nworkers j)``)."""
    emit(dict(kind="start", worker=wid, backend="worker", spec="", op=f"worker{wid}", index=-1, seed=cfg.seed,
              t=time.monotonic(), phase="setup"))
    torch = sys.modules.get("torch")  # only when a backend already imported it (importing costs seconds)
    if nworkers > 1 and torch is not None:
        torch.set_num_threads(1)  # one intra-op thread per worker process
    backends = [B.make_backend(s) for s in specs]
    backends = [b for b in backends if b.available() is None]
    tasks = _tasks(backends, cfg.ops)
    for b in backends:  # untimed: not charged to the op that happens to run first
        ops = tuple(op for tb, op in tasks if tb is b)
        if ops:
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    b.warmup(ops)
            except Exception:  # noqa: BLE001,S110 -- the cases report what is wrong with the backend
                pass
    emit(dict(kind="idle", worker=wid))
    si, sn = cfg.shard
    saved: dict = {}  # (backend, op, failure signature) -> cases saved by this worker
    spent = {i: 0.0 for i in range(len(tasks))}
    count = {i: 0 for i in range(len(tasks))}
    skip = {i: set((resume or {}).get((b.name, op), ())) for i, (b, op) in enumerate(tasks)}
    longest = {i: 0.0 for i in range(len(tasks))}
    active = set(spent)
    deadline = _deadline(cfg, clock.start()) if tasks else 0.0
    # shrinking happens inside the budget (a late failure is saved less shrunk); --cases runs are not timed
    hard_deadline = deadline if cfg.max_cases is None else float("inf")
    while active:
        i = min(active, key=lambda t: (spent[t] * OPS[tasks[t][1]].cost ** -0.5, t))
        b, op = tasks[i]
        while count[i] in skip[i]:
            count[i] += 1
        index = si + sn * (wid + nworkers * count[i])
        if cfg.max_cases is not None and index >= cfg.max_cases:
            active.discard(i)
            continue
        now = time.monotonic()
        if cfg.max_cases is None and now + longest[i] > deadline:
            active.discard(i)
            continue
        count[i] += 1
        t0 = time.monotonic()
        try:
            case = generate(op, cfg.seed, index, OPS[op].generator, case_space(b, op))
        except Exception as e:  # noqa: BLE001 -- a generator defect costs this case, not the worker
            err = f"generator raised {type(e).__name__}: {e}"
            emit(dict(kind="case", backend=b.name, op=op, index=index, status="error",
                      seconds=time.monotonic() - t0, tags={},
                      failure=dict(op=op, backend=b.name, seed=cfg.seed, index=index, status="error", error=err)))
            continue
        emit(dict(kind="start", worker=wid, backend=b.name, spec=backend_spec(b), op=op, index=index, seed=cfg.seed,
                  t=time.monotonic()))
        extra: dict = {}
        status, ms, ref, out, err = check_case(b, case, extra)
        dt = time.monotonic() - t0
        spent[i] += dt
        longest[i] = max(longest[i], dt)
        rec = dict(kind="case", worker=wid, backend=b.name, op=op, index=index, status=status, seconds=dt,
                   tags=case.tags, extra=extra)
        sig = (b.name, op, _signature(status, ms, err))
        if status != "pass" and saved.get(sig, 0) >= _SAVE_PER_SIGNATURE:  # enough examples of this failure
            rec["failure"] = dict(op=op, backend=b.name, seed=case.seed, index=index, status=status, error=err,
                                  mismatches=[m.to_dict() for m in ms], mismatch_text=[str(m) for m in ms],
                                  tags=case.tags, backend_spec=backend_spec(b),
                                  replay=_case_command(op, case.seed, index, backend_spec(b)),
                                  note=f"not shrunk or saved: this worker saved {_SAVE_PER_SIGNATURE} cases with "
                                       "the same failing buffers already")
        elif status != "pass":
            saved[sig] = saved.get(sig, 0) + 1
            try:
                rec["failure"] = _handle_failure(b, case, status, ms, ref, out, err, cfg, hard_deadline)
            except Exception as e:  # noqa: BLE001
                rec["failure"] = dict(op=op, backend=b.name, seed=case.seed, index=index, status=status,
                                      error=f"saving failed: {type(e).__name__}: {e}",
                                      mismatch_text=[str(m) for m in ms])
        emit(rec)
    emit(dict(kind="done", worker=wid))


def select_backends(cfg: RunConfig) -> list[str]:
    """Backend specs for ``cfg``: explicit ``--backend``s, else by ``--device`` (auto: the GPU when usable)."""
    if cfg.backends:
        return list(cfg.backends)
    if cfg.device == "cpu":
        return list(B.CPU_DEFAULT)
    if cfg.device.startswith("cuda"):
        return [f"device:{cfg.device}"]
    gpus = B.cuda_devices()
    if cfg.device == "all":  # every GPU, or the first one's reason for being unusable: never the CPU backends
        return [f"device:{g}" for g in gpus] or ["device:cuda:0"]
    if gpus and B.make_backend(f"device:{gpus[0]}").available() is None:
        return [f"device:{gpus[0]}"]
    return list(B.CPU_DEFAULT)


def _plan(specs: list[str], nworkers: int) -> list[list[str]]:
    """Backends per worker: GPU backends are spread (each GPU gets its share of the workers), CPU ones shared."""
    dev = [s for s in specs if s.startswith("device:")]
    cpu = [s for s in specs if not s.startswith("device:")]
    plans = []
    for w in range(nworkers):
        plans.append(cpu + ([dev[w % len(dev)]] if dev else []))
    return plans


def failures_log(cfg: RunConfig) -> Path:
    """This run's ``failures.jsonl`` (``failures-IofN.jsonl`` for shard ``I/N``: shards may share a folder)."""
    si, sn = cfg.shard
    return Path(cfg.artifacts) / ("failures.jsonl" if sn == 1 else f"failures-{si}of{sn}.jsonl")


def run(cfg: RunConfig, stdout=None, stderr=None) -> tuple[int, Stats]:
    """Run the conformance campaign; print the table; write the report. Returns ``(exit_code, stats)``.

    ``stdout`` / ``stderr``: where the summary table and the progress line and errors go (default ``sys.stdout`` /
    ``sys.stderr``).

    Exit code: 0 when at least one case ran and nothing mismatched or raised, 1 on any mismatch or error,
    2 when no case ran (the reason is printed on ``stderr`` and written to the report).
    """
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    stats = Stats(started=cfg.started)
    stats.shard = tuple(cfg.shard)
    progress = Progress(stats, enabled=cfg.progress, stream=stderr, budget=cfg.budget, max_cases=cfg.max_cases)
    progress.update(force=True)  # "start-up": importing and setting up the backends can take seconds
    printed: dict = {}
    specs = select_backends(cfg)
    usable, offered = [], set()
    why_not: list[tuple[bool, str]] = []  # (unavailable?, why) for each selected backend that runs nothing
    for s in specs:
        b = B.make_backend(s)
        unknown = [op for op in (b.ops or ()) if op not in OPS]
        if unknown:
            raise B.BackendSpecError(f"backend {b.name} lists unknown ops {unknown}; known: {','.join(OPS)}")
        reason = b.available()
        ops = [op for op in (b.ops or ()) if cfg.ops is None or op in cfg.ops]
        if reason is not None:
            wanted = ops or [op for op in ("quantize", "group_quantize") if cfg.ops is None or op in cfg.ops]
            stats.skipped += [dict(backend=b.name, op=op, reason=reason) for op in wanted]
            offered.update(wanted)
            why_not.append((True, f"{b.name} is unavailable ({reason})"))
            continue
        offered.update(ops)
        for op in ops:
            case_space(b, op)  # an unknown restriction key is a usage error, before any worker starts
        if ops:
            usable.append(s)
        else:
            why_not.append((False, f"{b.name} implements none of the ops asked for (its ops: "
                                   f"{','.join(b.ops or ()) or '-'})"))
    for op in cfg.ops or ():  # asked for, but no selected backend has it: say so instead of dropping it
        if op not in offered:
            stats.skipped.append(dict(backend="(none)", op=op, reason="no selected backend implements this op"))
    nworkers = cfg.workers or min(os.cpu_count() or 1, 8)
    if cfg.max_cases is not None and cfg.workers is None:
        nworkers = 1
    if any(s.startswith("device:") for s in usable):
        nworkers = max(nworkers, sum(s.startswith("device:") for s in usable))
    plans = _plan(usable, nworkers)
    fail_log = failures_log(cfg)
    if fail_log.exists():
        fail_log.unlink()  # this run's failures only (the saved .npz cases stay)

    def consume(rec: dict) -> None:
        kind = rec.get("kind")
        if kind == "start":  # (in-process workers only: the op now running)
            if rec.get("phase") != "setup":
                progress.op = rec["op"]
            return
        if kind != "case":
            return
        progress.op = rec["op"]
        stats.add(rec)
        f = rec.get("failure")
        if f:
            fail_log.parent.mkdir(parents=True, exist_ok=True)
            with open(fail_log, "a") as fh:
                fh.write(json.dumps(f, default=str) + "\n")
            key = (rec["backend"], rec["op"])
            printed[key] = printed.get(key, 0) + 1
            if printed[key] > 3:  # the rest are in failures.jsonl and the final list
                return progress.update()
            label = "MISMATCH" if rec["status"] == "mismatch" else "ERROR"
            print(f"\n{label} {f['op']} [{f['backend']}] seed={f.get('seed')} index={f.get('index')}: "
                  + "; ".join(f.get("mismatch_text", [])[:3]) + (f" {f['error']}" if f.get("error") else "")
                  + "".join(f"\n  diagnose: {line}" for line in f.get("diagnosis", [])[:4])
                  + (f"\n  replay: {f['replay']}" if f.get("replay") else ""), file=stderr)
        progress.update()

    clock: _LocalClock = _LocalClock()
    stats.clock = clock
    if usable and nworkers == 1:
        worker_main(0, 1, plans[0], cfg, clock, consume)
    elif usable:
        clock = _run_workers(cfg, plans, nworkers, consume, progress, stats)
    progress.update(force=True)
    progress.close()
    code = 2 if stats.cases == 0 else (1 if stats.bad else 0)
    if code == 2:
        stats.no_case_reason = _no_case_reason(cfg, specs, usable, why_not)
    if cfg.report:  # first: a reader of stdout that goes away (| head) must not cost the report
        conf = asdict(cfg)
        conf.pop("started", None)
        conf["backends_used"] = usable
        conf["workers_used"] = nworkers
        gpus = [s.split(":", 1)[1] for s in usable if s.startswith("device:")]
        ident = run_identity(seed=cfg.seed, shard=cfg.shard, max_cases=cfg.max_cases,
                             budget=None if cfg.max_cases is not None else cfg.budget, gpus=gpus, argv=cfg.argv)
        stats.write_json(cfg.report, conf, code, ident)
    print(stats.summary(cfg.detail, fail_log), file=stdout)
    if stats.no_case_reason:
        print(f"no case ran: {stats.no_case_reason}", file=stderr)
    return code, stats


def _no_case_reason(cfg: RunConfig, specs: list[str], usable: list[str], why_not: list[tuple[bool, str]]) -> str:
    """Why a run executed no case (its exit code is 2)."""
    if not specs:
        return "no backend selected"
    if not usable:
        text = "; ".join(w for _, w in why_not)
        if all(unavailable for unavailable, _ in why_not):
            return "every selected backend is unavailable: " + text
        asked = f" the ops asked for (--ops {','.join(cfg.ops)})" if cfg.ops else ""
        return f"no selected backend can run{asked}: " + text
    si, sn = cfg.shard
    if cfg.max_cases is not None and si >= cfg.max_cases:
        return (f"the case cap --cases {cfg.max_cases} leaves shard {si}/{sn} no case (its indices {si}, {si + sn}, "
                f"... are all >= {cfg.max_cases})")
    return "no case finished: every worker stopped before its first case (see the errors above)"


def _case_command(op: str, seed: int, index: int, spec: str) -> str:
    """The commands that draw a case again, save it and replay it against its backend (``case --save``)."""
    return (f"python -m conformance case {op} --seed {seed} --index {index} --backend {spec} --save case.npz; "
            f"python -m conformance replay case.npz")


def _lost_case(cur: dict | None, wid: int, why: str) -> dict:
    """The case record of a worker that died or was stopped on a case (``cur``: its last "start" record)."""
    if cur is None:  # not inside a case (start-up, warm-up or between cases)
        return dict(kind="case", worker=wid, backend="worker", op=f"worker{wid}", index=-1, status="error",
                    seconds=0.0, failure=dict(op=f"worker{wid}", backend="worker", status="error", error=why))
    spec = cur.get("spec") or cur["backend"]
    hint = _case_command(cur["op"], cur["seed"], cur["index"], spec)
    return dict(kind="case", worker=wid, backend=cur["backend"], op=cur["op"], index=cur["index"], status="error",
                seconds=time.monotonic() - cur["t"],
                failure=dict(op=cur["op"], backend=cur["backend"], backend_spec=spec, seed=cur["seed"],
                             index=cur["index"], status="error", error=why, replay=hint))


def _run_workers(cfg: RunConfig, plans: list, nworkers: int, consume, progress, stats) -> _SharedClock:
    """Worker processes; every case is accounted for. A worker that dies without its "done" record (a crash in
    native code, ``os._exit``) gets an error on the case it was running; one that stays on a case, or in its
    set-up, longer than ``cfg.case_timeout``, or on a case well past the budget, is killed and gets a timeout error
    on that case. A worker that died or was killed on a case starts again behind the cases it finished, at most
    ``_MAX_RESTARTS`` times (and within the budget); past that, in a ``--cases`` run, the rest of its share is one
    error. A worker whose set-up failed is not started again (its cases are one error)."""
    gpu = any(s.startswith("device:") for plan in plans for s in plan)
    ctx = mp.get_context("spawn" if gpu or "fork" not in mp.get_all_start_methods() else "fork")
    q = ctx.Queue()
    clock = _SharedClock(ctx.Value("d", 0.0))
    stats.clock = clock
    # the case each worker is on, as JSON in shared memory: written synchronously, so it survives a worker that
    # dies before its queue's feeder thread has sent anything (os._exit, a signal)
    slots = [ctx.Array("c", _SLOT_BYTES) for _ in range(nworkers)]
    procs: list = [None] * nworkers
    gen = [0] * nworkers  # a worker's process generation: records of an earlier process end nothing
    accounted: list[dict] = [{} for _ in range(nworkers)]  # (backend, op) -> the worker's case numbers j counted
    restarts = [0] * nworkers
    si, sn = cfg.shard

    def start(w: int) -> None:
        slots[w].value = b""
        gen[w] += 1
        procs[w] = ctx.Process(target=_proc_entry, daemon=True,
                               args=(w, nworkers, plans[w], cfg, clock, q, slots[w], gen[w],
                                     {key: sorted(js) for key, js in accounted[w].items()}))
        procs[w].start()

    for w in range(nworkers):
        start(w)

    def current(w: int) -> dict | None:
        raw = slots[w].value
        try:
            return json.loads(raw) if raw else None
        except ValueError:  # (a record longer than the slot: known to be in a case, not which)
            return dict(backend="worker", spec="", op=f"worker{w}", index=-1, seed=cfg.seed, t=time.monotonic())

    def account(rec: dict) -> None:  # a case of worker w counted: a later process of w skips it
        w, index = rec.get("worker"), rec.get("index", -1)
        if w is None or index is None or index < 0:
            return
        j = ((index - si) // sn - w) // nworkers  # (worker_main's index = si + sn (w + nworkers j))
        accounted[w].setdefault((rec["backend"], rec["op"]), set()).add(j)

    finished: set = set()

    def handle(rec: dict) -> None:
        kind, w = rec.get("kind"), rec.get("worker")
        if kind == "case":
            account(rec)
            consume(rec)
        elif kind in ("done", "crash") and rec.get("gen") == gen[w]:
            if kind == "crash":
                lost(w, rec["error"])
            else:
                finished.add(w)

    def drain() -> None:  # every record already in the queue
        while True:
            try:
                handle(q.get_nowait())
            except queue_mod.Empty:
                return

    grace = max(30.0, 2 * cfg.shrink_time)  # past the budget: shrinking and the last case may still run

    def lost(w: int, why: str, on_case: str = "") -> None:
        """Worker w's process is gone (``why``; ``on_case`` is added where it was on a case): the case it was on is
        an error; it starts again or ends."""
        cur = current(w)
        drain()  # (its finished cases first: the new process starts behind them)
        if cur is not None and cur.get("phase") == "setup":
            consume(_lost_case(None, w, f"{why}, in the set-up of its backends: its cases did not run"))
            finished.add(w)
            return
        rec = _lost_case(cur, w, why + on_case)
        account(rec)
        consume(rec)
        t0 = clock.get()
        in_budget = cfg.max_cases is not None or t0 is None or time.monotonic() < _deadline(cfg, t0)
        if restarts[w] < _MAX_RESTARTS and in_budget:
            restarts[w] += 1
            start(w)
            return
        if cfg.max_cases is not None:
            consume(_lost_case(None, w, f"worker {w} stopped after {_MAX_RESTARTS} restarts: the rest of its cases "
                                        "did not run"))
        finished.add(w)

    dead_since: dict = {}
    last_check = 0.0
    while len(finished) < nworkers:
        try:
            handle(q.get(timeout=0.25))
        except queue_mod.Empty:
            pass
        now = time.monotonic()
        if now - last_check < 0.25:  # (the checks below run every 0.25 s, records arriving or not)
            continue
        last_check = now
        progress.update()
        t0 = clock.get()
        deadline = _deadline(cfg, t0) if t0 is not None else float("inf")
        for w, p in enumerate(procs):
            if w in finished:
                continue
            cur = current(w)
            if not p.is_alive():  # dead: after its last records have had time to arrive
                if now - dead_since.setdefault((w, gen[w]), now) >= 0.5:
                    lost(w, f"worker {w} died (exit code {p.exitcode})", " while running this case")
            elif cur is not None and (now - cur["t"] > cfg.case_timeout
                                      or (cfg.max_cases is None and now > deadline + grace
                                          and cur.get("phase") != "setup")):
                p.kill()
                p.join(timeout=5)
                lost(w, f"timed out after {now - cur['t']:.0f} s (case timeout {cfg.case_timeout:g} s, budget end + "
                        f"{grace:g} s); worker {w} killed")
    for p in procs:
        p.join(timeout=5)
    return clock


_SLOT_BYTES = 4096  # a worker's current case as JSON (backend, spec, op, index, seed, start time)
_MAX_RESTARTS = 8  # processes started again per worker after a death or a kill on a case


def _proc_entry(wid, nworkers, specs, cfg, clock, q, slot, gen, resume) -> None:
    def emit(rec):
        if rec.get("kind") == "start":
            slot.value = json.dumps(rec).encode()[: _SLOT_BYTES - 1]
            return  # the parent reads the slot; the queue carries results only
        if rec.get("kind") in ("case", "idle"):
            slot.value = b""
            if rec["kind"] == "idle":
                return
        q.put({**rec, "gen": gen})

    try:
        worker_main(wid, nworkers, specs, cfg, clock, emit, resume)
    except BaseException as e:  # noqa: BLE001 -- SystemExit / KeyboardInterrupt included: report, then end
        # (its case: still in the slot)
        q.put(dict(kind="crash", worker=wid, gen=gen, error=f"{type(e).__name__}: {_text(e)}"))
