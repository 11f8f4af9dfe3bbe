"""A/B of kernel plans in one process: grouped-GEMM plans or quantize plans, forced through device.testing.

``gemm``: for each case, one call per plan; each output is compared bit for bit with the first plan of the same
mode (every fast plan gives the bits of oracle model "tensor_core", every exact plan those of model "sequential",
every sm100 plan those of model "sm100");
then ``--rounds`` rounds of timings of every plan and of ``torch._grouped_mm`` (BF16 operands; wgrad: bf16 output,
fp32 is refused for bf16 inputs), TFLOP/s (2 T N K / time) and each plan's median as a multiple of grouped_mm's.
Only the GEMM call is timed (a plan's scratch decode included).

    PYTHONPATH=. python tools/ab/ab_plans.py gemm --plans "auto; algorithm=fused_128x256; algorithm=copies_cutlass" \\
        --cases "64,16384,2048,1408,wgrad,f32;64,16384,2048,1408,wgrad,bf16"

``quantize``: every plan's outputs are first compared byte for byte with the first plan's on a few single and
grouped calls (odd shapes, empty groups, NaN / Inf blocks, both scale rules, both scale layouts); then ``--rounds``
rounds, each timing every plan in turn (the order rotates by one plan per round) on the fused path of
benchmarks/bench_quantize.py (row + RHT col, swizzled, amax; graph replay after the 256 MB flush, median), and the
quantize kernel, the amax pass and the grouped setup kernel alone (torch.profiler, mean of 5 calls).

    PYTHONPATH=. python tools/ab/ab_plans.py quantize --plans "quantize=general; quantize=fast_bf16" --rounds 3

A plan is ``auto`` (the planner's choice) or space-separated ``key=value`` settings; plans are separated by ``;``.
Keys: ``algorithm``, ``loader``, ``epilogue``, ``quantize`` (the arguments of ``device.testing.force_plan``; GEMM
algorithms fused_64x256, fused_128x256, fused_pair_256x256, swapped_64x256, swapped_256x128, copies_cutlass,
exact_fused, exact_copies, exact_hybrid, sm100_simt, sm100_copies; loaders cp_async, tma; epilogues staged,
tma_store; quantize general, fast_bf16), ``mode`` (fast, exact or sm100; default: exact for an exact_* algorithm,
sm100 for an sm100_* one, else fast), ``sms`` (``device.set_num_sms`` for the plan's calls: the persistent GEMM grid
capped at that many SMs), ``weights=f16`` (fprop / dgrad: the weights' fp16 copy given as the layer's
``cache_f16_weights`` gives it, made once outside the timed calls) and ``splits=host`` (the case's group sizes passed
as ``device.grouped_gemm``'s ``split_sizes``, as GroupedLinear passes a list ``m_splits``). Each case's line is
followed by the algorithm each automatic plan ran.

A GEMM case is ``E,T,K,N,kind[,out][,skew|ragged8][,bias]``: kind fprop / dgrad / wgrad; out ``bf16``, ``f32`` or
``f32+c`` (wgrad with ``accumulate=True`` into an fp32 buffer), default the kind's default (bf16 for fprop / dgrad,
f32 for wgrad); ``skew`` (one hot expert) or ``ragged8`` (a router's draw in multiples of 8 tokens): those splits of
benchmarks/bench_grouped_gemm.py's ``splits_for`` instead of balanced ones; ``bias``: fprop / dgrad with an fp32 bias
``[E, cols]`` (grouped_mm's time stays without one).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

import device
from device import testing

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tools" / "profile")]
from bench_grouped_gemm import splits_for, timeit  # noqa: E402

DEV = "cuda"
FORCE_KEYS = ("algorithm", "loader", "epilogue", "quantize")
#: the GEMM modes a plan may run (device.grouped_gemm's mode)
MODES = ("fast", "exact", "sm100")
OUT_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f32+c": torch.float32}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One side of an A/B: what ``device.testing.force_plan`` forces, the GEMM mode, and an optional SM cap."""

    text: str
    force: dict
    mode: str = "fast"
    sms: int | None = None
    weight_copy: bool = False
    host_splits: bool = False


