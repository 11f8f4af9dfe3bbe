"""GPU tests of the device kernels: byte-for-byte equality with the NumPy oracle (SPEC.md).

Every test is marked ``cuda`` and skipped when torch or a CUDA device is missing. Output buffers are poisoned
(0xFF) before the kernels run, so an unwritten byte (including swizzle padding and the grouped tail) fails.
Large shapes are sampled (the oracle side is the slow part); ``NVFP4_FULL=1`` widens the grid.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402
from device._codes import QuantizeKernel  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FULL = bool(os.environ.get("NVFP4_FULL"))
BF16 = ml_dtypes.bfloat16
M_GRID = (0, 1, 15, 16, 17, 63, 64, 127, 128, 129, 1000, 4097)
SMALL_K = (16, 32, 48)
LARGE_K = (4096, 5120, 11328)
OPTION_GRID = list(itertools.product(((1, 16), (16, 16)), (False, True), ("rn", "sr")))  # block, rht, rounding


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------

def make_input(m: int, k: int, *, kind: str = "normal", dtype=BF16, seed: int = 0) -> np.ndarray:
    """Random input; "special" adds NaN, -0, subnormals, outliers and zero blocks; "inf" adds +-Inf too."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32) * np.float32(rng.choice([1e-3, 1.0, 37.0]))
    if kind in ("special", "inf") and x.size:
        flat = x.reshape(-1)
        n = flat.size
        pick = lambda frac: rng.choice(n, size=max(1, int(n * frac)), replace=False)  # noqa: E731
        flat[pick(0.01)] = np.nan
        flat[pick(0.01)] = -0.0
        tiny = np.float32(1e-40) if dtype in (BF16, np.float32) else np.float32(3e-6)
        flat[pick(0.01)] = tiny * rng.choice([-1, 1], size=max(1, int(n * 0.01))).astype(np.float32)
        big = np.float32(1e30) if dtype in (BF16, np.float32) else np.float32(60000.0)
        flat[pick(0.002)] = big * rng.choice([-1, 1], size=max(1, int(n * 0.002))).astype(np.float32)
        if m >= 16 and k >= 32:
            x[:16, 16:32] = 0.0  # an all-zero 16x16 tile
            x[min(3, m - 1), :16] = -0.0  # an all -0 block
        if kind == "inf":
            flat[pick(0.001)] = np.inf
            flat[pick(0.001)] = -np.inf
    return x.astype(dtype)


def to_cuda(a: np.ndarray):
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a).copy()).cuda()


def host(t) -> np.ndarray:
    return t if isinstance(t, np.ndarray) else t.detach().cpu().numpy()


def assert_bytes(what: str, got, want: np.ndarray) -> None:
    g = host(got).reshape(-1).view(np.uint8)
    w = np.ascontiguousarray(want).reshape(-1).view(np.uint8)
    assert g.size == w.size, f"{what}: {g.size} bytes, oracle {w.size}"
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, f"{what}: {bad.size} bytes differ, first at {bad[:8].tolist()}: {g[bad[:8]]} vs {w[bad[:8]]}"


def assert_f32_bits(what: str, got, want) -> None:
    g = np.asarray(host(got), np.float32).reshape(-1).view(np.uint32)
    w = np.asarray(want, np.float32).reshape(-1).view(np.uint32)
    assert np.array_equal(g, w), f"{what}: {g[:8]} vs {w[:8]}"


_DEFAULTS = dict(rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=(1, 16), rule="te",
                 rounding="rn", seed=0, offset=0)


def device_opts(x2, **kw) -> dict:
    """The options device.quantize hands the launchers (the quantize plan's kernel codes included: the automatic
    choice, or the one device.testing.force_plan forces around the call)."""
    from device.quantization import _options

    return _options(x2, **{**_DEFAULTS, **kw})


def run_poisoned(x_t, *, swizzled: bool, amax=None, poison: int = 0xFF, **kw) -> dict:
    """Quantize into buffers poisoned with the byte ``poison`` through the out-variant launcher; returns the
    buffers."""
    from device import _ops

    x2 = x_t.reshape(-1, x_t.shape[-1])
    opts = device_opts(x2, **kw)
    bufs = _ops.quantize_buffers(x2.shape[0], x2.shape[1], rowwise=opts["rowwise"], columnwise=opts["columnwise"],
                                 swizzled=swizzled, device=x2.device, fill=poison)
    amax_t = None if amax is None else torch.tensor(amax, dtype=torch.float32, device=x2.device).reshape(2)
    _ops.launch_quantize(x2, bufs, None if amax_t is None else (amax_t[0:1], amax_t[1:2]), swizzled=swizzled, **opts)
    torch.cuda.synchronize()
    return bufs


def check_single(bufs: dict, ref, swizzled: bool) -> None:
    if ref.row is not None:
        assert_bytes("row data", bufs["row_data"], ref.row.data)
        assert_bytes("row scales", bufs["row_scales"], ref.row.swizzled_scales() if swizzled else ref.row.scales)
        assert_f32_bits("row amax", bufs["amax"][0:1], ref.row.amax)
    if ref.col is not None:
        assert_bytes("col data", bufs["col_data"], ref.col.data)
        assert_bytes("col scales", bufs["col_scales"], ref.col.swizzled_scales() if swizzled else ref.col.scales)
        assert_f32_bits("col amax", bufs["amax"][1:2], ref.col.amax)


def _holds_ff(ref) -> bool:
    """Whether an expected data or scale byte (either scale layout) is 0xFF, the default poison."""
    planes = [p for p in (ref.row, ref.col) if p is not None]
    return any((np.asarray(a).view(np.uint8) == 0xFF).any()
               for p in planes for a in (p.data, p.scales, p.swizzled_scales()))


def check_case(x: np.ndarray, **kw) -> None:
    """Oracle once, device twice (swizzled and compact scales), both into buffers poisoned with 0xFF, and again into
    buffers of 0x00 where an expected byte is 0xFF (e.g. rule "torchao"'s 0/0 scale bytes), so that no expected byte
    can pass unwritten."""
    ref = oracle.quantize(x, **kw)
    x_t = to_cuda(x)
    for poison in (0xFF, 0x00) if _holds_ff(ref) else (0xFF,):
        for swizzled in (True, False):
            check_single(run_poisoned(x_t, swizzled=swizzled, poison=poison, **kw), ref, swizzled)


# ------------------------------------------------------------------------------------------------------------
# single tensor
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", SMALL_K)
@pytest.mark.parametrize("m", M_GRID)
def test_quantize_small_k_grid(m, k):
    """Every M of the grid x small K x every option combination (block, RHT, SR), both scale layouts."""
    for i, (block, rht, rounding) in enumerate(OPTION_GRID):
        kind = ("normal", "special", "inf")[(i + m + k) % 3]
        x = make_input(m, k, kind=kind, seed=1000 * m + k + i)
        check_case(x, rowwise=True, columnwise=True, rht=rht, block=block, rounding=rounding, seed=77 + i,
                   offset=i * 3)


LARGE_CASES = [
    (m, k, OPTION_GRID[(j * 3 + i) % len(OPTION_GRID)])
    for j, k in enumerate(LARGE_K)
    for i, m in enumerate((0, 1, 17, 129, 1000) + ((4097,) if FULL else ()))
]


@pytest.mark.parametrize("m,k,opt", LARGE_CASES)
def test_quantize_large_k(m, k, opt):
    block, rht, rounding = opt
    x = make_input(m, k, kind=("normal", "special")[(m + k) % 2], seed=m * 7 + k)
    check_case(x, rowwise=True, columnwise=True, rht=rht, block=block, rounding=rounding, seed=12345678901234,
               offset=2**32 - 1)


def test_quantize_largest():
    """4097 x 11328: RHT + SR + 16x16 blocks (the most index math at once)."""
    x = make_input(4097, 11328, kind="special", seed=3)
    check_case(x, rowwise=True, columnwise=True, rht=True, block=(16, 16), rounding="sr", seed=2**63 + 5, offset=9)


@pytest.mark.parametrize("rounding", ["rn", "sr"])
@pytest.mark.parametrize("rht,kind", [(False, "normal"), (True, "normal"), (True, "special")])
def test_fast_quantize_many_tiles(rht, kind, rounding):
    """bf16, 1x16 blocks (the fast kernels, csrc/quantize/fast_bf16.cuh) on 4096 x 5120: 1280 tiles of 128 x 128,
    more than two waves of CTAs, with and without RHT, with NaN blocks (its slow branches), rounding to nearest and
    stochastically (SPEC 3.4, 10.2's counters of both planes)."""
    x = make_input(4096, 5120, kind=kind, seed=5 + rht)
    check_case(x, rowwise=True, columnwise=True, rht=rht, block=(1, 16), rounding=rounding, seed=2**40 + 3,
               offset=2**32 - 2)


