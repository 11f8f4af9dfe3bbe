"""Benchmark of the NVFP4 grouped GEMM (device/gemm.py) against BF16 baselines. One table, one GPU run.

Columns (TFLOP/s = 2*T*N*K / time; wgrad counts the unpadded T):
  nvfp4 fast / nvfp4 exact  -- device.gemm.grouped_gemm on operands quantized beforehand (GEMM only timed), the
                               plan chosen by the sizes (device.gemm.grouped_gemm_plan; the plans of every row are
                               listed under the table); a plan's fp16 operand copies (copies_cutlass, the
                               swapped algorithms, exact_copies, exact_hybrid) are made inside the timed call
  fused                     -- fast mode with the fused-decode kernel that the sizes choose (fused_64x256,
                               fused_128x256 or fused_pair_256x256, see fused_algorithm; no scratch copies), forced
                               through device.testing.force_plan
  x_fused / x_dq            -- exact mode with the plan exact_fused (both operands decoded in the K loop) /
                               exact_copies (over fp16 operand copies, decode timed); "exact" is the plan chosen by
                               the sizes
  x_hyb                     -- exact mode with the plan exact_hybrid (an fp16 copy of A only, decode timed; B
                               decoded in the kernel; fprop / dgrad, nan for wgrad)
  sm100                     -- mode "sm100" (a B200's bits, SPEC 12.7), the plan chosen by the sizes (sm100_copies,
                               its operand decode inside the timed call)
  grouped_mm                -- torch._grouped_mm on BF16 operands (wgrad: bf16 output, fp32 is refused; the
                               "wgrad-bf16" rows run our wgrad with bf16 output too, the same bytes written; the
                               "wgrad-acc" rows run ours with accumulate=True into an fp32 main_grad, and grouped_mm
                               then adds its bf16 dW into an fp32 buffer: out.add_(grouped_mm), the BF16 way to
                               accumulate, since grouped_mm has no fp32 output)
  matmul loop               -- one torch.matmul per expert (host-known splits; on E=64 it is bound by its 64 launches)
  wdq+gmm                   -- weight-only path: dequantize the NVFP4 weights to BF16 (a torch.compile'd kernel,
                               timed) + torch._grouped_mm on the BF16 activations (fprop / dgrad only)
The rows' token splits (splits_for): balanced unless the name says skew (one hot expert, multiples of 128) or
ragged8 (Zipf-weighted multiples of 8 with empty experts, as a BF16 MoE pads a router's draw).
Only the GEMM is timed: quantizing the operands (e.g. the weights, each step) is not in these numbers.
Two GPU states, because the H100 (700 W cap) lowers its clock within ~0.1-1 s of sustained tensor load, and not by
the same amount for every kernel (measured on the E8 T16384 shapes: cuBLAS BF16 settles at 1.29-1.41 GHz, the NVFP4
fast kernel at 1.62-1.77 GHz):
  burst      -- 0.3 s idle, two warm-up calls, then --iters calls: the clock near its maximum (not measured here);
                every column (ours, exact ones included, and the anchors) is timed over the same --iters calls, the
                window opening behind one more untimed call so that no column's first host-side setup is in it
  sustained  -- (columns marked _s) 0.3 s idle, then the same call enqueued back to back for --sustain seconds (no
                synchronisation between calls, so host overhead does not lower the GPU's duty cycle), then --iters
                calls: the power-capped clock of a long training run
Times are CUDA-event means; every column is timed --reps times, in rounds over all columns (each round in its own
seeded random order, so no column always follows the same one), and reports its median. Before the timing, the
results are checked: every fast column gives the fast mode's bits, every exact column the exact mode's, and the fast
result lies near the BF16 anchor's (a relative Frobenius distance below 0.35), so that a kernel computing garbage
cannot post a number.

    PYTHONPATH=. python benchmarks/bench_grouped_gemm.py [--iters 10] [--reps 3] [--sustain 1.0]
        [--rules te,torchao] [--only "E64 T16384 K2048 N1408 fprop"] [--columns sm100,grouped_mm]

``--rules``: the operands' scale rules, one row per case and rule (SPEC 12.1 pairs a rule with itself), the rule
appended to the case name (under a torchao rule the wdq+gmm column, which decodes with the TE factors, is nan);
``--only``: the rows whose "case kind" contains the text; ``--columns``: time only these columns, named by their
keys: fast, fused, exact, x_fused, x_dq, x_hyb, sm100, grouped_mm, loop, deq+gmm and the sustained fast_s, exact_s,
grouped_mm_s (the table prints grouped_mm as grp_mm, the matmul loop as loop, deq+gmm as wdq+gmm).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import statistics
import sys
import time

import torch

import device
from device import _dispatch, testing
from device.gemm import grouped_gemm, grouped_gemm_plan

DEV = "cuda"


def timeit(fn, iters: int, warmup: int = 2, warmup_s: float = 0.0, idle_s: float = 0.0) -> float:
    """Mean seconds per call over `iters` calls: first `idle_s` seconds idle, then at least `warmup` calls and
    `warmup_s` seconds of this function alone; the timed window starts behind one more call, enqueued without a
    wait, so the first timed call's host-side work overlaps the GPU's work instead of opening the window idle."""
    if idle_s > 0:
        torch.cuda.synchronize()
        time.sleep(idle_s)
    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:  # enqueue back to back (the launch queue throttles the host)
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # untimed, not waited for: the window opens on a busy GPU, not on the first timed call's host-side setup
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1e-3


SPLIT_PATTERNS = ("balanced", "skewed", "ragged8")


def splits_for(e: int, t: int, pattern: str) -> list[int]:
    """Token counts of ``e`` experts adding up to ``t``:
    balanced -- t // e each (the last takes the remainder);
    skewed   -- one hot expert: expert i's share halves with i, rounded down to a multiple of 128 (expert 0 takes
                the rest; the last ones may be empty);
    ragged8  -- a router's draw as a BF16 MoE pads it (torch._grouped_mm's groups start on 16-byte rows: multiples
                of 8 tokens): Zipf-weighted shares (seeded, expert order shuffled) rounded down to multiples of 8,
                about every other one not a multiple of 16; experts 16, 32, ... empty, expert 0 taking the rest."""
    if pattern == "balanced":
        base = [t // e] * e
        base[-1] += t - sum(base)
        return base
    if pattern == "skewed":
        w = [2.0 ** (-i) for i in range(e)]
        s = [int(t * x / sum(w)) // 128 * 128 for x in w]
        s[0] += t - sum(s)
        return s
    if pattern == "ragged8":
        rng = random.Random(e * 1_000_003 + t)
        w = [1.0 / (i + 1) for i in range(e)]
        rng.shuffle(w)
        w[0] = 0.0  # (expert 0 takes the rest below)
        for i in range(16, e, 16):
            w[i] = 0.0
        s = [int(t * x / sum(w)) // 8 * 8 for x in w]
        s[0] += t - sum(s)
        return s
    raise ValueError(f"split pattern {pattern!r}: one of {SPLIT_PATTERNS}")


_E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.bfloat16)


def _dequant_weights(wq, e: int, n: int, k: int) -> torch.Tensor:
    """NVFP4 rowwise weights [E*N, K] -> BF16 [E, N, K] with torch ops (N % 128 == 0 and K % 64 == 0, so the
    per-group swizzled scales equal the swizzle of the whole stack and unswizzle is a reshape)."""
    lut = _E2M1.to(wq.row_data.device)
    d = wq.row_data[: e * n * k // 2].view(e * n, k // 2)
    codes = torch.stack((d & 0xF, d >> 4), dim=-1).reshape(e * n, k).long()
    c = k // 16
    s = wq.row_scales[: e * n * c].view(e * n // 128, c // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(e * n, c)
    sf = s.view(torch.float8_e4m3fn).to(torch.float32)
    g = (wq.row_amax * (1.0 / 2688.0)).repeat_interleave(n)[:, None]
    w = lut[codes].view(e * n, c, 16).float() * (sf * g)[:, :, None]
    return w.to(torch.bfloat16).view(e, n, k)


#: the weight dequantize as one fused kernel (eager torch would move ~20 GB through int64 codes on E=8)
dequant_weights = torch.compile(_dequant_weights, dynamic=False)


def fused_algorithm(kind: str, e: int, t: int, k: int, n: int) -> str:
    """The fused-decode fast plan that the sizes choose for a case (``device._dispatch.fused_fast_algorithm``): the
    "fused" column, which never takes the plans with scratch copies (swapped_64x256, copies_cutlass)."""
    return _dispatch.fused_fast_algorithm(_dispatch.GemmProblem(kind, "fast", e, t, n, k, "bf16")).name


def relative_distance(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| (Frobenius, in fp32): how far a result lies from its BF16 anchor."""
    ref = ref.float()
    return float((got.float() - ref).norm() / ref.norm())


