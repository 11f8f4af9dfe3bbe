"""Result containers of the oracle: one quantized plane, a tensor with its planes, a grouped tensor.

These are plain NumPy containers; the device API converts its CUDA results into the same classes
(`.to_oracle()`), so comparing an implementation with the oracle is comparing these fields byte for byte.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields

import numpy as np

from .checks import (
    check_block,
    check_flag,
    check_index,
    from_torch,
    host_array,
    is_real,
    is_torch,
    refuse_masked,
)
from .four_over_six import check_error_mode, check_global_scale_max
from .rht import check_rht_signs
from .scale_rules import RULES
from .swizzle import round_up, swizzle_scales

__all__ = ["GroupedNVFP4Tensor", "NVFP4Tensor", "QuantizedPlane"]


def _same(a, b) -> bool:
    """Equality as the oracle means it: arrays by dtype, shape and bytes; numbers by value (an integer whatever its
    type; a float by its float64 bits, so -0.0 is not +0.0 and a NaN equals the same NaN); containers element by
    element; anything else by ``==``."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (numbers.Number, np.generic)) and isinstance(b, (numbers.Number, np.generic)):
        if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
            return type(a) is type(b) and bool(a) == bool(b)
        if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
            return int(a) == int(b)
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class _ByteEquality:
    """``==`` on a result: the same class and every field the same (:func:`_same`: arrays byte for byte), except the
    ``options`` a call records (its keywords: a seed that round to nearest never reads, for one, changes no byte).
    Results hold arrays, so they are not hashable."""

    __hash__ = None

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self) if f.name != "options")


