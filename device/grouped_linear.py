"""``device.GroupedLinear``: the grouped (MoE) linear layer of NVFP4 training on the device kernels (SPEC 16).

Forward and backward are built from :func:`device.group_quantize`'s and :func:`device.grouped_gemm`'s custom ops
(``torch.ops.nvfp4_device``) and the bias-gradient kernel (``csrc/layer/bias_grad.cu``), with the quantizations and
GEMMs of SPEC 16.1-16.3, so every output equals :func:`oracle.grouped_linear_forward` /
:func:`oracle.grouped_linear_backward` byte for byte (``mode="exact"``: ``model="sequential"``; ``mode="fast"``:
``model="tensor_core"``; ``mode="sm100"``: ``model="sm100"``; SPEC 16.5). No group size reaches the host: a whole
training step can be captured in one CUDA graph and compiled with ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from oracle.checks import check_flag
from oracle.grouped import grouped_capacities
from oracle.quantize import planes_are_transposes
from oracle.recipe import DEFAULT_RECIPE, NVFP4Recipe

from . import _dispatch, _ops
from . import gemm as _gemm
from .gemm import MAX_CONTRACTION, SM100_MAX_CONTRACTION, _sm100_contraction_too_long
from .quantization import _options

__all__ = ["GroupedLinear"]

_MODES = ("fast", "exact", "sm100")
_PARAMS_DTYPES = (torch.bfloat16, torch.float32)
_FPROP, _DGRAD, _WGRAD = (_gemm._KIND_CODES[k] for k in ("fprop", "dgrad", "wgrad"))
_KIND_NAMES = {code: name for name, code in _gemm._KIND_CODES.items()}


class _Planes(NamedTuple):
    """The outputs of one grouped quantize (device._ops.group_quantize_op), in its order; unrequested planes are
    empty tensors."""

    row_data: Tensor
    row_scales: Tensor
    col_data: Tensor
    col_scales: Tensor
    row_amax: Tensor
    col_amax: Tensor
    offsets: Tensor


class _Config(NamedTuple):
    """Host constants of one forward call (Python values only: torch.compile specializes on them)."""

    mode: str
    e: int
    n: int
    k: int
    rule: str
    rht_wgrad: bool
    rht_signs: int
    sr_grad: bool
    seed: int
    need_dx: bool
    need_dw: bool
    need_dbias: bool
    fuse_wgrad: bool
    delay_wgrad: bool
    copy_dgrad: bool  # the weights' fp16 copy serves dgrad too (16x16 weight blocks: SPEC 6.3's transposes)
    uneven_rows: bool | None  # m_splits given as a list: device._dispatch.uneven_rows of it (the plan); else None


# ------------------------------------------------------------------------------------------------------------------
# the quantizations and GEMMs of SPEC 16.1-16.3, on raw tensors (no result objects: simple to trace)
# ------------------------------------------------------------------------------------------------------------------

def _quantize(t: Tensor, splits: Tensor, *, rowwise: bool, columnwise: bool, rht: bool, rht_signs: int,
              block: tuple[int, int], rule: str, rounding: str, seed: int) -> _Planes:
    """device.group_quantize's op on ``t`` [rows, cols] with swizzled scales and Philox offset 0 (SPEC 9, 16.1)."""
    opts = _options(t, rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block, rule=rule,
                    rounding=rounding, seed=seed, offset=0)
    return _Planes(*_ops.group_quantize_op(t, splits, None, None, swizzled=True, **opts))


def _quantize_x(x: Tensor, splits: Tensor, cfg: _Config, *, columnwise: bool) -> _Planes:
    """SPEC 16.1: X in 1x16 blocks, RN; the RHT (rht_wgrad) on its columnwise plane only."""
    return _quantize(x, splits, rowwise=True, columnwise=columnwise, rht=cfg.rht_wgrad and columnwise,
                     rht_signs=cfg.rht_signs, block=(1, 16), rule=cfg.rule, rounding="rn", seed=0)


def _quantize_dy(dy: Tensor, splits: Tensor, cfg: _Config, *, rowwise: bool, columnwise: bool) -> _Planes:
    """SPEC 16.1-16.2: dY in 1x16 blocks; the RHT (rht_wgrad) on its columnwise plane; SR (sr_grad) with the
    recipe's seed and offset 0 (a plane's bytes do not depend on whether the other plane is produced)."""
    return _quantize(dy, splits, rowwise=rowwise, columnwise=columnwise, rht=cfg.rht_wgrad and columnwise,
                     rht_signs=cfg.rht_signs, block=(1, 16), rule=cfg.rule,
                     rounding="sr" if cfg.sr_grad else "rn", seed=cfg.seed)


def _gemm_sizes(kind: int, e: int, t: int, n: int, k: int, rule: str, uneven_rows: bool | None = None) -> list[int]:
    """device.gemm.gemm_sizes for the layer's GEMMs: fprop X [T, K] x W [E*N, K]; dgrad dY [T, N] x W; wgrad
    dY [T, N] x X [T, K]; G = 448 for both operands (the layer's quantizations do not use 4over6, SPEC 5.6)."""
    return _gemm.gemm_sizes(_KIND_NAMES[kind], e, t, n, k, _gemm._alpha_rule(rule, rule), uneven_rows=uneven_rows)


