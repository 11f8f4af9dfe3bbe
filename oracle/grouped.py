"""Grouped (MoE) quantization: per-group planes plus the flat device buffers and offsets (SPEC 9)."""

from __future__ import annotations

import numpy as np

from .checks import check_index, host_array, is_real
from .planes import GroupedNVFP4Tensor
from .quantize import as_2d_f32, check_options, check_te_scale_options, quantize_2d
from .rht import DEFAULT_RHT_SIGNS
from .swizzle import grouped_scale_offsets, padded_scale_shape, swizzle_scales

__all__ = ["check_splits", "cut_splits", "group_quantize", "grouped_capacities", "padded_compact", "split_sizes"]


def split_sizes(splits, experts: int | None = None) -> np.ndarray:
    """``splits`` as a non-empty 1-D integer array (its values unchecked), of ``experts`` entries when given:
    ``TypeError`` for anything that is not integers (a string, floats, a bool among them), then ``ValueError`` for
    another shape."""
    if isinstance(splits, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in splits):
        raise TypeError(f"splits must be integers, got {list(splits)!r}")
    s = np.asarray(splits)
    if s.size and s.dtype.kind not in "iu":
        raise TypeError(f"splits must be integers, got dtype {s.dtype}")
    if experts is not None and (s.ndim != 1 or s.size != experts):
        raise ValueError(f"splits must be 1-D with one size per expert (E={experts}), got shape {s.shape}")
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"splits must be a non-empty 1-D sequence of group sizes, got shape {s.shape}")
    return s


def check_splits(splits, total_rows: int, what: str = "x") -> np.ndarray:
    """Validate group sizes: 1-D integers >= 0 that add up to the number of rows of ``what`` (the tensor the
    messages name). Returns int64."""
    s = split_sizes(splits)
    if np.any(s < 0):
        raise ValueError(f"splits must be >= 0, got {s.tolist()}")
    # a size above T cannot be part of a valid split, and refusing it first keeps the int64 sum from wrapping
    if np.any(s > total_rows):
        raise ValueError(f"splits add up to {sum(int(v) for v in s)} but {what} has {total_rows} rows")
    s = s.astype(np.int64)
    if int(s.sum()) != total_rows:
        hint = ""
        if s.size > 1 and s[-1] == total_rows and np.all(np.diff(s) >= 0):
            hint = " (these look like cumulative offsets: splits are group sizes, e.g. np.diff(offsets, prepend=0))"
        raise ValueError(f"splits add up to {int(s.sum())} but {what} has {total_rows} rows{hint}")
    return s


def cut_splits(splits, total_rows: int) -> np.ndarray:
    """The group sizes a graph-safe device uses for splits that need not add up to T (SPEC 9.4): negative sizes
    count as 0 and the groups are cut at row ``total_rows``. Equal to the splits when they are valid (9.1)."""
    total_rows = check_index(total_rows, "total_rows")
    s = split_sizes(splits)
    # each size clamped to [0, T] first (SPEC 9.4: the same groups, and no int64 overflow for huge sizes)
    clamped = np.clip(s, 0, int(total_rows)).astype(np.int64)
    hi = np.minimum(np.cumsum(clamped), int(total_rows))
    return np.diff(hi, prepend=np.int64(0))