@pytest.mark.parametrize("kind", ["special", "inf", "scattered_inf"])
def test_fast_quantize_16x16_many_tiles(kind):
    """bf16, 16x16 blocks (SPEC 6.3) under rule te, rounding to nearest, without the RHT: the fast kernel (its tile
    maxima, then both planes with each tile's max) on 4096 x 5120, 1280 tiles, both scale layouts. "special" / "inf":
    NaN and Inf in most warps' rows (a block row holding one takes the exact path); "scattered_inf": finite data with
    an Inf in 40 tiles, whose other block rows take the fast path with the clamped encode."""
    x = make_input(4096, 5120, kind="normal" if kind == "scattered_inf" else kind, seed=17)
    if kind == "scattered_inf":
        rng = np.random.default_rng(18)
        x = x.astype(np.float32)
        x[rng.integers(0, 4096, 40), rng.integers(0, 5120, 40)] = np.inf
        x = x.astype(BF16)
    kw = dict(rowwise=True, columnwise=True, rht=False, block=(16, 16), rounding="rn")
    assert device_opts(to_cuda(x[:16]), **kw)["quantize_kernel"] == QuantizeKernel.fast_bf16  # the premise
    check_case(x, **kw)


@pytest.mark.parametrize("rule", ["te", "te_fused_rht"])
@pytest.mark.parametrize("amax", [(0.0, 3.0), (float("inf"), float("nan")), (1e-30, 0.0), (float("nan"), 2.0)])
def test_fast_quantize_16x16_user_amax_and_rules(rule, amax):
    """16x16 blocks on the fast kernel under both TE rules with supplied amaxes of 0, Inf, NaN and 1e-30 (SPEC 4.3,
    5.1: multipliers of FLT_MAX, 0 or NaN planes) on data with NaN and Inf, against the oracle, both scale layouts."""
    x = make_input(70, 64, kind="inf", seed=9)
    kw = dict(rowwise=True, columnwise=True, rht=False, block=(16, 16), rule=rule, rounding="rn")
    x_t = to_cuda(x)
    assert device_opts(x_t, **kw)["quantize_kernel"] == QuantizeKernel.fast_bf16  # the premise
    ref = oracle.quantize(x, amax=amax, **kw)
    for swizzled in (True, False):
        check_single(run_poisoned(x_t, swizzled=swizzled, amax=amax, **kw), ref, swizzled)


@pytest.mark.parametrize("rowwise,columnwise,rht", [(True, False, False), (False, True, True)])
def test_fast_quantize_one_plane_many_tiles(rowwise, columnwise, rht):
    """One plane of the fast kernel on 2048 x 5120 with NaN, subnormal and zero blocks: 640 tiles, more than one wave
    of CTAs (4 per SM)."""
    x = make_input(2048, 5120, kind="special", seed=21 + rht)
    check_case(x, rowwise=rowwise, columnwise=columnwise, rht=rht, block=(1, 16))


@pytest.mark.parametrize("rht", [False, True])
@pytest.mark.parametrize("rule", ["torchao", "torchao_noscale", "te_fused_rht"])
@pytest.mark.parametrize("kind", ["special", "inf"])
def test_fast_quantize_sr_other_rules(kind, rule, rht):
    """Stochastic rounding on the bf16 fast quantizer under the other scale rules (SPEC 5.3-5.5) with NaN and Inf
    blocks (the per-element SR path; under the torchao rules a NaN amax makes every multiplier NaN), single tensor
    and grouped with empty groups, both scale layouts."""
    x = make_input(600, 320, kind=kind, seed=41 + rht)
    kw = dict(rowwise=True, columnwise=True, rht=rht, block=(1, 16), rule=rule, rounding="sr", seed=2**35 + 1,
              offset=7)
    check_case(x, **kw)
    splits = np.array([250, 0, 17, 333, 0], np.int64)
    ref = oracle.group_quantize(x, splits, **kw)
    for swizzled in (True, False):
        check_grouped(run_group_poisoned(to_cuda(x), splits, swizzled=swizzled, **kw), ref, swizzled)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("m,k", [(1, 16), (17, 48), (129, 64), (300, 4096), (1000, 5120)])
def test_quantize_other_dtypes(dtype, m, k):
    for block, rounding in [((1, 16), "rn"), ((16, 16), "sr")]:
        x = make_input(m, k, kind="special", dtype=dtype, seed=m + k)
        check_case(x, rowwise=True, columnwise=True, block=block, rounding=rounding, seed=11)


@pytest.mark.parametrize("rowwise,columnwise,rht", [(True, False, False), (False, True, False), (False, True, True)])
def test_quantize_single_plane(rowwise, columnwise, rht):
    x = make_input(200, 96, kind="special", seed=5)
    check_case(x, rowwise=rowwise, columnwise=columnwise, rht=rht)


@pytest.mark.parametrize("rule", ["te", "torchao"])
@pytest.mark.parametrize("rowwise,columnwise,rht", [(True, True, True), (True, True, False), (True, False, False),
                                                    (False, True, True)])
def test_quantize_amax_buffer_starts_dirty(rule, rowwise, columnwise, rht):
    """The single-tensor amax pass zeroes the amaxes it computes before its atomic maxima (SPEC 4; a one-CTA kernel
    that the bf16 fast pass overlaps): buffers poisoned with 0x7F (amax bits 0x7F7F7F7F = 3.4e38, above any finite
    bf16 |x|, so a missing zero would win every maximum) come back with the oracle's amaxes; an amax that was not
    asked for (no columnwise plane) comes back as +0."""
    x = make_input(300, 160, kind="normal", seed=63)
    ref = oracle.quantize(x, rowwise=rowwise, columnwise=columnwise, rht=rht, rule=rule)
    bufs = run_poisoned(to_cuda(x), swizzled=True, poison=0x7F, rowwise=rowwise, columnwise=columnwise, rht=rht,
                        rule=rule)
    check_single(bufs, ref, True)
    if not columnwise:  # quantize_op returns both amaxes
        assert_f32_bits("unrequested col amax", bufs["amax"][1:2], np.float32(0.0))


@pytest.mark.parametrize("rule", ["te", "te_fused_rht"])
@pytest.mark.parametrize("amax", [1.5, (0.0, 3.0), (float("inf"), float("nan")), (1e-30, 0.0), (float("nan"), 2.0)])
def test_quantize_user_amax_and_rules(rule, amax):
    x = make_input(70, 64, kind="special", seed=9)
    ref = oracle.quantize(x, rowwise=True, columnwise=True, rht=True, rule=rule, amax=amax)
    x_t = to_cuda(x)
    pair = amax if isinstance(amax, tuple) else (amax, amax)
    for swizzled in (True, False):
        bufs = run_poisoned(x_t, swizzled=swizzled, amax=pair, rowwise=True, columnwise=True, rht=True,
                            rht_signs=0xD7E8, block=(1, 16), rule=rule, rounding="rn", seed=0, offset=0)
        check_single(bufs, ref, swizzled)
    # the public API with the same amax
    import device

    q = device.quantize(x_t, rowwise=True, columnwise=True, rht=True, rule=rule, amax=amax)
    check_single({"row_data": q.row_data, "row_scales": q.row_scales, "col_data": q.col_data,
                  "col_scales": q.col_scales, "amax": torch.cat([q.row_amax, q.col_amax])}, ref, True)


