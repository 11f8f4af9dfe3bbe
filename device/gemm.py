"""NVFP4 x NVFP4 grouped GEMM on Hopper (SPEC 12): fprop / dgrad / wgrad over grouped tensors from
:func:`device.group_quantize`, graph-safe: per call a setup kernel, then the plan's kernels (docs/design.md, section
4.1), with no host synchronization.

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
in K order with one fp32 rounding, i.e. byte-identical to ``oracle.gemm(model="sequential")``.
``mode="fast"``: one tensor-core fp32 accumulator over K (exact fp16 operands), byte-identical to
``oracle.gemm(model="tensor_core")`` (SPEC 12.6) and so within :func:`oracle.gemm_error_bound` of
``oracle.gemm(model="exact")``. Alpha (SPEC 12.1, fp32 on the device from the groups' amaxes), C and bias are applied
in the fp32 epilogue in SPEC 12.2's order.
``mode="sm100"``: Blackwell's block-scaled MMA (tcgen05.mma kind::mxf4nvf4, k64 steps in K order) and the CUTLASS
SM100 epilogue, byte-identical to ``oracle.gemm(model="sm100")`` (SPEC 12.7): a Hopper run gives a B200's bits. Its
kernel (``sm100_copies``) forms each step's group values with wgmma and proves per output that the step's truncation
cuts nothing, falling back to the step in integer arithmetic where it cannot (``sm100_simt``, which runs every step
that way on the CUDA cores, gives the same bits).

Scale rules: both operands under TE rules ("te", "te_fused_rht": alpha = (A_amax * B_amax) * fp32(1/(36 G_A G_B)),
36 G_A G_B = 7225344 unless 4over6 used G = 256, SPEC 5.6), both under "torchao" (alpha = P_A * P_B,
P = amax / 2688) or both under "torchao_noscale" (alpha = 1); other pairs are refused.
Under the torchao rules a NaN block scale (SPEC 5.4: e.g. a block holding a NaN, or a group of zeros under "torchao")
makes every output of its row of A or row of B NaN, as in :func:`oracle.gemm` (SPEC 12.3). torchao's own GEMM
rounds differently (SPEC 14.7).

The kernels are chosen per call from host-known sizes by :func:`device._dispatch.plan_gemm` (a named plan: algorithm,
loader, epilogue; docs/design.md describes each); every plan of a mode gives the same bits.
:func:`set_num_sms` caps the persistent grid, e.g. to leave SMs to concurrent work; the bits do not depend on it.

Group sizes never leave the device: problem sizes, pointers and alphas are built by a setup kernel from the
grouped tensors' offsets table and the grid is fixed by host-known sizes, so the call can be captured in a CUDA
graph and replayed with new data and new splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from oracle.grouped import grouped_capacities

from . import _dispatch, _ops
from ._codes import TORCHAO_RULES, GemmKind, Rule
from ._results import DeviceGroupedNVFP4Tensor

__all__ = ["get_num_sms", "grouped_gemm", "grouped_gemm_plan", "set_num_sms"]

_RCP_7225344 = _ops._RCP_7225344  # SPEC 12.1: fp32(1/7225344)
# (plain dicts of the enums: what torch.compile traces without looking into enum machinery)
_KIND_CODES = {name: int(code) for name, code in GemmKind.__members__.items()}
_RULE_CODES = {name: int(code) for name, code in Rule.__members__.items()}


_TILE = 128
#: mode "sm100" (gemm/sm100_copies.cu, gemm/sm100_simt.cu): fewer than 2^13 k64 steps keep the int64 step's
#: accumulator below 2^62 (SPEC 12.7)
SM100_MAX_CONTRACTION = 2**19
#: every mode's contractions are below this length: the kernels step scale tiles by 32-bit K-tile offsets (kt * 512)
MAX_CONTRACTION = 2**28
_num_sms: int | None = None


def _sm100_contraction_too_long(contraction: int) -> bool:
    """Whether mode sm100 refuses a contraction of this length: 2^13 k64 steps or more, i.e. the length rounded up
    to a multiple of 64 reaches ``SM100_MAX_CONTRACTION`` (2^19), as oracle.gemm(model="sm100") refuses it (SPEC
    12.7)."""
    return -(-contraction // 64) * 64 >= SM100_MAX_CONTRACTION


def set_num_sms(num_sms: int | None) -> None:
    """Cap the grouped GEMM's persistent grid at ``num_sms`` CTAs (one per SM; a 2-CTA cluster counts as two, an odd
    cap rounds down, at least one cluster runs), e.g. to leave SMs to work on other streams. ``None``: one CTA per SM
    of the device (the default). Applies to every later :func:`grouped_gemm` call of the process (a CUDA graph keeps
    the cap it was captured with); the bits of the result do not depend on it. ``num_sms`` is an int in
    [1, 2**31)."""
    global _num_sms
    if num_sms is not None and not _ops.is_int(num_sms):
        raise TypeError(f"num_sms must be None or an int in [1, 2**31), got {num_sms!r}")
    if num_sms is not None and not 1 <= num_sms < 2**31:
        raise ValueError(f"num_sms must be None or an int in [1, 2**31), got {num_sms!r}")
    _num_sms = None if num_sms is None else int(num_sms)


def get_num_sms() -> int | None:
    """The cap :func:`set_num_sms` set (``None``: one CTA per SM)."""
    return _num_sms


_TE_RULES = ("te", "te_fused_rht")


def _alpha_rule(rule_a: str, rule_b: str) -> int:
    """The setup kernel's rule code (device._codes.Rule) that picks the SPEC 12.1 alpha of
    operands quantized under ``rule_a`` and ``rule_b``: both TE rules (code 0: alpha from the amaxes and 1/7225344),
    both "torchao" (P_A * P_B) or both "torchao_noscale" (1); any other pair has no alpha and is refused, as
    oracle.gemm_alpha refuses it."""
    if rule_a in _TE_RULES and rule_b in _TE_RULES:
        return _RULE_CODES["te"]
    if rule_a == rule_b and rule_a in TORCHAO_RULES:
        return _RULE_CODES[rule_a]
    raise ValueError(f"a and b use incompatible scale rules {rule_a!r} and {rule_b!r} (SPEC 12.1: both TE rules, "
                     "both 'torchao' or both 'torchao_noscale')")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _plane(t: DeviceGroupedNVFP4Tensor, which: str, name: str, kind: str):
    """(data, scales, amax) of one plane of an operand, each checked against what the kernels read: a buffer of a
    DeviceGroupedNVFP4Tensor built or changed by hand must hold the capacity its shape and E give (SPEC 9.3), and the
    amax E values. The offsets table's values are the device's own (group_quantize writes them) and are not read on
    the host: a table swapped in from another result is not caught."""
    data, scales = getattr(t, f"{which}_data"), getattr(t, f"{which}_scales")
    if data is None or scales is None:
        raise ValueError(f"{kind}: {name} needs its {'rowwise' if which == 'row' else 'columnwise'} plane; "
                         f"quantize it with {'rowwise' if which == 'row' else 'columnwise'}=True")
    amax = getattr(t, f"{which}_amax")
    rows, k = (int(v) for v in t.shape)
    e = int(t.splits.numel())
    cap = grouped_capacities(rows, k, e)
    need = {"data": cap[f"{which}_data"], "scales": cap[f"{which}_scale"]}
    dev = t.offsets.device
    for what, buf, dtype, size in (("data", data, torch.uint8, need["data"]),
                                   ("scales", scales, torch.uint8, need["scales"]),
                                   ("amax", amax, torch.float32, e)):
        if not isinstance(buf, Tensor) or buf.device != dev or buf.dtype != dtype or not buf.is_contiguous():
            raise ValueError(f"{kind}: {name}'s {which} {what} must be a contiguous {dtype} tensor on {dev} (the "
                             "DeviceGroupedNVFP4Tensor of device.group_quantize)")
        if buf.numel() < size or (what == "amax" and buf.numel() != size):
            raise ValueError(f"{kind}: {name}'s {which} {what} holds {buf.numel()} elements, its shape {tuple(t.shape)}"
                             f" with {e} groups needs {size}")
    if data.numel() and not _ops._traced(data) and data.data_ptr() % 8:
        raise ValueError(f"{kind}: {name}'s {which} data must be 8-byte aligned (the kernels read the codes in 8-byte "
                         "words; its storage offset breaks that)")
    if tuple(t.offsets.shape) != (6, e + 1) or t.offsets.dtype != torch.int64:
        raise ValueError(f"{kind}: {name}.offsets must be the int64 [6, {e + 1}] table of device.group_quantize")
    return data, scales, amax


def _out_dtype(out_dtype, default):
    """torch.bfloat16 / torch.float32 from ``out_dtype`` (a torch dtype or its name; None: ``default``); ValueError
    for anything else, as oracle.grouped_gemm's out_dtype (an option from a fixed set, whatever its type)."""
    if out_dtype is None:
        out_dtype = default
    if isinstance(out_dtype, str):
        out_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(out_dtype, out_dtype)
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float32 (or their names), got {out_dtype!r}")
    return out_dtype


