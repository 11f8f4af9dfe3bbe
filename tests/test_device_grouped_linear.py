"""GPU tests of device.GroupedLinear (SPEC 16) against the NumPy oracle's layer, byte for byte.

* mode="exact" equals ``oracle.grouped_linear_forward`` / ``grouped_linear_backward`` with ``model="sequential"``,
  mode="fast" with ``model="tensor_core"``, mode="sm100" with ``model="sm100"`` (SPEC 16.5): y, x.grad,
  weight.grad (the oracle's fp32 dW rounded to the parameter dtype by torch), main_grad (fp32, in place),
  bias.grad; the bias-gradient kernel's fp32 output against
  ``oracle.grouped_bias_grad`` and SPEC 16.4's hand-worked column.
* A whole step captured in one CUDA graph and replayed with new x, dy and m_splits matches eager bit for bit;
  ``torch.compile(fullgraph=True)`` matches eager bit for bit with no graph break; forward + backward run under
  ``torch.cuda.set_sync_debug_mode("error")``.
Every test is marked ``cuda`` and skipped without a GPU. The oracle runs on the CPU: the sweep keeps K x N small where
E and T are large. ``NVFP4_FULL=1`` replays the captured step 200 times instead of 60.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402
from oracle.recipe import NVFP4Recipe  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEV = "cuda"
FULL = bool(os.environ.get("NVFP4_FULL"))
MODELS = {"exact": "sequential", "fast": "tensor_core", "sm100": "sm100"}  # SPEC 16.5


# ------------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------------

def _device():
    import device

    return device


def rand_bf16(shape, seed, scale=1.0):
    """bf16 CUDA tensor: normal values with a few outliers (x40) and exact zeros, so blocks get different scales."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32) * scale
    if x.numel():
        flat = x.view(-1)
        flat[torch.randint(0, flat.numel(), (max(1, flat.numel() // 97),), generator=g)] *= 40.0
        flat[torch.randint(0, flat.numel(), (max(1, flat.numel() // 89),), generator=g)] = 0.0
    return x.to(torch.bfloat16).to(DEV)


def rand_splits(e, t, seed, zero_frac=0.25):
    """E sizes >= 0 adding up to t, about zero_frac of them 0, the others unaligned."""
    rng = np.random.default_rng(seed)
    live = rng.random(e) >= zero_frac
    if not live.any():
        live[rng.integers(e)] = True
    w = rng.random(e) * live
    s = np.floor(w / w.sum() * t).astype(np.int64)
    s[np.flatnonzero(live)[-1]] += t - s.sum()
    return [int(v) for v in s]


def host(t):
    """A CUDA tensor as a NumPy array (bf16 as ml_dtypes.bfloat16)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def as_dtype(a: np.ndarray, dtype) -> np.ndarray:
    """An oracle fp32 array in the parameter dtype, rounded by torch (round to nearest even)."""
    return host(torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(dtype))


def assert_bytes(got, want, what):
    """Byte-equality of two arrays of one dtype and shape, naming the first differing element."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} vs " \
                                                                f"{want.dtype}{want.shape}"
    gb = got.view(np.uint16 if got.itemsize == 2 else np.uint32)
    wb = want.view(np.uint16 if want.itemsize == 2 else np.uint32)
    if not np.array_equal(gb, wb):
        idx = tuple(int(i) for i in np.argwhere(gb != wb)[0])
        raise AssertionError(f"{what}: {int((gb != wb).sum())} of {gb.size} elements differ; first at {idx}: "
                             f"device {got[idx]!r} ({int(gb[idx]):#x}), oracle {want[idx]!r} ({int(wb[idx]):#x})")


def make_layer(e, k, n, *, w, b=None, **kw):
    layer = _device().GroupedLinear(e, k, n, bias=b is not None, **kw)
    with torch.no_grad():
        layer.weight.copy_(w)
        if b is not None:
            layer.bias.copy_(b)
    return layer


# ------------------------------------------------------------------------------------------------------------------
# the sweep against the oracle
# ------------------------------------------------------------------------------------------------------------------

DEFAULT = NVFP4Recipe()
# (E, splits, N, K, bias, fuse_wgrad_accumulation, delay_wgrad_compute, recipe, params dtype)
SWEEP = {
    "T0": (1, [0], 16, 16, True, False, False, DEFAULT, torch.bfloat16),
    "E1": (1, [37], 32, 64, True, False, False, DEFAULT, torch.bfloat16),
    "E2-first-empty-main-grad": (2, [0, 130], 48, 96, True, True, False, DEFAULT, torch.bfloat16),
    "E2-K4096": (2, [17, 0], 16, 4096, False, False, False, DEFAULT, torch.bfloat16),
    "E2-N4096-rn-delayed": (2, [33, 40], 4096, 32, True, False, True,
                            NVFP4Recipe(rht_wgrad=False, sr_grad=False), torch.bfloat16),
    "E2-fp32-params": (2, [20, 44], 32, 64, True, False, False, DEFAULT, torch.float32),
    "E8-main-grad-delayed": (8, rand_splits(8, 600, 1), 64, 128, True, True, True, DEFAULT, torch.bfloat16),
    "E8-1x16-weights-seed5": (8, rand_splits(8, 300, 2), 32, 64, True, False, False,
                              NVFP4Recipe(weight_block=(1, 16), seed=5), torch.bfloat16),
    "E8-torchao": (8, rand_splits(8, 300, 3), 32, 64, False, False, False, NVFP4Recipe(rule="torchao"),
                   torch.bfloat16),
    "E8-rht-mask": (8, rand_splits(8, 300, 4), 32, 64, True, False, False, NVFP4Recipe(rht_signs=0x1234),
                    torch.bfloat16),
    "E8-128-rows": (8, rand_splits(8, 1024, 5, zero_frac=0.0), 128, 256, True, False, False, DEFAULT,
                    torch.bfloat16),
    # 256 rows per expert on average and K = 1024: fast fprop by the 2-CTA pair kernel (device splits count as
    # balanced ones, docs/design.md section 6)
    "E2-K1024-N256": (2, [300, 212], 256, 1024, True, True, False, DEFAULT, torch.bfloat16),
    "E64": (64, rand_splits(64, 2000, 6, zero_frac=0.4), 32, 48, True, True, False, DEFAULT, torch.bfloat16),
    "E128-T5000": (128, rand_splits(128, 5000, 7), 16, 32, True, False, False, DEFAULT, torch.bfloat16),
}


def run_step(layer, x, splits, dy):
    """Forward + autograd backward (a delayed wgrad stays queued: the caller runs backward_dw); returns y, x.grad."""
    xg = x.detach().clone().requires_grad_(True)
    y = layer(xg, splits)
    y.backward(dy)
    return y, xg.grad


@pytest.mark.parametrize("mode", ["exact", "fast", "sm100"])
@pytest.mark.parametrize("case", list(SWEEP))
def test_layer_matches_oracle(case, mode):
    e, splits, n, k, with_bias, fuse, delay, recipe, pdtype = SWEEP[case]
    t = sum(splits)
    seed = 1000 + len(case)
    x = rand_bf16((t, k), seed)
    w = rand_bf16((e, n, k), seed + 1, 0.05)
    dy = rand_bf16((t, n), seed + 2)
    b = rand_bf16((e, n), seed + 3) if with_bias else None
    layer = make_layer(e, k, n, w=w.to(pdtype), b=None if b is None else b.to(pdtype), recipe=recipe, mode=mode,
                       params_dtype=pdtype, fuse_wgrad_accumulation=fuse, delay_wgrad_compute=delay)
    mg0 = None
    if fuse:  # an accumulator with values, and -0.0 / NaN payloads in the first empty expert (left bit for bit)
        mg0 = torch.randn((e, n, k), generator=torch.Generator().manual_seed(seed + 4)).to(DEV)
        empty = [g for g in range(e) if splits[g] == 0]
        if empty:
            mg0[empty[0], 0, :3] = torch.tensor([-0.0, float("nan"), float("-inf")])
            mg0.view(torch.int32)[empty[0], 1, 0] = 0x7FC01234  # a NaN payload
        layer.weight.main_grad.copy_(mg0)
    s_dev = torch.tensor(splits, dtype=torch.int64, device=DEV)
    y, dx = run_step(layer, x, s_dev, dy)
    if delay:
        assert layer.weight.grad is None and layer.need_backward_dw()
        if fuse:
            assert_bytes(host(layer.weight.main_grad), host(mg0), f"{case}: main_grad before backward_dw")
        layer.backward_dw()
        assert not layer.need_backward_dw()

    model = MODELS[mode]
    xo, wo, dyo = host(x), host(w), host(dy)
    bo = None if b is None else host(b)
    want_y = oracle.grouped_linear_forward(xo, wo, np.array(splits, np.int64), bias=bo, recipe=recipe, model=model)
    mg_np = None if mg0 is None else host(mg0).copy()
    dx_o, dw_o, db_o = oracle.grouped_linear_backward(xo, wo, np.array(splits, np.int64), dyo, with_bias=with_bias,
                                                      recipe=recipe, model=model, main_grad=mg_np)
    assert_bytes(host(y), want_y, f"{case} {mode}: y")
    assert_bytes(host(dx), dx_o, f"{case} {mode}: x.grad")
    if fuse:
        assert layer.weight.grad is None
        assert_bytes(host(layer.weight.main_grad), dw_o, f"{case} {mode}: main_grad")
    else:
        assert layer.weight.grad.dtype == pdtype
        assert_bytes(host(layer.weight.grad), as_dtype(dw_o, pdtype), f"{case} {mode}: weight.grad")
    if with_bias:
        assert_bytes(host(layer.bias.grad), as_dtype(db_o, pdtype), f"{case} {mode}: bias.grad")


# ------------------------------------------------------------------------------------------------------------------
# the bias-gradient kernel (SPEC 16.4), fp32 out
# ------------------------------------------------------------------------------------------------------------------

def bias_grad(dy, splits):
    """The kernel's fp32 dbias over the groups of dY's grouped quantize (its offsets table)."""
    dyq = _device().group_quantize(dy, torch.tensor(splits, dtype=torch.int64, device=DEV), rowwise=True)
    return torch.ops.nvfp4_device.bias_grad(dy, dyq.offsets)


def test_bias_grad_hand_worked_column():
    """SPEC 16.4: 32 rows 1 (x15), 2^24, 1 (x16) of one column: chunks give 2^24 + 16 and 16, the total 2^24 + 32
    (one sequential pass would stay at 2^24 + 16); an empty group gives +0.0."""
    col = np.array([1.0] * 15 + [2.0**24] + [1.0] * 16, np.float32)
    dy = torch.zeros((32, 16), dtype=torch.bfloat16)
    dy[:, 5] = torch.from_numpy(col).to(torch.bfloat16)  # all exact in bf16
    dy[:, 6] = -0.0
    got = bias_grad(dy.to(DEV), [0, 32]).cpu().numpy()
    assert got[1, 5] == np.float32(2.0**24 + 32)
    assert np.signbit(got[:, 6]).sum() == 0 and (got[:, 6] == 0).all()  # -0.0 rows sum to +0.0
    assert (got[0] == 0).all() and np.signbit(got[0]).sum() == 0  # the empty group: +0.0


@pytest.mark.parametrize("splits,n", [([0], 16), ([1], 16), ([15, 17, 0, 33], 48), ([0, 700, 3], 144),
                                      (rand_splits(64, 3000, 9), 272), ([4100, 0], 16)])
def test_bias_grad_kernel_matches_oracle(splits, n):
    """Groups of 1-4100 rows (many rounds of 8 chunks), empty groups, N past whole 128-column slices."""
    t = sum(splits)
    dy = rand_bf16((t, n), 77, 1000.0)  # large values: the fp32 order shows in the low bits
    got = bias_grad(dy, splits)
    assert_bytes(host(got), oracle.grouped_bias_grad(host(dy), np.array(splits, np.int64)), f"dbias {splits[:4]}")


def test_bias_grad_splits_past_t():
    """SPEC 9.4: the kernel reads the cut groups of the offsets table, never a row past T."""
    dy = rand_bf16((50, 32), 5)
    got = bias_grad(dy, [30, 90, 5])
    want = oracle.grouped_bias_grad(host(dy), oracle.cut_splits(np.array([30, 90, 5]), 50))
    assert_bytes(host(got), want, "dbias cut at T")


def test_bias_grad_clamps_a_foreign_offsets_table():
    """A table that does not belong to dY (bounds negative, decreasing, past T): each group's rows are the table's
    bounds clamped to [lo, hi] with lo = min(max(off[g], 0), T), hi = min(max(off[g + 1], lo), T); no read outside
    dY. Expected: the oracle's bias gradient of each clamped row range alone."""
    t, n = 50, 32
    dy = rand_bf16((t, n), 6, 100.0)
    row0 = [-7, 10, 3, 45, 200, 60, -1]  # groups [0, 10), [10, 10), [3, 45), [45, 50), [50, 50), [50, 50)
    offsets = torch.zeros((6, len(row0)), dtype=torch.int64)
    offsets[0] = torch.tensor(row0)
    got = host(torch.ops.nvfp4_device.bias_grad(dy, offsets.to(DEV)))
    d = host(dy)
    for g, (lo, hi) in enumerate([(0, 10), (10, 10), (3, 45), (45, 50), (50, 50), (50, 50)]):
        want = oracle.grouped_bias_grad(d[lo:hi], np.array([hi - lo], np.int64))[0]
        assert_bytes(got[g], want, f"dbias group {g}, rows [{lo}, {hi})")


# ------------------------------------------------------------------------------------------------------------------
# SPEC 9.5: the packed columnwise scales the layer keeps for its backward
# ------------------------------------------------------------------------------------------------------------------

def worst_units(t, e, q):
    """SPEC 9.3's W(q) = e + max(t - e, 0) // q."""
    return e + max(t - e, 0) // q


@pytest.mark.parametrize("splits,k", [([3, 0, 130], 64), ([0], 16), ([1], 16), ([17, 0, 64, 1], 144),
                                      ([1] * 7 + [505], 128), (rand_splits(64, 2000, 8, zero_frac=0.4), 48),
                                      ([300, 301], 272)])
def test_packed_col_scales_match_oracle(splits, k):
    """Packed: each group's compact columnwise scales of ``oracle.quantize`` of its rows, row-major, one group after
    the other, then 0x00 to K * W(16) bytes ([1] * 7 + [505] fills the capacity exactly). Swizzled again: the
    oracle's grouped swizzled columnwise scales, then 0x00 to the SPEC 9.3 capacity."""
    t, e = sum(splits), len(splits)
    x = rand_bf16((t, k), 21)
    xs = torch.tensor(splits, dtype=torch.int64, device=DEV)
    q = _device().group_quantize(x, xs, rowwise=False, columnwise=True)
    packed = torch.ops.nvfp4_device.pack_col_scales(q.col_scales, q.offsets, t, k)
    xh = host(x)
    parts, start = [], 0
    for m in splits:
        if m:
            parts.append(oracle.quantize(xh[start:start + m], rowwise=False, columnwise=True).col.scales.reshape(-1))
        start += m
    want = np.zeros(k * worst_units(t, e, 16), np.uint8)
    flat = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    want[:flat.size] = flat
    if splits == [1] * 7 + [505]:
        assert flat.size == want.size  # the premise: no 0x00 tail
    assert_bytes(host(packed), want, f"packed {splits[:4]} K={k}")
    swz = torch.ops.nvfp4_device.unpack_col_scales(packed, q.offsets, t, k)
    ref = oracle.group_quantize(xh, np.array(splits, np.int64), rowwise=False, columnwise=True).col_scales
    want = np.zeros(-(-k // 128) * 128 * 4 * worst_units(t, e, 64), np.uint8)
    want[:ref.size] = ref
    assert_bytes(host(swz), want, f"swizzled again {splits[:4]} K={k}")


def test_packed_col_scales_bad_input():
    """The ops refuse (RuntimeError from the bindings, before any launch) a wrong dtype, table shape, K, device,
    alignment or packed size."""
    x = rand_bf16((40, 32), 22)
    q = _device().group_quantize(x, torch.tensor([10, 30], dtype=torch.int64, device=DEV), columnwise=True)
    ops = torch.ops.nvfp4_device
    with pytest.raises(RuntimeError, match="dtype"):
        ops.pack_col_scales(q.col_scales.view(torch.int8), q.offsets, 40, 32)
    with pytest.raises(RuntimeError, match=r"\[6, E\+1\]"):
        ops.pack_col_scales(q.col_scales, q.offsets[:5], 40, 32)
    # a K that is not a multiple of 16: the op's SPEC 9.3 capacity refuses it before allocating, the binding too
    with pytest.raises(ValueError, match="K a multiple of 16, got 40, 2, 24"):
        ops.unpack_col_scales(torch.zeros(64, dtype=torch.uint8, device=DEV), q.offsets, 40, 24)
    from device._build import load_extension

    out = torch.zeros(64, dtype=torch.uint8, device=DEV)
    assert "multiple of 16" in load_extension().unpack_col_scales_(out, q.offsets, 2, 24, out.clone())
    with pytest.raises(RuntimeError, match="CUDA"):
        ops.pack_col_scales(q.col_scales.cpu(), q.offsets, 40, 32)
    shifted = torch.zeros(q.col_scales.numel() + 1, dtype=torch.uint8, device=DEV)[1:]  # 1 byte past an allocation
    with pytest.raises(RuntimeError, match="4-byte aligned"):
        ops.pack_col_scales(shifted, q.offsets, 40, 32)
    n_packed = 32 * worst_units(40, 2, 16)  # SPEC 9.5: K * W(16)
    shifted = torch.zeros(n_packed + 1, dtype=torch.uint8, device=DEV)[1:]
    with pytest.raises(RuntimeError, match="packed scales must be 4-byte aligned"):
        ops.unpack_col_scales(shifted, q.offsets, 40, 32)
    with pytest.raises(RuntimeError, match="a multiple of 4 bytes, got 14 bytes"):
        ops.unpack_col_scales(torch.zeros(14, dtype=torch.uint8, device=DEV), q.offsets, 40, 32)


def test_packed_col_scales_foreign_table_stays_in_bounds():
    """A table of another call (400 rows, so offsets past these buffers' ends) reads and writes nothing outside the
    buffers: the out-variant bindings write into the front of larger poisoned tensors, whose bytes after the output
    keep their poison."""
    from device._build import load_extension

    ext = load_extension()
    dev = _device()
    small = dev.group_quantize(rand_bf16((40, 32), 23), torch.tensor([10, 30], dtype=torch.int64, device=DEV),
                               columnwise=True)
    big = dev.group_quantize(rand_bf16((400, 32), 24), torch.tensor([300, 100], dtype=torch.int64, device=DEV),
                             columnwise=True)
    n_packed = 32 * worst_units(40, 2, 16)  # SPEC 9.5: K * W(16)
    n_swz = small.col_scales.numel()
    packed = torch.full((n_packed + 4096,), 0xA5, dtype=torch.uint8, device=DEV)
    assert ext.pack_col_scales_(small.col_scales, big.offsets, 2, 32, packed[:n_packed]) == ""
    swz = torch.full((n_swz + 4096,), 0xA5, dtype=torch.uint8, device=DEV)
    assert ext.unpack_col_scales_(packed[:n_packed], big.offsets, 2, 32, swz[:n_swz]) == ""
    torch.cuda.synchronize()
    assert bool((packed[n_packed:] == 0xA5).all()) and bool((swz[n_swz:] == 0xA5).all())


def test_saved_activation_bytes(monkeypatch):
    """SPEC 16.1 / 9.5: what the layer keeps for its backward apart from the weight planes (as the benchmark counts
    it), E = 8, T = 512, K = 4096: X's columnwise data (K * 16 * W(16) / 2), its packed scales (K * W(16)), amaxes,
    offsets table and splits: at most 0.35 of the bf16 X."""
    e, t, k, n = 8, 512, 4096, 16
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))  # the benchmark imports its sibling bench_grouped_gemm
    spec = importlib.util.spec_from_file_location("bench_grouped_linear", benchmarks / "bench_grouped_linear.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # its saved_activation_bytes: the benchmark's "saved" column
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 2, 0.05))
    x = rand_bf16((t, k), 1).requires_grad_(True)
    splits = torch.tensor(rand_splits(e, t, 11), dtype=torch.int64, device=DEV)
    w16 = worst_units(t, e, 16)
    want = k * 16 * w16 // 2 + k * w16 + e * 4 + 6 * (e + 1) * 8 + e * 8
    assert bench.saved_activation_bytes(layer, x, splits) == want
    assert want / (2 * t * k) <= 0.35


# ------------------------------------------------------------------------------------------------------------------
# SPEC 9.4: device splits that do not add up to T
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("splits", [[30, 90, 5], [-5, 20, 10], [0, 0, 0]])
def test_splits_not_adding_up_to_t(splits):
    e, t, n, k = 3, 100, 32, 64
    x, w, dy, b = rand_bf16((t, k), 1), rand_bf16((e, n, k), 2, 0.05), rand_bf16((t, n), 3), rand_bf16((e, n), 4)
    layer = make_layer(e, k, n, w=w, b=b, mode="exact")
    y, dx = run_step(layer, x, torch.tensor(splits, dtype=torch.int64, device=DEV), dy)
    cut = oracle.cut_splits(np.array(splits, np.int64), t)
    p = int(cut.sum())  # rows [0, p) belong to the cut groups; the rest of y and dx is not defined (SPEC 16.5)
    xo, wo, dyo = host(x)[:p], host(w), host(dy)[:p]
    assert_bytes(host(y)[:p], oracle.grouped_linear_forward(xo, wo, cut, bias=host(b)), "y")
    dx_o, dw_o, db_o = oracle.grouped_linear_backward(xo, wo, cut, dyo, with_bias=True)
    assert_bytes(host(dx)[:p], dx_o, "x.grad")
    assert_bytes(host(layer.weight.grad), as_dtype(dw_o, torch.bfloat16), "weight.grad")
    assert_bytes(host(layer.bias.grad), as_dtype(db_o, torch.bfloat16), "bias.grad")


# ------------------------------------------------------------------------------------------------------------------
# weight-plane reuse
# ------------------------------------------------------------------------------------------------------------------

def test_weight_planes_reused_until_the_weight_changes():
    e, t, n, k = 4, 200, 32, 64
    splits = rand_splits(e, t, 11)
    s_dev = torch.tensor(splits, dtype=torch.int64, device=DEV)
    x = rand_bf16((t, k), 12)
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 13, 0.05), mode="exact")

    def check(what):
        y = layer(x, s_dev)
        want = oracle.grouped_linear_forward(host(x), host(layer.weight), np.array(splits))
        assert_bytes(host(y), want, what)
        return layer._weight_cache[2]

    first = check("first forward")
    assert check("second forward") is first, "unchanged weights were quantized again"
    with torch.no_grad():
        layer.weight.mul_(1.5)  # in place: the version counter moves
    second = check("after an in-place update")
    assert second is not first
    layer.weight.data = rand_bf16((e, n, k), 14, 0.05)  # new storage
    assert check("after weight.data =") is not second
    layer.weight_plane_reuse = False
    check("without reuse")


def decode_launches(fn) -> int:
    """How many fp16 operand copies (decode_plane_kernel launches) one call of ``fn`` makes (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for ev in prof.events() if ev.device_type.name == "CUDA" and "decode_plane_kernel" in ev.name)


# cache_f16_weights (mode "fast", the default): with 256 tokens per expert on average (300 and 212; device splits
# count as balanced groups, which fill 256-row tiles) and N = K = 1024 fprop and dgrad run over fp16 copies (CUTLASS),
# reading the weights' cached fp16 copy instead of decoding a weight plane; y, x.grad and weight.grad are the oracle's
# bytes. 16x16 weight blocks: the one copy serves both GEMMs (SPEC 6.3), so a step decodes
# only X's and dY's rowwise planes; 1x16 blocks: fprop only (dgrad then runs the fused kernel, which decodes in the
# kernel). With a bias, fprop adds it in CUTLASS's epilogue (bias.grad checked too). An in-place update rebuilds the
# copy.
@pytest.mark.parametrize("block,decodes,with_bias", [((16, 16), 2, False), ((1, 16), 1, False), ((16, 16), 2, True)])
def test_f16_weight_copy_matches_oracle(block, decodes, with_bias):
    from device._build import load_gemm_extension

    if not load_gemm_extension().has_cutlass():
        pytest.skip("copies_cutlass is not built (nvidia-cutlass not installed)")
    e, splits, n, k = 2, [300, 212], 1024, 1024
    t = sum(splits)
    recipe = NVFP4Recipe(weight_block=block)
    x, dy = rand_bf16((t, k), 21), rand_bf16((t, n), 22)
    b = rand_bf16((e, n), 24) if with_bias else None
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 23, 0.05), b=b, recipe=recipe)  # (cache_f16_weights=True)
    s_dev = torch.tensor(splits, dtype=torch.int64, device=DEV)

    def step():
        layer.weight.grad = None
        if with_bias:
            layer.bias.grad = None
        return run_step(layer, x, s_dev, dy)

    for what in ("first step", "after an in-place update"):
        y, dx = step()
        copy = layer._weight_cache[3]
        assert copy is not None and copy.dtype == torch.float16 and tuple(copy.shape) == (e, n, k)
        xo, wo, dyo = host(x), host(layer.weight), host(dy)
        so = np.array(splits, np.int64)
        bo = None if b is None else host(layer.bias)
        want_y = oracle.grouped_linear_forward(xo, wo, so, bias=bo, recipe=recipe, model="tensor_core")
        dx_o, dw_o, db_o = oracle.grouped_linear_backward(xo, wo, so, dyo, with_bias=with_bias, recipe=recipe,
                                                          model="tensor_core")
        assert_bytes(host(y), want_y, f"{block} {what}: y")
        if with_bias:
            assert_bytes(host(layer.bias.grad), as_dtype(db_o, torch.bfloat16), f"{block} {what}: bias.grad")
        assert_bytes(host(dx), dx_o, f"{block} {what}: x.grad")
        assert_bytes(host(layer.weight.grad), as_dtype(dw_o, torch.bfloat16), f"{block} {what}: weight.grad")
        assert decode_launches(step) == decodes
        assert layer._weight_cache[3] is copy, "the copy of unchanged weights was made again"
        with torch.no_grad():
            layer.weight.mul_(0.75)
    assert layer._weight_cache[3] is copy  # (rebuilt at the next forward)
    step()
    assert layer._weight_cache[3] is not copy
    # no copy where no GEMM reads it (32 tokens per expert: swapped_64x256), nor with cache_f16_weights=False
    small = make_layer(e, k, n, w=layer.weight.detach(), recipe=recipe)
    run_step(small, x[:64], torch.tensor([32, 32], dtype=torch.int64, device=DEV), dy[:64])
    lean = make_layer(e, k, n, w=layer.weight.detach(), recipe=recipe, cache_f16_weights=False)
    run_step(lean, x, s_dev, dy)
    assert small._weight_cache[3] is None and lean._weight_cache[3] is None


def test_is_first_microbatch_controls_the_cache():
    """A write through weight.data bumps no version: the default check keeps the old planes (the documented limit);
    is_first_microbatch=True quantizes the new weights; False reuses the cached planes even after a versioned
    update; after invalidate_weight_planes() False quantizes again."""
    e, t, n, k = 4, 200, 32, 64
    splits = rand_splits(e, t, 15)
    s_dev = torch.tensor(splits, dtype=torch.int64, device=DEV)
    x = rand_bf16((t, k), 16)
    w0, w1 = rand_bf16((e, n, k), 17, 0.05), rand_bf16((e, n, k), 18, 0.05)
    layer = make_layer(e, k, n, w=w0, mode="exact")

    def want(w):
        return oracle.grouped_linear_forward(host(x), host(w), np.array(splits))

    assert_bytes(host(layer(x, s_dev)), want(w0), "first forward")
    planes0 = layer._weight_cache[2]
    layer.weight.data.copy_(w1)  # no version bump
    assert_bytes(host(layer(x, s_dev)), want(w0), "default after .data.copy_: the cached (stale) planes")
    assert layer._weight_cache[2] is planes0
    assert_bytes(host(layer(x, s_dev, is_first_microbatch=True)), want(w1), "is_first_microbatch=True")
    planes1 = layer._weight_cache[2]
    assert planes1 is not planes0
    with torch.no_grad():
        layer.weight.mul_(2.0)  # versioned, but False does not look
    assert_bytes(host(layer(x, s_dev, is_first_microbatch=False)), want(w1), "is_first_microbatch=False")
    assert layer._weight_cache[2] is planes1
    layer.invalidate_weight_planes()
    assert_bytes(host(layer(x, s_dev, is_first_microbatch=False)), want(w1 * 2.0), "False after invalidate")


# ------------------------------------------------------------------------------------------------------------------
# CUDA graph: one capture of forward + backward, replayed with new data and splits
# ------------------------------------------------------------------------------------------------------------------

def _graph_splits(e, t, it):
    if it % 5 == 0:
        return [0] * (e - 1) + [t]  # every expert but one empty
    if it % 5 == 1:
        return [t] + [0] * (e - 1)
    if it % 5 == 2:
        return [t // e] * (e - 1) + [t - t // e * (e - 1)]
    return rand_splits(e, t, 500 + it, zero_frac=0.3)


@pytest.mark.parametrize("reuse", [True, False])
def test_cuda_graph_whole_step(reuse):
    e, t, n, k = 8, 512, 64, 128
    w, b = rand_bf16((e, n, k), 21, 0.05), rand_bf16((e, n), 22)
    layer = make_layer(e, k, n, w=w, b=b)
    layer.weight_plane_reuse = reuse
    ref = make_layer(e, k, n, w=w, b=b)  # the eager twin
    x_buf = rand_bf16((t, k), 23).requires_grad_(True)
    dy_buf = rand_bf16((t, n), 24)
    s_buf = torch.tensor(_graph_splits(e, t, 3), dtype=torch.int64, device=DEV)

    def step():
        y = layer(x_buf, s_buf)
        y.backward(dy_buf)
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up: extension loads, allocator pools, the weight-plane cache
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in (x_buf, layer.weight, layer.bias):
        p.grad = None  # the captured backward allocates the gradients from the graph's pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = step()
    grads = (x_buf.grad, layer.weight.grad, layer.bias.grad)

    replays = 200 if FULL else 60
    for it in range(replays):
        splits = _graph_splits(e, t, it)
        s_buf.copy_(torch.tensor(splits, dtype=torch.int64))
        with torch.no_grad():
            x_buf.copy_(rand_bf16((t, k), 3000 + it))
        dy_buf.copy_(rand_bf16((t, n), 4000 + it))
        graph.replay()
        ref.weight.grad = ref.bias.grad = None
        y_ref, dx_ref = run_step(ref, x_buf, torch.tensor(splits, dtype=torch.int64, device=DEV), dy_buf)
        torch.cuda.synchronize()
        where = f"replay {it} splits {splits}"
        assert_bytes(host(y_static), host(y_ref), f"{where}: y")
        assert_bytes(host(grads[0]), host(dx_ref), f"{where}: x.grad")
        assert_bytes(host(grads[1]), host(ref.weight.grad), f"{where}: weight.grad")
        assert_bytes(host(grads[2]), host(ref.bias.grad), f"{where}: bias.grad")


def test_cuda_graph_main_grad_accumulates():
    """fuse_wgrad_accumulation in a captured step: every replay adds its dW into main_grad; empty experts stay."""
    e, t, n, k = 4, 256, 32, 64
    w = rand_bf16((e, n, k), 31, 0.05)
    layer = make_layer(e, k, n, w=w, fuse_wgrad_accumulation=True)
    ref = make_layer(e, k, n, w=w, fuse_wgrad_accumulation=True)
    x_buf, dy_buf = rand_bf16((t, k), 32), rand_bf16((t, n), 33)
    s_buf = torch.tensor([t, 0, 0, 0], dtype=torch.int64, device=DEV)

    def step():
        layer(x_buf, s_buf).backward(dy_buf)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    layer.weight.main_grad.zero_()  # (the warm-up step added into it; ref's starts at zeros too)
    for it in range(12):
        splits = _graph_splits(e, t, it)
        s_buf.copy_(torch.tensor(splits, dtype=torch.int64))
        x_buf.copy_(rand_bf16((t, k), 5000 + it))
        dy_buf.copy_(rand_bf16((t, n), 6000 + it))
        graph.replay()
        run_step(ref, x_buf, torch.tensor(splits, dtype=torch.int64, device=DEV), dy_buf)
        torch.cuda.synchronize()
        assert_bytes(host(layer.weight.main_grad), host(ref.weight.main_grad), f"replay {it}: main_grad")
    assert layer.weight.grad is None


# ------------------------------------------------------------------------------------------------------------------
# torch.compile
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend,mode", [("aot_eager", "exact"), ("inductor", "fast")])
def test_torch_compile_fullgraph_matches_eager(backend, mode):
    e, t, n, k = 4, 300, 32, 64
    splits = torch.tensor(rand_splits(e, t, 41), dtype=torch.int64, device=DEV)
    w, b = rand_bf16((e, n, k), 42, 0.05), rand_bf16((e, n), 43)
    x, dy = rand_bf16((t, k), 44), rand_bf16((t, n), 45)
    eager = make_layer(e, k, n, w=w, b=b, mode=mode)
    layer = make_layer(e, k, n, w=w, b=b, mode=mode)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(layer)(x.clone().requires_grad_(True), splits)
    assert explained.graph_break_count == 0, [str(r.reason) for r in explained.break_reasons]
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    y_ref, dx_ref = run_step(eager, x, splits, dy)
    for step in range(2):  # the second call runs the cached compiled graph
        layer.weight.grad = layer.bias.grad = None
        y, dx = run_step(compiled, x, splits, dy)
        assert_bytes(host(y), host(y_ref), f"step {step}: y")
        assert_bytes(host(dx), host(dx_ref), f"step {step}: x.grad")
        assert_bytes(host(layer.weight.grad), host(eager.weight.grad), f"step {step}: weight.grad")
        assert_bytes(host(layer.bias.grad), host(eager.bias.grad), f"step {step}: bias.grad")
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------------------------------
# no host synchronization
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fuse,delay", [(False, False), (True, True)])
def test_no_host_synchronization(fuse, delay):
    e, t, n, k = 8, 400, 64, 128
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 51, 0.05), b=rand_bf16((e, n), 52),
                       fuse_wgrad_accumulation=fuse, delay_wgrad_compute=delay)
    splits = torch.tensor(rand_splits(e, t, 53), dtype=torch.int64, device=DEV)
    x, dy = rand_bf16((t, k), 54).requires_grad_(True), rand_bf16((t, n), 55)
    layer(x, splits).backward(dy)  # warm-up: extension loads
    layer.backward_dw()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        layer(x, splits).backward(dy)
        layer.backward_dw()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------------------------------
# bad input on the device
# ------------------------------------------------------------------------------------------------------------------

def test_bad_input_errors():
    layer = make_layer(3, 32, 16, w=rand_bf16((3, 16, 32), 61))
    x = rand_bf16((40, 32), 62)
    ok = torch.tensor([10, 10, 20], dtype=torch.int64, device=DEV)
    cases = [
        ((x.float(), ok), TypeError, "bfloat16"),
        ((x.cpu(), ok), ValueError, "device"),
        ((rand_bf16((40, 48), 63), ok), ValueError, "in_features=32"),
        ((x, ok.cpu()), ValueError, "m_splits must be on x's device"),
        ((x, ok.int()), TypeError, "int64"),
        ((x, ok[:2]), ValueError, "num_gemms=3"),
        ((x, [10, 10]), ValueError, "num_gemms=3"),
        ((x, [10, 10, 19]), ValueError, "add up to 39"),
    ]
    for args, err, match in cases:
        with pytest.raises(err, match=match):
            layer(*args)
    y = layer(x, [10, 10, 20])  # a list is accepted and copied once
    assert y.shape == (40, 16) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("flag", ["weight_plane_reuse", "delay_wgrad_compute", "fuse_wgrad_accumulation",
                                  "cache_f16_weights"])
def test_flags_assigned_after_construction_are_checked(flag):
    """The settings are attributes a user assigns (``layer.weight_plane_reuse = False`` before a graph capture); the
    string "False" must not act as True (it would reuse stale weight planes, or queue the wgrad)."""
    layer = make_layer(2, 32, 16, w=rand_bf16((2, 16, 32), 64))
    x = rand_bf16((24, 32), 65)
    setattr(layer, flag, "False")
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        layer(x, [12, 12])
    setattr(layer, flag, np.False_)  # a NumPy bool is a flag (the constructor takes it too)
    assert layer(x, [12, 12]).shape == (24, 16)


def test_a_layer_moved_off_the_gpu_is_refused_before_any_work():
    layer = make_layer(2, 32, 16, w=rand_bf16((2, 16, 32), 66)).cpu()
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        layer(rand_bf16((24, 32), 67).cpu(), [12, 12])


def test_list_splits_equal_device_splits():
    e, t, n, k = 3, 40, 16, 32
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 71))
    x = rand_bf16((t, k), 72)
    y1 = layer(x, [5, 0, 35])
    y2 = layer(x, torch.tensor([5, 0, 35], dtype=torch.int64, device=DEV))
    assert_bytes(host(y1), host(y2), "list vs tensor splits")


def test_list_splits_guide_the_fprop_and_dgrad_plans(monkeypatch):
    """m_splits as a list reaches the plan (device.grouped_gemm's split_sizes): groups that fill 256-row tiles
    unevenly run fprop (K = 1088) and dgrad (N = 1088) on swapped_256x128, where device splits (counted as balanced
    groups: 256 rows each on average) run both on fused_pair_256x256; y, x.grad and dW are the same bits either way."""
    from device import _dispatch

    real, plans = _dispatch.plan_gemm, []

    def spy(p, **forced):
        plan = real(p, **forced)
        plans.append((p.kind, plan.algorithm.name))
        return plan

    monkeypatch.setattr(_dispatch, "plan_gemm", spy)
    splits, n, k = [300, 0, 212, 512], 1088, 1088
    e, t = len(splits), sum(splits)
    layer = make_layer(e, k, n, w=rand_bf16((e, n, k), 81, 0.05), cache_f16_weights=False)  # (no copy to read)
    x, dy = rand_bf16((t, k), 82), rand_bf16((t, n), 83)
    results = {}
    for how, s in (("list", splits), ("tensor", torch.tensor(splits, dtype=torch.int64, device=DEV))):
        plans.clear()
        layer.weight.grad = None
        y, dx = run_step(layer, x, s, dy)
        results[how] = (host(y), host(dx), host(layer.weight.grad))
        wide = "swapped_256x128" if how == "list" else "fused_pair_256x256"
        assert [a for kind, a in plans if kind in ("fprop", "dgrad")] == [wide, wide], (how, plans)
    for got, want, what in zip(results["list"], results["tensor"], ("y", "x.grad", "dW"), strict=True):
        assert_bytes(got, want, what)


def test_strided_bias_and_offset_weight():
    """A bias that is a transposed view (not contiguous), a weight at a storage offset off 16-byte alignment, and a
    weight that is a strided view (every other column of a wider buffer) give the bytes of the contiguous, aligned
    parameters, forward and backward (the bias used to reach the GEMM binding with its strides, which refused it, and
    the weight the quantize binding, which refused its alignment and, as "x must be contiguous", its strides)."""
    e, n, k, t = 2, 32, 64, 96
    w, b = rand_bf16((e, n, k), 5, 0.05), rand_bf16((e, n), 6)
    x = rand_bf16((t, k), 7)
    splits = torch.tensor([40, 56], dtype=torch.int64, device=DEV)

    def step(layer):
        xi = x.clone().requires_grad_(True)
        y = layer(xi, splits)
        y.float().square().sum().backward()
        return [host(v) for v in (y, xi.grad, layer.weight.grad, layer.bias.grad)]

    want = step(make_layer(e, k, n, w=w, b=b))
    layer = make_layer(e, k, n, w=w, b=b)
    with torch.no_grad():
        layer.bias.data = b.t().contiguous().t()  # the same values, strides (1, E)
        big = torch.empty(w.numel() + 1, dtype=torch.bfloat16, device=DEV)
        big[1:].copy_(w.reshape(-1))
        layer.weight.data = big[1:].view(e, n, k)  # 2 bytes past an allocation's start
    assert not layer.bias.is_contiguous() and layer.weight.data_ptr() % 16 == 2
    for got, ref, what in zip(step(layer), want, ("y", "dx", "dw", "dbias"), strict=True):
        assert_bytes(got, ref, what)
    layer = make_layer(e, k, n, w=w, b=b)
    with torch.no_grad():
        wide = torch.zeros((e, n, 2 * k), dtype=torch.bfloat16, device=DEV)
        wide[..., ::2] = w
        layer.weight.data = wide[..., ::2]
    assert not layer.weight.is_contiguous()
    for got, ref, what in zip(step(layer), want, ("y", "dx", "dw", "dbias"), strict=True):
        assert_bytes(got, ref, f"strided weight: {what}")
