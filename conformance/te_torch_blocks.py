"""Formats, amaxes and the block scale rule of the ``torch-te`` backend (SPEC 1.3, 2-5), in torch (CPU).

The layer under :mod:`conformance.te_torch` (plain rule "te" planes and layouts) and
:mod:`conformance.te_torch_variants` (4over6, row scaling), written from SPEC.md alone in the same way: it imports
nothing from ``oracle``, every value is a torch float32 tensor and every fp32 operation a separate torch op (SPEC
1.1); everything is vectorized over the elements.

* :func:`to_f32` -- SPEC 1.3 (inputs widened to fp32, exactly);
* :data:`E4M3_VALUES`, :func:`e4m3_encode` -- SPEC 2.2, 3.2 (the scale format: decode table, RNE encoder);
* :func:`e2m1_encode`, :func:`pack` -- SPEC 3.1, 2.3 (round-to-nearest E2M1 codes, two per byte);
* :func:`bf16_round` -- SPEC 3.3 (fp32 -> bf16 RNE, returned as the fp32 value);
* :func:`abs_nan_ignoring`, :func:`tensor_amax`, :func:`amax_of_blocks` -- SPEC 4.1 (|x| with NaN as 0; the
  NaN-ignoring max |x| folded from 0; the planes take it as the max of their block maxima);
* :func:`encode_scale` -- SPEC 5.1, 5.3 (S_enc and S_dec of a plane);
* :func:`encode_blocks` -- SPEC 5.2 (block scale byte, multiplier, codes; RN, or SR with
  :mod:`conformance.te_torch_sr`'s bytes).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["C2688", "E4M3_VALUES", "F32", "FLT_MAX", "ONE", "QUARTER", "RULES", "SIXTH", "ZERO", "abs_nan_ignoring",
           "amax_of_blocks", "bf16_round", "e2m1_encode", "e4m3_encode", "encode_blocks", "encode_scale", "pack",
           "tensor_amax", "to_f32"]

F32 = torch.float32
RULES = ("te", "te_fused_rht")


def _bits_f32(bits: int) -> torch.Tensor:
    """The fp32 number with IEEE bit pattern ``bits`` (a 0-d tensor)."""
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(F32)[0].clone()


def _c(v: float) -> torch.Tensor:
    """A 0-d fp32 constant (``v`` must be exact in fp32)."""
    t = torch.tensor(v, dtype=F32)
    assert float(t) == v, v
    return t


FLT_MAX = _bits_f32(0x7F7FFFFF)  # SPEC 1.2
SIXTH = _bits_f32(0x3E2AAAAB)  # fp32(1/6), SPEC 5.2
ONE = _c(1.0)
ZERO = _c(0.0)
QUARTER = _c(0.25)
C2688 = _c(2688.0)  # 448 * 6


# ---------------------------------------------------------------------------------------------------------------
# formats and conversions (SPEC 1.3, 2, 3)
# ---------------------------------------------------------------------------------------------------------------

def to_f32(x: np.ndarray) -> tuple[torch.Tensor, bool]:
    """SPEC 1.3: a float32 / float16 / bfloat16 (ml_dtypes) array as an fp32 tensor (exact), flattened to 2-D on
    its last dimension; and whether it was bfloat16 (SPEC 7.3)."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("a 0-D input has no rows")
    name = x.dtype.name
    if name == "bfloat16":  # the bf16 bits are the high half of the fp32 bits
        bits = np.ascontiguousarray(x).view(np.uint16).astype(np.uint32) << np.uint32(16)
        t = torch.from_numpy(bits.view(np.float32).copy())
    elif name == "float16":
        t = torch.from_numpy(np.ascontiguousarray(x)).to(F32)
    elif name == "float32":
        t = torch.from_numpy(np.ascontiguousarray(x).copy())
    else:
        raise TypeError(f"input dtype {name} is not float32, float16 or bfloat16")
    k = x.shape[-1]
    if k % 16:
        raise ValueError(f"the last dimension ({k}) is not a multiple of 16")
    return t.reshape(-1, k), name == "bfloat16"


