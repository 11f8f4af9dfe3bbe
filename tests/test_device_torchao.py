"""GPU tests of the torchao scale rules on the device (SPEC 5.4, 5.5 with 3.5 and 4.1): quantize, grouped quantize
and dequantize, byte for byte against the oracle, whose torchao rules are checked against torchao itself
(tests/test_oracle_torchao.py). Output buffers are poisoned (0xFF) before the kernels run, so an unwritten byte fails.

The NaN cases are the point: under these rules NaNs are data (a NaN amax makes every code of the plane NaN, a NaN in
a block makes its scale byte 0x7F and its codes 0x4, a created 0/0 gives 0xFF and 0xC), with x86's payload and sign
semantics, which the GPU's own arithmetic does not follow. With the RHT (bf16), Inf - Inf in the butterfly creates
NaNs too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from test_device_quantize import (  # noqa: E402
    BF16,
    _raw_plane,
    _same_or_both_nan,
    assert_bytes,
    assert_f32_bits,
    check_case,
    check_grouped,
    check_single,
    degenerate_input,
    device_opts,
    host,
    make_input,
    random_splits,
    run_group_poisoned,
    to_cuda,
)

import oracle  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

RULES = ("torchao", "torchao_noscale")
OPTIONS = list(itertools.product(((1, 16), (16, 16)), ("rn", "sr"), ("normal", "special", "inf")))


def f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


def check(x: np.ndarray, *, amax=None, **kw) -> None:
    """check_case (oracle once, device into poisoned buffers with swizzled and compact scales); a number amax is
    given to both as the (row, col) pair the out-variant launcher takes."""
    check_case(x, amax=None if amax is None else (amax if isinstance(amax, tuple) else (amax, amax)), **kw)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32], ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("m,k", [(0, 16), (1, 16), (17, 48), (129, 160), (300, 64)])
def test_quantize_grid(rule, dtype, m, k):
    """Both planes, both block shapes, RN and SR, inputs with NaN / Inf / -0 / subnormals / outliers / zero blocks;
    compact and swizzled scales (check_case runs both)."""
    for i, (block, rounding, kind) in enumerate(OPTIONS):
        x = make_input(m, k, kind=kind, dtype=dtype, seed=1000 * m + k + i)
        check(x, rowwise=True, columnwise=True, rule=rule, block=block, rounding=rounding, seed=77 + i,
              offset=2**32 - 1 - i)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("signs", [0xD7E8, 0x1234])
@pytest.mark.parametrize("m,k", [(1, 16), (17, 48), (129, 160), (300, 64)])
def test_quantize_rht(rule, signs, m, k):
    """The columnwise plane with the RHT (SPEC 7; bf16), both blocks, RN and SR, with NaN / Inf inputs (a NaN, or an
    Inf - Inf, makes all 16 outputs of a butterfly NaN: byte 0x7F and the multiplier's codes), both amax passes
    NaN-propagating over the RHT'd source (SPEC 4.2)."""
    for i, (block, rounding, kind) in enumerate(OPTIONS):
        x = make_input(m, k, kind=kind, seed=7 * m + k + i)
        check(x, rowwise=True, columnwise=True, rht=True, rht_signs=signs, rule=rule, block=block,
              rounding=rounding, seed=11 + i, offset=i)
    x = make_input(64, 48, kind="inf", seed=2)  # a supplied finite amax: NaN blocks beside finite multipliers
    check(x, rowwise=True, columnwise=True, rht=True, rht_signs=signs, rule=rule, amax=(50.0, 30.0))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("amax", [2.5, (0.0, 7.0), (float("inf"), 1e-30), -0.0, (3e38, float("nan"))])
def test_quantize_supplied_amax(rule, amax):
    """A finite P with NaN blocks (byte 0x7F, codes from torch's decoded NaN 0x7FF00000), P = 0 (0/0 -> 0xFF, b/0 ->
    448 and Inf multipliers, 0 * Inf -> 0xB), P = -0, P = Inf (Inf / Inf -> 0xFF), P NaN."""
    x = make_input(70, 64, kind="inf", seed=9)
    for block in ((1, 16), (16, 16)):
        check(x, rowwise=True, columnwise=True, rule=rule, block=block, amax=amax)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("bits", [0xFFC00000, 0x7FE00000, 0x7F800001, 0xFFBFFFFF])
def test_quantize_supplied_nan_amax_payloads(rule, bits):
    """A NaN amax passes its quieted pattern to P, 1 / P and every multiplier: the codes' index (3 or 4) and sign,
    and the scale bytes' sign, come from it (SPEC 3.5). Given as a device tensor, so the bits reach the kernel."""
    from device import _ops

    a = f32(bits)
    x = make_input(40, 48, kind="normal", seed=3)
    ref = oracle.quantize(x, rowwise=True, columnwise=True, rule=rule, amax=(a, np.float32(1.5)))
    x_t = to_cuda(x)
    amax_t = torch.from_numpy(np.array([bits, 0x3FC00000], np.uint32).view(np.float32)).cuda()
    for swizzled in (True, False):
        opts = device_opts(x_t, rowwise=True, columnwise=True, rule=rule)
        bufs = _ops.quantize_buffers(40, 48, rowwise=True, columnwise=True, swizzled=swizzled, device=x_t.device,
                                     fill=0xFF)
        _ops.launch_quantize(x_t, bufs, (amax_t[0:1], amax_t[1:2]), swizzled=swizzled, **opts)
        torch.cuda.synchronize()
        check_single(bufs, ref, swizzled)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("kind", ["zeros", "neg_zeros", "all_nan", "one_nan", "inf_only", "tiny"])
@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32], ids=["bf16", "f16", "f32"])
def test_quantize_degenerate_inputs(rule, kind, dtype):
    """Whole tensors of one kind: all zeros (rule "torchao": P = 0, every block 0/0 -> byte 0xFF and codes 0xC, the
    x86 default NaN), -0, all NaN, one NaN (rule "torchao": amax NaN, so every code NaN), +-Inf only, subnormals."""
    x = degenerate_input(kind, dtype)
    for block in ((1, 16), (16, 16)):
        check(x, rowwise=True, columnwise=True, rule=rule, block=block)


