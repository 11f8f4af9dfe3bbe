"""TE's scale-selection variants of rule "te" in torch (CPU): 4over6 (SPEC 5.6) and row scaling (SPEC 5.7).

The sibling of :mod:`conformance.te_torch`, written from the SPEC text alone in the same way, on
:mod:`conformance.te_torch_blocks` (imports nothing from ``oracle``; every fp32 operation is one torch op, a
division is a division, SPEC 1.1). :mod:`conformance.te_torch`'s ``quantize`` and ``group_quantize`` call into it
for their ``four_over_six``, ``four_over_six_fast_math``, ``global_scale_max`` and ``row_scaled`` keywords.

* :class:`Variant`, :func:`check_variant` -- which combinations SPEC 5.6 / 5.7 define (rule "te", round to nearest, no
  RHT; row scaling: 1x16 blocks, either plane; G = 256 only with 4over6);
* :func:`encode_scale_g` -- SPEC 5.6's S_enc with the E4M3 maximum G (5.1 with 2688 replaced by fp32(6G));
* :func:`row_amax` -- SPEC 5.7 (one NaN-ignoring amax per row);
* :func:`candidate` -- SPEC 5.6 per candidate (map-to-6, map-to-4): scale byte, multiplier, codes, E2M1 values;
* :func:`row_errors`, :func:`tile_tree_sum` -- SPEC 5.6's error of a candidate on every block row (input or product
  domain, MAE or MSE, summed in element order) and the 16x16 tiles' tree sum of their 16 row errors;
* :func:`prefers_map4`, :func:`four_over_six_blocks` -- the choice (map-to-4 iff its error is strictly smaller) and
  the plane's bytes;
* :func:`encode_variant_plane` -- one plane's bytes under a variant (4over6 and / or per-row amaxes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .te_torch_blocks import (
    E4M3_VALUES,
    F32,
    FLT_MAX,
    ONE,
    e2m1_encode,
    e4m3_encode,
    encode_blocks,
    encode_scale,
    pack,
)

__all__ = ["E2M1_VALUES", "ERROR_MODES", "GLOBAL_SCALE_MAXES", "PLAIN", "Variant", "candidate", "check_variant",
           "encode_scale_g", "encode_variant_plane", "four_over_six_blocks", "prefers_map4", "row_amax",
           "row_errors", "tile_tree_sum"]

ERROR_MODES = ("mae", "mse")
GLOBAL_SCALE_MAXES = (448, 256)

#: SPEC 2.1: the value of every E2M1 code, fp32, indexed by the code (0x8 is -0.0).
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                           dtype=F32)
SIX = torch.tensor(6.0, dtype=F32)
MAP4 = torch.tensor(1.5, dtype=F32)  # SPEC 5.6: map-to-4's block scale is 1.5x map-to-6's
E4M3_MAX = torch.tensor(448.0, dtype=F32)


@dataclass(frozen=True)
class Variant:
    """The options of SPEC 5.6 / 5.7 (the defaults: plain rule "te")."""

    four_over_six: str | None = None
    fast_math: bool = False
    global_scale_max: int = 448
    row_scaled: bool = False

    @property
    def plain(self) -> bool:
        """True when no variant is asked for (SPEC 5.1 / 5.2 unchanged)."""
        return self == PLAIN


PLAIN = Variant()


def check_variant(*, four_over_six, four_over_six_fast_math, global_scale_max, row_scaled, rule: str, rht: bool,
                  block, rowwise: bool, columnwise: bool) -> Variant:
    """The variant the keywords ask for, or ValueError for a combination SPEC 5.6 / 5.7 does not define."""
    mode = None if four_over_six is None else str(four_over_six).lower()
    if mode is not None and mode not in ERROR_MODES:
        raise ValueError(f"four_over_six must be None, 'mae' or 'mse', not {four_over_six!r}")
    g = int(global_scale_max)
    if g not in GLOBAL_SCALE_MAXES:
        raise ValueError(f"global_scale_max must be 448 or 256, not {global_scale_max!r}")
    if mode is None and (four_over_six_fast_math or g != 448):
        raise ValueError("four_over_six_fast_math and global_scale_max=256 go with 4over6 only (SPEC 5.6)")
    v = Variant(mode, bool(four_over_six_fast_math), g, bool(row_scaled))
    if not v.plain and (rule != "te" or rht):
        raise ValueError(f"4over6 and row scaling are variants of rule 'te' without the RHT, not {rule!r} / rht={rht}")
    if v.row_scaled and tuple(block) != (1, 16):
        raise ValueError("row scaling takes 1x16 blocks only (SPEC 5.7)")
    return v


def encode_scale_g(amax: torch.Tensor, global_scale_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 5.6: ``S_enc = fminf(fp32(6G) / A, FLT_MAX)``, 1 when A == 0 or S_enc == 0; ``S_dec = 1 / S_enc``
    (elementwise over any shape of A)."""
    six_g = torch.tensor(6.0 * int(global_scale_max), dtype=F32)
    s = torch.fmin(six_g / amax, FLT_MAX)
    s = torch.where((amax == 0) | (s == 0), ONE, s)
    return s, ONE / s


