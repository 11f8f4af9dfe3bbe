"""SPEC 3.6's fused form, written out for the tests (not the oracle's code): the index the bf16 fast quantizer gets
from FMAs of the exact product, the multiplier check that rules out the inputs where it differs from 3.1, and an
input that makes a TE plane's table hold such a multiplier (for the GPU test of the marking)."""

from __future__ import annotations

import numpy as np

F32_MAX = float(np.finfo(np.float32).max)
#: the E2M1 decision points of SPEC 3.1 (each a tie of two neighbours)
DECISION_POINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
#: SPEC 3.6's significand class of the subnormal E4M3 bytes 1..7 (index 0 unused)
SUBNORMAL_CLASS = (0, 0, 0, 4, 0, 2, 4, 6)


def fused_index(p: np.ndarray) -> np.ndarray:
    """SPEC 3.6's fused form on the exact products p (float64, 0 <= p < 7): min(RNE(2p), RNE(p) + 2, RNE(p/2) + 4),
    each term what RN(p + c) of one FMA leaves in the low bits (2p, p and p/2 are exact in float64, rint is RNE)."""
    return np.minimum(np.minimum(np.rint(2 * p), np.rint(p) + 2), np.rint(p / 2) + 4).astype(np.int64)


def rn_index(y: np.ndarray) -> np.ndarray:
    """SPEC 3.1's magnitude index of fp32 values y >= 0 (the threshold sum: ties at 0.25 / 1.25 / 2.5 / 5 go down,
    at 0.75 / 1.75 / 3.5 up, to the even index)."""
    t = np.asarray(y, np.float64)
    return ((t > 0.25).astype(np.int64) + (t >= 0.75) + (t > 1.25) + (t >= 1.75) + (t > 2.5) + (t >= 3.5)
            + (t > 5))


def significand(m) -> int:
    """The 24-bit significand of a positive normal fp32 value, as an integer in [2^23, 2^24)."""
    return (int(np.float32(m).view(np.uint32)) & 0x7FFFFF) | 0x800000


def case_unsafe(mm: int, c: int) -> int | None:
    """SPEC 3.6, case c = 0..7 (S = 1 + (c % 4) / 4, k = c // 4) of significand mm: the bf16 significand X in
    [128, 255] whose product X * mm rounds to t = S 2^(30 + k) at 24 bits without being t, or None."""
    t = (4 + c % 4) << (28 + c // 4)
    for x in range(max(128, t // mm - 1), min(255, t // mm + 2) + 1):
        p = x * mm
        if p != t and float(np.float32(float(p))) == float(t):
            return x
    return None


def multiplier_unsafe(m) -> bool:
    """Whether some bf16 x makes RN(x m) an E2M1 decision point that x m is not (SPEC 3.6's check)."""
    mm = significand(m)
    return any(case_unsafe(mm, c) is not None for c in range(8))


def te_multiplier(byte: int, s_dec: np.float32) -> np.float32:
    """SPEC 5.2's encode multiplier of a scale byte: fminf(1 / (decode(byte) * S_dec), FLT_MAX), fp32 steps."""
    e, mant = byte >> 3, byte & 7
    d = np.float32(mant / 8 * 2.0**-6) if e == 0 else np.float32((1 + mant / 8) * 2.0 ** (e - 7))
    with np.errstate(divide="ignore", over="ignore"):
        return np.float32(min(float(np.float32(1) / np.float32(d * s_dec)), F32_MAX))


def te_s_enc(amax: float) -> np.float32:
    """SPEC 5.1's S_enc = fminf(2688 / A, FLT_MAX) (A > 0 finite here)."""
    return np.float32(min(float(np.float32(2688) / np.float32(amax)), F32_MAX))


def planted_tensor(seed: int = 0, copies: int = 8) -> tuple[np.ndarray, float, int, float]:
    """A symmetric bf16 tensor (so the rowwise plane and the columnwise plane without RHT have the same blocks) whose
    TE scale rule, with the tensor's amax A, gives a block whose multiplier the fused form gets wrong on one of its
    elements: ``(x, A, byte, p)`` with the block's scale byte and the exact product of that element.

    Per 32 x 32 diagonal tile: rows / columns 0-15 are the circulant of v (block max b, scale byte `byte`, its
    multiplier m, and +-x with RN(x m) a decision point while x m is not, where the fused index differs); rows /
    columns 16-31 the circulant of (A, 0, ...), which makes A the tensor's amax."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    bf16 = ml_dtypes.bfloat16
    while True:
        a = float(np.float32(rng.uniform(1.0, 1000.0)).astype(bf16))
        s_dec = np.float32(np.float32(1) / te_s_enc(a))
        for cls in range(8):
            byte = 0x38 | cls
            m = te_multiplier(byte, s_dec)
            mm = significand(m)
            for c in range(8):
                big_x = case_unsafe(mm, c)
                if big_x is None:
                    continue
                for t in DECISION_POINTS:
                    sig = t / 2.0 ** np.floor(np.log2(t))
                    if sig != 1 + (c % 4) / 4:
                        continue
                    x = big_x * 2.0 ** np.round(np.log2(t / float(m) / big_x))
                    p = x * float(m)
                    if float(np.float32(p)) != t or p == t or fused_index(np.array([p]))[0] == rn_index(t):
                        continue
                    b = float(np.float32(6 * (1 + cls / 8) * float(s_dec)).astype(bf16))
                    if not (x < b and b * float(m) < 7):
                        continue
                    v = np.zeros(16)
                    v[0], v[3], v[7] = b, x, -x
                    v[8:] = rng.uniform(-b, b, 8).astype(bf16)
                    idx = np.add.outer(np.arange(16), np.arange(16)) % 16
                    tile = np.zeros((32, 32))
                    tile[:16, :16] = v[idx]
                    tile[16:, 16:] = np.where(idx == 0, a, 0.0)
                    full = np.kron(np.eye(copies), np.ones((32, 32)))
                    full[full > 0] = np.tile(tile, (copies, copies))[full > 0]
                    return full.astype(np.float32).astype(bf16), a, byte, p