def _operands(a: _Planes, a_plane: str, b: _Planes, b_plane: str) -> tuple[Tensor, ...]:
    """The GEMM ops' 8 operand tensors: (data, scales, amax, offsets) of plane ``a_plane`` of a, then of b."""
    return (getattr(a, f"{a_plane}_data"), getattr(a, f"{a_plane}_scales"), getattr(a, f"{a_plane}_amax"), a.offsets,
            getattr(b, f"{b_plane}_data"), getattr(b, f"{b_plane}_scales"), getattr(b, f"{b_plane}_amax"), b.offsets)


def _gemm_new(kind: int, a: _Planes, a_plane: str, b: _Planes, b_plane: str, cfg: _Config, t: int, shape: list[int],
              dtype: torch.dtype, bias: Tensor | None = None, b_copy: Tensor | None = None) -> Tensor:
    """A new output of one of the layer's GEMMs; ``b_copy``: the weights' fp16 copy (fprop / dgrad, see
    GroupedLinear's ``cache_f16_weights``)."""
    return _ops.grouped_gemm_new(*_operands(a, a_plane, b, b_plane), bias, kind, cfg.mode, shape, dtype,
                                 _gemm_sizes(kind, cfg.e, t, cfg.n, cfg.k, cfg.rule, cfg.uneven_rows),
                                 *_gemm._plan_parts(), b_copy=b_copy)


def _wgrad(dyq: _Planes, xq: _Planes, cfg: _Config, t: int, dtype: torch.dtype, main_grad: Tensor | None):
    """dW [E, N, K] of ``dtype`` (the GEMM's epilogue casts; the same bits as casting its fp32 result), or
    ``main_grad += dW`` in place (SPEC 16.3; an empty expert leaves main_grad[g] unchanged) and None."""
    if main_grad is None:
        return _gemm_new(_WGRAD, dyq, "col", xq, "col", cfg, t, [cfg.e, cfg.n, cfg.k], dtype)
    _ops.grouped_gemm_into(*_operands(dyq, "col", xq, "col"), main_grad, None, True, _WGRAD, cfg.mode,
                           _gemm_sizes(_WGRAD, cfg.e, t, cfg.n, cfg.k, cfg.rule), *_gemm._plan_parts())
    return None


def _aligned(t: Tensor) -> Tensor:
    """``t``, or a copy of it where its data does not start on 16 bytes (the kernels read 16-byte vectors; e.g. a
    view at an odd storage offset). Traced tensors have no address and pass as they are."""
    return t.clone() if t.numel() and not _ops._traced(t) and t.data_ptr() % 16 else t


def _copy_serves_dgrad(recipe: NVFP4Recipe) -> bool:
    """Whether the weights' fp16 copy (made from the rowwise plane) also holds dgrad's B: the weights' planes (RN, no
    RHT, SPEC 16.1) are each other's transposes with 16x16 blocks (SPEC 6.3)."""
    return planes_are_transposes(recipe.weight_block, "rn", False, None)


def _check_main_grad(weight: Tensor) -> Tensor:
    """``weight.main_grad``: an fp32 contiguous 16-byte aligned tensor of weight's shape on its device."""
    mg = getattr(weight, "main_grad", None)
    if mg is None:
        raise ValueError("fuse_wgrad_accumulation=True needs weight.main_grad, a float32 tensor of the weight's shape "
                         "(the layer allocates one at construction; it was removed)")
    if not isinstance(mg, Tensor):  # (wrong types: TypeError, as oracle.grouped_linear_backward's main_grad)
        raise TypeError(f"weight.main_grad must be a float32 tensor of the weight's shape, got {type(mg).__name__}")
    if mg.dtype != torch.float32:
        raise TypeError(f"weight.main_grad must be float32, got {mg.dtype}")
    if tuple(mg.shape) != tuple(weight.shape) or mg.device != weight.device:
        raise ValueError(f"weight.main_grad must have shape {tuple(weight.shape)} on {weight.device}, got "
                         f"{tuple(mg.shape)} on {mg.device}")
    if not mg.is_contiguous():
        raise ValueError("weight.main_grad must be contiguous")
    if not _ops._traced(mg) and mg.numel() and mg.data_ptr() % 16:
        raise ValueError("weight.main_grad must be 16-byte aligned")
    return mg


# ------------------------------------------------------------------------------------------------------------------
# autograd
# ------------------------------------------------------------------------------------------------------------------

