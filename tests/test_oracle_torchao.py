"""SPEC 5.4 / 5.5 / 3.5: rule="torchao" and "torchao_noscale" byte for byte against the real torchao 0.18."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import oracle

pytestmark = pytest.mark.torch

SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -3e-39, 3e38, 1e-7]


def _torchao():
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    return torch, nvfp4_quantize, per_tensor_amax_to_scale


def _cases(n: int = 120):
    rng = np.random.default_rng(2024)
    for i in range(n):
        m, k = int(rng.integers(1, 40)), 16 * int(rng.integers(1, 8))
        x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 40, (m, 1)))).astype(np.float32)
        for _ in range(int(rng.integers(0, 4))):
            x[rng.integers(m), rng.integers(k)] = rng.choice(SPECIALS)
        if i % 9 == 0:
            x[:] = 0
        if i % 11 == 0:
            x[:, :16] = 0
        yield i, x


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torchao_rules_byte_identical(dtype):
    torch, nvfp4_quantize, per_tensor_amax_to_scale = _torchao()
    for i, x in _cases():
        xx = x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x
        t = torch.from_numpy(xx.astype(np.float32)).to(getattr(torch, dtype))
        s, d = nvfp4_quantize(t)
        q = oracle.quantize(xx, rule="torchao_noscale").row
        assert np.array_equal(s.view(torch.uint8).numpy(), q.scales), i
        assert np.array_equal(d.numpy(), q.data), i
        # torchao users compute the amax on the input tensor itself (bf16 stays bf16)
        amax = torch.max(torch.abs(t))
        s, d = nvfp4_quantize(t, per_tensor_scale=per_tensor_amax_to_scale(amax))
        # bf16: the oracle's own amax (SPEC 4.1, canonical NaN) must reproduce torch's; fp32: torch's NaN payload
        # depends on its thread count and size, so pass its amax explicitly (SPEC 4.3) with its exact bits
        given = None if dtype == "bfloat16" else amax.float().numpy().astype(np.float32)
        q = oracle.quantize(xx, rule="torchao", amax=given).row
        assert np.array_equal(s.view(torch.uint8).numpy(), q.scales), i
        assert np.array_equal(d.numpy(), q.data), i


def test_torchao_dequantize_matches_get_hp_scales():
    torch, nvfp4_quantize, per_tensor_amax_to_scale = _torchao()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    t = torch.from_numpy(x)
    p = per_tensor_amax_to_scale(torch.max(torch.abs(t)))
    s, _ = nvfp4_quantize(t, per_tensor_scale=p)
    hp = (p * s.to(torch.float)).numpy()
    q = oracle.quantize(x, rule="torchao").row
    from oracle.dequantize import block_decode_scales

    assert np.array_equal(block_decode_scales(q), hp)


def test_torchao_block_scale_is_a_division_hand_worked():
    """SPEC 5.4 / 5.5: torchao's block scale is b / 6.0, a division. b = 7.125 - 2^-21: fp32(b / 6) = 1.1875 - 2^-23,
    below E4M3's midpoint 1.1875 between 1.125 and 1.25, so 1.125 (0x39); b * fp32(1/6) would round to 1.1875
    exactly, a tie that goes to 1.25 (0x3A). Expected bytes from ml_dtypes and from torchao itself."""
    torch, nvfp4_quantize, _ = _torchao()
    b = np.float32(7.125 - 2.0**-21)
    assert (b / np.float32(6.0)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8) == 0x39
    x = np.zeros((1, 16), np.float32)
    x[0, 3] = b
    q = oracle.quantize(x, rule="torchao_noscale").row
    assert q.scales.tolist() == [[0x39]]
    s, d = nvfp4_quantize(torch.from_numpy(x))
    assert s.view(torch.uint8).numpy().tolist() == [[0x39]]
    assert np.array_equal(d.numpy(), q.data)


def test_torchao_columnwise_nan_block_hand_worked():
    """The columnwise plane under a torchao rule (SPEC 6.2 with 5.5): a NaN-propagating block amax (SPEC 4.1) and
    the multiplier as the first operand of each product (SPEC 3.5's payloads), as torchao gives on X^T."""
    torch, nvfp4_quantize, _ = _torchao()
    x = np.zeros((16, 16), np.float32)
    x[0, 0] = np.nan  # 0x7FC00000: column 0 of X is row 0 of the plane
    col = oracle.quantize(x, rule="torchao_noscale", rowwise=False, columnwise=True).col
    # row 0: b = NaN -> b / 6 = NaN -> byte 0x7F, which decodes to the NaN 0x7FF00000 (SPEC 3.5); m = 1 / sf keeps
    # that payload and m * x_i is m's NaN for every i (multiplier first) -> index 4 (x's own payload would give 3)
    assert col.scales[0].tolist() == [0x7F]
    assert col.data[0].tolist() == [0x44] * 8
    # rows 1-15: b = 0 -> b / 6 = 0, clamped to 2^-6 -> byte 0x08, m = 64, codes 0
    assert col.scales[1:].tolist() == [[0x08]] * 15
    assert not col.data[1:].any()
    s, d = nvfp4_quantize(torch.from_numpy(np.ascontiguousarray(x.T)))  # M = 16: the plane is X^T, no padding
    assert np.array_equal(s.view(torch.uint8).numpy(), col.scales)
    assert np.array_equal(d.numpy(), col.data)


def test_torchao_e2m1_conversion_on_every_high_bit_pattern():
    """SPEC 3.5's conversion (oracle.scale_rules.torchao_encode_e2m1) against torchao's own f32_to_f4_unpacked after
    its clamp to [-6, 6], on every fp32 sign / exponent / top-11-mantissa-bit pattern (ties, saturation, subnormals,
    Inf and every NaN class) with four fillings of the low 12 mantissa bits."""
    import torch

    from oracle.scale_rules import torchao_encode_e2m1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked
    high = np.arange(1 << 20, dtype=np.uint32) << np.uint32(12)
    for low in (0x000, 0x001, 0x800, 0xFFF):
        bits = high | np.uint32(low)
        x = bits.view(np.float32)
        theirs = f32_to_f4_unpacked(torch.clamp(torch.from_numpy(x.copy()), -6.0, 6.0)).numpy()
        np.testing.assert_array_equal(torchao_encode_e2m1(x), theirs, err_msg=f"low bits {low:#05x}")
