"""The device's 4over6 quantizer (SPEC 5.6; csrc/quantize/four_over_six.cuh) against the NumPy oracle, byte for byte.

GPU tests are marked ``cuda`` and skip without a CUDA device; output buffers are poisoned (0xFF) before the kernel
runs, so an unwritten byte fails. The inputs mix random values with blocks built so that the two candidates tie (values
on both grids: the tie keeps map-to-6), blocks that only map-to-4 encodes exactly, NaN / Inf / zero blocks, and amaxes
outside [2^-100, 2^100] (the kernel's per-element division path). Host-side tests check the options' refusals.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from test_device_quantize import assert_bytes, host, nan_blocks_input  # noqa: E402

import oracle  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
BF16 = ml_dtypes.bfloat16
VARIANTS = list(itertools.product(("mae", "mse"), (False, True), (448, 256)))  # error, fast math, G


def make_input(m: int, k: int, seed: int, *, scale: float = 1.0, specials: bool = True) -> np.ndarray:
    """Random bf16 values times ``scale``, with built blocks (see the module docstring) where the shape allows.

    With an amax of 2688 (448 * 6, one element set to it) S_enc is 1 for G = 448, so map-to-6 of a block whose max is
    6 has scale 1 and map-to-4 scale 1.5: values in {0, 1.5, 3, 6} lie on both grids (a tie at error 0), values in
    {0.75, 4.5, 6} only on map-to-4's.
    """
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * rng.choice([0.5, 1.0, 40.0], size=(m, 1))).astype(np.float32)
    if specials and m >= 4 and k >= 64:
        x[0, 0] = 2688.0
        x[1, :16] = rng.choice([0.0, 1.5, -3.0, 6.0], size=16)
        x[1, 0] = 6.0
        x[2, :16] = rng.choice([0.75, -4.5, 6.0, 0.0], size=16)
        x[2, 0] = -6.0
        x[3, :16] = 0.0  # an all-zero block (a tie at 0)
        x[1:3, 16:32] = -0.0
        x[3, 32] = np.nan  # a NaN element: a NaN error, map-to-6
        x[min(m - 1, 20), 48:64] = rng.choice([1.5, 3.0], size=16)
    if specials and m * k >= 4096:
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=flat.size // 200, replace=False)
        flat[idx[: idx.size // 2]] = np.nan
        flat[idx[idx.size // 2:]] = -0.0
    return (x * np.float32(scale)).astype(BF16)


def to_cuda(a: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).copy()).view(torch.bfloat16).cuda()


def run_poisoned(x_t, *, swizzled: bool, amax=None, **kw) -> dict:
    """Quantize through the out-variant launcher into poisoned buffers (test_device_quantize.written_alike: no byte
    left unwritten); returns the 0xFF run's buffers."""
    from test_device_quantize import written_alike

    from device import _ops
    from device.quantization import _options

    opts = _options(x_t, rht=False, rht_signs=0xD7E8, rule="te", rounding="rn", seed=0, offset=0, **kw)
    amax_t = None if amax is None else torch.tensor([amax], dtype=torch.float32, device=x_t.device)

    def run(fill: int) -> dict:
        bufs = _ops.quantize_buffers(x_t.shape[0], x_t.shape[1], rowwise=opts["rowwise"],
                                     columnwise=opts["columnwise"], swizzled=swizzled, device=x_t.device, fill=fill)
        _ops.launch_quantize(x_t, bufs, None if amax_t is None else (amax_t, amax_t), swizzled=swizzled, **opts)
        return bufs

    return written_alike(run)


def check_case(x: np.ndarray, *, amax=None, **kw) -> None:
    """Oracle once; the device with swizzled and with compact scales, both planes."""
    ref = oracle.quantize(x, rowwise=True, columnwise=True, amax=amax, **kw)
    x_t = to_cuda(x)
    for swizzled in (True, False):
        bufs = run_poisoned(x_t, swizzled=swizzled, amax=amax, rowwise=True, columnwise=True, **kw)
        for name, plane in (("row", ref.row), ("col", ref.col)):
            assert_bytes(f"{name} data {kw}", bufs[f"{name}_data"], plane.data)
            assert_bytes(f"{name} scales {kw}", bufs[f"{name}_scales"],
                         plane.swizzled_scales() if swizzled else plane.scales)


