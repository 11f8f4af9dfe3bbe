"""Benchmark of a training step of device.GroupedLinear against the BF16 step on torch._grouped_mm. One table, one GPU
run.

Each step is captured in one CUDA graph (the whole-step mode: forward + backward, or the forward alone on the "fwd"
rows) and timed by replaying the graph (CUDA-event mean over --iters replays after two warm-up replays); every column
is timed --reps times, in rounds whose column order rotates, and reports its median, so the ratios come from one run.
Before a case is timed, check_results compares one eager step of each nvfp4 column with the others (the same bits)
and with the BF16 step (Y, dX and dW within 0.35 relative).

Columns:
  bf16 us         -- the step a Hopper user runs today on BF16 weights: torch._grouped_mm for fprop (Y = X W^T),
                     dgrad (dX = dY W) and wgrad (dW = dY^T X, bf16 out; dY^T made contiguous outside the step),
                     offs the int32 cumulative ends of the splits
  nvfp4 us        -- device.GroupedLinear(mode="fast", bias=False): the forward and backward of SPEC 16 (X and dY
                     group-quantized, three NVFP4 grouped GEMMs), weight planes reused (quantized before the capture,
                     as between micro-batches of one optimizer step), with the weights' fp16 copy where fprop or dgrad
                     read it (cache_f16_weights, the default)
  nvfp4 requant us -- the same with layer.weight_plane_reuse = False: both weight planes quantized inside every step
  planes only us  -- the "nvfp4" step with cache_f16_weights=False: the weight planes alone are cached
  x bf16 / requant x bf16 / planes only x bf16 -- each nvfp4 column over bf16 us (below 1: faster than BF16)
  f16 copy MiB     -- the bytes of the weights' cached fp16 copy (0: no GEMM of the step reads one)
  saved MiB / x bf16 -- bytes the layer's autograd saves for the backward apart from the (cached) weight planes,
                     counted by torch.autograd.graph.saved_tensors_hooks, against the 2 T K bytes of the bf16 X that the
                     BF16 step saves for its wgrad

    PYTHONPATH=. python benchmarks/bench_grouped_linear.py [--iters 20] [--reps 5] [--only E64] [--profile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from bench_grouped_gemm import relative_distance, splits_for, timeit

import device

DEV = "cuda"

# (name, E, T, K, N, split pattern (bench_grouped_gemm.splits_for), forward only)
CASES = [
    ("E8 T16384 K4096 N14336 skew", 8, 16384, 4096, 14336, "skewed", False),
    ("E64 T16384 K2048 N1408", 64, 16384, 2048, 1408, "balanced", False),
    ("E8 T512 K4096 N14336", 8, 512, 4096, 14336, "balanced", False),
    ("E8 T512 K4096 N14336 fwd", 8, 512, 4096, 14336, "balanced", True),
]


def capture(step) -> torch.cuda.CUDAGraph:
    """Run ``step`` twice on a side stream (warm-up: extension loads, allocator pools, caches), then capture it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.step = step  # the graph reads the tensors the step holds (e.g. grouped_mm's offs): keep them alive
    return graph


def bf16_step(x, w, dy, splits, forward_only):
    """The BF16 step's callable: torch._grouped_mm for fprop (+ dgrad + wgrad); it returns Y (and dX, dW [E, N, K]),
    which an eager call gives check_results as its anchor."""
    offs = torch.tensor(splits, device=DEV).cumsum(0).to(torch.int32)
    wt = w.transpose(1, 2)  # [E, K, N] view of the [E, N, K] weights
    dyt = dy.t().contiguous()  # wgrad's A operand [N, T], made contiguous once outside the step (as in
    # bench_grouped_gemm.py; a transposed view trips a device-side assert of torch 2.11's grouped_mm)

    def step():
        y = torch._grouped_mm(x, wt, offs=offs)
        if forward_only:
            return (y,)
        return y, torch._grouped_mm(dy, w, offs=offs), torch._grouped_mm(dyt, x, offs=offs)

    return step


def check_results(name, results: dict, reference) -> None:
    """The step's outputs (Y, and dX and dW unless forward only) are the same bits in every nvfp4 column (the cached
    planes, the fp16 copy and the requantized weights feed one GEMM model, SPEC 12.6), and each lies within a relative
    Frobenius distance of 0.35 of the BF16 step's (NVFP4's own error on these inputs is a fraction of that):
    AssertionError otherwise, before anything is timed."""
    first, want = next(iter(results.items()))
    labels = ("Y", "dX", "dW")[:len(want)]
    for column, got in results.items():
        for label, a, b in zip(labels, got, want, strict=True):
            if not torch.equal(a, b):
                raise AssertionError(f"{name}: {label} of column {column} has other bits than column {first}")
    for label, a, ref in zip(labels, want, reference, strict=True):
        rel = relative_distance(a, ref)
        if not rel < 0.35:
            raise AssertionError(f"{name}: {label} is {rel:.3f} (relative) from the BF16 step's")


