"""Benchmark of the device NVFP4 quantizer on one GPU; prints one table.

Rows: device copy bandwidth (bytes read + written); for bf16 inputs of five shapes the fused path
(amax pass + one fused kernel: rowwise + RHT columnwise, swizzled scales), the same with both amaxes given (one pass
over X: "frac" and "vs copy" count X read once), the same with compact scales, the same with
stochastic rounding (the fast kernel against the general kernel on the same call),
the unfused path (compact quantize, then the swizzle kernel on both scale tensors), both planes without RHT under
rule "te" and rule "torchao" (SPEC 5.4), the rowwise plane alone (the default call), the fused path under rule
"torchao", plain rule "te" with 16x16 blocks (the fast kernel against the general kernel on the same call), 4over6
(SPEC 5.6; 1x16 and 16x16 blocks, two of its variants) with its time over plain rule "te" on the same planes and
blocks, and a torch.compile'd pure-torch equivalent;
grouped quantize with E=8 and E=64 skewed splits including empty experts, and the same with every group's amaxes
given (one pass).

"frac" is achieved bytes/s over the copy bandwidth, where the bytes are what the path must move: X read
twice (amax pass and quantize pass), every output written once. That is the algorithm's traffic, not HBM traffic:
the amax pass walks X in reverse tile order, so part of the second read hits L2. The copy bandwidth is a steady
state (1 GiB copies back to back, best of 5), so "frac" also carries the timed call's own costs (one launch, its
ramp and tail, the flush's dirty lines); "vs copy" divides the time of a copy of the same number of bytes, timed
exactly like the path (graph replay after the same flush, median; the faster of ``copy_`` and an elementwise copy
kernel), by the path's time. "swizzled/compact" below 1 means the compact-scale kernel is the slower one, not that
swizzling is free. Before each shape's timing, :func:`check_results` checks the timed calls' bytes against each other
and the rowwise plane of X's first rows against the oracle, so that a kernel computing garbage cannot post a number.
Run: ``PYTHONPATH=. python3 benchmarks/bench_quantize.py`` (options: ``--quick``, ``--no-compile``, ``--profile``,
``--flush read``, ``--four-over-six-only``: per shape the plain rule te row and the 4over6 rows alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

# The torch.compile baseline must round like eager torch (and SPEC 1.1): IEEE division, not Triton's div.full.f32
# (<= 2 ulp), and the bf16 round trip of the RHT kept, not elided. Set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING", "1")
os.environ.setdefault("TORCHINDUCTOR_EMULATE_PRECISION_CASTS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import device  # noqa: E402
import oracle  # noqa: E402
from device.testing import force_plan  # noqa: E402
from oracle.grouped import grouped_capacities  # noqa: E402


def _inductor_eager_numerics() -> None:
    """The same settings through torch._inductor.config (torch 2.11-2.13 names), plus no flush-to-zero."""
    import torch._inductor.config as cfg

    for obj, name in ((cfg, "emulate_precision_casts"), (getattr(cfg, "eager_numerics", None), "division_rounding"),
                      (getattr(cfg, "eager_numerics", None), "disable_ftz")):
        try:
            setattr(obj, name, True)
        except (AttributeError, TypeError):  # an older torch without the knob: the start-up check will tell
            pass


def _host_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()


PLANE_FIELDS = ("row_data", "row_scales", "row_amax", "col_data", "col_scales", "col_amax")


def assert_same_bytes(got, want, what: str, fields: tuple[str, ...] = PLANE_FIELDS) -> None:
    """The named buffers of two quantize results hold the same bytes (AssertionError naming the first that differs)."""
    for f in fields:
        assert _host_bytes(getattr(got, f)) == _host_bytes(getattr(want, f)), f"{what}: {f}"


def assert_swizzled_of_compact(swizzled, compact, what: str) -> None:
    """A swizzled-scale result against the compact-scale result of the same call: the same data and amaxes, and its
    scales the swizzle of the compact scales (SPEC 8.2), both planes."""
    assert_same_bytes(swizzled, compact, what, ("row_data", "col_data", "row_amax", "col_amax"))
    for f in ("row_scales", "col_scales"):
        assert _host_bytes(device.swizzle_scales(getattr(compact, f))) == _host_bytes(getattr(swizzled, f)), \
            f"{what}: swizzled {f}"


def assert_rows_match_oracle(compact, x: torch.Tensor, rows: int, what: str, **kw) -> None:
    """The rowwise plane (data and compact scales) of X's first ``rows`` rows is oracle.quantize's of those rows
    under the options ``kw``, given the tensor's amax (SPEC 4.3)."""
    want = oracle.quantize(x[:rows], amax=float(compact.row_amax.reshape(-1)[0]), **kw).row
    got_data = compact.row_data.reshape(x.shape[0], -1)[:rows].cpu().numpy()
    got_scales = compact.row_scales.reshape(x.shape[0], -1)[:rows].cpu().numpy()
    assert np.array_equal(got_data, want.data) and np.array_equal(got_scales, want.scales), \
        f"{what}: rowwise plane vs oracle"


