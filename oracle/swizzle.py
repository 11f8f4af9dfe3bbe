"""The cuBLAS / CUTLASS block-scaled GEMM scale-factor layout (SPEC 8.2), flashinfer's 8x4 layout (SPEC 8.3) and
grouped scale offsets (SPEC 9).

A compact scale matrix ``[rows, C]`` is zero-padded to ``[roundup(rows, 128), roundup(C, 4)]`` and cut into
128x4 tiles of 512 bytes, row-block outermost. Inside a tile, compact (r, c) lands at byte
``(r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4``. The 8x4 layout pads to ``[roundup(rows, 8), roundup(C, 4)]`` and
cuts 8x4 tiles of 32 bytes, row-block outermost, each row-major.
"""

from __future__ import annotations

import numpy as np

from .checks import check_index, host_array

__all__ = [
    "grouped_scale_offsets",
    "padded_scale_shape",
    "padded_scale_shape_8x4",
    "round_up",
    "swizzle_scales",
    "swizzle_scales_8x4",
    "swizzled_offset",
    "unswizzle_scales",
    "unswizzle_scales_8x4",
]


def round_up(n, m: int):
    """Smallest multiple of ``m`` that is >= ``n``: ``n`` an integer or an integer array, ``m`` an integer >= 1
    (``TypeError`` for floats and bools, ``ValueError`` for ``m`` < 1)."""
    m = check_index(m, "m", lo=1)
    if isinstance(n, np.ndarray):
        if n.dtype.kind not in "iu":
            raise TypeError(f"n must be an integer or an integer array, got dtype {n.dtype}")
    else:
        n = check_index(n, "n", lo=None)
    return (n + m - 1) // m * m


def padded_scale_shape(rows: int, scale_cols: int) -> tuple[int, int]:
    """Padded compact shape ``(roundup(rows, 128), roundup(scale_cols, 4))`` (SPEC 8.1)."""
    return round_up(check_index(rows, "rows"), 128), round_up(check_index(scale_cols, "scale_cols"), 4)