@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32], ids=["bf16", "f16", "f32"])
def test_quantize_nan_payload_inputs(dtype):
    """NaN inputs of several payloads and both signs (bf16 / f16 / f32 patterns), under both rules and a supplied
    finite amax: each NaN block gets byte 0x7F whatever the payload; the amax pass gives 0x7FC00000."""
    pats = {BF16: [0x7FC0, 0xFFC0, 0x7FA0, 0x7F81], np.float16: [0x7E00, 0xFE00, 0x7F00, 0x7C01],
            np.float32: [0x7FC00000, 0xFFC00000, 0x7FE00000, 0x7F800001]}[dtype]
    udt = {BF16: np.uint16, np.float16: np.uint16, np.float32: np.uint32}[dtype]
    x = make_input(48, 64, dtype=dtype, seed=11)
    raw = x.view(udt)
    for i, p in enumerate(pats):
        raw[3 * i + 1, 5 + 16 * (i % 4)] = p
    for rule in RULES:
        for amax in (None, 4.0):
            check(x, rowwise=True, columnwise=True, rule=rule, amax=amax)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("e", [1, 5, 64])
def test_group_quantize(rule, e):
    """Grouped quantize (SPEC 9) with per-group amaxes (NaN-propagating, 4.1), empty and unaligned groups, both
    planes, both scale layouts, every other call with the RHT; bytes past the last group stay 0."""
    rng = np.random.default_rng(e)
    t = int(rng.integers(1, 600))
    splits = random_splits(rng, t, e)
    for i, (block, rounding, kind) in enumerate(OPTIONS[::2]):
        x = make_input(t, 80, kind=kind, seed=e + i)
        kw = dict(rowwise=True, columnwise=True, rht=bool(i % 2), rule=rule, block=block, rounding=rounding, seed=5,
                  offset=9)
        ref = oracle.group_quantize(x, splits, **kw)
        x_t = to_cuda(x)
        for swizzled in (True, False):
            check_grouped(run_group_poisoned(x_t, splits, swizzled=swizzled, **kw), ref, swizzled)


