"""NVFP4 quantization of one tensor: rowwise plane of X and/or columnwise plane of X^T (SPEC 4-7, 10)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import (
    check_block,
    check_flag,
    dtype_hint,
    from_torch,
    host_array,
    is_real,
    is_torch,
    native_order,
    refuse_masked,
)
from .four_over_six import check_error_mode, check_global_scale_max, four_over_six_scales
from .fp4_numpy import encode_e2m1, pack_fp4
from .philox import sr_random_bytes
from .planes import NVFP4Tensor, QuantizedPlane
from .rht import DEFAULT_RHT_SIGNS, _rht_f32, rht_along_axis0, rht_sign_vector
from .rounding import sr_encode_e2m1
from .scale_rules import (
    RULES,
    block_amax,
    first_nan,
    global_encode_scale,
    te_block_scales,
    tensor_amax,
    torchao_block_scales,
    torchao_encode_e2m1,
    torchao_per_tensor_scale,
)
from .swizzle import round_up

__all__ = [
    "TeScaleOptions", "as_2d_f32", "block_scales", "check_options", "check_te_scale_options", "columnwise_source",
    "plane_block_amax", "planes_are_transposes", "quantize", "quantize_2d", "quantize_columnwise", "quantize_matrix",
    "row_amaxes",
]

_ROUNDINGS = ("rn", "sr")
ROW_PLANE, COL_PLANE = 0, 1


def as_2d_f32(x) -> tuple[np.ndarray, bool]:
    """Validate the input and flatten it to 2-D float32 on its last dimension.

    Returns ``(x2d_f32, is_bf16)``. Accepts float32, float16 and ml_dtypes.bfloat16 arrays only.
    """
    if is_torch(x):
        x = from_torch(x)
    if isinstance(x, np.generic):
        raise TypeError(f"x must be an array of at least one dimension, got a NumPy scalar ({type(x).__name__}); "
                        "quantize a block of 16 values at least, e.g. np.full(16, x)")
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a NumPy array of float32, float16 or bfloat16, got {type(x).__name__}")
    refuse_masked(x, "x")
    x = native_order(x)
    if x.dtype not in (np.float32, np.float16) and x.dtype.name != "bfloat16":
        raise TypeError(f"x must be float32, float16 or ml_dtypes.bfloat16, got dtype {x.dtype}{dtype_hint(x.dtype)}")
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    k = x.shape[-1]
    if k % 16:
        raise ValueError(f"the last dimension K={k} must be a multiple of 16 (one E4M3 scale per 16 elements)")
    rows = int(np.prod(x.shape[:-1])) if x.ndim > 1 else 1
    x2 = x.reshape(rows, k) if x.ndim != 2 else x
    return np.ascontiguousarray(x2, dtype=np.float32), x.dtype.name == "bfloat16"


def planes_are_transposes(block, rounding: str, rht: bool, four_over_six: str | None) -> bool:
    """Whether a tensor's columnwise plane holds its rowwise plane's codes and scales transposed (SPEC 6.3): 16x16
    blocks, round to nearest, no RHT (SPEC 7) and no 4over6 (whose tile error sums differ per plane, SPEC 5.6), with
    one amax for both planes (computed, SPEC 4.2, or one supplied value; a supplied (row, col) pair that differs
    gives the planes different S_enc)."""
    return check_block(block) == (16, 16) and rounding == "rn" and not rht and not four_over_six


def check_options(*, rowwise, columnwise, rht, rht_signs, block, rule, rounding, seed, offset, is_bf16) -> tuple:
    """Validate the quantize options; returns the block shape as a tuple."""
    for name, v in (("rowwise", rowwise), ("columnwise", columnwise), ("rht", rht)):
        check_flag(v, name)
    if not (rowwise or columnwise):
        raise ValueError("at least one of rowwise / columnwise must be requested")
    if not isinstance(rule, str) or rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    block = check_block(block)
    if not isinstance(rounding, str) or rounding not in _ROUNDINGS:
        raise ValueError(f"rounding must be 'rn' or 'sr', got {rounding!r}")
    for name, v in (("rht_signs", rht_signs), ("seed", seed), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {v!r}")
    rht_sign_vector(rht_signs)  # validates the mask
    if rht and not columnwise:
        raise ValueError("rht=True applies to the columnwise plane; request columnwise=True")
    if rht and not is_bf16:
        raise TypeError("rht=True needs bfloat16 input (TE's RHT is defined on bf16, SPEC 7.3)")
    if not (0 <= int(seed) < 2**64):
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not (0 <= int(offset) < 2**32):
        raise ValueError(f"offset must be in [0, 2**32), got {offset}")
    return block


@dataclass(frozen=True)
class TeScaleOptions:
    """TE's scale-selection variants of rule "te" (SPEC 5.6, 5.7); the defaults are plain rule "te".

    Attributes:
        four_over_six: ``None`` or the 4over6 error mode, "mae" or "mse" (SPEC 5.6).
        four_over_six_fast_math: the 4over6 error in the product domain (SPEC 5.6).
        global_scale_max: G, the E4M3 maximum inside S_enc: 448, or 256 with 4over6 (SPEC 5.6).
        row_scaled: one amax per row of each plane (SPEC 5.7).
    """

    four_over_six: str | None = None
    four_over_six_fast_math: bool = False
    global_scale_max: int = 448
    row_scaled: bool = False

    def plane_fields(self) -> dict:
        """The :class:`QuantizedPlane` fields that record these options."""
        return dict(row_scaled=self.row_scaled, global_scale_max=self.global_scale_max,
                    four_over_six=self.four_over_six, four_over_six_fast_math=self.four_over_six_fast_math)


PLAIN_TE = TeScaleOptions()


def check_te_scale_options(
    *, four_over_six, four_over_six_fast_math, global_scale_max, row_scaled, rht, block, rule, rounding,
) -> TeScaleOptions:
    """Validate the 4over6 / row-scaled options against the others (what TE supports, SPEC 5.6, 5.7)."""
    four_over_six = check_error_mode(four_over_six)
    for name, v in (("four_over_six_fast_math", four_over_six_fast_math), ("row_scaled", row_scaled)):
        check_flag(v, name)
    global_scale_max = check_global_scale_max(global_scale_max)
    variant = "4over6" if four_over_six else "row_scaled" if row_scaled else None
    if four_over_six_fast_math and not four_over_six:
        raise ValueError("four_over_six_fast_math=True selects 4over6's error path: give four_over_six='mae' or 'mse'")
    if global_scale_max != 448 and not four_over_six:
        raise ValueError("global_scale_max=256 is defined only with 4over6 (four_over_six='mae' or 'mse'), as in TE; "
                         "the other rules use 448 (SPEC 5.1)")
    if variant:
        if rule != "te":
            raise ValueError(f"{variant} is defined for rule 'te' only (TE's kernels), got rule={rule!r}")
        if rounding != "rn":
            raise ValueError(f"{variant} supports rounding='rn' only (TE has no stochastic rounding there)")
        if rht and four_over_six:
            raise ValueError("4over6 does not support rht=True (TE's recipe refuses it: 'NVFP4 4over6 quantization "
                             "does not support RHT'; SPEC 5.6)")
        if rht:
            raise ValueError("row_scaled does not combine with rht=True (TE refuses it: 'Row-scaled NVFP4 quantization "
                             "does not support RHT'; SPEC 5.7)")
    if row_scaled and tuple(block) != (1, 16):
        raise ValueError("row_scaled supports 1x16 blocks only (TE refuses 2D quantization with it)")
    return TeScaleOptions(four_over_six, bool(four_over_six_fast_math), int(global_scale_max), bool(row_scaled))


def row_amaxes(x2: np.ndarray, axis: int = 1) -> np.ndarray:
    """One amax per row (``axis=1``: float32 ``[M]``) or per column (``axis=0``: ``[K]``, the rows of the columnwise
    plane) of a float32 matrix, NaN-ignoring (SPEC 5.7 with 4.1's TE rule; 0 where there is no value)."""
    return block_amax(np.abs(x2), "te", axis=axis)


def plane_block_amax(y: np.ndarray, *, block: tuple, rule: str) -> np.ndarray:
    """Per-block amax ``[R, C/16]`` of a float32 matrix ``y`` ``[R, C]`` (C % 16 == 0) along its rows (SPEC 5.2, 5.4,
    6.3): 1x16 blocks, or 16x16 tiles (rows past R count as zeros) repeated over their 16 rows; NaN-propagating under
    the torchao rules, NaN-ignoring under the te rules (SPEC 4.1)."""
    a = np.abs(y)
    rows, cols = a.shape
    nb = cols // 16
    if block == (1, 16):
        return block_amax(a.reshape(rows, nb, 16), rule, axis=-1)
    rp = round_up(rows, 16)
    if rp != rows:
        a = np.concatenate([a, np.zeros((rp - rows, cols), np.float32)], axis=0)
    tiles = block_amax(a.reshape(rp // 16, 16, nb, 16), rule, axis=(1, 3))
    return np.repeat(tiles, 16, axis=0)[:rows]


def block_scales(
    y: np.ndarray, *, amax, rule: str, block: tuple, options: TeScaleOptions = PLAIN_TE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-block amax, E4M3 scale bytes and fp32 encode multipliers of a float32 matrix (SPEC 5, 6.3).

    ``options``: 4over6 (SPEC 5.6) and row-scaled (SPEC 5.7, ``amax`` then one value per row) variants of rule "te".
    Returns ``(block_amax, scale_bytes, multipliers)``, each ``[R, C/16]``.
    """
    b = plane_block_amax(y, block=block, rule=rule)
    if options.four_over_six:
        return (b, *four_over_six_scales(y, b, amax=amax, mode=options.four_over_six,
                                         domain="product" if options.four_over_six_fast_math else "input",
                                         global_scale_max=options.global_scale_max, block=block))
    if options.row_scaled:
        s_enc = global_encode_scale(np.asarray(amax, np.float32).reshape(-1, 1), rule)
        return (b, *te_block_scales(b, s_enc))
    return (b, *_rule_scales(b, amax, rule))


def _rule_scales(b: np.ndarray, amax, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Scale bytes and multipliers from block amaxes (elementwise, any layout) by the rule (SPEC 5)."""
    if rule in ("te", "te_fused_rht"):
        return te_block_scales(b, global_encode_scale(amax, rule))
    if rule == "torchao":
        return torchao_block_scales(b, torchao_per_tensor_scale(amax))
    return torchao_block_scales(b, None)


def quantize_matrix(
    y: np.ndarray,
    *,
    amax: np.float32,
    rule: str,
    block: tuple,
    rounding: str,
    seed: int,
    offset: int,
    plane: int,
    options: TeScaleOptions = PLAIN_TE,
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a float32 matrix ``[R, C]`` (C % 16 == 0) along its rows. Returns (packed data, scale bytes).

    SPEC 5.2 (te rules; 5.6 4over6, 5.7 row-scaled) or 5.4/5.5 (torchao rules) per 16-block, then SPEC 3.1/3.5 (RN)
    or 3.4 + 10 (SR).
    """
    rows, cols = y.shape
    nb = cols // 16
    _, sbytes, mult = block_scales(y, amax=amax, rule=rule, block=block, options=options)
    with np.errstate(invalid="ignore", over="ignore"):
        # multiplier first: for the torchao rules a NaN product carries the multiplier's payload, as torch's CPU
        # kernel forms it (SPEC 3.5)
        m3 = mult[:, :, None]
        scaled = first_nan(m3, m3 * y.reshape(rows, nb, 16)).reshape(rows, cols)
    rb = sr_random_bytes(rows, cols, seed=int(seed), offset=int(offset), plane=plane) if rounding == "sr" else None
    return pack_fp4(_encode(scaled, rule, rb)), sbytes


def _encode(scaled: np.ndarray, rule: str, random_bytes) -> np.ndarray:
    """E2M1 codes of the scaled values: SPEC 3.1 / 3.5 (RN) or 3.4 (SR with the given random bytes)."""
    if random_bytes is not None:
        if rule.startswith("torchao"):
            with np.errstate(invalid="ignore"):
                scaled = np.clip(scaled, np.float32(-6.0), np.float32(6.0))
        return sr_encode_e2m1(scaled, random_bytes)
    if rule.startswith("torchao"):
        return torchao_encode_e2m1(scaled)
    return encode_e2m1(scaled)


def _token_blocks_source(x2: np.ndarray, rht: bool, rht_signs: int) -> np.ndarray:
    """X zero-padded to [roundup(M,16), K], RHT'd along the token axis if asked: the columnwise plane's
    source kept in X's layout (the plane is its transpose, SPEC 6.2, 7.3)."""
    m, k = x2.shape
    mp = int(round_up(m, 16))
    if mp == m and not rht:
        return x2
    y = np.zeros((mp, k), np.float32)
    y[:m] = x2
    if rht and y.size:
        y = rht_along_axis0(y, rht_signs)
    return y


def quantize_columnwise(
    x2: np.ndarray, *, rht: bool, rht_signs: int, amax, rule: str, block: tuple, rounding: str, seed: int, offset: int,
    options: TeScaleOptions = PLAIN_TE,
) -> QuantizedPlane:
    """The columnwise plane of X (SPEC 6.2), computed in X's layout and transposed at the end (same bytes as
    quantizing :func:`columnwise_source` row by row; only the codes and scale bytes are transposed). Under 4over6 it
    quantizes :func:`columnwise_source` itself (its error sums run along the rows of X^T, SPEC 5.6). Row-scaled
    (SPEC 5.7): ``amax`` holds one value per row of the plane, i.e. per column of X (``K`` values)."""
    m, k = x2.shape
    if options.four_over_six:
        xt = columnwise_source(x2, False, 0)
        if amax is None:
            amax = tensor_amax(xt, rule)
        data, sbytes = quantize_matrix(xt, amax=amax, rule=rule, block=block, rounding=rounding, seed=seed,
                                       offset=offset, plane=COL_PLANE, options=options)
        return QuantizedPlane(data, sbytes, amax, xt.shape, rule, block, False, valid_cols=m, **options.plane_fields())
    y = _token_blocks_source(x2, rht, rht_signs)
    mp = y.shape[0]
    if amax is None:
        amax = tensor_amax(y, rule)
    y3 = y.reshape(mp // 16, 16, k)
    a3 = np.abs(y3)
    if block == (1, 16):
        b = block_amax(a3, rule, axis=1)  # [Mp/16, K]
    else:
        tiles = block_amax(a3.reshape(mp // 16, 16, k // 16, 16), rule, axis=(1, 3))
        b = np.repeat(tiles, 16, axis=1)
    if options.row_scaled:  # plane row k (X's column k) has its own S_enc: b's column k here
        sbytes, mult = te_block_scales(b, global_encode_scale(np.asarray(amax, np.float32).reshape(1, k), rule))
    else:
        sbytes, mult = _rule_scales(b, amax, rule)
    with np.errstate(invalid="ignore", over="ignore"):
        m3 = mult[:, None, :]
        scaled = first_nan(m3, m3 * y3).reshape(mp, k)  # the multiplier first, as the rowwise plane (SPEC 3.5)
    rb = None
    if rounding == "sr":
        rb = np.ascontiguousarray(sr_random_bytes(k, mp, seed=int(seed), offset=int(offset), plane=COL_PLANE).T)
    codes = _encode(scaled, rule, rb)  # [Mp, K]: token t, feature k
    # pack tokens 2j (low nibble) and 2j+1 (high nibble) in X's layout, then transpose the packed bytes
    packed = (codes[0::2] & 0x0F) | (codes[1::2] << 4)
    data = np.ascontiguousarray(packed.T)
    return QuantizedPlane(data, np.ascontiguousarray(sbytes.T), amax, (k, mp), rule, block, rht, valid_cols=m,
                          rht_signs=int(rht_signs) if rht else None, row_scaled=options.row_scaled)


def columnwise_source(x2: np.ndarray, rht: bool, rht_signs: int) -> np.ndarray:
    """X^T zero-padded to [K, roundup(M,16)], with the RHT if asked: the columnwise plane's source (SPEC 6.2, 7.3)."""
    m, k = x2.shape
    mp = int(round_up(m, 16))
    xt = np.zeros((k, mp), np.float32)
    xt[:, :m] = x2.T
    if rht and xt.size:
        xt = _rht_f32(xt, rht_signs)
    return xt


def _amax_value(v, what: str) -> np.float32:
    """One supplied amax (SPEC 4.3): a real number >= 0, +Inf or NaN; a number, a 0-d array or a one-element torch
    tensor (as device.quantize takes a one-element device tensor, e.g. a result's amax)."""
    a = host_array(v)
    if is_torch(v) and a.size == 1:
        a = a.reshape(())
    if a.ndim != 0 or not is_real(a):
        raise ValueError(f"{what} must be a single real number (a number, 0-d array or one-element torch tensor), "
                         f"got {v!r}")
    with np.errstate(over="ignore"):  # (a value past fp32's range rounds to Inf, SPEC 4.3)
        f = np.float32(a)
    if f < 0:
        raise ValueError(f"{what} must be >= 0 (an absolute maximum), got {float(f)}")
    return f


def _per_row_amax(a, rows: int, what: str) -> np.ndarray:
    """One plane's supplied row-scaled amaxes (SPEC 5.7, 4.3): ``rows`` real values, each >= 0, +Inf or NaN."""
    a = host_array(a)
    if not is_real(a) or a.shape != (rows,):
        raise ValueError(f"{what} must hold one real number per row of the plane ({rows}), got {a.dtype} {a.shape}")
    with np.errstate(over="ignore"):
        a = a.astype(np.float32)
    if np.any(a < 0):
        raise ValueError(f"{what} must be >= 0 (absolute maxima)")
    return a


def row_scaled_amaxes(amax, m: int, k: int, rowwise: bool, columnwise: bool) -> tuple:
    """A supplied row-scaled amax (SPEC 5.7) as ``(row_amaxes [M] | None, col_amaxes [K] | None)``: ``None``, the
    one plane's values when one plane is requested (M for the rowwise plane, K for the columnwise plane: one per
    column of X), or a ``(row_amaxes, col_amaxes)`` pair when both are."""
    if amax is None:
        return None, None
    if rowwise and columnwise:
        if not isinstance(amax, (tuple, list)) or len(amax) != 2:
            raise ValueError(f"a row-scaled amax for both planes is a (row_amaxes, col_amaxes) pair of {m} and {k} "
                             "values (one per row of each plane)")
        return (_per_row_amax(amax[0], m, "a row-scaled row_amaxes"),
                _per_row_amax(amax[1], k, "a row-scaled col_amaxes (one per column of X)"))
    if rowwise:
        return _per_row_amax(amax, m, "a row-scaled amax"), None
    return None, _per_row_amax(amax, k, "a row-scaled columnwise amax (one per column of X)")


def _split_amax(amax) -> tuple:
    """``None``, one number for both planes, or a (row, col) pair (tuple, list or 2-element array)."""
    if amax is None:
        return None, None
    if isinstance(amax, (tuple, list)) or (isinstance(amax, np.ndarray) and amax.ndim == 1):
        if len(amax) != 2:
            raise ValueError("amax must be a number, a one-element torch tensor or a (row_amax, col_amax) pair")
        return _amax_value(amax[0], "row amax"), _amax_value(amax[1], "col amax")
    v = _amax_value(amax, "amax")
    return v, v


def quantize_2d(
    x2: np.ndarray,
    *,
    rowwise: bool,
    columnwise: bool,
    rht: bool,
    rht_signs: int,
    block: tuple,
    rule: str,
    amax,
    rounding: str,
    seed: int,
    offset: int,
    options: TeScaleOptions = PLAIN_TE,
) -> NVFP4Tensor:
    """:func:`quantize` on an already validated float32 matrix (options already checked)."""
    m, k = x2.shape
    if options.row_scaled:  # SPEC 5.7: one amax per row of each plane
        row_amax_in, col_amax_in = row_scaled_amaxes(amax, m, k, rowwise, columnwise)
        row_amax = row_amax_in if row_amax_in is not None else row_amaxes(x2)
        col_amax = col_amax_in if col_amax_in is not None else row_amaxes(x2, axis=0)
    else:
        row_amax_in, col_amax_in = _split_amax(amax)
        row_amax = row_amax_in if row_amax_in is not None else tensor_amax(x2, rule)
        # SPEC 4.2: without RHT the rowwise amax serves both planes; with RHT it is computed on the plane
        col_amax = col_amax_in if col_amax_in is not None else (None if rht else row_amax)
    common = dict(rule=rule, block=block, rounding=rounding, seed=seed, offset=offset, options=options)
    row = col = None
    if rowwise:
        data, scales = quantize_matrix(x2, amax=row_amax, plane=ROW_PLANE, **common)
        row = QuantizedPlane(data, scales, row_amax, (m, k), rule, block, False, **options.plane_fields())
    if columnwise:
        col = quantize_columnwise(x2, rht=rht, rht_signs=rht_signs, amax=col_amax, **common)
    return NVFP4Tensor(row, col, (m, k))


def quantize(
    x,
    *,
    rowwise: bool = True,
    columnwise: bool = False,
    rht: bool = False,
    rht_signs: int = DEFAULT_RHT_SIGNS,
    block=(1, 16),
    rule: str = "te",
    amax=None,
    rounding: str = "rn",
    seed: int = 0,
    offset: int = 0,
    four_over_six: str | None = None,
    four_over_six_fast_math: bool = False,
    global_scale_max: int = 448,
    row_scaled: bool = False,
) -> NVFP4Tensor:
    """Quantize ``x`` to NVFP4 exactly as SPEC.md defines it.

    Args:
        x: float32 / float16 / ml_dtypes.bfloat16 array (either byte order; or a torch tensor of those dtypes,
            copied to the host), 2-D or N-D (flattened to 2-D on the last dim); the last dimension K must be a
            multiple of 16.
        rowwise: produce the rowwise plane of X (``.row``), shape [M, K].
        columnwise: produce the columnwise plane of X^T (``.col``), shape [K, roundup(M, 16)] (SPEC 6.2).
        rht: apply the 16-point Random Hadamard Transform to the columnwise plane (bf16 input only, SPEC 7).
        rht_signs: 16-bit sign mask of the RHT (bit i set <=> sign -1), default TE's 0xD7E8.
        block: (1, 16) or (16, 16) scale blocks (SPEC 6.3); also "1x16" / "16x16".
        rule: "te" (default), "te_fused_rht", "torchao", "torchao_noscale" (SPEC 5).
        amax: None (computed, SPEC 4), a number for both planes (a one-element torch tensor, such as a device
            result's amax, counts as one), or a (row_amax, col_amax) pair; with ``row_scaled``, None, M values (the
            rowwise plane alone), K values (the columnwise plane alone: one per column of X) or a (row_amaxes,
            col_amaxes) pair of M and K values.
        rounding: "rn" (round to nearest even) or "sr" (stochastic, SPEC 3.4).
        seed, offset: Philox key and counter offset for "sr" (SPEC 10.2).
        four_over_six: None, "mae" or "mse": TE's 4over6 block-scale selection (SPEC 5.6; rule "te", rounding "rn",
            no RHT).
        four_over_six_fast_math: measure the 4over6 error in the product domain (SPEC 5.6).
        global_scale_max: 448, or 256 with 4over6: the E4M3 maximum inside S_enc (SPEC 5.6).
        row_scaled: one amax per row of each plane: per row of X (rowwise) and per column of X (columnwise)
            (SPEC 5.7; rule "te", 1x16 blocks, no RHT).
    Returns:
        :class:`oracle.planes.NVFP4Tensor`.
    """
    x2, is_bf16 = as_2d_f32(x)
    block = check_options(
        rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block, rule=rule,
        rounding=rounding, seed=seed, offset=offset, is_bf16=is_bf16,
    )
    rowwise, columnwise, rht = bool(rowwise), bool(columnwise), bool(rht)
    options = check_te_scale_options(
        four_over_six=four_over_six, four_over_six_fast_math=four_over_six_fast_math,
        global_scale_max=global_scale_max, row_scaled=row_scaled, rht=rht, block=block, rule=rule, rounding=rounding,
    )
    t = quantize_2d(
        x2, rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block, rule=rule,
        amax=amax, rounding=rounding, seed=int(seed), offset=int(offset), options=options,
    )
    t.options = dict(rht=rht, rht_signs=rht_signs, block=block, rule=rule, rounding=rounding, seed=seed, offset=offset,
                     **options.plane_fields())
    return t