def parse_plan(text: str) -> Plan:
    """A plan from its text: ``auto`` or space-separated ``key=value`` settings (see the module docstring)."""
    text = " ".join(text.split())
    force: dict = {}
    mode = sms = None
    weight_copy = host_splits = False
    for item in text.split():
        if item == "auto":
            continue
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ValueError(f"plan {text!r}: {item!r} is not key=value")
        if key in FORCE_KEYS:
            force[key] = value
        elif key == "mode":
            if value not in MODES:
                raise ValueError(f"plan {text!r}: mode must be one of {', '.join(MODES)}, got {value!r}")
            mode = value
        elif key == "sms":
            sms = int(value)
        elif key == "weights":
            if value != "f16":
                raise ValueError(f"plan {text!r}: weights must be f16, got {value!r}")
            weight_copy = True
        elif key == "splits":
            if value != "host":
                raise ValueError(f"plan {text!r}: splits must be host, got {value!r}")
            host_splits = True
        else:
            raise ValueError(f"plan {text!r}: unknown key {key!r} (keys: {', '.join(FORCE_KEYS)}, mode, sms, "
                             "weights, splits)")
    if mode is None:
        mode = next((m for m in ("exact", "sm100") if force.get("algorithm", "").startswith(m + "_")), "fast")
    return Plan(text or "auto", force, mode, sms, weight_copy, host_splits)


def parse_plans(text: str) -> list[Plan]:
    """The ``;``-separated plans of ``--plans``."""
    return [parse_plan(p) for p in text.split(";") if p.strip()]


@contextlib.contextmanager
def applied(plan: Plan) -> Iterator[None]:
    """Run the body under the plan: its SM cap set (and the previous one restored after), its settings forced."""
    previous = None
    if plan.sms is not None:
        previous = device.get_num_sms()
        device.set_num_sms(plan.sms)
    try:
        with testing.force_plan(**plan.force) if plan.force else contextlib.nullcontext():
            yield
    finally:
        if plan.sms is not None:
            device.set_num_sms(previous)


@dataclasses.dataclass(frozen=True)
class Case:
    """One grouped-GEMM problem of the ``gemm`` A/B."""

    e: int
    t: int
    k: int
    n: int
    kind: str
    out: str
    splits: str = "balanced"  # a splits_for pattern
    bias: bool = False

    @property
    def label(self) -> str:
        tag = {"balanced": "", "skewed": " skew", "ragged8": " ragged8"}[self.splits]
        return f"E{self.e} T{self.t} K{self.k} N{self.n} {self.kind} {self.out}{tag}" + (" bias" if self.bias else "")

    @property
    def flops(self) -> float:
        return 2.0 * self.t * self.n * self.k