@pytest.mark.parametrize("rounding", ["rn", "sr"])
@pytest.mark.parametrize("rht", [False, True])
def test_quantize_subnormal_and_zero_scales(rht, rounding):
    """Block maxima 2^-6..2^-16 of a tensor with amax 1000: E4M3 block scales in the subnormal range and zero
    (SPEC 3.2, 5.2), where RN(block max * multiplier) reaches 7 and more, the clamp case of SPEC 3.6 (and, under
    stochastic rounding, products far past 6)."""
    rng = np.random.default_rng(7)
    m, k = 256, 256
    x = rng.standard_normal((m, k)).astype(np.float32)
    x *= np.exp2(-rng.integers(6, 16, size=(m, k // 16)).astype(np.float32)).repeat(16, axis=1)
    x[0, 0] = 1000.0
    check_case(x.astype(BF16), rowwise=True, columnwise=True, rht=rht, rounding=rounding, seed=31, offset=5)


def rht_small_output_blocks(seed: int) -> np.ndarray:
    """128 x 64 bf16 whose 16-token column blocks give RHT outputs below 2^-124 beside larger ones: SPEC 7.2's
    t = RN_bf16(v / 4) then lies in bf16's subnormal range, where the rounding does not commute with the 1/4.

    Block kinds, by column: tokens 0 and 1 equal to +-A (A = 2^-100, 2^-60 or 1.0; half the outputs cancel them)
    over tokens 2..15 of subnormal bf16 values up to 2^-128 (those outputs are sums of the small tokens, about
    2^-126); small tokens only (block max below 2^-120); zeros; and normal data (the tensor's amax)."""
    rng = np.random.default_rng(seed)
    m, k = 128, 64
    x = rng.standard_normal((m, k)).astype(np.float32)
    small = lambda n: (rng.integers(1, 32, size=n) * np.exp2(-133.0) * rng.choice([-1.0, 1.0], size=n))  # noqa: E731
    for c in range(k):
        for b in range(m // 16):
            kind = (c + 3 * b) % 6
            if kind == 5:
                continue  # normal data
            blk = np.zeros(16, np.float64)
            if kind in (0, 1, 2):
                a = (2.0**-100, 2.0**-60, 1.0)[kind]
                blk[0] = a
                blk[1] = a * (-1.0) ** (c & 1)
                blk[2:] = small(14)
            elif kind == 3:
                blk[:] = small(16)
            x[16 * b:16 * b + 16, c] = blk
    return x.astype(BF16)


@pytest.mark.parametrize("rule", ["te", "te_fused_rht", "torchao"])
@pytest.mark.parametrize("amax", [None, (1.0, 2.0**-90), (1.0, 2.0**-110)])
def test_rht_small_outputs(rule, amax):
    """Columnwise RHT blocks of the fast kernel with outputs below 2^-124 beside large ones (SPEC 7.2's bf16
    rounding of v / 4 in the subnormal range), under the tensor's amax (scale bytes 0, multipliers FLT_MAX: the small
    outputs round to codes 0 to 4) and supplied columnwise amaxes of 2^-90 and 2^-110 (large multipliers; torchao's
    scale clamp at 2^-6)."""
    x = rht_small_output_blocks(seed=len(rule) + (amax is None))
    check_case(x, rowwise=True, columnwise=True, rht=True, block=(1, 16), rule=rule, amax=amax)


def degenerate_input(kind: str, dtype=BF16) -> np.ndarray:
    """A 33 x 64 tensor of one kind: "zeros", "neg_zeros", "all_nan", "one_nan" (normal data with one NaN),
    "inf_only" (+Inf, every third row -Inf) or "tiny" (subnormals of dtype, every other row negative)."""
    x = np.zeros((33, 64), np.float32)
    if kind == "neg_zeros":
        x[:] = -0.0
    elif kind == "all_nan":
        x[:] = np.nan
    elif kind == "one_nan":
        x = make_input(33, 64, seed=5)
        x[7, 21] = np.nan
    elif kind == "inf_only":
        x[:] = np.inf
        x[::3] = -np.inf
    elif kind == "tiny":
        x[:] = 1e-39 if dtype != np.float16 else 1e-7
        x[::2] *= -1
    return np.asarray(x, np.float32).astype(dtype)


@pytest.mark.parametrize("kind", ["zeros", "neg_zeros", "all_nan", "tiny"])
def test_quantize_degenerate_inputs(kind):
    x = degenerate_input(kind)
    for block, rht in [((1, 16), False), ((16, 16), True)]:
        check_case(x, rowwise=True, columnwise=True, rht=rht, block=block)


def nan_blocks_input(dtype=BF16) -> np.ndarray:
    """Normal data (48 x 64) holding whole 16-blocks of NaN: a rowwise block (row 0, columns 16-31), a columnwise block
    (rows 16-31 of column 5) and a 16x16 tile (rows 16-31, columns 32-47). SPEC 5.2 / 6.3: such a block's (or tile's)
    amax folds fmaxf from +0, so under the TE rules it is 0 (byte 0x00, codes 0x7) while the tensor amax is finite."""
    x = make_input(48, 64, seed=11).astype(np.float32)
    x[0, 16:32] = np.nan
    x[16:32, 5] = np.nan
    x[16:32, 32:48] = np.nan
    return x.astype(dtype)


@pytest.mark.parametrize("opts", [dict(), dict(rht=True), dict(block=(16, 16)), dict(dtype=np.float32),
                                  dict(rounding="sr", seed=3), dict(rule="torchao", amax="finite"),
                                  dict(rule="torchao", rht=True, amax="finite"), dict(rule="torchao_noscale")])
def test_quantize_all_nan_blocks_in_a_finite_tensor(opts):
    """Whole NaN blocks beside finite ones, both planes, on the fast kernels (bf16, 16x16 too), the general ones (f32)
    and under the torchao rules (NaN-propagating block maxima, SPEC 5.4: only the blocks holding a NaN get the NaN
    scale byte). torchao's own tensor amax would be NaN (SPEC 4.1) and make every scale NaN, so rule torchao gets a
    finite supplied amax, the NaN-ignoring max of |x|, for both planes."""
    opts = dict(opts)
    x = nan_blocks_input(opts.pop("dtype", BF16))
    if opts.get("amax") == "finite":
        a = float(np.nanmax(np.abs(x.astype(np.float32))))
        opts["amax"] = (a, a)
    check_case(x, rowwise=True, columnwise=True, **opts)


def test_public_api_and_to_oracle():
    import device

    x = make_input(129, 160, kind="special", seed=21)
    x_t = to_cuda(x)
    for swizzled in (True, False):
        kw = dict(rowwise=True, columnwise=True, rht=True, block=(16, 16), rounding="sr", seed=4, offset=1)
        ref = oracle.quantize(x, **kw)
        got = device.quantize(x_t, swizzled=swizzled, **kw).to_oracle()
        for p in ("row", "col"):
            a, b = getattr(got, p), getattr(ref, p)
            assert np.array_equal(a.data, b.data) and np.array_equal(a.scales, b.scales)
            assert a.shape == b.shape and a.valid_cols == b.valid_cols and a.rht == b.rht
            assert np.float32(a.amax).view(np.uint32) == np.float32(b.amax).view(np.uint32)
    # N-D input flattens on the last dimension like the oracle
    x3 = make_input(6 * 7, 32, seed=2).reshape(6, 7, 32)
    got = device.quantize(to_cuda(x3), columnwise=True).to_oracle()
    ref = oracle.quantize(x3, columnwise=True)
    assert np.array_equal(got.row.data, ref.row.data) and np.array_equal(got.col.scales, ref.col.scales)


# ------------------------------------------------------------------------------------------------------------
# swizzle and dequantize kernels
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 3), (127, 4), (129, 5), (300, 320), (1000, 708), (0, 4)])
def test_swizzle_kernel(rows, cols):
    import device

    c = np.random.default_rng(rows + cols).integers(0, 256, size=(rows, cols), dtype=np.uint8)
    got = device.swizzle_scales(torch.from_numpy(c).cuda())
    assert_bytes("swizzled", got, oracle.swizzle.swizzle_scales(c))


def test_unfused_path_matches_oracle():
    """The unfused path, quantize(compact) then the swizzle kernel, gives the oracle's swizzled scales."""
    import device

    x = make_input(1000, 4096, kind="special", seed=8)
    ref = oracle.quantize(x, columnwise=True, rht=True)
    a = device.quantize(to_cuda(x), columnwise=True, rht=True, swizzled=False)
    assert_bytes("row data", a.row_data, ref.row.data)
    assert_bytes("col data", a.col_data, ref.col.data)
    assert_bytes("row scales, swizzle kernel", device.swizzle_scales(a.row_scales), ref.row.swizzled_scales())
    assert_bytes("col scales, swizzle kernel", device.swizzle_scales(a.col_scales), ref.col.swizzled_scales())


@pytest.mark.parametrize("swizzled", [False, True])
def test_dequantize(swizzled):
    import device

    x = make_input(129, 96, kind="special", seed=31)
    q = device.quantize(to_cuda(x), columnwise=True, rht=True, swizzled=swizzled)
    ref = q.to_oracle()
    for plane in ("row", "col"):
        got = host(device.dequantize(q, plane))
        want = oracle.dequantize(getattr(ref, plane))
        assert_bytes(f"dequantized {plane}", got.view(np.uint32), want.view(np.uint32))


def _raw_plane(rows: int, cols: int, seed: int):
    """Arbitrary bytes (SPEC 11.2): codes, scale bytes with NaN patterns, subnormals and signed scales."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(0, 256, (rows, cols // 16), dtype=np.uint8)
    scales.reshape(-1)[:4] = [0x7F, 0xFF, 0x01, 0x80][: scales.size]  # NaN, -NaN, smallest subnormal, -0
    return data, scales


def _same_or_both_nan(what: str, got, want: np.ndarray) -> None:
    g, w = np.asarray(host(got), np.float32), np.asarray(want, np.float32)
    both_nan = np.isnan(g) & np.isnan(w)  # SPEC 11.2: NaN payloads are free
    bad = (g.view(np.uint32) != w.view(np.uint32)) & ~both_nan
    assert g.shape == w.shape and not bad.any(), f"{what}: {int(bad.sum())} values differ"


# SPEC 11.2: a stored plane of arbitrary bytes, compact or swizzled scales, amax finite / 0 / Inf / NaN; the data a
# view 8 bytes into a larger buffer. Expected values from the oracle.
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("amax", [3.7e4, 0.0, float("inf"), float("nan")])
def test_dequantize_raw_bytes(swizzled, amax):
    import device

    rows, cols = 131, 208
    data, scales = _raw_plane(rows, cols, seed=int(swizzled))
    want = oracle.dequantize(oracle.QuantizedPlane(data, scales, np.float32(amax), (rows, cols)))
    buf = torch.zeros(8 + data.size, dtype=torch.uint8, device="cuda")
    buf[8:] = torch.from_numpy(data.reshape(-1)).cuda()
    sc = oracle.swizzle.swizzle_scales(scales) if swizzled else scales
    got = device.dequantize(buf[8:], scales=torch.from_numpy(sc).cuda(), amax=torch.tensor([amax], device="cuda"),
                            shape=(rows, cols), swizzled=swizzled)
    _same_or_both_nan(f"dequantize swizzled={swizzled} amax={amax}", got, want)


def test_dequantize_bad_inputs():
    import device

    rows, cols = 20, 64
    data = torch.zeros(rows * cols // 2, dtype=torch.uint8, device="cuda")
    scales = torch.zeros(rows * cols // 16, dtype=torch.uint8, device="cuda")
    amax = torch.ones(1, device="cuda")
    kw = dict(scales=scales, amax=amax, shape=(rows, cols), swizzled=False)
    with pytest.raises(ValueError, match="swizzled=True or False"):  # raw bytes must say their scale layout
        device.dequantize(data, scales=scales, amax=amax, shape=(rows, cols))
    with pytest.raises(ValueError, match="CUDA"):
        device.dequantize(data.cpu(), **kw)
    with pytest.raises(TypeError, match="uint8"):
        device.dequantize(data.to(torch.int16), **kw)
    with pytest.raises(ValueError, match="multiple of 16"):
        device.dequantize(data, scales=scales, amax=amax, shape=(rows, cols - 8), swizzled=False)
    with pytest.raises(ValueError, match=">= 0"):
        device.dequantize(data, scales=scales, amax=amax, shape=(-1, cols), swizzled=False)
    with pytest.raises(ValueError, match="data holds"):
        device.dequantize(data[:-1], **kw)
    with pytest.raises(ValueError, match="compact scales"):
        device.dequantize(data, scales=scales[:-1], amax=amax, shape=(rows, cols), swizzled=False)
    with pytest.raises(ValueError, match="swizzled scales"):  # 128 x 4 tiles: 512 bytes for 20 x 4 blocks
        device.dequantize(data, scales=scales, amax=amax, shape=(rows, cols), swizzled=True)
    with pytest.raises(ValueError, match="amax"):
        device.dequantize(data, scales=scales, amax=amax[:0], shape=(rows, cols), swizzled=False)
    with pytest.raises(ValueError, match="8-byte aligned"):
        big = torch.zeros(rows * cols // 2 + 4, dtype=torch.uint8, device="cuda")
        device.dequantize(big[4:], **kw)
    # the checks pass for the exact sizes, and an empty plane gives an empty result
    assert device.dequantize(data, **kw).shape == (rows, cols)
    assert device.dequantize(data[:0], scales=scales[:0], amax=amax, shape=(0, cols), swizzled=False).shape == (0, cols)


@pytest.mark.parametrize("swizzled", [False, True])
def test_dequantize_negative_amax_is_its_magnitude(swizzled):
    """SPEC 11.2: the device takes a negative stored amax as -a (the oracle, which can check, refuses it); -0.0 is
    not negative and keeps its sign through 11.1's products (expected bytes: the oracle's planes of amax a and -0.0)."""
    import device

    rows, cols = 40, 48
    data, scales = _raw_plane(rows, cols, seed=5)
    sc = torch.from_numpy(oracle.swizzle.swizzle_scales(scales) if swizzled else scales).cuda()
    d = torch.from_numpy(data.reshape(-1)).cuda()
    for rule in ("te", "torchao"):
        for given, kept in ((-3.7e4, 3.7e4), (-0.0, -0.0), (float("-inf"), float("inf"))):
            want = oracle.dequantize(oracle.QuantizedPlane(data, scales, np.float32(kept), (rows, cols), rule=rule))
            got = device.dequantize(d, scales=sc, amax=torch.tensor([given], device="cuda"), shape=(rows, cols),
                                    swizzled=swizzled, rule=rule)
            _same_or_both_nan(f"dequantize rule={rule} amax={given} swizzled={swizzled}", got, want)


def test_dequantize_reads_a_grouped_results_compact_scales_only_as_their_slice():
    """A grouped result's scales with swizzled=False are padded compact [roundup(m,128), roundup(C,4)] per group
    (SPEC 9.2); raw dequantize takes compact [m, C] scales, so the padded buffer is refused by its size and its
    [:m, :C] slice gives the oracle's values of that group."""
    import device

    x = torch.from_numpy(np.random.default_rng(9).standard_normal((50, 48)).astype(np.float32)).to(torch.bfloat16)
    splits = torch.tensor([30, 20], dtype=torch.int64, device="cuda")
    q = device.group_quantize(x.cuda(), splits, swizzled=False)
    want = oracle.dequantize(q.to_oracle().row_planes[1])
    o = q.offsets.cpu()
    data = q.row_data[o[2, 1]:o[2, 2]]
    padded = q.row_scales[o[3, 1]:o[3, 2]]
    with pytest.raises(ValueError, match="padded compact scales"):
        device.dequantize(data, scales=padded, amax=q.row_amax[1:2], shape=(20, 48), swizzled=False)
    with pytest.raises(ValueError, match=r"compact scales of a 20 x 48 plane are \[20, 3\]"):
        device.dequantize(data, scales=padded[:60].reshape(3, 20), amax=q.row_amax[1:2], shape=(20, 48),
                          swizzled=False)
    sliced = padded.reshape(128, 4)[:20, :3].contiguous()
    got = device.dequantize(data, scales=sliced, amax=q.row_amax[1:2], shape=(20, 48), swizzled=False)
    _same_or_both_nan("dequantize of group 1's sliced compact scales", got, want)