class _GroupedLinearFunction(torch.autograd.Function):
    """Y = X W^T + bias per expert; backward dX, dW (or main_grad +=, or deferred), dbias (SPEC 16.3, 16.4)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, splits: Tensor, w_row_data: Tensor,
                w_row_scales: Tensor, w_col_data: Tensor, w_col_scales: Tensor, w_row_amax: Tensor, w_col_amax: Tensor,
                w_offsets: Tensor, w_copy: Tensor | None, cfg: _Config, layer: GroupedLinear | None) -> Tensor:
        wq = _Planes(w_row_data, w_row_scales, w_col_data, w_col_scales, w_row_amax, w_col_amax, w_offsets)
        t = x.shape[0]
        xq = _quantize_x(x, splits, cfg, columnwise=cfg.need_dw)
        b = None if bias is None else bias.to(torch.float32).contiguous()  # (bf16 -> fp32 is exact)
        y = _gemm_new(_FPROP, xq, "row", wq, "row", cfg, t, [t, cfg.n], torch.bfloat16, b, w_copy)
        # saved: X's columnwise plane (wgrad B; NVFP4, not the bf16 X) with its scales packed (SPEC 9.5), its amaxes
        # and offsets (their row 0 also bounds dY's groups for dbias), W's columnwise plane (dgrad B), the splits, the
        # weights' cached fp16 copy when dgrad reads it (a reference to the cache entry, no new memory);
        # X's rowwise plane and swizzled columnwise scales are freed here
        x_cs = _ops.pack_col_scales_op(xq.col_scales, xq.offsets, t, cfg.k) if cfg.need_dw else xq.col_scales
        ctx.save_for_backward(xq.col_data, x_cs, xq.col_amax, xq.offsets, w_col_data, w_col_scales,
                              w_col_amax, w_offsets, splits, w_copy if cfg.copy_dgrad and cfg.need_dx else None)
        ctx.cfg = cfg
        ctx.t = t
        ctx.weight_dtype = weight.dtype
        ctx.layer = layer  # fuse_wgrad_accumulation / delay_wgrad_compute only (main_grad, the deferred queue)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        x_cd, x_cs, x_ca, x_offs, w_cd, w_cs, w_ca, w_offs, splits, w_copy = ctx.saved_tensors
        cfg, t = ctx.cfg, ctx.t
        empty = x_offs.new_empty(0, dtype=torch.uint8)
        if cfg.need_dw and not cfg.delay_wgrad:  # the wgrad's B scales, swizzled again (SPEC 9.5)
            x_cs = _ops.unpack_col_scales_op(x_cs, x_offs, t, cfg.k)
        xq = _Planes(empty, empty, x_cd, x_cs, x_ca, x_ca, x_offs)
        wq = _Planes(empty, empty, w_cd, w_cs, w_ca, w_ca, w_offs)
        main_grad = _check_main_grad(ctx.layer.weight) if cfg.need_dw and cfg.fuse_wgrad and not cfg.delay_wgrad \
            else None
        dy = dy.contiguous()
        if dy.dtype != torch.bfloat16:
            dy = dy.to(torch.bfloat16)
        if dy.numel() and not _ops._traced(dy) and dy.data_ptr() % 16:
            dy = dy.clone()  # the kernels read 16-byte vectors (as x in the forward)
        dx = dw = dbias = None
        if cfg.need_dx or cfg.need_dw:
            dyq = _quantize_dy(dy, splits, cfg, rowwise=cfg.need_dx, columnwise=cfg.need_dw)
            if cfg.need_dx:
                dx = _gemm_new(_DGRAD, dyq, "row", wq, "col", cfg, t, [t, cfg.k], torch.bfloat16, None, w_copy)
            if cfg.need_dw:
                if cfg.delay_wgrad:
                    ctx.layer._pending_wgrad.append((dyq, xq, cfg, t))  # backward_dw() runs it (xq's scales packed)
                else:
                    dw = _wgrad(dyq, xq, cfg, t, ctx.weight_dtype, main_grad)
        if cfg.need_dbias:
            dbias = _ops.bias_grad_op(dy, x_offs)  # X's offsets: the same groups as dY's (same splits and T)
        return (dx, dw, dbias) + (None,) * 11


# ------------------------------------------------------------------------------------------------------------------
# the module
# ------------------------------------------------------------------------------------------------------------------

class GroupedLinear(torch.nn.Module):
    """E experts' linear layers on NVFP4 (TE's ``GroupedLinear``): ``y[rows of g] = x[rows of g] @ weight[g].T +
    bias[g]`` for groups of consecutive rows given by ``m_splits``, forward and backward on the device kernels.

    Args:
        num_gemms: E, the number of experts (1 to 65535).
        in_features: K, a positive multiple of 16 below 2**28 (fprop's contraction length).
        out_features: N, a positive multiple of 16 below 2**28 (dgrad's contraction length).
        bias: whether the layer has a bias ``[E, N]`` (initialised to zeros).
        device: where the parameters live (a CUDA device).
        params_dtype: ``torch.bfloat16`` (default; the oracle's model) or ``torch.float32``. fp32 weights are
            quantized from their fp32 values (not rounded to bf16 first); the oracle's layer model takes bf16
            weights, so its byte-for-byte comparison covers fp32 weights whose values are bf16-representable only.
        recipe: an :class:`oracle.NVFP4Recipe` (SPEC 16.1): the scale rule, the weights' block, the RHT on the wgrad
            operands, SR on dY with its seed. Read at every forward: assign ``layer.recipe`` to change it between
            steps (e.g. a new ``seed`` for fresh random bits; SPEC 16.2). **The seed is the only source of dY's
            random bits**: with a fixed seed every step (and every replay of a captured CUDA graph) draws the same
            bits, and layers with the same seed draw the same bits as each other (for the same group and position);
            give each layer its own seed, and a new one per step where the steps should differ. Under
            ``torch.compile`` the seed is a constant of the compiled graph: a new seed is a recompile.
        mode: ``"fast"`` (every GEMM equals ``oracle.grouped_gemm(model="tensor_core")``), ``"exact"``
            (``model="sequential"``) or ``"sm100"`` (``model="sm100"``: a B200's GEMM bits, SPEC 12.7; slower than
            the other modes, and T, N and K below 2^19 once rounded up to a multiple of 64); SPEC 16.5.
        fuse_wgrad_accumulation: add dW into ``weight.main_grad`` (fp32 ``[E, N, K]``) in place instead of producing
            ``weight.grad`` (Megatron's convention). The layer allocates ``weight.main_grad`` (zeros) at construction;
            a caller may replace it by its own fp32 contiguous tensor of the weight's shape (e.g. a view into a
            gradient buffer) and zeroes it when it wants. ``weight.grad`` then stays None. An expert with no rows
            leaves its ``main_grad[g]`` unchanged bit for bit. Not supported under torch.compile (RuntimeError).
        delay_wgrad_compute: the backward computes dX and dbias only and queues the wgrad GEMM (with its NVFP4
            operands); :meth:`backward_dw` runs the oldest queued one (TE's convention). Each queued entry holds
            dY's and X's columnwise NVFP4 planes (X's scales packed, SPEC 9.5; with their amaxes and offsets tables)
            until :meth:`backward_dw` runs it. Not supported under torch.compile (RuntimeError).
        cache_f16_weights: ``mode="fast"`` with the weight-plane cache (``weight_plane_reuse``; not under
            torch.compile): keep, beside the cached weight planes, the quantized weights' exact fp16 values
            ``[E, N, K]`` (E2M1 x E4M3: 2 bytes per weight, as much as the bf16 weights), made when a forward's fprop
            or dgrad runs over fp16 copies (CUTLASS's grouped GEMM: from 256 tokens per expert with N and K >= 1024),
            which then read it instead of decoding a weight plane at every call. With 16x16 weight blocks (the default
            recipe) the one copy serves both GEMMs (SPEC 6.3: the two planes hold the same values transposed); with
            1x16 blocks, fprop only. fprop reads it with or without a bias (CUTLASS's bf16 bias epilogue). The same
            bits either way; ``False`` trades the speed for the memory (docs/performance.md: the E8 T16384 skewed step
            at 1.03-1.10x the BF16 step with the copy, 1.08-1.19x without, over four runs; bias off).

    Parameters: ``weight`` ``[E, N, K]`` (one Parameter; ``weight[g]`` is expert g's ``[N, K]`` matrix, row-major,
    so the layout is that of TE's E separate ``weight{g}`` parameters stacked; initialised as ``torch.nn.Linear``
    initialises each ``[N, K]`` matrix) and ``bias`` ``[E, N]`` (or None).

    **Gradients** (SPEC 16.5): ``weight.grad`` is the model's fp32 dW rounded to nearest-even to ``params_dtype``
    (the wgrad epilogue's cast), ``bias.grad`` the model's fp32 dbias (SPEC 16.4) rounded the same way;
    ``weight.main_grad`` (``fuse_wgrad_accumulation``) holds the fp32 bits. With ``params_dtype=torch.float32`` both
    are the fp32 values themselves.

    **Saved for backward** (NVFP4 only, never the bf16 X): X's columnwise plane (the wgrad operand, RHT'd when
    ``recipe.rht_wgrad``) with its per-group amaxes and offsets table, W's columnwise plane (the dgrad operand) and
    the splits; X's rowwise plane is freed after the forward GEMM. X's columnwise scales are kept packed (SPEC 9.5:
    without the 128 x 4 tiles' padding) and swizzled again in the backward. That is about 0.56 bytes per element of
    X against 2 for a BF16 layer's saved X, plus the SPEC 9.3 capacity's room for the groups' padding to 16 tokens.

    **Weight planes** are quantized once (16x16 blocks by default; the columnwise plane, dgrad's operand, only when
    the forward needs a gradient of x) and reused by later forwards while the weight is unchanged (with
    ``cache_f16_weights``, their fp16 copy too). By default (``forward(..., is_first_microbatch=None)``) the cache
    is keyed on ``weight._version`` (bumped by every in-place update through the parameter, e.g. the optimizer's),
    ``weight.data_ptr()``, dtype, shape and the recipe's weight fields. That check cannot see a write that bumps no
    version counter of the parameter: ``weight.data.copy_(...)`` or another in-place op on ``weight.data``, a
    collective or other library writing into the parameter's memory through a tensor of its own, or ``weight.data =
    buf`` with a ``buf`` at the old address. After such an update pass ``is_first_microbatch=True`` to the next
    forward (or call :meth:`invalidate_weight_planes`); TE's convention, ``True`` on the first micro-batch of a step
    and ``False`` on the others, states it for every step. ``layer.weight_plane_reuse = False`` quantizes the
    weights in every forward instead. Under ``torch.compile`` the planes are quantized inside the compiled graph at
    every call.

    **Graphs and compile**: no host synchronization (no ``.item()``, ``.tolist()``, ``.cpu()``) and no allocation
    whose size depends on device data happen in forward or backward, so a whole step (forward + backward) can be
    captured in one CUDA graph and replayed with new x, dy and ``m_splits`` (empty experts included). A captured
    step replays the weight planes it was captured with when they came from the cache: in a graph that also updates
    the weights, capture the forward with ``is_first_microbatch=True`` (the quantization is then part of the graph)
    or set ``weight_plane_reuse = False`` before capturing. ``torch.compile(fullgraph=True)`` traces the
    layer's forward and backward (custom ops with fake implementations) without graph breaks and gives the eager
    bits; fuse_wgrad_accumulation and delay_wgrad_compute are for eager / CUDA-graph use (a forward traced by
    torch.compile with either raises RuntimeError).
    """

    def __init__(self, num_gemms: int, in_features: int, out_features: int, *, bias: bool = True,
                 device: torch.device | str | int = "cuda", params_dtype: torch.dtype = torch.bfloat16,
                 recipe: NVFP4Recipe = DEFAULT_RECIPE, mode: str = "fast", fuse_wgrad_accumulation: bool = False,
                 delay_wgrad_compute: bool = False, cache_f16_weights: bool = True) -> None:
        """Build the layer (the arguments are described in the class docstring); TypeError / ValueError for sizes,
        a recipe or a mode the layer does not take."""
        super().__init__()
        for name, v, lo in (("num_gemms", num_gemms, 1), ("in_features", in_features, 16),
                            ("out_features", out_features, 16)):
            if not _ops.is_int(v):
                raise TypeError(f"{name} must be an int >= {lo}, got {v!r}")
            if v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        num_gemms, in_features, out_features = int(num_gemms), int(in_features), int(out_features)
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if v % 16:
                raise ValueError(f"{name}={v} must be a multiple of 16 (one E4M3 scale per 16 elements; it is a GEMM "
                                 "contraction length)")
            if v >= MAX_CONTRACTION:  # (device.grouped_gemm's limit; the layer calls the GEMM ops directly)
                raise ValueError(f"{name}={v}: a GEMM contraction length (fprop K, dgrad N) must be below 2**28")
        if num_gemms > 65535:
            raise ValueError(f"num_gemms={num_gemms}: at most 65535 experts (the bias-gradient kernel's grid)")
        if params_dtype not in _PARAMS_DTYPES:
            raise TypeError(f"params_dtype must be torch.bfloat16 or torch.float32, got {params_dtype!r}")
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {dev}")
        bias, fuse_wgrad_accumulation, delay_wgrad_compute, cache_f16_weights = (
            check_flag(v, name) for name, v in (("bias", bias), ("fuse_wgrad_accumulation", fuse_wgrad_accumulation),
                                                ("delay_wgrad_compute", delay_wgrad_compute),
                                                ("cache_f16_weights", cache_f16_weights)))
        self.num_gemms, self.in_features, self.out_features = num_gemms, in_features, out_features
        self.recipe = recipe
        self.mode = mode
        self._check_settings()
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.delay_wgrad_compute = delay_wgrad_compute
        self.cache_f16_weights = cache_f16_weights
        self.weight_plane_reuse = True
        try:
            w = torch.empty((num_gemms, out_features, in_features), dtype=params_dtype, device=dev)
        except (AssertionError, RuntimeError) as e:  # (torch's "Torch not compiled with CUDA enabled", no GPU)
            if torch.cuda.is_available():  # (a GPU that failed the allocation, e.g. out of memory: torch's error)
                raise
            raise RuntimeError(f"GroupedLinear needs a CUDA device (an sm_90 GPU) for its parameters on {dev}: "
                               f"{e}") from None
        self.weight = torch.nn.Parameter(w)
        self.bias = torch.nn.Parameter(torch.zeros((num_gemms, out_features), dtype=params_dtype, device=dev)) \
            if bias else None
        # W as [E*N, K] is grouped with splits [N] * E (SPEC 16.1)
        self.register_buffer("_weight_splits", torch.full((num_gemms,), out_features, dtype=torch.int64, device=dev),
                             persistent=False)
        # ((layout key, version key), has the columnwise plane, _Planes, the fp16 copy or None)
        self._weight_cache: tuple | None = None
        # deferred wgrads (delay_wgrad_compute), oldest first: (dY's planes, X's planes, _Config, T) per backward; an
        # entry keeps dY's and X's columnwise NVFP4 planes (with amaxes and offsets) alive until backward_dw() runs it
        self._pending_wgrad: list = []
        self.reset_parameters()
        if fuse_wgrad_accumulation:
            self.weight.main_grad = torch.zeros(self.weight.shape, dtype=torch.float32, device=dev)

    def reset_parameters(self) -> None:
        """Each expert's ``[N, K]`` weight as ``torch.nn.Linear`` initialises its weight (uniform in
        ``[-1/sqrt(K), 1/sqrt(K)]``); the bias to zeros (TE's default)."""
        bound = 1.0 / self.in_features ** 0.5
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.zero_()
        self.invalidate_weight_planes()

    def extra_repr(self) -> str:
        """The constructor's settings, shown by ``repr(layer)``."""
        return (f"num_gemms={self.num_gemms}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, mode={self.mode!r}, recipe={self.recipe!r}, "
                f"fuse_wgrad_accumulation={self.fuse_wgrad_accumulation}, "
                f"delay_wgrad_compute={self.delay_wgrad_compute}, cache_f16_weights={self.cache_f16_weights}")

    def _check_settings(self) -> None:
        """The settings a forward reads, checked again at every forward: they are attributes a user may assign
        (``layer.weight_plane_reuse = False``), and a flag such as the string "False" must not act as True."""
        if not isinstance(self.recipe, NVFP4Recipe):
            raise TypeError(f"recipe must be an oracle.NVFP4Recipe, got {type(self.recipe).__name__}")
        if not isinstance(self.mode, str) or self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        for name in ("fuse_wgrad_accumulation", "delay_wgrad_compute", "cache_f16_weights", "weight_plane_reuse"):
            check_flag(getattr(self, name, False), name)  # (the constructor checks before it sets them)

    def _check_params(self) -> None:
        """weight (and bias) still as constructed: the GEMMs take their sizes from in_features / out_features, so a
        parameter replaced by one of another shape or dtype (``weight.data = ...``, ``layer.half()``) is refused here,
        before any kernel reads it."""
        e, n, k = self.num_gemms, self.out_features, self.in_features
        for name, p, shape, dims in (("weight", self.weight, (e, n, k), "num_gemms, out_features, in_features"),
                                     ("bias", self.bias, (e, n), "num_gemms, out_features")):
            if p is None:
                continue
            if not isinstance(p, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(p).__name__}")
            if tuple(p.shape) != shape:
                raise ValueError(f"{name} must be [{dims}] = {list(shape)}, got {list(p.shape)}")
            if p.dtype not in _PARAMS_DTYPES:
                raise TypeError(f"{name} must be torch.bfloat16 or torch.float32, got {p.dtype}")
        if not self.weight.is_cuda:
            raise ValueError(f"the layer's parameters must be on a CUDA device, got {self.weight.device} (moved with "
                             ".cpu() or .to()?)")
        _ops.require_hopper(self.weight, "the layer's weight")
        if self.bias is not None and self.bias.device != self.weight.device:
            raise ValueError(f"bias must be on the weight's device ({self.weight.device}), got {self.bias.device}")
        if self._weight_splits.device != self.weight.device:  # (a buffer: .to() moves it, weight.data = ... not)
            self._weight_splits = self._weight_splits.to(self.weight.device)

    # --------------------------------------------------------------------------------------------------- inputs

    def _device_splits(self, m_splits, t: int, device: torch.device) -> Tensor:
        """m_splits as an int64 [E] tensor on x's device, checked (host metadata only for a tensor)."""
        e = self.num_gemms
        if isinstance(m_splits, Tensor):
            if m_splits.dtype != torch.int64:
                raise TypeError(f"m_splits must be an int64 tensor, got {m_splits.dtype}")
            if m_splits.device != device:
                raise ValueError(f"m_splits must be on x's device ({device}), got {m_splits.device}")
            if m_splits.dim() != 1 or m_splits.shape[0] != e:
                raise ValueError(f"m_splits must be 1-D with num_gemms={e} sizes, got shape {tuple(m_splits.shape)}")
            return m_splits.contiguous()
        if not isinstance(m_splits, (list, tuple)):
            raise TypeError(f"m_splits must be an int64 CUDA tensor or a list of ints, got {type(m_splits).__name__}")
        if len(m_splits) != e:
            raise ValueError(f"m_splits has {len(m_splits)} sizes, the layer has num_gemms={e}")
        if not all(_ops.is_int(v) for v in m_splits):
            raise TypeError(f"m_splits must hold ints >= 0, got {list(m_splits)}")
        if any(v < 0 for v in m_splits):
            raise ValueError(f"m_splits must hold ints >= 0, got {list(m_splits)}")
        m_splits = [int(v) for v in m_splits]
        if sum(m_splits) != t:
            raise ValueError(f"m_splits add up to {sum(m_splits)}, x has {t} rows")
        if torch.cuda.is_current_stream_capturing():
            raise ValueError("m_splits given as a list needs a host-to-device copy, which a CUDA graph would replay "
                             "with the captured values: pass an int64 tensor on x's device")
        host = torch.tensor(list(m_splits), dtype=torch.int64)
        return host.pin_memory().to(device, non_blocking=True)  # one copy, no synchronization

    def _check_x(self, x) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype != torch.bfloat16:
            raise TypeError(f"x must be bfloat16, got {x.dtype}")
        if x.device != self.weight.device:
            raise ValueError(f"x must be on the layer's device ({self.weight.device}), got {x.device}")
        if x.dim() != 2:
            raise ValueError(f"x must be 2-D [T, in_features], got shape {tuple(x.shape)}")
        if x.shape[1] != self.in_features:
            raise ValueError(f"x has K={x.shape[1]} columns, the layer has in_features={self.in_features}")
        t, n, k = x.shape[0], self.out_features, self.in_features
        if max(t, n, k) >= MAX_CONTRACTION:  # (each is a contraction of one of the three GEMMs: wgrad's is T)
            raise ValueError(f"sizes too large: T={t}, N={n}, K={k} (each below 2**28)")
        if self.mode == "sm100" and _sm100_contraction_too_long(max(t, n, k)):
            raise ValueError(f"mode 'sm100' runs contractions below {SM100_MAX_CONTRACTION} only, rounded up to a "
                             f"multiple of 64 (SPEC 12.7's int64 model): T={t}, N={n}, K={k}")

    def _check_packed_scales(self, t: int) -> None:
        """The forward keeps x's columnwise scales packed for the weight gradient (SPEC 9.5); the packing kernel's
        index math runs in 32 bits, so both its input (the swizzled scales' worst-case buffer, SPEC 9.3) and its output
        must stay below 2**32 bytes. Refused here, before the forward launches anything."""
        k, e = self.in_features, self.num_gemms
        swizzled = grouped_capacities(t, k, e)["col_scale"]
        packed = _ops.packed_col_scale_bytes(t, k, e)
        if max(swizzled, packed) >= 2**32:
            raise ValueError(f"T={t}, in_features={k}, num_gemms={e}: x's columnwise scales for the weight gradient "
                             f"take {max(swizzled, packed)} bytes, at most 2**32 - 1 (fewer tokens per call, or no "
                             "weight gradient)")

    # --------------------------------------------------------------------------------------------------- weights

    def _weight_copy_read(self, t: int, need_dx: bool) -> bool:
        """Whether this forward's fprop or dgrad would read the weights' fp16 copy (cache_f16_weights)."""
        if not (self.cache_f16_weights and self.mode == "fast" and self.weight_plane_reuse):
            return False
        e, n, k = self.num_gemms, self.out_features, self.in_features
        read = (_dispatch.weight_copy_read("fprop", e, t, n, k, bias=self.bias is not None, cutlass=True)
                or (need_dx and _copy_serves_dgrad(self.recipe)
                    and _dispatch.weight_copy_read("dgrad", e, t, n, k, bias=False, cutlass=True)))
        return read and bool(_ops.load_gemm_extension().has_cutlass())  # (copies_cutlass built with CUTLASS only)

    def _weight_planes(self, columnwise: bool, is_first_microbatch: bool | None,
                       want_copy: bool = False) -> tuple[_Planes, Tensor | None]:
        """W's planes (SPEC 16.1: [E*N, K], splits [N]*E, recipe.weight_block, RN) and their cached fp16 copy (None
        when there is none): quantized, or taken from the cache as ``is_first_microbatch`` says (see :meth:`forward`).
        A cached entry serves only the dtype, shape, device and recipe weight fields it was quantized for, and a
        forward that needs the columnwise plane only an entry that holds it; ``want_copy`` makes the entry's copy when
        it has none. Without the cache (torch.compile, ``weight_plane_reuse = False``) there is no copy."""
        w = self.weight.detach()
        r = self.recipe
        e, n, k = w.shape

        def quantize() -> _Planes:
            # (a strided weight, e.g. a view given through .data, is copied dense: the quantizer reads a dense buffer)
            w2 = w.reshape(e * n, k).contiguous()
            return _quantize(_aligned(w2), self._weight_splits, rowwise=True, columnwise=columnwise,
                             rht=False, rht_signs=r.rht_signs, block=r.weight_block, rule=r.rule, rounding="rn", seed=0)

        def f16_copy(planes: _Planes) -> Tensor | None:
            return _ops.weight_f16_copy(planes.row_data, planes.row_scales, planes.offsets, e, n, k) \
                if want_copy else None

        if torch.compiler.is_compiling() or not self.weight_plane_reuse:  # (no cache state inside a compiled graph)
            return quantize(), None
        layout = (w.dtype, tuple(w.shape), w.device, r.rule, r.weight_block)
        version = (w._version, w.data_ptr())
        cached = self._weight_cache
        if (is_first_microbatch is not True and cached is not None and cached[0][0] == layout
                and (is_first_microbatch is False or cached[0][1] == version) and (cached[1] or not columnwise)):
            if want_copy and cached[3] is None:
                self._weight_cache = cached = cached[:3] + (f16_copy(cached[2]),)
            elif not (self.cache_f16_weights and self.mode == "fast") and cached[3] is not None:
                self._weight_cache = cached = cached[:3] + (None,)  # turned off (or another mode): the memory goes back
            return cached[2], cached[3] if want_copy else None
        planes = quantize()
        copy = f16_copy(planes)
        self._weight_cache = ((layout, version), columnwise, planes, copy)
        return planes, copy

    def invalidate_weight_planes(self) -> None:
        """Drop the cached weight planes: the next forward quantizes the weights (whatever its
        ``is_first_microbatch``). Call it after a weight update that the version check cannot see (:meth:`forward`)."""
        self._weight_cache = None

    # --------------------------------------------------------------------------------------------------- forward

    def forward(self, x: Tensor, m_splits: Tensor | list[int], *, is_first_microbatch: bool | None = None) -> Tensor:
        """``y`` ``[T, out_features]`` bfloat16 for ``x`` ``[T, in_features]`` bfloat16 (CUDA) whose rows are grouped
        by ``m_splits``: expert g takes the next ``m_splits[g]`` rows.

        ``m_splits``: an int64 CUDA tensor ``[num_gemms]`` (never read on the host), or a list of ints, checked to
        add up to T and copied to the device once. A list also guides the choice of the fprop and dgrad kernels
        (``device.grouped_gemm``'s ``split_sizes``; they give the same bits either way), which plan device splits as
        balanced groups. Device splits that do not add up to T take SPEC 9.4's meaning: negative sizes count as 0
        and the running total is cut at T; every quantization and GEMM uses the cut sizes, and the rows of y and of
        x.grad past the last (cut) group belong to no expert and are not defined.

        ``is_first_microbatch`` (TE's argument) controls the weight-plane cache (see the class docstring):

        * ``None`` (default): the cached planes are reused while ``weight._version`` and ``weight.data_ptr()`` are
          those they were quantized at, else the weights are quantized and cached;
        * ``True``: the weights are quantized and cached (the first micro-batch after an optimizer step);
        * ``False``: the cached planes are reused without looking at the weight's version or address (later
          micro-batches of the same step); the weights are quantized only when nothing usable is cached (none yet,
          after :meth:`invalidate_weight_planes`, another dtype, shape or recipe weight field, or a cached entry
          without the columnwise plane that a forward with x.requires_grad needs).

        ``layer.weight_plane_reuse = False`` and torch.compile quantize the weights in every forward, whatever
        ``is_first_microbatch`` says.

        Raises TypeError / ValueError before any launch for an x of the wrong type, dtype, device or shape
        (``[T, in_features]``), m_splits of the wrong type, dtype, device or length, a list that does not add up
        to T, an ``is_first_microbatch`` that is not None, True or False, or a weight / bias no longer of the
        constructed shape (``[num_gemms, out_features(, in_features)]``), of a dtype other than bfloat16 / float32,
        or a bias off the weight's device; RuntimeError under torch.compile when
        ``fuse_wgrad_accumulation`` or ``delay_wgrad_compute`` is set (they keep Python state that a compiled graph
        cannot update: ``weight.main_grad`` looked up at backward time, the deferred-wgrad queue)."""
        self._check_settings()
        self._check_params()
        if is_first_microbatch is not None and not isinstance(is_first_microbatch, (bool, np.bool_)):
            raise TypeError(f"is_first_microbatch must be None, True or False, got {is_first_microbatch!r}")
        is_first_microbatch = None if is_first_microbatch is None else bool(is_first_microbatch)
        if torch.compiler.is_compiling() and (self.fuse_wgrad_accumulation or self.delay_wgrad_compute):
            raise RuntimeError("GroupedLinear with fuse_wgrad_accumulation or delay_wgrad_compute is not supported "
                               "under torch.compile (the backward updates weight.main_grad / the deferred-wgrad "
                               "queue, Python state outside the graph): run it eagerly or in a CUDA graph")
        self._check_x(x)
        x = _aligned(x).contiguous()
        splits = self._device_splits(m_splits, x.shape[0], x.device)
        grad = torch.is_grad_enabled()
        need_dx = grad and x.requires_grad
        need_dw = grad and self.weight.requires_grad
        need_dbias = grad and self.bias is not None and self.bias.requires_grad
        if need_dw:
            self._check_packed_scales(x.shape[0])
        if need_dw and self.fuse_wgrad_accumulation and not self.delay_wgrad_compute:
            _check_main_grad(self.weight)
        r = self.recipe
        cfg = _Config(mode=self.mode, e=self.num_gemms, n=self.out_features, k=self.in_features, rule=r.rule,
                      rht_wgrad=r.rht_wgrad, rht_signs=r.rht_signs, sr_grad=r.sr_grad, seed=r.seed, need_dx=need_dx,
                      need_dw=need_dw, need_dbias=need_dbias, fuse_wgrad=self.fuse_wgrad_accumulation,
                      delay_wgrad=self.delay_wgrad_compute, copy_dgrad=_copy_serves_dgrad(r),
                      uneven_rows=None if isinstance(m_splits, Tensor) else _dispatch.uneven_rows(m_splits))
        want_copy = not _ops._traced(x) and self._weight_copy_read(x.shape[0], need_dx)
        wq, w_copy = self._weight_planes(need_dx, is_first_microbatch, want_copy)
        layer = self if (self.fuse_wgrad_accumulation or self.delay_wgrad_compute) else None
        return _GroupedLinearFunction.apply(x, self.weight, self.bias, splits, wq.row_data, wq.row_scales,
                                            wq.col_data, wq.col_scales, wq.row_amax, wq.col_amax, wq.offsets, w_copy,
                                            cfg, layer)

    # --------------------------------------------------------------------------------------------------- deferred

    def need_backward_dw(self) -> bool:
        """Whether a wgrad deferred by ``delay_wgrad_compute`` waits for :meth:`backward_dw`."""
        return bool(self._pending_wgrad)

    def backward_dw(self) -> None:
        """Run the oldest wgrad GEMM that a backward deferred (``delay_wgrad_compute=True``; nothing when none
        waits): with ``fuse_wgrad_accumulation`` ``weight.main_grad += dW`` in place, else ``weight.grad`` set to dW
        (in the weight's dtype) or, when it already holds a gradient, dW added to it."""
        if not self._pending_wgrad:
            return
        dyq, xq, cfg, t = self._pending_wgrad.pop(0)
        xq = xq._replace(col_scales=_ops.unpack_col_scales_op(xq.col_scales, xq.offsets, t, cfg.k))  # (SPEC 9.5)
        if self.fuse_wgrad_accumulation:
            _wgrad(dyq, xq, cfg, t, self.weight.dtype, _check_main_grad(self.weight))
            return
        dw = _wgrad(dyq, xq, cfg, t, self.weight.dtype, None)
        if self.weight.grad is None:
            self.weight.grad = dw
        else:
            self.weight.grad.add_(dw)