def check_results(x: torch.Tensor, kw: dict, rows: int = 64) -> None:
    """The bytes of the calls a shape times, before the timing (AssertionError on any difference): the fused call's
    data and amaxes are the compact call's and its scales the swizzle of the compact scales (SPEC 8.2); the one-pass call
    (both amaxes given) writes the two-pass call's bytes; stochastic rounding gives the same bytes on the fast and the
    general kernel; and the first ``rows`` rows of the rowwise plane are oracle.quantize's of those rows given the
    tensor's amax (SPEC 4.3; the compact scales)."""
    fused = device.quantize(x, swizzled=True, **kw)
    compact = device.quantize(x, swizzled=False, **kw)
    one_pass = device.quantize(x, swizzled=True, amax=(fused.row_amax.clone(), fused.col_amax.clone()), **kw)
    assert_swizzled_of_compact(fused, compact, "compact call")
    assert_same_bytes(one_pass, fused, "one-pass call")
    sr = dict(kw, swizzled=True, rounding="sr", seed=1)
    fast = device.quantize(x, **sr)
    with force_plan(quantize="general"):
        general = device.quantize(x, **sr)
    assert_same_bytes(general, fast, "stochastic rounding, general against fast kernel",
                      ("row_data", "row_scales", "col_data", "col_scales"))
    assert_rows_match_oracle(compact, x, rows, "fused call")  # (the oracle reads a torch bf16 tensor as its values)


SHAPES = ((8192, 5120), (8192, 11328), (16384, 4096), (11328, 8192), (14336, 16384))
# How bench() evicts the inputs from L2 before each timed replay: "write" zeroes a 256 MB buffer (the usual idiom,
# and the default), which leaves up to an L2's worth of dirty lines whose write-back then overlaps the timed call;
# "read" takes the max of the same buffer, which leaves clean lines only (set by --flush).
FLUSH = "write"


def bench(fn, iters: int = 50, warmup: int = 3) -> float:
    """Median GPU time in microseconds of ``fn``: captured once in a CUDA graph (no Python or launch
    overhead in the numbers), replayed ``iters`` times, each replay timed with events after a 256 MB
    L2 flush (``FLUSH``: by writing or by reading the buffer)."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(iters):
        if FLUSH == "write":
            flush.zero_()
        else:
            flush.max()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    del graph
    return statistics.median(times)


def kernel_breakdown(fn, label: str) -> None:
    """Print the GPU kernels of one call of ``fn`` with their durations (torch.profiler, through
    tools/profile/profiling.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "profile"))
    from profiling import profiled_kernels

    print(f"-- kernels of {label}:")
    for name, _, duration in profiled_kernels(fn):
        print(f"   {duration:9.1f} us  {name[:90]}")


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written (1 GiB buffers,
    10 back-to-back copies between two events, best of 5)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            dst.copy_(src)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) * 1e-3 / 10)
    return 2 * n / best