def row_amax(b: torch.Tensor) -> torch.Tensor:
    """SPEC 5.7: the amax of every row, from its 1x16 block amaxes ``b`` [R, C/16] (each NaN-ignoring, folded from 0:
    an all-zero or all-NaN row gives 0): fp32 [R]."""
    return b.amax(dim=1) if b.shape[1] else torch.zeros(b.shape[0], dtype=F32)


def candidate(src3: torch.Tensor, base: torch.Tensor, s_dec: torch.Tensor, map4: bool):
    """One SPEC 5.6 candidate on the blocks ``src3`` [R, nb, 16] with ``base = (b / 6) * S_enc`` [R, nb]:
    ``byte = E4M3(fminf(base (* 1.5 for map-to-4), 448))``, ``d = decode(byte)``, ``m = fminf(1 / (d * S_dec),
    FLT_MAX)``, codes ``E2M1(x * m)``. Returns (byte, d, codes [R, nb, 16], their E2M1 values)."""
    sf = base * MAP4 if map4 else base
    byte = e4m3_encode(torch.fmin(sf, E4M3_MAX))
    d = E4M3_VALUES[byte.to(torch.int64)]
    m = torch.fmin(ONE / (d * s_dec), FLT_MAX)
    codes = e2m1_encode(src3 * m.unsqueeze(2))
    return byte, d, codes, E2M1_VALUES[codes.to(torch.int64)]


def row_errors(src3: torch.Tensor, q: torch.Tensor, d: torch.Tensor, amax: torch.Tensor, s_enc: torch.Tensor, *,
               mode: str, fast_math: bool, global_scale_max: int) -> torch.Tensor:
    """SPEC 5.6: a candidate's error on each block row, [R, nb]: from +0, for i = 0 .. 15 in order,
    ``p = q_i * d``; ``diff = ((p * A) / fp32(6G)) - x_i`` (input domain) or ``p - (x_i * S_enc)`` (fast math);
    ``err = err + |diff|`` (mae) or ``err + diff * diff`` (mse). A is the plane's (or row's) amax as given."""
    six_g = torch.tensor(6.0 * int(global_scale_max), dtype=F32)
    err = torch.zeros(d.shape, dtype=F32)
    for i in range(16):
        p = q[:, :, i] * d
        x = src3[:, :, i]
        diff = (p - x * s_enc) if fast_math else ((p * amax) / six_g - x)
        err = err + (diff.abs() if mode == "mae" else diff * diff)
    return err


