"""torch.library custom ops around the CUDA extension, plus the out-variant launchers they use.

The ops are functional (they allocate their outputs with ``torch.empty`` on the input's device and launch
on the current stream), have fake implementations for torch.compile, and do no host synchronization, so they
can be captured in CUDA graphs. Buffer sizes depend only on host-known shapes (SPEC 9: worst-case capacity
for grouped outputs), never on device data.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

from oracle.four_over_six import check_global_scale_max
from oracle.grouped import grouped_capacities

from . import _dispatch
from ._build import load_extension, load_gemm_extension
from ._codes import TORCHAO_RULES, GemmKind, QuantizeKernel, Rule, ScaleLayout

__all__ = [
    "GEMM_SIZES",
    "LAYOUT_COMPACT",
    "LAYOUT_PADDED_COMPACT",
    "LAYOUT_SWIZZLED",
    "group_buffers",
    "bias_grad_op",
    "gemm_problem",
    "pack_col_scales_op",
    "launch_group_quantize",
    "launch_grouped_gemm",
    "launch_quantize",
    "quantize_buffers",
    "require_cuda_tensors",
    "require_hopper",
    "unpack_col_scales_op",
]

LAYOUT_COMPACT, LAYOUT_PADDED_COMPACT, LAYOUT_SWIZZLED = (int(ScaleLayout[n]) for n in ("compact", "padded_compact",
                                                                                          "swizzled"))
_NAN_PROPAGATING = tuple(int(Rule[name]) for name in TORCHAO_RULES)  # the torchao rules' amax (SPEC 4.1)
_TILE_M = 128  # rows per kernel tile (csrc/quantize/layout.cuh kTileM)
_FOUR_OVER_SIX = int(QuantizeKernel.four_over_six)  # the 4over6 quantizer's plan code (SPEC 5.6)


def _raise_refusal(err: str) -> None:
    """The extension's bindings return "" or the message of a refusal / launch error instead of throwing
    (device/csrc/quantize/bindings.cpp and gemm/bindings.cpp, returning_errors): raise it here."""
    if err:
        raise RuntimeError(err)


def _ru(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def scale_shape(rows: int, blocks: int, swizzled: bool) -> tuple[int, ...]:
    """Shape of one plane's scale buffer: compact ``(rows, blocks)``, or the swizzled 1-D buffer of
    ``roundup(rows, 128) * roundup(blocks, 4)`` bytes (SPEC 8)."""
    return (_ru(rows, 128) * _ru(blocks, 4),) if swizzled else (rows, blocks)


def _empty(shape, device, fill: int | None, dtype=torch.uint8) -> Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if fill is not None and t.numel():
        t.view(torch.uint8).fill_(fill)
    return t


def _allocate(specs: dict, device, fill: int | None) -> dict:
    """Buffers for ``specs`` (name -> (shape, dtype)); the planes not in ``specs`` get empty uint8 tensors."""
    b = {name: torch.empty(0, dtype=torch.uint8, device=device)
         for name in ("row_data", "row_scales", "col_data", "col_scales")}
    b.update({name: _empty(shape, device, fill, dtype) for name, (shape, dtype) in specs.items()})
    return b


def _check_buffers(bufs: dict, specs: dict, device) -> None:
    """The out-variant launchers write raw pointers: every buffer in ``specs`` (name -> (shape, dtype), what the
    matching ``*_buffers`` function allocates) must be a contiguous tensor of that dtype on x's device, at least
    that large."""
    for name, (shape, dtype) in specs.items():
        t = bufs.get(name)
        if not isinstance(t, Tensor) or t.device != device or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(f"buffer {name!r} must be a contiguous {dtype} tensor on {device}")
        if t.numel() < math.prod(shape):
            raise ValueError(f"buffer {name!r} holds {t.numel()} elements, the call writes {math.prod(shape)}")


# ---------------------------------------------------------------------------------------------------------
# single tensor
# ---------------------------------------------------------------------------------------------------------

def _quantize_specs(m: int, k: int, rowwise: bool, columnwise: bool, swizzled: bool) -> dict:
    """name -> (shape, dtype) of the buffers one quantize call writes (SPEC 6, 8)."""
    mp = _ru(m, 16)
    specs = {"amax": ((2,), torch.float32)}
    if rowwise:
        specs.update(row_data=((m, k // 2), torch.uint8), row_scales=(scale_shape(m, k // 16, swizzled), torch.uint8))
    if columnwise:
        specs.update(col_data=((k, mp // 2), torch.uint8),
                     col_scales=(scale_shape(k, mp // 16, swizzled), torch.uint8))
    return specs


def quantize_buffers(m: int, k: int, *, rowwise: bool, columnwise: bool, swizzled: bool, device,
                     fill: int | None = None) -> dict:
    """Output buffers of one quantize call (SPEC 6, 8); ``fill`` poisons them (tests)."""
    return _allocate(_quantize_specs(m, k, rowwise, columnwise, swizzled), device, fill)


def _supplied_pair(row_amax: Tensor | None, col_amax: Tensor | None) -> tuple[Tensor, Tensor] | None:
    """The custom ops' two optional amax arguments as the launchers' ``amax_in``: None, or both."""
    if (row_amax is None) != (col_amax is None):
        raise ValueError("supply both amaxes (row, col) or neither")
    return None if row_amax is None else (row_amax, col_amax)


def launch_quantize(x: Tensor, bufs: dict, amax_in: tuple[Tensor, Tensor] | None, *, rowwise: bool,
                    columnwise: bool, rht: bool, rht_signs: int, block2d: bool, rule: int, sr: bool, seed_lo: int,
                    seed_hi: int, offset: int, swizzled: bool, amax_kernel: int, quantize_kernel: int,
                    four_over_six: int = 0, four_over_six_fast_math: bool = False, global_scale_max: int = 448) -> None:
    """Launch the amax pass, or, with ``amax_in`` = (row, col) (one-value float32 device tensors, the same one for
    both planes allowed), the one-CTA kernel that writes them into ``bufs["amax"]`` as SPEC 4.3 uses them (a
    negative value as its magnitude); then the fused quantizer into ``bufs`` (``quantize_buffers``' layout; sizes
    checked), overlapping the previous kernel (PDL). ``amax_kernel`` / ``quantize_kernel``: the plan's QuantizeKernel
    codes (device._dispatch.plan_quantize). ``four_over_six``: 0, or the 4over6 error code (1 MAE, 2 MSE, SPEC 5.6)
    that the ``four_over_six`` quantize kernel runs with ``four_over_six_fast_math`` and ``global_scale_max``."""
    require_hopper(x, "x")
    m, k = x.shape
    _check_buffers(bufs, _quantize_specs(m, k, rowwise, columnwise, swizzled), x.device)
    ext = load_extension()
    row_tiles = (m + _TILE_M - 1) // _TILE_M
    amax = bufs["amax"]
    if amax_in is None:  # (amax_ zeroes both amaxes first, SPEC 4: the columnwise one stays 0 when not asked for)
        _raise_refusal(ext.amax_(x, None, 1, row_tiles, amax[0:1], amax[1:2], columnwise, rht, rht_signs, False,
                                 rule in _NAN_PROPAGATING, None, None, amax_kernel))
    else:
        _raise_refusal(ext.supplied_amax_(amax_in[0], amax_in[1], amax[0:1], amax[1:2]))
    if quantize_kernel == _FOUR_OVER_SIX:
        _raise_refusal(ext.quantize_4over6_(
            x, None, 1, row_tiles, amax[0:1], amax[1:2],
            bufs["row_data"] if rowwise else None, bufs["row_scales"] if rowwise else None,
            bufs["col_data"] if columnwise else None, bufs["col_scales"] if columnwise else None,
            LAYOUT_SWIZZLED if swizzled else LAYOUT_COMPACT, block2d, four_over_six, four_over_six_fast_math,
            global_scale_max, True, None))  # the previous launch wrote the amaxes: the quantizer may overlap it
        return
    _raise_refusal(ext.quantize_(
        x, None, 1, row_tiles, amax[0:1], amax[1:2],
        bufs["row_data"] if rowwise else None, bufs["row_scales"] if rowwise else None,
        bufs["col_data"] if columnwise else None, bufs["col_scales"] if columnwise else None,
        LAYOUT_SWIZZLED if swizzled else LAYOUT_COMPACT, block2d, sr, rule, rht, rht_signs, seed_lo, seed_hi, offset,
        True,  # the previous launch (amax pass or supplied amaxes) wrote the amaxes: the quantizer may overlap it
        None, quantize_kernel,
    ))


@torch.library.custom_op("nvfp4_device::quantize", mutates_args=())
def quantize_op(x: Tensor, row_amax: Tensor | None, col_amax: Tensor | None, rowwise: bool, columnwise: bool,
                rht: bool, rht_signs: int, block2d: bool, rule: int, sr: bool, seed_lo: int, seed_hi: int,
                offset: int, swizzled: bool, amax_kernel: int, quantize_kernel: int, four_over_six: int = 0,
                four_over_six_fast_math: bool = False,
                global_scale_max: int = 448) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Functional NVFP4 quantize of a 2-D CUDA tensor: (row_data, row_scales, col_data, col_scales, amax[2]);
    ``row_amax`` / ``col_amax``: both None (the amax pass) or both supplied, as ``launch_quantize``'s pair."""
    m, k = x.shape
    bufs = quantize_buffers(m, k, rowwise=rowwise, columnwise=columnwise, swizzled=swizzled, device=x.device)
    launch_quantize(x, bufs, _supplied_pair(row_amax, col_amax), rowwise=rowwise, columnwise=columnwise, rht=rht,
                    rht_signs=rht_signs, block2d=block2d, rule=rule, sr=sr, seed_lo=seed_lo, seed_hi=seed_hi,
                    offset=offset, swizzled=swizzled, amax_kernel=amax_kernel, quantize_kernel=quantize_kernel,
                    four_over_six=four_over_six, four_over_six_fast_math=four_over_six_fast_math,
                    global_scale_max=global_scale_max)
    return bufs["row_data"], bufs["row_scales"], bufs["col_data"], bufs["col_scales"], bufs["amax"]