def saved_activation_bytes(layer, x, splits) -> int:
    """Bytes of the tensors the layer's forward saves for backward, weight planes excluded (distinct storages)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x, splits)
    cached = layer._weight_cache[2] + (layer._weight_cache[3],) if layer._weight_cache is not None else ()
    for t in (t for t in cached if t is not None):
        storages.pop(t.untyped_storage().data_ptr(), None)
    return sum(storages.values())


def kernel_totals(fn, label: str) -> None:
    """Print (stderr) the GPU time of one eager call of ``fn`` per kernel function, largest first (torch.profiler,
    through tools/profile/profiling.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "profile"))
    from profiling import kernel_function, profiled_kernels

    totals: dict[str, list[float]] = {}
    for kname, _, duration in profiled_kernels(fn):
        totals.setdefault(kernel_function(kname), []).append(duration)
    print(f"-- {label}: {sum(map(sum, totals.values())):,.1f} us of GPU time in one eager step", file=sys.stderr)
    for kname, ds in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        print(f"   {sum(ds):9.1f} us  {len(ds):3d} x  {kname[:80]}", file=sys.stderr)


def bench_case(name, e, t, k, n, pattern, forward_only, iters, reps, profile=False):
    splits = splits_for(e, t, pattern)
    s_dev = torch.tensor(splits, dtype=torch.int64, device=DEV)
    x = torch.randn((t, k), device=DEV, dtype=torch.bfloat16)
    dy = torch.randn((t, n), device=DEV, dtype=torch.bfloat16)
    w = torch.randn((e, n, k), device=DEV, dtype=torch.bfloat16) * 0.05
    bf16 = bf16_step(x, w, dy, splits, forward_only)
    graphs = {"bf16": capture(bf16)}

    layer = device.GroupedLinear(e, k, n, bias=False, mode="fast")
    with torch.no_grad():
        layer.weight.copy_(w)
    xg = x.clone().requires_grad_(not forward_only)
    saved = 0 if forward_only else saved_activation_bytes(layer, xg, s_dev)

    def ours():
        if forward_only:
            with torch.no_grad():
                layer(xg, s_dev)
            return
        # set_to_none inside the step: the captured backward allocates the gradients from its graph's pool (an
        # accumulation into gradients held outside would write into memory a later capture drops)
        xg.grad = layer.weight.grad = None
        layer(xg, s_dev).backward(dy)

    def results():  # one eager step's outputs
        xg.grad = layer.weight.grad = None
        with torch.set_grad_enabled(not forward_only):
            y = layer(xg, s_dev)
            if forward_only:
                return (y.clone(),)
            y.backward(dy)
        return y.detach().clone(), xg.grad.clone(), layer.weight.grad.clone()

    copy_bytes = 0
    outputs = {}
    for column, reuse, f16w in (("nvfp4", True, True), ("requant", False, True), ("planes", True, False)):
        layer.weight_plane_reuse, layer.cache_f16_weights = reuse, f16w
        outputs[column] = results()
        if profile and reuse:
            kernel_totals(ours, f"{name}, {column} (weights reused)")
        graphs[column] = capture(ours)
        graphs[column].weight_cache = layer._weight_cache  # the cached tensors the graph reads stay alive
        if column == "nvfp4" and layer._weight_cache[3] is not None:
            copy_bytes = layer._weight_cache[3].numel() * layer._weight_cache[3].element_size()
    check_results(name, outputs, bf16())
    del outputs
    xg.grad = layer.weight.grad = None
    times = {c: [] for c in graphs}
    order = list(graphs)
    for r in range(reps):
        for c in order[r % len(order):] + order[:r % len(order)]:
            times[c].append(timeit(graphs[c].replay, iters))
    us = {c: statistics.median(v) * 1e6 for c, v in times.items()}
    bf16_saved = 2 * t * k
    return {"case": name, "bf16 us": us["bf16"], "nvfp4 us": us["nvfp4"], "x bf16": us["nvfp4"] / us["bf16"],
            "nvfp4 requant us": us["requant"], "requant x bf16": us["requant"] / us["bf16"],
            "planes only us": us["planes"], "planes only x bf16": us["planes"] / us["bf16"],
            "f16 copy MiB": copy_bytes / 2**20,
            "saved MiB": saved / 2**20 if saved else float("nan"),
            "saved x bf16": saved / bf16_saved if saved else float("nan")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20, help="graph replays per timing (default 20)")
    ap.add_argument("--reps", type=int, default=5, help="timings per column; the median is reported (default 5)")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    ap.add_argument("--profile", action="store_true",
                    help="also print (stderr) each case's GPU time per kernel function in one eager step (the nvfp4 "
                         "and planes-only columns)")
    args = ap.parse_args()
    if not device.is_available():
        print("needs an sm_90 GPU (device.is_available() is False)", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, torch {torch.__version__}; whole-step CUDA graphs; medians of {args.reps} x {args.iters} "
          "replays")
    cols = ["case", "bf16 us", "nvfp4 us", "x bf16", "nvfp4 requant us", "requant x bf16", "planes only us",
            "planes only x bf16", "f16 copy MiB", "saved MiB", "saved x bf16"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for name, e, t, k, n, pattern, fwd in CASES:
        if args.only not in name:
            continue
        row = bench_case(name, e, t, k, n, pattern, fwd, args.iters, args.reps, args.profile)
        cells = [row["case"]] + [f"{row[c]:.3f}" if "x " in c or c.startswith("x") else f"{row[c]:,.1f}"
                                 for c in cols[1:]]
        print("| " + " | ".join(cells) + " |", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
