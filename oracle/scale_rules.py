"""Per-tensor and per-block scale rules (SPEC 5): "te" (default), "te_fused_rht", "torchao", "torchao_noscale".

Each function takes float32 arrays and reproduces the named library's fp32 operation order exactly.
"""

from __future__ import annotations

import numpy as np

from .fp4_numpy import decode_e4m3, encode_e2m1, encode_e4m3

__all__ = [
    "F32_MAX",
    "RULES",
    "block_amax",
    "first_nan",
    "global_encode_scale",
    "tensor_amax",
    "torch_decode_e4m3",
    "te_block_scales",
    "te_bytes_and_multipliers",
    "te_scale_values",
    "torchao_block_scales",
    "torchao_bytes_and_multipliers",
    "torchao_encode_e2m1",
    "torchao_per_tensor_scale",
    "torchao_scale_values",
]

RULES = ("te", "te_fused_rht", "torchao", "torchao_noscale")
F32_MAX = np.float32(np.finfo(np.float32).max)
_F2688 = np.float32(2688.0)  # 448 * 6
_RCP6 = np.float32(1.0 / 6.0)  # fp32(1/6) = 0x3E2AAAAB
_CANONICAL_NAN = np.array(0x7FC00000, np.uint32).view(np.float32)  # SPEC 4.1: the torchao rules' NaN amax
_ONE = np.float32(1.0)


def first_nan(first: np.ndarray, result: np.ndarray) -> np.ndarray:
    """``result`` of a binary fp32 operation whose first operand is ``first`` (broadcast against it), with the x86 rule
    for two NaN operands stated instead of left to NumPy's vector loops (SPEC 3.5): where ``first`` is NaN, its payload,
    quieted (bit 22 set). Where only one operand is NaN every order gives that one's payload, so only the first's
    NaNs need stating; which operand is first is the modelled library's order (3.5), not NumPy's."""
    first = np.asarray(first, np.float32)
    nan = np.isnan(first)
    if not nan.any():
        return result
    quiet = (first.view(np.uint32) | np.uint32(0x00400000)).view(np.float32)
    return np.where(nan, quiet, result).astype(np.float32)


def _nan_ignoring(rule: str) -> bool:
    return rule in ("te", "te_fused_rht")


def tensor_amax(x_f32: np.ndarray, rule: str) -> np.float32:
    """Per-tensor amax (SPEC 4.1): max |x| in fp32; NaN-ignoring for the TE rules (fmaxf from 0),
    NaN-propagating for the torchao rules (torch.max). An empty tensor gives 0."""
    if x_f32.size == 0:
        return np.float32(0.0)
    a = np.abs(x_f32)
    m = a.max()
    if np.isnan(m):
        if _nan_ignoring(rule):
            m = np.fmax.reduce(a.ravel(), initial=np.float32(0.0))
        else:
            m = _CANONICAL_NAN  # SPEC 4.1: the torchao rules model torch.max's NaN as 0x7FC00000
    return np.float32(m)


def block_amax(a_blocks: np.ndarray, rule: str, axis) -> np.ndarray:
    """Max of |x| over ``axis`` of an array of absolute values (SPEC 5.2, 5.4: the block amax b)."""
    b = a_blocks.max(axis=axis, initial=np.float32(0.0))
    if _nan_ignoring(rule) and np.isnan(b).any():
        b = np.fmax.reduce(a_blocks, axis=axis, initial=np.float32(0.0))
    return b.astype(np.float32)