# ------------------------------------------------------------------------------------------------------------
# grouped (SPEC 9)
# ------------------------------------------------------------------------------------------------------------

SPLITS = [
    [0],
    [5],
    [0, 0, 0],
    [17, 0, 130, 1, 0, 256, 3],
    [1000, 0, 24, 129],
    [128, 128],
    [0, 300, 0],
]


def random_splits(rng, t: int, e: int, zero_frac: float = 0.3) -> np.ndarray:
    """Skewed random group sizes summing to t, some exactly 0."""
    w = rng.pareto(1.0, size=e) + 1e-3
    w[rng.random(e) < zero_frac] = 0.0
    if w.sum() == 0:
        w[0] = 1.0
    s = np.floor(w / w.sum() * t).astype(np.int64)
    s[np.argmax(w)] += t - s.sum()
    return s


def written_alike(run) -> dict:
    """``run(fill)`` (one call into fresh buffers poisoned with the byte ``fill``; returns them) with 0xFF and with
    0x00: the two runs' buffers must be equal byte for byte, so no byte was left unwritten (it would keep its poison,
    and pass wherever the expected byte is the poison). Returns the 0xFF run's buffers."""
    a, b = run(0xFF), run(0x00)
    torch.cuda.synchronize()
    for name, t in a.items():
        u, v = t.contiguous().view(torch.uint8), b[name].contiguous().view(torch.uint8)
        assert torch.equal(u, v), f"{name}: {int((u != v).sum())} bytes differ between the 0xFF and the 0x00 run"
    return a


def run_group_poisoned(x_t, splits_np, *, swizzled: bool, amax=None, **kw) -> dict:
    """The grouped out-variant launcher into poisoned buffers (written_alike); returns the 0xFF run's buffers."""
    from device import _ops

    x2 = x_t.reshape(-1, x_t.shape[-1])
    opts = device_opts(x2, **kw)
    splits = torch.tensor(splits_np, dtype=torch.int64, device=x2.device)

    def run(fill: int) -> dict:
        bufs = _ops.group_buffers(x2.shape[0], x2.shape[1], splits.numel(), rowwise=opts["rowwise"],
                                  columnwise=opts["columnwise"], device=x2.device, fill=fill)
        _ops.launch_group_quantize(x2, splits, bufs, amax, swizzled=swizzled, **opts)
        return bufs

    return written_alike(run)


def grouped_bufs(t) -> dict:
    """The buffers of a device group_quantize result that check_grouped compares, by name."""
    return {"row_data": t.row_data, "row_scales": t.row_scales, "col_data": t.col_data, "col_scales": t.col_scales,
            "row_amax": t.row_amax, "col_amax": t.col_amax, "offsets": t.offsets}


