"""Philox4x32-10 counter-based RNG (Salmon et al., SC'11; Random123 / curand compatible), vectorized (SPEC 10.1)."""

from __future__ import annotations

import numpy as np

__all__ = ["philox4x32", "sr_random_bytes"]

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_HI_SHIFT = np.uint64(32)  # (a uint64 shift count: NumPy 1.x has no uint64 >> Python int)


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox4x32 with ``rounds`` rounds (SPEC 10.1).

    ``counter``: uint32 array ``[..., 4]``; ``key``: uint32 array ``[..., 2]`` (broadcast against counter).
    Returns uint32 ``[..., 4]``. The key is bumped (Weyl constants W0, W1) before every round but the first.
    """
    ctr = np.asarray(counter, dtype=np.uint32)
    k = np.asarray(key, dtype=np.uint32)
    c0, c1, c2, c3 = (ctr[..., i].astype(np.uint64) for i in range(4))
    if k.shape == (2,):  # one key for every counter (the SR streams): the round keys stay scalars
        k0, k1 = np.uint64(k[0]), np.uint64(k[1])
    else:
        k0 = np.broadcast_to(k[..., 0], ctr.shape[:-1]).astype(np.uint64)
        k1 = np.broadcast_to(k[..., 1], ctr.shape[:-1]).astype(np.uint64)
    with np.errstate(over="ignore"):
        for r in range(rounds):
            if r:  # key + Weyl constant, mod 2^32
                k0 = (k0 + _W0) & _LO
                k1 = (k1 + _W1) & _LO
            p0 = _M0 * c0
            p1 = _M1 * c2
            c0, c1, c2, c3 = (
                (p1 >> _HI_SHIFT) ^ c1 ^ k0,
                p1 & _LO,
                (p0 >> _HI_SHIFT) ^ c3 ^ k1,
                p0 & _LO,
            )
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def sr_random_bytes(rows: int, cols: int, *, seed: int, offset: int, plane: int, group: int = 0) -> np.ndarray:
    """The random byte of every element of a ``[rows, cols]`` plane for stochastic rounding (SPEC 10.2).

    One Philox call per 16-block: counter = (c // 16, r, plane, (offset + group) mod 2**32),
    key = (seed mod 2**32, seed >> 32). Element c takes byte (c % 4) of word (c % 16) // 4,
    bytes counted from the least significant end. ``plane`` is 0 for rowwise, 1 for columnwise.
    """
    if cols % 16:
        raise ValueError(f"cols={cols} must be a multiple of 16")
    if not (0 <= seed < 2**64):
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not (0 <= offset < 2**32):
        raise ValueError(f"offset must be in [0, 2**32), got {offset}")
    nb = cols // 16
    ctr = np.empty((rows, nb, 4), np.uint32)
    ctr[..., 0] = np.arange(nb, dtype=np.uint32)[None, :]
    ctr[..., 1] = np.arange(rows, dtype=np.uint32)[:, None]
    ctr[..., 2] = np.uint32(plane)
    ctr[..., 3] = np.uint32((offset + group) & 0xFFFFFFFF)
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    words = philox4x32(ctr, key)  # [rows, nb, 4] little-endian words -> 16 bytes per block
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(rows, cols)