def tile_tree_sum(err: torch.Tensor) -> torch.Tensor:
    """SPEC 5.6, 16x16: per tile of 16 consecutive rows of ``err`` [P, nb] (P a multiple of 16), the sum
    ``(((e0 + e8) + (e4 + e12)) + ((e2 + e10) + (e6 + e14))) + (((e1 + e9) + (e5 + e13)) + ((e3 + e11) + (e7 + e15)))``
    of its row errors e_r, written back on each of the tile's rows: [P, nb]."""
    p, nb = err.shape
    e = err.reshape(p // 16, 16, nb).unbind(dim=1)
    s = ((((e[0] + e[8]) + (e[4] + e[12])) + ((e[2] + e[10]) + (e[6] + e[14])))
         + (((e[1] + e[9]) + (e[5] + e[13])) + ((e[3] + e[11]) + (e[7] + e[15]))))
    return s.repeat_interleave(16, dim=0)


def candidate_errors(src3: torch.Tensor, b: torch.Tensor, amax: torch.Tensor, v: Variant):
    """SPEC 5.6's two candidates of the blocks ``src3`` [R, nb, 16] with block amaxes ``b`` [R, nb] and the amax
    ``amax`` (0-d, or broadcastable to [R, nb]): ``((byte, d, codes, err) of map-to-6, the same of map-to-4)``, each
    ``err`` the row error [R, nb] of :func:`row_errors`."""
    s_enc, s_dec = encode_scale_g(amax, v.global_scale_max)
    base = (b / SIX) * s_enc
    common = dict(mode=v.four_over_six, fast_math=v.fast_math, global_scale_max=v.global_scale_max)
    out = []
    for map4 in (False, True):
        byte, d, codes, q = candidate(src3, base, s_dec, map4=map4)
        out.append((byte, d, codes, row_errors(src3, q, d, amax, s_enc, **common)))
    return tuple(out)


def four_over_six_blocks(src: torch.Tensor, b: torch.Tensor, amax: torch.Tensor, v: Variant,
                         block=(1, 16), real: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 5.6 on a plane source ``src`` [R, C] with block amaxes ``b`` [R, C/16] and the amax ``amax`` (0-d, or
    broadcastable to [R, C/16]: per group, per row). 1x16: each block takes map-to-4 iff its error is strictly
    smaller (a tie or a NaN keeps map-to-6). 16x16: the errors are first tree-summed over each tile's 16 rows; the
    tiles are given by ``real`` [P] (P a multiple of 16, R of them True: row i of ``src`` sits at the i-th True
    position, the others are absent rows adding +0); None: tiles of 16 consecutive rows, the last one padded.
    Returns (packed data [R, C/2], scale bytes [R, C/16])."""
    r, c = src.shape
    (byte6, _, codes6, err6), (byte4, _, codes4, err4) = candidate_errors(src.reshape(r, c // 16, 16), b, amax, v)
    if tuple(block) == (16, 16):
        if real is None:
            real = torch.arange(-(-r // 16) * 16) < r
        err6, err4 = (_tiles_of(e, real) for e in (err6, err4))
    take4 = prefers_map4(err4, err6)
    codes = torch.where(take4.unsqueeze(2), codes4, codes6)
    return pack(codes.reshape(r, c)), torch.where(take4, byte4, byte6)


def prefers_map4(err4: torch.Tensor, err6: torch.Tensor) -> torch.Tensor:
    """SPEC 5.6: a block (or tile) takes map-to-4 iff ``err_4 < err_6``; a tie, and a NaN error, keep map-to-6."""
    return err4 < err6


def _tiles_of(err: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """:func:`tile_tree_sum` of the rows of ``err`` [R, nb] placed at the True positions of ``real`` [P] (absent
    rows: +0), read back at those positions: [R, nb]."""
    padded = torch.zeros((real.numel(), err.shape[1]), dtype=F32)
    padded[real] = err
    return tile_tree_sum(padded)[real]


def encode_variant_plane(src: torch.Tensor, b: torch.Tensor, amax: torch.Tensor, v: Variant, block=(1, 16),
                         real: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One plane's (packed data, scale bytes) under ``v``: 4over6 (SPEC 5.6, :func:`four_over_six_blocks`) with
    ``amax`` broadcastable to the blocks, or rule "te" (5.1, 5.2) with one S_enc per row (5.7: ``amax`` [R, 1])."""
    if v.four_over_six:
        return four_over_six_blocks(src, b, amax, v, block, real)
    return encode_blocks(src, b, *encode_scale(amax, "te"))