def parse_case(text: str) -> Case:
    """A case from ``E,T,K,N,kind[,out][,skew|ragged8][,bias]``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) < 5:
        raise ValueError(f"case {text!r}: expected E,T,K,N,kind[,out][,skew|ragged8][,bias]")
    e, t, k, n = (int(v) for v in parts[:4])
    kind = parts[4]
    if kind not in ("fprop", "dgrad", "wgrad"):
        raise ValueError(f"case {text!r}: kind must be fprop, dgrad or wgrad")
    rest = parts[5:]
    patterns = [p for p in rest if p in ("skew", "ragged8")]
    if len(patterns) > 1:
        raise ValueError(f"case {text!r}: skew or ragged8, not both")
    splits = {"skew": "skewed", "ragged8": "ragged8"}[patterns[0]] if patterns else "balanced"
    bias = "bias" in rest
    outs = [p for p in rest if p not in ("skew", "ragged8", "bias")]
    out = outs[0] if outs else ("f32" if kind == "wgrad" else "bf16")
    if out not in OUT_DTYPES or len(outs) > 1:
        raise ValueError(f"case {text!r}: out must be one of {list(OUT_DTYPES)}")
    if out == "f32+c" and kind != "wgrad":
        raise ValueError(f"case {text!r}: f32+c (accumulate) is for wgrad")
    if bias and kind == "wgrad":
        raise ValueError(f"case {text!r}: a bias is for fprop / dgrad")
    return Case(e, t, k, n, kind, out, splits, bias)


def parse_cases(text: str) -> list[Case]:
    """The ``;``-separated cases of ``--cases``."""
    return [parse_case(c) for c in text.split(";") if c.strip()]


def operands(c: Case):
    """(a, b, output shape, the torch._grouped_mm call on the same BF16 operands) of one case."""
    e, t, k, n = c.e, c.t, c.k, c.n
    st = torch.tensor(splits_for(e, t, c.splits), dtype=torch.int64, device=DEV)
    wsplits = torch.full((e,), n, dtype=torch.int64, device=DEV)
    offs = st.cumsum(0).to(torch.int32)
    x = torch.randn((t, k), device=DEV, dtype=torch.bfloat16)
    w = torch.randn((e * n, k), device=DEV, dtype=torch.bfloat16) * 0.05
    if c.kind == "fprop":
        a = device.group_quantize(x, st, rowwise=True)
        b = device.group_quantize(w, wsplits, rowwise=True, block=(16, 16))
        return a, b, (t, n), lambda: torch._grouped_mm(x, w.view(e, n, k).transpose(1, 2), offs=offs)
    dy = torch.randn((t, n), device=DEV, dtype=torch.bfloat16)
    if c.kind == "wgrad":  # grouped_mm writes bf16 (fp32 output is refused for bf16 inputs)
        a = device.group_quantize(dy, st, rowwise=False, columnwise=True)
        b = device.group_quantize(x, st, rowwise=False, columnwise=True)
        dyt = dy.t().contiguous()
        return a, b, (e, n, k), lambda: torch._grouped_mm(dyt, x, offs=offs)
    a = device.group_quantize(dy, st, rowwise=True)
    b = device.group_quantize(w, wsplits, rowwise=True, columnwise=True, block=(16, 16))  # (rowwise: weights=f16)
    return a, b, (t, k), lambda: torch._grouped_mm(dy, w.view(e, n, k), offs=offs)


def call_kwargs(plan: Plan, c: Case, out: torch.Tensor) -> dict:
    """The keyword arguments of the case's device.grouped_gemm call under the plan (and of its grouped_gemm_plan):
    kind, out, mode, accumulate (``f32+c``), the case's fp32 bias ``[E, cols]`` and, with ``splits=host``, the
    case's group sizes as ``split_sizes``."""
    bias = torch.linspace(-1, 1, c.e * out.shape[1], device=DEV).view(c.e, -1) if c.bias else None
    return dict(kind=c.kind, out=out, mode=plan.mode, accumulate=c.out == "f32+c", bias=bias,
                split_sizes=splits_for(c.e, c.t, c.splits) if plan.host_splits else None)


def gemm_call(plan: Plan, a, b, c: Case, out: torch.Tensor) -> Callable[[], None]:
    """One grouped_gemm call of the case under the plan, into ``out`` (with ``weights=f16``: reading the weights' fp16
    copy, as GroupedLinear(cache_f16_weights=True) calls it; device.testing.gemm_over_weight_copy)."""
    kw = call_kwargs(plan, c, out)
    if plan.weight_copy:
        run = testing.gemm_over_weight_copy(a, b, kind=c.kind, out=out, bias=kw["bias"], mode=plan.mode)
    else:
        def run() -> None:
            device.grouped_gemm(a, b, **kw)

    def call() -> None:
        with applied(plan):
            run()

    return call


def auto_algorithm(plan: Plan, a, b, c: Case, out: torch.Tensor) -> str:
    """The algorithm a plan without a forced algorithm runs on the case (device.grouped_gemm_plan)."""
    with applied(plan):
        return device.grouped_gemm_plan(a, b, **call_kwargs(plan, c, out)).algorithm.name