@quantize_op.register_fake
def _(x, row_amax, col_amax, rowwise, columnwise, rht, rht_signs, block2d, rule, sr, seed_lo, seed_hi, offset,
      swizzled, amax_kernel, quantize_kernel, four_over_six=0, four_over_six_fast_math=False, global_scale_max=448):
    m, k = x.shape
    b = quantize_buffers(m, k, rowwise=rowwise, columnwise=columnwise, swizzled=swizzled, device=x.device)
    return b["row_data"], b["row_scales"], b["col_data"], b["col_scales"], b["amax"]


# ---------------------------------------------------------------------------------------------------------
# grouped (SPEC 9)
# ---------------------------------------------------------------------------------------------------------

def _group_specs(t: int, k: int, e: int, rowwise: bool, columnwise: bool) -> dict:
    """name -> (shape, dtype) of the buffers one grouped quantize call writes, sized from (T, K, E) only."""
    cap = grouped_capacities(t, k, e)
    specs = {"row_amax": ((e,), torch.float32), "col_amax": ((e,), torch.float32),
             "offsets": ((6, e + 1), torch.int64)}
    if rowwise:
        specs.update(row_data=((cap["row_data"],), torch.uint8), row_scales=((cap["row_scale"],), torch.uint8))
    if columnwise:
        specs.update(col_data=((cap["col_data"],), torch.uint8), col_scales=((cap["col_scale"],), torch.uint8))
    return specs


