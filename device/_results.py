"""Result containers of the device API and their conversion to the oracle's NumPy classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DeviceGroupedNVFP4Tensor", "DeviceNVFP4Tensor"]


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _torch_views(obj, plane: str):
    """(data, scales) of ``plane`` ("row" / "col") reinterpreted as torch's NVFP4 dtypes, without a copy."""
    import torch

    if not isinstance(plane, str) or plane not in ("row", "col"):
        raise ValueError(f"plane must be 'row' or 'col', got {plane!r}")
    data, scales = getattr(obj, f"{plane}_data"), getattr(obj, f"{plane}_scales")
    if data is None:
        raise ValueError(f"the {plane} plane was not requested at quantize time")
    return data.view(torch.float4_e2m1fn_x2), scales.view(torch.float8_e4m3fn)


def _rht_signs(options: dict) -> int:
    """The RHT sign mask a result's options record (SPEC 7.1; TE's 0xD7E8 by default), for its columnwise planes."""
    from oracle.rht import DEFAULT_RHT_SIGNS

    return int(options.get("rht_signs", DEFAULT_RHT_SIGNS))


def _variant_fields(options: dict) -> dict:
    """The QuantizedPlane fields of TE's 4over6 variant (SPEC 5.6) recorded in a result's options (defaults: plain)."""
    return dict(global_scale_max=int(options.get("global_scale_max", 448)),
                four_over_six=options.get("four_over_six"),
                four_over_six_fast_math=bool(options.get("four_over_six_fast_math", False)))