def run_gemm(args: argparse.Namespace) -> None:
    plans = parse_plans(args.plans)
    cases = parse_cases(args.cases)
    print(f"grouped GEMM plans, TFLOP/s (min-max of {args.rounds} rounds of {args.iters} calls) and each median as a "
          f"multiple of torch._grouped_mm's (bf16); {torch.cuda.get_device_name()}")
    for i, p in enumerate(plans):
        print(f"  p{i}: {p.text} (mode {p.mode}{f', {p.sms} SMs' if p.sms else ''})")
    names = [f"p{i}" for i in range(len(plans))] + ["grouped_mm"]
    print(f"{'case':36s} " + " ".join(f"{n:>15s}" for n in names) + "  x grouped_mm; bits")
    for c in cases:
        a, b, shape, gmm = operands(c)
        dt = OUT_DTYPES[c.out]
        c0 = torch.randn(shape, device=DEV, dtype=torch.float32) if c.out == "f32+c" else None
        outs = [torch.empty(shape, dtype=dt, device=DEV) for _ in plans]
        calls = [gemm_call(p, a, b, c, o) for p, o in zip(plans, outs, strict=True)]
        failed: dict[int, str] = {}
        for i, call in enumerate(calls):
            if c0 is not None:
                outs[i].copy_(c0)
            try:
                call()
                torch.cuda.synchronize()
            except Exception as ex:  # noqa: BLE001 - a plan that cannot run this case: report it, time the others
                failed[i] = f"{type(ex).__name__}: {str(ex)[:100]}"
        bits = torch.int16 if dt == torch.bfloat16 else torch.int32
        differ = []
        for mode in MODES:
            same_mode = [i for i, p in enumerate(plans) if p.mode == mode and i not in failed]
            differ += [f"p{i}" for i in same_mode[1:]
                       if not torch.equal(outs[i].view(bits), outs[same_mode[0]].view(bits))]
        times: dict[str, list[float]] = {n: [] for n in names}
        timed = [(f"p{i}", call) for i, call in enumerate(calls) if i not in failed] + [("grouped_mm", gmm)]
        for r in range(args.rounds):
            for name, call in timed[r % len(timed):] + timed[:r % len(timed)]:  # rotated: the anchor not always last
                times[name].append(timeit(call, args.iters, idle_s=0.3))
        tf = {n: [c.flops / s / 1e12 for s in ts] for n, ts in times.items()}
        g = statistics.median(tf["grouped_mm"])
        cells = " ".join(f"{min(v):7.1f}-{max(v):<7.1f}" if v else f"{'refused':>15s}" for v in tf.values())
        ratios = " ".join(f"p{i}={statistics.median(tf[f'p{i}']) / g:.3f}"
                          for i in range(len(plans)) if i not in failed)
        verdict = "bits equal within each mode" if not differ else f"bits DIFFER: {', '.join(differ)}"
        print(f"{c.label:36s} {cells}  {ratios}; {verdict}", flush=True)
        for i, why in failed.items():
            print(f"  p{i} ({plans[i].text}) refused: {why}", flush=True)
        chosen = [f"p{i} {auto_algorithm(p, a, b, c, outs[i])}" for i, p in enumerate(plans)
                  if "algorithm" not in p.force and not p.weight_copy and i not in failed]
        if chosen:
            print(f"  auto: {', '.join(chosen)}", flush=True)
        del a, b, outs, c0
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------
# quantize plans
# ---------------------------------------------------------------------------------------------------------------

def result_bytes(q) -> list[torch.Tensor]:
    """Every tensor field of a device quantize result (single or grouped: data, scales, amaxes, the offset table), as
    flat uint8 views."""
    items = ([(f.name, getattr(q, f.name)) for f in dataclasses.fields(q)] if dataclasses.is_dataclass(q)
             else list(vars(q).items()))
    got = [t.contiguous().view(torch.uint8).reshape(-1) for _, t in items if isinstance(t, torch.Tensor)]
    assert got, "no output buffers found"
    return got