def _e4m3_table() -> torch.Tensor:
    vals = []
    for byte in range(256):
        e, m = (byte >> 3) & 0xF, byte & 7
        if e == 0xF and m == 7:
            v = float("nan")
        elif e == 0:
            v = m * 2.0**-9
        else:
            v = (1 + m / 8) * 2.0 ** (e - 7)
        vals.append(-v if byte & 0x80 else v)
    return torch.tensor(vals, dtype=torch.float64).to(F32)  # every value exact in fp32


#: SPEC 2.2: the value of every E4M3 byte (0x7F / 0xFF NaN), fp32, indexed by the byte.
E4M3_VALUES = _e4m3_table()


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as fp32, built from its bits (exact), for integer e in [-126, 127]."""
    return ((e.to(torch.int32) + 127) << 23).view(F32)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """SPEC 3.2: fp32 -> E4M3 bytes (uint8), RNE onto the grid, saturating to +-448; NaN -> 0x7F, -0.0 -> 0x80.

    With ``a = min(|x|, 448)`` and ``e = max(floor(log2 a), -6)`` (-6 also for a = 0), the grid step is
    ``2^(e-3)`` (2^-9 in the subnormal range) and ``n = RNE(a / 2^(e-3))`` is exact arithmetic (a power-of-two
    scaling); the byte is ``(e + 7) * 8 + (n - 8)``, which also holds when n carries to 16 (the next binade) and
    for subnormals (e = -6: the byte is n)."""
    a = torch.clamp(x.abs(), max=448.0)  # +Inf -> 448; NaN stays NaN (replaced below)
    _, ex = torch.frexp(a)  # a = f * 2^ex with f in [0.5, 1): floor(log2 a) = ex - 1
    e = torch.where(a < 2.0**-6, torch.full_like(ex, -6), ex - 1)
    a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
    n = torch.round(a * _pow2(3 - e))  # torch.round: half to even
    mag = ((e + 7) * 8 + n.to(torch.int32) - 8).to(torch.uint8)
    out = mag | (torch.signbit(x).to(torch.uint8) << 7)
    return torch.where(torch.isnan(x), torch.full_like(out, 0x7F), out)


#: SPEC 3.1 thresholds: index = [a > 0.25] + [a >= 0.75] + [a > 1.25] + [a >= 1.75] + [a > 2.5] + [a >= 3.5] + [a > 5]
_GT = (0.25, 1.25, 2.5, 5.0)
_GE = (0.75, 1.75, 3.5)


def e2m1_encode(y: torch.Tensor) -> torch.Tensor:
    """SPEC 3.1: fp32 -> E2M1 codes (uint8, one per element), round to nearest with the ties of the index sum,
    |y| > 6 and +-Inf -> index 7, the sign bit kept (-0.0 and negatives that round to 0 give 0x8), NaN -> 0x7."""
    a = y.abs()
    idx = (a > _GT[0]).to(torch.uint8)
    for t in _GT[1:]:
        idx += a > t
    for t in _GE:
        idx += a >= t
    idx |= torch.signbit(y).to(torch.uint8) << 3
    return idx.masked_fill_(torch.isnan(y), 0x7)


def pack(codes: torch.Tensor) -> torch.Tensor:
    """SPEC 2.3: [rows, cols] codes -> [rows, cols/2] bytes, element 2i in the low nibble, 2i+1 in the high."""
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def bf16_round(v: torch.Tensor) -> torch.Tensor:
    """SPEC 3.3: fp32 -> bfloat16 by ``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16`` (overflow to +-Inf), NaN ->
    0x7FC0 | sign; returned as the fp32 value of the bf16 bits."""
    bits = v.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits & 0x8000_0000) >> 16 | 0x7FC0
    r = torch.where(torch.isnan(v), nan, r)
    signed = torch.where(r >= 0x8000, r - 0x10000, r)  # the 16 bits as a signed int16, so that << 16 fits int32
    return (signed << 16).to(torch.int32).view(F32)


# ---------------------------------------------------------------------------------------------------------------
# amax and scale rules (SPEC 4, 5)
# ---------------------------------------------------------------------------------------------------------------

def abs_nan_ignoring(x: torch.Tensor) -> torch.Tensor:
    """``fmaxf(|x|, 0)``: |x| with NaN as 0 (the fold from 0 of SPEC 4.1 / 5.2 ignores NaN); +-Inf -> +Inf."""
    return torch.fmax(x.abs(), ZERO)


def tensor_amax(x: torch.Tensor) -> torch.Tensor:
    """SPEC 4.1, TE rules: max |x| over every element, NaN ignored, folded from 0 (empty or all-NaN: 0)."""
    if x.numel() == 0:
        return ZERO.clone()
    return abs_nan_ignoring(x).max()


def amax_of_blocks(b: torch.Tensor) -> torch.Tensor:
    """:func:`tensor_amax` of a plane from its block maxima ``b`` (:func:`block_amax`): the blocks (or tiles) cover
    every element, and the zero rows a 16x16 tile adds cannot raise a maximum of non-negative values, so the max
    over them is the max over the elements (SPEC 4.1; an empty plane gives 0)."""
    return b.max() if b.numel() else ZERO.clone()


def encode_scale(amax: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(S_enc, S_dec) of a plane from its amax A (0-d fp32).

    SPEC 5.1 "te": ``S_enc = fminf(2688 / A, FLT_MAX)``; 1 when A == 0 or S_enc == 0 (A = +Inf); a NaN A gives
    FLT_MAX (fminf). SPEC 5.3 "te_fused_rht": ``S_enc = A > 0 ? min_nan_propagating(2688 / A, FLT_MAX) : 1``
    (A = +Inf gives 0, a NaN A gives 1). Both: ``S_dec = 1 / S_enc``, a correctly rounded division."""
    q = C2688 / amax
    if rule == "te":
        s = torch.fmin(q, FLT_MAX)
        s = torch.where((amax == 0) | (s == 0), ONE, s)
    elif rule == "te_fused_rht":
        s = torch.where(amax > 0, torch.minimum(q, FLT_MAX), ONE)
    else:
        raise ValueError(f"rule {rule!r} is not a TE rule {RULES}")
    return s, ONE / s