def check_results(what: str, fns: dict, out: torch.Tensor, anchor) -> None:
    """Each mode's columns give that mode's bits (fast: the planned and the fused algorithm; exact: the planned and the
    forced exact algorithms; SPEC 12.6 / 12.2), and the fast result lies within a relative Frobenius distance of 0.35
    of the BF16 anchor's (NVFP4's own error on these inputs is a fraction of that): AssertionError otherwise. Each
    result is one call into ``out`` zeroed first (an accumulating call then adds to +0); a column whose plan cannot run
    this call is skipped, as the timing skips it."""
    def result(fn):
        out.zero_()
        fn()
        torch.cuda.synchronize()
        return out.clone()

    fast = None
    for mode, others in (("fast", ("fused",)), ("exact", ("x_fused", "x_dq", "x_hyb"))):
        if fns[mode][0] is None:
            continue
        want = result(fns[mode][0])
        fast = want if mode == "fast" else fast
        for key in others:
            fn = fns[key][0]
            if fn is None:
                continue
            try:
                got = result(fn)
            except ValueError:  # (a forced plan that cannot run this call)
                continue
            if not torch.equal(got, want):
                raise AssertionError(f"{what}: {key} gives other bits than {mode}")
    if fast is not None and anchor is not None:
        rel = relative_distance(fast, anchor())
        if not rel < 0.35:
            raise AssertionError(f"{what}: the fast result is {rel:.3f} (relative) from the BF16 anchor's")