BYTE_SHAPES = [(1, 16), (17, 48), (129, 160), (300, 256), (1000, 512)]


def byte_test_input(m: int, k: int, g: int, fast_math: bool) -> np.ndarray:
    """The input of test_four_over_six_bytes for one shape and variant."""
    return make_input(m, k, seed=m * 31 + k + g + fast_math)


@pytest.mark.parametrize("m,k", BYTE_SHAPES)
@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
@pytest.mark.parametrize("error,fast_math,g", VARIANTS)
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_bytes(m, k, block, error, fast_math, g):
    """Every variant x block shape on M not a multiple of 16 / 128 (rows past M add +0 to a 16x16 tile's rowwise sum;
    the columnwise plane's padded tokens are zero elements)."""
    x = byte_test_input(m, k, g, fast_math)
    check_case(x, block=block, four_over_six=error, four_over_six_fast_math=fast_math, global_scale_max=g)


@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
@pytest.mark.parametrize("error,fast_math", [("mse", False), ("mae", True)])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_all_nan_blocks_in_a_finite_tensor(block, error, fast_math):
    """Whole NaN blocks (a rowwise block, a columnwise block, a 16x16 tile) beside finite ones: SPEC 5.6 takes b as in
    5.2 / 6.3 (fmaxf from +0, so 0: byte 0x00 for both candidates, a NaN error that keeps map-to-6)."""
    check_case(nan_blocks_input(), block=block, four_over_six=error, four_over_six_fast_math=fast_math)


@pytest.mark.parametrize("amax", [0.0, 1e-35, 3e33, float("inf"), float("nan"), 2688.0])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_supplied_amax(amax):
    """A supplied amax of 0, outside [2^-100, 2^100] (the per-element division path), +Inf (input-domain errors Inf or
    NaN: map-to-6 everywhere, while the fast-math domain still chooses), NaN, and S_enc = 1 exactly."""
    scale = 1e-36 if amax == 1e-35 else (1e33 if amax == 3e33 else 1.0)
    x = make_input(64, 96, seed=7, scale=scale)
    for (error, fast_math, g), block in itertools.product(VARIANTS, ((1, 16), (16, 16))):
        check_case(x, amax=amax, block=block, four_over_six=error, four_over_six_fast_math=fast_math,
                   global_scale_max=g)


@pytest.mark.cuda
@needs_cuda
def test_four_over_six_inf_and_tiny_tensors():
    """Computed amaxes: a tensor holding +-Inf (amax Inf), and tensors whose amax lies outside [2^-100, 2^100]."""
    for scale in (1.0, 1e-35, 1e32):
        x = make_input(48, 64, seed=11, scale=scale).astype(np.float32)
        if scale == 1.0:
            x[5, 7], x[40, 60] = np.inf, -np.inf
        else:  # amax 2^-104.9 / 2^117.7: the per-element path's range
            assert not 2.0**-100 <= np.nanmax(np.abs(x)) <= 2.0**100
        x = x.astype(BF16)
        for error, fast_math in itertools.product(("mae", "mse"), (False, True)):
            for block in ((1, 16), (16, 16)):
                check_case(x, block=block, four_over_six=error, four_over_six_fast_math=fast_math)


