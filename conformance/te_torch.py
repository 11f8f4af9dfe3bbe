"""NVFP4 quantization under the TE scale rules ("te", "te_fused_rht"), round to nearest or stochastic, in torch (CPU).

A second implementation of SPEC 4-10, written from SPEC.md alone: it imports nothing from ``oracle`` and shares no
code with it, so a conformance run of it against the oracle checks the oracle's TE arithmetic (the
``torch-te`` backend of :mod:`conformance.backends`). Every value is a torch float32 tensor and every fp32
operation is a separate torch op (IEEE binary32, RNE on the CPU): a product and a sum are never fused, a division
is a division (SPEC 1.1). Everything is vectorized over the elements; nothing loops over them in Python.

Organisation, one function per SPEC section:

* formats, amaxes and the block scale rule (SPEC 1.3, 2-5: :func:`to_f32`, :func:`e4m3_encode`,
  :func:`e2m1_encode`, :func:`pack`, :func:`bf16_round`, :func:`tensor_amax`, :func:`amax_of_blocks`,
  :func:`encode_scale`, :func:`encode_blocks`) live in :mod:`conformance.te_torch_blocks` and are re-exported here;
* :func:`rht` -- SPEC 7.1, 7.2 (the butterfly in its order, then ``* 0.25``, then bf16);
* :func:`block_amax` -- SPEC 5.2, 6.1, 6.3 (1x16 blocks, 16x16 tiles with absent rows as zeros);
* :func:`quantize_plane` -- SPEC 5.2 on a plane (rule "te" or a variant);
* :func:`columnwise_source` -- SPEC 6.2, 7.3 (zero-padded X^T, with the RHT);
* :func:`swizzle` -- SPEC 8.1, 8.2 (padded compact scales in the 128x4 tile order);
* :func:`quantize` -- SPEC 4.2, 4.3, 6 (both planes, the amax of each, the buffers of a quantize case);
* :func:`group_quantize` -- SPEC 9.1-9.3 (every group at once with its own amax and S_enc; the flat buffers,
  offsets and zero tails up to the device capacity).

TE's variants of rule "te" (4over6, SPEC 5.6; row scaling, SPEC 5.7) live in the sibling
:mod:`conformance.te_torch_variants`, written the same way on :mod:`conformance.te_torch_blocks`; :func:`quantize`
and :func:`group_quantize` take their keywords and call into it. Stochastic rounding (SPEC 3.4 with SPEC 10's
Philox bytes) lives in :mod:`conformance.te_torch_sr`.
"""

from __future__ import annotations

import numpy as np
import torch

from . import te_torch_variants as variants
from .te_torch_blocks import (
    E4M3_VALUES,
    F32,
    FLT_MAX,
    ONE,
    QUARTER,
    RULES,
    SIXTH,
    abs_nan_ignoring,
    amax_of_blocks,
    bf16_round,
    e2m1_encode,
    e4m3_encode,
    encode_blocks,
    encode_scale,
    pack,
    tensor_amax,
    to_f32,
)
from .te_torch_sr import block_random_bytes

__all__ = ["E4M3_VALUES", "FLT_MAX", "ONE", "RULES", "SIXTH", "amax_of_blocks", "bf16_round", "block_amax",
           "columnwise_source", "e2m1_encode", "e4m3_encode", "encode_blocks", "encode_scale", "group_quantize", "pack",
           "quantize", "quantize_plane", "rht", "sign_vector", "swizzle", "tensor_amax", "to_f32"]

DEFAULT_RHT_SIGNS = 0xD7E8  # SPEC 7.1


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
# block maxima and planes (SPEC 5.2, 6.1, 6.3)
# ---------------------------------------------------------------------------------------------------------------