@pytest.mark.parametrize("rule", RULES)
def test_group_quantize_supplied_amax_and_public_api(rule):
    import device

    splits = np.array([0, 33, 0, 100, 7], np.int64)
    x = make_input(int(splits.sum()), 48, kind="special", seed=21)
    amax = (np.array([1.0, 0.0, 5.0, np.inf, np.nan], np.float32), np.array([2.0, 3.0, 0.0, 1e-3, 8.0], np.float32))
    ref = oracle.group_quantize(x, splits, rowwise=True, columnwise=True, rule=rule, amax=amax)
    dev = torch.device("cuda")
    q = device.group_quantize(to_cuda(x), torch.from_numpy(splits).to(dev), rowwise=True, columnwise=True, rule=rule,
                              amax=tuple(torch.from_numpy(a).to(dev) for a in amax))
    bufs = {"row_data": q.row_data, "row_scales": q.row_scales, "col_data": q.col_data, "col_scales": q.col_scales,
            "row_amax": q.row_amax, "col_amax": q.col_amax, "offsets": q.offsets}
    check_grouped(bufs, ref, True)
    conv = q.to_oracle()
    for g in range(splits.size):
        for p in ("row_planes", "col_planes"):
            a, b = getattr(conv, p)[g], getattr(ref, p)[g]
            assert a.rule == rule
            assert np.array_equal(a.data, b.data) and np.array_equal(a.scales, b.scales) and a.shape == b.shape


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
def test_public_quantize_and_dequantize(rule, dtype):
    """device.quantize -> .to_oracle() equals oracle.quantize; device.dequantize of each plane uses the plane's rule
    (SPEC 11.1) and equals oracle.dequantize (NaN as a class, 11.2)."""
    import device

    for kind, amax in (("normal", None), ("special", None), ("special", 3.0)):
        x = make_input(129, 96, kind=kind, dtype=dtype, seed=31)
        ref = oracle.quantize(x, rowwise=True, columnwise=True, rule=rule, amax=amax)
        q = device.quantize(to_cuda(x), rowwise=True, columnwise=True, rule=rule, amax=amax)
        assert q.options["rule"] == rule
        got = q.to_oracle()
        for p in ("row", "col"):
            gp, rp = getattr(got, p), getattr(ref, p)
            assert_bytes(f"{p} data", gp.data, rp.data)
            assert_bytes(f"{p} scales", gp.scales, rp.scales)
            assert_f32_bits(f"{p} amax", np.asarray(gp.amax), rp.amax)
            _same_or_both_nan(f"dequantized {p}", device.dequantize(q, p), oracle.dequantize(rp))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("amax", [3.7e4, 0.0, float("inf"), float("nan")])
def test_dequantize_raw_bytes(rule, amax):
    """SPEC 11.2 on arbitrary bytes (NaN and signed scale bytes) with the torchao factors."""
    import device

    rows, cols = 131, 208
    data, scales = _raw_plane(rows, cols, seed=5)
    want = oracle.dequantize(oracle.QuantizedPlane(data, scales, np.float32(amax), (rows, cols), rule=rule))
    for swizzled in (False, True):
        sc = oracle.swizzle.swizzle_scales(scales) if swizzled else scales
        got = device.dequantize(torch.from_numpy(data).cuda(), scales=torch.from_numpy(sc).cuda(),
                                amax=torch.tensor([amax], device="cuda"), shape=(rows, cols), swizzled=swizzled,
                                rule=rule)
        _same_or_both_nan(f"dequantize {rule} swizzled={swizzled} amax={amax}", got, want)
    # the factor of the other rules differs on the same bytes (the rule reaches the kernel)
    te = host(device.dequantize(torch.from_numpy(data).cuda(), scales=torch.from_numpy(scales).cuda(),
                                amax=torch.tensor([amax], device="cuda"), shape=(rows, cols), swizzled=False))
    if amax == 3.7e4:  # (4,993 of the 27,248 values differ between the two factors here, by the oracle)
        assert not np.array_equal(np.nan_to_num(te), np.nan_to_num(want))


def test_refusals():
    import device

    # (the grouped GEMM's refusal of mixed rules: tests/test_device_gemm_torchao.py)
    with pytest.raises(ValueError, match="rule must be one of"):
        device.dequantize(torch.zeros(16, dtype=torch.uint8, device="cuda"),
                          scales=torch.zeros(2, dtype=torch.uint8, device="cuda"),
                          amax=torch.ones(1, device="cuda"), shape=(2, 16), swizzled=False, rule="torchao2")
