"""GPU tests of where the device ops run: on the caller's current stream, and on the device of their inputs.

* Current stream: every op is enqueued on a side stream behind a long ``torch.cuda._sleep`` and behind the copy that
  fills its input. An op launched on any other stream (the legacy default stream, the device's default stream) would
  read the input before the copy lands and produce different bytes than the oracle's.
* Two GPUs (skipped with fewer): inputs on ``cuda:1`` while ``cuda:0`` is current, both devices used alternately
  in one process (the per-device kernel set-up of ``csrc/common/per_device.h``), a CUDA graph captured on ``cuda:1``,
  and inputs spread over two devices rejected before any launch.

Expected bytes come from the oracle (``oracle.quantize`` / ``group_quantize`` / ``gemm`` / ``dequantize`` /
``swizzle``), never from another device call.
"""

from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from test_device_gemm import check_group, to_np  # noqa: E402
from test_device_quantize import assert_bytes as same_bytes  # noqa: E402
from test_device_quantize import assert_f32_bits as same_f32_bits  # noqa: E402
from test_device_quantize import host  # noqa: E402

import oracle  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two CUDA devices")

BF16 = ml_dtypes.bfloat16
SLEEP_CYCLES = 200_000_000  # ~0.1 s at 2 GHz: far longer than any op below takes to launch and run


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------

def _dev():
    import device

    return device