def global_encode_scale(amax, rule: str = "te", global_scale_max: int = 448):
    """S_enc from the per-tensor amax (SPEC 5.1, variant 5.3); elementwise on an array of amaxes (SPEC 5.7).

    te: S = fminf(fp32(6 G)/amax, FLT_MAX); S = 1 if amax == 0 or S == 0, with G = ``global_scale_max`` (448, or 256
    under 4over6, SPEC 5.6): 6 G = 2688 or 1536.
    te_fused_rht: S = amax > 0 ? min_nan_propagating(2688/amax, FLT_MAX) : 1.
    Returns ``np.float32`` for a scalar amax, a float32 array of the same shape otherwise.
    """
    a = np.asarray(amax, np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = (np.float32(6 * int(global_scale_max)) / a).astype(np.float32)
    if rule == "te":
        s = np.fmin(q, F32_MAX)
        s = np.where((a == 0) | (s == 0), _ONE, s)
    elif rule == "te_fused_rht":
        s = np.where(a > 0, np.minimum(q, F32_MAX), _ONE)  # np.minimum keeps a NaN quotient
    else:
        raise ValueError(f"global_encode_scale is defined for the TE rules, not {rule!r}")
    s = s.astype(np.float32)
    return np.float32(s) if s.ndim == 0 else s


def te_block_scales(b: np.ndarray, s_enc: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """TE block scale bytes and encode multipliers from block amaxes ``b`` (SPEC 5.2); ``s_enc`` is one number or,
    for a row-scaled plane, an array that broadcasts against ``b`` (one S_enc per row, SPEC 5.7).

    sf = fminf(b * (S_enc * fp32(1/6)), FLT_MAX) -> E4M3 (RNE, satfinite);
    m = fminf(1 / (float(sf_e4m3) * S_dec), FLT_MAX) with S_dec = 1 / S_enc.
    """
    return te_bytes_and_multipliers(te_scale_values(b, s_enc), s_enc)


def te_bytes_and_multipliers(values: np.ndarray, s_enc, *, keep_nan: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """SPEC 5.2 from the fp32 block scales ``values`` (:func:`te_scale_values`): their E4M3 bytes (RNE, satfinite)
    and the encode multipliers m = fminf(1 / (float(sf_e4m3) * S_dec), FLT_MAX), S_dec = 1 / S_enc.
    ``keep_nan``: the cap keeps a NaN quotient (SPEC 14.11, te_fused_rht_kernels) where fminf gives FLT_MAX."""
    s_enc = np.asarray(s_enc, np.float32)
    cap = np.minimum if keep_nan else np.fmin
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s_dec = (_ONE / s_enc).astype(np.float32)
        sbytes = encode_e4m3(values)
        m = cap(_ONE / (decode_e4m3(sbytes) * s_dec), F32_MAX)
    return sbytes, m.astype(np.float32)


def te_scale_values(b: np.ndarray, s_enc, *, keep_nan: bool = False) -> np.ndarray:
    """SPEC 5.2's fp32 block scale before its E4M3 rounding: sf = fminf(b * (S_enc * fp32(1/6)), FLT_MAX).
    ``keep_nan``: sf = b * (S_enc * fp32(1/6)) without the fminf (SPEC 14.11, te_fused_rht_kernels), so a NaN
    stays NaN and an overflow stays +Inf (E4M3 gives 0x7F and 0x7E)."""
    s_enc = np.asarray(s_enc, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        sf = b * (s_enc * _RCP6).astype(np.float32)
        return (sf if keep_nan else np.fmin(sf, F32_MAX)).astype(np.float32)


def torchao_per_tensor_scale(amax) -> np.float32:
    """torchao's per_tensor_amax_to_scale: P = fp32(amax) / 2688 (SPEC 5.4)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.float32(np.float32(amax) / _F2688)


_E4M3_TINY = np.float32(2.0**-6)  # torch.finfo(torch.float8_e4m3fn).tiny
_E4M3_MAX = np.float32(448.0)
_TORCH_E4M3_NAN = np.array(0x7FF00000, np.uint32).view(np.float32)


def torchao_scale_values(b: np.ndarray, per_tensor_scale) -> np.ndarray:
    """SPEC 5.4 / 5.5's fp32 block scale before its E4M3 cast: clamp((b / 6) / P, 2^-6, 448) (without P: b / 6)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bs = (b / np.float32(6.0)).astype(np.float32)
        if per_tensor_scale is not None:
            bs = first_nan(bs, bs / np.float32(per_tensor_scale))
        return np.clip(bs, _E4M3_TINY, _E4M3_MAX)


def torch_decode_e4m3(sbytes: np.ndarray) -> np.ndarray:
    """torch's fp32 values of E4M3 scale bytes (SPEC 3.5): 2.2's values, the NaN bytes 0x7F / 0xFF as the patterns
    0x7FF00000 / 0xFFF00000, whose payload decides the code torchao's bit conversion gives a NaN product."""
    sf = decode_e4m3(sbytes)
    return np.where(np.isnan(sf), np.where(sbytes >= 0x80, -_TORCH_E4M3_NAN, _TORCH_E4M3_NAN), sf)


def torchao_block_scales(b: np.ndarray, per_tensor_scale) -> tuple[np.ndarray, np.ndarray]:
    """torchao 0.18 ``nvfp4_quantize`` block scales and multipliers (SPEC 5.4 / 5.5).

    bs = b / 6; with a per-tensor scale P: bs = bs / P. sf = E4M3(clamp(bs, 2**-6, 448)) (NaN stays NaN);
    multiplier = 1 / float(sf) without P, (1 / P) / float(sf) with P.
    """
    return torchao_bytes_and_multipliers(torchao_scale_values(b, per_tensor_scale), per_tensor_scale)


def torchao_bytes_and_multipliers(clamped: np.ndarray, per_tensor_scale) -> tuple[np.ndarray, np.ndarray]:
    """SPEC 5.4 / 5.5 from the clamped fp32 block scales (:func:`torchao_scale_values`): their E4M3 bytes (torch's
    cast; a NaN keeps its sign: 0x7F / 0xFF) and the multipliers 1 / float(sf), or (1 / P) / float(sf) with P."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # torch's float -> float8_e4m3fn keeps the sign of a NaN (0x7F / 0xFF)
        sbytes = encode_e4m3(clamped) | ((np.isnan(clamped) & np.signbit(clamped)).astype(np.uint8) << 7)
        sf = torch_decode_e4m3(sbytes)
        if per_tensor_scale is None:
            m = _ONE / sf
        else:
            inv = np.float32(_ONE / np.float32(per_tensor_scale))
            m = first_nan(inv, inv / sf)
    return sbytes, m.astype(np.float32)


def torchao_encode_e2m1(y: np.ndarray) -> np.ndarray:
    """torchao's fp32 -> E2M1 bit conversion after its clamp to [-6, 6] (SPEC 3.5).

    Equal to SPEC 3.1 on every non-NaN input; a NaN keeps its sign and becomes code 2, 3 or 4 depending
    on its payload (torchao's integer rounding applied to the NaN bit pattern).
    """
    y = np.asarray(y).astype(np.float32)
    # the clamp to [-6, 6] changes no code of 3.1 (which saturates) and keeps a NaN's bits
    codes = np.array(encode_e2m1(y), dtype=np.uint8)
    nan = np.isnan(y)
    if nan.any():
        bits = y[nan].view(np.uint32)
        u = bits & np.uint32(0x7FFFFFFF)  # >= 0x7F800001: the subtraction below does not wrap
        index = ((u - np.uint32(0x3EE00001) + ((u >> 22) & 1)) >> 22) & 0xFF
        codes[nan] = (index | ((bits >> 28) & 8)).astype(np.uint8)
    return codes