def grouped_gemm(a: DeviceGroupedNVFP4Tensor, b: DeviceGroupedNVFP4Tensor, *, kind: str = "fprop",
                 out_dtype: torch.dtype | str | None = None, out: Tensor | None = None, accumulate: bool = False,
                 bias: Tensor | None = None, mode: str = "fast", split_sizes: Sequence[int] | None = None) -> Tensor:
    """Grouped NVFP4 GEMM of two grouped quantized tensors from :func:`device.group_quantize` (SPEC 12.5).

    Args:
        a, b: the operands of ``kind`` (their planes are listed in the module docstring); both with swizzled scales,
            each plane's codes 8-byte aligned (as group_quantize allocates them; a scale buffer off 16-byte alignment
            runs on the copies, docs/design.md section 6; in mode "fast", where the copies cannot run, fprop / dgrad with
            only a's scale buffer off runs on swapped_64x256, any other such call is refused).
        kind: ``"fprop"`` (``Y_g = X_g W_g^T``), ``"dgrad"`` (``dX_g = dY_g W_g``) or ``"wgrad"`` (``dW_g = dY_g^T X_g``).
        out_dtype: ``torch.bfloat16`` or ``torch.float32`` (or their names); default bf16 for fprop / dgrad, fp32
            for wgrad, or ``out``'s dtype.
        out: the output tensor to write (contiguous, 16-byte aligned, not overlapping an operand); allocated if None.
        accumulate: wgrad only, with an fp32 ``out``: ``out += dW`` (SPEC 12.2's C; main_grad accumulation);
            None is False.
        bias: fprop / dgrad only: ``[E, cols]`` float32 or bfloat16, added per group in the epilogue.
        mode: ``"fast"`` (``oracle.gemm(model="tensor_core")`` bit for bit), ``"exact"`` (``model="sequential"``
            bit for bit) or ``"sm100"`` (``model="sm100"`` bit for bit: what a B200's CUTLASS grouped GEMM returns,
            SPEC 12.7; contractions below 2^19 once rounded up to a multiple of 64, for wgrad T; 0.35-0.57x the
            speed of torch._grouped_mm on BF16 on the H200,
            docs/performance.md).
        split_sizes: the token groups' sizes (m_g, adding up to T) as a list of ints, where the caller has them on
            the host: a hint for the choice among plans that give the same bits (docs/design.md section 6, row 1b:
            fprop / dgrad on groups that fill 256-row tiles unevenly). The kernels take the sizes from the operands'
            offsets tables whatever the hint says. None (default): the plan assumes balanced groups.

    Returns:
        ``out``: ``[T, N]`` (fprop), ``[T, K]`` (dgrad) or ``[E, N, K]`` (wgrad).

    The call is graph-safe: no group size leaves the device, and the grid is fixed by host-known sizes. So group
    sizes that disagree between the operands cannot be refused: b's group g must hold W_g's N rows for fprop and
    dgrad (splits ``[N] * E``, as :func:`device.group_quantize` of ``W.reshape(E * N, K)`` makes them) and the same
    m_g tokens as a's for wgrad; a group where they disagree reads nothing and its output is NaN.

    Raises TypeError / ValueError before any launch for operands that are not grouped results with the planes
    ``kind`` reads and swizzled scales, a different E or K, ``split_sizes`` that are not E ints >= 0 adding up to T,
    scale rules without an alpha (SPEC 12.1), an unknown kind or mode, an ``out`` / ``out_dtype`` / ``accumulate`` /
    ``bias`` that does not fit (shape, dtype, device, contiguity, alignment, overlap with an operand), a mode-sm100
    contraction of 2^19 or more, and (ValueError) a fast-mode call with a misaligned scale buffer that no fast
    algorithm can run (docs/design.md section 6).
    RuntimeError (torch's out= rule) for an ``out`` that requires grad while grad mode is on: autograd does not
    record the write (under ``torch.no_grad()`` it is taken); an eager call bumps ``out``'s version counter, so a
    tensor autograd saved and this call overwrote fails the backward."""
    c = _checked_call(a, b, kind, out_dtype, out, accumulate, bias, mode, split_sizes)
    operands = _operands(c, a, b)
    plan = _plan_parts()
    # one torch.library custom op per form (device/_ops.py): torch.compile traces them through their fake
    # implementations (eager calls launch without their dispatch); the plan is chosen at the launch, from host-known
    # sizes and the buffers' alignment
    if c.out is None:
        return _ops.grouped_gemm_new(*operands, c.bias, _KIND_CODES[kind], mode, list(c.shape), c.dtype, c.sizes,
                                     *plan)
    _ops.grouped_gemm_into(*operands, c.out, c.bias, bool(accumulate), _KIND_CODES[kind], mode, c.sizes, *plan)
    return c.out