def encode_blocks(src: torch.Tensor, b: torch.Tensor, s_enc: torch.Tensor, s_dec: torch.Tensor,
                  rbytes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 5.2 per 16-block of ``src`` [R, C] with block amaxes ``b`` [R, C/16] and S_enc, S_dec (0-d, or
    broadcastable to b: one per group): ``sf = fminf(b * (S_enc * fp32(1/6)), FLT_MAX)`` (the product formed
    first), ``byte = E4M3(sf)`` (3.2), ``m = fminf(1 / (decode(byte) * S_dec), FLT_MAX)``, ``code_i = E2M1(x_i * m)``
    (3.1, or 3.4's stochastic rounding with the random bytes ``rbytes`` [R, C] of SPEC 10). Returns (packed data
    [R, C/2], scale bytes [R, C/16])."""
    r, c = src.shape
    sf = torch.fmin(b * (s_enc * SIXTH), FLT_MAX)
    byte = e4m3_encode(sf)
    m = torch.fmin(ONE / (E4M3_VALUES[byte.to(torch.int64)] * s_dec), FLT_MAX)
    y = (src.reshape(r, c // 16, 16) * m.unsqueeze(2)).reshape(r, c)
    if rbytes is None:
        return pack(e2m1_encode(y)), byte
    from .te_torch_sr import e2m1_encode_sr

    return pack(e2m1_encode_sr(y, rbytes)), byte