@dataclass(eq=False)
class QuantizedPlane(_ByteEquality):
    """One NVFP4 quantization of a 2-D matrix along its last (K-major) axis (SPEC 6).

    Attributes:
        data: uint8 ``[rows, ceil(cols/2)]``, two E2M1 codes per byte, low nibble first (SPEC 2.3).
        scales: uint8 ``[rows, ceil(cols/16)]``, compact E4M3 decode-scale bytes (SPEC 8.1).
        amax: ``np.float32`` per-tensor amax used by the scale rule (SPEC 4); for a row-scaled plane a float32
            array ``[rows]``, one amax per row (SPEC 5.7).
        shape: ``(rows, cols)`` of the quantized matrix. For a columnwise plane this is X^T with the
            token axis padded to a multiple of 16 (SPEC 6.2).
        rule: scale rule name (SPEC 5): "te", "te_fused_rht", "torchao" or "torchao_noscale".
        block: ``(1, 16)`` or ``(16, 16)`` (SPEC 6.3).
        rht: whether the plane holds the Random Hadamard Transform of its source (SPEC 7).
        valid_cols: number of columns that came from real data (the rest is the SPEC 6.2 padding).
        rht_signs: the RHT sign mask used (``None`` when unknown or without RHT).
        row_scaled: one amax (hence one S_enc) per row (SPEC 5.7).
        global_scale_max: G, the E4M3 maximum inside S_enc: 448, or 256 under 4over6 (SPEC 5.6); it enters
            dequantization (SPEC 11.1) and the GEMM's alpha (SPEC 12.1).
        four_over_six: ``None``, or the 4over6 error mode that chose the block scales, "mae" or "mse" (SPEC 5.6).
        four_over_six_fast_math: whether that error was measured in the product domain (SPEC 5.6).

    Construction checks every field and raises ``TypeError`` / ``ValueError`` naming it: ``data`` and ``scales``
    uint8 arrays (NumPy, or torch tensors copied to the host) of exactly the shapes above, ``cols`` a multiple of 16, a
    known rule and block, bool flags, an amax that is real and not negative (SPEC 4.3, 11.2), and a 4over6 mode or
    row-scaled only where TE has them (rule "te" without RHT; row-scaled with 1x16 blocks; G and the fast-math flag
    alone are not checked against the rule: a stored plane's mode may be unknown). A stored plane's bytes are never
    checked: every byte is valid (SPEC 11.2).
    """

    data: np.ndarray
    scales: np.ndarray
    amax: np.float32 | np.ndarray
    shape: tuple[int, int]
    rule: str = "te"
    block: tuple[int, int] = (1, 16)
    rht: bool = False
    valid_cols: int | None = None
    rht_signs: int | None = None
    row_scaled: bool = False
    global_scale_max: int = 448
    four_over_six: str | None = None
    four_over_six_fast_math: bool = False

    def __post_init__(self) -> None:
        rows, cols = _check_plane_shape(self.shape)
        self.shape = (rows, cols)
        if not isinstance(self.rule, str) or self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        self.block = check_block(self.block)
        self.rht = check_flag(self.rht, "rht")
        self.row_scaled = check_flag(self.row_scaled, "row_scaled")
        self.four_over_six_fast_math = check_flag(self.four_over_six_fast_math, "four_over_six_fast_math")
        self.four_over_six = check_error_mode(self.four_over_six)
        self.global_scale_max = check_global_scale_max(self.global_scale_max)
        _check_variant(self)
        self.data = _check_bytes(self.data, (rows, (cols + 1) // 2), "data", self.shape)
        self.scales = _check_bytes(self.scales, (rows, (cols + 15) // 16), "scales", self.shape)
        if self.row_scaled:
            a = host_array(self.amax)
            if not is_real(a):
                raise ValueError(f"amax must hold real numbers, got dtype {a.dtype}")
            if a.size != rows:
                raise ValueError(f"a row-scaled plane needs one amax per row ({rows}), got {a.size}")
            with np.errstate(over="ignore"):  # (SPEC 4.3: the fp32 value it rounds to, Inf past the range)
                self.amax = a.astype(np.float32).reshape(-1)
        else:
            a = host_array(self.amax)
            if not is_real(a) or a.size != 1:
                raise ValueError(f"amax must be one real number (a row-scaled plane: one per row), got {a.dtype} "
                                 f"{a.shape}")
            with np.errstate(over="ignore"):
                self.amax = np.float32(a.reshape(-1)[0])
        if np.any(self.amax < 0):  # SPEC 4.3 / 11.2: an absolute maximum (-0.0, +Inf and NaN are values it may take)
            raise ValueError(f"amax must be >= 0, +Inf or NaN (an absolute maximum), got {self.amax!r}")
        self.valid_cols = cols if self.valid_cols is None else check_index(self.valid_cols, "valid_cols")
        if self.valid_cols > cols:
            raise ValueError(f"valid_cols ({self.valid_cols}) exceeds the plane's {cols} columns")
        if self.rht_signs is not None:
            self.rht_signs = check_rht_signs(self.rht_signs, "rht_signs")

    def __repr__(self) -> str:
        amax = f"float32{list(self.amax.shape)}" if self.row_scaled else repr(float(self.amax))
        extra = "".join(f", {k}={v!r}" for k, v, default in (
            ("row_scaled", self.row_scaled, False), ("global_scale_max", self.global_scale_max, 448),
            ("four_over_six", self.four_over_six, None), ("four_over_six_fast_math", self.four_over_six_fast_math, False),
        ) if v != default)
        return (f"QuantizedPlane(shape={self.shape}, rule={self.rule!r}, block={self.block}, rht={self.rht}{extra}, "
                f"amax={amax}, data=uint8{list(self.data.shape)}, scales=uint8{list(self.scales.shape)})")

    @property
    def rows(self) -> int:
        """Rows of the quantized matrix."""
        return self.shape[0]

    @property
    def cols(self) -> int:
        """Columns of the quantized matrix (the K-major contraction axis)."""
        return self.shape[1]

    def swizzled_scales(self) -> np.ndarray:
        """The scales in the cuBLAS/CUTLASS 128x4 tiled layout, zero-padded, as a 1-D uint8 buffer (SPEC 8.2)."""
        return swizzle_scales(self.scales)

    def codes(self) -> np.ndarray:
        """Unpacked E2M1 codes ``[rows, cols]``."""
        from .fp4_numpy import unpack_fp4

        return unpack_fp4(self.data, self.cols)


def _check_plane_shape(shape) -> tuple[int, int]:
    """A plane's (rows, cols): two integers >= 0, cols a multiple of 16 (one scale per 16 elements, SPEC 6)."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be (rows, cols), got {shape!r}")
    rows, cols = check_index(shape[0], "shape's rows"), check_index(shape[1], "shape's cols")
    if cols % 16:
        raise ValueError(f"a plane's cols must be a multiple of 16 (one scale per 16 elements), got {cols}")
    return rows, cols


def _check_bytes(a, shape: tuple[int, int], name: str, plane_shape: tuple[int, int]) -> np.ndarray:
    """A plane's ``data`` or ``scales``: a uint8 NumPy array (or a torch tensor, copied to the host) of exactly
    ``shape``."""
    if is_torch(a):
        a = from_torch(a)
    refuse_masked(a, name)
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8:
        what = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(f"{name} must be a uint8 NumPy array (or torch tensor), got {what}")
    if a.shape != shape:
        raise ValueError(f"{name} of a plane of shape {plane_shape} must have shape {shape}, got {a.shape}")
    return a


def _check_variant(p: QuantizedPlane) -> None:
    """A plane with a 4over6 mode or row-scaled against its rule, block and RHT: what TE produces (SPEC 5.6, 5.7).
    G = 256 and the fast-math path need no mode here: dequantization and the GEMM read only G, and a stored plane's
    mode may be unknown (TE's tensor does not hold it)."""
    variant = "4over6" if p.four_over_six else "row_scaled" if p.row_scaled else None
    if variant and (p.rule != "te" or p.rht):
        raise ValueError(f"a {variant} plane has rule 'te' without RHT (SPEC 5.6, 5.7), got rule={p.rule!r}, "
                         f"rht={p.rht}")
    if p.row_scaled and p.block != (1, 16):
        raise ValueError(f"a row-scaled plane has 1x16 blocks (SPEC 5.7), got {p.block}")


@dataclass(eq=False)
class NVFP4Tensor(_ByteEquality):
    """The result of :func:`oracle.quantize`: a rowwise plane of X and/or a columnwise plane of X^T.

    ``shape`` is the 2-D shape ``(M, K)`` of the (flattened) input. ``row`` / ``col`` are ``None`` when
    that usage was not requested. ``options``: the keyword options of the call (rule, block, rounding, ...).

    Construction checks that each plane is a :class:`QuantizedPlane` or ``None`` and fits ``shape``: ``row`` of shape
    ``(M, K)``, ``col`` of shape ``(K, roundup(M, 16))`` (X^T, SPEC 6.2) with M valid columns where it records them.
    """

    row: QuantizedPlane | None
    col: QuantizedPlane | None
    shape: tuple[int, int]
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.shape, (tuple, list)) or len(self.shape) != 2:
            raise ValueError(f"shape must be (M, K), got {self.shape!r}")
        m, k = check_index(self.shape[0], "shape's M"), check_index(self.shape[1], "shape's K")
        self.shape = (m, k)
        for name, plane, want in (("row", self.row, (m, k)), ("col", self.col, (k, round_up(m, 16)))):
            if plane is None:
                continue
            if not isinstance(plane, QuantizedPlane):
                raise TypeError(f"{name} must be a QuantizedPlane or None, got {type(plane).__name__}")
            if plane.shape != want:
                what = "X [M, K]" if name == "row" else "X^T [K, roundup(M, 16)] (SPEC 6.2)"
                raise ValueError(f"the {name} plane of shape {plane.shape} is not the plane of {what} for shape "
                                 f"{self.shape}: expected {want}")
            if name == "col" and plane.valid_cols not in (None, m):
                raise ValueError(f"the col plane holds {plane.valid_cols} valid columns, shape's M is {m}")
        if not isinstance(self.options, dict):
            raise TypeError(f"options must be a dict, got {type(self.options).__name__}")

    def __repr__(self) -> str:
        return f"NVFP4Tensor(shape={self.shape}, row={self.row!r}, col={self.col!r})"

    def buffers(self) -> dict:
        """Every buffer a kernel writes, by name: ``row_data``, ``row_scales`` (compact), ``row_scales_swizzled``
        (SPEC 8.2, padding included), ``row_amax`` (float32 ``[1]``) and the same for ``col_``; a plane that was not
        requested is absent. A row-scaled plane's amax is float32 ``[rows]`` (SPEC 5.7)."""
        out = {}
        for name, p in (("row", self.row), ("col", self.col)):
            if p is not None:
                out.update({f"{name}_data": p.data, f"{name}_scales": p.scales,
                            f"{name}_scales_swizzled": p.swizzled_scales(),
                            f"{name}_amax": np.asarray(p.amax, np.float32).reshape(-1)})
        return out


@dataclass(eq=False)
class GroupedNVFP4Tensor(_ByteEquality):
    """The result of :func:`oracle.group_quantize` (SPEC 9).

    ``row_planes[g]`` / ``col_planes[g]`` are the per-group planes (each entry ``None`` when that plane was not
    requested; the plane's flat buffers are then ``None`` and its amaxes 0).
    The flat buffers and offsets are exactly what a device writes:

    * ``row_data``: uint8, group g at bytes ``row_data_offsets[g] .. row_data_offsets[g+1]``.
    * ``row_scales``: uint8, each group swizzled separately (SPEC 8.2), at ``row_scale_offsets``.
    * ``row_scales_compact``: uint8, each group's padded compact scales, row-major, at ``row_scale_offsets``.
    * ``col_data`` / ``col_scales`` / ``col_scales_compact`` with ``col_data_offsets`` / ``col_scale_offsets``.
    * ``row_amax`` / ``col_amax``: float32 ``[E]``; row-scaled (SPEC 5.7): ``row_amax`` is float32 ``[T]``, one per row,
      and ``col_amax`` float32 ``[E K]``, one per column of each group (group-major).
    * ``row_offsets``: int64 ``[E+1]``, prefix sum of the splits (first row of each group).
    All offsets are int64 ``[E+1]`` with a leading 0. ``splits``: the group sizes (int64 ``[E]``); ``shape``: ``(T, K)``
    of the input; ``options``: the keyword options of the call.
    """

    splits: np.ndarray
    shape: tuple[int, int]
    row_planes: list
    col_planes: list
    row_amax: np.ndarray
    col_amax: np.ndarray
    row_offsets: np.ndarray
    row_data: np.ndarray | None
    row_scales: np.ndarray | None
    row_scales_compact: np.ndarray | None
    row_data_offsets: np.ndarray
    row_scale_offsets: np.ndarray
    col_data: np.ndarray | None
    col_scales: np.ndarray | None
    col_scales_compact: np.ndarray | None
    col_data_offsets: np.ndarray
    col_scale_offsets: np.ndarray
    options: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        planes = [p for p, d in (("row", self.row_data), ("col", self.col_data)) if d is not None]
        return (f"GroupedNVFP4Tensor(shape={self.shape}, splits={self.splits.tolist()}, planes={planes}, "
                f"options={self.options})")

    @property
    def num_groups(self) -> int:
        """E, the number of groups (``splits`` entries, empty groups included)."""
        return int(self.splits.shape[0])

    def buffers(self) -> dict:
        """Every flat buffer a device writes, by name: ``row_offsets`` and, for each plane that was requested,
        ``{row,col}_data``, ``_scales`` (swizzled per group), ``_scales_compact``, ``_amax`` (float32 ``[E]``;
        row-scaled ``[T]`` and ``[E K]``), ``_data_offsets`` and ``_scale_offsets``."""
        out = {"row_offsets": self.row_offsets}
        for p in ("row", "col"):
            if getattr(self, f"{p}_data") is not None:
                for f in ("data", "scales", "scales_compact", "amax", "data_offsets", "scale_offsets"):
                    out[f"{p}_{f}"] = getattr(self, f"{p}_{f}")
                out[f"{p}_amax"] = out[f"{p}_amax"].astype(np.float32)
        return out