@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
@pytest.mark.parametrize("case", ["subnormal_scales", "amax_below_max"])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_clamp_blocks(case, block):
    """Blocks where RN(block max * multiplier) reaches 7 (SPEC 3.6's clamp term, the kernel's per-element path) next
    to ordinary ones, in warps that mix both: block maxima 2^-6 .. 2^-16 of a tensor with amax 2^10 (E4M3 block scales
    in the subnormal range and zero), and a supplied amax a quarter of the data's (block scales saturate at 448)."""
    rng = np.random.default_rng(23)
    m, k = 256, 320
    x = rng.standard_normal((m, k)).astype(np.float32)
    amax = None
    if case == "subnormal_scales":
        x *= np.exp2(-rng.integers(6, 16, size=(m, k // 16)).astype(np.float32)).repeat(16, axis=1)
        x[0, 0] = 1024.0
    else:
        amax = float(np.abs(x).max()) / 4
    x = x.astype(BF16)
    for error, fast_math, g in VARIANTS:
        check_case(x, amax=amax, block=block, four_over_six=error, four_over_six_fast_math=fast_math,
                   global_scale_max=g)


@pytest.mark.parametrize("scale", [1e-35, 1e32])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_amax_outside_the_table_range_many_tiles(scale):
    """A computed amax outside [2^-100, 2^100] (the per-element input-domain path for every block) on a tensor of
    many tiles, with NaN blocks and partial tiles in both axes."""
    x = make_input(1000, 528, seed=29, scale=scale)
    assert not 2.0**-100 <= np.nanmax(np.abs(x.astype(np.float32))) <= 2.0**100  # 2^-104.9 / 2^117.7
    for error, fast_math in (("mae", False), ("mse", False), ("mse", True)):
        for block in ((1, 16), (16, 16)):
            check_case(x, block=block, four_over_six=error, four_over_six_fast_math=fast_math)


def test_four_over_six_chooses_both_candidates():
    """A guard on the inputs of test_four_over_six_bytes, which would pass trivially if one candidate always won:
    on each of its shapes of more than one block, with G = 448 (where plain TE's byte is map-to-6's), every error
    and domain, both block shapes and both planes, the oracle keeps map-to-4 on some blocks and map-to-6 on others.
    (The oracle only: no GPU needed.)"""
    for m, k in BYTE_SHAPES[1:]:
        for error, fast_math, g in VARIANTS:
            if g != 448:
                continue
            x = byte_test_input(m, k, g, fast_math)
            for block in ((1, 16), (16, 16)):
                kw = dict(block=block, rowwise=True, columnwise=True)
                ref = oracle.quantize(x, four_over_six=error, four_over_six_fast_math=fast_math, **kw)
                plain = oracle.quantize(x, **kw)
                for p in ("row", "col"):
                    map4 = getattr(ref, p).scales != getattr(plain, p).scales
                    assert map4.any() and (~map4).any(), (m, k, error, fast_math, block, p)


def near_tie_blocks(error: str, fast_math: bool, g: int, *, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` bf16 block rows ([count, 16]) whose two candidates differ in scale byte and whose SPEC 5.6 error
    sums are the nearest of 400,000 random rows (the plane's amax is 2688: the caller adds an element of it): up to
    half exact ties (equal fp32 sums, which keep map-to-6), the rest the smallest nonzero relative gaps
    ``|S_4 - S_6| / max(S_4, S_6)``, returned beside the rows. The sums come from ``conformance.te_torch_variants``
    (torch, written from SPEC 5.6), not from the oracle or the kernel."""
    from conformance.te_torch_variants import Variant, candidate_errors

    rng = np.random.default_rng(seed)
    n = 400_000
    vals = (rng.standard_normal((n, 16)) * rng.uniform(0.05, 8.0, (n, 1))).astype(BF16)
    src3 = torch.from_numpy(vals.astype(np.float32)).reshape(n, 1, 16)
    (byte6, _, _, e6), (byte4, _, _, e4) = candidate_errors(src3, src3.abs().amax(dim=2), torch.tensor(2688.0),
                                                            Variant(error, fast_math, g))
    e4, e6 = e4[:, 0].double(), e6[:, 0].double()
    gap = ((e4 - e6).abs() / torch.maximum(e4, e6)).numpy()
    gap[(byte4 == byte6)[:, 0].numpy() | ~np.isfinite(gap)] = np.inf
    order = np.argsort(gap, kind="stable")
    ties, near = order[gap[order] == 0], order[gap[order] > 0]
    pick = np.concatenate([ties[: count // 2], near[: count - min(ties.size, count // 2)]])
    return vals[pick], gap[pick]


@pytest.mark.parametrize("error,fast_math,g", VARIANTS)
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_near_ties(error, fast_math, g):
    """1x16 block rows whose two error sums tie exactly or come nearest to it (the smallest nonzero relative gaps of
    the random pool: about 2^-23 to 2^-10, by variant), in both planes (the blocks as rows of X, and as columns of
    X^T). The input-domain kernels' filter sums (four_over_six.cuh, fo6_choose_fast) cannot decide a tie, so the
    ties take their exact sums, which must keep map-to-6; the fast-math kernels take the exact sums on every row."""
    blocks, gap = near_tie_blocks(error, fast_math, g, count=63, seed=VARIANTS.index((error, fast_math, g)))
    assert (gap < 2.0**-17).sum() >= 4, gap[:8]  # inside every filter margin: the exact path runs
    x = np.zeros((64, 16), BF16)
    x[0, 0] = 2688.0
    x[1:] = blocks
    kw = dict(block=(1, 16), four_over_six=error, four_over_six_fast_math=fast_math, global_scale_max=g)
    check_case(x, **kw)
    check_case(np.ascontiguousarray(x.T), **kw)


@pytest.mark.parametrize("error,g", [("mae", 448), ("mse", 448), ("mae", 256), ("mse", 256)])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_exact_rows_beside_filter_rows(error, g):
    """Input domain, 1x16: block rows whose multipliers exceed 2^40 (block maxima below about 2^-37.4) take the
    exact sums in fo6_choose_fast whatever their gap, next to rows the filter sums decide, in the same warps; both
    outcomes occur among the exact rows (a guard on the input, from the oracle's choice)."""
    rng = np.random.default_rng(41 + g)
    m, k = 256, 256
    x = rng.standard_normal((m, k)) * np.exp2(-34.0 - rng.integers(0, 8, (m, k // 16))).repeat(16, axis=1)
    x[0, 0] = 2.0**-30
    x = x.astype(np.float32).astype(BF16)
    kw = dict(block=(1, 16), four_over_six=error, global_scale_max=g)
    ref = oracle.quantize(x, **kw)
    bmax = np.abs(x.astype(np.float32)).reshape(m, k // 16, 16).max(axis=2)
    exact_rows = bmax < 2.0**-38
    # SPEC 5.6's two candidate bytes, formed here in fp32 with ml_dtypes' E4M3 rounding; a row kept map-to-4 where
    # they differ and the reference stored byte_4
    s_enc = np.float32(6 * g) / np.abs(x.astype(np.float32)).max()
    base = (bmax / np.float32(6.0)) * s_enc
    e4m3 = ml_dtypes.float8_e4m3fn
    byte_6 = np.minimum(base, np.float32(448.0)).astype(e4m3).view(np.uint8)
    byte_4 = np.minimum(base * np.float32(1.5), np.float32(448.0)).astype(e4m3).view(np.uint8)
    map4 = (byte_4 != byte_6) & (ref.row.scales == byte_4)
    assert exact_rows.mean() > 0.2 and (~exact_rows).mean() > 0.2
    assert map4[exact_rows].any() and (~map4[exact_rows]).any()
    check_case(x, **kw)


@pytest.mark.parametrize("splits", [(0, 17, 128, 0, 201), (64,), (0, 0, 33)])
@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
@pytest.mark.cuda
@needs_cuda
def test_four_over_six_grouped(splits, block):
    """device.group_quantize applies 5.6 per group (empty groups included), as oracle.group_quantize."""
    import device

    x = make_input(sum(splits), 160, seed=len(splits))
    for error, fast_math, g in VARIANTS[::3]:
        kw = dict(block=block, four_over_six=error, four_over_six_fast_math=fast_math, global_scale_max=g)
        ref = oracle.group_quantize(x, list(splits), rowwise=True, columnwise=True, **kw)
        got = device.group_quantize(to_cuda(x), torch.tensor(splits, dtype=torch.int64, device="cuda"),
                                    rowwise=True, columnwise=True, **kw)
        for p in ("row", "col"):
            data, scales = getattr(ref, f"{p}_data"), getattr(ref, f"{p}_scales")
            assert_bytes(f"{p} data {kw}", getattr(got, f"{p}_data")[: data.size], data)
            assert_bytes(f"{p} scales {kw}", getattr(got, f"{p}_scales")[: scales.size], scales)


@pytest.mark.cuda
@needs_cuda
def test_four_over_six_result_records_options():
    """A result's options reach its oracle planes (dequantization and the GEMM's alpha read G, SPEC 11.1 / 12.1)."""
    import device

    x = make_input(40, 64, seed=3)
    q = device.quantize(to_cuda(x), columnwise=True, four_over_six="mae", four_over_six_fast_math=True,
                        global_scale_max=256, block=(16, 16))
    o = q.to_oracle()
    ref = oracle.quantize(x, columnwise=True, four_over_six="mae", four_over_six_fast_math=True, global_scale_max=256,
                          block=(16, 16))
    for got, want in ((o.row, ref.row), (o.col, ref.col)):
        assert (got.global_scale_max, got.four_over_six, got.four_over_six_fast_math) == (256, "mae", True)
        assert np.array_equal(oracle.dequantize(got), oracle.dequantize(want), equal_nan=True)


@pytest.mark.parametrize("swizzled", [True, False])
@pytest.mark.parametrize("g", [448, 256])
@pytest.mark.cuda
@needs_cuda
def test_dequantize_four_over_six_result(g, swizzled):
    """device.dequantize of a 4over6 result reads its G: each plane's float32 bits equal oracle.dequantize of the
    oracle's plane (SPEC 11.1, f = (decode(byte) * A) * fp32(1/(6G))), with the result's own and with raw bytes."""
    import device

    x = make_input(70, 96, seed=11, scale=3.0)
    q = device.quantize(to_cuda(x), columnwise=True, four_over_six="mse", global_scale_max=g, swizzled=swizzled)
    ref = oracle.quantize(x, columnwise=True, four_over_six="mse", global_scale_max=g)
    for p in ("row", "col"):
        want = oracle.dequantize(getattr(ref, p))
        assert_bytes(f"{p} G={g}", device.dequantize(q, p), want)
        with pytest.raises(ValueError, match="global_scale_max"):
            device.dequantize(q, p, global_scale_max=g)  # (a result carries its own G)
        raw = device.dequantize(getattr(q, f"{p}_data"), scales=getattr(q, f"{p}_scales"), amax=getattr(q, f"{p}_amax"),
                                shape=want.shape, swizzled=swizzled, global_scale_max=g)
        assert_bytes(f"{p} raw G={g}", raw, want)


@pytest.mark.cuda
@needs_cuda
def test_dequantize_g256_factor_by_hand():
    """Raw bytes under G = 256: every value equals E2M1 * ((E4M3 * A) * fp32(1/1536)) computed in float32 from the
    bytes (SPEC 11.1), and differs from the G = 448 dequantization of the same bytes wherever it is finite and
    nonzero."""
    import device

    rng = np.random.default_rng(5)
    rows, cols = 33, 64
    data = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(1, 0x7F, (rows, cols // 16), dtype=np.uint8)
    amax = np.float32(1234.5)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    codes = np.stack((data & 0xF, data >> 4), axis=-1).reshape(rows, cols)
    dec = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    f = ((dec * amax).astype(np.float32) * np.float32(1.0 / 1536.0)).astype(np.float32)
    want = (e2m1[codes].reshape(rows, cols // 16, 16) * f[:, :, None]).astype(np.float32).reshape(rows, cols)
    args = dict(scales=torch.from_numpy(scales).cuda(), amax=torch.tensor([amax], device="cuda"), shape=(rows, cols),
                swizzled=False)
    got = device.dequantize(torch.from_numpy(data).cuda(), global_scale_max=256, **args)
    assert_bytes("G=256 by hand", got, want)
    g448 = host(device.dequantize(torch.from_numpy(data).cuda(), **args))
    moved = (want != 0) & np.isfinite(want)
    assert moved.any() and np.all(g448[moved] != want[moved])


def test_dequantize_global_scale_max_refusals_host():
    """device.dequantize refuses a G other than 448 / 256 before any tensor reaches the device (host-side: CPU tensors
    get only as far as the option checks)."""
    import device

    d = torch.zeros(16, 8, dtype=torch.uint8)
    kw = dict(scales=torch.zeros(16, 1, dtype=torch.uint8), amax=torch.ones(1), shape=(16, 16), swizzled=False)
    for bad in (512, 0, True):
        with pytest.raises(ValueError, match="global_scale_max"):
            device.dequantize(d, global_scale_max=bad, **kw)


def test_four_over_six_refusals_host():
    """What the device refuses, before any launch (host-side: CPU tensors reach only the option checks)."""
    from device.quantization import _options

    base = dict(rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=(1, 16), rule="te", rounding="rn",
                seed=0, offset=0)
    bf = torch.zeros(16, 16, dtype=torch.bfloat16)
    assert _options(bf, **base, four_over_six="MSE")["four_over_six"] == 2
    with pytest.raises(TypeError, match="bfloat16"):
        _options(torch.zeros(16, 16, dtype=torch.float16), **base, four_over_six="mae")
    with pytest.raises(ValueError, match="row_scaled"):
        _options(bf, **base, row_scaled=True)
    with pytest.raises(ValueError, match="rounding='rn' only"):
        _options(bf, **{**base, "rounding": "sr"}, four_over_six="mae")
    with pytest.raises(ValueError, match="does not support rht=True"):
        _options(bf, **{**base, "columnwise": True, "rht": True}, four_over_six="mae")
    with pytest.raises(ValueError, match="for rule 'te' only"):
        _options(bf, **{**base, "rule": "torchao"}, four_over_six="mae")
    with pytest.raises(ValueError, match="global_scale_max=256 is defined only with 4over6"):
        _options(bf, **base, global_scale_max=256)
    with pytest.raises(ValueError, match="four_over_six must be None, 'mae' or 'mse', got 'max'"):
        _options(bf, **base, four_over_six="max")
    with pytest.raises(ValueError, match="four_over_six_fast_math=True selects"):
        _options(bf, **base, four_over_six_fast_math=True)
    from device.testing import force_plan

    with force_plan(quantize="fast_bf16"), pytest.raises(ValueError, match="4over6"):
        _options(bf, **base, four_over_six="mae")
    with force_plan(quantize="four_over_six"), pytest.raises(ValueError, match="4over6 calls only"):
        _options(bf, **base)


def test_input_domain_value_by_parts_is_exact():
    """The identity the kernel's input-domain error rests on (four_over_six.cuh, fo6_plane_value): for every E4M3
    scale d, every E2M1 value q = 2^k or 1.5 * 2^k and A in [2^-100, 2^100], ((q d) A) / 6G in fp32 equals
    2^k * ((d A) / 6G) or 2^k * ((1.5 d A) / 6G), bit for bit (NumPy's fp32 arithmetic, one rounding per operation)."""
    from oracle.fp4_numpy import decode_e4m3

    f = np.float32
    rng = np.random.default_rng(0)
    d = decode_e4m3(np.arange(0x7F, dtype=np.uint8)).astype(f)
    q = np.array([0.5, 1, 1.5, 2, 3, 4, 6], f)
    q = np.concatenate([q, -q])
    a = np.concatenate([np.exp2(rng.uniform(-100, 100, 2000)), [2.0**-100, 2.0**100, 2688.0, 1.0]]).astype(f)
    dd, qq, aa = np.meshgrid(d, q, a, indexing="ij")
    for six_g in (f(2688), f(1536)):
        want = ((((qq * dd).astype(f) * aa).astype(f)) / six_g).astype(f)
        w1 = ((dd * aa).astype(f) / six_g).astype(f)
        w15 = ((((dd * f(1.5)).astype(f)) * aa).astype(f) / six_g).astype(f)
        bits = qq.view(np.uint32)
        pow2 = (bits & ~np.uint32(0x00400000)).view(f)  # 1.5 * 2^k -> 2^k
        got = (pow2 * np.where(bits & 0x00400000, w15, w1)).astype(f)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
