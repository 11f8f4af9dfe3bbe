"""4over6 block-scale selection (SPEC 5.6): per block, the map-to-4 and map-to-6 encodings, their errors, and the
choice between them (the smaller error wins; a tie keeps map-to-6).

The functions take the plane's source matrix in plane orientation (rows of the plane, K-major) and return the chosen
scale bytes and encode multipliers; the caller encodes ``x * multiplier`` as every other rule does (SPEC 3.1).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import check_block
from .fp4_numpy import decode_e2m1, decode_e4m3, encode_e2m1, encode_e4m3
from .scale_rules import F32_MAX, global_encode_scale

__all__ = ["ERROR_DOMAINS", "ERROR_MODES", "GLOBAL_SCALE_MAXES", "Candidates", "block_row_candidates",
           "candidate_errors", "check_error_mode", "check_global_scale_max", "four_over_six_scales", "tile_error_sum"]

ERROR_MODES = ("mae", "mse")
GLOBAL_SCALE_MAXES = (448, 256)
#: Where a candidate's error is measured: SPEC 5.6's input domain (``(p * A) / 6G - x``) and product domain
#: (``p - x * S_enc``, four_over_six_fast_math), and SPEC 14.11's decode-scale domain (``p * S_dec - x``, flashinfer's
#: per-tensor strict error)
ERROR_DOMAINS = ("input", "product", "decode")


def check_error_mode(mode) -> str | None:
    """The 4over6 error mode (SPEC 5.6): None, or "mae" / "mse" in any case, returned lower-cased; ``ValueError``
    for anything else."""
    if mode is not None and (not isinstance(mode, str) or mode.lower() not in ERROR_MODES):
        raise ValueError(f"four_over_six must be None, 'mae' or 'mse', got {mode!r}")
    return None if mode is None else mode.lower()


def check_global_scale_max(g, name: str = "global_scale_max") -> int:
    """G, the E4M3 maximum inside S_enc (SPEC 5.6): the integer 448 or 256 (not a bool or a float); ``ValueError``
    for anything else (``name``: the argument's name in the message)."""
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g not in GLOBAL_SCALE_MAXES:
        raise ValueError(f"{name} must be the integer 448 or 256 (SPEC 5.6), got {g!r}")
    return int(g)

_SIX = np.float32(6.0)
_MAP4 = np.float32(1.5)
_E4M3_MAX = np.float32(448.0)
_ONE = np.float32(1.0)
# SPEC 5.6: the 16 rows of a 16x16 tile are summed as a tree, row r with row r + 8, then + 4, + 2, + 1
_TREE_STRIDES = (8, 4, 2, 1)


def _candidate(y3: np.ndarray, base: np.ndarray, expand, s_dec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One candidate's scale bytes, multipliers and E2M1 values (SPEC 5.6: byte_c, d_c, m_c and q_c,i); y3 is
    [R, C/16, 16]."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sf = base if expand is None else (base * expand).astype(np.float32)
        sbytes = encode_e4m3(np.fmin(sf, _E4M3_MAX))
        mult = np.fmin(_ONE / (decode_e4m3(sbytes) * s_dec).astype(np.float32), F32_MAX).astype(np.float32)
        codes = encode_e2m1((y3 * mult[:, :, None]).astype(np.float32))
    return sbytes, mult, decode_e2m1(codes)


def candidate_errors(
    y3: np.ndarray, q: np.ndarray, d: np.ndarray, *, amax, s_enc, mode: str, domain: str, global_scale_max: int
) -> np.ndarray:
    """The error of one candidate on every block row, ``[R, C/16]`` float32 (SPEC 5.6: the error of one row, err).

    ``y3`` the inputs ``[R, C/16, 16]``, ``q`` the candidate's E2M1 values (same shape), ``d`` its decoded scale bytes
    ``[R, C/16]``; ``amax`` and ``s_enc`` broadcast against ``[R, C/16]`` (a scalar, or ``[R, 1]`` for a row-scaled
    plane); ``domain`` one of :data:`ERROR_DOMAINS`. The 16 element errors are added in element order to +0 in fp32.
    """
    if domain not in ERROR_DOMAINS:
        raise ValueError(f"domain must be one of {ERROR_DOMAINS}, got {domain!r}")
    if mode not in ERROR_MODES:
        raise ValueError(f"mode must be one of {ERROR_MODES}, got {mode!r}")
    denom = np.float32(6 * check_global_scale_max(global_scale_max))
    err = np.zeros(d.shape, np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s_dec = (_ONE / np.asarray(s_enc, np.float32)).astype(np.float32) if domain == "decode" else None
        for i in range(16):
            dq = (q[:, :, i] * d).astype(np.float32)  # exact: at most 6 significant bits, within [2^-10, 2688]
            if domain == "product":
                diff = (dq - (y3[:, :, i] * s_enc).astype(np.float32)).astype(np.float32)
            elif domain == "decode":
                diff = ((dq * s_dec).astype(np.float32) - y3[:, :, i]).astype(np.float32)
            else:  # "input"
                v = ((dq * amax).astype(np.float32) / denom).astype(np.float32)
                diff = (v - y3[:, :, i]).astype(np.float32)
            e = np.abs(diff) if mode == "mae" else (diff * diff).astype(np.float32)
            err = (err + e).astype(np.float32)
    return err


def tile_error_sum(err: np.ndarray) -> np.ndarray:
    """Per 16x16 tile, the tree sum of its 16 row errors (SPEC 5.6: the 16x16 tree), repeated on the tile's rows.

    ``err`` is ``[R, C/16]``; rows past R (an M that is not a multiple of 16) add +0. Returns ``[R, C/16]``.
    """
    rows, nb = err.shape
    rp = -(-rows // 16) * 16
    e = np.zeros((rp, nb), np.float32)
    e[:rows] = err
    t = e.reshape(rp // 16, 16, nb)
    with np.errstate(invalid="ignore", over="ignore"):
        for h in _TREE_STRIDES:
            t = (t[:, :h] + t[:, h : 2 * h]).astype(np.float32)
    return np.repeat(t[:, 0], 16, axis=0)[:rows]


class Candidates(NamedTuple):
    """Both 4over6 candidates of every block row (SPEC 5.6), each ``[R, C/16]``: scale bytes (uint8), encode
    multipliers and row errors (float32; the error of the block's one row, not yet tree-summed over a 16x16 tile)."""

    bytes6: np.ndarray
    mult6: np.ndarray
    err6: np.ndarray
    bytes4: np.ndarray
    mult4: np.ndarray
    err4: np.ndarray


def block_row_candidates(y: np.ndarray, b: np.ndarray, *, amax, mode: str, domain: str, global_scale_max: int,
                         s_enc=None) -> Candidates:
    """Map-to-6 and map-to-4 of every block row of a plane (SPEC 5.6), with each row's error.

    The arguments are :func:`four_over_six_scales`' without ``block`` (``b``: each block row's amax, for 16x16
    blocks its tile's); the choice between the two is left to the caller.
    """
    rows, cols = y.shape
    a = np.asarray(amax, np.float32)
    if a.ndim:
        a = a.reshape(rows, 1)
    if s_enc is None:
        s_enc = global_encode_scale(a, "te", global_scale_max)
    s_enc = np.asarray(s_enc, np.float32)
    with np.errstate(divide="ignore"):
        s_dec = (_ONE / s_enc).astype(np.float32)
    y3 = y.reshape(rows, cols // 16, 16)
    with np.errstate(invalid="ignore", over="ignore"):
        base = ((b / _SIX).astype(np.float32) * s_enc).astype(np.float32)
    bytes4, mult4, q4 = _candidate(y3, base, _MAP4, s_dec)
    bytes6, mult6, q6 = _candidate(y3, base, None, s_dec)
    common = dict(amax=a, s_enc=s_enc, mode=mode, domain=domain, global_scale_max=global_scale_max)
    err4 = candidate_errors(y3, q4, decode_e4m3(bytes4), **common)
    err6 = candidate_errors(y3, q6, decode_e4m3(bytes6), **common)
    return Candidates(bytes6, mult6, err6, bytes4, mult4, err4)


def four_over_six_scales(
    y: np.ndarray,
    b: np.ndarray,
    *,
    amax,
    mode: str,
    domain: str,
    global_scale_max: int,
    block: tuple,
    s_enc=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scale bytes and encode multipliers ``[R, C/16]`` chosen by 4over6 (SPEC 5.6).

    Args:
        y: the plane's source, float32 ``[R, C]`` (C % 16 == 0), in plane orientation.
        b: the block amaxes ``[R, C/16]`` (for 16x16 blocks the tile amax on each of the tile's rows, SPEC 6.3).
        amax: the plane's amax (a number), or ``[R]`` per-row amaxes of a row-scaled plane (SPEC 5.7).
        mode: "mae" or "mse".
        domain: where the errors are measured (:data:`ERROR_DOMAINS`): "input" (SPEC 5.6's default), "product"
            (four_over_six_fast_math) or "decode" (SPEC 14.11's flashinfer variant).
        global_scale_max: G = 448 or 256, the E4M3 maximum inside S_enc.
        block: (1, 16) or (16, 16); with (16, 16) the errors are summed over the tile before the choice.
        s_enc: the plane's S_enc where it is not 5.6's from ``amax`` (SPEC 14.11's reciprocal form), else None.
    """
    block = check_block(block)
    c = block_row_candidates(y, b, amax=amax, mode=mode, domain=domain, global_scale_max=global_scale_max,
                             s_enc=s_enc)
    err4, err6 = c.err4, c.err6
    if tuple(block) == (16, 16):
        err4, err6 = tile_error_sum(err4), tile_error_sum(err6)
    pick4 = err4 < err6  # strict: a tie (and a NaN error) keeps map-to-6
    return np.where(pick4, c.bytes4, c.bytes6).astype(np.uint8), np.where(pick4, c.mult4, c.mult6).astype(np.float32)