def swizzled_offset(r, c, padded_scale_cols: int):
    """Byte offset of compact scale (r, c) inside the swizzled buffer (SPEC 8.2).

    ``padded_scale_cols`` is C rounded up to a multiple of 4. Works elementwise on integer arrays; ``ValueError``
    for a position outside ``[0, ...) x [0, padded_scale_cols)``.
    """
    pc = check_index(padded_scale_cols, "padded_scale_cols")
    if pc % 4:
        raise ValueError(f"padded_scale_cols must be a multiple of 4 (SPEC 8.1), got {pc}")
    r, c = np.asarray(r), np.asarray(c)
    for name, v in (("r", r), ("c", c)):
        if v.size and v.dtype.kind not in "iu":  # (an empty list is float64 to NumPy)
            raise TypeError(f"{name} must be integers, got dtype {v.dtype}")
    if np.any(r < 0) or np.any(c < 0) or np.any(c >= pc):
        raise ValueError(f"scale positions must lie in rows >= 0 and columns [0, {pc})")
    r, c = r.astype(np.int64), c.astype(np.int64)
    tile = (r // 128) * (pc // 4) + c // 4
    return ((tile * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4).astype(np.int64)


def _check_u8_2d(a, what: str) -> np.ndarray:
    a = host_array(a)
    if a.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 (E4M3 bytes), got {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{what} must be 2-D [rows, scale_cols], got shape {a.shape}")
    return a


def _padded_compact(compact, padded_shape) -> np.ndarray:
    """The compact uint8 scales ``[rows, C]`` zero-padded to ``padded_shape(rows, C)`` (the padding bytes 0x00)."""
    s = _check_u8_2d(compact, "compact scales")
    padded = np.zeros(padded_shape(*s.shape), np.uint8)
    padded[: s.shape[0], : s.shape[1]] = s
    return padded


def _layout_buffer(buf, rows: int, cols: int, padded: tuple[int, int], name: str, spec: str):
    """(buf as a 1-D uint8 array, padded rows, padded columns) after the checks every unswizzle makes."""
    b = host_array(buf)
    if b.dtype != np.uint8:
        raise TypeError(f"{name} scales must be uint8, got {b.dtype}")
    R, C = padded
    if b.ndim != 1:
        raise ValueError(f"the {name} buffer must be 1-D (SPEC {spec}), got shape {b.shape}")
    if b.size != R * C:
        raise ValueError(f"{name} buffer of {b.size} bytes does not match rows={rows}, cols={cols} ({R * C} bytes)")
    return b, R, C


def swizzle_scales(compact) -> np.ndarray:
    """Compact uint8 scales ``[rows, C]`` -> 1-D swizzled buffer of ``roundup(rows,128)*roundup(C,4)`` bytes.

    Padding bytes are 0x00 (SPEC 8.2).
    """
    padded = _padded_compact(compact, padded_scale_shape)
    R, C = padded.shape
    # (R/128, 128, C/4, 4) -> split 128 as (4, 32) -> order (tileR, tileC, r%32, (r%128)//32, c%4)
    t = padded.reshape(R // 128, 4, 32, C // 4, 4).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(t).reshape(-1)


def unswizzle_scales(buf, rows: int, cols: int) -> np.ndarray:
    """Inverse of :func:`swizzle_scales`: 1-D swizzled buffer -> compact ``[rows, cols]`` (SPEC 8.2).

    ``cols`` is the number of compact scale columns (ceil(K/16)). The padding is dropped.
    """
    b, R, C = _layout_buffer(buf, rows, cols, padded_scale_shape(rows, cols), "swizzled", "8.2")
    t = b.reshape(R // 128, C // 4, 32, 4, 4).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(t).reshape(R, C)[:rows, :cols].copy()


def padded_scale_shape_8x4(rows: int, scale_cols: int) -> tuple[int, int]:
    """The padded shape of the 8x4 layout, ``(roundup(rows, 8), roundup(scale_cols, 4))`` (SPEC 8.3)."""
    return round_up(check_index(rows, "rows"), 8), round_up(check_index(scale_cols, "scale_cols"), 4)


def swizzle_scales_8x4(compact) -> np.ndarray:
    """Compact uint8 scales ``[rows, C]`` -> 1-D buffer of flashinfer's 8x4 layout, ``roundup(rows, 8) *
    roundup(C, 4)`` bytes (SPEC 8.3: compact (r, c) at byte ``((r // 8) * (Cp // 4) + c // 4) * 32 + (r % 8) * 4 +
    c % 4``). Padding bytes are 0x00."""
    padded = _padded_compact(compact, padded_scale_shape_8x4)
    R, C = padded.shape
    # (R/8, 8, C/4, 4) -> order (tileR, tileC, r % 8, c % 4)
    return np.ascontiguousarray(padded.reshape(R // 8, 8, C // 4, 4).transpose(0, 2, 1, 3)).reshape(-1)


def unswizzle_scales_8x4(buf, rows: int, cols: int) -> np.ndarray:
    """Inverse of :func:`swizzle_scales_8x4`: a 1-D buffer of the 8x4 layout -> compact ``[rows, cols]`` (SPEC 8.3),
    the padding dropped. flashinfer returns the buffer as ``[roundup(rows, 8), roundup(cols, 4)]``: pass it
    flattened (``.reshape(-1)``)."""
    b, R, C = _layout_buffer(buf, rows, cols, padded_scale_shape_8x4(rows, cols), "8x4", "8.3")
    t = b.reshape(R // 8, C // 4, 8, 4).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(t).reshape(R, C)[:rows, :cols].copy()


def grouped_scale_offsets(splits, cols: int) -> dict:
    """Byte offsets of every group's scale (and data) region in the grouped buffers (SPEC 9.2).

    ``splits``: the group sizes m_g (rows of each group of X, any value >= 0); ``cols``: K (a multiple of 16).
    Returns a dict of int64 arrays of length E+1, each with a leading 0:

    * ``row_offsets``: first row of each group (prefix sum of m_g);
    * ``row_data``: rowwise FP4 data bytes, m_g*K/2 per group;
    * ``row_scale``: rowwise scales, roundup(m_g,128) * roundup(K/16,4) per group;
    * ``col_data``: columnwise (X_g^T) data bytes, K*roundup(m_g,16)/2 per group;
    * ``col_scale``: columnwise scales, roundup(K,128) * roundup(ceil(m_g/16),4) per group.
    """
    if isinstance(splits, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in splits):
        raise TypeError(f"splits must be integer group sizes, got {list(splits)!r}")
    m = np.asarray(splits)
    if m.ndim != 1 or m.size == 0:
        raise ValueError(f"splits must be a non-empty 1-D array of integer group sizes, got shape {m.shape}")
    if m.dtype.kind not in "iu":  # (as group_quantize's splits: a float is not rounded)
        raise TypeError(f"splits must be a non-empty 1-D array of integer group sizes, got dtype {m.dtype}")
    if np.any(m < 0) or (m.dtype.kind == "u" and np.any(m > np.iinfo(np.int64).max)):
        raise ValueError(f"splits must be >= 0 and below 2^63, got {m.tolist()}")
    m = m.astype(np.int64)
    cols = check_index(cols, "cols")
    if cols % 16:
        raise ValueError(f"K={cols} must be a multiple of 16")

    def prefix(sizes) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)

    kb = cols // 16
    return {
        "row_offsets": prefix(m),
        "row_data": prefix(m * cols // 2),
        "row_scale": prefix(round_up(m, 128) * round_up(kb, 4)),
        "col_data": prefix(cols * round_up(m, 16) // 2),
        "col_scale": prefix(round_up(cols, 128) * round_up((m + 15) // 16, 4)),
    }