class Planned:
    """``fn`` with the plan ``device.testing.force_plan(**plan)`` forces: the timing enters the plan once around its
    calls, so that the calls are timed as an application makes them."""

    def __init__(self, fn, **plan):
        self.fn, self.plan = fn, plan

    def __call__(self):
        with testing.force_plan(**self.plan):
            return self.fn()


def bench_case(name, e, t, k, n, pattern, kind, iters, reps, sustain, rule="te", spread=False, columns=None):
    """One table row: every column's TFLOP/s on this case. ``rule``: the scale rule both operands are quantized
    under (SPEC 12.1 pairs them); under a torchao rule the weight-dequantize column (TE factors) is not run.
    ``spread``: also print every round's TFLOP/s of each column (stderr)."""
    kind, _, out_name = kind.partition("-")  # "wgrad-bf16": wgrad with bf16 output; "wgrad-acc": accumulate=True
    gq = functools.partial(device.group_quantize, rule=rule)
    splits = splits_for(e, t, pattern)
    st = torch.tensor(splits, dtype=torch.int64, device=DEV)
    offs = torch.tensor(splits, device=DEV).cumsum(0).to(torch.int32)
    flops = 2.0 * t * n * k
    row = {"case": name}
    x = torch.randn((t, k), device=DEV, dtype=torch.bfloat16)
    w = (torch.randn((e * n, k), device=DEV, dtype=torch.bfloat16) * 0.05)
    if kind == "fprop":
        aq = gq(x, st, rowwise=True)
        bq = gq(w, torch.full((e,), n, dtype=torch.int64, device=DEV), rowwise=True,
                                   columnwise=False, block=(16, 16))
        out = torch.empty((t, n), dtype=torch.bfloat16, device=DEV)
        wt = w.view(e, n, k).transpose(1, 2)  # [E, K, N] view of the K-major weights

        def bf16_gmm():
            return torch._grouped_mm(x, wt, offs=offs)

        anchor = bf16_gmm

        def loop():
            r0 = 0
            for g, m in enumerate(splits):
                torch.matmul(x[r0:r0 + m], w[g * n:(g + 1) * n].t())
                r0 += m

        def deq():
            wd = dequant_weights(bq, e, n, k)
            return torch._grouped_mm(x, wd.transpose(1, 2), offs=offs)
    elif kind == "dgrad":
        dy = torch.randn((t, n), device=DEV, dtype=torch.bfloat16)
        aq = gq(dy, st, rowwise=True)
        bq = gq(w, torch.full((e,), n, dtype=torch.int64, device=DEV), rowwise=True,
                                   columnwise=True, block=(16, 16))
        out = torch.empty((t, k), dtype=torch.bfloat16, device=DEV)
        w3 = w.view(e, n, k)

        def bf16_gmm():
            return torch._grouped_mm(dy, w3, offs=offs)

        anchor = bf16_gmm

        def loop():
            r0 = 0
            for g, m in enumerate(splits):
                torch.matmul(dy[r0:r0 + m], w3[g])
                r0 += m

        def deq():
            wd = dequant_weights(bq, e, n, k)
            return torch._grouped_mm(dy, wd, offs=offs)
    else:
        dy = torch.randn((t, n), device=DEV, dtype=torch.bfloat16)
        aq = gq(dy, st, rowwise=False, columnwise=True)
        bq = gq(x, st, rowwise=False, columnwise=True)
        out = torch.empty((e, n, k), dtype=torch.bfloat16 if out_name == "bf16" else torch.float32, device=DEV)
        dyt = dy.t().contiguous()

        def anchor():
            return torch._grouped_mm(dyt, x, offs=offs)  # bf16 out: fp32 out is refused for bf16 inputs

        if out_name == "acc":
            out.zero_()
            main_grad = torch.zeros((e, n, k), dtype=torch.float32, device=DEV)

            def bf16_gmm():
                return main_grad.add_(anchor())
        else:
            bf16_gmm = anchor

        def loop():
            r0 = 0
            for m in splits:
                torch.matmul(dyt[:, r0:r0 + m], x[r0:r0 + m])
                r0 += m

        deq = None
    if rule != "te":
        deq = None
    acc = out_name == "acc"

    def ours(mode: str):
        return lambda: grouped_gemm(aq, bq, kind=kind, out=out, accumulate=acc, mode=mode)

    fns = {"fast": (ours("fast"), iters),
           "fused": (Planned(ours("fast"), algorithm=fused_algorithm(kind, e, t, k, n)), iters),
           "exact": (ours("exact"), iters),
           "x_fused": (Planned(ours("exact"), algorithm="exact_fused"), iters),
           "x_dq": (Planned(ours("exact"), algorithm="exact_copies"), iters),
           "x_hyb": (Planned(ours("exact"), algorithm="exact_hybrid") if kind != "wgrad" else None, iters),
           "sm100": (ours("sm100"), iters),
           "grouped_mm": (bf16_gmm, iters), "loop": (loop, iters), "deq+gmm": (deq, iters)}
    for key in ("fast", "exact", "grouped_mm"):  # the sustained columns
        fns[key + "_s"] = fns[key]
    if columns:  # the other columns are not timed (nan)
        fns = {key: (fn if key in columns else None, n_iters) for key, (fn, n_iters) in fns.items()}
    check_results(f"{name} {rule} {kind}", fns, out, anchor)
    row["plans"] = {mode: grouped_gemm_plan(aq, bq, kind=kind, out=out, accumulate=acc, mode=mode).algorithm.name
                    for mode in ("fast", "exact") if fns[mode][0] is not None}
    # `reps` rounds over all columns, each column's median; each round in its own seeded order
    times: dict[str, list[float] | None] = {key: [] for key in fns}
    keys = list(fns)
    for rep in range(reps):
        order = keys[:]
        random.Random(rep).shuffle(order)
        for key in order:
            fn, n_iters = fns[key]
            if fn is None or times[key] is None:
                continue
            state = dict(idle_s=0.3, warmup_s=sustain) if key.endswith("_s") else dict(idle_s=0.3)
            try:
                if isinstance(fn, Planned):  # (the plan forced once around the timed calls)
                    with testing.force_plan(**fn.plan):
                        times[key].append(timeit(fn.fn, n_iters, **state))
                else:
                    times[key].append(timeit(fn, n_iters, **state))
            except Exception as ex:  # noqa: BLE001 - report and go on
                print(f"  {name} {kind} {key}: {type(ex).__name__}: {str(ex)[:120]}", file=sys.stderr)
                times[key] = None
    for key, ts in times.items():
        row[key] = flops / statistics.median(ts) / 1e12 if ts else float("nan")
        if spread and ts:
            print(f"  {name} {rule} {kind} {key}: " + " ".join(f"{flops / x / 1e12:.1f}" for x in ts), file=sys.stderr)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=10, help="timed calls per column and round")
    ap.add_argument("--reps", type=int, default=3, help="rounds over all columns; each column reports its median")
    ap.add_argument("--sustain", type=float, default=1.0, help="seconds of the same call before a sustained timing")
    ap.add_argument("--rules", default="te", help="comma-separated scale rules of the operands, one row each (SPEC 12.1)")
    ap.add_argument("--only", default="", help="run only the rows whose 'case kind' contains this text")
    ap.add_argument("--spread", action="store_true", help="also print each round's TFLOP/s per column (stderr)")
    ap.add_argument("--columns", default="", help="comma-separated column keys to time, e.g. sm100,grouped_mm (fast, "
                    "fused, exact, x_fused, x_dq, x_hyb, sm100, grouped_mm, loop, deq+gmm, fast_s, exact_s, "
                    "grouped_mm_s; default: all; the others print nan)")
    args = ap.parse_args()
    cases = [
        ("E8 T16384 K4096 N14336 bal", 8, 16384, 4096, 14336, "balanced",
         ("fprop", "dgrad", "wgrad", "wgrad-bf16", "wgrad-acc")),
        ("E8 T16384 K4096 N14336 skew", 8, 16384, 4096, 14336, "skewed", ("fprop",)),
        ("E8 T512 K4096 N14336", 8, 512, 4096, 14336, "balanced", ("fprop", "dgrad")),  # (fast: swapped_64x256)
        ("E64 T16384 K2048 N1408", 64, 16384, 2048, 1408, "balanced",
         ("fprop", "dgrad", "wgrad", "wgrad-bf16", "wgrad-acc")),
        ("E64 T16384 K2048 N1408 ragged8", 64, 16384, 2048, 1408, "ragged8", ("fprop", "dgrad", "wgrad")),
    ]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    rules = args.rules.split(",")
    width = 30 if rules == ["te"] else 30 + max(len(r) for r in rules)  # (the rule appended to the case name)
    hdr = (f"{'case':{width}s} {'kind':10s} {'fast':>7s} {'fused':>7s} {'exact':>7s} {'x_fused':>7s} {'x_dq':>7s}"
           f" {'x_hyb':>7s} {'sm100':>7s} {'grp_mm':>7s} {'loop':>7s} {'wdq+gmm':>7s}"
           f" {'fast/gmm':>8s} {'exact/gmm':>9s} {'sm100/gmm':>9s} {'fast/wdq':>8s} | {'fast_s':>7s} {'exact_s':>7s} {'grp_mm_s':>8s}"
           f" {'fast/gmm_s':>10s} {'exact/gmm_s':>11s}")
    print(f"TFLOP/s (2*T*N*K / time); burst columns, then sustained (_s: after {args.sustain:g} s of the same call)")
    print(hdr)
    plans = []
    for name, e, t, k, n, pattern, kinds in cases:
        for kind, rule in itertools.product(kinds, rules):
            if args.only not in f"{name} {kind}":
                continue
            r = bench_case(name, e, t, k, n, pattern, kind, args.iters, args.reps, args.sustain, rule, args.spread,
                           set(args.columns.split(",")) - {""})
            torch.cuda.empty_cache()
            if len(rules) > 1 or rule != "te":
                r["case"] = f"{name} {rule}"
            print(f"{r['case']:{width}s} {kind:10s} {r['fast']:7.1f} {r['fused']:7.1f} {r['exact']:7.1f} {r['x_fused']:7.1f} "
                  f"{r['x_dq']:7.1f} {r['x_hyb']:7.1f} {r['sm100']:7.1f} {r['grouped_mm']:7.1f} "
                  f"{r['loop']:7.1f} {r['deq+gmm']:7.1f} {r['fast'] / r['grouped_mm']:8.2f} "
                  f"{r['exact'] / r['grouped_mm']:9.2f} {r['sm100'] / r['grouped_mm']:9.2f} "
                  f"{r['fast'] / r['deq+gmm']:8.2f} | {r['fast_s']:7.1f} "
                  f"{r['exact_s']:7.1f} {r['grouped_mm_s']:8.1f} {r['fast_s'] / r['grouped_mm_s']:10.2f} "
                  f"{r['exact_s'] / r['grouped_mm_s']:11.2f}", flush=True)
            plans.append(f"  {r['case']} {kind}: " + ", ".join(f"{m} {a}" for m, a in r["plans"].items()))
    print("plans chosen by the sizes:", *plans, sep="\n")


if __name__ == "__main__":
    main()