def check_grouped(bufs: dict, ref, swizzled: bool, *, rowwise=True, columnwise=True) -> None:
    offs = host(bufs["offsets"])
    for name, row in (("row_offsets", 0), ("row_data_offsets", 2), ("row_scale_offsets", 3),
                      ("col_data_offsets", 4), ("col_scale_offsets", 5)):
        assert np.array_equal(offs[row], getattr(ref, name)), f"{name}: {offs[row]} vs {getattr(ref, name)}"
    # row 1, the groups' first 128-row tiles (read by the GEMM and the quantizer's records): prefix sums of
    # ceil(m_g / 128) over the groups as cut (SPEC 9.4)
    tiles = np.concatenate([[0], np.cumsum((np.diff(ref.row_offsets) + 127) // 128)])
    assert np.array_equal(offs[1], tiles), f"row tile offsets: {offs[1]} vs {tiles}"
    planes = []
    if rowwise:
        planes.append(("row", ref.row_data, ref.row_scales if swizzled else ref.row_scales_compact, ref.row_amax))
    if columnwise:
        planes.append(("col", ref.col_data, ref.col_scales if swizzled else ref.col_scales_compact, ref.col_amax))
    for p, data, scales, amax in planes:
        d, s = host(bufs[f"{p}_data"]), host(bufs[f"{p}_scales"])
        assert_bytes(f"{p} data", d[: data.size], data)
        assert not d[data.size :].any(), f"{p} data: bytes past the last group are not 0"
        assert_bytes(f"{p} scales", s[: scales.size], scales)
        assert not s[scales.size :].any(), f"{p} scales: bytes past the last group are not 0"
        assert_f32_bits(f"{p} amax", bufs[f"{p}_amax"], amax)


@pytest.mark.parametrize("k", [16, 48, 160])
@pytest.mark.parametrize("splits", SPLITS, ids=lambda s: "-".join(map(str, s)))
def test_group_quantize(splits, k):
    t = int(sum(splits))
    for i, (block, rht, rounding) in enumerate(OPTION_GRID):
        x = make_input(t, k, kind=("normal", "special")[i % 2], seed=t + k + i)
        kw = dict(rowwise=True, columnwise=True, rht=rht, block=block, rounding=rounding, seed=99, offset=2**32 - 2)
        ref = oracle.group_quantize(x, np.array(splits, np.int64), **kw)
        x_t = to_cuda(x)
        for swizzled in (True, False):
            check_grouped(run_group_poisoned(x_t, splits, swizzled=swizzled, **kw), ref, swizzled)


@pytest.mark.parametrize("e", [1, 3, 8, 64, 127])
def test_group_quantize_random_splits(e):
    rng = np.random.default_rng(e)
    t, k = 3000, 64
    splits = random_splits(rng, t, e)
    x = make_input(t, k, kind="special", seed=e)
    kw = dict(rowwise=True, columnwise=True, rht=True, block=(1, 16), rounding="sr", seed=e, offset=0)
    ref = oracle.group_quantize(x, splits, **kw)
    check_grouped(run_group_poisoned(to_cuda(x), splits, swizzled=True, **kw), ref, True)


@pytest.mark.parametrize("rht", [False, True])
def test_group_fast_quantize_64_groups(rht):
    """The fast kernel on 64 skewed groups (empty and unaligned ones included), 8192 x 1024: each group's tiles
    take that group's amaxes and multiplier table (the other grouped fast-path cases have E <= 7 or SR). Its amax grid
    (~800 CTAs) is larger than one wave on an H100 (528), so its first wave finds its tiles from the splits and the
    rest from the setup kernel's records, in one call."""
    rng = np.random.default_rng(64 + rht)
    splits = random_splits(rng, 8192, 64)
    x = make_input(8192, 1024, kind="normal", seed=17 + rht)
    kw = dict(rowwise=True, columnwise=True, rht=rht, block=(1, 16), rounding="rn")
    ref = oracle.group_quantize(x, splits, **kw)
    x_t = to_cuda(x)
    for swizzled in (True, False):
        check_grouped(run_group_poisoned(x_t, splits, swizzled=swizzled, **kw), ref, swizzled)


@pytest.mark.parametrize("planes,rht,block", [("both", False, (1, 16)), ("both", True, (1, 16)),
                                              ("row", False, (1, 16)), ("col", False, (1, 16)),
                                              ("col", True, (1, 16)), ("both", False, (16, 16)),
                                              ("col", False, (16, 16))])
def test_group_fast_quantize_mixed_groups(planes, rht, block):
    """The bf16 fast path (1x16 blocks, and 16x16 under rule te) on groups of very different sizes and contents: a
    giant first group, groups of one row, an unaligned K whose last column tile is 80 columns wide, NaN / Inf / a huge
    finite value confined to some groups (so the per-group amaxes differ by orders of magnitude and only some groups
    take the NaN paths), and single planes (no columnwise amax). Every buffer, amax bits included, against the
    oracle."""
    splits = np.array([3000, 0, 1, 700, 129, 0, 1500, 15, 0, 655, 1], np.int64)
    t, k = int(splits.sum()), 1104  # 9 column tiles of 128, the last one 80 columns wide
    x = make_input(t, k, kind="normal", seed=61 + rht).astype(np.float32)
    x[3001:3701] *= np.float32(1e4)  # group 3: amax 4 orders of magnitude above its neighbours
    x[3830:5330:7, 5::13] = np.nan  # group 6: NaNs in many blocks and tiles (its amax ignores them)
    x[5345, 1000] = np.inf  # group 9
    x[2999, 7] = np.float32(3e38)  # last row of the giant group 0: its largest element
    x = x.astype(BF16)
    kw = dict(rowwise=planes != "col", columnwise=planes != "row", rht=rht, block=block, rounding="rn")
    assert device_opts(to_cuda(x[:16]), **kw)["quantize_kernel"] == QuantizeKernel.fast_bf16  # the premise
    ref = oracle.group_quantize(x, splits, **kw)
    bufs = run_group_poisoned(to_cuda(x), splits, swizzled=True, **kw)
    check_grouped(bufs, ref, True, rowwise=kw["rowwise"], columnwise=kw["columnwise"])


# Groups whose last row tile has 1-64 rows, next to tiles of 65-127 rows and whole ones, and empty groups.
SHORT_TILE_SPLITS = np.array([1, 0, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 148, 0, 320, 129, 96, 7], np.int64)


@pytest.mark.parametrize("k", [48, 400, 1104])  # 1 K tile; 4, the last 16 wide; 9, the last 80 wide
@pytest.mark.parametrize("planes,rht,block", [("both", False, (1, 16)), ("both", True, (1, 16)),
                                              ("row", False, (1, 16)), ("col", True, (1, 16)),
                                              ("both", False, (16, 16))])
def test_group_fast_quantize_short_last_tiles(planes, rht, block, k):
    """The bf16 fast kernel (1x16 blocks, and 16x16 under rule te: a group's last tile maxima over its short rows) on
    groups whose last row tile is short (1-64 rows), with K tiles of 16 to 128 columns:
    every byte, padding included (the scale rows up to roundup(m_g, 128) and the columnwise blocks up to
    roundup(ceil(m_g / 16), 4)), in both scale layouts, with NaN, Inf and a huge value confined to those tiles' rows
    (their blocks take the exact path)."""
    splits = SHORT_TILE_SPLITS
    t = int(splits.sum())
    starts = np.concatenate([[0], np.cumsum(splits)[:-1]])
    x = make_input(t, k, kind="normal", seed=k + rht).astype(np.float32)
    assert splits[[0, 4, 8, 12, 14]].tolist() == [1, 17, 48, 148, 320]  # the groups named below
    x[starts[4] + 5, k - 16:] = np.nan  # group of 17 rows: a NaN block in the last K tile
    x[starts[8] + 40, 3] = np.inf  # 48 rows
    x[starts[0], k // 2] = -np.inf  # one row
    x[starts[14] + 300, 17:40] = np.nan  # 320 rows: its last tile of 64 rows
    x[starts[12] + 140, 0] = np.float32(3e38)  # 148 rows: the largest element sits in the 20-row last tile
    x = x.astype(BF16)
    kw = dict(rowwise=planes != "col", columnwise=planes != "row", rht=rht, block=block, rounding="rn")
    assert device_opts(to_cuda(x[:16]), **kw)["quantize_kernel"] == QuantizeKernel.fast_bf16  # the premise
    ref = oracle.group_quantize(x, splits, **kw)
    x_t = to_cuda(x)
    for swizzled in (True, False):
        bufs = run_group_poisoned(x_t, splits, swizzled=swizzled, **kw)
        check_grouped(bufs, ref, swizzled, rowwise=kw["rowwise"], columnwise=kw["columnwise"])


# ------------------------------------------------------------------------------------------------------------
# the quantize plan: the general kernels on the fast kernels' inputs; the fast kernels refused where they cannot run
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rht,rounding,block", [(False, "rn", (1, 16)), (False, "sr", (1, 16)),
                                               (True, "rn", (1, 16)), (True, "sr", (1, 16)), (False, "rn", (16, 16))])
def test_general_kernels_on_the_fast_kernels_inputs(rht, rounding, block):
    """device.testing.force_plan(quantize="general"): the general amax and quantize kernels on what the bf16 fast
    kernels take by default (bf16, 1x16 blocks, RN or SR, with the RHT under the default sign mask and without; 16x16
    blocks, RN, without the RHT) give
    the oracle's bytes too: the single-tensor check of test_fast_quantize_many_tiles (special values, both scale layouts)
    on a smaller tensor, the grouped check of test_group_fast_quantize_mixed_groups, and the public calls."""
    from device.testing import force_plan

    def kernels(x_t, **kw):
        opts = device_opts(x_t, **kw)
        return opts["amax_kernel"], opts["quantize_kernel"]

    x = make_input(1000, 1104, kind="special", seed=70 + rht)
    kw = dict(rowwise=True, columnwise=True, rht=rht, block=block, rounding=rounding, seed=9, offset=2)
    # the premises: these inputs take the fast kernels unless forced, the general ones when forced
    assert kernels(to_cuda(x), **kw) == (QuantizeKernel.fast_bf16, QuantizeKernel.fast_bf16)
    with force_plan(quantize="general"):
        assert kernels(to_cuda(x), **kw) == (QuantizeKernel.general, QuantizeKernel.general)
        check_case(x, **kw)
    splits = np.array([3000, 0, 1, 700, 129, 0, 1500, 15, 0, 655, 1], np.int64)
    xg = make_input(int(splits.sum()), 400, kind="special", seed=72 + rht)
    ref = oracle.group_quantize(xg, splits, **kw)
    xg_t = to_cuda(xg)
    with force_plan(quantize="general"):
        for swizzled in (True, False):
            check_grouped(run_group_poisoned(xg_t, splits, swizzled=swizzled, **kw), ref, swizzled)
        import device

        got = device.group_quantize(xg_t, torch.tensor(splits, device="cuda"), **kw)
        single = device.quantize(to_cuda(x), **kw)
    check_grouped(grouped_bufs(got), ref, True)
    check_single({"row_data": single.row_data, "row_scales": single.row_scales, "col_data": single.col_data,
                  "col_scales": single.col_scales, "amax": torch.cat([single.row_amax, single.col_amax])},
                 oracle.quantize(x, **kw), True)


@pytest.mark.parametrize("dtype,kw,why", [
    (BF16, dict(block=(16, 16), rounding="sr"), "16x16 blocks under rule te, rounding to nearest"),
    (BF16, dict(block=(16, 16), rule="torchao"), "16x16 blocks under rule te, rounding to nearest"),
    (BF16, dict(columnwise=True, rht=True, rht_signs=0x1234), "default RHT sign mask"),
    (np.float16, dict(), "read bfloat16 input, not float16"),
    (np.float32, dict(), "read bfloat16 input, not float32"),
])
def test_forcing_the_fast_kernels_where_they_cannot_run_raises(dtype, kw, why):
    """force_plan(quantize="fast_bf16") on input the fast kernels cannot quantize (16x16 blocks with stochastic
    rounding or a torchao rule, another RHT sign mask, fp16 / fp32) raises ValueError before any launch, single and
    grouped; the C++ bindings refuse those kernel codes as well (their own check, bypassing Python), in a child
    process: a crash there must fail this test, not take the test worker down."""
    import subprocess
    import sys

    import device
    from device.testing import force_plan

    x_t = to_cuda(make_input(64, 32, dtype=dtype, seed=3))
    with force_plan(quantize="fast_bf16"):
        with pytest.raises(ValueError, match=f"quantize='fast_bf16' cannot run this call: .*{why}"):
            device.quantize(x_t, **kw)
        with pytest.raises(ValueError, match=f"quantize='fast_bf16' cannot run this call: .*{why}"):
            device.group_quantize(x_t, torch.tensor([30, 34], device="cuda"), **kw)
    device.quantize(x_t, **kw)  # the automatic plan runs it
    torch_dtype = {BF16: "bfloat16", np.float16: "float16", np.float32: "float32"}[dtype]
    script = f"""
import torch
from device._build import load_extension
from device._codes import QuantizeKernel, ScaleLayout
ext = load_extension()
fast = int(QuantizeKernel.fast_bf16)
u8 = dict(dtype=torch.uint8, device="cuda")
one = torch.ones(1, device="cuda")
x = torch.zeros((64, 32), dtype=torch.{torch_dtype}, device="cuda")
kw = {dict(block2d=kw.get("block") == (16, 16), rht=bool(kw.get("rht")), signs=kw.get("rht_signs", 0xD7E8),
           sr=kw.get("rounding") == "sr", rule={"te": 0, "torchao": 2}[kw.get("rule", "te")])!r}
rd, rs = torch.full((1024,), 0xFF, **u8), torch.full((512,), 0xFF, **u8)
if not kw["block2d"]:  # the amax pass refuses what is not bf16 or another sign mask
    print("amax_:", ext.amax_(x, None, 1, 1, torch.zeros(1, device="cuda"), None, False, kw["rht"], kw["signs"],
                              False, False, None, None, fast))
print("quantize_:", ext.quantize_(x, None, 1, 1, one, one, rd, rs, None, None, int(ScaleLayout.swizzled),
                                  kw["block2d"], kw["sr"], kw["rule"], kw["rht"], kw["signs"], 0, 0, 0, False, None,
                                  fast))
print("unknown:", ext.quantize_(x, None, 1, 1, one, one, rd, rs, None, None, int(ScaleLayout.swizzled), False,
                                False, 0, False, 0xD7E8, 0, 0, 0, False, None, 5))
torch.cuda.synchronize()
print("untouched:", bool((rd == 0xFF).all()) and bool((rs == 0xFF).all()))
"""
    root = os.path.join(os.path.dirname(__file__), "..")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    cpp_why = {"16x16 blocks under rule te, rounding to nearest": "the fast quantizer writes 16x16 blocks under rule "
               "te, rounding to nearest, without the RHT only",
               "default RHT sign mask": "the fast kernels run the RHT with the default sign mask only"}.get(
                   why, "the fast kernels read bfloat16 input only")
    lines = run.stdout.splitlines()
    assert f"quantize_: nvfp4: {cpp_why}" in lines, run.stdout
    if "amax_:" in run.stdout:
        assert f"amax_: nvfp4: {cpp_why}" in lines, run.stdout
    assert "unknown: nvfp4: unknown quantize kernel code 5" in lines, run.stdout
    assert "untouched: True" in lines, run.stdout


@pytest.mark.parametrize("rounding", ["rn", "sr"])
def test_group_quantize_more_than_1024_groups(rounding):
    """E = 1100 (most groups empty or tiny): the setup kernel scans the splits in two 1024-wide chunks in each of
    its CTAs, a tile's group search takes three rounds, and the amax pass skips the empty CTAs of its worst-case
    grid; both roundings run the fast kernels."""
    rng = np.random.default_rng(1100)
    splits = random_splits(rng, 5000, 1100)
    x = make_input(5000, 64, kind="normal", seed=1100)
    kw = dict(rowwise=True, columnwise=True, rht=True, block=(1, 16), rounding=rounding, seed=5, offset=1)
    ref = oracle.group_quantize(x, splits, **kw)
    check_grouped(run_group_poisoned(to_cuda(x), splits, swizzled=True, **kw), ref, True)


def test_group_quantize_large_k():
    splits = np.array([0, 700, 1, 0, 316, 129], np.int64)
    x = make_input(int(splits.sum()), 5120, kind="special", seed=44)
    kw = dict(rowwise=True, columnwise=True, rht=True, block=(16, 16), rounding="rn")
    ref = oracle.group_quantize(x, splits, **kw)
    check_grouped(run_group_poisoned(to_cuda(x), splits, swizzled=True, **kw), ref, True)


def test_group_quantize_user_amax_and_api():
    import device

    splits = np.array([40, 0, 90], np.int64)
    x = make_input(130, 32, kind="special", seed=4)
    amax = (np.array([1.0, 0.0, 3.5], np.float32), np.array([np.inf, 2.0, 0.5], np.float32))
    ref = oracle.group_quantize(x, splits, columnwise=True, rht=True, amax=amax)
    got = device.group_quantize(to_cuda(x), torch.tensor(splits).cuda(), columnwise=True, rht=True,
                                amax=tuple(torch.from_numpy(a).cuda() for a in amax))
    check_grouped(grouped_bufs(got), ref, True)
    conv = got.to_oracle()
    for g in range(3):
        for p in ("row_planes", "col_planes"):
            a, b = getattr(conv, p)[g], getattr(ref, p)[g]
            assert np.array_equal(a.data, b.data) and np.array_equal(a.scales, b.scales) and a.shape == b.shape
    assert np.array_equal(conv.row_scales_compact, ref.row_scales_compact)
    assert np.array_equal(conv.col_scales, ref.col_scales)


def cut_splits(splits, t: int) -> np.ndarray:
    """SPEC 9.4 written out on its own: negative sizes count as 0, and the groups are cut at row t (Python
    integers: no overflow for sizes near 2**63)."""
    hi, run = [], 0
    for v in splits:
        run = min(run + max(int(v), 0), t)  # = min(P_g, t), P_g the running sum of the non-negative sizes
        hi.append(run)
    hi = np.array(hi, np.int64)
    return hi - np.concatenate([[0], hi[:-1]])


@pytest.mark.parametrize("splits", [[100, 100, 150, 300], [-5, 120, 200], [50, 0, 70], [-1, -2], [400, 7], [0, 301],
                                    [7] * 1100, [2**62, 2**62], [5, 2**63 - 1, 2**63 - 1], [-2**63, 2**63 - 1, 9],
                                    [2] * 100 + [-3, 5] * 50, [1, 2] * 128, [1] * 257],
                         ids=lambda s: f"E{len(s)}-" + "-".join(map(str, s[:6])))
def test_group_quantize_splits_not_adding_up(splits):
    """Device splits that do not add up to T (SPEC 9.4): cumulative offsets passed as sizes, negative sizes, a sum
    below T, a first group larger than T, more than 1024 groups past T, sizes whose int64 sum would overflow, 200 and
    256 groups (the bf16 amax pass then finds its tiles from the splits, 8 groups per lane) whose sum passes T
    inside a lane's groups, and 257 (the records). The device cuts the groups at row T and writes exactly what the
    oracle gives for the rows that are left with the cut sizes; every byte past the last group up to the worst-case
    capacity is 0 (the rowwise data tail included), and nothing is written outside."""
    t, k = 300, 48
    cut = cut_splits(splits, t)
    assert len(cut) == len(splits) and cut.sum() <= t
    x = make_input(t, k, kind="special", seed=len(splits))
    x_t = to_cuda(x)
    for rounding in ("rn", "sr"):  # both on the bf16 fast kernels (their SR form, SPEC 3.7)
        kw = dict(rowwise=True, columnwise=True, rht=True, block=(1, 16), rounding=rounding, seed=3, offset=1)
        ref = oracle.group_quantize(x[: int(cut.sum())], cut, **kw)
        for swizzled in (True, False):
            check_grouped(run_group_poisoned(x_t, splits, swizzled=swizzled, **kw), ref, swizzled)


def test_group_quantize_cut_splits_public_api():
    """The public call with cumulative offsets instead of sizes: to_oracle() reports the cut sizes (SPEC 9.4)."""
    import device

    x = make_input(256, 32, seed=9)
    splits = [64, 128, 192, 256]  # torch._grouped_mm-style offsets, not sizes
    got = device.group_quantize(to_cuda(x), torch.tensor(splits, device="cuda"), columnwise=True)
    conv = got.to_oracle()
    assert np.array_equal(conv.splits, [64, 128, 64, 0])
    ref = oracle.group_quantize(x, cut_splits(splits, 256), columnwise=True)
    assert np.array_equal(conv.row_data, ref.row_data) and np.array_equal(conv.col_data, ref.col_data)
    assert np.array_equal(conv.row_scales, ref.row_scales) and np.array_equal(conv.col_scales, ref.col_scales)


def test_negative_device_amax_counts_as_its_magnitude():
    """SPEC 4.3: a negative amax in a device tensor (it cannot be checked without a sync) is used as its magnitude,
    also in the returned amax; -0.0 and NaN keep their bits. Before this rule the negative S_enc gave scale bytes
    >= 0x80, which indexed past the kernels' 128-entry multiplier tables."""
    import device

    x = make_input(200, 64, kind="special", seed=21)
    for dev_amax, used in (((-3.5, -0.0), (3.5, -0.0)), ((-1e-30, float("nan")), (1e-30, float("nan")))):
        amax_t = torch.tensor(dev_amax, dtype=torch.float32, device="cuda")
        got = device.quantize(to_cuda(x), columnwise=True, amax=(amax_t[0], amax_t[1])).to_oracle()
        ref = oracle.quantize(x, columnwise=True, amax=tuple(np.float32(v) for v in used))
        for p in ("row", "col"):
            g, r = getattr(got, p), getattr(ref, p)
            assert_bytes(f"{p} data", g.data, r.data)
            assert_bytes(f"{p} scales", g.scales, r.scales)
            assert_f32_bits(f"{p} amax", np.asarray([g.amax], np.float32), r.amax)
    splits = np.array([120, 0, 80], np.int64)
    amax = np.array([-2.0, -5.0, 7.0], np.float32)
    got = device.group_quantize(to_cuda(x), torch.tensor(splits, device="cuda"), columnwise=True,
                                amax=torch.from_numpy(amax).cuda())
    ref = oracle.group_quantize(x, splits, columnwise=True, amax=np.abs(amax))
    check_grouped(grouped_bufs(got), ref, True)
    # a (row, col) pair of different tensors, with -0.0, a NaN with the sign bit set (0xFFC00000), -Inf: the setup
    # kernel writes -0.0 and both NaNs with their bits, -Inf and -2 as their magnitudes
    row_bits = np.array([0x80000000, 0xFFC00000, 0xC0000000], np.uint32)  # -0.0, -NaN, -2.0
    col_bits = np.array([0x7FC00000, 0x40400000, 0xFF800000], np.uint32)  # NaN, 3.0, -Inf
    used_row = np.array([0x80000000, 0xFFC00000, 0x40000000], np.uint32).view(np.float32)
    used_col = np.array([0x7FC00000, 0x40400000, 0x7F800000], np.uint32).view(np.float32)
    got = device.group_quantize(to_cuda(x), torch.tensor(splits, device="cuda"), columnwise=True,
                                amax=tuple(torch.from_numpy(b.view(np.float32).copy()).cuda()
                                           for b in (row_bits, col_bits)))
    ref = oracle.group_quantize(x, splits, columnwise=True, amax=(used_row, used_col))
    check_grouped(grouped_bufs(got), ref, True)
    assert_f32_bits("grouped row amax", host(got.row_amax), used_row)
    assert_f32_bits("grouped col amax", host(got.col_amax), used_col)


def test_group_quantize_no_host_sync():
    """No host synchronisation in a grouped call (sync-debug mode raises on one), and the call's result is right."""
    import device

    x = make_input(300, 64, seed=1)
    x_t = to_cuda(x)
    splits = torch.tensor([100, 0, 200], dtype=torch.int64, device="cuda")
    device.group_quantize(x_t, splits, columnwise=True, rht=True)  # builds / warms up outside sync-debug mode
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = device.group_quantize(x_t, splits, columnwise=True, rht=True, rounding="sr", seed=5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ref = oracle.group_quantize(x, [100, 0, 200], columnwise=True, rht=True, rounding="sr", seed=5)
    check_grouped(grouped_bufs(got), ref, True)


# ------------------------------------------------------------------------------------------------------------
# CUDA graphs and torch.compile
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(rowwise=True, columnwise=True, rht=True, block=(1, 16), rounding="sr", seed=7, offset=3),
    dict(rowwise=True, columnwise=True, block=(16, 16), rule="torchao"),  # general quantizer, NaN-propagating fast amax
], ids=["te-rht-sr", "torchao-16x16"])
def test_cuda_graph_grouped_replay(kw):
    """Capture once; replay with new inputs and new split values copied into the captured tensors."""
    import device

    t, k, e = 400, 64, 6
    replays = 100
    rng = np.random.default_rng(123)
    static_x = torch.zeros((t, k), dtype=torch.bfloat16, device="cuda")
    static_splits = torch.tensor(random_splits(rng, t, e), device="cuda")
    device.group_quantize(static_x, static_splits, **kw)  # warm-up (JIT build, allocator)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            out = device.group_quantize(static_x, static_splits, **kw)
    torch.cuda.current_stream().wait_stream(s)
    for r in range(replays):
        splits = random_splits(rng, t, e, zero_frac=0.4)
        x = make_input(t, k, kind=("normal", "special")[r % 2], seed=r)
        static_x.copy_(to_cuda(x))
        static_splits.copy_(torch.from_numpy(splits))
        # poison the captured outputs: every byte must be rewritten by the replay
        for buf in (out.row_data, out.row_scales, out.col_data, out.col_scales):
            buf.fill_(0xFF)
        # (0xFFFFFFFF: a NaN that no amax rule writes; rule "torchao"'s NaN amax is 0x7FC00000)
        out.row_amax.view(torch.uint8).fill_(0xFF)
        out.col_amax.view(torch.uint8).fill_(0xFF)
        out.offsets.fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        ref = oracle.group_quantize(x, splits, **kw)
        check_grouped(grouped_bufs(out), ref, True)


def test_cuda_graph_single_replay():
    import device

    static_x = torch.zeros((257, 96), dtype=torch.bfloat16, device="cuda")
    kw = dict(rowwise=True, columnwise=True, rht=True, block=(16, 16), rounding="sr", seed=1)
    device.quantize(static_x, **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = device.quantize(static_x, **kw)
    for r in range(10):
        x = make_input(257, 96, kind="special", seed=50 + r)
        static_x.copy_(to_cuda(x))
        for buf in (out.row_data, out.row_scales, out.col_data, out.col_scales, out.row_amax, out.col_amax):
            buf.fill_(0xFF if buf.dtype == torch.uint8 else float("nan"))  # every output must be rewritten
        graph.replay()
        torch.cuda.synchronize()
        ref = oracle.quantize(x, **kw)
        check_single({"row_data": out.row_data, "row_scales": out.row_scales, "col_data": out.col_data,
                      "col_scales": out.col_scales, "amax": torch.cat([out.row_amax, out.col_amax])}, ref, True)


def test_cuda_graph_supplied_amax_replay():
    """One pass in a CUDA graph (the amaxes of a previous step as device tensors, SPEC 4.3): new x and new amax values
    copied into the captured tensors before each replay, negative ones used as their magnitudes."""
    import device

    rng = np.random.default_rng(77)
    static_x = torch.zeros((300, 64), dtype=torch.bfloat16, device="cuda")
    row_a, col_a = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    kw = dict(rowwise=True, columnwise=True, rht=True)
    device.quantize(static_x, amax=(row_a, col_a), **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = device.quantize(static_x, amax=(row_a, col_a), **kw)
    splits = np.array([120, 0, 180], np.int64)
    static_splits = torch.tensor(splits, device="cuda")
    g_row, g_col = torch.ones(3, device="cuda"), torch.ones(3, device="cuda")
    device.group_quantize(static_x, static_splits, amax=(g_row, g_col), **kw)
    torch.cuda.synchronize()
    g_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_graph):
        g_out = device.group_quantize(static_x, static_splits, amax=(g_row, g_col), **kw)
    for r in range(8):
        x = make_input(300, 64, kind=("normal", "special")[r % 2], seed=90 + r)
        static_x.copy_(to_cuda(x))
        given = (rng.uniform(0.5, 40.0, size=(2, 4)) * rng.choice([-1.0, 1.0], size=(2, 4))).astype(np.float32)
        row_a.copy_(torch.from_numpy(given[0, :1]))
        col_a.copy_(torch.from_numpy(given[1, :1]))
        g_row.copy_(torch.from_numpy(given[0, 1:]))
        g_col.copy_(torch.from_numpy(given[1, 1:]))
        for buf in (out.row_data, out.row_scales, out.col_data, out.col_scales, out.row_amax, out.col_amax,
                    g_out.row_data, g_out.row_scales, g_out.col_data, g_out.col_scales, g_out.row_amax, g_out.col_amax):
            buf.fill_(0xFF if buf.dtype == torch.uint8 else float("nan"))  # every output must be rewritten
        graph.replay()
        g_graph.replay()
        torch.cuda.synchronize()
        used = np.abs(given)  # SPEC 4.3: a negative device value is used as its magnitude
        ref = oracle.quantize(x, amax=(used[0, 0], used[1, 0]), **kw)
        check_single({"row_data": out.row_data, "row_scales": out.row_scales, "col_data": out.col_data,
                      "col_scales": out.col_scales, "amax": torch.cat([out.row_amax, out.col_amax])}, ref, True)
        g_ref = oracle.group_quantize(x, splits, amax=(used[0, 1:], used[1, 1:]), **kw)
        check_grouped(grouped_bufs(g_out), g_ref, True)


def test_torch_compile():
    """The registered op inside a torch.compile'd function (fullgraph) gives the oracle's bytes of 2x."""
    from device import _ops

    x = make_input(256, 128, seed=3)
    opts = device_opts(to_cuda(x), rowwise=True, columnwise=True, rht=True, rht_signs=0xD7E8, block=(1, 16),
                       rule="te", rounding="rn", seed=0, offset=0)

    def f(x):
        return _ops.quantize_op(x * 2, None, None, swizzled=True, **opts)

    rd, rs, cd, cs, am = torch.compile(f, fullgraph=True)(to_cuda(x))
    ref = oracle.quantize((x.astype(np.float32) * 2).astype(BF16), columnwise=True, rht=True)  # x2 is exact
    check_single({"row_data": rd, "row_scales": rs, "col_data": cd, "col_scales": cs, "amax": am}, ref, True)


# ------------------------------------------------------------------------------------------------------------
# argument errors, raised before any launch
# ------------------------------------------------------------------------------------------------------------

def test_argument_errors():
    import device

    good = torch.zeros((32, 32), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="CUDA"):
        device.quantize(good.cpu())
    with pytest.raises(TypeError, match="bfloat16, float16 or float32"):
        device.quantize(good.to(torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        device.quantize(torch.zeros((32, 64), dtype=torch.bfloat16, device="cuda")[:, ::2])
    with pytest.raises(ValueError, match="multiple of 16"):
        device.quantize(torch.zeros((32, 24), dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match="bfloat16"):
        device.quantize(good.half(), columnwise=True, rht=True)
    with pytest.raises(ValueError, match="same device"):
        device.group_quantize(good, torch.tensor([32]))
    with pytest.raises(TypeError, match="int64"):
        device.group_quantize(good, torch.tensor([32], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="positive multiple of 16"):
        device.quantize(torch.zeros((32, 0), dtype=torch.bfloat16, device="cuda"))
    for name in ("seed", "offset", "rht_signs"):  # a tensor would need .item(), a host sync
        with pytest.raises(TypeError, match=name):
            device.quantize(good, rounding="sr", **{name: torch.tensor(1, device="cuda")})
    with pytest.raises(ValueError, match="x's device"):
        device.quantize(good, amax=torch.tensor(1.0))  # a CPU amax tensor
    with pytest.raises(ValueError, match="x's device"):
        device.group_quantize(good, torch.tensor([32], device="cuda"), amax=torch.ones(1))
    # a NumPy scalar amax is a number (no host-to-device copy)
    ones = make_input(32, 32, seed=5)
    got = device.quantize(to_cuda(ones), amax=np.float32(3.0)).to_oracle()
    ref = oracle.quantize(ones, amax=np.float32(3.0))
    assert np.array_equal(got.row.data, ref.row.data) and np.array_equal(got.row.scales, ref.row.scales)
    for bad in (-1.0, (0.5, -2.0)):  # SPEC 4.3: negative host values are refused, as by the oracle
        with pytest.raises(ValueError, match=">= 0"):
            device.quantize(good, columnwise=True, amax=bad)
    with pytest.raises(ValueError, match=">= 0"):
        device.group_quantize(good, torch.tensor([32], device="cuda"), amax=[-3.0])
    with pytest.raises(TypeError, match="torch.Tensor"):
        device.swizzle_scales(np.zeros((4, 4), np.uint8))
    grouped = device.group_quantize(good, torch.tensor([32], device="cuda"))
    with pytest.raises(TypeError, match="grouped"):
        device.dequantize(grouped)
    single = device.quantize(good)
    with pytest.raises(ValueError, match="raw bytes"):
        device.dequantize(single, shape=(32, 32))
    with pytest.raises(ValueError, match="raw bytes"):  # a result knows its own scale layout
        device.dequantize(single, swizzled=False)
    from device import _ops  # the out-variant launchers check the buffers they are given
    opts = device_opts(good, columnwise=True)
    bufs = _ops.quantize_buffers(32, 32, rowwise=True, columnwise=True, swizzled=True, device=good.device)
    bufs["col_scales"] = bufs["col_scales"][:-1]
    with pytest.raises(ValueError, match="col_scales"):
        _ops.launch_quantize(good, bufs, None, swizzled=True, **opts)
    gbufs = _ops.group_buffers(32, 32, 2, rowwise=True, columnwise=False, device=good.device)
    gbufs["row_data"] = gbufs["row_data"].cpu()
    with pytest.raises(ValueError, match="row_data"):
        _ops.launch_group_quantize(good, torch.tensor([16, 16], device="cuda"), gbufs, None, swizzled=True,
                                   **device_opts(good))
    # the public torch.ops entry points check every buffer they hand a kernel, not only the Python wrappers
    q = device.quantize(good)
    amax1 = q.row_amax.reshape(-1)[:1].contiguous()
    with pytest.raises(ValueError, match="data holds"):  # a 1024 x 1024 plane from 512 code bytes
        torch.ops.nvfp4_device.dequantize(q.row_data, q.row_scales, amax1, 1024, 1024, True)
    with pytest.raises(ValueError, match="scales hold"):
        torch.ops.nvfp4_device.dequantize(q.row_data, q.row_scales[:16], amax1, 32, 32, True)
    with pytest.raises(ValueError, match="amax"):
        torch.ops.nvfp4_device.dequantize(q.row_data, q.row_scales, amax1.cpu(), 32, 32, True)
    # the C++ bindings' own checks (bypassing every Python check) refuse with a returned message, in a child
    # process: a crash there must fail this test, not take the test worker down
    import subprocess
    import sys

    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "sanitizer", "check_binding_errors.py")
    run = subprocess.run([sys.executable, tool, "quantize"], capture_output=True, text=True, timeout=300,
                         cwd=os.path.join(os.path.dirname(__file__), ".."))
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert run.stdout.count("refused: nvfp4:") == 19, run.stdout
    # supplied amaxes (SPEC 4.3) are read by kernels as contiguous float32, one value per group, into a buffer
    assert "a supplied amax must be contiguous float32 with 1 value(s)" in run.stdout, run.stdout
    assert "a supplied amax must be contiguous float32 with 2 value(s)" in run.stdout, run.stdout
    assert "a supplied amax needs the amax buffer it is written into" in run.stdout, run.stdout
    assert "splits must be a contiguous int64 tensor of E values" in run.stdout, run.stdout
    # output buffers checked in C++ too (csrc/quantize/bindings.cpp check_outputs): 64 x 32 swizzled rowwise scales
    # need 512 bytes
    assert "row_scales holds 256 bytes, the call writes 512" in run.stdout, run.stdout
    assert "col_data must be a contiguous uint8 tensor" in run.stdout, run.stdout
    assert "scale layout 0 is not one of this call's" in run.stdout, run.stdout
    # 300 rows in 2 groups: at most 300 // 128 + 2 = 4 row tiles (the worst case of sum ceil(m_g / 128))
    assert "row_tiles must be at least 4, got 3" in run.stdout, run.stdout
    # a grouped (row, col) amax pair holds one value per group for each plane (as the oracle: a single value
    # per plane is refused when E > 1, not spread over the groups)
    with pytest.raises(ValueError, match="per group"):
        device.group_quantize(good, torch.tensor([16, 16], device="cuda"), columnwise=True, amax=(1.0, 2.0))
    with pytest.raises(ValueError, match="per group"):
        oracle.group_quantize(make_input(32, 32, seed=5), [16, 16], columnwise=True, amax=(1.0, 2.0))
    # a single number is not a grouped amax, for any number of groups (the oracle refuses it as well)
    for splits in ([16, 16], [32]):
        for amax in (3.0, torch.tensor(3.0, device="cuda")):
            with pytest.raises(ValueError, match="single value"):
                device.group_quantize(good, torch.tensor(splits, device="cuda"), amax=amax)
        with pytest.raises(ValueError, match="shape"):
            oracle.group_quantize(make_input(32, 32, seed=5), splits, amax=3.0)