def group_buffers(t: int, k: int, e: int, *, rowwise: bool, columnwise: bool, device,
                  fill: int | None = None) -> dict:
    """Output buffers of one grouped quantize call, sized from (T, K, E) only."""
    return _allocate(_group_specs(t, k, e, rowwise, columnwise), device, fill)


def launch_group_quantize(x: Tensor, splits: Tensor, bufs: dict, amax_in: tuple[Tensor, Tensor] | None, *,
                          rowwise: bool, columnwise: bool, rht: bool, rht_signs: int, block2d: bool, rule: int,
                          sr: bool, seed_lo: int, seed_hi: int, offset: int, swizzled: bool, amax_kernel: int,
                          quantize_kernel: int, four_over_six: int = 0, four_over_six_fast_math: bool = False,
                          global_scale_max: int = 448) -> None:
    """Offsets, amaxes, tail zero-fill and the fused quantizer, all on device (``group_buffers``' layout; sizes
    checked). The amaxes: the amax pass, or with ``amax_in`` = (row, col) (contiguous float32 device tensors of E
    values, the same one for both planes allowed) the setup kernel writes them as SPEC 4.3 uses them. The 4over6
    options as in :func:`launch_quantize`."""
    require_hopper(x, "x")
    t, k = x.shape
    e = splits.numel()
    _check_buffers(bufs, _group_specs(t, k, e, rowwise, columnwise), x.device)
    ext = load_extension()
    row_tiles = t // _TILE_M + e  # worst case of sum ceil(m_g / 128)
    offs, row_amax, col_amax = bufs["offsets"], bufs["row_amax"], bufs["col_amax"]
    # each row tile's place in X, written by the setup kernel for the bf16 fast kernels (scratch, not returned)
    recs = torch.empty((row_tiles, 4), dtype=torch.int32, device=x.device)
    compute = amax_in is None
    _raise_refusal(ext.group_setup_(
        splits, t, k, offs, row_amax, col_amax, None if compute else amax_in[0], None if compute else amax_in[1],
        bufs["row_data"] if rowwise else None, bufs["row_scales"] if rowwise else None,
        bufs["col_data"] if columnwise else None, bufs["col_scales"] if columnwise else None, recs))
    if compute:  # the setup kernel is the previous launch: the amax pass may start as it runs (from the splits)
        _raise_refusal(ext.amax_(x, offs, e, row_tiles, row_amax, col_amax, columnwise, rht, rht_signs, True,
                                 rule in _NAN_PROPAGATING, recs, splits, amax_kernel))
    if quantize_kernel == _FOUR_OVER_SIX:
        _raise_refusal(ext.quantize_4over6_(
            x, offs, e, row_tiles, row_amax, col_amax,
            bufs["row_data"] if rowwise else None, bufs["row_scales"] if rowwise else None,
            bufs["col_data"] if columnwise else None, bufs["col_scales"] if columnwise else None,
            LAYOUT_SWIZZLED if swizzled else LAYOUT_PADDED_COMPACT, block2d, four_over_six, four_over_six_fast_math,
            global_scale_max, compute, recs))
        return
    _raise_refusal(ext.quantize_(
        x, offs, e, row_tiles, row_amax, col_amax,
        bufs["row_data"] if rowwise else None, bufs["row_scales"] if rowwise else None,
        bufs["col_data"] if columnwise else None, bufs["col_scales"] if columnwise else None,
        LAYOUT_SWIZZLED if swizzled else LAYOUT_PADDED_COMPACT, block2d, sr, rule, rht, rht_signs, seed_lo, seed_hi,
        offset, compute,  # the amax pass is the previous launch: the quantizer may overlap its tail
        recs, quantize_kernel,
    ))


