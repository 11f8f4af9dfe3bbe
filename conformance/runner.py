"""Scheduling: which backends and ops run, the case index space (seed, shards, workers), budgets,
worker processes, failure shrinking and saving.

Case indices: shard ``i/n``, worker ``w`` of ``W``, the j-th case of an op gets index ``i + n * (w + W * j)``,
so shards and workers partition the index space of each op and every case is rebuilt from
``(op, seed, index)`` alone (see :func:`conformance.generators.generate`).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue as queue_mod
import re
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
from .generators import generate
from .ops import OPS, reference
from .report import Progress, Stats
from .shrink import shrink

__all__ = ["RunConfig", "run", "check_case", "select_backends", "case_space"]


@dataclass
class RunConfig:
    """Options of ``python -m conformance run`` (see :mod:`conformance.cli`)."""

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
    progress: bool = True
    argv: list[str] = field(default_factory=list)


def case_space(backend: B.Backend, op: str) -> dict:
    """The generator space of ``op`` for ``backend``: the op's base space updated by the backend's restrictions."""
    return {**OPS[op].space, **backend.space(op)}


def check_case(backend: B.Backend, case: Case, stats: dict | None = None) -> tuple[str, list[Mismatch], dict, dict, str]:
    """Run reference and backend on ``case`` and compare.

    Returns ``(status, mismatches, ref, out, error)``: status "pass", "mismatch" or "error" (an exception in
    the reference or the backend; ``error`` holds its traceback's last line).
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_case(backend, case, stats)


def _check_case(backend: B.Backend, case: Case, stats: dict | None):
    ref, out = {}, {}
    try:
        ref = reference(case)
    except Exception as e:  # noqa: BLE001
        return "error", [], ref, out, f"reference raised {type(e).__name__}: {e}"
    try:
        out = backend.run(case.op, case)
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exc().strip().splitlines()[-3:]
        return "error", [], ref, out, f"{backend.name} raised {type(e).__name__}: {e} | " + " / ".join(tb)
    ms = compare(case, ref, out, OPS[case.op].mode, stats)
    return ("mismatch" if ms else "pass"), ms, ref, out, ""


def _signature(status: str, ms: list[Mismatch], err: str) -> frozenset | None:
    if status == "pass":
        return None
    if status == "error":
        return frozenset({"error:" + err.split(":")[0]})
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
    return dict(op=case.op, backend=b.name, backend_spec=spec, seed=case.seed, index=case.index, status=s_status,
                error=s_err or err, options=case.options, tags=case.tags,
                mismatches=[m.to_dict() for m in (s_ms or ms)], mismatch_text=[str(m) for m in (s_ms or ms)],
                original_size=list(case_size(case)), shrunk_size=list(case_size(small)), shrink_tried=tried,
                shrink_seconds=round(time.monotonic() - t0, 2), npz=str(path), original_npz=str(orig),
                replay=f"python -m conformance replay {path}")


def _tasks(backends: list[B.Backend], ops: list[str] | None) -> list[tuple[B.Backend, str]]:
    return [(b, op) for b in backends for op in b.ops if op in OPS and (ops is None or op in ops)]


def worker_main(wid: int, nworkers: int, specs: list[str], cfg: RunConfig, deadline: float,
                emit: Callable[[dict], None]) -> None:
    """One worker: generate, run, compare its share of every task until the budget or ``max_cases`` ends."""
    import sys

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
                b.warmup(ops)
            except Exception:  # noqa: BLE001,S110 -- the cases report what is wrong with the backend
                pass
    si, sn = cfg.shard
    spent = {i: 0.0 for i in range(len(tasks))}
    count = {i: 0 for i in range(len(tasks))}
    longest = {i: 0.0 for i in range(len(tasks))}
    active = set(spent)
    # shrinking happens inside the budget (a late failure is saved less shrunk); --cases runs are not timed
    hard_deadline = deadline if cfg.max_cases is None else float("inf")
    while active:
        i = min(active, key=lambda t: (spent[t] * OPS[tasks[t][1]].cost ** -0.5, t))
        b, op = tasks[i]
        if cfg.max_cases is not None and count[i] >= cfg.max_cases:
            active.discard(i)
            continue
        now = time.monotonic()
        if cfg.max_cases is None and now + longest[i] > deadline:
            active.discard(i)
            continue
        index = si + sn * (wid + nworkers * count[i])
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
        extra: dict = {}
        status, ms, ref, out, err = check_case(b, case, extra)
        dt = time.monotonic() - t0
        spent[i] += dt
        longest[i] = max(longest[i], dt)
        rec = dict(kind="case", backend=b.name, op=op, index=index, status=status, seconds=dt, tags=case.tags,
                   extra=extra)
        if status != "pass":
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
    if gpus:
        specs = [f"device:{g}" for g in gpus] if cfg.device == "all" else [f"device:{gpus[0]}"]
        if B.make_backend(specs[0]).available() is None:
            return specs
    return list(B.CPU_DEFAULT)


def _plan(specs: list[str], nworkers: int) -> list[list[str]]:
    """Backends per worker: GPU backends are spread (each GPU gets its share of the workers), CPU ones shared."""
    dev = [s for s in specs if s.startswith("device:")]
    cpu = [s for s in specs if not s.startswith("device:")]
    plans = []
    for w in range(nworkers):
        plans.append(cpu + ([dev[w % len(dev)]] if dev else []))
    return plans


def run(cfg: RunConfig, stdout=None, stderr=None) -> tuple[int, Stats]:
    """Run the conformance campaign; print the table; write the report. Returns ``(exit_code, stats)``.

    Exit code: 0 when at least one case ran and nothing mismatched or raised, 1 on any mismatch or error,
    2 when no case ran (everything skipped).
    """
    import sys

    stdout = stdout or sys.stdout
    stats = Stats()
    t_start = time.monotonic()
    # keep a little of the budget for interpreter start-up already spent, the joins and the table
    deadline = t_start + cfg.budget - min(2.0, 0.03 * cfg.budget)
    printed: dict = {}
    specs = select_backends(cfg)
    usable = []
    for s in specs:
        b = B.make_backend(s)
        reason = b.available()
        ops = [op for op in (b.ops or ()) if cfg.ops is None or op in cfg.ops]
        if reason is not None:
            wanted = ops or [op for op in ("quantize", "group_quantize") if cfg.ops is None or op in cfg.ops]
            stats.skipped += [dict(backend=b.name, op=op, reason=reason) for op in wanted]
            continue
        if ops:
            usable.append(s)
    nworkers = cfg.workers or min(os.cpu_count() or 1, 8)
    if cfg.max_cases is not None and cfg.workers is None:
        nworkers = 1
    if any(s.startswith("device:") for s in usable):
        nworkers = max(nworkers, sum(s.startswith("device:") for s in usable))
    plans = _plan(usable, nworkers)
    progress = Progress(stats, enabled=cfg.progress, stream=stderr)
    fail_log = Path(cfg.artifacts) / "failures.jsonl"

    def consume(rec: dict) -> None:
        if rec.get("kind") != "case":
            return
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
            print(f"\nMISMATCH {f['op']} [{f['backend']}] seed={f['seed']} index={f['index']}: "
                  + "; ".join(f.get("mismatch_text", [])[:3]) + (f" {f['error']}" if f.get("error") else "")
                  + (f"\n  replay: {f['replay']}" if f.get("replay") else ""), file=stderr or sys.stderr)
        progress.update()

    if usable and nworkers == 1:
        worker_main(0, 1, plans[0], cfg, deadline, consume)
    elif usable:
        gpu = any(s.startswith("device:") for s in usable)
        ctx = mp.get_context("spawn" if gpu or "fork" not in mp.get_all_start_methods() else "fork")
        q = ctx.Queue()
        procs = [ctx.Process(target=_proc_entry, args=(w, nworkers, plans[w], cfg, deadline, q), daemon=True)
                 for w in range(nworkers)]
        for p in procs:
            p.start()
        done = 0
        while done < nworkers:
            try:
                rec = q.get(timeout=0.25)
            except queue_mod.Empty:
                progress.update()
                if not any(p.is_alive() for p in procs) and q.empty():
                    break
                continue
            if rec.get("kind") == "done":
                done += 1
            elif rec.get("kind") == "crash":
                stats.add(dict(backend="worker", op=rec["where"], index=-1, status="error", seconds=0.0,
                               failure=dict(op=rec["where"], backend="worker", error=rec["error"])))
                done += 1
            consume(rec)
        for p in procs:
            p.join(timeout=5)
    progress.update(force=True)
    progress.close()
    bad = stats.bad
    code = 2 if stats.cases == 0 else (1 if bad else 0)
    print(stats.table(), file=stdout)
    for n, f in enumerate(stats.failures):
        if n == 20:
            print(f"... {len(stats.failures) - 20} more failures in {fail_log}", file=stdout)
            break
        where = f"seed={f['seed']} index={f['index']}" if "seed" in f else "(worker crash)"
        print(f"FAILED {f['op']} [{f['backend']}] {where}: {f.get('replay', f.get('error'))}", file=stdout)
    if cfg.report:
        conf = asdict(cfg)
        conf["backends_used"] = usable
        conf["workers_used"] = nworkers
        stats.write_json(cfg.report, conf, code)
    return code, stats


def _proc_entry(wid, nworkers, specs, cfg, deadline, q) -> None:
    try:
        worker_main(wid, nworkers, specs, cfg, deadline, q.put)
    except Exception as e:  # noqa: BLE001
        q.put(dict(kind="crash", where=f"worker{wid}", error=f"{type(e).__name__}: {e}"))