def byte_check_calls() -> list[tuple[str, Callable[[], object]]]:
    """(name, call) of the quantize calls whose outputs every plan must reproduce byte for byte."""
    torch.manual_seed(1)
    cases: list[tuple[str, Callable[[], object]]] = []
    for m, k in ((1, 16), (17, 48), (129, 272), (1000, 4096), (4097, 160)):
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16) * 7
        x.view(-1)[:: max(1, x.numel() // 5)] = float("inf") if m > 100 else x.view(-1)[0]
        if m == 1000:
            x[5, 33] = float("nan")
        for rule in ("te", "torchao"):
            for sw in (True, False):
                cases.append((f"{m}x{k} {rule} swz={sw}",
                              lambda x=x, rule=rule, sw=sw: device.quantize(x, rowwise=True, columnwise=True,
                                                                           rht=True, swizzled=sw, rule=rule)))
    x = torch.randn(3000, 512, device=DEV, dtype=torch.bfloat16)
    sp = torch.tensor([0, 17, 1000, 0, 129, 1854, 0], dtype=torch.int64, device=DEV)
    cases.append(("grouped 3000x512", lambda: device.group_quantize(x, sp, rowwise=True, columnwise=True, rht=True)))
    # the setup kernel's scan: many groups (several 256-group chunks), sizes past T (capped), negative sizes, E = 1
    gen = torch.Generator().manual_seed(7)
    for name, sizes in (("E=600", torch.randint(0, 12, (600,), generator=gen)),
                        ("E=300 over T", torch.randint(0, 25, (300,), generator=gen)),
                        ("E=40 negatives", torch.randint(-50, 150, (40,), generator=gen)),
                        ("E=1", torch.tensor([3000])), ("E=2000 zeros", torch.zeros(2000, dtype=torch.int64))):
        spg = sizes.to(torch.int64).to(DEV)
        cases.append((f"grouped 3000x512 {name}", lambda spg=spg: device.group_quantize(
            x, spg, rowwise=True, columnwise=True, rht=True)))
    return cases


def check_same_bytes(plans: list[Plan]) -> None:
    """Print whether every plan's outputs equal the first plan's on :func:`byte_check_calls`."""
    calls = byte_check_calls()
    bad = refused = 0
    for name, fn in calls:
        with applied(plans[0]):
            ref = [t.clone() for t in result_bytes(fn())]
        for p in plans[1:]:
            try:
                with applied(p):
                    got = result_bytes(fn())
            except Exception as ex:  # noqa: BLE001 - a plan that cannot run this call: report it, go on
                refused += 1
                print(f"refused by {p.text!r}: {name}: {type(ex).__name__}: {str(ex)[:100]}")
                continue
            if len(got) != len(ref) or not all(torch.equal(a, b) for a, b in zip(got, ref, strict=True)):
                bad += 1
                print(f"MISMATCH {p.text!r} against {plans[0].text!r}: {name}")
    torch.cuda.synchronize()
    print(f"bytes: {len(calls)} calls x {len(plans) - 1} plans against {plans[0].text!r}: "
          f"{'all equal' if bad == 0 else f'{bad} differ'}{f', {refused} refused' if refused else ''}")


def kernel_us(fn: Callable[[], object]) -> tuple[float, float, float]:
    """Mean torch.profiler time of the quantize kernel, the amax pass and the grouped setup kernel over 5 calls (0
    where the call has no such kernel)."""
    from profiling import kernel_function, profiled_kernels

    ev = [(kernel_function(n), d) for n, _, d in profiled_kernels(fn, calls=5)]
    q = [d for n, d in ev if "quantize" in n and "setup" not in n]
    a = [d for n, d in ev if "amax" in n and "zero" not in n and "quantize" not in n]
    s = [d for n, d in ev if "setup" in n]
    return sum(q) / max(1, len(q)), sum(a) / max(1, len(a)), sum(s) / max(1, len(s))


def run_quantize(args: argparse.Namespace) -> None:
    from bench_quantize import SHAPES, bench, skewed_splits

    plans = parse_plans(args.plans)
    check_same_bytes(plans)
    kw = dict(rowwise=True, columnwise=True, rht=True, swizzled=True)
    cases: list[tuple[str, Callable[[], object]]] = []
    for m, k in SHAPES:
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        cases.append((f"{m}x{k}", lambda x=x: device.quantize(x, **kw)))
    xg = torch.randn(16384, 4096, device=DEV, dtype=torch.bfloat16)
    for e in (8, 64):
        sd = skewed_splits(16384, e, seed=e).to(DEV)
        cases.append((f"grouped E={e}", lambda sd=sd: device.group_quantize(xg, sd, rowwise=True, columnwise=True,
                                                                          rht=True)))

    def planned(p: Plan, fn: Callable[[], object]) -> Callable[[], object]:
        def call():
            with applied(p):
                return fn()
        return call

    keys = [(name, p.text) for name, _ in cases for p in plans]
    data: dict[str, dict] = {d: {key: [] for key in keys} for d in ("call", "quantize", "amax", "setup")}
    refused: set[tuple[str, str]] = set()
    for r in range(args.rounds):
        order = plans[r % len(plans):] + plans[: r % len(plans)]
        for name, fn in cases:
            for p in order:
                if (name, p.text) in refused:
                    continue
                call = planned(p, fn)
                try:
                    data["call"][(name, p.text)].append(bench(call, args.iters))
                except Exception as ex:  # noqa: BLE001 - a plan that cannot run this case
                    refused.add((name, p.text))
                    print(f"refused by {p.text!r}: {name}: {type(ex).__name__}: {str(ex)[:100]}")
                    continue
                for d, us in zip(("quantize", "amax", "setup"), kernel_us(call), strict=True):
                    data[d][(name, p.text)].append(us)
    for i, p in enumerate(plans):
        print(f"plan {i}: {p.text}")
    print("median [min-max] us: call (graph, flushed) | quantize kernel | amax pass | grouped setup kernel")
    for name, _ in cases:
        for i, p in enumerate(plans):
            if (name, p.text) in refused:
                print(f"{name:16s} plan {i}  refused")
                continue
            cells = [f"{statistics.median(v):7.1f} [{min(v):6.1f}-{max(v):6.1f}]"
                     for v in (data[d][(name, p.text)] for d in ("call", "quantize", "amax", "setup"))]
            print(f"{name:16s} plan {i}  " + " | ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gemm", help="A/B of grouped-GEMM plans beside torch._grouped_mm")
    g.add_argument("--plans", default="auto; algorithm=fused_128x256; algorithm=copies_cutlass",
                   help='";"-separated plans, e.g. "auto; algorithm=exact_copies loader=tma; mode=exact sms=100"')
    g.add_argument("--cases", default="64,16384,2048,1408,wgrad,f32;64,16384,2048,1408,wgrad,bf16",
                   help='";"-separated cases E,T,K,N,kind[,out][,skew][,bias]')
    g.add_argument("--iters", type=int, default=10, help="timed calls per plan and round")
    g.add_argument("--rounds", type=int, default=2, help="rounds over all plans and grouped_mm")
    q = sub.add_parser("quantize", help="A/B of quantize plans (bytes compared, then timed)")
    q.add_argument("--plans", default="quantize=general; quantize=fast_bf16",
                   help='";"-separated plans, e.g. "auto; quantize=general"')
    q.add_argument("--rounds", type=int, default=3, help="rounds over all plans (the order rotates per round)")
    q.add_argument("--iters", type=int, default=10, help="graph replays per timing (bench_quantize.bench)")
    args = ap.parse_args()
    if args.what == "gemm":
        run_gemm(args)
    else:
        run_quantize(args)


if __name__ == "__main__":
    main()
