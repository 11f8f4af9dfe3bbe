"""The bias gradient of a grouped linear layer: per-group column sums of dY in a fixed fp32 order (SPEC 16.4)."""

from __future__ import annotations

import numpy as np

from .checks import ArrayOrTensor, Splits, from_torch, is_torch
from .grouped import check_splits

__all__ = ["grouped_bias_grad"]


def _as_f32_matrix(dy) -> np.ndarray:
    if is_torch(dy):
        dy = from_torch(dy)
    if not isinstance(dy, np.ndarray):
        raise TypeError(f"dy must be a NumPy array (or a torch tensor), got {type(dy).__name__}")
    if dy.dtype not in (np.float32, np.float16) and dy.dtype.name != "bfloat16":
        raise TypeError(f"dy must be bfloat16, float16 or float32, got dtype {dy.dtype}")
    if dy.ndim != 2:
        raise ValueError(f"dy must be 2-D [T, N], got shape {dy.shape}")
    return dy.astype(np.float32)  # exact for all three dtypes


def grouped_bias_grad(dy: ArrayOrTensor, splits: Splits) -> np.ndarray:
    """dbias ``[E, N]`` float32: for each group g and column n, the sum of ``float(dY[r, n])`` over the group's rows,
    in SPEC 16.4's order: the rows in chunks of 16 counted from the group's first row (the last chunk may be
    shorter), each chunk summed sequentially in fp32 from +0.0, then the chunk sums added sequentially in fp32 from
    +0.0. An empty group gives +0.0.

    Args:
        dy: ``[T, N]`` bfloat16 (ml_dtypes; the layer's dtype), float16 or float32; NumPy, or a torch tensor.
        splits: E group sizes, integers >= 0 that add up to T (SPEC 9.1).
    """
    d = _as_f32_matrix(dy)
    m = check_splits(splits, d.shape[0], "dy")
    e, n = m.size, d.shape[1]
    if n == 0:
        return np.zeros((e, 0), np.float32)
    chunks = (m + 15) // 16
    row_start = np.concatenate([[0], np.cumsum(m)])
    chunk_start = np.concatenate([[0], np.cumsum(chunks)])
    # Each group's rows in its own run of whole chunks; the rows added to fill a last chunk are +0.0, which leaves
    # a running fp32 sum unchanged (started from +0.0 it is never -0.0), so every chunk can take 16 adds.
    padded = np.zeros((int(chunk_start[-1]) * 16, n), np.float32)
    dest = np.repeat(chunk_start[:-1] * 16 - row_start[:-1], m) + np.arange(d.shape[0])
    padded[dest] = d
    blocks = padded.reshape(-1, 16, n)
    chunk_sums = np.zeros((blocks.shape[0], n), np.float32)
    grid = np.zeros((e, int(chunks.max(initial=0)), n), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(16):  # each chunk in row order, fp32 RNE per add
            chunk_sums = chunk_sums + blocks[:, i]
        # chunk j of group g at grid[g, j]; the slots past a group's last chunk stay +0.0 (no change, as above)
        grid[np.repeat(np.arange(e), chunks), np.arange(chunk_sums.shape[0]) - np.repeat(chunk_start[:-1], chunks)] = (
            chunk_sums)
        out = np.zeros((e, n), np.float32)
        for j in range(grid.shape[1]):  # the chunk sums in chunk order, fp32 RNE per add
            out = out + grid[:, j]
    return out
