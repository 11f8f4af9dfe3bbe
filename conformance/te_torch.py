"""NVFP4 quantization under the TE scale rules ("te", "te_fused_rht"), round to nearest, in torch (CPU).

A second implementation of SPEC 4-8, written from SPEC.md alone: it imports nothing from ``oracle`` and shares no
code with it, so a conformance run of it against the oracle checks the oracle's TE arithmetic (the
``torch-te`` backend of :mod:`conformance.backends`). Every value is a torch float32 tensor and every fp32
operation is a separate torch op (IEEE binary32, RNE on the CPU): a product and a sum are never fused, a division
is a division (SPEC 1.1). Everything is vectorized over the elements; nothing loops over them in Python.

Organisation, one function per SPEC section:

* :func:`to_f32` -- SPEC 1.3 (inputs widened to fp32, exactly);
* :data:`E4M3_VALUES`, :func:`e4m3_encode` -- SPEC 2.2, 3.2 (the scale format: decode table, RNE encoder);
* :func:`e2m1_encode`, :func:`pack` -- SPEC 3.1, 2.3 (round-to-nearest E2M1 codes, two per byte);
* :func:`bf16_round` -- SPEC 3.3 (fp32 -> bf16 RNE, returned as the fp32 value);
* :func:`rht` -- SPEC 7.1, 7.2 (the butterfly in its order, then ``* 0.25``, then bf16);
* :func:`tensor_amax`, :func:`amax_of_blocks` -- SPEC 4.1 (NaN-ignoring max |x| folded from 0; the planes take
  it as the max of their block maxima);
* :func:`encode_scale` -- SPEC 5.1, 5.3 (S_enc and S_dec of a plane);
* :func:`block_amax` -- SPEC 5.2, 6.1, 6.3 (1x16 blocks, 16x16 tiles with absent rows as zeros);
* :func:`quantize_plane`, :func:`encode_blocks` -- SPEC 5.2 (block scale byte, multiplier, codes);
* :func:`columnwise_source` -- SPEC 6.2, 7.3 (zero-padded X^T, with the RHT);
* :func:`swizzle` -- SPEC 8.1, 8.2 (padded compact scales in the 128x4 tile order);
* :func:`quantize` -- SPEC 4.2, 4.3, 6 (both planes, the amax of each, the buffers of a quantize case);
* :func:`group_quantize` -- SPEC 9.1-9.3 (every group at once with its own amax and S_enc; the flat buffers,
  offsets and zero tails up to the device capacity).

TE's variants of rule "te" (4over6, SPEC 5.6; row scaling, SPEC 5.7) live in the sibling
:mod:`conformance.te_torch_variants`, written the same way; :func:`quantize` and :func:`group_quantize` take their
keywords and call into it.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["E4M3_VALUES", "RULES", "amax_of_blocks", "bf16_round", "block_amax", "columnwise_source", "e2m1_encode",
           "e4m3_encode", "encode_blocks", "encode_scale", "group_quantize", "pack", "quantize", "quantize_plane", "rht",
           "sign_vector", "swizzle", "tensor_amax", "to_f32"]

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
DEFAULT_RHT_SIGNS = 0xD7E8  # SPEC 7.1


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
# RHT (SPEC 7)
# ---------------------------------------------------------------------------------------------------------------

def sign_vector(mask: int) -> torch.Tensor:
    """SPEC 7.1: s_i = -1 where bit i of the 16-bit mask is set, else +1 (fp32 [16])."""
    return torch.tensor([-1.0 if (int(mask) >> i) & 1 else 1.0 for i in range(16)], dtype=F32)


def rht(x: torch.Tensor, mask: int = DEFAULT_RHT_SIGNS) -> torch.Tensor:
    """SPEC 7.2 on every 16-block of the last axis of ``x`` (fp32 holding bf16 values): ``v_i = x_i * s_i``; four
    butterfly stages h = 1, 2, 4, 8 with ``(v_i, v_{i+h}) <- (v_i + v_{i+h}, v_i - v_{i+h})`` for ``i & h == 0``,
    each an fp32 add / subtract; ``v_i * 0.25``; bf16 RNE (SPEC 3.3). Returns fp32 (the bf16 values)."""
    shape = x.shape
    v = x.reshape(-1, 16) * sign_vector(mask)
    n = v.shape[0]
    for h in (1, 2, 4, 8):
        # index i = j * 2h + p * h + q (p = 0, 1): pairs (i, i + h) are p = 0 and p = 1 at the same (j, q)
        w = v.reshape(n, 16 // (2 * h), 2, h)
        lo, hi = w[:, :, 0, :], w[:, :, 1, :]
        v = torch.stack((lo + hi, lo - hi), dim=2).reshape(n, 16)
    return bf16_round(v * QUARTER).reshape(shape)


_rht = rht  # (the functions below take a keyword ``rht`` that shadows it)


# ---------------------------------------------------------------------------------------------------------------
# amax and scale rules (SPEC 4, 5)
# ---------------------------------------------------------------------------------------------------------------

def _abs_nan_ignoring(x: torch.Tensor) -> torch.Tensor:
    """``fmaxf(|x|, 0)``: |x| with NaN as 0 (the fold from 0 of SPEC 4.1 / 5.2 ignores NaN); +-Inf -> +Inf."""
    return torch.fmax(x.abs(), ZERO)


def tensor_amax(x: torch.Tensor) -> torch.Tensor:
    """SPEC 4.1, TE rules: max |x| over every element, NaN ignored, folded from 0 (empty or all-NaN: 0)."""
    if x.numel() == 0:
        return ZERO.clone()
    return _abs_nan_ignoring(x).max()


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


def block_amax(src: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """The block amax b of every 16-block of a plane's source ``src`` [R, C] (NaN ignored, SPEC 5.2), [R, C/16].

    1x16 (SPEC 6.1): 16 consecutive elements of a row. 16x16 (SPEC 6.3): the max over the 16x16 tile (tiles at
    multiples of 16 in both axes; rows past R are absent, i.e. zeros), written for each of the tile's rows."""
    r, c = src.shape
    a = _abs_nan_ignoring(src)
    if tuple(block) == (1, 16):
        return a.reshape(r, c // 16, 16).amax(dim=2)
    _check_block(block)
    rp = -(-r // 16) * 16
    if rp != r:
        a = torch.cat((a, torch.zeros((rp - r, c), dtype=F32)))
    return _tile_max(a)[:r]


def _check_block(block) -> None:
    if tuple(block) not in ((1, 16), (16, 16)):
        raise ValueError(f"block {tuple(block)} is neither (1, 16) nor (16, 16)")


def _tile_max(a: torch.Tensor) -> torch.Tensor:
    """SPEC 6.3: the max of every 16x16 tile of ``a`` [R, C] (non-negative, R and C multiples of 16), written for
    each of the tile's 16 rows: [R, C/16]."""
    r, c = a.shape
    return a.reshape(r // 16, 16, c // 16, 16).amax(dim=(1, 3)).repeat_interleave(16, dim=0)


def quantize_plane(src: torch.Tensor, rule: str, block: tuple[int, int] = (1, 16),
                   amax: torch.Tensor | None = None,
                   variant=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SPEC 5.2 on a plane source [R, C] (fp32) under ``rule``: returns (packed data [R, C/2], scale bytes
    [R, C/16], both uint8, and the plane's amax, 0-d fp32). ``amax`` None: the plane's own (SPEC 4.1 over the
    source, :func:`amax_of_blocks`); else used as is (SPEC 4.3). S_enc, S_dec by :func:`encode_scale`.

    ``variant`` (a :class:`conformance.te_torch_variants.Variant`): 4over6 (SPEC 5.6) and / or one amax per row
    (SPEC 5.7: the amax is then fp32 [R], each row's own unless supplied)."""
    b = block_amax(src, block)
    if variant is None or variant.plain:
        if amax is None:
            amax = amax_of_blocks(b)
        data, byte = encode_blocks(src, b, *encode_scale(amax, rule))
        return data, byte, amax
    from .te_torch_variants import encode_variant_plane, row_amax

    if amax is None:
        amax = row_amax(b) if variant.row_scaled else amax_of_blocks(b)
    data, byte = encode_variant_plane(src, b, amax.unsqueeze(1) if variant.row_scaled else amax, variant, block)
    return data, byte, amax


def encode_blocks(src: torch.Tensor, b: torch.Tensor, s_enc: torch.Tensor,
                  s_dec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 5.2 per 16-block of ``src`` [R, C] with block amaxes ``b`` [R, C/16] and S_enc, S_dec (0-d, or
    broadcastable to b: one per group): ``sf = fminf(b * (S_enc * fp32(1/6)), FLT_MAX)`` (the product formed
    first), ``byte = E4M3(sf)`` (3.2), ``m = fminf(1 / (decode(byte) * S_dec), FLT_MAX)``, ``code_i = E2M1(x_i * m)``
    (3.1). Returns (packed data [R, C/2], scale bytes [R, C/16])."""
    r, c = src.shape
    sf = torch.fmin(b * (s_enc * SIXTH), FLT_MAX)
    byte = e4m3_encode(sf)
    m = torch.fmin(ONE / (E4M3_VALUES[byte.to(torch.int64)] * s_dec), FLT_MAX)
    y = src.reshape(r, c // 16, 16) * m.unsqueeze(2)
    return pack(e2m1_encode(y).reshape(r, c)), byte


# ---------------------------------------------------------------------------------------------------------------
# planes and layouts (SPEC 6, 7.3, 8)
# ---------------------------------------------------------------------------------------------------------------

def columnwise_source(x: torch.Tensor, rht_on: bool = False, mask: int = DEFAULT_RHT_SIGNS) -> torch.Tensor:
    """SPEC 6.2: X^T [K, Mp] with the token axis zero-padded to Mp = roundup(M, 16); with the RHT (SPEC 7.3) every
    16-block of each of its rows (16 consecutive tokens, padding included) transformed by SPEC 7.2."""
    m, k = x.shape
    mp = -(-m // 16) * 16
    src = torch.zeros((k, mp), dtype=F32)
    src[:, :m] = x.t()
    return rht(src, mask) if rht_on else src


def swizzle(compact: torch.Tensor) -> torch.Tensor:
    """SPEC 8.2: compact scales [rows, C] -> the swizzled bytes (1-D): the padded matrix of SPEC 8.1
    [roundup(rows, 128), roundup(C, 4)] (zeros added) viewed as (R/128, 4, 32, Cp/4, 4) and ordered
    (R/128, Cp/4, 32, 4, 4)."""
    rows, cols = compact.shape
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    pad = torch.zeros((rp, cp), dtype=torch.uint8)
    pad[:rows, :cols] = compact
    return pad.reshape(rp // 128, 4, 32, cp // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)


def _supplied(amax, rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """SPEC 4.3: a supplied amax (one value for both planes, or a (row, col) pair) as 0-d fp32 tensors, bits kept;
    a negative value is refused. ``rows`` given (a row-scaled plane, SPEC 5.7): ``rows`` values, one per row, as
    fp32 [rows] (both entries)."""
    if amax is None:
        return None
    vals = np.asarray(amax, np.float32).reshape(-1)
    if rows is not None:
        if vals.size != rows or np.any(vals < 0):
            raise ValueError(f"a row-scaled amax is {rows} values >= 0, +Inf or NaN, not {vals.size}: {vals[:4]}")
        t = torch.from_numpy(vals.copy())
        return t, t
    if vals.size not in (1, 2):
        raise ValueError(f"a supplied amax is one value or a (row, col) pair, not {vals.size} values")
    if np.any(vals < 0):
        raise ValueError(f"a supplied amax must be >= 0, +Inf or NaN, not {vals}")
    t = torch.from_numpy(vals.copy())
    return t[0], t[-1]


def quantize(x: np.ndarray, *, rowwise: bool = True, columnwise: bool = False, rht: bool = False,
             rht_signs: int = DEFAULT_RHT_SIGNS, block=(1, 16), rule: str = "te", amax=None,
             four_over_six: str | None = None, four_over_six_fast_math: bool = False, global_scale_max: int = 448,
             row_scaled: bool = False) -> dict:
    """SPEC 4-8 for the TE rules, round to nearest: the buffers of a quantize case as numpy arrays:
    ``{row,col}_data`` u8 [rows, cols/2], ``{row,col}_scales`` u8 [rows, cols/16] (compact, SPEC 8.1),
    ``{row,col}_scales_swizzled`` u8 1-D (SPEC 8.2) and ``{row,col}_amax`` f32 [1], for the planes asked for.

    Rowwise plane: X [M, K] (SPEC 6.1), amax per SPEC 4.1. Columnwise plane: SPEC 6.2's padded X^T, with the RHT
    when ``rht`` (bf16 input only, SPEC 7.3); its amax is the rowwise one without RHT and the NaN-ignoring max |v|
    over the RHT's bf16 outputs with it (SPEC 4.2). A supplied ``amax`` is used as is (SPEC 4.3).

    ``four_over_six`` ("mae" / "mse"), ``four_over_six_fast_math``, ``global_scale_max`` (448, or 256 with 4over6)
    and ``row_scaled`` (``row_amax`` then [M]; a supplied ``amax`` M values): SPEC 5.6, 5.7 by
    :mod:`conformance.te_torch_variants`."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not a TE rule {RULES}")
    block = tuple(int(b) for b in block)
    variant = _variant(locals())
    xt, is_bf16 = to_f32(x)
    if rht and not is_bf16:
        raise TypeError("the RHT takes bfloat16 input (SPEC 7.3)")
    sup = _supplied(amax, xt.shape[0] if variant.row_scaled else None)
    out: dict[str, np.ndarray] = {}
    row_amax = None if sup is None else sup[0]
    if rowwise:
        data, scales, row_amax = quantize_plane(xt, rule, block, row_amax, variant)
        _put(out, "row", data, scales, row_amax)
    if columnwise:
        src = columnwise_source(xt, rht, rht_signs)
        # SPEC 4.2: with the RHT the plane's own amax over its source (the bf16 RHT outputs, padding included);
        # without, the rowwise amax, which is also the plane's own (X^T and zeros) when no rowwise plane was asked
        col_amax = sup[1] if sup is not None else (None if rht else row_amax)
        _put(out, "col", *quantize_plane(src, rule, block, col_amax, variant))
    return out


def _variant(kw: dict):
    """The :class:`conformance.te_torch_variants.Variant` of a call's keywords (``locals()`` of :func:`quantize` /
    :func:`group_quantize`), checked against its other options."""
    from .te_torch_variants import check_variant

    return check_variant(**{k: kw[k] for k in ("four_over_six", "four_over_six_fast_math", "global_scale_max",
                                               "row_scaled", "rule", "rht", "block", "rowwise", "columnwise")})


def _put(out: dict, name: str, data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor) -> None:
    out[f"{name}_data"] = data.numpy()
    out[f"{name}_scales"] = scales.numpy()
    out[f"{name}_scales_swizzled"] = swizzle(scales).numpy()
    out[f"{name}_amax"] = amax.reshape(-1).numpy().astype(np.float32)  # [1], or [M] row-scaled


# ---------------------------------------------------------------------------------------------------------------
# grouped layout (SPEC 9)
# ---------------------------------------------------------------------------------------------------------------

def _ru(n, q: int):
    return -(-n // q) * q


def _prefix(sizes: torch.Tensor) -> torch.Tensor:
    """int64 [E+1]: a prefix sum with a leading 0 (SPEC 9.2)."""
    return torch.cat((torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes.to(torch.int64), 0)))


def _group_max(v: torch.Tensor, group: torch.Tensor, e: int) -> torch.Tensor:
    """Per group the max of the non-negative values ``v`` whose group is ``group``, folded from 0 (an empty group:
    0): fp32 [E]."""
    return torch.zeros(e, dtype=F32).scatter_reduce(0, group, v, "amax", include_self=True)


def _scatter_scales(byte: torch.Tensor, g: torch.Tensor, r: torch.Tensor, c: torch.Tensor, cp: torch.Tensor,
                    base: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale bytes ``byte`` (any shape) at group-local compact positions (r, c) of groups ``g`` (tensors shaped like
    byte; ``cp`` = roundup(C_g, 4) and ``base`` = the group's scale offset, per element): the flat buffers of
    SPEC 9.2 holding each group's padded compact matrix (SPEC 8.1, row-major, ``base + r * Cp + c``) and its
    swizzled form (SPEC 8.2's byte formula), ``total`` bytes each, padding 0x00."""
    compact = torch.zeros(total, dtype=torch.uint8)
    swz = torch.zeros(total, dtype=torch.uint8)
    compact[base + r * cp + c] = byte
    swz[base + ((r // 128 * (cp // 4) + c // 4) * 32 + r % 32) * 16 + (r % 128) // 32 * 4 + c % 4] = byte
    return compact, swz


def group_quantize(x: np.ndarray, splits, *, rowwise: bool = True, columnwise: bool = False, rht: bool = False,
                   rht_signs: int = DEFAULT_RHT_SIGNS, block=(1, 16), rule: str = "te", amax=None,
                   four_over_six: str | None = None, four_over_six_fast_math: bool = False,
                   global_scale_max: int = 448, row_scaled: bool = False) -> dict:
    """SPEC 9: the row groups of X [T, K] (sizes ``splits`` >= 0 adding up to T, 9.1), each quantized as one tensor
    with its own amax per plane (an empty group: 0), as the flat buffers of SPEC 9.2: ``{p}_data``, ``{p}_scales``
    (each group swizzled, 8.2), ``{p}_scales_compact`` (each group's padded compact scales, 8.1), ``{p}_amax`` [E],
    the int64 prefix sums ``row_offsets``, ``{p}_data_offsets``, ``{p}_scale_offsets``, and ``{p}_data_tail`` /
    ``{p}_scales_tail``: 0x00 from the last offset up to the SPEC 9.3 capacity. A supplied ``amax`` (SPEC 4.3) is
    [1, E] (both planes) or [2, E] (row, col), used as is.

    All groups at once: the rowwise plane is X itself with one S_enc per group; the columnwise source puts every
    group's padded X_g^T (6.2) side by side, [K, sum roundup(m_g, 16)], so that no 16-block or 16x16 tile spans two
    groups, and the RHT, the block amaxes and the codes run on it in one go.

    The variants as in :func:`quantize` (SPEC 5.6, 5.7) per group; row-scaled, ``row_amax`` is [T] (one per row, in
    row order) and a supplied ``amax`` T values."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not a TE rule {RULES}")
    _check_block(block)
    block = tuple(int(v) for v in block)
    variant = _variant(locals())
    xt, is_bf16 = to_f32(x)
    if rht and not is_bf16:
        raise TypeError("the RHT takes bfloat16 input (SPEC 7.3)")
    t, k = xt.shape
    sizes = torch.from_numpy(np.asarray(splits, np.int64).reshape(-1).copy())
    e = sizes.numel()
    if e == 0 or bool((sizes < 0).any()) or int(sizes.sum()) != t:
        raise ValueError(f"splits {sizes.tolist()} are not E >= 1 non-negative sizes adding up to {t}")
    sup = None
    if amax is not None and variant.row_scaled:
        sup = _supplied(amax, t)
    elif amax is not None:
        a = np.asarray(amax, np.float32).reshape(-1, e)
        if np.any(a < 0):
            raise ValueError("a supplied amax must be >= 0, +Inf or NaN")
        sup = (torch.from_numpy(a[0].copy()), torch.from_numpy(a[-1].copy()))
    starts = _prefix(sizes)
    ar = torch.arange(e)
    nb, cp_row = k // 16, _ru(k // 16, 4)
    out: dict[str, np.ndarray] = {"row_offsets": starts.numpy()}

    row_amax = None if sup is None else sup[0]
    if rowwise:
        gid = torch.repeat_interleave(ar, sizes)  # the group of every row
        real = None
        if block == (1, 16):
            b = block_amax(xt, block)
        else:  # SPEC 6.3 per group: tiles from each group's first row, the rows past m_g absent (zeros)
            pad_rows, real = _padded_index(sizes, starts, t)
            a = torch.cat((_abs_nan_ignoring(xt), torch.zeros((1, k), dtype=F32)))[pad_rows]
            b = _tile_max(a)[real]
        if row_amax is None and variant.row_scaled:
            row_amax = b.amax(dim=1) if nb else torch.zeros(t, dtype=F32)  # SPEC 5.7: one amax per row
        elif row_amax is None:
            row_amax = _group_max(b.amax(dim=1), gid, e)  # SPEC 4.1 per group (the blocks cover every element)
        if variant.plain:
            s_enc, s_dec = encode_scale(row_amax, rule)
            data, byte = encode_blocks(xt, b, s_enc[gid].unsqueeze(1), s_dec[gid].unsqueeze(1))
        else:  # SPEC 5.6 / 5.7: the amax of each row's group, or of the row itself
            from .te_torch_variants import encode_variant_plane

            per_row = row_amax if variant.row_scaled else row_amax[gid]
            data, byte = encode_variant_plane(xt, b, per_row.unsqueeze(1), variant, block, real)
        off_s = _prefix(_ru(sizes, 128) * cp_row)
        r_loc = (torch.arange(t) - starts[gid]).unsqueeze(1).expand(t, nb)
        c_loc = torch.arange(nb).unsqueeze(0).expand(t, nb)
        g2 = gid.unsqueeze(1).expand(t, nb)
        compact, swz = _scatter_scales(byte, g2, r_loc, c_loc, torch.full((t, nb), cp_row), off_s[g2], int(off_s[-1]))
        _put_group(out, "row", data.reshape(-1), swz, compact, row_amax, _prefix(sizes * (k // 2)), off_s,
                   t * k // 2, 128 * _worst_units(t, e, 128) * cp_row)
    if columnwise:
        tok = _ru(sizes, 16)  # padded tokens per group (SPEC 6.2)
        tstart = _prefix(tok)
        p = int(tstart[-1])
        pad_rows, _ = _padded_index(sizes, starts, t)
        src = torch.cat((xt, torch.zeros((1, k), dtype=F32)))[pad_rows].t().contiguous()  # [K, P]
        if rht:
            src = _rht(src, rht_signs)
        b = block_amax(src, block)  # tiles at multiples of 16 of K and of each group's tokens
        bg = torch.repeat_interleave(ar, tok // 16)  # the group of every block column
        if sup is not None:
            col_amax = sup[1]
        elif rht or row_amax is None:  # SPEC 4.2: the plane's own (without RHT it equals the rowwise one)
            col_amax = _group_max(b.amax(dim=0), bg, e)
        else:
            col_amax = row_amax
        if variant.plain:
            s_enc, s_dec = encode_scale(col_amax, rule)
            data, byte = encode_blocks(src, b, s_enc[bg].unsqueeze(0), s_dec[bg].unsqueeze(0))
        else:  # SPEC 5.6 with each block column's group amax (its 16x16 tiles: 16 rows of X_g^T, K % 16 == 0)
            from .te_torch_variants import encode_variant_plane

            data, byte = encode_variant_plane(src, b, col_amax[bg].unsqueeze(0), variant, block)
        cols = tok // 16  # scale columns per group: ceil(m_g / 16)
        off_s = _prefix(_ru(k, 128) * _ru(cols, 4))
        nbc = p // 16
        g2 = bg.unsqueeze(0).expand(k, nbc)
        r_loc = torch.arange(k).unsqueeze(1).expand(k, nbc)
        c_loc = (torch.arange(nbc) - tstart[bg] // 16).unsqueeze(0).expand(k, nbc)
        compact, swz = _scatter_scales(byte, g2, r_loc, c_loc, _ru(cols, 4)[g2], off_s[g2], int(off_s[-1]))
        _put_group(out, "col", _group_major(data, tstart // 2), swz, compact, col_amax, _prefix(k * tok // 2), off_s,
                   k * 16 * _worst_units(t, e, 16) // 2, _ru(k, 128) * 4 * _worst_units(t, e, 64))
    return out


def _worst_units(t: int, e: int, q: int) -> int:
    """SPEC 9.3's W(q): the largest sum of ceil(m_g / q) over the splits of t rows into e groups, at least e."""
    return e + max(t - e, 0) // q


def _padded_index(sizes: torch.Tensor, starts: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every group's rows padded to roundup(m_g, 16), side by side: for each padded position the source row (t: a
    zero row appended after X), and whether it is a real row."""
    tok = _ru(sizes, 16)
    pg = torch.repeat_interleave(torch.arange(sizes.numel()), tok)
    local = torch.arange(int(tok.sum())) - _prefix(tok)[pg]
    real = local < sizes[pg]
    return torch.where(real, starts[pg] + local, torch.full_like(local, t)), real


def _group_major(mat: torch.Tensor, col_starts: torch.Tensor) -> torch.Tensor:
    """[K, W] with group g in columns col_starts[g] .. col_starts[g+1] -> the groups' [K, w_g] blocks, each
    row-major, one after the other (1-D)."""
    k, w = mat.shape
    widths = col_starts[1:] - col_starts[:-1]
    pos = torch.arange(k * w)
    ends = _prefix(widths * k)
    g = torch.searchsorted(ends, pos, right=True) - 1
    local = pos - ends[g]
    wg = widths[g]
    return mat.reshape(-1)[(local // wg) * w + col_starts[g] + local % wg]


def _put_group(out: dict, p: str, data, swz, compact, amax, data_off, scale_off, data_cap: int, scale_cap: int) -> None:
    out[f"{p}_data"] = data.numpy()
    out[f"{p}_scales"] = swz.numpy()
    out[f"{p}_scales_compact"] = compact.numpy()
    out[f"{p}_amax"] = amax.numpy().astype(np.float32)
    out[f"{p}_data_offsets"] = data_off.numpy()
    out[f"{p}_scale_offsets"] = scale_off.numpy()
    out[f"{p}_data_tail"] = np.zeros(data_cap - int(data_off[-1]), np.uint8)
    out[f"{p}_scales_tail"] = np.zeros(scale_cap - int(scale_off[-1]), np.uint8)