def rand_bf16(m: int, k: int, seed: int) -> np.ndarray:
    """Normal values with outliers, zeros and a NaN, so blocks get different scales and the slow paths run."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    if x.size:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, max(1, flat.size // 97), replace=False)] *= 40.0
        flat[rng.choice(flat.size, max(1, flat.size // 89), replace=False)] = 0.0
        flat[rng.integers(flat.size)] = np.nan
    return x.astype(BF16)


def to_dev(a: np.ndarray, dev) -> torch.Tensor:
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).copy()).view(torch.bfloat16).to(dev)
    return torch.from_numpy(np.ascontiguousarray(a).copy()).to(dev)


def check_quantized(q, ref, where: str) -> None:
    """A DeviceNVFP4Tensor (swizzled scales) against an oracle NVFP4Tensor, every buffer."""
    for p in ("row", "col"):
        r = getattr(ref, p)
        if r is None:
            continue
        same_bytes(f"{where}: {p} data", getattr(q, f"{p}_data"), r.data)
        same_bytes(f"{where}: {p} scales", getattr(q, f"{p}_scales"), r.swizzled_scales())
        same_f32_bits(f"{where}: {p} amax", getattr(q, f"{p}_amax"), r.amax)


def check_grouped(g, ref, where: str) -> None:
    """A DeviceGroupedNVFP4Tensor (swizzled) against an oracle GroupedNVFP4Tensor: offsets, buffers up to the last
    offset, zero bytes past it (SPEC 9.3), amaxes."""
    offs = host(g.offsets)
    for name, row in (("row_offsets", 0), ("row_data_offsets", 2), ("row_scale_offsets", 3),
                      ("col_data_offsets", 4), ("col_scale_offsets", 5)):
        assert np.array_equal(offs[row], getattr(ref, name)), f"{where}: {name}"
    for p in ("row", "col"):
        if getattr(ref, f"{p}_data") is None:  # the planes the oracle made; the device must have made them too
            continue
        data = getattr(g, f"{p}_data")
        assert data is not None, f"{where}: the device result has no {p} plane"
        d, s = host(data), host(getattr(g, f"{p}_scales"))
        want_d, want_s = getattr(ref, f"{p}_data"), getattr(ref, f"{p}_scales")
        same_bytes(f"{where}: {p} data", d[: want_d.size], want_d)
        same_bytes(f"{where}: {p} scales", s[: want_s.size], want_s)
        assert not d[want_d.size:].any() and not s[want_s.size:].any(), f"{where}: {p} tail not zero"
        same_f32_bits(f"{where}: {p} amax", getattr(g, f"{p}_amax"), getattr(ref, f"{p}_amax"))


def check_fprop(y: torch.Tensor, xq, wq, splits, mode: str, where: str) -> None:
    """Each group's rows of a bf16 fprop output against the oracle, by test_device_gemm's per-mode contract."""
    yn, xo, wo = to_np(y), xq.to_oracle(), wq.to_oracle()
    r0 = 0
    for g, m in enumerate(splits):
        if m:
            check_group(yn[r0:r0 + m], xo.row_planes[g], wo.row_planes[g], mode, torch.bfloat16, where=f"{where} g={g}")
        r0 += m


QUANT_OPTIONS = [
    dict(rowwise=True, columnwise=True, rht=True),  # the bf16 fast kernels (RN, 1x16)
    dict(rowwise=True, columnwise=True, rht=False, block=(16, 16), rounding="sr", seed=5, offset=3),  # general
]
SPLITS = [0, 130, 17, 0, 300, 1]  # empty groups, sizes that are not multiples of 16 or 128


# ------------------------------------------------------------------------------------------------------------
# current stream
# ------------------------------------------------------------------------------------------------------------

def _behind_sleep(fill_and_run, reset):
    """Run ``fill_and_run()`` on a fresh side stream behind a ~0.1 s sleep kernel; returns its result once that
    stream has finished (only that stream is synchronised). It runs once before, on the current stream, so that
    its kernels are loaded and set up (a first launch may synchronise the device, which would hide a wrong
    stream), then ``reset()`` zeroes its inputs again."""
    fill_and_run()
    torch.cuda.synchronize()
    reset()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
        out = fill_and_run()
    s.synchronize()
    return out


@pytest.mark.parametrize("opts", QUANT_OPTIONS, ids=["fast", "general"])
def test_quantize_runs_on_the_current_stream(opts):
    x = rand_bf16(300, 256, seed=1)
    src = to_dev(x, "cuda")
    dst = torch.zeros_like(src)  # all zeros until the side stream's copy: another stream would quantize zeros
    torch.cuda.synchronize()

    def run():
        dst.copy_(src)
        return _dev().quantize(dst, **opts)

    check_quantized(_behind_sleep(run, dst.zero_), oracle.quantize(x, **opts), "quantize on a side stream")


def test_group_quantize_and_gemm_run_on_the_current_stream():
    dev = _dev()
    k, n = 128, 256
    x = rand_bf16(sum(SPLITS), k, seed=2)
    w = rand_bf16(len(SPLITS) * n, k, seed=3)
    xs, ws = to_dev(x, "cuda"), to_dev(w, "cuda")
    xd, wd = torch.zeros_like(xs), torch.zeros_like(ws)
    splits = torch.tensor(SPLITS, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()

    def run():
        xd.copy_(xs)
        wd.copy_(ws)
        xq = dev.group_quantize(xd, splits)
        wq = dev.group_quantize(wd, torch.full_like(splits, n))
        y = dev.grouped_gemm(xq, wq, kind="fprop", mode="exact")
        return xq, wq, y

    xq, wq, y = _behind_sleep(run, lambda: (xd.zero_(), wd.zero_()))
    check_grouped(xq, oracle.group_quantize(x, np.array(SPLITS, np.int64)), "group_quantize on a side stream")
    check_fprop(y, xq, wq, SPLITS, "exact", "grouped_gemm on a side stream")


def test_dequantize_and_swizzle_run_on_the_current_stream():
    dev = _dev()
    rng = np.random.default_rng(4)
    rows, cols = 131, 96
    data = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(0, 0x7F, (rows, cols // 16), dtype=np.uint8)  # finite, non-negative scale bytes
    amax = np.float32(300.0)
    d_src, s_src = torch.from_numpy(data).cuda(), torch.from_numpy(scales).cuda()
    d_dst, s_dst = torch.zeros_like(d_src), torch.zeros_like(s_src)
    amax_t = torch.tensor([amax], device="cuda")
    torch.cuda.synchronize()

    def run():
        d_dst.copy_(d_src)
        s_dst.copy_(s_src)
        return (dev.dequantize(d_dst.reshape(-1), scales=s_dst, amax=amax_t, shape=(rows, cols), swizzled=False),
                dev.swizzle_scales(s_dst))

    y, swz = _behind_sleep(run, lambda: (d_dst.zero_(), s_dst.zero_()))
    want = oracle.dequantize(oracle.QuantizedPlane(data, scales, amax, (rows, cols)))
    same_f32_bits("dequantize on a side stream", y, want)
    same_bytes("swizzle_scales on a side stream", swz, oracle.swizzle.swizzle_scales(scales))


# ------------------------------------------------------------------------------------------------------------
# two GPUs
# ------------------------------------------------------------------------------------------------------------

@two_gpus
@pytest.mark.parametrize("opts", QUANT_OPTIONS, ids=["fast", "general"])
def test_quantize_on_the_device_that_is_not_current(opts):
    x = rand_bf16(1000, 512, seed=10)
    ref = oracle.quantize(x, **opts)
    with torch.cuda.device(0):
        q = _dev().quantize(to_dev(x, "cuda:1"), **opts)
        assert torch.cuda.current_device() == 0
    for name in ("row_data", "row_scales", "row_amax", "col_data", "col_scales", "col_amax"):
        assert getattr(q, name).device == torch.device("cuda:1"), name
    check_quantized(q, ref, "quantize on cuda:1, cuda:0 current")


@two_gpus
def test_grouped_ops_on_the_device_that_is_not_current():
    dev = _dev()
    k, n = 256, 384
    x = rand_bf16(sum(SPLITS), k, seed=11)
    w = rand_bf16(len(SPLITS) * n, k, seed=12)
    with torch.cuda.device(0):
        splits = torch.tensor(SPLITS, dtype=torch.int64, device="cuda:1")
        xq = dev.group_quantize(to_dev(x, "cuda:1"), splits, columnwise=True, rht=True)
        wq = dev.group_quantize(to_dev(w, "cuda:1"), torch.full_like(splits, n))
        ys = {mode: dev.grouped_gemm(xq, wq, kind="fprop", mode=mode) for mode in ("fast", "exact")}
        assert torch.cuda.current_device() == 0
    assert all(y.device == torch.device("cuda:1") for y in ys.values())
    ref = oracle.group_quantize(x, np.array(SPLITS, np.int64), columnwise=True, rht=True)
    check_grouped(xq, ref, "group_quantize on cuda:1")
    for mode, y in ys.items():
        check_fprop(y, xq, wq, SPLITS, mode, f"grouped_gemm {mode} on cuda:1")


@two_gpus
def test_both_devices_in_turn():
    """The same calls on cuda:0, cuda:1, cuda:0, cuda:1 (each launcher sets its kernels up once per device, on
    first use there), both matching the oracle each time."""
    from device.testing import force_plan

    dev = _dev()
    k, n = 128, 256
    x = rand_bf16(sum(SPLITS), k, seed=20)
    w = rand_bf16(len(SPLITS) * n, k, seed=21)
    ref_q = oracle.quantize(x, columnwise=True, rht=True)
    ref_g = oracle.group_quantize(x, np.array(SPLITS, np.int64))
    # Every round's results stay alive, so that no later round's outputs land in blocks that the caching allocator
    # freed after an earlier round wrote the same bytes there (a launch that wrote nothing would then pass).
    kept = []
    for i, d in enumerate(("cuda:0", "cuda:1", "cuda:0", "cuda:1")):
        with torch.cuda.device(1 - int(d[-1])):  # the other device is current
            q = dev.quantize(to_dev(x, d), columnwise=True, rht=True)
            splits = torch.tensor(SPLITS, dtype=torch.int64, device=d)
            xq = dev.group_quantize(to_dev(x, d), splits)
            wq = dev.group_quantize(to_dev(w, d), torch.full_like(splits, n))
            with force_plan(algorithm="fused_pair_256x256" if i % 2 else "fused_128x256"):
                y = dev.grouped_gemm(xq, wq, kind="fprop")
        check_quantized(q, ref_q, f"round {i} on {d}")
        check_grouped(xq, ref_g, f"round {i} on {d}")
        check_fprop(y, xq, wq, SPLITS, "fast", f"round {i} on {d}")
        kept.append((q, xq, wq, y))


@two_gpus
def test_cuda_graph_on_the_second_device():
    """group_quantize + grouped_gemm captured once on cuda:1 and replayed with new data and new split values (an
    empty expert in every other replay), the outputs poisoned before each replay."""
    dev = _dev()
    e, t_cap, k, n = 4, 512, 128, 256
    with torch.cuda.device(1):
        x_buf = torch.zeros((t_cap, k), dtype=torch.bfloat16, device="cuda:1")
        w_buf = torch.zeros((e * n, k), dtype=torch.bfloat16, device="cuda:1")
        s_buf = torch.zeros(e, dtype=torch.int64, device="cuda:1")
        w_splits = torch.full((e,), n, dtype=torch.int64, device="cuda:1")

        def step():
            xq = dev.group_quantize(x_buf, s_buf)
            wq = dev.group_quantize(w_buf, w_splits)
            return xq, wq, dev.grouped_gemm(xq, wq, kind="fprop", mode="exact")

        s = torch.cuda.Stream(device=1)
        s.wait_stream(torch.cuda.current_stream(1))
        with torch.cuda.stream(s):
            s_buf.fill_(t_cap // e)
            step()  # warm-up (kernel set-up outside the capture)
        torch.cuda.current_stream(1).wait_stream(s)
        torch.cuda.synchronize(1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            xq, wq, y = step()
    rng = np.random.default_rng(30)
    for r in range(4):
        cut = np.sort(rng.integers(0, t_cap + 1, size=e - 1))
        if r % 2:
            cut[0] = 0  # an empty first expert
        splits = np.diff(np.concatenate([[0], cut, [t_cap]])).astype(np.int64)
        x = rand_bf16(t_cap, k, seed=40 + r)
        w = rand_bf16(e * n, k, seed=50 + r)
        x_buf.copy_(to_dev(x, "cuda:1"))
        w_buf.copy_(to_dev(w, "cuda:1"))
        s_buf.copy_(torch.from_numpy(splits).to("cuda:1"))
        y.fill_(float("nan"))  # every output element and byte must be rewritten by the replay
        for q in (xq, wq):
            q.row_data.fill_(0xFF)
            q.row_scales.fill_(0xFF)
            q.row_amax.fill_(float("nan"))
        with torch.cuda.device(1):
            graph.replay()
        torch.cuda.synchronize(1)
        check_grouped(xq, oracle.group_quantize(x, splits), f"replay {r}")
        check_fprop(y, xq, wq, splits.tolist(), "exact", f"replay {r}")


@two_gpus
def test_inputs_on_two_devices_are_rejected():
    dev = _dev()
    x0 = torch.zeros((32, 64), dtype=torch.bfloat16, device="cuda:0")
    x1 = torch.zeros((32, 64), dtype=torch.bfloat16, device="cuda:1")
    s0 = torch.tensor([16, 16], dtype=torch.int64, device="cuda:0")
    s1 = s0.to("cuda:1")
    with pytest.raises(ValueError, match="same device"):
        dev.group_quantize(x1, s0)
    a0, b1 = dev.group_quantize(x0, s0), dev.group_quantize(x1, s1)
    with pytest.raises(ValueError, match="different devices"):
        dev.grouped_gemm(a0, b1, kind="fprop")
    b0 = dev.group_quantize(x0, s0)
    with pytest.raises(ValueError, match="out must be on"):
        dev.grouped_gemm(a0, b0, kind="fprop", out=torch.empty((32, 16), dtype=torch.bfloat16, device="cuda:1"))
    with pytest.raises(ValueError, match="bias must be on"):
        dev.grouped_gemm(a0, b0, kind="fprop", bias=torch.zeros((2, 16), dtype=torch.float32, device="cuda:1"))
    q = dev.quantize(x0)
    with pytest.raises(ValueError, match="one device"):
        dev.dequantize(q.row_data.reshape(-1), scales=q.row_scales.to("cuda:1"), amax=q.row_amax, shape=(32, 64),
                       swizzled=True)