def _group_amax(amax, e: int) -> list:
    """Per-group supplied amax (SPEC 4.3): None, E values, an [E, 2] array of (row, col) pairs, or a pair of
    E-value arrays (a tuple). Every value must be >= 0, +Inf or NaN."""
    if amax is None:
        return [None] * e
    if isinstance(amax, tuple):
        if len(amax) != 2:
            raise ValueError("a tuple amax must be (row_amaxes, col_amaxes)")
        parts = [host_array(a) for a in amax]
        if e > 1 and all(a.ndim == 0 for a in parts):
            raise ValueError(f"a tuple amax is (row_amaxes, col_amaxes), each with one value per group ({e}); got two "
                             "numbers: for one amax per group for both planes pass a list or an array")
        for name, a in zip(("row_amaxes", "col_amaxes"), parts, strict=True):
            if not is_real(a) or a.size != e:
                raise ValueError(f"amax's {name} must hold one real number per group ({e}), got {a.dtype} {a.shape}")
        with np.errstate(over="ignore"):
            pairs = np.stack([a.astype(np.float32).reshape(-1) for a in parts], axis=1)
    else:
        a = host_array(amax)
        if not is_real(a):
            raise ValueError(f"amax must hold real numbers, got dtype {a.dtype}")
        with np.errstate(over="ignore"):
            a = a.astype(np.float32)
        pairs = a if a.ndim == 2 else None
        if a.ndim == 1:
            pairs = np.stack([a, a], axis=1)
        if pairs is None or pairs.shape[1] != 2:
            raise ValueError(f"amax must have shape [E] or [E, 2], got {a.shape}")
    if pairs.shape[0] != e:
        raise ValueError(f"amax must have one value (or pair) per group ({e}), got {pairs.shape[0]}")
    if np.any(pairs < 0):
        raise ValueError("amax values must be >= 0 (absolute maxima)")
    return [(pairs[g, 0], pairs[g, 1]) for g in range(e)]


def _row_scaled_group_amax(amax, row_offsets: np.ndarray, k: int, rowwise: bool, columnwise: bool) -> list:
    """Per-group slices of a supplied row-scaled amax (SPEC 5.7, 9.1), each in :func:`oracle.quantize`'s form for
    that group: None; T values (one per row: the rowwise plane alone); E K values, flat or [E, K] (one per column of
    each group: the columnwise plane alone); or a (row_amaxes, col_amaxes) pair (tuple or list) of both."""
    e = row_offsets.size - 1
    if amax is None:
        return [None] * e
    t = int(row_offsets[-1])

    def rows(a):
        a = host_array(a)
        if not is_real(a) or a.shape != (t,):
            raise ValueError(f"a row-scaled amax must hold one real number per row ({t}), got {a.dtype} {a.shape}")
        return [a[row_offsets[g] : row_offsets[g + 1]] for g in range(e)]

    def cols(a):
        a = host_array(a)
        if not is_real(a) or a.shape not in ((e * k,), (e, k)):
            raise ValueError(f"a row-scaled columnwise amax must hold one real number per column of each group (E K = "
                             f"{e} x {k}, flat or [E, K]), got {a.dtype} {a.shape}")
        return list(a.reshape(e, k))

    if rowwise and columnwise:
        if not isinstance(amax, (tuple, list)) or len(amax) != 2:
            raise ValueError(f"a row-scaled amax for both planes is a (row_amaxes, col_amaxes) pair of {t} and "
                             f"{e} x {k} values")
        return list(zip(rows(amax[0]), cols(amax[1]), strict=True))
    return rows(amax) if rowwise else cols(amax)