def _operands(c: _Call, a: DeviceGroupedNVFP4Tensor, b: DeviceGroupedNVFP4Tensor) -> tuple[Tensor, ...]:
    """The grouped GEMM ops' 8 operand tensors of a checked call: (data, scales, fp32 amax, offsets) of a's plane,
    then of b's."""
    (ad, as_, aa), (bd, bs, ba) = c.a_plane, c.b_plane
    return (ad, as_, aa.to(torch.float32).contiguous(), a.offsets.contiguous(),
            bd, bs, ba.to(torch.float32).contiguous(), b.offsets.contiguous())


def _plan_parts() -> tuple[str, str, str, int]:
    """The forced plan parts (device.testing.force_plan; "" = by the sizes) and the grid cap (set_num_sms; 0: none),
    in the order the grouped GEMM ops take them."""
    forced = _dispatch.FORCED
    return forced.get("algorithm", ""), forced.get("loader", ""), forced.get("epilogue", ""), int(_num_sms or 0)


def gemm_sizes(kind: str, e: int, t: int, n: int, k: int, rule: int, g_a: int = 448, g_b: int = 448,
               uneven_rows: bool | None = None) -> list[int]:
    """The ints of device._ops.GEMM_SIZES for a grouped GEMM of SPEC 12.5's sizes (fprop ``Y [T, N] = X [T, K] W^T``,
    dgrad ``dX [T, K] = dY [T, N] W``, wgrad ``dW [E, N, K] = dY^T X``): the plan's problem (T, N, K), the kernels'
    B rows, A rows (wgrad), contraction (fprop K, dgrad N; wgrad per group, 0 here) and output columns, the SPEC 12.1
    rule code, the upper bound on output tiles, the operands' G (SPEC 5.6) and ``uneven_rows``
    (:func:`device._dispatch.uneven_rows` of host-known group sizes; None: not known). Used by :func:`grouped_gemm`
    and by :class:`device.GroupedLinear`."""
    if kind == "fprop":
        b_rows, a_rows, kc, cols = n, 0, k, n
    elif kind == "dgrad":
        b_rows, a_rows, kc, cols = k, 0, n, k
    else:
        b_rows, a_rows, kc, cols = k, n, 0, k
    grid_upper = e * _cdiv(n, _TILE) * _cdiv(k, _TILE) if kind == "wgrad" else (t // _TILE + e) * _cdiv(cols, _TILE)
    uneven = -1 if uneven_rows is None else int(uneven_rows)
    return [t, n, k, b_rows, a_rows, kc, cols, rule, grid_upper, g_a, g_b, uneven]


def grouped_gemm_plan(a: DeviceGroupedNVFP4Tensor, b: DeviceGroupedNVFP4Tensor, *, kind: str = "fprop",
                      out_dtype: torch.dtype | str | None = None, out: Tensor | None = None, accumulate: bool = False,
                      bias: Tensor | None = None, mode: str = "fast",
                      split_sizes: Sequence[int] | None = None) -> _dispatch.GemmPlan:
    """The plan (algorithm, loader, epilogue) that :func:`grouped_gemm` runs for these arguments, with the same checks
    (and :func:`device.testing.force_plan`'s forced parts); launches nothing. Builds the GEMM extension on first use
    (whether it has CUTLASS's algorithm is part of the choice)."""
    c = _checked_call(a, b, kind, out_dtype, out, accumulate, bias, mode, split_sizes)
    from ._build import load_gemm_extension

    return _plan(c, bool(load_gemm_extension().has_cutlass()))


class _Call(NamedTuple):
    """A checked grouped_gemm call: the operand planes, the sizes the kernels take, the output's shape and dtype."""

    kind: str
    mode: str
    groups: int
    a_plane: tuple
    b_plane: tuple
    sizes: list  # the kernels' ints (gemm_sizes; device._ops.GEMM_SIZES' order)
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    out: Tensor | None
    accumulate: bool
    bias: Tensor | None


def _plan(c: _Call, cutlass: bool) -> _dispatch.GemmPlan:
    """The call's plan from device._dispatch (with the parts device.testing.force_plan forces), as the grouped GEMM
    ops choose it (device._ops.launch_grouped_gemm)."""
    (ad, as_, _), (bd, bs, _) = c.a_plane, c.b_plane
    problem = _ops.gemm_problem(_KIND_CODES[c.kind], c.mode, c.groups, c.sizes, c.dtype, c.accumulate,
                                c.bias is not None, ad, as_, bd, bs, cutlass)
    forced = _dispatch.FORCED
    return _dispatch.plan_gemm(problem, algorithm=forced.get("algorithm"), loader=forced.get("loader"),
                               epilogue=forced.get("epilogue"))


def _uneven_rows(split_sizes, e: int, t: int) -> bool | None:
    """grouped_gemm's ``split_sizes``, checked: None where not given, else device._dispatch.uneven_rows of them."""
    if split_sizes is None:
        return None
    if isinstance(split_sizes, (str, bytes, Tensor)) or not isinstance(split_sizes, Sequence):
        raise TypeError(f"split_sizes must be a list of ints (the group sizes on the host; a tensor's stay on the "
                        f"device) or None, got {type(split_sizes).__name__}")
    if len(split_sizes) != e:
        raise ValueError(f"split_sizes has {len(split_sizes)} sizes, the operands have E={e} groups")
    for g, v in enumerate(split_sizes):
        if not _ops.is_int(v):
            raise TypeError(f"split_sizes must hold ints, got {v!r} at index {g}")
        if v < 0:
            raise ValueError(f"split_sizes must hold sizes >= 0, got {v} at index {g}")
    sizes = [int(v) for v in split_sizes]
    if sum(sizes) != t:
        raise ValueError(f"split_sizes add up to {sum(sizes)}, a has T={t} tokens")
    return _dispatch.uneven_rows(sizes)


def _checked_call(a, b, kind, out_dtype, out, accumulate, bias, mode, split_sizes=None) -> _Call:
    """Every check of grouped_gemm's arguments (before anything is allocated or launched); the sizes they give."""
    if not isinstance(kind, str) or kind not in _KIND_CODES:
        raise ValueError(f"kind must be one of {list(_KIND_CODES)}, got {kind!r}")
    if not isinstance(mode, str) or mode not in ("fast", "exact", "sm100"):
        raise ValueError(f"mode must be 'fast', 'exact' or 'sm100', got {mode!r}")
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
    _ops.require_hopper(a.offsets, "a")
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
            n = n_w
        else:
            bd, bs, ba = _plane(b, "col", "b", kind)
            if k_a != n_w:
                raise ValueError(f"dgrad: mismatched contraction: a (dY) has {k_a} columns, W has N={n_w} rows "
                                 "per group")
            if b.options.get("rht", False):
                raise ValueError("dgrad: b (W) was quantized with rht=True, but dY's rowwise plane has no RHT: the "
                                 "product is meaningless (quantize W with rht=False)")
            n = k_a
        shape = (t_a, n if kind == "fprop" else k_b)
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
        n = k_a
        shape = (e, k_a, k_b)
        default_dtype = torch.float32
    g_a, g_b = (int(t.options.get("global_scale_max", 448)) for t in (a, b))
    sizes = gemm_sizes(kind, e, t_a, n, k_b, rule, g_a, g_b, _uneven_rows(split_sizes, e, t_a))
    kc, cols = sizes[_ops.GEMM_SIZES.index("kc")], sizes[_ops.GEMM_SIZES.index("cols")]
    # (the kernels round sizes up to whole 256-row tiles in 32-bit arithmetic)
    if max(shape) > 2**31 - 256 or t_a * max(k_a, k_b) >= 2**62:
        raise ValueError(f"sizes too large: {shape} (each must be at most 2**31 - 256)")
    contraction = t_a if kind == "wgrad" else kc  # wgrad: the largest possible group
    if contraction >= MAX_CONTRACTION:
        raise ValueError(f"{kind}: contraction length {contraction} too long (the device supports < 2**28)")
    if mode == "sm100" and _sm100_contraction_too_long(contraction):
        raise ValueError(f"{kind}: mode 'sm100' runs contractions below {SM100_MAX_CONTRACTION} only, rounded up to a "
                         f"multiple of 64 (at most 8191 k64 steps: its int64 model of SPEC 12.7, like "
                         f"oracle.gemm(model='sm100')), got {contraction}")

    if out is not None and not isinstance(out, Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out is not None and out_dtype is None and out.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"out must have dtype bfloat16 or float32, got {out.dtype}")
    dtype = _out_dtype(out_dtype, default_dtype if out is None else out.dtype)
    accumulate = False if accumulate is None else accumulate  # (oracle.grouped_gemm's default)
    if not isinstance(accumulate, (bool, np.bool_)):
        raise TypeError(f"accumulate must be True or False (C is out=, added into in place), got "
                        f"{type(accumulate).__name__}")
    if accumulate and kind != "wgrad":
        raise ValueError(f"accumulate=True is for wgrad (main_grad += dW, as oracle.grouped_gemm), not {kind}")
    if accumulate and out is None:
        raise ValueError("accumulate=True needs out= (the tensor to add into)")
    if out is not None:
        if out.requires_grad and torch.is_grad_enabled():
            # torch's out= rule: a write that autograd does not record cannot go into a tensor it tracks
            raise RuntimeError("grouped_gemm(): out= does not support automatic differentiation, but out requires "
                               "grad; pass a tensor that does not (e.g. a main_grad buffer) or call under "
                               "torch.no_grad()")
        if out.device != dev:
            raise ValueError(f"out must be on {dev}, got {out.device}")
        if tuple(out.shape) != shape:
            raise ValueError(f"{kind}: out must have shape {shape}, got {tuple(out.shape)}")
        if out.dtype != dtype:  # (two arguments that disagree: ValueError, as the oracle's accumulate check)
            raise ValueError(f"out has dtype {out.dtype} but out_dtype is {dtype}")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        if not _ops._traced(out):  # (no addresses while torch.compile traces: the launch checks them again)
            _ops.check_gemm_out(_KIND_CODES[kind], out, sizes, e, {
                "a's data": ad, "a's scales": as_, "a's amax": aa, "a.offsets": a.offsets, "b's data": bd,
                "b's scales": bs, "b's amax": ba, "b.offsets": b.offsets})
    if accumulate and dtype != torch.float32:
        raise ValueError("accumulate=True needs a float32 out (SPEC 12.2: C is fp32)")
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

    return _Call(kind=kind, mode=mode, groups=e, a_plane=(ad, as_, aa), b_plane=(bd, bs, ba), sizes=sizes, shape=shape,
                 dtype=dtype, device=dev, out=out, accumulate=accumulate, bias=bias_t)
