"""Stochastic rounding of the ``torch-te`` backend (SPEC 3.4, 10), written from SPEC.md alone.

Like :mod:`conformance.te_torch_blocks` it imports nothing from ``oracle``: Philox4x32-10 (SPEC 10.1) is evaluated in
NumPy ``uint64`` (every 32 x 32-bit product is exact there), vectorized over every 16-element block of a plane; the
random byte of an element follows SPEC 10.2's counter mapping, and SPEC 3.4's encoder runs in torch float32.

* :func:`philox4x32_10` -- SPEC 10.1 (the four output words of a batch of counters under one key);
* :func:`block_random_bytes` -- SPEC 10.2 (one byte per element: word ``(c % 16) / 4``, byte ``c % 4``);
* :func:`e2m1_encode_sr` -- SPEC 3.4 (fp32 -> E2M1 with one random byte per element).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["block_random_bytes", "e2m1_encode_sr", "philox4x32_10"]

_M32 = np.uint64(0xFFFFFFFF)
_MUL = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))  # M0, M1
_WEYL = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))  # W0, W1


def philox4x32_10(counter: tuple, key: tuple) -> tuple:
    """SPEC 10.1: Philox4x32-10 on counters ``(c0, c1, c2, c3)`` (uint64 arrays of 32-bit values, broadcastable) under
    the key ``(k0, k1)`` (32-bit integers): 10 rounds, each ``(hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1,
    lo(M0 c0))``, the key bumped by the Weyl increments before every round but the first. Returns the four words."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) & _M32 for c in counter)
    k0, k1 = np.uint64(int(key[0]) & 0xFFFFFFFF), np.uint64(int(key[1]) & 0xFFFFFFFF)
    for i in range(10):
        if i:
            k0, k1 = (k0 + _WEYL[0]) & _M32, (k1 + _WEYL[1]) & _M32
        p0, p1 = _MUL[0] * c0, _MUL[1] * c2  # < 2^64: exact in uint64
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _M32)
    return c0, c1, c2, c3


def block_random_bytes(block: np.ndarray, row: np.ndarray, plane: int, stream: np.ndarray, seed: int) -> torch.Tensor:
    """SPEC 10.2: the random bytes of a plane's 16-element blocks, uint8 ``[R, 16 NB]``. ``block``, ``row`` and
    ``stream`` (integer arrays broadcastable to [R, NB]) give each block's counter words: its index c / 16 within its
    plane row, the plane row r, and ``(offset + g) mod 2^32`` of its group; ``plane`` 0 (rowwise) or 1 (columnwise);
    the key ``(seed mod 2^32, seed >> 32)``. Element c of a block takes byte ``c % 4`` (least significant first) of
    word ``(c % 16) / 4``."""
    block, row, stream = np.broadcast_arrays(*(np.asarray(a, np.int64) for a in (block, row, stream)))
    key = (int(seed) & 0xFFFFFFFF, int(seed) >> 32)
    words = philox4x32_10((block.astype(np.uint64), row.astype(np.uint64), np.full(block.shape, plane, np.uint64),
                           (stream % 2**32).astype(np.uint64)), key)
    w = np.stack(words, axis=-1)  # [R, NB, 4]
    b = (w[..., None] >> (np.arange(4, dtype=np.uint64) * np.uint64(8))) & np.uint64(0xFF)  # [R, NB, 4 words, 4]
    r, nb = block.shape
    return torch.from_numpy(b.astype(np.uint8).reshape(r, nb * 16))


_INDEX = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}  # E2M1 value -> magnitude code (SPEC 2.3)


def _step(t: torch.Tensor) -> torch.Tensor:
    """SPEC 3.4's grid step at t >= 0: 0.5 below 2, 1 in [2, 4), 2 from 4."""
    return torch.where(t < 2, 0.5, torch.where(t < 4, 1.0, 2.0)).to(torch.float32)


def e2m1_encode_sr(y: torch.Tensor, rbytes: torch.Tensor) -> torch.Tensor:
    """SPEC 3.4: fp32 -> E2M1 codes (uint8) with one random byte per element (``rbytes``, uint8 of y's shape):
    ``a = |y|``, ``u = r / 256``, ``j = fp32(a + u step(a))``, ``q = min(floor(j / step(j)) step(j), 6)``, the code of
    q with y's sign bit; NaN -> 0x7 (+-Inf -> +-6, -0.0 -> 0x8)."""
    a = y.abs()
    u = rbytes.to(torch.float32) / 256.0  # exact
    j = a + u * _step(a)  # u * step(a) is exact; the sum is one fp32 rounding
    sj = _step(j)
    q = torch.clamp_max(torch.floor(j / sj) * sj, 6.0)  # exact: a power-of-two step
    code = torch.zeros(y.shape, dtype=torch.uint8)
    for value, index in _INDEX.items():
        code[q == value] = index
    code |= torch.signbit(y).to(torch.uint8) << 3
    return code.masked_fill_(torch.isnan(y), 0x7)