def grouped_capacities(total_rows: int, cols: int, num_groups: int) -> dict:
    """Worst-case byte sizes of the grouped buffers over all splits of ``total_rows`` into ``num_groups``
    groups (SPEC 9.3): what a device allocates without knowing the splits. Keys: ``row_data``, ``row_scale``,
    ``col_data``, ``col_scale``."""
    t, k, e = (check_index(v, n, lo=None) for v, n in ((total_rows, "total_rows"), (cols, "cols"),
                                                          (num_groups, "num_groups")))
    if t < 0 or e < 1 or k < 0 or k % 16:
        raise ValueError(f"need total_rows >= 0, num_groups >= 1 and K a multiple of 16, got {t}, {e}, {k}")
    kb4 = (k // 16 + 3) // 4 * 4
    def units(q: int) -> int:  # W(q): the largest sum of ceil(m_g / q) over the splits, at least E units
        return e + max(t - e, 0) // q

    return {
        "row_data": t * k // 2,
        "row_scale": 128 * units(128) * kb4,
        "col_data": k * 16 * units(16) // 2,
        "col_scale": (k + 127) // 128 * 128 * 4 * units(64),
    }


def padded_compact(scales: np.ndarray) -> np.ndarray:
    """Compact scales zero-padded to [roundup(rows,128), roundup(C,4)], flattened row-major (SPEC 9.2)."""
    r, c = padded_scale_shape(*scales.shape)
    out = np.zeros((r, c), np.uint8)
    out[: scales.shape[0], : scales.shape[1]] = scales
    return out.reshape(-1)


def _concat(parts: list) -> np.ndarray:
    return np.concatenate([p.reshape(-1) for p in parts]) if parts else np.zeros(0, np.uint8)


def group_quantize(
    x,
    splits,
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
) -> GroupedNVFP4Tensor:
    """Quantize the row groups of ``x`` ([T, K]) separately, each with its own amax (SPEC 9).

    ``splits``: group sizes m_g (any value >= 0, summing to T). Group g is exactly
    ``quantize(x[rows of g], ..., offset=(offset + g) % 2**32)`` (the SR stream of group g, SPEC 10.2).
    ``amax``: None, E per-group values for both planes, an [E, 2] array of (row, col) pairs, or a tuple
    (row_amaxes, col_amaxes); with ``row_scaled`` (SPEC 5.7), None, T values (one per row: the rowwise plane alone),
    E K values (flat or [E, K], one per column of each group: the columnwise plane alone) or a (row_amaxes,
    col_amaxes) pair of both.
    The other keywords (``rowwise``, ``columnwise``, ``rht``, ``rht_signs``, ``block``, ``rule``, ``rounding``,
    ``seed``, 4over6 (SPEC 5.6), ``row_scaled`` (SPEC 5.7)) as in :func:`oracle.quantize`. Returns a
    :class:`GroupedNVFP4Tensor`: the flat buffers a device writes (SPEC 9.2; :meth:`GroupedNVFP4Tensor.buffers`) and
    each group's planes.
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
    m = check_splits(splits, x2.shape[0])
    e = m.size
    k = x2.shape[1]
    offs = grouped_scale_offsets(m, k)
    amax_g = (_row_scaled_group_amax(amax, offs["row_offsets"], k, rowwise, columnwise) if options.row_scaled
              else _group_amax(amax, e))
    row_planes, col_planes = [], []
    for g in range(e):
        xg = x2[offs["row_offsets"][g] : offs["row_offsets"][g + 1]]
        t = quantize_2d(
            xg, rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block, rule=rule,
            amax=amax_g[g], rounding=rounding, seed=int(seed), offset=(int(offset) + g) & 0xFFFFFFFF, options=options,
        )
        row_planes.append(t.row)
        col_planes.append(t.col)

    def amaxes(planes):
        if planes[0] is not None and planes[0].row_scaled:  # SPEC 5.7: one amax per plane row, in group order
            return _concat([p.amax for p in planes]).astype(np.float32)
        return np.array([p.amax if p is not None else 0 for p in planes], np.float32)  # (E zeros: not requested)

    row_amax, col_amax = amaxes(row_planes), amaxes(col_planes)
    return GroupedNVFP4Tensor(
        splits=m,
        shape=x2.shape,
        row_planes=row_planes,
        col_planes=col_planes,
        row_amax=row_amax,
        col_amax=col_amax,
        row_offsets=offs["row_offsets"],
        row_data=_concat([p.data for p in row_planes]) if rowwise else None,
        row_scales=_concat([swizzle_scales(p.scales) for p in row_planes]) if rowwise else None,
        row_scales_compact=_concat([padded_compact(p.scales) for p in row_planes]) if rowwise else None,
        row_data_offsets=offs["row_data"],
        row_scale_offsets=offs["row_scale"],
        col_data=_concat([p.data for p in col_planes]) if columnwise else None,
        col_scales=_concat([swizzle_scales(p.scales) for p in col_planes]) if columnwise else None,
        col_scales_compact=_concat([padded_compact(p.scales) for p in col_planes]) if columnwise else None,
        col_data_offsets=offs["col_data"],
        col_scale_offsets=offs["col_scale"],
        options=dict(rht=rht, rht_signs=rht_signs, block=block, rule=rule, rounding=rounding, seed=seed, offset=offset,
                     **options.plane_fields()),
    )