@torch.library.custom_op("nvfp4_device::group_quantize", mutates_args=())
def group_quantize_op(x: Tensor, splits: Tensor, row_amax: Tensor | None, col_amax: Tensor | None, rowwise: bool,
                      columnwise: bool, rht: bool, rht_signs: int, block2d: bool, rule: int, sr: bool, seed_lo: int,
                      seed_hi: int, offset: int, swizzled: bool, amax_kernel: int, quantize_kernel: int,
                      four_over_six: int = 0, four_over_six_fast_math: bool = False, global_scale_max: int = 448,
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Functional grouped quantize: (row_data, row_scales, col_data, col_scales, row_amax, col_amax, offsets)."""
    t, k = x.shape
    bufs = group_buffers(t, k, splits.numel(), rowwise=rowwise, columnwise=columnwise, device=x.device)
    launch_group_quantize(x, splits, bufs, _supplied_pair(row_amax, col_amax), rowwise=rowwise,
                          columnwise=columnwise, rht=rht, rht_signs=rht_signs, block2d=block2d, rule=rule, sr=sr,
                          seed_lo=seed_lo, seed_hi=seed_hi, offset=offset, swizzled=swizzled,
                          amax_kernel=amax_kernel, quantize_kernel=quantize_kernel, four_over_six=four_over_six,
                          four_over_six_fast_math=four_over_six_fast_math, global_scale_max=global_scale_max)
    return (bufs["row_data"], bufs["row_scales"], bufs["col_data"], bufs["col_scales"], bufs["row_amax"],
            bufs["col_amax"], bufs["offsets"])


@group_quantize_op.register_fake
def _(x, splits, row_amax, col_amax, rowwise, columnwise, rht, rht_signs, block2d, rule, sr, seed_lo, seed_hi, offset,
      swizzled, amax_kernel, quantize_kernel, four_over_six=0, four_over_six_fast_math=False, global_scale_max=448):
    t, k = x.shape
    b = group_buffers(t, k, splits.shape[0], rowwise=rowwise, columnwise=columnwise, device=x.device)
    return (b["row_data"], b["row_scales"], b["col_data"], b["col_scales"], b["row_amax"], b["col_amax"],
            b["offsets"])


# ---------------------------------------------------------------------------------------------------------
# swizzle (SPEC 8.2) and dequantize (SPEC 11)
# ---------------------------------------------------------------------------------------------------------

@torch.library.custom_op("nvfp4_device::swizzle_scales", mutates_args=())
def swizzle_op(compact: Tensor) -> Tensor:
    """Compact uint8 scales [rows, C] -> swizzled zero-padded 1-D buffer (SPEC 8.2)."""
    require_hopper(compact, "compact scales")
    rows, cols = compact.shape
    out = torch.empty(_ru(rows, 128) * _ru(cols, 4), dtype=torch.uint8, device=compact.device)
    _raise_refusal(load_extension().swizzle_(compact, out))
    return out


@swizzle_op.register_fake
def _(compact):
    rows, cols = compact.shape
    return compact.new_empty(_ru(rows, 128) * _ru(cols, 4))


def is_int(v) -> bool:
    """Whether ``v`` is an integer (Python or numpy) and not a bool (numpy bools are not ``numbers.Integral``)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


_HOPPER = (9, 0)
_hopper_devices: set[int] = set()  # the CUDA device indices that require_hopper has found to be sm_90


def require_hopper(t: Tensor, name: str) -> None:
    """Refuse a CUDA tensor whose GPU is not sm_90 (Hopper) with a ``RuntimeError`` that names it. The kernels are
    built for ``sm_90a`` only (device/_build.py), so on any other GPU every launch would fail with CUDA's "no kernel
    image is available" error. The answer is cached per device index. The public functions call it before their other
    checks; every launcher and op body here calls it again before its launch, which covers the ops called directly
    (``torch.ops.nvfp4_device``) and a compiled graph's calls. Skipped while torch.compile traces and on fake tensors
    (no GPU need be present then). Launchers that check their buffers on the host do so first (those checks read no
    device)."""
    if _traced(t):
        return
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if index in _hopper_devices:
        return
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) != _HOPPER:
        gpu = torch.cuda.get_device_name(index)
        raise RuntimeError(f"{name} is on cuda:{index}, an sm_{major}{minor} GPU ({gpu}); the device kernels are built "
                           "for sm_90a and run on Hopper GPUs (H100, H200) only")
    _hopper_devices.add(index)


def require_cuda_tensors(**tensors) -> None:
    """Check that every keyword argument is a CUDA ``torch.Tensor`` on a Hopper GPU; the error names the first that
    is not: ``TypeError`` for another type (a NumPy array, a number), ``ValueError`` for a tensor on another device,
    ``RuntimeError`` for a GPU other than sm_90 (:func:`require_hopper`)."""
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a CUDA tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor, got device {t.device}")
        require_hopper(t, name)