def same_protocol_copy_us(nbytes: int, iters: int) -> float:
    """:func:`bench` time of one device copy that reads and writes ``nbytes`` in total (nbytes / 2 each way, rounded
    up to 4 KiB: the single-tensor paths' byte counts are 4 mod 16 (the 8 amax bytes), and a copy of such a size takes
    a slower path than an aligned one, which would flatter the quantizer): the faster of ``copy_`` (captured as a
    memcpy node) and an elementwise copy kernel (int32 ``bitwise_or`` with 0 into another buffer). At some byte counts
    the memcpy node runs far below the copy bandwidth (14336x16384's fused call: 2.75 against 4.22 TB/s for the
    kernel), which would flatter the quantizer too."""
    n = -(-(nbytes // 2) // 4096) * 4096
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    src32, dst32 = src.view(torch.int32), dst.view(torch.int32)
    return min(bench(lambda: dst.copy_(src), iters), bench(lambda: torch.bitwise_or(src32, 0, out=dst32), iters))


def out_bytes(m: int, k: int) -> int:
    """Bytes written by row + col planes with swizzled scales (SPEC 6, 8.2)."""
    ru = lambda n, a: (n + a - 1) // a * a  # noqa: E731
    mp = ru(m, 16)
    return m * k // 2 + ru(m, 128) * ru(k // 16, 4) + k * mp // 2 + ru(k, 128) * ru(mp // 16, 4) + 8


# ----------------------------------------------------------------------------------------------------------
# pure-torch equivalent (same math and the same bits, SPEC 4-8, checked against the oracle at start-up; for
# timing, compiled with torch.compile)
# ----------------------------------------------------------------------------------------------------------
_FMAX = torch.finfo(torch.float32).max


def _sign_vector(signs: int, device_) -> torch.Tensor:
    """SPEC 7.1: the 16 RHT signs of a mask (bit i set <=> -1)."""
    i = torch.arange(16, device=device_)
    return torch.where((signs >> i) & 1 == 1, -1.0, 1.0).float()


def check_torch_reference(fn, signs: torch.Tensor) -> str:
    """The torch baseline's bytes against the oracle on a small bf16 input: "" when equal, else what differs."""
    import numpy as np

    import oracle

    x = torch.randn(200, 96, device="cuda", dtype=torch.bfloat16) * 3
    rd, rs, cd, cs, amax, camax = fn(x, signs)
    ref = oracle.quantize(x, columnwise=True, rht=True)  # (the oracle reads torch tensors)
    got = {"row data": rd, "row scales": rs, "col data": cd, "col scales": cs}
    want = {"row data": ref.row.data, "row scales": ref.row.swizzled_scales(), "col data": ref.col.data,
            "col scales": ref.col.swizzled_scales()}
    bad = [k for k in got if not np.array_equal(got[k].cpu().numpy().reshape(-1), np.asarray(want[k]).reshape(-1))]
    return ", ".join(bad)


def _torch_plane(y: torch.Tensor, amax: torch.Tensor):
    # tensor / tensor divisions: `scalar / tensor` runs as reciprocal(tensor) * scalar, which is not the correctly
    # rounded quotient SPEC 1.1 asks for
    r, c = y.shape
    s_enc = torch.clamp(torch.full_like(amax, 2688.0) / amax, max=_FMAX)
    s_enc = torch.where((amax == 0) | (s_enc == 0), torch.ones_like(s_enc), s_enc)
    s_dec = torch.ones_like(s_enc) / s_enc
    yb = y.view(r, c // 16, 16)
    b = yb.abs().amax(-1)
    sf = torch.clamp(b * (s_enc * (1.0 / 6.0)), max=448.0).to(torch.float8_e4m3fn)
    d = sf.float() * s_dec
    m = torch.clamp(torch.ones_like(d) / d, max=_FMAX)
    q = yb * m[..., None]
    a = q.abs()
    idx = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    code = (idx | (torch.signbit(q).to(torch.uint8) << 3)).view(r, c)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed, sf.view(torch.uint8)


def _torch_swizzle(s: torch.Tensor) -> torch.Tensor:
    r, c = s.shape
    rp, cp = (r + 127) // 128 * 128, (c + 3) // 4 * 4
    p = torch.nn.functional.pad(s, (0, cp - c, 0, rp - r))
    return p.view(rp // 128, 4, 32, cp // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)


def _torch_rht(v: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """SPEC 7.2 on rows of 16: signs, four fp32 butterfly stages (strides 1, 2, 4, 8), * 0.25, rounded to bf16 --
    the same additions in the same order as the oracle and the device, so the same bits (a matmul would not be)."""
    n = v.shape[0]
    v = v * signs
    h = 1
    while h < 16:
        w = v.view(n, 16 // (2 * h), 2, h)
        a, b = w[:, :, 0], w[:, :, 1]
        v = torch.stack((a + b, a - b), dim=2).view(n, 16)
        h *= 2
    return _round_bf16(v * 0.25)


def _round_bf16(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> the nearest bf16 value (RNE), kept in fp32, by integer ops on the bits (finite inputs). Inductor
    elides a `.to(bfloat16).float()` round trip (even with emulate_precision_casts, measured on torch 2.11); integer
    arithmetic it cannot drop."""
    b = v.view(torch.int32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) & -65536).view(torch.float32)


def torch_reference(x: torch.Tensor, signs: torch.Tensor):
    """Pure-torch rowwise + RHT columnwise NVFP4 with swizzled scales (NaN-free inputs: the amaxes propagate NaN)."""
    m, k = x.shape
    xf = x.float()
    amax = xf.abs().amax()
    rd, rs = _torch_plane(xf, amax)
    mp = (m + 15) // 16 * 16
    xt = torch.nn.functional.pad(xf.t(), (0, mp - m))
    xt = _torch_rht(xt.reshape(-1, 16), signs).view(k, mp)
    camax = xt.abs().amax()
    cd, cs = _torch_plane(xt, camax)
    return rd, _torch_swizzle(rs), cd, _torch_swizzle(cs), amax, camax


# ----------------------------------------------------------------------------------------------------------

def skewed_splits(t: int, e: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(e, generator=g) ** 4
    w[torch.rand(e, generator=g) < 0.25] = 0  # empty experts
    w[0] = max(float(w[0]), 1e-3)
    s = torch.floor(w / w.sum() * t).to(torch.int64)
    s[int(torch.argmax(w))] += t - int(s.sum())
    return s


def four_over_six_rows(x: torch.Tensor, shape: str, t_te: float, iters: int, add) -> None:
    """The 4over6 rows of one shape (SPEC 5.6, its own quantizer) against plain rule "te" on the same planes and blocks
    (no RHT, swizzled scales, the same bytes moved): 1x16 blocks (plain: ``t_te``) and 16x16 (plain: timed and printed
    here, the fast kernel beside the general kernel forced on the same call, whose bytes are compared first; both plain
    calls take the bf16 fast kernels by default). Before each variant is timed (AssertionError on any
    difference): the timed call's data and amaxes are the compact-scale call's and its scales the swizzle of the
    compact scales (SPEC 8.2), both planes, and the rowwise plane of X's first 32 rows is oracle.quantize's of those
    rows given the tensor's amax."""
    plain = dict(rowwise=True, columnwise=True, swizzled=True)
    nbytes = 2 * x.numel() * 2 + out_bytes(*x.shape)
    for block in ((1, 16), (16, 16)):
        if block == (1, 16):
            t_p = t_te
        else:  # the fast kernel (its 16x16 form) and the general kernel forced, after their bytes are compared
            fast_kernel = device.quantize(x, block=block, **plain)
            with force_plan(quantize="general"):
                general_kernel = device.quantize(x, block=block, **plain)
                t_g = bench(lambda: device.quantize(x, block=block, **plain), iters)  # noqa: B023 (called inside this iteration)
            assert_same_bytes(general_kernel, fast_kernel, "16x16, general against fast kernel")
            t_p = bench(lambda: device.quantize(x, block=block, **plain), iters)  # noqa: B023 (called inside this iteration)
            add("  rule te 16x16, row+col, no RHT (the 16x16 rows' plain)", shape, t_p, nbytes,
                f"general kernel {t_g:.1f} us ({t_g / t_p:.2f}x)")
        for error, fast in (("mse", False), ("mae", True)):
            fo6 = dict(block=block, four_over_six=error, four_over_six_fast_math=fast)
            compact = device.quantize(x, **fo6, rowwise=True, columnwise=True, swizzled=False)
            timed = device.quantize(x, **fo6, **plain)
            assert_swizzled_of_compact(timed, compact, f"4over6 {fo6}")
            assert_rows_match_oracle(compact, x, 32, f"4over6 {fo6}", **fo6)
            t_46 = bench(lambda: device.quantize(x, **fo6, **plain), iters)  # noqa: B023 (called inside this iteration)
            name = f"  4over6 {error}{' fast-math' if fast else ''} {block[0]}x{block[1]}, row+col"
            add(name, shape, t_46, nbytes, f"4over6/plain time {t_46 / t_p:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--four-over-six-only", action="store_true",
                    help="per shape only the plain rule te row (row+col, no RHT) and the 4over6 rows")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--profile", action="store_true", help="also print a per-kernel breakdown (before the table)")
    ap.add_argument("--flush", choices=("write", "read"), default="write",
                    help="evict L2 before each timed call by zeroing (default) or by reading a 256 MB buffer")
    args = ap.parse_args()
    global FLUSH
    FLUSH = args.flush
    iters = 10 if args.quick else 50
    torch.manual_seed(0)
    bw = copy_bandwidth()
    rows = [("copy bandwidth (read+write)", "", f"{bw / 1e12:.2f} TB/s", "", "", "")]
    signs = _sign_vector(0xD7E8, "cuda")
    _inductor_eager_numerics()
    if not args.no_compile:  # the baseline must compute what we compute: its bytes against the oracle, once
        diff = check_torch_reference(torch.compile(torch_reference, dynamic=False), signs)
        if diff:
            rows.append(("  torch.compile baseline != oracle", "200x96", "", "", "", diff))
    copy_us: dict = {}

    def add(name, shape, us, nbytes, extra=""):
        frac = nbytes / (us * 1e-6) / bw
        if nbytes not in copy_us:
            copy_us[nbytes] = same_protocol_copy_us(nbytes, iters)
        rows.append((name, shape, f"{us:9.1f} us", f"{frac:5.2f}", f"{copy_us[nbytes] / us:5.2f}", extra))

    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        shape = f"{m}x{k}"
        # compiled per shape with static shapes: no recompilation with dynamic shapes from the second shape on
        compiled = None if args.no_compile else torch.compile(torch_reference, dynamic=False)
        nbytes = 2 * x.numel() * 2 + out_bytes(m, k)
        plain = dict(rowwise=True, columnwise=True, swizzled=True)
        if args.four_over_six_only:
            t_te = bench(lambda: device.quantize(x, rule="te", **plain), iters)  # noqa: B023 (called inside this iteration)
            add("  rule te, row+col, no RHT", shape, t_te, nbytes)
            four_over_six_rows(x, shape, t_te, iters, add)
            continue
        kw = dict(rowwise=True, columnwise=True, rht=True)
        check_results(x, kw)
        t_f = bench(lambda: device.quantize(x, swizzled=True, **kw), iters)  # noqa: B023 (called inside this iteration)
        t_c = bench(lambda: device.quantize(x, swizzled=False, **kw), iters)  # noqa: B023 (called inside this iteration)

        def unfused():
            q = device.quantize(x, swizzled=False, **kw)  # noqa: B023 (called inside this iteration)
            device.swizzle_scales(q.row_scales)
            device.swizzle_scales(q.col_scales)

        t_u = bench(unfused, iters)
        if args.profile:
            kernel_breakdown(lambda: device.quantize(x, swizzled=True, **kw), f"fused {shape}")  # noqa: B023 (called inside this iteration)
        add("fused row+RHT col+swizzled+amax", shape, t_f, nbytes, f"swizzled/compact {t_f / t_c:.3f}")
        # the same call with both amaxes given as device tensors (e.g. from the previous step): no amax pass, X read
        # once; the same bytes when the given amaxes are the computed ones
        q0 = device.quantize(x, swizzled=True, **kw)
        given = (q0.row_amax.clone(), q0.col_amax.clone())
        t_1 = bench(lambda: device.quantize(x, swizzled=True, amax=given, **kw), iters)  # noqa: B023 (called inside this iteration)
        del q0
        add("  same, amax given (one pass)", shape, t_1, x.numel() * 2 + out_bytes(m, k),
            f"one pass / two passes {t_1 / t_f:.2f}")
        add("  same, compact scales", shape, t_c, nbytes)
        # the compact scales are written by the quantize call, then read again by the swizzle kernels
        compact = m * k // 16 + k * ((m + 15) // 16 * 16) // 16
        add("  unfused (compact + swizzle kernel)", shape, t_u, nbytes + 2 * compact)
        # stochastic rounding (SPEC 3.4, the gradient's rounding in training) on the same fused work: the fast kernel
        # (SPEC 3.7's form) against the general kernel forced on the same call, and against rounding to nearest
        sr = dict(kw, swizzled=True, rounding="sr", seed=1)
        t_sr = bench(lambda: device.quantize(x, **sr), iters)  # noqa: B023 (called inside this iteration)
        with force_plan(quantize="general"):
            t_srg = bench(lambda: device.quantize(x, **sr), iters)  # noqa: B023 (called inside this iteration)
        add("  same, stochastic rounding", shape, t_sr, nbytes,
            f"sr/rn time {t_sr / t_f:.2f}, general kernel {t_srg:.1f} us ({t_srg / t_sr:.2f}x)")
        # the torchao rules (SPEC 5.4) run without RHT: side by side with the TE rule on the same planes (no RHT,
        # swizzled scales, the same bytes moved); both take the bf16 fast kernels
        t_te = bench(lambda: device.quantize(x, rule="te", **plain), iters)  # noqa: B023 (called inside this iteration)
        t_ao = bench(lambda: device.quantize(x, rule="torchao", **plain), iters)  # noqa: B023 (called inside this iteration)
        add("  rule te, row+col, no RHT", shape, t_te, nbytes)
        add("  rule torchao, row+col, no RHT", shape, t_ao, nbytes, f"torchao/te time {t_ao / t_te:.2f}")
        # the default call: the rowwise plane only (X read twice, the rowwise data and swizzled scales written)
        ru = lambda n, a: (n + a - 1) // a * a  # noqa: E731
        t_row = bench(lambda: device.quantize(x), iters)  # noqa: B023 (called inside this iteration)
        row_bytes = 2 * x.numel() * 2 + m * k // 2 + ru(m, 128) * ru(k // 16, 4) + 8
        add("  rowwise only (the default call)", shape, t_row, row_bytes, f"row / row+col time {t_row / t_te:.2f}")
        # the fused row's work under rule "torchao" (the bf16 fast kernels)
        t_ar = bench(lambda: device.quantize(x, rule="torchao", swizzled=True, **kw), iters)  # noqa: B023 (called inside this iteration)
        add("  rule torchao, row+RHT col+swizzled", shape, t_ar, nbytes, f"torchao/te time {t_ar / t_f:.2f}")
        four_over_six_rows(x, shape, t_te, iters, add)
        if compiled is not None:
            try:
                t_t = bench(lambda: compiled(x, signs), iters)  # noqa: B023 (called inside this iteration)
                add("  torch.compile pure torch", shape, t_t, nbytes, f"device speedup {t_t / t_f:.1f}x")
            except Exception as e:  # noqa: BLE001 - keep the table even if inductor fails
                rows.append(("  torch.compile pure torch", shape, "failed", "", "", type(e).__name__))
        del x

    t, k = 16384, 4096
    x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    for e in () if args.four_over_six_only else (8, 64):
        splits = skewed_splits(t, e, seed=e)
        sd = splits.cuda()
        # X read twice; every byte of the worst-case buffers (SPEC 9.3) written: the groups' data and scales by the
        # quantize pass, the rest past the last group zeroed by the setup kernel
        nb = 2 * x.numel() * 2 + sum(grouped_capacities(t, k, e).values())
        gq = lambda: device.group_quantize(x, sd, rowwise=True, columnwise=True, rht=True)  # noqa: E731, B023
        tg = bench(gq, iters)
        if args.profile:
            kernel_breakdown(gq, f"grouped E={e}")
        empties = int((splits == 0).sum())
        add(f"grouped E={e} ({empties} empty) row+RHT col+swz", f"{t}x{k}", tg, nb,
            f"max m_g {int(splits.max())}")
        # the same call with every group's two amaxes given as device tensors: X read once
        q0 = gq()
        given = (q0.row_amax.clone(), q0.col_amax.clone())
        t_1 = bench(lambda: device.group_quantize(x, sd, rowwise=True, columnwise=True, rht=True, amax=given), iters)  # noqa: B023 (called inside this iteration)
        del q0
        add("  same, amaxes given (one pass)", f"{t}x{k}", t_1, nb - x.numel() * 2,
            f"one pass / two passes {t_1 / tg:.2f}")

    widths = [max(len(str(r[i])) for r in rows) for i in range(6)]
    head = ("path", "shape", "time", "frac", "vs copy", "note")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
    line = lambda r: " | ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True))  # noqa: E731
    print(f"device: {torch.cuda.get_device_name()}  (frac = bytes moved / time / copy bandwidth; vs copy = time of "
          f"a same-size copy timed the same way / time; L2 flush by {'zeroing' if FLUSH == 'write' else 'reading'} "
          "256 MB)")
    print(line(head))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
