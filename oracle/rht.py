"""The 16-point Random Hadamard Transform used on the columnwise (wgrad) operands (SPEC 7)."""

from __future__ import annotations

import numpy as np

from .checks import dtype_hint, host_array
from .fp4_numpy import round_to_bf16

__all__ = ["DEFAULT_RHT_SIGNS", "check_rht_signs", "hadamard16", "rht", "rht_along_axis0", "rht_sign_vector"]

#: SPEC 7.1: TE's default sign mask; bit i set <=> s_i = -1.
DEFAULT_RHT_SIGNS = 0xD7E8


def check_rht_signs(signs, what: str = "the RHT sign mask") -> int:
    """``signs`` as an int in [0, 2^16) (SPEC 7.1): ``TypeError`` unless it is an integer (Python or NumPy, not a
    bool; a string such as "0xD7E8" is not parsed), ``ValueError`` outside the range."""
    if isinstance(signs, (bool, np.bool_)) or not isinstance(signs, (int, np.integer)):
        raise TypeError(f"{what} must be a 16-bit integer (0 .. 0xFFFF), got {signs!r}")
    if not 0 <= signs < 1 << 16:
        raise ValueError(f"{what} must be a 16-bit integer (0 .. 0xFFFF), got {signs!r}")
    return int(signs)


def rht_sign_vector(signs: int = DEFAULT_RHT_SIGNS) -> np.ndarray:
    """The 16 signs (+-1.0, float32) encoded by the mask ``signs`` (SPEC 7.1)."""
    if not (0 <= int(signs) < 1 << 16):
        raise ValueError(f"RHT sign mask must be a 16-bit integer, got {signs!r}")
    bits = (int(signs) >> np.arange(16)) & 1
    return np.where(bits == 1, np.float32(-1.0), np.float32(1.0)).astype(np.float32)


def hadamard16() -> np.ndarray:
    """Sylvester Hadamard matrix H[r][c] = (-1)^popcount(r & c), unscaled, float64 (SPEC 7.1)."""
    r = np.arange(16)[:, None] & np.arange(16)[None, :]
    pop = np.zeros_like(r)
    for b in range(4):
        pop += (r >> b) & 1
    return np.where(pop % 2 == 0, 1.0, -1.0)


def _is_bf16(a: np.ndarray) -> bool:
    return a.dtype.name == "bfloat16"


def rht(x_bf16, signs: int = DEFAULT_RHT_SIGNS) -> np.ndarray:
    """Random Hadamard Transform of each consecutive 16 elements of the last axis (SPEC 7.2).

    ``x_bf16``: an ml_dtypes.bfloat16 array (or a torch bfloat16 tensor, copied to the host) whose last dimension is a
    multiple of 16. ``signs``: the 16-bit sign mask (SPEC 7.1); ``TypeError`` for a non-integer,
    ``ValueError`` for an integer outside 16 bits.
    Per block: v = x * s (exact), four fp32 butterfly stages with strides 1, 2, 4, 8
    ((a, b) -> (a + b, a - b)), times 0.25, rounded to bfloat16. Returns float32 holding bf16 values.
    """
    x = host_array(x_bf16)
    if not _is_bf16(x):
        raise TypeError(f"rht needs bfloat16 input (ml_dtypes.bfloat16), got {x.dtype}{dtype_hint(x.dtype)}")
    if x.ndim == 0 or x.shape[-1] % 16:
        raise ValueError(f"rht needs a last dimension that is a multiple of 16, got shape {x.shape}")
    return _rht_f32(x.astype(np.float32), check_rht_signs(signs, "signs"))


def _rht_f32(x_f32: np.ndarray, signs: int) -> np.ndarray:
    """RHT core on float32 values that are exactly bf16 (SPEC 7.2)."""
    shape = x_f32.shape
    v = (x_f32.reshape(-1, 16) * rht_sign_vector(signs)).astype(np.float32)
    n = v.shape[0]
    h = 1
    with np.errstate(over="ignore", invalid="ignore"):  # Inf / NaN inputs follow IEEE arithmetic
        while h < 16:
            # element i pairs with i + h where bit h of i is clear: view [n, 16/(2h), 2, h]
            w = v.reshape(n, 16 // (2 * h), 2, h)
            a = w[:, :, 0, :]
            b = w[:, :, 1, :]
            v = np.stack([a + b, a - b], axis=2).reshape(n, 16)
            h *= 2
    v = v * np.float32(0.25)
    return round_to_bf16(v).reshape(shape)


def rht_along_axis0(y: np.ndarray, signs: int) -> np.ndarray:
    """SPEC 7.2 applied to every 16 consecutive rows of y [M, K] (M % 16 == 0), i.e. to the columns of y
    in 16-blocks; the same values as ``_rht_f32(y.T, signs).T`` without transposing float data."""
    m, k = y.shape
    s = rht_sign_vector(signs)
    v = y.reshape(m // 16, 16, k) * s[None, :, None]  # float32 * float32: exact sign flip
    out = np.empty_like(v)
    h = 1
    with np.errstate(over="ignore", invalid="ignore"):  # Inf / NaN inputs follow IEEE arithmetic
        while h < 16:
            w = v.reshape(m // 16, 16 // (2 * h), 2, h, k)
            o = out.reshape(m // 16, 16 // (2 * h), 2, h, k)
            np.add(w[:, :, 0], w[:, :, 1], out=o[:, :, 0])
            np.subtract(w[:, :, 0], w[:, :, 1], out=o[:, :, 1])
            v, out = out, v
            h *= 2
    v *= np.float32(0.25)
    return round_to_bf16(v).reshape(m, k)