def check_dequantize_args(data: Tensor, scales: Tensor, amax: Tensor, rows: int, cols: int, swizzled: bool) -> None:
    """What the dequantize kernel reads, checked before the launch: exactly rows*cols/2 code bytes (8-byte aligned: it
    reads words), exactly the plane's scale bytes (compact ``[rows, C]``, C = cols/16, or the swizzled buffer of SPEC
    8.2), one float32 amax, all on one CUDA device. Exact sizes: a buffer of another plane, or a padded compact one
    (SPEC 9.2's grouped layout, ``[roundup(rows,128), roundup(C,4)]``), would be read at the wrong offsets."""
    require_cuda_tensors(data=data, scales=scales, amax=amax)
    for name, t in (("data", data), ("scales", scales), ("amax", amax)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if data.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise TypeError(f"data and scales must be uint8 tensors, got {data.dtype} and {scales.dtype}")
    if amax.dtype != torch.float32:
        raise TypeError(f"amax must be float32, got {amax.dtype}")
    if scales.device != data.device or amax.device != data.device:
        raise ValueError(f"data, scales and amax must be on one device, got {data.device}, {scales.device}, "
                         f"{amax.device}")
    if rows < 0 or cols < 0 or cols % 16:
        raise ValueError(f"shape=({rows}, {cols}): rows and cols must be >= 0 and cols a multiple of 16")
    need_scales = math.prod(scale_shape(rows, cols // 16, swizzled))
    if data.numel() != rows * cols // 2:
        raise ValueError(f"data holds {data.numel()} bytes, a {rows} x {cols} plane has {rows * cols // 2}")
    layout = "swizzled" if swizzled else "compact"
    if scales.numel() != need_scales:
        padded = math.prod(scale_shape(rows, cols // 16, True))  # (the padded compact size equals the swizzled one)
        hint = ("; these are padded compact scales (a grouped result's with swizzled=False, SPEC 9.2): pass their "
                "[:rows, :cols // 16] slice" if not swizzled and scales.numel() == padded else "")
        raise ValueError(f"scales hold {scales.numel()} bytes, {layout} scales of a {rows} x {cols} plane have "
                         f"{need_scales}{hint}")
    if not swizzled and scales.dim() == 2 and tuple(scales.shape) != (rows, cols // 16):
        raise ValueError(f"compact scales of a {rows} x {cols} plane are [{rows}, {cols // 16}], got "
                         f"{list(scales.shape)}")
    if amax.numel() < 1:
        raise ValueError("amax must hold one value")
    if data.numel() and data.data_ptr() % 8:
        raise ValueError("data must be 8-byte aligned (the kernel reads the codes as 8-byte words; its storage "
                         "offset breaks that)")


@torch.library.custom_op("nvfp4_device::dequantize", mutates_args=())
def dequantize_op(data: Tensor, scales: Tensor, amax: Tensor, rows: int, cols: int, swizzled: bool,
                  rule: int = 0, global_scale_max: int = 448) -> Tensor:
    """One NVFP4 plane -> float32 [rows, cols] (SPEC 11; ``rule``: a code of device._codes.Rule, 0 = "te";
    ``global_scale_max``: the plane's G, 448 or 256 (a 4over6 plane, SPEC 5.6), in the TE rules' factor
    fp32(1/(6G)), SPEC 11.1). The arguments are checked (check_dequantize_args): this op is public as
    torch.ops.nvfp4_device.dequantize."""
    check_dequantize_args(data, scales, amax, rows, cols, swizzled)
    if rule not in {int(r) for r in Rule}:
        raise ValueError(f"rule must be a scale rule code of device._codes.Rule, got {rule!r}")
    check_global_scale_max(global_scale_max)
    out = torch.empty((rows, cols), dtype=torch.float32, device=data.device)
    _raise_refusal(load_extension().dequantize_(data, scales, amax, rows, cols, swizzled, rule, global_scale_max, out))
    return out


@dequantize_op.register_fake
def _(data, scales, amax, rows, cols, swizzled, rule=0, global_scale_max=448):
    return data.new_empty((rows, cols), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------------
# grouped GEMM (SPEC 12.5)
# ---------------------------------------------------------------------------------------------------------

def alpha_factor(g_a: int, g_b: int) -> float:
    """SPEC 12.1: fp32(1/(36 G_A G_B)) from the operands' G (``global_scale_max``: 448, or 256 under 4over6, SPEC
    5.6); 36 G_A G_B is exact in fp32 and its reciprocal is rounded once (448 for both: fp32(1/7225344))."""
    return float(np.float32(1.0) / np.float32(36 * g_a * g_b))


_RCP_7225344 = alpha_factor(448, 448)  # SPEC 12.1: fp32(1/7225344)

#: The names of the ints in the ``sizes`` argument of the grouped GEMM ops, in order (device/gemm.py computes them
#: from the operands' host-known shapes): the plan's problem (tokens, n, k; SPEC 12.5's names), the kernel's
#: arguments (b_rows, a_rows, kc, cols), the SPEC 12.1 alpha rule code, the upper bound on output tiles, the
#: operands' G (SPEC 5.6, 12.1) and what the caller knows of the group sizes on the host (uneven_rows: 1 / 0 for
#: device._dispatch.uneven_rows of the sizes, -1 where they are not known; the plan only).
GEMM_SIZES = ("tokens", "n", "k", "b_rows", "a_rows", "kc", "cols", "rule", "grid_upper", "g_a", "g_b", "uneven_rows")


def gemm_problem(kind: int, mode: str, groups: int, sizes, out_dtype: torch.dtype, accumulate: bool, bias: bool,
                 a_data: Tensor, a_scales: Tensor, b_data: Tensor, b_scales: Tensor, cutlass: bool,
                 b_copy: bool = False) -> _dispatch.GemmProblem:
    """The host-known description of a grouped GEMM call from which device._dispatch chooses its plan (reads the
    operand buffers' addresses for the alignment of b: a real tensor, not a fake one)."""
    s = dict(zip(GEMM_SIZES, sizes, strict=True))
    return _dispatch.GemmProblem(
        kind=GemmKind(kind).name, mode=mode, groups=groups, tokens=s["tokens"], n=s["n"], k=s["k"],
        out_dtype="float32" if out_dtype == torch.float32 else "bfloat16", accumulate=accumulate, bias=bias,
        b_data_aligned=b_data.data_ptr() % 16 == 0, a_scales_aligned=a_scales.data_ptr() % 16 == 0,
        b_scales_aligned=b_scales.data_ptr() % 16 == 0,
        a_data_bytes=a_data.numel(), b_data_bytes=b_data.numel(), b_scale_bytes=b_scales.numel(), cutlass=cutlass,
        b_copy=b_copy, uneven_rows=None if s["uneven_rows"] < 0 else bool(s["uneven_rows"]))


def weight_f16_copy(row_data: Tensor, row_scales: Tensor, offsets: Tensor, e: int, n: int, k: int) -> Tensor:
    """The weights' fp16 copy ``[E, N, K]`` from their rowwise plane (grouped by N rows per expert, swizzled
    scales): the exact values E2M1 x E4M3 of every element (SPEC 12.6; the per-expert factor of SPEC 12.1 stays in
    alpha), which fast-mode fprop and dgrad over copies read instead of decoding the weight plane
    (:func:`launch_grouped_gemm`'s ``b_copy``)."""
    require_hopper(row_data, "the weights' row data")
    out = torch.empty((e, n, k), dtype=torch.float16, device=row_data.device)
    _raise_refusal(load_gemm_extension().weight_f16_copy_(row_data, row_scales, offsets, e, k, out))
    return out


def _shares_memory(x: Tensor, y: Tensor) -> bool:
    """Whether the bytes of two contiguous tensors overlap (any dtypes, views included)."""
    if x.numel() == 0 or y.numel() == 0 or x.device != y.device:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    return x0 < y0 + y.numel() * y.element_size() and y0 < x0 + x.numel() * x.element_size()


def check_gemm_out(kind: int, out: Tensor, sizes, groups: int, operands: dict[str, Tensor]) -> None:
    """What the GEMM kernels need of ``out`` beyond its dtype and contiguity (which the binding checks): the shape
    ``sizes`` give (SPEC 12.5: fprop / dgrad ``[T, cols]``, wgrad ``[E, N, K]``), the operands' device, a 16-byte
    aligned base (the epilogues store aligned words) and no byte shared with an operand (the kernels would overwrite
    it while other CTAs still read it). Run by :func:`device.grouped_gemm` before anything is launched and again by
    :func:`launch_grouped_gemm`, the body of the compiled and registered ops, whose fake-tensor trace has no
    addresses. ``operands``: name -> tensor."""
    s = dict(zip(GEMM_SIZES, sizes, strict=True))
    want = (groups, s["a_rows"], s["cols"]) if kind == int(GemmKind.wgrad) else (s["tokens"], s["cols"])
    if tuple(out.shape) != want:
        raise ValueError(f"{GemmKind(kind).name}: out must have shape {want}, got {tuple(out.shape)}")
    for what, buf in operands.items():
        if buf.device != out.device:
            raise ValueError(f"{what} is on {buf.device}, out on {out.device}: a GEMM's tensors share one device")
    if out.numel() and out.data_ptr() % 16:
        raise ValueError("out must be 16-byte aligned")
    for what, buf in operands.items():
        if _shares_memory(out, buf):
            raise ValueError(f"out shares memory with {what}: the kernels would overwrite an operand while other CTAs "
                             "still read it")


def launch_grouped_gemm(kind: int, mode: str, a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor,
                        b_data: Tensor, b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, out: Tensor,
                        bias: Tensor | None, accumulate: bool, sizes, algorithm: str, loader: str, epilogue: str,
                        num_sms: int, b_copy: Tensor | None = None) -> None:
    """Plan (device._dispatch.plan_gemm, with the forced parts named by ``algorithm`` / ``loader`` / ``epilogue``;
    "" = chosen by the sizes) and launch one grouped GEMM into ``out`` on the current stream: the setup kernel, then
    the plan's kernels. The arguments were checked by device/gemm.py (or the layer); the binding re-checks what would
    make a kernel touch invalid memory. ``num_sms``: the persistent grid's cap (0: none).

    ``b_copy`` (fprop and dgrad, fast mode): b's values as :func:`weight_f16_copy` makes them from the rowwise plane
    of the weights whose planes b holds, ``[E, N, K]``; fprop's B is that rowwise plane, dgrad's the columnwise one,
    which holds the same values transposed when the weights were quantized in 16x16 blocks, RN, without RHT
    (SPEC 6.3; the caller vouches for it). The plan may then run copies_cutlass without decoding b (dgrad: bf16 output
    only; otherwise the copy is not used)."""
    groups = a_offsets.shape[1] - 1
    check_gemm_out(kind, out, sizes, groups, {
        "a's data": a_data, "a's scales": a_scales, "a's amax": a_amax, "a.offsets": a_offsets, "b's data": b_data,
        "b's scales": b_scales, "b's amax": b_amax, "b.offsets": b_offsets})
    if out.numel() == 0:
        return
    require_hopper(a_data, "a")
    if bias is not None and bias.numel() and bias.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        bias = bias.clone()  # the epilogue reads bias while other CTAs write out: never the same memory
    out_dtype = "bfloat16" if out.dtype == torch.bfloat16 else "float32"
    if b_copy is not None and not _dispatch.weight_copy_fits(GemmKind(kind).name, mode, out_dtype):
        b_copy = None
    ext = load_gemm_extension()
    problem = gemm_problem(kind, mode, groups, sizes, out.dtype, accumulate, bias is not None, a_data, a_scales,
                           b_data, b_scales, bool(ext.has_cutlass()), b_copy is not None)
    plan = _dispatch.plan_gemm(problem, algorithm=algorithm or None, loader=loader or None,
                               epilogue=epilogue or None)
    s = dict(zip(GEMM_SIZES, sizes, strict=True))
    ws = torch.empty(groups * int(ext.prob_size()) + 4 * (groups + 1), dtype=torch.uint8, device=out.device)
    _raise_refusal(ext.grouped_gemm_(  # returns its refusal / launch error instead of throwing (csrc/gemm/bindings.cpp)
        kind, groups, a_data, a_scales, a_offsets, a_amax, b_data, b_scales, b_offsets, b_amax, out, bias,
        bool(accumulate), s["b_rows"], s["a_rows"], s["kc"], s["cols"], alpha_factor(s["g_a"], s["g_b"]), s["rule"],
        s["grid_upper"], ws,
        int(plan.algorithm), int(plan.loader), int(plan.epilogue), int(num_sms), b_copy))


def _traced(t: Tensor) -> bool:
    """Whether a call must go through the custom ops below: while torch.compile traces, or on fake tensors (shapes from
    the fake implementations). An eager call launches directly: the ops' Python dispatch costs ~0.1 ms of host time
    per call (measured on a 2-core host), as much as a small grouped GEMM's kernel time."""
    return torch.compiler.is_compiling() or isinstance(t, FakeTensor)


def grouped_gemm_new(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                     b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, bias: Tensor | None, kind: int, mode: str,
                     out_shape: list[int], out_dtype: torch.dtype, sizes: list[int], algorithm: str, loader: str,
                     epilogue: str, num_sms: int, b_copy: Tensor | None = None) -> Tensor:
    """:func:`grouped_gemm_op` (traced or fake tensors) or its body without the op's dispatch (eager). ``b_copy``:
    :func:`launch_grouped_gemm`'s (eager calls only: the op has no such argument)."""
    if _traced(a_offsets):
        if b_copy is not None:
            raise RuntimeError("a weight copy (b_copy) is for eager and CUDA-graph calls, not traced ones")
        return grouped_gemm_op(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, bias, kind,
                               mode, out_shape, out_dtype, sizes, algorithm, loader, epilogue, num_sms)
    return _grouped_gemm_new_eager(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, bias,
                                   kind, mode, out_shape, out_dtype, sizes, algorithm, loader, epilogue, num_sms,
                                   b_copy)


def grouped_gemm_into(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                      b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, out: Tensor, bias: Tensor | None,
                      accumulate: bool, kind: int, mode: str, sizes: list[int], algorithm: str, loader: str,
                      epilogue: str, num_sms: int) -> None:
    """:func:`grouped_gemm_out_op` (traced or fake tensors) or its body, the launch, without the op's dispatch
    (eager; ``out``'s version counter is then bumped as the op's declared mutation would, so that autograd sees a
    tensor it saved being written)."""
    if _traced(out):
        grouped_gemm_out_op(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias,
                            accumulate, kind, mode, sizes, algorithm, loader, epilogue, num_sms)
        return
    _launch_into(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias, accumulate, kind,
                 mode, sizes, algorithm, loader, epilogue, num_sms)
    if not out.is_inference():  # (autograd tracks no inference tensor; some torch versions refuse to bump one)
        torch.autograd.graph.increment_version(out)


def _grouped_gemm_new_eager(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                            b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, bias: Tensor | None, kind: int,
                            mode: str, out_shape: list[int], out_dtype: torch.dtype, sizes: list[int], algorithm: str,
                            loader: str, epilogue: str, num_sms: int, b_copy: Tensor | None = None) -> Tensor:
    """The functional op's body: a new output, then the launch."""
    out = torch.empty(out_shape, dtype=out_dtype, device=a_offsets.device)
    launch_grouped_gemm(kind, mode, a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias,
                        False, sizes, algorithm, loader, epilogue, num_sms, b_copy)
    return out


def _launch_into(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                 b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, out: Tensor, bias: Tensor | None, accumulate: bool,
                 kind: int, mode: str, sizes: list[int], algorithm: str, loader: str, epilogue: str,
                 num_sms: int) -> None:
    """launch_grouped_gemm in the argument order of the out= op."""
    launch_grouped_gemm(kind, mode, a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias,
                        accumulate, sizes, algorithm, loader, epilogue, num_sms)


@torch.library.custom_op("nvfp4_device::grouped_gemm", mutates_args=())
def grouped_gemm_op(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                    b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, bias: Tensor | None, kind: int, mode: str,
                    out_shape: list[int], out_dtype: torch.dtype, sizes: list[int], algorithm: str, loader: str,
                    epilogue: str, num_sms: int) -> Tensor:
    """Functional grouped NVFP4 GEMM (SPEC 12.5): a new ``out_shape`` tensor of ``out_dtype`` on the operands' device.
    ``kind``: a device._codes.GemmKind code; ``sizes``: the ints named by GEMM_SIZES; ``algorithm`` / ``loader`` /
    ``epilogue``: forced plan parts ("" = chosen by the sizes); ``num_sms``: the grid cap (0: none)."""
    return _grouped_gemm_new_eager(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, bias, kind,
                                   mode, out_shape, out_dtype, sizes, algorithm, loader, epilogue, num_sms)


@grouped_gemm_op.register_fake
def _(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, bias, kind, mode, out_shape, out_dtype,
      sizes, algorithm, loader, epilogue, num_sms):
    return a_offsets.new_empty(out_shape, dtype=out_dtype)


@torch.library.custom_op("nvfp4_device::grouped_gemm_out", mutates_args=("out",))
def grouped_gemm_out_op(a_data: Tensor, a_scales: Tensor, a_amax: Tensor, a_offsets: Tensor, b_data: Tensor,
                        b_scales: Tensor, b_amax: Tensor, b_offsets: Tensor, out: Tensor, bias: Tensor | None,
                        accumulate: bool, kind: int, mode: str, sizes: list[int], algorithm: str, loader: str,
                        epilogue: str, num_sms: int) -> None:
    """Grouped NVFP4 GEMM into ``out`` in place (declared mutated): written, or with ``accumulate`` (wgrad, fp32)
    ``out += dW`` (SPEC 12.2's C; an empty group leaves its slice of ``out`` unchanged). Arguments as
    :func:`grouped_gemm_op`."""
    _launch_into(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias, accumulate, kind,
                 mode, sizes, algorithm, loader, epilogue, num_sms)


@grouped_gemm_out_op.register_fake
def _(a_data, a_scales, a_amax, a_offsets, b_data, b_scales, b_amax, b_offsets, out, bias, accumulate, kind, mode,
      sizes, algorithm, loader, epilogue, num_sms):
    return None


# ---------------------------------------------------------------------------------------------------------
# the grouped linear layer's bias gradient (SPEC 16.4)
# ---------------------------------------------------------------------------------------------------------

@torch.library.custom_op("nvfp4_device::bias_grad", mutates_args=())
def bias_grad_op(dy: Tensor, offsets: Tensor) -> Tensor:
    """dbias ``[E, N]`` float32 of a bf16 ``dy`` ``[T, N]`` (N % 4 == 0) over the groups of ``offsets``, an int64
    ``[6, E+1]`` grouped offsets table of dY's groups (row 0, the groups' first rows, is read on the device):
    each group's column sums in SPEC 16.4's chunked fp32 order (csrc/layer/bias_grad.cu). GroupedLinear passes the
    table of X's grouped quantize, which equals dY's by construction (same splits, same T). The kernel clamps
    every group's bounds to ``[0, T]``, so a table that does not belong to dy reads no row outside it. No host
    synchronization."""
    require_hopper(dy, "dy")
    e = offsets.shape[1] - 1
    out = torch.empty((e, dy.shape[1]), dtype=torch.float32, device=dy.device)
    _raise_refusal(load_extension().bias_grad_(dy, offsets, e, out))
    return out


@bias_grad_op.register_fake
def _(dy, offsets):
    return dy.new_empty((offsets.shape[1] - 1, dy.shape[1]), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------------
# the packed columnwise scales that the grouped linear layer keeps for its backward (SPEC 9.5)
# ---------------------------------------------------------------------------------------------------------

def packed_col_scale_bytes(t: int, k: int, e: int) -> int:
    """SPEC 9.5's capacity of the packed columnwise scales: K * W(16) (the columnwise data capacity / 8)."""
    return grouped_capacities(t, k, e)["col_data"] // 8


@torch.library.custom_op("nvfp4_device::pack_col_scales", mutates_args=())
def pack_col_scales_op(scales: Tensor, offsets: Tensor, t: int, k: int) -> Tensor:
    """The packed columnwise scales (SPEC 9.5) of a grouped call over ``t`` rows and ``k`` columns: uint8
    ``[packed_col_scale_bytes(t, k, E)]`` from its swizzled columnwise scales ``scales`` and its offsets table
    ``offsets`` ``[6, E+1]`` (read on the device; csrc/layer/packed_scales.cu). No host synchronization."""
    require_hopper(scales, "scales")
    e = offsets.shape[1] - 1
    out = torch.empty(packed_col_scale_bytes(t, k, e), dtype=torch.uint8, device=scales.device)
    _raise_refusal(load_extension().pack_col_scales_(scales, offsets, e, k, out))
    return out


@pack_col_scales_op.register_fake
def _(scales, offsets, t, k):
    return scales.new_empty(packed_col_scale_bytes(t, k, offsets.shape[1] - 1), dtype=torch.uint8)


@torch.library.custom_op("nvfp4_device::unpack_col_scales", mutates_args=())
def unpack_col_scales_op(packed: Tensor, offsets: Tensor, t: int, k: int) -> Tensor:
    """The inverse of :func:`pack_col_scales_op`: the swizzled columnwise scales (SPEC 9.2) at their SPEC 9.3
    capacity, padding and the bytes past the last group 0x00."""
    require_hopper(packed, "packed")
    e = offsets.shape[1] - 1
    out = torch.empty(grouped_capacities(t, k, e)["col_scale"], dtype=torch.uint8, device=packed.device)
    _raise_refusal(load_extension().unpack_col_scales_(packed, offsets, e, k, out))
    return out


@unpack_col_scales_op.register_fake
def _(packed, offsets, t, k):
    return packed.new_empty(grouped_capacities(t, k, offsets.shape[1] - 1)["col_scale"], dtype=torch.uint8)
