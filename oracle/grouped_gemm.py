"""Grouped GEMM over grouped NVFP4 tensors (SPEC 12.5): the oracle counterpart of ``device.grouped_gemm``."""

from __future__ import annotations

import numpy as np

from .checks import host_array
from .gemm import _OUT_DTYPES, _check_operands, check_model, gemm, gemm_alpha, gemm_error_bound
from .planes import GroupedNVFP4Tensor

__all__ = ["grouped_gemm", "grouped_gemm_error_bound"]

_KINDS = ("fprop", "dgrad", "wgrad")


def _planes(t: GroupedNVFP4Tensor, which: str, kind: str, name: str) -> list:
    planes = t.row_planes if which == "row" else t.col_planes
    if not planes or any(p is None for p in planes):
        usage = "rowwise" if which == "row" else "columnwise"
        raise ValueError(f"{kind}: {name} needs its {usage} plane (group_quantize(..., {usage}=True))")
    return planes


def grouped_gemm(a: GroupedNVFP4Tensor, b: GroupedNVFP4Tensor, *, kind: str = "fprop", model: str = "sequential",
                 out_dtype: str | None = None, bias=None, accumulate=None) -> np.ndarray:
    """One GEMM per group, each exactly :func:`oracle.gemm` on that group's planes with that group's alpha (SPEC 12.5).

    Args:
        a, b: :func:`oracle.group_quantize` results with the same number of groups E.
            fprop: a = X [T, K] (rowwise), b = W [E*N, K] (rowwise; group g is expert g's N rows): Y [T, N].
            dgrad: a = dY [T, N] (rowwise), b = W [E*N, K] (columnwise, group g is W_g^T [K, N]): dX [T, K].
            wgrad: a = dY [T, N], b = X [T, K] (both columnwise, the same splits; contraction over each group's
            ``roundup(m_g, 16)`` padded tokens): dW [E, N, K].
        kind: "fprop", "dgrad" or "wgrad".
        model: as :func:`oracle.gemm` ("sequential" = the device's exact mode, "tensor_core" = its fast mode bit for
            bit, "exact", "sm100" = a B200's CUTLASS grouped GEMM, SPEC 12.7).
        out_dtype: "bfloat16" or "float32"; default bfloat16 for fprop / dgrad, float32 for wgrad (the device's).
        bias: fprop [E, N] / dgrad [E, K] float32 or bfloat16 (widened exactly, SPEC 12.2), one row per group (not
            with wgrad).
        accumulate: wgrad only, float32 [E, N, K] C added per group, with float32 output (the device adds into C in
            place; another out_dtype raises); an empty group (m_g = 0) returns its C bit for bit (SPEC 12.5: no tile
            is scheduled), where without C it is alpha * 0 (SPEC 12.5).
    Raises ValueError where the device would write NaN: groups that disagree (W's group g not N rows; wgrad's two
    operands not split alike), and for wrong kinds, missing planes or shapes.
    """
    check_model(model)  # (here too: a call whose groups are all empty calls no gemm)

    def per_group(pa, pb, **kw):
        return np.asarray(gemm(pa, pb, model=model, **kw))

    def empty_expert(c):
        return c.copy()  # SPEC 12.5: C untouched, bit for bit

    return _per_group(a, b, kind, per_group, empty_expert, out_dtype, bias, accumulate)


def grouped_gemm_error_bound(a: GroupedNVFP4Tensor, b: GroupedNVFP4Tensor, *, kind: str = "fprop",
                             out_dtype: str | None = None, bias=None, accumulate=None) -> np.ndarray:
    """:func:`oracle.gemm_error_bound` per group, in :func:`grouped_gemm`'s layout (float64): every implementation
    that forms the exact products and sums them in fp32 in any order lies within it of
    ``grouped_gemm(..., model="exact")`` (SPEC 12.4; check with :func:`oracle.within_bound`). An empty wgrad expert
    with C gets 0 (C is returned exactly). Same arguments (without ``model``) and errors as
    :func:`grouped_gemm`."""
    def empty_expert(c):
        return np.zeros(c.shape)

    return _per_group(a, b, kind, gemm_error_bound, empty_expert, out_dtype, bias, accumulate)


