"""Dequantization of a plane back to float32 (SPEC 11)."""

from __future__ import annotations

import numpy as np

from .fp4_numpy import decode_e2m1, decode_e4m3
from .planes import QuantizedPlane
from .scale_rules import torchao_per_tensor_scale

__all__ = ["dequantize", "block_decode_scales", "nan_scale_rows", "scaled_ints"]

# SPEC 11.1: fp32(1 / (6 G)) for the E4M3 maximum G inside S_enc (448: fp32(1/2688); 256, 4over6 only: fp32(1/1536))
_RCP_6G = {448: np.float32(1.0 / 2688.0), 256: np.float32(1.0 / 1536.0)}


def block_decode_scales(plane: QuantizedPlane) -> np.ndarray:
    """The fp32 factor each 16-block's E2M1 values are multiplied by (SPEC 11), shape [rows, cols/16].

    TE rules: (float(sf) * amax) * fp32(1/(6 G)), left to right, G = ``plane.global_scale_max`` (448 gives
    fp32(1/2688)); a row-scaled plane uses its row's amax (SPEC 5.7). torchao: P * float(sf) with
    P = amax / 2688 (torchao's get_hp_scales). torchao_noscale: float(sf).
    """
    sf = decode_e4m3(plane.scales)
    with np.errstate(invalid="ignore", over="ignore"):
        if plane.rule in ("te", "te_fused_rht"):
            amax = plane.amax.reshape(-1, 1) if plane.row_scaled else plane.amax
            return ((sf * amax).astype(np.float32) * _RCP_6G[plane.global_scale_max]).astype(np.float32)
        if plane.rule == "torchao":
            return (torchao_per_tensor_scale(plane.amax) * sf).astype(np.float32)
    if plane.rule == "torchao_noscale":
        return sf
    raise ValueError(f"unknown scale rule {plane.rule!r}")


def dequantize(plane: QuantizedPlane) -> np.ndarray:
    """Float32 values ``[rows, cols]`` of a plane: E2M1 value * block factor (SPEC 11).

    A columnwise plane dequantizes to (the RHT of) X^T including its zero padding columns; take
    ``[:, :plane.valid_cols]`` for the real tokens.
    """
    if not isinstance(plane, QuantizedPlane):
        raise TypeError(f"dequantize takes a QuantizedPlane, got {type(plane).__name__}")
    q = decode_e2m1(plane.codes())
    s = block_decode_scales(plane)
    with np.errstate(invalid="ignore", over="ignore"):
        return (q.reshape(plane.rows, plane.cols // 16, 16) * s[:, :, None]).reshape(plane.rows, plane.cols).astype(np.float32)


def scaled_ints(p: QuantizedPlane) -> np.ndarray:
    """Each element of the plane as an integer multiple of 2**-10: (2 * e2m1) * (2**9 * sf) (SPEC 12.3)."""
    q2 = (decode_e2m1(p.codes()) * 2).astype(np.int64)  # E2M1 value * 2: integers -12..12
    s = decode_e4m3(p.scales)
    s = np.where(np.isnan(s), 0, s)  # NaN scales are handled separately
    s_int = (s * 512).astype(np.int64)  # E4M3 values are multiples of 2**-9
    return q2 * np.repeat(s_int, 16, axis=1)


def nan_scale_rows(p: QuantizedPlane) -> np.ndarray:
    """Rows of the plane with a NaN scale byte (torchao rules; their GEMM outputs are NaN, SPEC 12.3)."""
    return np.isnan(decode_e4m3(p.scales)).any(axis=1)