def block_amax(src: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """The block amax b of every 16-block of a plane's source ``src`` [R, C] (NaN ignored, SPEC 5.2), [R, C/16].

    1x16 (SPEC 6.1): 16 consecutive elements of a row. 16x16 (SPEC 6.3): the max over the 16x16 tile (tiles at
    multiples of 16 in both axes; rows past R are absent, i.e. zeros), written for each of the tile's rows."""
    r, c = src.shape
    a = abs_nan_ignoring(src)
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
                   variant=None, rbytes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SPEC 5.2 on a plane source [R, C] (fp32) under ``rule``: returns (packed data [R, C/2], scale bytes
    [R, C/16], both uint8, and the plane's amax, 0-d fp32). ``amax`` None: the plane's own (SPEC 4.1 over the
    source, :func:`amax_of_blocks`); else used as is (SPEC 4.3). S_enc, S_dec by :func:`encode_scale`.

    ``variant`` (a :class:`conformance.te_torch_variants.Variant`): 4over6 (SPEC 5.6) and / or one amax per row
    (SPEC 5.7: the amax is then fp32 [R], each row's own unless supplied)."""
    b = block_amax(src, block)
    if variant is None or variant.plain:
        if amax is None:
            amax = amax_of_blocks(b)
        data, byte = encode_blocks(src, b, *encode_scale(amax, rule), rbytes)
        return data, byte, amax
    if amax is None:
        amax = variants.row_amax(b) if variant.row_scaled else amax_of_blocks(b)
    plane_amax = amax.unsqueeze(1) if variant.row_scaled else amax
    data, byte = variants.encode_variant_plane(src, b, plane_amax, variant, block)
    return data, byte, amax


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


def _per_row(amax, rows: int) -> torch.Tensor:
    """SPEC 5.7 + 4.3: one supplied amax per plane row, fp32 [rows], bits kept; a negative value is refused."""
    vals = np.asarray(amax, np.float32).reshape(-1)
    if vals.size != rows or np.any(vals < 0):
        raise ValueError(f"a row-scaled amax is {rows} values >= 0, +Inf or NaN, not {vals.size}: {vals[:4]}")
    return torch.from_numpy(vals.copy())


def _supplied_per_row(amax, rows: int, cols: int, rowwise: bool, columnwise: bool) -> tuple:
    """A supplied row-scaled amax (SPEC 5.7) as (rowwise plane's [rows] | None, columnwise plane's [cols] | None):
    the one plane's values, or a (row, col) pair when both planes are asked for."""
    if rowwise and columnwise:
        return _per_row(amax[0], rows), _per_row(amax[1], cols)
    return (_per_row(amax, rows), None) if rowwise else (None, _per_row(amax, cols))


def _supplied(amax) -> tuple[torch.Tensor, torch.Tensor] | None:
    """SPEC 4.3: a supplied amax (one value for both planes, or a (row, col) pair) as 0-d fp32 tensors, bits kept;
    a negative value is refused."""
    if amax is None:
        return None
    vals = np.asarray(amax, np.float32).reshape(-1)
    if vals.size not in (1, 2):
        raise ValueError(f"a supplied amax is one value or a (row, col) pair, not {vals.size} values")
    if np.any(vals < 0):
        raise ValueError(f"a supplied amax must be >= 0, +Inf or NaN, not {vals}")
    t = torch.from_numpy(vals.copy())
    return t[0], t[-1]


def quantize(x: np.ndarray, *, rowwise: bool = True, columnwise: bool = False, rht: bool = False,
             rht_signs: int = DEFAULT_RHT_SIGNS, block=(1, 16), rule: str = "te", amax=None, rounding: str = "rn",
             seed: int = 0, offset: int = 0, four_over_six: str | None = None, four_over_six_fast_math: bool = False,
             global_scale_max: int = 448, row_scaled: bool = False) -> dict:
    """SPEC 4-8 (and 10 for SR) for the TE rules: the buffers of a quantize case as numpy arrays:
    ``{row,col}_data`` u8 [rows, cols/2], ``{row,col}_scales`` u8 [rows, cols/16] (compact, SPEC 8.1),
    ``{row,col}_scales_swizzled`` u8 1-D (SPEC 8.2) and ``{row,col}_amax`` f32 [1], for the planes asked for.

    Rowwise plane: X [M, K] (SPEC 6.1), amax per SPEC 4.1. Columnwise plane: SPEC 6.2's padded X^T, with the RHT
    when ``rht`` (bf16 input only, SPEC 7.3); its amax is the rowwise one without RHT and the NaN-ignoring max |v|
    over the RHT's bf16 outputs with it (SPEC 4.2). A supplied ``amax`` is used as is (SPEC 4.3). ``rounding``
    "sr": the codes by SPEC 3.4 with the random bytes of SPEC 10 (``seed``, ``offset``; rowwise plane 0, columnwise
    plane 1), by :mod:`conformance.te_torch_sr`.

    ``four_over_six`` ("mae" / "mse"), ``four_over_six_fast_math``, ``global_scale_max`` (448, or 256 with 4over6)
    and ``row_scaled`` (``row_amax`` then [M] and ``col_amax`` [K], each plane row's own: a supplied ``amax`` is the
    one plane's values, or a (row, col) pair for both): SPEC 5.6, 5.7 by :mod:`conformance.te_torch_variants`."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not a TE rule {RULES}")
    block = tuple(int(b) for b in block)
    variant = _variant(locals())
    _check_rounding(rounding, variant)
    xt, is_bf16 = to_f32(x)
    if rht and not is_bf16:
        raise TypeError("the RHT takes bfloat16 input (SPEC 7.3)")
    if amax is not None and variant.row_scaled:
        sup = _supplied_per_row(amax, xt.shape[0], xt.shape[1], rowwise, columnwise)
    else:
        sup = _supplied(amax)
    out: dict[str, np.ndarray] = {}
    row_amax = None if sup is None else sup[0]
    def rbytes(src: torch.Tensor, plane: int):  # SPEC 10.2: block c / 16, plane row r, stream offset (g = 0)
        if rounding != "sr":
            return None
        r, c = src.shape
        return block_random_bytes(np.arange(c // 16)[None, :], np.arange(r)[:, None], plane, np.int64(offset), seed)

    if rowwise:
        data, scales, row_amax = quantize_plane(xt, rule, block, row_amax, variant, rbytes(xt, 0))
        _put(out, "row", data, scales, row_amax)
    if columnwise:
        src = columnwise_source(xt, rht, rht_signs)
        # SPEC 4.2: with the RHT the plane's own amax over its source (the bf16 RHT outputs, padding included);
        # without, the rowwise amax, which is also the plane's own (X^T and zeros) when no rowwise plane was asked;
        # row-scaled (5.7), the plane's own per row of its source (None: quantize_plane forms it)
        col_amax = sup[1] if sup is not None else (None if rht or variant.row_scaled else row_amax)
        _put(out, "col", *quantize_plane(src, rule, block, col_amax, variant, rbytes(src, 1)))
    return out


def _check_rounding(rounding: str, variant) -> None:
    """"rn", or "sr" on plain rule te planes (SPEC 3.4; the variants of 5.6 / 5.7 round to nearest only)."""
    if rounding not in ("rn", "sr"):
        raise ValueError(f"rounding must be 'rn' or 'sr', not {rounding!r}")
    if rounding == "sr" and not variant.plain:
        raise ValueError("4over6 and row scaling round to nearest only (SPEC 5.6, 5.7)")


def _variant(kw: dict):
    """The :class:`conformance.te_torch_variants.Variant` of a call's keywords (``locals()`` of :func:`quantize` /
    :func:`group_quantize`), checked against its other options."""
    return variants.check_variant(**{k: kw[k] for k in ("four_over_six", "four_over_six_fast_math", "global_scale_max",
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
                   rounding: str = "rn", seed: int = 0, offset: int = 0, four_over_six: str | None = None,
                   four_over_six_fast_math: bool = False, global_scale_max: int = 448,
                   row_scaled: bool = False) -> dict:
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
    row order), ``col_amax`` [E K] (group g's amax of each column of X over its rows, group-major) and a supplied
    ``amax`` the one plane's values (T, or E K) or a (row, col) pair of both. ``rounding`` "sr": SPEC 3.4 with group
    g's random bytes (SPEC 10.2: its plane rows and blocks counted within the group, stream ``offset + g``)."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not a TE rule {RULES}")
    _check_block(block)
    block = tuple(int(v) for v in block)
    variant = _variant(locals())
    _check_rounding(rounding, variant)
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
        sup = _supplied_per_row(amax, t, e * k, rowwise, columnwise)
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
            a = torch.cat((abs_nan_ignoring(xt), torch.zeros((1, k), dtype=F32)))[pad_rows]
            b = _tile_max(a)[real]
        if row_amax is None and variant.row_scaled:
            row_amax = b.amax(dim=1) if nb else torch.zeros(t, dtype=F32)  # SPEC 5.7: one amax per row
        elif row_amax is None:
            row_amax = _group_max(b.amax(dim=1), gid, e)  # SPEC 4.1 per group (the blocks cover every element)
        if variant.plain:
            s_enc, s_dec = encode_scale(row_amax, rule)
            rb = None
            if rounding == "sr":  # SPEC 10.2: the group's own row index and stream
                g_np = gid.numpy()[:, None]
                rb = block_random_bytes(np.arange(nb)[None, :], np.arange(t)[:, None] - starts.numpy()[g_np], 0,
                                        int(offset) + g_np, seed)
            data, byte = encode_blocks(xt, b, s_enc[gid].unsqueeze(1), s_dec[gid].unsqueeze(1), rb)
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
        if variant.row_scaled:  # SPEC 5.7: group g's amax of each plane row k, [E, K] (an empty group: 0)
            per_gk = (sup[1].reshape(e, k) if sup is not None else
                      torch.zeros((k, e), dtype=F32).scatter_reduce(1, bg.unsqueeze(0).expand(k, -1), b, "amax",
                                                                    include_self=True).t())
            col_amax = per_gk.reshape(-1)
            block_amaxes = per_gk[bg].t()  # [K, P/16]: each block's group and row
        elif sup is not None:
            col_amax = sup[1]
        elif rht or row_amax is None:  # SPEC 4.2: the plane's own (without RHT it equals the rowwise one)
            col_amax = _group_max(b.amax(dim=0), bg, e)
        else:
            col_amax = row_amax
        if variant.plain:
            s_enc, s_dec = encode_scale(col_amax, rule)
            rb = None
            if rounding == "sr":  # SPEC 10.2: block columns counted within the group, stream offset + g
                g_np = bg.numpy()[None, :]
                rb = block_random_bytes(np.arange(p // 16)[None, :] - tstart.numpy()[g_np] // 16,
                                        np.arange(k)[:, None], 1, int(offset) + g_np, seed)
            data, byte = encode_blocks(src, b, s_enc[bg].unsqueeze(0), s_dec[bg].unsqueeze(0), rb)
        else:  # SPEC 5.6 with each block column's group amax (its 16x16 tiles: 16 rows of X_g^T, K % 16 == 0)
            from .te_torch_variants import encode_variant_plane

            plane_amax = block_amaxes if variant.row_scaled else col_amax[bg].unsqueeze(0)
            data, byte = encode_variant_plane(src, b, plane_amax, variant, block)
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
