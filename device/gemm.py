"""NVFP4 x NVFP4 grouped GEMM on Hopper (issue 4; SPEC 12): fprop / dgrad / wgrad over grouped tensors from
:func:`device.group_quantize`, one graph-safe launch (plus a tiny setup kernel) per call.

Per group g the result is :func:`oracle.gemm` on that group's planes with that group's alpha (SPEC 12.5), i.e.
:func:`oracle.grouped_gemm` on the operands' ``.to_oracle()`` (``model="sequential"`` for ``mode="exact"``,
``"tensor_core"`` for ``"fast"``; test ``test_matches_oracle_grouped_gemm``):

* ``kind="fprop"``: ``Y_g = X_g W_g^T``; ``a`` = X grouped ``[T, K]`` (rowwise), ``b`` = W grouped
  ``[E*N, K]`` quantized with ``splits=[N]*E`` (rowwise); out ``[T, N]`` (bf16 default); optional bias ``[E, N]``.
* ``kind="dgrad"``: ``dX_g = dY_g W_g``; ``a`` = dY grouped ``[T, N]`` (rowwise), ``b`` = W grouped (columnwise);
  out ``[T, K]``; optional bias ``[E, K]``.
* ``kind="wgrad"``: ``dW_g = dY_g^T X_g``; ``a`` = dY grouped ``[T, N]`` (columnwise), ``b`` = X grouped ``[T, K]``
  (columnwise), both with the same splits; contraction over the padded ``roundup(m_g, 16)`` tokens; out
  ``[E, N, K]`` (fp32 default); ``accumulate=True`` adds into ``out`` (an empty expert leaves it untouched,
  without accumulate it gets ``alpha * 0 = 0``).

``mode="exact"``: each 16-block partial is exact (one tensor-core step on exact fp16 operands, SPEC 12.2) and is added
in K order with one fp32 rounding, i.e. byte-identical to ``oracle.gemm(model="sequential")``; 128 x 128 tiles. Three
kernels, all with the same bits: for large groups (the same size rule as the fast mode's dequantize-first path below)
both planes are first decoded to fp16 copies (the same scratch) and the kernel only loads them
(``exact_kernel="dequant"``); otherwise, for fprop / dgrad with a contraction that is a multiple of 32, the hybrid
kernel (``"hybrid"``): ``a`` is decoded to an fp16 copy first (2 bytes of scratch per element) and ``b`` in the K loop;
otherwise the fused kernel (``"fused"``, which also excludes the other two: no scratch), which decodes both operands in
its K loop. Bias, any output alignment and any E are supported by all three.
``mode="fast"``: one tensor-core fp32 accumulator over K (exact fp16 operands), byte-identical to
``oracle.gemm(model="tensor_core")`` (SPEC 12.6) and so within :func:`oracle.gemm_error_bound` of
``oracle.gemm(model="exact")``. Alpha (SPEC 12.1, fp32 on the device from the groups' amaxes), C and bias are applied
in the fp32 epilogue in SPEC 12.2's order.

Scale rules: both operands under TE rules ("te", "te_fused_rht": alpha = (A_amax * B_amax) / 7225344), both under
"torchao" (alpha = P_A * P_B, P = amax / 2688) or both under "torchao_noscale" (alpha = 1); other pairs are refused.
Under the torchao rules a NaN block scale (SPEC 5.4: e.g. a block holding a NaN, or a group of zeros under "torchao")
makes every output of its row of A or row of B NaN, as in :func:`oracle.gemm` (SPEC 12.3). torchao's own GEMM
rounds differently (SPEC 14.7).

The fast mode picks its kernel from host-known sizes (docs/gemm.md): for fprop / dgrad with at most 96 rows per group
the **swapped** kernel (the weights are wgmma's register operand, decoded in its K loop, and the tokens come from an
fp16 copy of their plane, 2 bytes of scratch per element); 64 x 256 tiles for wgrad with few output rows, 2-CTA
clusters of 256 x 256 tiles for >= 256 rows per group with contraction >= 1024, 128 x 256 tiles otherwise; and
for large groups (at least 1024 rows per group, and every GEMM dimension at least 1024) without bias the
**dequantize-first** path: both operand planes are decoded to fp16 (E2M1 x E4M3, exact; about 4 bytes of scratch
per packed byte, e.g. 0.94 GB for 8 x 14336 x 4096 weights) and multiplied by CUTLASS's SM90 grouped GEMM with the
same epilogue. ``fast_kernel="swapped" | "skinny" | "large" | "pair" | "dequant"`` forces one of them (tests,
benchmarks, conformance), ``"fused"`` excludes the two with scratch copies (swapped and dequantize-first); every kernel
gives the same bits. ``max_ctas`` caps the persistent grid (default: one CTA per SM), e.g. to leave SMs to concurrent
work; the bits do not depend on it either.

Group sizes never leave the device: problem sizes, pointers and alphas are built by a setup kernel from the
grouped tensors' offsets table and the grid is fixed by host-known sizes, so the call can be captured in a CUDA
graph and replayed with new data and new splits.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from . import _ops
from ._api import _RULES
from ._results import DeviceGroupedNVFP4Tensor

__all__ = ["grouped_gemm"]

_KINDS = {"fprop": 0, "dgrad": 1, "wgrad": 2}
_RCP_7225344 = float(np.float32(1.0 / 7225344.0))  # SPEC 12.1: fp32(1/7225344)
_TILE = 128
#: -> pick_tile's `force` ("fused": chosen by the sizes like "auto", but never the swapped kernel nor the
#: dequantize-first path, the two with scratch copies)
_FAST_KERNELS = {None: 0, "auto": 0, "skinny": 1, "large": 2, "pair": 3, "dequant": 4, "fused": 0, "swapped": 6}
#: the dequantize-first path pays when each weight (fprop / dgrad) or activation (wgrad) element is reused by at least
#: this many output rows (docs/gemm.md, stop 29: E8 T16384, 2048 rows per group, gains; E64 and T512 lose)
_DEQUANT_MIN_REUSE = 1024
#: exact-mode wgrad runs over fp16 copies from this many rows per group on (when N and K reach _DEQUANT_MIN_REUSE);
#: measured at 256 (docs/gemm.md, stop 33); below it the fused exact kernel stays
_EXACT_WGRAD_MIN_ROWS = 256
#: fast-mode wgrad runs over fp16 copies (CUTLASS) from this many rows per group on when N and K reach
#: _DEQUANT_MIN_REUSE: bf16 output and accumulate measured from 64 rows (docs/gemm.md, stop 37: E64 T16384 bf16 0.77x
#: of grouped_mm against 0.64x fused, accumulate 0.36x against 0.25x; E8 T512 bf16 0.94x against 0.64x) ...
_WGRAD_COPIES_MIN_ROWS = 64
#: ... plain fp32 output from 512 rows (CUTLASS's fp32 epilogue loses to the fused kernel's on short contractions:
#: E64 T16384, 256 rows, 0.51x against 0.59x; E8 T4096, 512 rows, 0.66x against 0.55x; stop 37)
_WGRAD_COPIES_MIN_ROWS_F32 = 512
#: ... and plain bf16 output only where dW's N x K outputs reuse each copied element enough: N K / (N + K) (outputs
#: per decoded element and token) at least this. Since the fused kernels' bf16 output leaves by TMA boxes (stop 65)
#: they match or beat the copies up to 1024 (N = K = 2048; E64's N = 1408, K = 2048: 834) and lose from 1365
#: (N = 4096, K = 2048) on (docs/gemm.md, stop 65)
_WGRAD_COPIES_MIN_REUSE_BF16 = 1200
#: fprop / dgrad with at most this many rows per group on average run the swapped kernel (the weights as wgmma's
#: register operand; docs/gemm.md, stop 31: E8 T512 1.85x of grouped_mm against 1.61x for the skinny kernel, E8 T256
#: 1.89x against 1.61x, E64 T4096 equal); the same size rule as the skinny kernel's (pick_tile)
_SWAPPED_MAX_ROWS = 96
#: the swapped kernel runs contractions below this length only: its cp.async loader steps each copy by 32-bit offsets
#: of up to 96 x the contraction (gemm_swapped.cuh, SwapLoader), which stay below 2^31 up to 22.3M
_SWAPPED_MAX_CONTRACTION = 2**24
#: exact mode's kernels -> the binding's kernel code (5: over fp16 copies of the operands, docs/gemm.md stop 30)
_EXACT_KERNELS = {None: 0, "auto": 0, "fused": 0, "dequant": 5, "hybrid": 7}


_TE_RULES = ("te", "te_fused_rht")


def _alpha_rule(rule_a: str, rule_b: str) -> int:
    """The setup kernel's rule code (device._api._RULES, nvfp4_launch.h Rule) that picks the SPEC 12.1 alpha of
    operands quantized under ``rule_a`` and ``rule_b``: both TE rules (code 0: alpha from the amaxes and 1/7225344),
    both "torchao" (P_A * P_B) or both "torchao_noscale" (1); any other pair has no alpha and is refused, as
    oracle.gemm_alpha refuses it."""
    if rule_a in _TE_RULES and rule_b in _TE_RULES:
        return _RULES["te"]
    if rule_a == rule_b and rule_a in ("torchao", "torchao_noscale"):
        return _RULES[rule_a]
    raise ValueError(f"a and b use incompatible scale rules {rule_a!r} and {rule_b!r} (SPEC 12.1: both TE rules, "
                     "both 'torchao' or both 'torchao_noscale')")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _plane(t: DeviceGroupedNVFP4Tensor, which: str, name: str, kind: str):
    """(data, scales, amax) of one plane of an operand, each checked against what the kernels read: a
    DeviceGroupedNVFP4Tensor built or changed by hand must not make them read outside its buffers."""
    data, scales = getattr(t, f"{which}_data"), getattr(t, f"{which}_scales")
    if data is None or scales is None:
        raise ValueError(f"{kind}: {name} needs its {'rowwise' if which == 'row' else 'columnwise'} plane; "
                         f"quantize it with {'rowwise' if which == 'row' else 'columnwise'}=True")
    amax = getattr(t, f"{which}_amax")
    rows, k = (int(v) for v in t.shape)
    e = int(t.splits.numel())
    cap = _ops.group_capacities(rows, k, e)
    need = {"data": cap[f"{which}_data"], "scales": cap[f"{which}_scale"]}
    dev = t.offsets.device
    for what, buf, dtype, size in (("data", data, torch.uint8, need["data"]),
                                   ("scales", scales, torch.uint8, need["scales"]),
                                   ("amax", amax, torch.float32, e)):
        if not isinstance(buf, Tensor) or buf.device != dev or buf.dtype != dtype or not buf.is_contiguous():
            raise ValueError(f"{kind}: {name}'s {which} {what} must be a contiguous {dtype} tensor on {dev} (the "
                             "DeviceGroupedNVFP4Tensor of device.group_quantize)")
        if buf.numel() < size:
            raise ValueError(f"{kind}: {name}'s {which} {what} holds {buf.numel()} elements, its shape {tuple(t.shape)}"
                             f" with {e} groups needs {size}")
    if tuple(t.offsets.shape) != (6, e + 1) or t.offsets.dtype != torch.int64:
        raise ValueError(f"{kind}: {name}.offsets must be the int64 [6, {e + 1}] table of device.group_quantize")
    return data, scales, amax


def _shares_memory(x: Tensor, y: Tensor) -> bool:
    """Whether the bytes of two contiguous tensors overlap (any dtypes, views included)."""
    if x.numel() == 0 or y.numel() == 0 or x.device != y.device:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    return x0 < y0 + y.numel() * y.element_size() and y0 < x0 + x.numel() * x.element_size()


def _out_dtype(out_dtype, default):
    if out_dtype is None:
        out_dtype = default
    if isinstance(out_dtype, str):
        out_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(out_dtype, out_dtype)
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype!r}")
    return out_dtype


def _reuse_pays(kind: str, e: int, t: int, kc: int, cols: int, a_rows: int, b_rows: int) -> bool:
    """Whether decoding both operands to fp16 copies first pays (docs/gemm.md, stops 29 and 30): every operand
    element is reused by at least _DEQUANT_MIN_REUSE output rows or columns (rows per group, and the GEMM dimensions:
    fprop / dgrad contraction and output columns; wgrad N and K). Fast mode asks it for fprop and dgrad (wgrad:
    _wgrad_copies_pay), exact mode for every kind (_exact_dequant_pays)."""
    dims = (kc, cols) if kind != "wgrad" else (a_rows, b_rows)
    return t // e >= _DEQUANT_MIN_REUSE and min(dims) >= _DEQUANT_MIN_REUSE


def _wgrad_copies_pay(e: int, t: int, a_rows: int, b_rows: int, dtype, accumulate: bool) -> bool:
    """Whether fast-mode wgrad (dW [a_rows, b_rows] per group, contraction t / e rows on average) runs over fp16
    copies of both columnwise planes (docs/gemm.md, stops 37 and 65). The copies cost one pass over the two activation
    planes, which every one of dW's N x K outputs reuses, so they pay from few rows per group when N and K are large
    (bf16 output: when N K / (N + K) reaches _WGRAD_COPIES_MIN_REUSE_BF16)."""
    if min(a_rows, b_rows) < _DEQUANT_MIN_REUSE:
        return False
    if dtype != torch.float32 and not accumulate and a_rows * b_rows < _WGRAD_COPIES_MIN_REUSE_BF16 * (a_rows + b_rows):
        return False
    floor = _WGRAD_COPIES_MIN_ROWS_F32 if dtype == torch.float32 and not accumulate else _WGRAD_COPIES_MIN_ROWS
    return t // e >= floor


def _exact_dequant_pays(kind: str, e: int, t: int, kc: int, cols: int, a_rows: int, b_rows: int) -> bool:
    """Whether exact mode runs over fp16 copies (docs/gemm.md, stops 30 and 33): where the copies pay in fast mode, and
    for wgrad also with fewer rows per group (at least _EXACT_WGRAD_MIN_ROWS): its operand elements are reused by the
    N and K output dimensions, not by the rows, and with the TMA loader E64 T16384 wgrad (256 rows per group) runs
    0.49x grouped_mm over the copies against 0.44x fused (stop 33)."""
    if _reuse_pays(kind, e, t, kc, cols, a_rows, b_rows):
        return True
    return (kind == "wgrad" and t // e >= _EXACT_WGRAD_MIN_ROWS
            and min(a_rows, b_rows) >= _DEQUANT_MIN_REUSE)


def _hybrid_runs(kind: str, kc: int, b_data: Tensor, b_scales: Tensor) -> bool:
    """Whether the hybrid exact kernel can run these operands (see :func:`_check_hybrid`)."""
    try:
        _check_hybrid(kind, kc, b_data, b_scales)
    except ValueError:
        return False
    return True


def _check_hybrid(kind: str, kc: int, b_data: Tensor, b_scales: Tensor) -> None:
    """Raises when the hybrid exact kernel (A from an fp16 copy, B dequantized in the kernel through TMA boxes of its
    packed rows; docs/gemm.md, stop 46) cannot run: wgrad, a contraction not a multiple of 32 (packed rows of a
    multiple of 16 bytes) or B planes not 16-byte aligned."""
    if kind == "wgrad":
        raise ValueError("exact_kernel='hybrid' runs fprop and dgrad only (wgrad's columnwise B rows have a pitch per "
                         "group)")
    if kc % 32:
        raise ValueError(f"exact_kernel='hybrid' needs a contraction that is a multiple of 32, got {kc}")
    if b_data.data_ptr() % 16 or b_scales.data_ptr() % 16:
        raise ValueError("exact_kernel='hybrid' needs b's data and scale buffers 16-byte aligned")


def _fast_kernel_choice(ext, force: int, kind: str, e: int, t: int, kc: int, cols: int, a_rows: int, b_rows: int,
                        dtype, has_bias: bool, accumulate: bool = False) -> int:
    """The fast kernel to run: ``force`` as given, or by auto-selection the swapped kernel (6: fprop / dgrad with
    few rows per group) or the dequantize-first path (4) when it is eligible and pays. Raises when the swapped kernel
    or the dequantize-first path is forced but cannot run these operands."""
    if force == _FAST_KERNELS["swapped"]:
        if kind == "wgrad":
            raise ValueError("fast_kernel='swapped' runs fprop and dgrad only (its token operand is a rowwise plane)")
        if kc >= _SWAPPED_MAX_CONTRACTION:
            raise ValueError(f"fast_kernel='swapped' runs contractions below {_SWAPPED_MAX_CONTRACTION} only, got {kc}")
        return force
    if force == 0 and kind != "wgrad" and t // e <= _SWAPPED_MAX_ROWS and kc < _SWAPPED_MAX_CONTRACTION:
        return _FAST_KERNELS["swapped"]
    why = None
    if not ext.has_dequant_path():
        why = "the extension was built without CUTLASS's headers (install nvidia-cutlass, then rebuild)"
    elif has_bias:
        why = "it has no bias epilogue"
    elif cols % (8 if dtype == torch.bfloat16 else 4):
        why = f"its output rows must be 16-byte aligned ({cols} columns of {dtype})"
    elif e > 65535:
        why = f"it supports at most 65535 groups, got {e}"
    if force == _FAST_KERNELS["dequant"]:
        if why:
            raise ValueError(f"fast_kernel='dequant' cannot run this call: {why}")
        return force
    if force != 0 or why:
        return force
    pays = (_wgrad_copies_pay(e, t, a_rows, b_rows, dtype, accumulate) if kind == "wgrad"
            else _reuse_pays(kind, e, t, kc, cols, a_rows, b_rows))
    return _FAST_KERNELS["dequant"] if pays else force


def grouped_gemm(a: DeviceGroupedNVFP4Tensor, b: DeviceGroupedNVFP4Tensor, *, kind: str = "fprop",
                 out_dtype=None, out: Tensor | None = None, accumulate: bool = False, bias: Tensor | None = None,
                 mode: str = "fast", fast_kernel: str | None = None, exact_kernel: str | None = None,
                 max_ctas: int | None = None) -> Tensor:
    """Grouped NVFP4 GEMM (see the module docstring for the operands of each ``kind``). Returns ``out``.

    ``fast_kernel`` (fast mode only; ``None`` or ``"auto"``: chosen by the sizes) forces the fast kernel:
    ``"swapped"`` (fprop / dgrad only: 64 tokens x 256 weight rows per tile, the weights decoded into wgmma's register
    operand, the tokens from an fp16 copy), ``"skinny"`` (64 x 256 tiles), ``"large"`` (128 x 256), ``"pair"`` (2-CTA
    clusters, 256 x 256) or ``"dequant"`` (fp16 copies of both operands, then CUTLASS's grouped GEMM; no bias, 16-byte
    aligned output rows), or ``"fused"`` (chosen by the sizes like ``"auto"``, but never ``"swapped"`` nor
    ``"dequant"``: no scratch copies).
    ``exact_kernel`` (exact mode only; ``None`` or ``"auto"``: chosen by the sizes): ``"fused"`` (operands decoded
    in the K loop), ``"dequant"`` (fp16 copies of both operands first) or ``"hybrid"`` (an fp16 copy of ``a`` only,
    ``b`` decoded in the K loop; fprop / dgrad with a contraction that is a multiple of 32).
    ``max_ctas`` (``None``: one per SM): at most this many persistent CTAs, which then walk all tiles; a 2-CTA
    cluster counts as two (an odd cap rounds down, but at least one cluster runs)."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(_KINDS)}, got {kind!r}")
    if mode not in ("fast", "exact"):
        raise ValueError(f"mode must be 'fast' or 'exact', got {mode!r}")
    if fast_kernel not in _FAST_KERNELS:
        raise ValueError(f"fast_kernel must be one of {list(_FAST_KERNELS)}, got {fast_kernel!r}")
    if exact_kernel not in _EXACT_KERNELS:
        raise ValueError(f"exact_kernel must be one of {list(_EXACT_KERNELS)}, got {exact_kernel!r}")
    if mode == "exact" and fast_kernel not in (None, "auto"):
        raise ValueError(f"fast_kernel={fast_kernel!r} selects a fast-mode kernel; use exact_kernel= in exact mode")
    if mode == "fast" and exact_kernel not in (None, "auto"):
        raise ValueError(f"exact_kernel={exact_kernel!r} selects an exact-mode kernel; use fast_kernel= in fast mode")
    if max_ctas is not None and (isinstance(max_ctas, bool) or not isinstance(max_ctas, int) or max_ctas < 1):
        raise ValueError(f"max_ctas must be None or an int >= 1, got {max_ctas!r}")
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, DeviceGroupedNVFP4Tensor):
            raise TypeError(f"{name} must be a DeviceGroupedNVFP4Tensor from device.group_quantize, "
                            f"got {type(t).__name__}")
        if not t.swizzled:
            raise ValueError(f"{name} must hold swizzled scales (group_quantize(..., swizzled=True))")
    rule = _alpha_rule(a.options.get("rule", "te"), b.options.get("rule", "te"))
    e = int(a.splits.numel())
    if int(b.splits.numel()) != e:
        raise ValueError(f"a and b have different group counts ({e} vs {int(b.splits.numel())})")
    dev = a.offsets.device
    if b.offsets.device != dev:
        raise ValueError(f"a and b are on different devices ({dev} vs {b.offsets.device})")
    if dev.type != "cuda":
        raise ValueError("grouped_gemm needs CUDA tensors")
    t_a, k_a = (int(x) for x in a.shape)
    t_b, k_b = (int(x) for x in b.shape)

    if kind in ("fprop", "dgrad"):
        ad, as_, aa = _plane(a, "row", "a", kind)
        if t_b % e:
            raise ValueError(f"{kind}: b (weights) has {t_b} rows, not a multiple of E={e} (expected [E*N, K])")
        n_w = t_b // e
        if kind == "fprop":
            bd, bs, ba = _plane(b, "row", "b", kind)
            if k_a != k_b:
                raise ValueError(f"fprop: mismatched K: a (X) has K={k_a}, b (W) has K={k_b}")
            rows, cols, b_rows, kc = t_a, n_w, n_w, k_a
        else:
            bd, bs, ba = _plane(b, "col", "b", kind)
            if k_a != n_w:
                raise ValueError(f"dgrad: mismatched contraction: a (dY) has {k_a} columns, W has N={n_w} rows "
                                 "per group")
            if b.options.get("rht", False):
                raise ValueError("dgrad: b (W) was quantized with rht=True, but dY's rowwise plane has no RHT: the "
                                 "product is meaningless (quantize W with rht=False)")
            rows, cols, b_rows, kc = t_a, k_b, k_b, n_w
        shape = (rows, cols)
        a_rows = 0
        grid_upper = (t_a // _TILE + e) * _cdiv(cols, _TILE)
        default_dtype = torch.bfloat16
    else:
        ad, as_, aa = _plane(a, "col", "a", kind)
        bd, bs, ba = _plane(b, "col", "b", kind)
        if t_a != t_b:
            raise ValueError(f"wgrad: a (dY) has {t_a} tokens and b (X) has {t_b}: they must share the splits")
        ra, rb = bool(a.options.get("rht", False)), bool(b.options.get("rht", False))
        if ra != rb:
            raise ValueError(f"wgrad: one operand was quantized with rht=True and the other without (a: {ra}, b: {rb}):"
                             " the product is meaningless")
        if ra and a.options.get("rht_signs") != b.options.get("rht_signs"):
            raise ValueError(f"wgrad: the operands use different RHT sign masks ({a.options.get('rht_signs')!r} vs "
                             f"{b.options.get('rht_signs')!r})")
        shape = (e, k_a, k_b)
        a_rows, b_rows, kc, cols = k_a, k_b, 0, k_b
        grid_upper = e * _cdiv(k_a, _TILE) * _cdiv(k_b, _TILE)
        default_dtype = torch.float32
    # (the kernels round sizes up to whole 256-row tiles in 32-bit arithmetic)
    if max(shape) > 2**31 - 256 or t_a * max(k_a, k_b) >= 2**62:
        raise ValueError(f"sizes too large: {shape} (each must be at most 2**31 - 256)")
    contraction = t_a if kind == "wgrad" else kc  # wgrad: the largest possible group
    if contraction >= 2**28:  # the kernels step scale tiles by 32-bit K-tile offsets (kt * 512 bytes)
        raise ValueError(f"{kind}: contraction length {contraction} too long (the device supports < 2**28)")

    if out is not None and not isinstance(out, Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out is not None and out_dtype is None and out.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"out must have dtype bfloat16 or float32, got {out.dtype}")
    dtype = _out_dtype(out_dtype, default_dtype if out is None else out.dtype)
    if not isinstance(accumulate, bool):
        raise TypeError(f"accumulate must be True or False (C is out=, added into in place), got "
                        f"{type(accumulate).__name__}")
    if accumulate and kind != "wgrad":
        raise ValueError(f"accumulate=True is for wgrad (main_grad += dW, as oracle.grouped_gemm), not {kind}")
    if accumulate and out is None:
        raise ValueError("accumulate=True needs out= (the tensor to add into)")
    if out is not None:
        if out.device != dev:
            raise ValueError(f"out must be on {dev}, got {out.device}")
        if tuple(out.shape) != shape:
            raise ValueError(f"{kind}: out must have shape {shape}, got {tuple(out.shape)}")
        if out.dtype != dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {dtype}")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        if out.numel() and out.data_ptr() % 16:
            raise ValueError("out must be 16-byte aligned")
        for what, buf in (("a's data", ad), ("a's scales", as_), ("a's amax", aa), ("b's data", bd),
                          ("b's scales", bs), ("b's amax", ba), ("a.offsets", a.offsets), ("b.offsets", b.offsets)):
            if _shares_memory(out, buf):
                raise ValueError(f"out shares memory with {what}: the kernels would overwrite an operand while "
                                 "other CTAs still read it")
    if accumulate and dtype != torch.float32:
        raise TypeError("accumulate=True needs a float32 out (SPEC 12.2: C is fp32)")
    bias_t = None
    if bias is not None:
        if kind == "wgrad":
            raise ValueError("bias is not supported for wgrad")
        if not isinstance(bias, Tensor):
            raise TypeError(f"bias must be a torch.Tensor, got {type(bias).__name__}")
        if bias.device != dev:
            raise ValueError(f"bias must be on {dev}, got {bias.device}")
        if bias.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"bias must be float32 or bfloat16, got {bias.dtype}")
        if tuple(bias.shape) != (e, cols):
            raise ValueError(f"{kind}: bias must have shape {(e, cols)}, got {tuple(bias.shape)}")
        bias_t = bias.to(torch.float32).contiguous()  # bf16 -> fp32 is exact

    if out is None:
        out = torch.empty(shape, dtype=dtype, device=dev)
    if out.numel() == 0:
        return out
    if bias_t is not None and bias_t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        bias_t = bias_t.clone()  # the epilogue reads bias while other CTAs write out: never the same memory

    from ._gemm_build import load_gemm_extension

    ext = load_gemm_extension()
    if mode == "exact":
        force = _EXACT_KERNELS[exact_kernel]
        if exact_kernel == "hybrid":
            _check_hybrid(kind, kc, bd, bs)
        if exact_kernel in (None, "auto"):
            if _exact_dequant_pays(kind, e, t_a, kc, cols, a_rows, b_rows):
                force = _EXACT_KERNELS["dequant"]
            elif _hybrid_runs(kind, kc, bd, bs):
                force = _EXACT_KERNELS["hybrid"]
    else:
        force = _FAST_KERNELS[fast_kernel]
        if fast_kernel != "fused":
            force = _fast_kernel_choice(ext, force, kind, e, t_a, kc, cols, a_rows, b_rows, dtype, bias_t is not None,
                                        accumulate)
    ws_bytes = e * int(ext.prob_size()) + 4 * (e + 1)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)
    offs_a = a.offsets.contiguous()
    offs_b = b.offsets.contiguous()
    err = ext.grouped_gemm_(  # returns its refusal / launch error instead of throwing (gemm_bindings.cpp)
        _KINDS[kind], mode == "exact", e,
        ad, as_, offs_a, aa.to(torch.float32).contiguous(),
        bd, bs, offs_b, ba.to(torch.float32).contiguous(),
        out, bias_t, bool(accumulate),
        int(b_rows), int(a_rows), int(kc), int(cols), _RCP_7225344, rule, int(grid_upper), ws,
        int(a_rows) if kind == "wgrad" else t_a // e,  # average output rows per group (tile choice)
        t_a // e if kind == "wgrad" else int(kc),  # average contraction length per group (tile choice)
        force, int(max_ctas or 0),
    )
    if err:
        raise RuntimeError(err)
    return out
