"""The kernel-choice thresholds of device/_dispatch.py, measured: both sides of each rule timed on shapes below, at
and above its threshold, in one process.

For every rule, each case runs the two plans the rule decides between (forced through device.testing.force_plan),
alternating, ``--rounds`` rounds of ``--iters`` calls each, and prints the median time of each, their ratio and
whether the plan the rule picks for that case (device._dispatch.plan_gemm, unforced) is the faster one. A rule whose
pick loses by more than the rounds' spread on a case next to its threshold is a rule to move.

    PYTHONPATH=. python tools/ab/crossovers.py [--rounds 3] [--iters 10] [--only swapped,pair_rows]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "ab"), str(ROOT / "benchmarks")]
from ab_plans import OUT_DTYPES, gemm_call, operands, parse_case, parse_plan  # noqa: E402
from bench_grouped_gemm import timeit  # noqa: E402

import device  # noqa: E402
from device import _dispatch  # noqa: E402

D = _dispatch


def _wide_swapped_e8_rows(kind: str) -> list[tuple[str, str, str]]:
    """swapped_256x128 against the plan without row 1b on E8 K4096 N14336 ``kind`` from 128 to 2048 rows per group:
    the fused kernels up to 512 rows, the copies from 1024."""
    return [(f"8,{8 * r},4096,14336,{kind}", "algorithm=swapped_256x128",
             "algorithm=fused" if r <= 512 else "algorithm=copies_cutlass") for r in (128, 256, 512, 1024, 2048)]


# rule name -> (the threshold it sets, [(case, plan A, plan B)]): cases "E,T,K,N,kind[,out]" (ab_plans' syntax)
RULES = {
    "swapped": (f"SWAPPED_MAX_ROWS = {D.SWAPPED_MAX_ROWS}: fprop / dgrad rows per group", [
        (f"8,{8 * r},4096,14336,fprop", "algorithm=swapped_64x256", "algorithm=fused") for r in (64, 96, 128)]
        + [(f"8,{8 * r},4096,14336,dgrad", "algorithm=swapped_64x256", "algorithm=fused") for r in (96, 128)]),
    "wide_swapped_rows": (f"WIDE_SWAPPED_MIN_ROWS = {D.WIDE_SWAPPED_MIN_ROWS}: fprop rows per group (contraction >= "
                          f"{D.WIDE_SWAPPED_MIN_CONTRACTION})", _wide_swapped_e8_rows("fprop")),
    "wide_swapped_contraction": (f"WIDE_SWAPPED_MIN_CONTRACTION = {D.WIDE_SWAPPED_MIN_CONTRACTION}: fprop contraction "
                                 "(256 rows per group)", [
        (f"64,16384,{k},1408,fprop", "algorithm=swapped_256x128", "algorithm=fused") for k in (1024, 1408, 2048)]),
    "wide_swapped_dgrad": (f"WIDE_SWAPPED_MIN_ROWS = {D.WIDE_SWAPPED_MIN_ROWS} and WIDE_SWAPPED_MIN_CONTRACTION = "
                           f"{D.WIDE_SWAPPED_MIN_CONTRACTION} for dgrad (contraction N)",
                           _wide_swapped_e8_rows("dgrad") + [
        (f"64,16384,2048,{n},dgrad", "algorithm=swapped_256x128", "algorithm=fused") for n in (1024, 1408, 2048)]),
    "skinny": (f"SKINNY_MAX_ROWS = {D.SKINNY_MAX_ROWS}: output rows per group (wgrad: dW's N)", [
        (f"64,16384,2048,{n},wgrad", "algorithm=fused_64x256", "algorithm=fused_128x256") for n in (64, 96, 128)]),
    "pair_rows": (f"PAIR_MIN_ROWS = {D.PAIR_MIN_ROWS}: rows per group (contraction >= {D.PAIR_MIN_CONTRACTION})", [
        (f"16,{16 * r},4096,4096,fprop", "algorithm=fused_pair_256x256", "algorithm=fused_128x256")
        for r in (128, 256, 512)]),
    "pair_contraction": (f"PAIR_MIN_CONTRACTION = {D.PAIR_MIN_CONTRACTION}: contraction (512 rows per group)", [
        (f"16,8192,{k},4096,fprop", "algorithm=fused_pair_256x256", "algorithm=fused_128x256")
        for k in (512, 1024, 2048)]),
    "copies": (f"COPIES_MIN_REUSE = {D.COPIES_MIN_REUSE}: fprop rows per group (N, K >= 1024)", [
        (f"8,{8 * r},4096,14336,fprop", "algorithm=copies_cutlass", "algorithm=fused") for r in (512, 1024, 2048)]),
    "wgrad_f32": (f"WGRAD_COPIES_MIN_ROWS_F32 = {D.WGRAD_COPIES_MIN_ROWS_F32}: fp32 wgrad rows per group", [
        (f"8,{8 * r},4096,14336,wgrad,f32", "algorithm=copies_cutlass", "algorithm=fused") for r in (256, 512, 1024)]),
    "wgrad_acc": (f"WGRAD_COPIES_MIN_ROWS_ACC = {D.WGRAD_COPIES_MIN_ROWS_ACC}: accumulating wgrad rows per group", [
        (f"64,{64 * r},2048,1408,wgrad,f32+c", "algorithm=copies_cutlass", "algorithm=fused") for r in (32, 64, 128)]),
    "wgrad_bf16": (f"WGRAD_COPIES_MIN_REUSE_BF16 = {D.WGRAD_COPIES_MIN_REUSE_BF16}: bf16 wgrad N K / (N + K)", [
        (f"32,8192,2048,{n},wgrad,bf16", "algorithm=copies_cutlass", "algorithm=fused") for n in (1024, 2048, 4096)]),
    "wgrad_bf16_large": (f"WGRAD_COPIES_MIN_REUSE_BF16_LARGE = {D.WGRAD_COPIES_MIN_REUSE_BF16_LARGE} from "
                         f"{D.WGRAD_COPIES_MIN_ROWS_LARGE} rows and 2^{D.WGRAD_COPIES_MIN_WORK.bit_length() - 1} "
                         "multiply-adds: bf16 wgrad", [
        (c, "algorithm=copies_cutlass", "algorithm=fused")
        for c in ("64,16384,2048,1408,wgrad,bf16", "64,8192,2048,1408,wgrad,bf16", "32,8192,2048,1024,wgrad,bf16",
                  "8,2048,2048,2048,wgrad,bf16")]),
    "exact_wgrad": (f"EXACT_WGRAD_COPIES_MIN_ROWS = {D.EXACT_WGRAD_COPIES_MIN_ROWS}: exact wgrad rows per group", [
        (f"64,{64 * r},2048,1408,wgrad", "algorithm=exact_copies", "algorithm=exact_fused") for r in (128, 256, 512)]),
    "exact_copies": (f"EXACT_COPIES_MIN_ROWS = {D.EXACT_COPIES_MIN_ROWS}: exact fprop rows per group", [
        (f"8,{8 * r},4096,14336,fprop", "algorithm=exact_copies", "algorithm=exact_hybrid") for r in (512, 2048)]),
}


def resolve(plan_text: str, case) -> str:
    """``algorithm=fused`` stands for the fused fast kernel the sizes pick (device._dispatch's rule without the copies
    and the swapped kernel); any other plan text is returned as it is."""
    if plan_text != "algorithm=fused":
        return plan_text
    rows = case.n if case.kind == "wgrad" else case.t // case.e
    contraction = {"fprop": case.k, "dgrad": case.n, "wgrad": case.t // case.e}[case.kind]
    if rows >= _dispatch.PAIR_MIN_ROWS and contraction >= _dispatch.PAIR_MIN_CONTRACTION:
        return "algorithm=fused_pair_256x256"
    return "algorithm=fused_64x256" if rows <= _dispatch.SKINNY_MAX_ROWS else "algorithm=fused_128x256"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of alternating timings per case")
    ap.add_argument("--iters", type=int, default=10, help="calls per timing")
    ap.add_argument("--only", default="", help="comma-separated rule names (default: all): " + ", ".join(RULES))
    args = ap.parse_args()
    only = [r for r in args.only.split(",") if r] or list(RULES)
    print(f"kernel-choice crossovers on {torch.cuda.get_device_name()}: median us of {args.rounds} rounds x "
          f"{args.iters} calls; 'rule picks' = device._dispatch.plan_gemm's choice")
    print(f"{'case':34s} {'A':22s} {'B':22s} {'A us':>9s} {'B us':>9s} {'B/A':>6s} {'spread':>6s}  rule picks")
    for name in only:
        threshold, cases = RULES[name]
        print(f"--- {name}: {threshold}")
        for case_text, pa, pb in cases:
            case = parse_case(case_text)
            a, b, shape, _ = operands(case)
            plans = [parse_plan(resolve(pa, case)), parse_plan(resolve(pb, case))]
            dt = OUT_DTYPES[case.out]
            outs = [torch.zeros(shape, dtype=dt, device="cuda") for _ in plans]
            calls = [gemm_call(p, a, b, case, o) for p, o in zip(plans, outs, strict=True)]
            times: list[list[float]] = [[], []]
            for r in range(args.rounds):
                for i in (0, 1) if r % 2 == 0 else (1, 0):  # alternating which plan goes first
                    times[i].append(timeit(calls[i], args.iters, idle_s=0.05) * 1e6)
            med = [statistics.median(t) for t in times]
            spread = max((max(t) - min(t)) / statistics.median(t) for t in times)
            pick = device.grouped_gemm_plan(a, b, kind=case.kind, out_dtype=dt, accumulate=case.out == "f32+c",
                                            out=outs[0], mode=plans[0].mode).algorithm.name
            names = [p.force["algorithm"] for p in plans]
            faster = names[0] if med[0] <= med[1] else names[1]
            verdict = pick if pick not in names else (f"{pick} (faster)" if pick == faster else f"{pick} (SLOWER)")
            print(f"{case.label:34s} {names[0]:22s} {names[1]:22s} {med[0]:9.1f} {med[1]:9.1f} "
                  f"{med[1] / med[0]:6.3f} {spread:6.1%}  {verdict}", flush=True)
            del a, b, outs
            torch.cuda.empty_cache()
    device.set_num_sms(None)


if __name__ == "__main__":
    main()
