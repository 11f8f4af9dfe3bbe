"""The device's quantize API: :func:`quantize`, :func:`group_quantize`, :func:`swizzle_scales`, :func:`dequantize`.

torch CUDA tensors in and out, on the current stream, mirroring :func:`oracle.quantize` / :func:`oracle.group_quantize`
byte for byte. Every argument is checked here, before any launch; the kernels are chosen by
:func:`device._dispatch.plan_quantize`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from oracle.checks import is_real, refuse_masked
from oracle.four_over_six import check_global_scale_max
from oracle.quantize import check_block, check_te_scale_options

from . import _dispatch, _ops
from ._codes import TORCHAO_RULES, Rule
from ._results import DeviceGroupedNVFP4Tensor, DeviceNVFP4Tensor

__all__ = ["dequantize", "group_quantize", "quantize", "swizzle_scales"]

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
# the rule names as a plain tuple: torch.compile (dynamo 2.11) cannot test membership in an enum's __members__
_RULE_NAMES = tuple(Rule.__members__)


def _check_x(x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_cuda:
        raise ValueError(f"x must be a CUDA tensor, got device {x.device}")
    _ops.require_hopper(x, "x")
    if x.dtype not in _DTYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension")
    if not x.is_contiguous():
        raise ValueError("x must be contiguous (call .contiguous() first)")
    k = x.shape[-1]
    if k == 0 or k % 16:
        raise ValueError(f"the last dimension K={k} must be a positive multiple of 16")
    x2 = x.reshape(-1, k)
    # (while torch.compile traces, or on fake tensors, the address is not known: the binding refuses a misaligned x)
    if x2.numel() and not _ops._traced(x2) and x2.data_ptr() % 16:
        raise ValueError("x must be 16-byte aligned (its storage offset breaks vector loads)")
    return x2


_FO6_ERRORS = {"mae": 1, "mse": 2}  # the 4over6 quantizer's error codes (csrc/quantize/launch.h FourOverSixError)


def _te_scale_options(x2: Tensor, *, four_over_six, four_over_six_fast_math, global_scale_max, row_scaled, rht, block,
                      rule, rounding) -> dict:
    """The 4over6 / row-scaled options (SPEC 5.6, 5.7) checked as the oracle checks them, then against what the device
    runs: 4over6 on bfloat16 input; no row-scaled planes."""
    o = check_te_scale_options(
        four_over_six=four_over_six, four_over_six_fast_math=four_over_six_fast_math,
        global_scale_max=global_scale_max, row_scaled=row_scaled, rht=rht, block=block, rule=rule, rounding=rounding)
    if o.row_scaled:
        raise ValueError("row_scaled=True is not implemented on the device (oracle.quantize models it, SPEC 5.7)")
    if o.four_over_six and x2.dtype != torch.bfloat16:
        raise TypeError(f"four_over_six on the device needs bfloat16 input, got {x2.dtype}")
    return o.plane_fields()


def _check_flags(**flags) -> None:
    """True / False options are bools: a string such as "False" would otherwise be read as True."""
    for name, v in flags.items():
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {v!r}")


def _options(x2: Tensor, *, rowwise, columnwise, rht, rht_signs, block, rule, rounding, seed, offset,
             four_over_six=None, four_over_six_fast_math=False, global_scale_max=448, row_scaled=False) -> dict:
    _check_flags(rowwise=rowwise, columnwise=columnwise, rht=rht)
    for name, v in (("rht_signs", rht_signs), ("seed", seed), ("offset", offset)):
        # a tensor here would need .item(), a host synchronization (and fail inside a CUDA graph capture)
        if not _ops.is_int(v):
            raise TypeError(f"{name} must be a Python integer, got {type(v).__name__}")
    if not (rowwise or columnwise):
        raise ValueError("at least one of rowwise / columnwise must be requested")
    if not isinstance(rule, str) or rule not in _RULE_NAMES:
        raise ValueError(f"rule must be one of {list(_RULE_NAMES)}, got {rule!r}")
    block = check_block(block)  # the oracle's parser: (1, 16) / (16, 16) or "1x16" / "16x16"
    if not isinstance(rounding, str) or rounding not in ("rn", "sr"):
        raise ValueError(f"rounding must be 'rn' or 'sr', got {rounding!r}")
    if not (0 <= int(rht_signs) < 1 << 16):
        raise ValueError(f"rht_signs must be a 16-bit mask, got {rht_signs!r}")
    if rht and not columnwise:
        raise ValueError("rht=True applies to the columnwise plane; request columnwise=True")
    if rht and x2.dtype != torch.bfloat16:
        raise TypeError(f"rht=True needs bfloat16 input (SPEC 7), got {x2.dtype}")
    seed, offset = int(seed), int(offset)
    if not (0 <= seed < 2**64):
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not (0 <= offset < 2**32):
        raise ValueError(f"offset must be in [0, 2**32), got {offset}")
    block2d, sr = block == (16, 16), rounding == "sr"
    te = _te_scale_options(x2, four_over_six=four_over_six, four_over_six_fast_math=four_over_six_fast_math,
                           global_scale_max=global_scale_max, row_scaled=row_scaled, rht=rht, block=block, rule=rule,
                           rounding=rounding)
    plan = _dispatch.plan_quantize(_DTYPES[x2.dtype], rht=bool(rht), rht_signs=int(rht_signs), block2d=block2d, sr=sr,
                                   torchao=rule in TORCHAO_RULES,
                                   kernel=_dispatch.FORCED.get("quantize"), four_over_six=bool(te["four_over_six"]))
    return dict(rowwise=bool(rowwise), columnwise=bool(columnwise), rht=bool(rht), rht_signs=int(rht_signs),
                block2d=block2d, rule=int(Rule[rule]), sr=sr, seed_lo=seed & 0xFFFFFFFF, seed_hi=seed >> 32,
                offset=offset, amax_kernel=int(plan.amax), quantize_kernel=int(plan.quantize),
                four_over_six=_FO6_ERRORS.get(te["four_over_six"], 0),
                four_over_six_fast_math=te["four_over_six_fast_math"], global_scale_max=te["global_scale_max"])


def _meta(opts: dict, rule: str, rounding: str, seed: int, offset: int) -> dict:
    """The options a result records (as the oracle's ``NVFP4Tensor.options``), so that ``.to_oracle()`` can give its
    planes the 4over6 fields (SPEC 5.6) that dequantization and the GEMM's alpha read."""
    fo6 = {v: k for k, v in _FO6_ERRORS.items()}.get(opts["four_over_six"])
    return dict(rht=opts["rht"], rht_signs=opts["rht_signs"], block=(16, 16) if opts["block2d"] else (1, 16),
                rule=rule, rounding=rounding, seed=seed, offset=offset, row_scaled=False,
                global_scale_max=opts["global_scale_max"], four_over_six=fo6,
                four_over_six_fast_math=opts["four_over_six_fast_math"])


def _amax_tensors(amax, n: int, grouped: bool, device) -> tuple[Tensor, Tensor] | None:
    """User amax -> (row plane's, col plane's) contiguous float32 device tensors of n values each (SPEC 4.3), the
    same tensor twice where one value serves both planes; device values as given, whose magnitude the kernel that
    writes them into the call's amax buffers takes (``device._ops.launch_quantize``).

    As in the oracle: a single tensor takes a number / 0-d tensor for both planes or a (row, col) tuple or
    list; a grouped call takes n values (list, array, 1-d tensor) for both planes, an [n, 2] array or tensor of
    (row, col) pairs, or a (row, col) tuple of n values each, never a single number.
    Tensors must be on x's device. Host sequences and arrays are copied to the device, a synchronizing copy, so
    they are refused while a CUDA graph is being captured (pass device tensors or numbers there).
    """
    if amax is None:
        return None
    for a in (amax, *(amax if isinstance(amax, (tuple, list)) else ())):  # (as the oracle)
        refuse_masked(a, "amax")
    if grouped and isinstance(amax, list) and any(isinstance(v, Tensor) for v in amax):
        raise TypeError("a grouped amax given as a list of tensors: pass one tensor of E values on x's device (or a "
                        "(row, col) tuple of them)")
    if grouped and not isinstance(amax, tuple):  # [E] for both planes, or [E, 2] (row, col) pairs, as the oracle
        shape = tuple(amax.shape) if isinstance(amax, Tensor) else np.shape(amax)
        if len(shape) == 2 and shape[1] == 2:
            host = amax if isinstance(amax, Tensor) else np.asarray(amax, dtype=np.float32)
            amax = (host[:, 0], host[:, 1])
        elif len(shape) > 1:
            raise ValueError(f"a grouped amax has shape [E] or [E, 2] ((row, col) pairs), got {list(shape)}")
    if not grouped and isinstance(amax, np.ndarray) and amax.ndim == 1:
        amax = tuple(amax)  # (the oracle's pair form: a 1-D host array holds (row_amax, col_amax))
    pair = isinstance(amax, tuple) if grouped else isinstance(amax, (tuple, list))
    if pair and len(amax) != 2:
        raise ValueError("amax pair must be (row_amax, col_amax)")
    if pair and not grouped and any(not isinstance(a, Tensor) and np.ndim(a) != 0 for a in amax):
        raise ValueError(f"each of the (row_amax, col_amax) pair is one number (or a one-element tensor on x's "
                         f"device), got {amax!r}")
    if not grouped and not pair and not isinstance(amax, Tensor) and np.ndim(amax) != 0:
        raise ValueError(f"amax must be a number, a one-element tensor or a (row_amax, col_amax) pair, got {amax!r}")
    if grouped and not pair and ((amax.dim() == 0) if isinstance(amax, Tensor) else np.ndim(amax) == 0):
        raise ValueError(f"a grouped amax holds one value per group ({n}) for both planes, or is a (row, col) tuple of "
                         "them; got a single value (as oracle.group_quantize, which refuses it too)")
    if pair and grouped and n > 1:
        for a in amax:
            single = a.numel() == 1 if isinstance(a, Tensor) else np.ndim(a) == 0
            if single:
                raise ValueError(f"a grouped amax pair is (row_amaxes, col_amaxes), each with one value per group "
                                 f"({n}); got a single value (as oracle.group_quantize, which refuses it too)")
    out = tuple(_amax_values(a, n, device) for a in (amax if pair else (amax,)))
    return out if pair else (out[0], out[0])


def _amax_values(a, n: int, device) -> Tensor:
    """One plane's supplied amaxes (a number, host sequence / array, or tensor on ``device``) as a contiguous float32
    device tensor of n values (``_amax_tensors``)."""
    if isinstance(a, Tensor):
        if a.device != device:
            raise ValueError(f"amax tensors must be on x's device ({device}), got {a.device}")
        if a.dtype == torch.bool or a.is_complex():
            raise ValueError(f"amax must hold real numbers, got dtype {a.dtype}")
        t = a.to(dtype=torch.float32).reshape(-1).contiguous()  # (the kernels take a negative value's magnitude)
    else:
        if isinstance(a, Sequence) and not isinstance(a, str) and any(isinstance(v, Tensor) for v in a):
            raise TypeError("amax given as a sequence of tensors: pass one tensor on x's device (torch.stack)")
        host = np.asarray(a)
        # (as the oracle: strings are not parsed; bools, complex values and objects are not numbers)
        if not is_real(host):
            raise ValueError(f"amax must hold real numbers, got dtype {host.dtype}")
        with np.errstate(over="ignore"):  # (a value past fp32's range is Inf, SPEC 4.3)
            host = np.ascontiguousarray(host.astype(np.float32).reshape(-1))
        if (host < 0).any():
            raise ValueError("amax values must be >= 0 (absolute maxima), +Inf or NaN (SPEC 4.3)")
        if np.ndim(a) == 0:  # a number: no host-to-device copy
            t = torch.full((n,), float(host[0]), dtype=torch.float32, device=device)
        else:
            if torch.cuda.is_current_stream_capturing():
                raise ValueError("amax given as a host sequence / array needs a host-to-device copy, which "
                                 "cannot be captured in a CUDA graph: pass a tensor on x's device")
            t = torch.from_numpy(host).to(device)
    if t.numel() != n:
        raise ValueError(f"amax must have {n} value(s) per plane, got {t.numel()}")
    return t


def quantize(x: Tensor, *, rowwise: bool = True, columnwise: bool = False, rht: bool = False,
             rht_signs: int = 0xD7E8, block: Sequence[int] | str = (1, 16), rule: str = "te", amax=None,
             rounding: str = "rn", seed: int = 0, offset: int = 0, swizzled: bool = True,
             four_over_six: str | None = None, four_over_six_fast_math: bool = False, global_scale_max: int = 448,
             row_scaled: bool = False) -> DeviceNVFP4Tensor:
    """Quantize a CUDA tensor to NVFP4 on the device, byte-exact with :func:`oracle.quantize` given the same arguments.

    Args:
        x: a contiguous CUDA tensor, bfloat16, float16 or float32, 16-byte aligned; N-D inputs are flattened to
            ``[M, K]`` on the last dimension, K a positive multiple of 16.
        rowwise, columnwise: which planes to produce: X's rowwise plane ``[M, K]`` and X^T's columnwise plane
            ``[K, roundup(M, 16)]`` (SPEC 6.1, 6.2); at least one.
        rht, rht_signs: the random Hadamard transform of the columnwise plane (SPEC 7; bfloat16 input only) and its
            16-bit sign mask (default TE's 0xD7E8).
        block: ``(1, 16)`` or ``(16, 16)`` (or "1x16" / "16x16"): the scale blocks (SPEC 6.1, 6.3).
        rule: the scale rule, "te", "te_fused_rht", "torchao" or "torchao_noscale" (SPEC 5).
        amax: None (computed on the device, SPEC 4.1), one value for both planes (a number or a one-element device
            tensor), or a (row, col) pair of them (SPEC 4.3); a device tensor is never read on the host. A supplied
            amax skips the amax pass, so X is read once (about 0.75 of the two-pass time on the bf16 fast path,
            docs/performance.md).
        rounding, seed, offset: "rn" or "sr" (stochastic rounding, SPEC 3.4) with its Philox seed and counter offset
            (SPEC 10).
        swizzled: scales in the 128x4 tiles that cuBLAS reads (SPEC 8.2, default) or compact row-major (8.1).
        four_over_six, four_over_six_fast_math, global_scale_max: TE's 4over6 block-scale selection ("mae" / "mse",
            SPEC 5.6) on bfloat16 input with round to nearest and no RHT; G = 448, or 256 with 4over6.
        row_scaled: SPEC 5.7's per-row amax: oracle-only, refused here.

    Returns a :class:`DeviceNVFP4Tensor`; ``.to_oracle()`` converts it to the oracle's NumPy result.

    Raises TypeError / ValueError before any launch for an x that is not such a tensor, and for the options the
    oracle refuses (an unknown rule, block or rounding, a seed or offset out of range, rht without the columnwise
    plane or on non-bfloat16 input, 4over6 outside its domain, row_scaled), a rowwise / columnwise / rht /
    swizzled that is not a bool, or an amax of the wrong form.
    """
    x2 = _check_x(x)
    _check_flags(swizzled=swizzled)
    opts = _options(x2, rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block,
                    rule=rule, rounding=rounding, seed=seed, offset=offset, four_over_six=four_over_six,
                    four_over_six_fast_math=four_over_six_fast_math, global_scale_max=global_scale_max,
                    row_scaled=row_scaled)
    row_amax, col_amax = _amax_tensors(amax, 1, False, x2.device) or (None, None)
    rd, rs, cd, cs, am = _ops.quantize_op(x2, row_amax, col_amax, swizzled=bool(swizzled), **opts)
    return DeviceNVFP4Tensor(
        shape=tuple(x2.shape),
        row_data=rd if rowwise else None, row_scales=rs if rowwise else None, row_amax=am[0:1] if rowwise else None,
        col_data=cd if columnwise else None, col_scales=cs if columnwise else None,
        col_amax=am[1:2] if columnwise else None, swizzled=bool(swizzled),
        options=_meta(opts, rule, rounding, int(seed), int(offset)),
    )


def group_quantize(x: Tensor, splits: Tensor, *, rowwise: bool = True, columnwise: bool = False,
                   rht: bool = False, rht_signs: int = 0xD7E8, block: Sequence[int] | str = (1, 16), rule: str = "te",
                   amax=None, rounding: str = "rn", seed: int = 0, offset: int = 0,
                   swizzled: bool = True, four_over_six: str | None = None, four_over_six_fast_math: bool = False,
                   global_scale_max: int = 448, row_scaled: bool = False) -> DeviceGroupedNVFP4Tensor:
    """Quantize the row groups of ``x`` ([T, K]) separately, driven by a device int64 ``splits`` tensor (SPEC 9).

    No host synchronization: offsets are computed on the device and every buffer is sized for the worst case
    from (T, K, E), so the call can be captured in a CUDA graph and replayed with new data and new splits.
    Group g uses SR counter offset ``offset + g`` as in :func:`oracle.group_quantize`. ``amax``: None (computed per
    group on the device), E values for both planes (sequence, array or device tensor), an [E, 2] array or tensor of
    (row, col) pairs, or a (row, col) tuple of E values each; a single number and other shapes are refused, as by
    the oracle. Supplied amaxes skip the amax pass (X read once). The other keywords (``rowwise``, ``columnwise``,
    ``rht``, ``rht_signs``, ``block``, ``rule``, ``rounding``, ``seed``, ``offset``, ``swizzled``: each group's
    scales swizzled, or in the zero-padded compact layout of SPEC 9.2, and the 4over6 options, SPEC 5.6 per group)
    as in :func:`quantize`. Returns a :class:`DeviceGroupedNVFP4Tensor`.

    ``splits`` is never read on the host, so sizes that do not add up to T cannot be refused: they take SPEC 9.4's
    meaning on the device (a negative size counts as 0, the running total is cut at T, rows past the last cut group
    belong to no group); the sizes used are the differences of ``row_offsets``. Raises TypeError / ValueError before
    any launch for an x that is not a contiguous CUDA tensor of a supported dtype with K a multiple of 16, splits that
    are not a non-empty 1-D int64 tensor on x's device, and the options :func:`quantize` refuses.
    """
    x2 = _check_x(x)
    if not isinstance(splits, Tensor):
        raise TypeError(f"splits must be a torch.Tensor (int64, on the device), got {type(splits).__name__}")
    if splits.dtype != torch.int64:
        raise TypeError(f"splits must be int64, got {splits.dtype}")
    if splits.device != x2.device:
        raise ValueError(f"splits must be on the same device as x ({x2.device}), got {splits.device}")
    if splits.dim() != 1 or splits.numel() == 0:
        raise ValueError(f"splits must be a non-empty 1-D tensor, got shape {tuple(splits.shape)}")
    splits = splits.contiguous()
    _check_flags(swizzled=swizzled)
    opts = _options(x2, rowwise=rowwise, columnwise=columnwise, rht=rht, rht_signs=rht_signs, block=block,
                    rule=rule, rounding=rounding, seed=seed, offset=offset, four_over_six=four_over_six,
                    four_over_six_fast_math=four_over_six_fast_math, global_scale_max=global_scale_max,
                    row_scaled=row_scaled)
    e = splits.numel()
    row_amax, col_amax = _amax_tensors(amax, e, True, x2.device) or (None, None)
    rd, rs, cd, cs, ra, ca, offs = _ops.group_quantize_op(x2, splits, row_amax, col_amax, swizzled=bool(swizzled),
                                                          **opts)
    return DeviceGroupedNVFP4Tensor(
        shape=tuple(x2.shape), splits=splits,
        row_data=rd if rowwise else None, row_scales=rs if rowwise else None,
        col_data=cd if columnwise else None, col_scales=cs if columnwise else None,
        row_amax=ra, col_amax=ca, offsets=offs, swizzled=bool(swizzled),
        options=_meta(opts, rule, rounding, int(seed), int(offset)),
    )


def swizzle_scales(compact: Tensor) -> Tensor:
    """Compact uint8 scales ``[rows, C]`` (CUDA) -> the swizzled, zero-padded 1-D buffer (SPEC 8.2)."""
    if not isinstance(compact, Tensor):
        raise TypeError(f"compact scales must be a torch.Tensor, got {type(compact).__name__}")
    if not compact.is_cuda:
        raise ValueError(f"compact scales must be a CUDA tensor, got device {compact.device}")
    _ops.require_hopper(compact, "compact scales")
    # (as oracle.swizzle.swizzle_scales: TypeError for the dtype, ValueError for the rank)
    if compact.dtype != torch.uint8:
        raise TypeError(f"compact scales must be uint8 (E4M3 bytes), got {compact.dtype}")
    if compact.dim() != 2:
        raise ValueError(f"compact scales must be 2-D [rows, scale_cols], got shape {tuple(compact.shape)}")
    return _ops.swizzle_op(compact.contiguous())


def dequantize(q, plane: str = "row", *, scales: Tensor | None = None, amax: Tensor | None = None,
               shape: tuple[int, int] | None = None, swizzled: bool | None = None, rule: str | None = None,
               global_scale_max: int | None = None) -> Tensor:
    """Dequantize one NVFP4 plane to float32 (SPEC 11, with the block factor of the plane's scale rule).

    Either ``dequantize(result, "row" | "col")`` with a :class:`DeviceNVFP4Tensor` (which knows its scale layout, rule
    and G), or ``dequantize(data, scales=..., amax=..., shape=(rows, cols), swizzled=True | False, rule="te",
    global_scale_max=448)`` with raw CUDA tensors (uint8, or the ``float4_e2m1fn_x2`` / ``float8_e4m3fn`` views of
    :meth:`DeviceNVFP4Tensor.torch_views`): raw bytes must say their scale layout (SPEC 8), as :func:`quantize`
    writes swizzled scales unless told otherwise; ``rule`` (default "te") picks the SPEC 11.1 factor and
    ``global_scale_max`` (default 448; 256 for a plane quantized by 4over6 with G = 256, SPEC 5.6) the G in the TE
    rules' fp32(1/(6G)). A columnwise plane dequantizes to X^T with its zero padding, shape ``[K, roundup(M,16)]``.

    Raises (before any launch) TypeError / ValueError for a grouped result, raw-byte keywords given with a result, a
    plane other than "row" / "col" (raw bytes: "row", they are one plane), a missing ``scales`` / ``amax`` / ``shape``
    / ``swizzled``, a ``swizzled`` that is not a bool, a ``shape`` that is not two ints, an ``amax`` that is not one
    float32 value, host tensors, an unknown rule or G, and buffers whose sizes, dtypes or alignment do not fit the
    shape (the binding's checks: exact byte counts, so that a padded compact scale buffer is not read as a compact
    one). A negative amax, which a device tensor cannot show without a synchronization, is taken as its magnitude
    (SPEC 11.2).
    """
    if isinstance(q, DeviceGroupedNVFP4Tensor):
        raise TypeError("dequantize takes one plane of a DeviceNVFP4Tensor or raw bytes; for a grouped result use "
                        ".to_oracle(), or pass one group's bytes (its offsets) as raw data: swizzled scales as they "
                        "are, padded compact ones (swizzled=False, SPEC 9.2) as their [:rows, :cols // 16] slice")
    if isinstance(q, DeviceNVFP4Tensor):
        if (scales is not None or amax is not None or shape is not None or swizzled is not None or rule is not None
                or global_scale_max is not None):
            raise ValueError("scales=, amax=, shape=, swizzled=, rule= and global_scale_max= are for raw bytes; a "
                             "DeviceNVFP4Tensor carries its own")
        if not isinstance(plane, str) or plane not in ("row", "col"):
            raise ValueError(f"plane must be 'row' or 'col', got {plane!r}")
        m, k = q.shape
        data, scales, amax = getattr(q, f"{plane}_data"), getattr(q, f"{plane}_scales"), getattr(q, f"{plane}_amax")
        if data is None:
            raise ValueError(f"the {plane} plane was not requested at quantize time")
        shape = (m, k) if plane == "row" else (k, (m + 15) // 16 * 16)
        swizzled = q.swizzled
        rule = q.options.get("rule", "te")
        global_scale_max = int(q.options.get("global_scale_max", 448))
    elif not isinstance(q, Tensor):
        raise TypeError(f"data must be a CUDA tensor, got {type(q).__name__} (dequantize takes a DeviceNVFP4Tensor "
                        f"or raw bytes)")
    elif scales is None or amax is None or shape is None:
        raise ValueError("raw dequantize needs data, scales=, amax=, shape= and swizzled=")
    elif swizzled is None:
        raise ValueError("raw dequantize needs swizzled=True or False, the layout of the scale bytes (SPEC 8; "
                         "device.quantize writes swizzled scales unless swizzled=False)")
    elif not isinstance(swizzled, (bool, np.bool_)):
        raise TypeError(f"swizzled must be True or False, got {swizzled!r}")
    elif not isinstance(shape, (tuple, list)) or len(shape) != 2 or not all(_ops.is_int(v) for v in shape):
        raise TypeError(f"shape must be two ints (rows, cols), got {shape!r}")
    elif plane != "row":
        raise ValueError(f"plane is for a DeviceNVFP4Tensor; raw bytes are one plane already (got plane={plane!r})")
    rule = "te" if rule is None else rule
    if not isinstance(rule, str) or rule not in _RULE_NAMES:
        raise ValueError(f"rule must be one of {list(_RULE_NAMES)}, got {rule!r}")
    global_scale_max = 448 if global_scale_max is None else check_global_scale_max(global_scale_max)
    data = q if not isinstance(q, DeviceNVFP4Tensor) else data
    _ops.require_cuda_tensors(data=data, scales=scales, amax=amax)  # (before .contiguous() / .to() below)
    # the byte views of torch_views() (float4_e2m1fn_x2 codes, float8_e4m3fn scales) are the same bytes
    data = data.view(torch.uint8) if data.dtype == getattr(torch, "float4_e2m1fn_x2", None) else data
    scales = scales.view(torch.uint8) if scales.dtype == torch.float8_e4m3fn else scales
    if amax.dtype != torch.float32:
        raise TypeError(f"amax must be float32 (the plane's amax), got {amax.dtype}")
    if amax.numel() != 1:
        raise ValueError(f"amax must be one value (the plane's amax), got shape {list(amax.shape)}")
    rows, cols = (int(s) for s in shape)
    data = data.contiguous()
    return _ops.dequantize_op(data, scales.contiguous(), amax.reshape(1).contiguous(),
                              rows, cols, bool(swizzled), int(Rule[rule]), int(global_scale_max))