@dataclass
class DeviceNVFP4Tensor:
    """The result of :func:`device.quantize`: CUDA tensors of the rowwise plane of X and/or the columnwise
    plane of X^T (SPEC 6). Absent planes are ``None``.

    Attributes:
        shape: ``(M, K)`` of the flattened input.
        row_data: uint8 ``[M, K/2]``; row_scales: uint8, compact ``[M, K/16]`` or the swizzled 1-D buffer of
            ``roundup(M,128)*roundup(K/16,4)`` bytes (SPEC 8.2); row_amax: float32 ``[1]``.
        col_data: uint8 ``[K, Mp/2]`` with ``Mp = roundup(M,16)``; col_scales: compact ``[K, Mp/16]`` or
            swizzled 1-D; col_amax: float32 ``[1]``.
        swizzled: which scale layout the buffers hold.
        options: the quantize options (rule, block, rht, ...).
    """

    shape: tuple[int, int]
    row_data: Any = None
    row_scales: Any = None
    row_amax: Any = None
    col_data: Any = None
    col_scales: Any = None
    col_amax: Any = None
    swizzled: bool = True
    options: dict = field(default_factory=dict)

    def torch_views(self, plane: str = "row"):
        """``(data, scales)`` of the ``"row"`` or ``"col"`` plane as views (no copy) in torch's dtypes:
        ``torch.float4_e2m1fn_x2`` codes (two E2M1 codes per byte, element 2i in the low nibble, SPEC 2.3) and
        ``torch.float8_e4m3fn`` scales (in this result's scale layout: swizzled, SPEC 8.2, unless
        ``swizzled=False``). The per-tensor factor is not in the scales: it comes from the amax (SPEC 5, 11)."""
        return _torch_views(self, plane)

    def to_oracle(self):
        """Copy to the host as an :class:`oracle.planes.NVFP4Tensor` (compact scales)."""
        from oracle.planes import NVFP4Tensor, QuantizedPlane
        from oracle.swizzle import unswizzle_scales

        m, k = self.shape
        mp = (m + 15) // 16 * 16
        o = self.options
        common = dict(rule=o.get("rule", "te"), block=tuple(o.get("block", (1, 16))), **_variant_fields(o))

        def plane(data, scales, amax, rows, cols, rht, valid):
            d = _np(data).reshape(rows, cols // 2)
            s = _np(scales)
            s = unswizzle_scales(s.reshape(-1), rows, cols // 16) if self.swizzled else s.reshape(rows, cols // 16)
            return QuantizedPlane(d, s, np.float32(_np(amax).reshape(-1)[0]), (rows, cols), rht=rht,
                                  valid_cols=valid, rht_signs=_rht_signs(o) if rht else None, **common)

        row = col = None
        if self.row_data is not None:
            row = plane(self.row_data, self.row_scales, self.row_amax, m, k, False, k)
        if self.col_data is not None:
            col = plane(self.col_data, self.col_scales, self.col_amax, k, mp, bool(o.get("rht", False)), m)
        return NVFP4Tensor(row, col, (m, k), options=dict(o))

    def to_torchao(self, plane: str = "row", *, swizzled: bool | None = None, orig_dtype=None):
        """One plane as a torchao ``NVFP4Tensor`` on this result's device (:func:`oracle.interop.to_torchao`)."""
        from oracle.interop import to_torchao

        return to_torchao(self, plane, swizzled=swizzled, orig_dtype=orig_dtype)

    def to_te_fields(self, *, swizzled: bool | None = None) -> dict:
        """TransformerEngine's NVFP4 tensor fields, tensors on this result's device
        (:func:`oracle.interop.to_te_fields`)."""
        from oracle.interop import to_te_fields

        return to_te_fields(self, swizzled=swizzled)


@dataclass
class DeviceGroupedNVFP4Tensor:
    """The result of :func:`device.group_quantize` (SPEC 9): flat CUDA buffers sized for the worst case.

    Attributes:
        shape: ``(T, K)``; splits: the int64 device tensor of group sizes (as passed in).
        row_data / row_scales / col_data / col_scales: flat uint8 buffers (``None`` when not requested);
            scales are each group's swizzled layout, or its zero-padded compact layout when ``swizzled`` is False.
        row_amax / col_amax: float32 ``[E]``.
        offsets: int64 ``[6, E+1]`` device table, rows: row offsets, row tiles, row data, row scales,
            col data, col scales (each with a leading 0); see the properties below.
        swizzled: which scale layout the buffers hold; options: the quantize options (rule, block, rht, ...).
    """

    shape: tuple[int, int]
    splits: Any
    row_data: Any
    row_scales: Any
    col_data: Any
    col_scales: Any
    row_amax: Any
    col_amax: Any
    offsets: Any
    swizzled: bool = True
    options: dict = field(default_factory=dict)

    def torch_views(self, plane: str = "row"):
        """``(data, scales)`` of the ``"row"`` or ``"col"`` plane as views (no copy) in torch's dtypes:
        ``torch.float4_e2m1fn_x2`` codes (two E2M1 codes per byte, element 2i in the low nibble, SPEC 2.3) and
        ``torch.float8_e4m3fn`` scales (each group's swizzled layout at its offset, SPEC 9.2, unless
        ``swizzled=False``). The per-tensor factor is not in the scales: it comes from the amax (SPEC 5, 11)."""
        return _torch_views(self, plane)

    @property
    def row_offsets(self):
        """First row of each group, int64 [E+1] (device). Its differences are the group sizes the kernels used:
        the splits, unless they do not add up to T (SPEC 9.4)."""
        return self.offsets[0]

    @property
    def row_tile_offsets(self):
        """First 128-row tile of each group, int64 [E+1] (device): prefix sum of ceil(m_g / 128)."""
        return self.offsets[1]

    @property
    def row_data_offsets(self):
        """Byte offset of each group in ``row_data``, int64 [E+1] (device; SPEC 9.2)."""
        return self.offsets[2]

    @property
    def row_scale_offsets(self):
        """Byte offset of each group in ``row_scales``, int64 [E+1] (device; SPEC 9.2)."""
        return self.offsets[3]

    @property
    def col_data_offsets(self):
        """Byte offset of each group in ``col_data``, int64 [E+1] (device; SPEC 9.2)."""
        return self.offsets[4]

    @property
    def col_scale_offsets(self):
        """Byte offset of each group in ``col_scales``, int64 [E+1] (device; SPEC 9.2)."""
        return self.offsets[5]

    def group_plane(self, g: int, plane: str = "row"):
        """Group ``g``'s ``"row"`` or ``"col"`` plane as an :class:`oracle.planes.QuantizedPlane`, copying only that
        group's bytes to the host (a cheap look at one group of a tensor too large for :meth:`to_oracle`).

        Returns ``None`` when the plane was not produced. The sizes are those of the offsets table (SPEC 9.4)."""
        if not isinstance(plane, str) or plane not in ("row", "col"):
            raise ValueError(f"plane must be 'row' or 'col', got {plane!r}")
        offs = _np(self.offsets)
        e = offs.shape[1] - 1
        if isinstance(g, (bool, np.bool_)) or not (isinstance(g, (int, np.integer)) and 0 <= g < e):
            raise IndexError(f"group {g!r} out of range for {e} groups")
        is_col = plane == "col"
        data, scales = (self.col_data, self.col_scales) if is_col else (self.row_data, self.row_scales)
        if data is None:
            return None
        doff, soff = (offs[4], offs[5]) if is_col else (offs[2], offs[3])
        amax = _np(self.col_amax if is_col else self.row_amax).astype(np.float32)[g]
        return _group_plane(_np(data[doff[g]:doff[g + 1]]), _np(scales[soff[g]:soff[g + 1]]),
                            int(offs[0][g + 1] - offs[0][g]), self.shape[1], is_col, amax, self.swizzled,
                            self.options)

    def to_oracle(self):
        """Copy to the host as an :class:`oracle.planes.GroupedNVFP4Tensor` (buffers cut at the last offset, the scale
        layout the call wrote included, padding bytes as written; the other scale layout is formed from the groups'
        compact scales; the group sizes are those of the offsets table, i.e. the splits, or their SPEC 9.4 cut at
        T)."""
        from oracle.grouped import padded_compact
        from oracle.planes import GroupedNVFP4Tensor
        from oracle.swizzle import swizzle_scales

        t, k = self.shape
        offs = _np(self.offsets)
        splits = np.diff(offs[0]).astype(np.int64)  # the sizes used: the splits, or their SPEC 9.4 cut
        e = splits.size
        o = self.options
        row_amax = _np(self.row_amax).astype(np.float32)
        col_amax = _np(self.col_amax).astype(np.float32)

        def planes(data, scales, doff, soff, is_col, amax):
            if data is None:
                return [None] * e, None, None, None
            d_all, s_all = _np(data), _np(scales)
            out = [_group_plane(d_all[doff[g]:doff[g + 1]], s_all[soff[g]:soff[g + 1]], int(splits[g]), k, is_col,
                                amax[g], self.swizzled, o) for g in range(e)]
            cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.uint8)  # noqa: E731
            written = s_all[: soff[e]].copy()  # (its padding bytes as the device wrote them)
            swizzled = written if self.swizzled else cat([swizzle_scales(p.scales) for p in out])
            compact = cat([padded_compact(p.scales) for p in out]) if self.swizzled else written
            return out, d_all[: doff[e]].copy(), swizzled, compact

        rp, rd, rs, rsc = planes(self.row_data, self.row_scales, offs[2], offs[3], False, row_amax)
        cp, cd, cs, csc = planes(self.col_data, self.col_scales, offs[4], offs[5], True, col_amax)
        if self.row_data is None:
            row_amax = np.zeros(e, np.float32)
        if self.col_data is None:
            col_amax = np.zeros(e, np.float32)
        return GroupedNVFP4Tensor(
            splits=splits, shape=(t, k), row_planes=rp, col_planes=cp, row_amax=row_amax, col_amax=col_amax,
            row_offsets=offs[0], row_data=rd, row_scales=rs, row_scales_compact=rsc, row_data_offsets=offs[2],
            row_scale_offsets=offs[3], col_data=cd, col_scales=cs, col_scales_compact=csc,
            col_data_offsets=offs[4], col_scale_offsets=offs[5], options=dict(o),
        )


def _group_plane(d: np.ndarray, sb: np.ndarray, m: int, k: int, is_col: bool, amax, swizzled: bool, options: dict):
    """One group's plane (SPEC 9.2) from its data bytes ``d`` and scale bytes ``sb`` (swizzled, or zero-padded
    compact row-major): the rowwise plane [m, K] or the columnwise plane [K, roundup(m, 16)]."""
    from oracle.planes import QuantizedPlane
    from oracle.swizzle import unswizzle_scales

    rows, cols = (k, (m + 15) // 16 * 16) if is_col else (m, k)
    d = d.reshape(rows, cols // 2)
    if swizzled:
        s = unswizzle_scales(sb, rows, cols // 16)
    else:
        pr, pc = (rows + 127) // 128 * 128, (cols // 16 + 3) // 4 * 4
        s = sb.reshape(pr, pc)[:rows, : cols // 16].copy()
    rht = bool(options.get("rht", False)) if is_col else False
    return QuantizedPlane(d, s, amax, (rows, cols), options.get("rule", "te"), tuple(options.get("block", (1, 16))),
                          rht, valid_cols=m if is_col else k,
                          rht_signs=_rht_signs(options) if rht else None,
                          **_variant_fields(options))
