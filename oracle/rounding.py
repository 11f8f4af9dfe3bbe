"""Stochastic rounding to E2M1 (SPEC 3.4): TE's software definition driven by one random byte per element."""

from __future__ import annotations

import numpy as np

from .fp4_numpy import encode_e2m1

__all__ = ["sr_encode_e2m1"]

_HALF = np.float32(0.5)
_TWO = np.float32(2.0)


def _step(a: np.ndarray) -> np.ndarray:
    """E2M1 grid spacing at magnitude a: 0.5 below 2, 1 below 4, 2 above (and for NaN): 2 - [a < 4] - [a < 2] / 2."""
    return (_TWO - (a < np.float32(4.0)) - (a < _TWO) * _HALF).astype(np.float32)


def sr_encode_e2m1(y, random_bytes) -> np.ndarray:
    """Stochastically round fp32 ``y`` to E2M1 codes (SPEC 3.4).

    u = byte / 256; j = fp32(|y| + u * step(|y|)); q = floor(j / step(j)) * step(j); q = min(q, 6);
    the sign of y is copied (so -0.0 and negative values keep it); NaN -> +6 (0x7).
    """
    y = np.asarray(y, dtype=np.float32)
    u = np.asarray(random_bytes, dtype=np.uint8).astype(np.float32) * np.float32(1.0 / 256.0)
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(y)
        j = (a + u * _step(a)).astype(np.float32)
        sj = _step(j)
        q = np.minimum(np.floor(j / sj) * sj, np.float32(6.0)).astype(np.float32)
    codes = encode_e2m1(np.copysign(q, y))
    return np.where(np.isnan(y), np.uint8(7), codes).astype(np.uint8)
