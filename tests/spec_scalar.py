"""A deliberately naive, scalar transcription of SPEC.md sections 3.1, 3.2, 3.4, 5.1, 5.2, 7.2, 7.4 and 10.2, written
independently of the vectorized oracle (plain loops over np.float32 scalars) and used as a second
implementation in the tests."""

from __future__ import annotations

import math

import numpy as np

F = np.float32
FLT_MAX = F(np.finfo(np.float32).max)
E2M1_MAGS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def fminf(a, b):
    a, b = F(a), F(b)
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return min(a, b)


def e2m1_rn(y) -> int:
    """SPEC 3.1 by nearest-candidate search with ties to the even index."""
    y = F(y)
    if math.isnan(y):
        return 7
    sign = 8 if math.copysign(1.0, y) < 0 else 0
    a = min(abs(float(y)), 6.0)
    best = min(range(8), key=lambda i: (abs(E2M1_MAGS[i] - a), i % 2))
    return sign | best


def e4m3_values() -> list:
    vals = []
    for b in range(0x7F):
        e, m = b >> 3, b & 7
        vals.append(m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return vals


_E4M3 = e4m3_values()


def e4m3_rn(x) -> int:
    """SPEC 3.2 by nearest-candidate search (ties to even code), saturating."""
    x = F(x)
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = min(abs(float(x)), 448.0)
    best = min(range(0x7F), key=lambda i: (abs(_E4M3[i] - a), i % 2))
    return sign | best


def e4m3_value(b: int) -> float:
    if b & 0x7F == 0x7F:
        return math.nan
    v = _E4M3[b & 0x7F]
    return -v if b & 0x80 else v


def nan_ignoring_max(values) -> np.float32:
    """Max of |v| over the non-NaN values, starting from 0 (SPEC 5.2, rule te)."""
    b = F(0.0)
    for v in values:
        if not math.isnan(v):
            b = max(b, F(abs(F(v))))
    return b


def tile_maxima(x: np.ndarray) -> list:
    """SPEC 6.3 for a 2-D array: for each row r and 16-column block j, the max |x| over its 16x16 tile
    (rows 16*(r//16) .. +16 that exist, columns 16*j .. +16); returns a list of rows of block maxima."""
    m, k = x.shape
    out = []
    for r in range(m):
        r0 = r // 16 * 16
        out.append([nan_ignoring_max(x[rr, j:j + 16].tolist()[c] for rr in range(r0, min(r0 + 16, m))
                                     for c in range(16)) for j in range(0, k, 16)])
    return out


def te_plane_scales(amax) -> tuple[np.float32, np.float32]:
    """SPEC 5.1 (rule te): (S_enc, S_dec) of a plane with amax A: fminf(2688 / A, FLT_MAX), 1 for A = 0 or an S_enc
    of 0; S_dec = 1 / S_enc."""
    amax = F(amax)
    with np.errstate(all="ignore"):
        s_enc = fminf(F(2688.0) / amax, FLT_MAX)
        if amax == 0 or s_enc == 0:
            s_enc = F(1.0)
        return s_enc, F(F(1.0) / s_enc)


def te_block_multiplier(byte: int, s_dec) -> np.float32:
    """SPEC 5.2: a block's encode multiplier from its scale byte, fminf(1 / (decode(byte) * S_dec), FLT_MAX)."""
    with np.errstate(all="ignore"):
        return fminf(F(1.0) / F(F(e4m3_value(byte)) * F(s_dec)), FLT_MAX)


def te_quantize_row_blocks(row: np.ndarray, amax, block_max: list | None = None) -> tuple[list, list]:
    """SPEC 5.1 + 5.2 (rule te) for one row; returns (codes, scale bytes). 1x16 blocks, or the given per-block
    maxima (e.g. :func:`tile_maxima` for 16x16 blocks, SPEC 6.3)."""
    amax = F(amax)
    with np.errstate(all="ignore"):
        s_enc, s_dec = te_plane_scales(amax)
        codes, scales = [], []
        for k in range(0, len(row), 16):
            blk = [F(v) for v in row[k : k + 16]]
            b = nan_ignoring_max(blk) if block_max is None else F(block_max[k // 16])
            sf = fminf(b * F(s_enc * F(1.0 / 6.0)), FLT_MAX)
            byte = e4m3_rn(sf)
            m = te_block_multiplier(byte, s_dec)
            scales.append(byte)
            codes.extend(e2m1_rn(F(v * m)) for v in blk)
    return codes, scales


def te_amax(x: np.ndarray) -> np.float32:
    """SPEC 4.1 (rule te): the NaN-ignoring max of |x| over the whole tensor."""
    return nan_ignoring_max(np.asarray(x).ravel().tolist())


def assert_te_plane(data: np.ndarray, scales: np.ndarray, x_rows: np.ndarray, amax, block_max=None, where="") -> None:
    """A TE-rule plane (packed codes ``data``, scale bytes ``scales``) against :func:`te_quantize_row_blocks` row by
    row, with the codes unpacked here (SPEC 2.3: element 2i in the low nibble). ``block_max``: per-row block maxima
    (e.g. :func:`tile_maxima`), else 1x16 blocks."""
    for r in range(x_rows.shape[0]):
        codes, want_scales = te_quantize_row_blocks(x_rows[r], amax, None if block_max is None else block_max[r])
        got_codes = [(int(data[r, i // 2]) >> (4 * (i % 2))) & 0xF for i in range(x_rows.shape[1])]
        assert np.asarray(scales[r]).tolist() == want_scales, f"{where} row {r}: scale bytes"
        assert got_codes == codes, f"{where} row {r}: codes"


def sr_random_byte_source(philox4x32, seed: int, plane: int, offset: int):
    """SPEC 10.2: the random byte of element (r, c) of a plane: byte c % 4 of word (c % 16) / 4 of
    Philox4x32-10((c / 16, r, plane, offset), (seed low, seed high)), with the Philox function given by the caller
    (this module imports no project code)."""
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)

    def byte(r: int, c: int) -> int:
        word = philox4x32(np.array([c // 16, r, plane, offset], np.uint32), key)[(c % 16) // 4]
        return (int(word) >> (8 * (c % 4))) & 0xFF

    return byte


def te_sr_plane(x_rows: np.ndarray, amax, random_byte, block_max=None) -> tuple[np.ndarray, list]:
    """SPEC 5.1, 5.2 and 3.4 (rule te, stochastic rounding) for a plane's rows, element by element: the scale bytes
    by :func:`te_quantize_row_blocks` (always round to nearest), each block's multiplier from its byte, and element
    (r, c) rounded by :func:`sr_scalar` with ``random_byte(r, c)``. ``block_max``: per-row block maxima (e.g.
    :func:`tile_maxima`), else 1x16 blocks. Returns (codes uint8 [R, C], scale bytes per row)."""
    _, s_dec = te_plane_scales(amax)
    codes = np.zeros(x_rows.shape, np.uint8)
    scales = []
    with np.errstate(all="ignore"):
        for r in range(x_rows.shape[0]):
            _, sb = te_quantize_row_blocks(x_rows[r], amax, None if block_max is None else block_max[r])
            scales.append(sb)
            for c in range(x_rows.shape[1]):
                m = te_block_multiplier(sb[c // 16], s_dec)
                codes[r, c] = sr_scalar(F(F(x_rows[r, c]) * m), random_byte(r, c))
    return codes, scales


def rht_block(x16, signs: int) -> list:
    """SPEC 7.2 for one block of 16 bf16 values given as floats; returns fp32 before the bf16 rounding."""
    v = [F(x16[i]) * F(-1.0 if (signs >> i) & 1 else 1.0) for i in range(16)]
    h = 1
    while h < 16:
        for i in range(16):
            if not i & h:
                a, b = v[i], v[i + h]
                v[i], v[i + h] = F(a + b), F(a - b)
        h *= 2
    return [F(t * F(0.25)) for t in v]


def sr_scalar(y, byte: int) -> int:
    """SPEC 3.4 for one element, written out with np.float32 scalars."""
    y = F(y)
    if math.isnan(y):
        return 7
    a = F(abs(y))

    def step(t):
        return F(0.5) if t < 2 else (F(1.0) if t < 4 else F(2.0))

    j = F(a + F(F(byte) / F(256.0)) * step(a))
    q = min(F(math.floor(j / step(j))) * step(j), F(6.0))
    idx = E2M1_MAGS.index(float(q))
    return idx | (8 if math.copysign(1.0, y) < 0 else 0)


def rht_block_is_plain(x16, r: int = 16) -> bool:
    """SPEC 7.4: whether a 16-block (bf16 values as float32) whose first r positions are the block's rows is plain:
    x_0 .. x_{r-1} finite and nonzero, x_r .. x_15 zero, and over the first r the exponent fields within
    [27, 249] and at most 12 apart."""
    bits = [int(np.asarray(F(v)).view(np.uint32)) >> 16 for v in x16]
    if r < 1 or any(b & 0x7FFF for b in bits[r:]):
        return False
    fields = []
    for b in bits[:r]:
        if b & 0x7FFF == 0 or (b >> 7) & 0xFF == 0xFF:
            return False
        fields.append((b >> 7) & 0xFF)
    return min(fields) >= 27 and max(fields) <= 249 and max(fields) - min(fields) <= 12
