"""Comparison of a backend's outputs with the reference, and the location of the first differing bytes.

``bytes`` mode: every buffer byte for byte (same dtype, same shape). ``bound`` mode (GEMMs): SPEC 12.4,
``oracle.within_bound`` against the exact model. ``rht`` mode: bit-exact where the fp32 butterfly of SPEC 7.2
is exact, within a proven tolerance elsewhere. A mismatch names its location as (op, group, plane, row,
block, nibble) with both values decoded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np

import oracle
from oracle.fp4_numpy import E2M1_VALUES, decode_e4m3

from .cases import Case
from .ops import MMA_OPS

__all__ = ["Mismatch", "compare", "describe_mismatches"]


@dataclass
class Mismatch:
    """The first difference in one output buffer.

    ``where``: the location (op, buffer, group, plane, row, block, nibble / element), ``ref`` / ``got``: the
    decoded values there of the reference and of the backend under test, ``ref_name`` / ``got_name``: whose they
    are (``oracle`` and the backend's name), ``count``: how many bytes (or elements) of that buffer differ.
    """

    buffer: str
    count: int
    where: dict = field(default_factory=dict)
    ref: str = ""
    got: str = ""
    ref_name: str = "oracle"
    got_name: str = "backend"

    def to_dict(self) -> dict:
        """The mismatch's fields as a dict (``failures.jsonl``, the JSON report)."""
        return asdict(self)

    def __str__(self) -> str:
        rn, gn = self.ref_name, self.got_name
        if self.count == -1:  # a buffer the backend did not return (runner._check_case)
            return f"{self.buffer}: missing from {gn}'s outputs ({rn} has it; op={self.where.get('op')})"
        if self.count == -2:  # a key the op does not have
            return (f"{self.buffer}: {gn} returned it, but it is not an output of op {self.where.get('op')} (its "
                    f"buffers: {self.where.get('expected')})")
        if self.where.get("shape") == "differs":
            return f"{self.buffer}: dtype/shape differs: {rn}={self.ref}  {gn}={self.got} ({self.count} bytes differ)"
        loc = ", ".join(f"{k}={v}" for k, v in self.where.items())
        return f"{self.buffer}: {self.count} differ; first at ({loc}): {rn}={self.ref}  {gn}={self.got}"


def _u8(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _e2m1(code: int) -> str:
    return f"0x{code:X} ({float(E2M1_VALUES[code & 15]):g})"  # (a wrong backend may put any byte here)


def _e4m3(byte: int) -> str:
    return f"0x{byte:02X} ({float(decode_e4m3(np.uint8(byte))):g})"


def _f32(v) -> str:
    f = np.float32(v)
    return f"{float(f)!r} (0x{int(f.view(np.uint32)):08X})"


def _group_of(offsets: np.ndarray, idx: int) -> tuple[int, int]:
    """(group, index inside it) of flat index ``idx`` under an offsets table: the last group starting at or before
    ``idx`` (so empty groups before it are passed over), the last group for an index past the end."""
    g = int(np.searchsorted(offsets, idx, side="right") - 1)
    g = min(max(g, 0), len(offsets) - 2)
    return g, idx - int(offsets[g])


def _plane_shape(case: Case, plane: str, group: int | None) -> tuple[int, int]:
    """(rows, cols) of a plane: rowwise [M, K], columnwise [K, roundup(M, 16)] (SPEC 6.2)."""
    x = case.arrays["x"]
    k = x.shape[-1]
    m = int(np.prod(x.shape[:-1])) if group is None else int(case.arrays["splits"][group])
    return (m, k) if plane == "row" else (k, (m + 15) // 16 * 16)


def _unswizzle_pos(o: int, rows: int, cols: int) -> tuple[int, int, bool]:
    """Compact (r, c) of swizzled byte ``o`` (SPEC 8.2) and whether it is padding."""
    cp = (cols + 3) // 4 * 4
    tile, within = divmod(o, 512)
    r32, rem = divmod(within, 16)
    rb, c4 = divmod(rem, 4)
    tr, tc = divmod(tile, cp // 4)
    r, c = tr * 128 + rb * 32 + r32, tc * 4 + c4
    return r, c, not (r < rows and c < cols)


def _locate_quant(case: Case, key: str, i: int, ref: np.ndarray, got: np.ndarray, grouped: bool, refout: dict):
    """Location and decoded values of differing flat byte ``i`` of a quantize / group_quantize buffer."""
    plane = key.split("_", 1)[0]
    what = key.split("_", 1)[1]
    where: dict = {"plane": plane}
    rb, gb = _u8(ref), _u8(got)
    rv = int(rb[i]) if i < rb.size else None
    gv = int(gb[i]) if i < gb.size else None
    if what in ("amax",):
        j = i // 4
        if grouped:
            where["group"] = j
        return where, _f32(ref.reshape(-1)[j]) if j < ref.size else "-", _f32(got.reshape(-1)[j]) if j < got.size else "-"
    if what.endswith("offsets") or key == "row_offsets":
        j = i // 8
        where["index"] = j
        return where, str(ref.reshape(-1)[j]) if j < ref.size else "-", str(got.reshape(-1)[j]) if j < got.size else "-"
    if what.endswith("tail"):
        where["tail_byte"] = i
        return where, f"0x{rv:02X}" if rv is not None else "-", f"0x{gv:02X}" if gv is not None else "-"
    group, local = None, i
    if grouped:
        offs = refout[f"{plane}_data_offsets"] if what == "data" else refout[f"{plane}_scale_offsets"]
        group, local = _group_of(np.asarray(offs), i)
        where["group"] = group
    rows, cols = _plane_shape(case, plane, group)
    if what == "data":
        r, j = divmod(local, max(cols // 2, 1))
        where.update(row=r, block=(2 * j) // 16)
        fmt = lambda v: "-" if v is None else f"[{_e2m1(v & 15)}, {_e2m1(v >> 4)}]"  # noqa: E731
        if rv is not None and gv is not None:
            nib = [n for n in (0, 1) if ((rv >> 4 * n) & 15) != ((gv >> 4 * n) & 15)]
            where["nibble"] = "lo" if nib == [0] else ("hi" if nib == [1] else "both")
            where["element"] = 2 * j + (nib[0] if nib else 0)
        return where, fmt(rv), fmt(gv)
    nb = cols // 16
    if what == "scales" and not grouped:  # compact 2-D
        r, c = divmod(local, max(nb, 1))
        pad = False
    elif what == "scales_compact":
        cp = (nb + 3) // 4 * 4
        r, c = divmod(local, cp)
        pad = not (r < rows and c < nb)
    else:  # swizzled (quantize *_scales_swizzled, group *_scales)
        r, c, pad = _unswizzle_pos(local, rows, nb)
    where.update(row=r, block=c)
    if pad:
        where["padding"] = True
    f = lambda v: "-" if v is None else _e4m3(v)  # noqa: E731
    return where, f(rv), f(gv)


def _locate_generic(case: Case, key: str, i: int, ref: np.ndarray, got: np.ndarray):
    """Element location for codec / layout outputs."""
    isz = ref.dtype.itemsize
    j = i // isz
    where = {"element": j}
    if ref.ndim == 2:
        where = {"row": j // ref.shape[1], "col": j % ref.shape[1]}
    rv = ref.reshape(-1)[j] if j < ref.size else None
    gv = got.reshape(-1)[j] if j < got.size else None
    x = case.arrays.get("x")
    if case.op in ("e2m1", "e4m3", "bf16") and x is not None:
        xs = x[~np.isnan(x)]
        if j < xs.size:
            where["input"] = _f32(xs[j])
    dec = {"e2m1": lambda v: _e2m1(int(v)), "e4m3": lambda v: _e4m3(int(v)),
           "bf16": lambda v: f"0x{int(v):04X} ({float(np.uint16(v).view(ml_dtypes.bfloat16)):g})"}
    if case.op == "layout" and key in ("swizzled",):
        s = case.arrays["scales"]
        r, c, pad = _unswizzle_pos(j, *s.shape)
        where.update(row=r, block=c, padding=pad)
    fmt = dec.get(case.op, str)
    return where, "-" if rv is None else fmt(rv), "-" if gv is None else fmt(gv)


def _bytes_compare(case: Case, ref: dict, out: dict) -> list[Mismatch]:
    res = []
    grouped = case.op == "group_quantize"
    for key in sorted(out):
        got = np.asarray(out[key])
        if key not in ref:
            res.append(Mismatch(key, -2, {"op": case.op, "expected": ", ".join(sorted(ref))}, "-", str(got.shape)))
            continue
        r = np.asarray(ref[key])
        if r.dtype != got.dtype or r.shape != got.shape:
            detail = f"{r.dtype}{list(r.shape)}", f"{got.dtype}{list(got.shape)}"
            rb, gb = _u8(r), _u8(got)
            n = min(rb.size, gb.size)
            diff = np.flatnonzero(rb[:n] != gb[:n])
            i = int(diff[0]) if diff.size else n
            m = Mismatch(key, abs(rb.size - gb.size) + int(diff.size), {"op": case.op, "shape": "differs"}, *detail)
            if case.op in ("quantize", "group_quantize") and r.dtype == got.dtype and i < n:
                w, a, b = _locate_quant(case, key, i, r, got, grouped, ref)
                m.where.update(w)
                m.ref, m.got = f"{detail[0]} {a}", f"{detail[1]} {b}"
            res.append(m)
            continue
        rb, gb = _u8(r), _u8(got)
        diff = np.flatnonzero(rb != gb)
        if diff.size == 0:
            continue
        i = int(diff[0])
        if case.op in ("quantize", "group_quantize"):
            where, a, b = _locate_quant(case, key, i, r, got, grouped, ref)
        else:
            where, a, b = _locate_generic(case, key, i, r, got)
        res.append(Mismatch(key, int(diff.size), {"op": case.op, **where}, a, b))
    return res


def _bound_compare(case: Case, ref: dict, out: dict, stats: dict) -> list[Mismatch]:
    y, yref, bound = np.asarray(out["y"]), np.asarray(ref["y"]), np.asarray(ref["bound"])
    if y.shape != yref.shape or y.dtype != yref.dtype:
        return [Mismatch("y", y.size, {"op": case.op, "shape": "differs"}, f"{yref.dtype}{list(yref.shape)}",
                         f"{y.dtype}{list(y.shape)}")]
    ok = oracle.within_bound(y, yref, bound)
    stats["elements"] = stats.get("elements", 0) + int(y.size)
    stats["equal_to_exact"] = stats.get("equal_to_exact", 0) + int((_u8(y).reshape(y.size, -1) == _u8(yref).reshape(y.size, -1)).all(axis=1).sum()) if y.size else stats.get("equal_to_exact", 0)
    bad = np.argwhere(~ok)
    if bad.size == 0:
        return []
    idx = tuple(int(v) for v in bad[0])
    where = {"op": case.op} if len(idx) == 2 else {"op": case.op, "group": idx[0]}  # [E, N, K] outputs (wgrad)
    where.update(row=idx[-2], col=idx[-1], bound=float(bound[idx]))
    return [Mismatch("y", int(bad.shape[0]), where, repr(float(yref[idx])), repr(float(y[idx])))]


def rht_exact_domain(x_bf16: np.ndarray) -> np.ndarray:
    """Per 16-block: True where the fp32 butterfly of SPEC 7.2 is exact (and so equals the exact transform; SPEC 14.2).

    Every input is an integer multiple of 2^(max(e,-126) - 7) below 2^(e+1); the 16-term sums then need at most
    ``e_max - min(max(e_i,-126)) + 12`` bits, which fp32 holds when the span is <= 12; ``16 max|x| < FLT_MAX``
    rules out overflow; the final * 0.25 stays exact (quantum >= 2^-135).
    """
    x = x_bf16.astype(np.float32).reshape(-1, 16).astype(np.float64)
    fin = np.isfinite(x).all(axis=1)
    a = np.abs(np.where(np.isfinite(x), x, 0))
    nz = a > 0
    with np.errstate(divide="ignore"):
        e = np.where(nz, np.floor(np.log2(np.where(nz, a, 1))), np.nan)
    emax = np.nanmax(np.where(nz, e, -np.inf), axis=1)
    emin = np.nanmin(np.where(nz, np.maximum(e, -126), np.inf), axis=1)
    span_ok = ~nz.any(axis=1) | (emax - emin <= 12)
    no_ovf = 16 * a.max(axis=1) < float(np.finfo(np.float32).max)
    return fin & span_ok & no_ovf


def _rht_compare(case: Case, ref: dict, out: dict, stats: dict) -> list[Mismatch]:
    x = case.arrays["x"]
    r0, g0 = np.asarray(ref["y"]), np.asarray(out["y"])
    if (r0.dtype, r0.shape) != (g0.dtype, g0.shape):  # bf16 bits as uint16, X's shape (SPEC 7.2)
        return [Mismatch("y", g0.size, {"op": "rht", "dtype/shape": "differs"}, f"{r0.dtype}{list(r0.shape)}",
                         f"{g0.dtype}{list(g0.shape)}")]
    yr, yg = r0.reshape(-1, 16), g0.reshape(-1, 16)
    with np.errstate(invalid="ignore"):  # (a signaling NaN's bits, quieted by the cast to float64)
        fr = (yr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        fg = (yg.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    exact = rht_exact_domain(x)
    xf = np.abs(x.astype(np.float32).reshape(-1, 16).astype(np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        mag = np.maximum(np.abs(fr), np.abs(fg))
        ulp = np.exp2(np.floor(np.log2(np.maximum(mag, 2.0**-126))) - 7)
        tol = xf.sum(axis=1, keepdims=True) * 2.0**-23 + ulp + 2.0**-133
        within = np.isfinite(fg) & (np.abs(fr - fg) <= tol)  # (a checkable block's outputs are finite: an Inf
        # output would otherwise widen its own tolerance to Inf)
    checkable = np.isfinite(xf).all(axis=1) & (16 * xf.max(axis=1) < float(np.finfo(np.float32).max))
    same_value = fr == fg  # -0 == +0: the sign of an exact zero sum is not defined by the matmul
    ok = np.where(exact[:, None], same_value, np.where(checkable[:, None], within, True))
    stats["blocks_exact_domain"] = stats.get("blocks_exact_domain", 0) + int(exact.sum())
    stats["blocks_tolerance"] = stats.get("blocks_tolerance", 0) + int((~exact & checkable).sum())
    stats["blocks_unchecked_overflow"] = stats.get("blocks_unchecked_overflow", 0) + int((~checkable).sum())
    stats["tolerance_blocks_bit_equal"] = stats.get("tolerance_blocks_bit_equal", 0) + int(((yr == yg).all(axis=1) & ~exact & checkable).sum())
    stats["zero_sign_differences"] = stats.get("zero_sign_differences", 0) + int(((yr != yg) & same_value).sum())
    bad = np.argwhere(~ok)
    if bad.size == 0:
        return []
    b, i = (int(v) for v in bad[0])
    where = {"op": "rht", "row": b, "element": i, "exact_domain": bool(exact[b]), "tol": float(tol[b, i])}
    return [Mismatch("y", int(bad.shape[0]), where, f"0x{int(yr[b, i]):04X} ({fr[b, i]:g})",
                     f"0x{int(yg[b, i]):04X} ({fg[b, i]:g})")]


def compare(case: Case, ref: dict, out: dict, mode: str = "bytes", stats: dict | None = None,
            names: tuple[str, str] = ("oracle", "backend")) -> list[Mismatch]:
    """All mismatches of ``out`` against ``ref`` (empty list: conformant) in the buffers ``out`` holds: a buffer missing
    from ``out`` is the caller's to report (the runner's count -1). ``stats`` collects mode counters; ``names``: whose
    ``ref`` and ``out`` are (the reference's and the backend's names), for the mismatch texts."""
    ms = _compare(case, ref, out, mode, stats)
    for m in ms:
        m.ref_name, m.got_name = names
    return ms


def _compare(case: Case, ref: dict, out: dict, mode: str, stats: dict | None) -> list[Mismatch]:
    stats = stats if stats is not None else {}
    if mode in ("bound", "rht") and "y" not in out:  # (bytes mode compares the buffers out holds, too)
        return []
    if mode == "bound":
        return _bound_compare(case, ref, out, stats)
    if mode == "rht":
        return _rht_compare(case, ref, out, stats)
    if case.op in ("gemm_exact", "grouped_gemm_exact", "grouped_gemm_tc", "grouped_gemm_sm100", "dequantize"):
        ref = dict(ref)
        out = dict(out)
        for d in (ref, out):
            if "y" not in d:
                continue
            y = np.asarray(d["y"])
            if case.op == "gemm_exact":  # SPEC 12.3: the sign of an exact zero is not defined
                y = np.where(y == 0, np.zeros_like(y), y).astype(y.dtype)
            # SPEC 11.2 / 12.2 / 12.3: a NaN output's payload is not specified (compared as "is NaN")
            d["y"] = np.where(np.isnan(y), np.full_like(y, np.nan), y).astype(y.dtype)
    if case.op in MMA_OPS or case.op == "grouped_linear":  # SPEC 12.2-12.7, 16: a NaN output's payload is not
        # specified (a main_grad slice kept bit for bit holds no NaN: the generator draws none)
        ref, out = _nan_as_class(ref), _nan_as_class(out)
    return _bytes_compare(case, ref, out)


def _nan_as_class(d: dict) -> dict:
    """``d`` with every NaN of its floating-point arrays replaced by one NaN (a payload is not compared)."""
    out = {}
    for key, v in d.items():
        a = np.asarray(v)
        if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
            a = np.where(np.isnan(a), np.full_like(a, np.nan), a).astype(a.dtype)
        out[key] = a
    return out


def describe_mismatches(ms: list[Mismatch]) -> str:
    """Human-readable lines, one per mismatching buffer."""
    return "\n".join(f"  {m}" for m in ms)
