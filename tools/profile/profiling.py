"""GPU kernel timings of a callable through torch.profiler (imported by benchmarks/bench_quantize.py --profile,
benchmarks/bench_grouped_linear.py --profile and the scripts of tools/)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def profiled_kernels(fn: Callable[[], object], calls: int = 1) -> list[tuple[str, float, float]]:
    """(name, start in us, duration in us) of every GPU activity (kernels, memsets, copies) of ``calls`` back-to-back
    calls of ``fn``, after one warm-up call, in start order."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [(ev.name, ev.time_range.start, ev.time_range.elapsed_us())
              for ev in prof.events() if ev.device_type.name == "CUDA"]
    return sorted(events, key=lambda e: e[1])


def kernel_function(name: str) -> str:
    """The function name in a profiled kernel's signature (``void ns::quantize_kernel<4, true>(Args const&)`` ->
    ``quantize_kernel``; ``(anonymous namespace)::`` qualifiers dropped)."""
    head = name.replace("(anonymous namespace)::", "").split("(")[0].split("<")[0].split()
    return head[-1].split("::")[-1] if head else name
