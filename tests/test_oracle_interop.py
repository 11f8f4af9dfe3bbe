"""oracle.interop (SPEC 14.10): torchao 0.18's NVFP4Tensor and TE's NVFP4 tensor fields as oracle planes and back.

Expected bytes come from torchao itself (its quantizer, its ``to_blocked`` / ``from_blocked``, its dequantize and
``per_tensor_amax_to_scale``) and from TE's field shapes as its source states them
(``NVFP4Quantizer.get_scale_shape``: rowwise ``(roundup(M,128), roundup(K/16,4))``, columnwise
``(roundup(K,128), roundup(M/16,4))``).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402
from oracle.interop import (  # noqa: E402
    amax_from_torchao_scale,
    from_te_fields,
    from_torchao,
    read_scales,
    to_te_fields,
    to_torchao,
    torchao_fields,
)

pytestmark = pytest.mark.torch


def _ao():
    from conformance.independent import import_torchao

    mods = import_torchao()
    if mods is None:
        pytest.skip("torchao is not installed")
    return mods  # (nvfp4_tensor, utils)


def _bf16_np(t) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _ru(n, m):
    return -(-n // m) * m


# ---- torchao ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,swizzled", [((200, 96), False), ((200, 96), True), ((3, 40, 64), False),
                                            ((2, 128, 64), True), ((1, 16), False), ((1, 16), True)])
@pytest.mark.parametrize("with_scale", [False, True])
def test_from_torchao_reads_torchaos_own_bytes(shape, swizzled, with_scale):
    """The plane holds torchao's nvfp4_quantize bytes (read with plain torch views, as the conformance backend did
    before the adapter) whether torchao stored its scales compact or swizzled (its own from_blocked)."""
    nv, utils = _ao()
    x = torch.randn(*shape, dtype=torch.bfloat16) * 3
    pts = nv.per_tensor_amax_to_scale(x.abs().max().float()) if with_scale else None
    t = nv.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=pts, is_swizzled_scales=swizzled)
    ref_scales, ref_data = nv.nvfp4_quantize(x.contiguous(), block_size=16, per_tensor_scale=pts)
    m = int(np.prod(shape[:-1]))
    o = from_torchao(t)
    p = o.row
    assert p.shape == (m, shape[-1]) and p.rule == ("torchao" if with_scale else "torchao_noscale")
    assert np.array_equal(p.data, ref_data.view(torch.uint8).reshape(m, -1).numpy())
    assert np.array_equal(p.scales, ref_scales.view(torch.uint8).reshape(m, -1).numpy())
    if swizzled:  # torchao's inverse of its own layout reads the same compact bytes
        back = utils.from_blocked(t.scale.view(torch.uint8).reshape(-1), m, shape[-1] // 16)
        assert np.array_equal(p.scales, back.numpy())
    if with_scale:  # the amax gives back torchao's per-tensor scale, bit for bit
        assert torch.equal(nv.per_tensor_amax_to_scale(torch.tensor(p.amax)), pts)
    # and the oracle's own torchao rule gives the same bytes (SPEC 5.4 / 5.5)
    q = oracle.quantize(_bf16_np(x).reshape(m, -1), rule=p.rule, amax=p.amax if with_scale else None).row
    assert np.array_equal(q.data, p.data) and np.array_equal(q.scales, p.scales)


@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("rule", ["torchao", "torchao_noscale"])
def test_to_torchao_round_trip_and_torchaos_dequantize(swizzled, rule):
    nv, utils = _ao()
    x = np.random.default_rng(3).standard_normal((130, 80)).astype(ml_dtypes.bfloat16)
    q = oracle.quantize(x, rule=rule)
    t = to_torchao(q, swizzled=swizzled, orig_dtype=torch.bfloat16)
    assert t.is_swizzled_scales == swizzled and t.orig_dtype == torch.bfloat16 and tuple(t.shape) == (130, 80)
    raw = t.scale.view(torch.uint8)
    if swizzled:  # torchao's own layout function on the compact bytes
        assert torch.equal(raw.reshape(-1), utils.to_blocked(torch.from_numpy(q.row.scales)).reshape(-1))
        assert tuple(raw.shape) == (_ru(130, 128) // 4, _ru(80, 64) // 4)
    else:
        assert np.array_equal(raw.numpy(), q.row.scales)
    assert (t.per_tensor_scale is None) == (rule == "torchao_noscale")
    # torchao's dequantize of the oracle's bytes is the oracle's dequantize (SPEC 11.1's torchao factors)
    got = t.dequantize(torch.float32).numpy()
    want = oracle.dequantize(q.row)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    back = from_torchao(t).row
    assert np.array_equal(back.data, q.row.data) and np.array_equal(back.scales, q.row.scales)
    if rule == "torchao":
        assert back.amax.view(np.uint32) == q.row.amax.view(np.uint32)


def test_torchao_fields_are_the_stored_bytes():
    nv, _ = _ao()
    x = torch.randn(64, 32)
    t = nv.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=nv.per_tensor_amax_to_scale(x.abs().max()),
                                is_swizzled_scales=True)
    f = torchao_fields(t)
    assert f["qdata"].shape == (64, 16) and f["scale"].shape == (32, 16) and f["is_swizzled_scales"]
    assert f["orig_dtype"] == "float32" and f["block_size"] == 16 and not f["transposed"]
    assert np.array_equal(f["scale"], t.scale.view(torch.uint8).numpy())
    with pytest.raises(TypeError, match="torchao NVFP4Tensor"):
        torchao_fields(np.zeros(3))


def test_amax_from_torchao_scale_inverts_torchaos_division():
    """For amaxes over many binades, the recovered A gives torchao's P back (torch's division); a P that no amax
    gives is refused, and so is a negative one."""
    nv, _ = _ao()
    rng = np.random.default_rng(0)
    amaxes = np.concatenate([(rng.random(300) * np.exp2(rng.integers(-30, 30, 300))).astype(np.float32),
                             np.float32([1.0, 2688.0, 448.0, 1e-30, 3e38])])
    for a in amaxes:
        p = nv.per_tensor_amax_to_scale(torch.tensor(a))
        got = amax_from_torchao_scale(p)
        assert torch.equal(nv.per_tensor_amax_to_scale(torch.tensor(got)), p), a
    assert np.isnan(amax_from_torchao_scale(np.float32(np.nan))) and amax_from_torchao_scale(np.float32(0)) == 0
    # a P without an amax: the quotients skip fp32 values where the amaxes are sparser than the quotients
    start = int(np.float32(1.6).view(np.uint32))  # P in [4096/2688, 2): its amaxes (in [4096, 5376)) are sparser
    unreachable = None
    for bits in range(start, start + 64):
        p = np.uint32(bits).view(np.float32)
        cands = (np.float32(np.float64(p) * 2688).view(np.uint32) + np.arange(-32, 33)).astype(np.uint32)
        outs = nv.per_tensor_amax_to_scale(torch.from_numpy(cands.view(np.float32)))
        if not (outs == torch.tensor(p)).any():
            unreachable = p
            break
    assert unreachable is not None
    with pytest.raises(ValueError, match="not fp32\\(amax / 2688\\)"):
        amax_from_torchao_scale(unreachable)
    with pytest.raises(ValueError, match=">= 0"):
        amax_from_torchao_scale(np.float32(-1.0))


def test_from_torchao_refusals_and_a_checked_amax():
    nv, _ = _ao()
    x = torch.randn(32, 32)
    pts = nv.per_tensor_amax_to_scale(x.abs().max())
    t = nv.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=pts)
    with pytest.raises(ValueError, match="transposed"):
        from_torchao(t.t())
    with pytest.raises(ValueError, match="does not give the tensor's per_tensor_scale"):
        from_torchao(t, amax=np.float32(x.abs().max().item() * 2))
    assert from_torchao(t, amax=x.abs().max().numpy()).row.amax == np.float32(x.abs().max().item())
    x2 = torch.randn(2, 32, 32)
    per_expert = nv.NVFP4Tensor.to_nvfp4(x2, per_tensor_scale=nv.per_tensor_amax_to_scale(
        x2.abs().amax(dim=(1, 2), keepdim=True)))  # torchao's per-expert P: [2, 1, 1]
    with pytest.raises(ValueError, match="per-expert"):
        from_torchao(per_expert)


def test_from_torchao_reads_a_one_value_per_tensor_scale_of_any_shape():
    """A P of shape (1,) or (1, 1, 1) (one expert) is the tensor's one per-tensor scale: the plane equals the one read
    from torchao's own 0-d P, and its amax gives that P back (torchao's per_tensor_amax_to_scale)."""
    nv, _ = _ao()
    x = torch.randn(32, 64) * 5
    pts = nv.per_tensor_amax_to_scale(x.abs().max())
    t = nv.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=pts)
    want = from_torchao(t).row
    for shape in ((1,), (1, 1, 1)):
        t.per_tensor_scale = pts.reshape(shape)
        got = from_torchao(t).row
        assert got.rule == "torchao" and np.array_equal(got.data, want.data) and np.array_equal(got.scales, want.scales)
        assert torch.equal(nv.per_tensor_amax_to_scale(torch.tensor(got.amax)), pts), shape


# ---- TE fields ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("swizzled", [False, True])
def test_te_fields_shapes_padding_and_round_trip(swizzled):
    _, utils = _ao()
    m, k = 48, 80  # M a multiple of 16 (TE's columnwise condition); K/16 = 5 scale columns
    x = np.random.default_rng(1).standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    t = oracle.quantize(x, columnwise=True)
    f = to_te_fields(t, swizzled=swizzled)
    assert f["rowwise_data"].shape == (m, k // 2) and f["columnwise_data"].shape == (k, m // 2)
    assert f["rowwise_scale_inv"].shape == (_ru(m, 128), _ru(k // 16, 4))
    assert f["columnwise_scale_inv"].shape == (_ru(k, 128), _ru(m // 16, 4))
    assert f["amax_rowwise"].dtype == np.float32 and f["amax_rowwise"].shape == (1,)
    assert f["with_gemm_swizzled_scales"] is swizzled
    for name, p in (("rowwise", t.row), ("columnwise", t.col)):
        s = f[f"{name}_scale_inv"]
        if swizzled:  # torchao's to_blocked is an independent implementation of the 128x4 layout
            assert np.array_equal(s.reshape(-1), utils.to_blocked(torch.from_numpy(p.scales)).numpy().reshape(-1))
        else:
            assert np.array_equal(s[: p.rows, : p.cols // 16], p.scales)
            s2 = s.copy()
            s2[: p.rows, : p.cols // 16] = 0
            assert not s2.any()  # the padding is 0x00 (SPEC 8.1)
    extra = {"fp4_dtype": "kFloat4E2M1", "quantizer": None, "fake_dtype": torch.bfloat16}
    back = from_te_fields(**f, **extra)
    for got, want in ((back.row, t.row), (back.col, t.col)):
        assert got.shape == want.shape and np.array_equal(got.data, want.data)
        assert np.array_equal(got.scales, want.scales) and got.amax == want.amax
    assert back.shape == (m, k)
    # torch tensors (TE's own type) read the same
    tf = to_te_fields(t, swizzled=swizzled, as_torch=True)
    assert isinstance(tf["rowwise_data"], torch.Tensor)
    back2 = from_te_fields(**tf)
    assert np.array_equal(back2.col.scales, t.col.scales)


def test_te_fields_of_an_nd_tensor_and_refusals():
    x = np.random.default_rng(2).standard_normal((2, 8, 32)).astype(np.float32)
    t = oracle.quantize(x, columnwise=True)  # M = 16 rows after flattening
    f = to_te_fields(t)
    nd = dict(f, rowwise_data=f["rowwise_data"].reshape(2, 8, 16), columnwise_data=f["columnwise_data"].reshape(32, 2, 4))
    back = from_te_fields(**nd)
    assert back.shape == (16, 32) and np.array_equal(back.row.data, t.row.data)
    assert np.array_equal(back.col.data, t.col.data)
    with pytest.raises(TypeError, match="unknown TE field"):
        from_te_fields(**f, rowwise_scale=None)
    with pytest.raises(ValueError, match="no plane"):
        from_te_fields()
    odd = oracle.quantize(np.ones((20, 32), np.float32), columnwise=True)  # M = 20: padded to 32 tokens
    with pytest.raises(ValueError, match="multiple of 16"):
        to_te_fields(odd)
    with pytest.raises(ValueError, match="need 512 bytes"):
        read_scales(np.zeros(100, np.uint8), 16, 2, "swizzled")
    with pytest.raises(ValueError, match="no TE fields"):  # torchao's rules are not TE's
        to_te_fields(oracle.quantize(x, rule="torchao"))
    with pytest.raises(ValueError, match="only for 4over6"):  # G = 256 without 4over6: TE has 448 there
        from_te_fields(**dict(f, nvfp4_use_4over6=False, nvfp4_e4m3_max=256))
    with pytest.raises(ValueError, match="448 or 256"):
        from_te_fields(**dict(f, nvfp4_use_4over6=True, nvfp4_e4m3_max=300))
    g = to_te_fields(oracle.quantize(np.ones((16, 16), np.float32), columnwise=True))  # the planes of another X
    with pytest.raises(ValueError, match="not the plane of X"):
        from_te_fields(**dict(f, columnwise_data=g["columnwise_data"], columnwise_scale_inv=g["columnwise_scale_inv"]))
    with pytest.raises(ValueError, match="multiple of 16"):  # SPEC 14.10: TE's columnwise plane, M = 8
        from_te_fields(columnwise_data=np.zeros((32, 4), np.uint8), columnwise_scale_inv=np.zeros((128, 4), np.uint8),
                       amax_columnwise=np.float32([1.0]))


def test_te_fields_of_a_4over6_g256_plane():
    """A 4over6 plane with G = 256 (SPEC 5.6) gives TE's flags nvfp4_use_4over6=True, nvfp4_e4m3_max=256 (the values
    the quantize call was given), and from_te_fields reads G back; the error mode comes from the caller."""
    x = np.random.default_rng(5).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    t = oracle.quantize(x, columnwise=True, four_over_six="mse", global_scale_max=256)
    f = to_te_fields(t)
    assert f["nvfp4_use_4over6"] is True and f["nvfp4_e4m3_max"] == 256
    back = from_te_fields(**f, four_over_six="mse")
    for p in (back.row, back.col):
        assert p.global_scale_max == 256 and p.four_over_six == "mse"
    assert np.array_equal(back.row.data, t.row.data) and np.array_equal(back.col.scales, t.col.scales)


def test_to_torchao_refuses_a_g256_plane():
    """torchao's P is amax / 2688 (SPEC 5.4); a G = 256 plane's factor is amax / 1536 (SPEC 5.6): no torchao form."""
    x = np.random.default_rng(6).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    q = oracle.quantize(x, columnwise=True, four_over_six="mae", global_scale_max=256)
    for plane in ("row", "col"):
        with pytest.raises(ValueError, match="global_scale_max=256"):
            to_torchao(q, plane)
    with pytest.raises(ValueError, match="global_scale_max=256"):
        to_torchao(q.row)
    with pytest.raises(ValueError, match="global_scale_max=256"):
        _device_result(q, True).to_torchao("row")


# ---- device results (CPU tensors in the device classes; the CUDA path below) --------------------------------------


def _device_result(q, swizzled):
    from device._results import DeviceNVFP4Tensor

    m, k = q.shape

    def s(p):
        return torch.from_numpy(p.swizzled_scales() if swizzled else p.scales)

    return DeviceNVFP4Tensor(shape=(m, k), row_data=torch.from_numpy(q.row.data), row_scales=s(q.row),
                             row_amax=torch.tensor([q.row.amax]), col_data=torch.from_numpy(q.col.data),
                             col_scales=s(q.col), col_amax=torch.tensor([q.col.amax]), swizzled=swizzled,
                             options=dict(q.options))


@pytest.mark.parametrize("swizzled", [False, True])
def test_device_result_converts_through_interop(swizzled):
    x = np.random.default_rng(4).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    q = oracle.quantize(x, columnwise=True, rule="torchao")
    dev = _device_result(q, swizzled)
    for want_swz in (False, True):
        ao = dev.to_torchao("row", swizzled=want_swz)
        ref = to_torchao(q, "row", swizzled=want_swz)
        assert torch.equal(ao.qdata, ref.qdata) and torch.equal(ao.scale.view(torch.uint8), ref.scale.view(torch.uint8))
        assert torch.equal(ao.per_tensor_scale, ref.per_tensor_scale)
    with pytest.raises(ValueError, match="no TE fields"):
        dev.to_te_fields()
    # TE fields of TE-rule results: plain, and 4over6 with G = 256 (its flags are the quantize call's options)
    for kw, use_4over6, gmax in (({}, False, 448), ({"four_over_six": "mae", "global_scale_max": 256}, True, 256)):
        q = oracle.quantize(x, columnwise=True, **kw)
        dev = _device_result(q, swizzled)
        for want_swz in (False, True):
            te = dev.to_te_fields(swizzled=want_swz)
            te_ref = to_te_fields(q, swizzled=want_swz)
            for key in ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv",
                        "amax_rowwise"):
                assert np.array_equal(te[key].numpy(), te_ref[key]), (key, want_swz, kw)
            assert te["nvfp4_use_4over6"] is use_4over6 and te["nvfp4_e4m3_max"] == gmax, kw
        assert dev.to_te_fields()["with_gemm_swizzled_scales"] is swizzled  # its own layout by default


@pytest.mark.cuda
def test_device_quantize_to_torchao_and_te_fields_on_the_gpu():
    import device

    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(96, 128, dtype=torch.bfloat16, device="cuda", generator=g).clamp(-4, 4)
    x[7, 9] = 4.21875  # the amax: torch's CUDA division gives P one ulp off fp32(4.21875 / 2688) (SPEC 5.4)
    xo = _bf16_np(x.cpu())
    for rule in ("torchao", "te"):
        q = device.quantize(x, columnwise=True, rule=rule)
        ref = oracle.quantize(xo, columnwise=True, rule=rule)
        ao = q.to_torchao("row")
        assert ao.qdata.device.type == "cuda"
        assert np.array_equal(ao.qdata.cpu().numpy(), ref.row.data)
        back = from_torchao(ao)
        assert np.array_equal(back.row.scales, ref.row.scales)
        if rule == "torchao":
            with pytest.raises(ValueError, match="no TE fields"):
                q.to_te_fields()
            continue
        te = q.to_te_fields(swizzled=False)
        assert te["rowwise_scale_inv"].device.type == "cuda"
        got = from_te_fields(**te, rule=rule)
        assert np.array_equal(got.col.data, ref.col.data) and np.array_equal(got.col.scales, ref.col.scales)


def test_device_result_to_oracle_keeps_the_rht_signs():
    """A device result's columnwise RHT plane comes to the oracle with the sign mask of its options (SPEC 7.1), as
    oracle.quantize records it (oracle.gemm checks the two operands' masks against each other where both are known)."""
    x = np.random.default_rng(6).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    for signs in (0xD7E8, 0x1234):
        q = oracle.quantize(x, columnwise=True, rht=True, rht_signs=signs)
        back = _device_result(q, True).to_oracle()
        assert back.col.rht_signs == q.col.rht_signs == signs and back.row.rht_signs is None


@pytest.mark.parametrize("g", [448, 256])
def test_te_fields_keep_the_4over6_flag_without_its_mode(g):
    """TE's fields carry nvfp4_use_4over6 and G, not the error mode (TE keeps it on the quantizer): fields read
    without the mode and written again keep the flag (and G = 256 stays readable)."""
    x = np.random.default_rng(7).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    q = oracle.quantize(x, columnwise=True, four_over_six="mse", global_scale_max=g)
    f = to_te_fields(q)
    assert (f["nvfp4_use_4over6"], f["nvfp4_e4m3_max"]) == (True, g)
    again = to_te_fields(from_te_fields(**f))
    assert (again["nvfp4_use_4over6"], again["nvfp4_e4m3_max"]) == (True, g)
    back = from_te_fields(**again)
    assert np.array_equal(back.row.data, q.row.data) and np.array_equal(back.col.scales, q.col.scales)


def test_te_fields_round_trip_keeps_the_rht_sign_mask():
    """TE's fields do not record the sign mask; from_te_fields takes it beside rht= (it used to refuse it, leaving
    the columnwise plane's mask unknown, so oracle.gemm could not compare it with the other operand's)."""
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    q = oracle.quantize(x, columnwise=True, rht=True, rht_signs=0x1234)
    back = from_te_fields(**to_te_fields(q), rht=True, rht_signs=0x1234)
    assert back.col.rht_signs == 0x1234 and np.array_equal(back.col.data, q.col.data)
    assert from_te_fields(**to_te_fields(q), rht=True).col.rht_signs is None  # not given: unknown
    with pytest.raises(ValueError, match="rht=True"):
        from_te_fields(**to_te_fields(q), rht_signs=0x1234)
    with pytest.raises(ValueError, match="16-bit"):
        from_te_fields(**to_te_fields(q), rht=True, rht_signs=1 << 16)


@pytest.mark.parametrize("swizzled", [True, False])
def test_grouped_device_result_keeps_the_scale_bytes_it_wrote(swizzled):
    """DeviceGroupedNVFP4Tensor.to_oracle cuts the scale buffer the call wrote (padding bytes as written), so a wrong
    padding byte shows in a comparison with oracle.group_quantize; it used to rebuild both layouts from the groups'
    compact scales, which hid it."""
    torch = pytest.importorskip("torch")
    from device._results import DeviceGroupedNVFP4Tensor

    x = np.random.default_rng(1).standard_normal((20, 32)).astype(ml_dtypes.bfloat16)
    og = oracle.group_quantize(x, [20])
    written = (og.row_scales if swizzled else og.row_scales_compact).copy()
    written[-1] = 0x7F  # a padding byte (rows 20 .. 127 of the 128-row tile)
    offs = np.stack([og.row_offsets, [0, 1], og.row_data_offsets, og.row_scale_offsets, og.col_data_offsets,
                     og.col_scale_offsets]).astype(np.int64)
    d = DeviceGroupedNVFP4Tensor(shape=og.shape, splits=torch.tensor([20]), row_data=torch.from_numpy(og.row_data),
                                 row_scales=torch.from_numpy(written), col_data=None, col_scales=None,
                                 row_amax=torch.from_numpy(og.row_amax), col_amax=torch.zeros(1),
                                 offsets=torch.from_numpy(offs), swizzled=swizzled, options=dict(og.options))
    o = d.to_oracle()
    assert np.array_equal(o.row_scales if swizzled else o.row_scales_compact, written)
    assert np.array_equal(o.row_scales_compact if swizzled else o.row_scales,
                          og.row_scales_compact if swizzled else og.row_scales)  # the other layout, formed


def test_to_torchao_prints_nothing():
    """A fresh process converting a plane to torchao writes nothing to stderr (torchao's import prints that its optional
    CUDA kernels failed to load on a CPU build, and torch warns about pytree registrations; the oracle silences
    them as the conformance backend does)."""
    import subprocess
    import sys

    _ao()
    code = ("import numpy as np, oracle; "
            "print(type(oracle.to_torchao(oracle.quantize(np.ones((16, 32), np.float32), rule='torchao').row)).__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "NVFP4Tensor", r.stderr
    assert r.stderr == "", r.stderr


# --- refusals and choices no other test reached (a mutation audit: each test fails on its mutant) ---

def _fake_torchao(**kw):
    """A torchao-like NVFP4Tensor of [16, 16] with all-zero bytes (the attributes from_torchao reads)."""
    d = dict(qdata=torch.zeros(16, 8, dtype=torch.uint8), scale=torch.zeros(16, 1, dtype=torch.uint8), block_size=16,
             orig_dtype=torch.bfloat16, per_tensor_scale=None, is_swizzled_scales=False, shape=(16, 16))
    d.update(kw)
    return types.SimpleNamespace(**d)


def test_interop_refuses_bytes_and_scales_of_the_wrong_type():
    with pytest.raises(TypeError, match="bytes .uint8 or float8_e4m3fn., got bool"):
        read_scales(np.ones((1, 1), bool), 1, 1, "compact")
    with pytest.raises(TypeError, match="got torch.int16"):  # would be read as twice as many bytes
        read_scales(torch.zeros(16, dtype=torch.int16), 4, 4, "compact")
    for wrong in (np.zeros((16, 4), np.int8), torch.zeros(16, 4, dtype=torch.int8),
                  torch.zeros(16, 4, dtype=torch.bool)):
        with pytest.raises(TypeError, match="rowwise_data must hold bytes"):
            from_te_fields(rowwise_data=wrong, rowwise_scale_inv=np.zeros((128, 4), np.uint8), amax_rowwise=1.0)
    with pytest.raises(TypeError, match="must be float32, got torch.float64"):
        amax_from_torchao_scale(torch.tensor([1.0], dtype=torch.float64))
    with pytest.raises(TypeError, match="float32 number or array, got bool"):
        amax_from_torchao_scale(np.array([True]))
    # a float64 array is refused as a float64 tensor is, not rounded; a Python number only where float32 holds it
    with pytest.raises(TypeError, match="float32 number or array, got float64"):
        amax_from_torchao_scale(np.array([0.1]))
    for inexact in (0.1, 1e300):
        with pytest.raises(ValueError, match="is not a float32 value"):
            amax_from_torchao_scale(inexact)
    assert amax_from_torchao_scale(0.5) == amax_from_torchao_scale(np.float32([0.5]))
    with pytest.raises(ValueError, match=">= 0"):  # SPEC 4.3: an amax is a magnitude
        amax_from_torchao_scale(np.float32(-np.inf))
    with pytest.raises(ValueError, match="block_size=32"):
        from_torchao(_fake_torchao(block_size=32))


def test_amax_from_torchao_scale_takes_the_nearest_amax():
    """P = fp32(3 / 2688) = 0x3A924925: both 3.0 and 0x40400001 give P back (SPEC 5.4's division), and P * 2688 =
    3.00000013411 (exact) is nearer to 0x40400001 = 3.00000023842 than to 3.0; the docstring promises the nearest."""
    p = np.uint32(0x3A924925).view(np.float32)
    assert np.float32(np.float32(3.0) / np.float32(2688)) == p
    assert np.float32(np.uint32(0x40400001).view(np.float32) / np.float32(2688)) == p
    assert amax_from_torchao_scale(p).view(np.uint32) == 0x40400001


def test_from_torchao_checks_a_given_amax_bit_for_bit():
    """fp32(-0) / 2688 = -0.0, not the tensor's P = +0.0 (a P of -0 would flip torchao's multiplier, SPEC 5.4). A NaN
    P's payload decides torchao's NaN codes (SPEC 3.5), and NaN / 2688 is that NaN quieted: an amax whose quotient has
    another payload is refused; the same payload, or its signaling form (0x7F800001 -> 0x7FC00001), is kept."""
    with pytest.raises(ValueError, match="does not give the tensor's per_tensor_scale"):
        from_torchao(_fake_torchao(per_tensor_scale=torch.tensor(0.0)), amax=np.float32(-0.0))
    nan_p = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    f32 = lambda bits: np.uint32(bits).view(np.float32)  # noqa: E731
    with pytest.raises(ValueError, match="does not give the tensor's per_tensor_scale"):
        from_torchao(_fake_torchao(per_tensor_scale=nan_p), amax=f32(0x7FC00000))
    for bits in (0x7FC00001, 0x7F800001):
        got = from_torchao(_fake_torchao(per_tensor_scale=nan_p), amax=f32(bits)).row.amax
        assert np.float32(got).view(np.uint32) == bits


def test_to_torchao_refuses_row_scaled_and_16x16_planes():
    with pytest.raises(ValueError, match="row-scaled"):
        to_torchao(oracle.quantize(np.ones((16, 32), np.float32), row_scaled=True))
    with pytest.raises(ValueError, match="1x16"):
        to_torchao(oracle.quantize(np.ones((16, 32), np.float32), block=(16, 16)))


def test_from_te_fields_marks_the_columnwise_plane_rht():
    q = oracle.quantize(np.ones((32, 32), ml_dtypes.bfloat16), columnwise=True, rht=True)
    assert from_te_fields(**to_te_fields(q), rht=True, rht_signs=0xD7E8).col.rht is True


def test_device_result_columnwise_plane_with_padded_tokens():
    """M = 20: the columnwise plane has Mp = 32 token columns (SPEC 6.2), so torchao's form is [K, 16] bytes; TE's
    fields need M % 16 == 0 (SPEC 14.10) and are refused."""
    q = oracle.quantize(np.ones((20, 64), np.float32), columnwise=True, rule="torchao")
    ao = _device_result(q, False).to_torchao("col")
    assert tuple(ao.qdata.shape) == (64, 16) and np.array_equal(ao.qdata.numpy(), q.col.data)
    q = oracle.quantize(np.ones((20, 32), np.float32), columnwise=True)
    with pytest.raises(ValueError, match="multiple of 16"):
        _device_result(q, False).to_te_fields()


def test_te_fields_of_a_row_scaled_columnwise_plane():
    """TE's row-scaled tensor (SPEC 5.7) holds one amax per column of X in amax_columnwise ([K]); the fields round-trip
    through to_te_fields / from_te_fields with the bytes and both amax vectors. A single columnwise amax beside
    row-scaled rowwise fields (what TE wrote before it row-scaled both planes) is a plain columnwise plane; any other
    count is refused."""
    x = (np.random.default_rng(4).standard_normal((32, 64)) * np.geomspace(1e-3, 1e3, 64)).astype(np.float32)
    q = oracle.quantize(x, row_scaled=True, columnwise=True)
    f = to_te_fields(q)
    assert f["row_scaled_nvfp4"] is True and f["amax_columnwise"].shape == (64,)
    back = from_te_fields(**f)
    assert back.col.row_scaled and back.row.row_scaled
    assert np.array_equal(back.col.amax, q.col.amax) and np.array_equal(back.col.data, q.col.data)
    assert np.array_equal(back.col.scales, q.col.scales) and np.array_equal(back.row.amax, q.row.amax)
    assert np.array_equal(oracle.dequantize(back.col), oracle.dequantize(q.col))
    alone = oracle.quantize(x, row_scaled=True, rowwise=False, columnwise=True)
    assert to_te_fields(alone)["row_scaled_nvfp4"] is True
    plain = to_te_fields(oracle.quantize(np.ones((32, 64), np.float32), columnwise=True))
    plain = dict(plain, row_scaled_nvfp4=True, amax_rowwise=np.ones(32, np.float32))
    t = from_te_fields(**plain)
    assert t.row.row_scaled and not t.col.row_scaled
    with pytest.raises(ValueError, match="amax_columnwise holds 32 values: a row-scaled columnwise plane has one per "
                                         "column of X \\(64"):
        from_te_fields(**dict(plain, amax_columnwise=np.ones(32, np.float32)))


def test_a_columnwise_plane_of_m_not_a_multiple_of_16_converts_with_its_padding():
    """X^T of M = 20 tokens is the plane [K, 32] (SPEC 6.2: tokens 20..31 are zeros); torchao's tensor holds all 32 as
    data (it records no valid width), and converts back to the same bytes at that width."""
    pytest.importorskip("torchao")
    x = np.random.default_rng(3).standard_normal((20, 32)).astype(np.float32)
    col = oracle.quantize(x, columnwise=True, rule="torchao").col
    ao = oracle.to_torchao(col)
    assert tuple(ao.shape) == (32, 32)
    back = oracle.from_torchao(ao).row
    assert np.array_equal(back.data, col.data) and np.array_equal(back.scales, col.scales)
    assert back.valid_cols == 32 and col.valid_cols == 20