def _per_group(a, b, kind: str, fn, empty_expert, out_dtype, bias, accumulate) -> np.ndarray:
    """``fn(plane_a, plane_b, out_dtype=, bias=, accumulate=)`` for every group, checked and assembled (SPEC 12.5);
    ``empty_expert(C)`` for a wgrad group without tokens when C is given."""
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(_KINDS)}, got {kind!r}")
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, GroupedNVFP4Tensor):
            raise TypeError(f"{name} must be an oracle GroupedNVFP4Tensor, got {type(t).__name__}")
    e = a.num_groups
    if b.num_groups != e:
        raise ValueError(f"a and b have different group counts ({e} vs {b.num_groups})")
    if out_dtype is None:
        out_dtype = "float32" if kind == "wgrad" else "bfloat16"
    if not isinstance(out_dtype, str) or out_dtype not in _OUT_DTYPES:  # (checked here too: a wgrad whose groups are all empty calls no gemm)
        raise ValueError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    if kind == "wgrad":
        if bias is not None:
            raise ValueError("wgrad takes no bias")
        if not np.array_equal(a.splits, b.splits):
            bad = np.flatnonzero(a.splits != b.splits)
            raise ValueError(f"wgrad: the operands' groups disagree (group {int(bad[0])}: {int(a.splits[bad[0]])} vs "
                             f"{int(b.splits[bad[0]])} tokens)")
        pa, pb = _planes(a, "col", kind, "a (dY)"), _planes(b, "col", kind, "b (X)")
        n, k = a.shape[1], b.shape[1]
        if e:  # (the operands' rules and RHT are checked here too: a call whose groups are all empty runs no gemm)
            _check_operands(pa[0], pb[0])
            gemm_alpha(pa[0], pb[0])
        if accumulate is not None:
            if out_dtype != "float32":  # SPEC 12.5: C is the fp32 buffer the result is added into
                raise ValueError(f"wgrad: accumulate needs out_dtype='float32', got {out_dtype!r}")
            accumulate = host_array(accumulate, "accumulate")
            if accumulate.dtype != np.float32:  # (as oracle.gemm's accumulate)
                raise TypeError(f"accumulate must be float32, got {accumulate.dtype}")
            if accumulate.shape != (e, n, k):
                raise ValueError(f"accumulate must have shape [E, N, K] = {(e, n, k)}, got {accumulate.shape}")
        ys = []
        for g in range(e):
            c = None if accumulate is None else accumulate[g]
            if c is not None and a.splits[g] == 0:
                ys.append(empty_expert(c))
            else:
                ys.append(np.asarray(fn(pa[g], pb[g], out_dtype=out_dtype, accumulate=c)))
        return np.stack(ys) if ys else np.zeros((0, n, k), np.float32)
    if accumulate is not None:
        raise ValueError(f"{kind}: accumulate is wgrad only")
    if b.shape[0] % e:
        raise ValueError(f"{kind}: b (W) has {b.shape[0]} rows, not a multiple of E={e} (expected [E*N, K])")
    n_w = b.shape[0] // e
    bad = np.flatnonzero(b.splits != n_w)
    if bad.size:
        raise ValueError(f"{kind}: W's group {int(bad[0])} has {int(b.splits[bad[0]])} rows, not N={n_w}: the "
                         "groups disagree (SPEC 12.5)")
    pa = _planes(a, "row", kind, "a")
    pb = _planes(b, "row" if kind == "fprop" else "col", kind, "b (W)")
    out_cols = n_w if kind == "fprop" else b.shape[1]
    if bias is not None:
        bias = host_array(bias)
        if bias.shape != (e, out_cols):
            raise ValueError(f"{kind}: bias must be [E, {out_cols}], got {bias.shape}")
    ys = [np.asarray(fn(pa[g], pb[g], out_dtype=out_dtype,
                        bias=None if bias is None else bias[g])).reshape(int(a.splits[g]), out_cols)
          for g in range(e)]
    return np.concatenate(ys) if ys else np.zeros((0, out_cols), np.float32)
