"""Other libraries' NVFP4 tensors as oracle planes and back (SPEC 14.10): torchao 0.18's ``NVFP4Tensor`` and the
fields of TransformerEngine's ``NVFP4Tensor`` (read without importing TE).

Both libraries store what SPEC 2.4 calls a plane: packed E2M1 codes (element 2i in the low nibble, SPEC 2.3) and one
E4M3 byte per 16-block, compact or in the 128x4 layout (SPEC 8). They differ in how the scales are padded and how
the per-tensor value is kept:

* torchao: ``qdata`` uint8 ``[..., M, K/2]``; ``scale`` float8_e4m3fn ``[..., M, K/16]`` (compact, unpadded) or, with
  ``is_swizzled_scales``, the 128x4 layout of the flattened ``[prod(...) * M, K/16]`` matrix viewed as
  ``[ceil(M/128)*32, ceil(K/64)*16]``; ``per_tensor_scale`` is P = amax / 2688 (SPEC 5.4), or ``None`` (rule
  "torchao_noscale").
* TE: ``rowwise_data`` uint8 ``[..., K/2]`` and ``columnwise_data`` ``[K, ..., M/2]`` (the plane of X^T, SPEC 6.2);
  ``rowwise_scale_inv`` ``[roundup(M,128), roundup(K/16,4)]`` and ``columnwise_scale_inv``
  ``[roundup(K,128), roundup(M/16,4)]`` uint8, padded compact, or swizzled in the same 2-D shape when
  ``with_gemm_swizzled_scales``; ``amax_rowwise`` / ``amax_columnwise`` float32 ``[1]`` hold the amax itself (rule
  "te", SPEC 5.1), ``[M]`` and ``[K]`` for a row-scaled tensor (SPEC 5.7).

The functions take NumPy arrays or torch tensors (any device; read ones are copied to the host). Device results
(:class:`device.DeviceNVFP4Tensor`) convert through the same functions and keep their tensors on the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import types
import warnings

import numpy as np

from .checks import check_block, check_flag, host_array, is_real, is_torch
from .four_over_six import check_global_scale_max
from .planes import GroupedNVFP4Tensor, NVFP4Tensor, QuantizedPlane
from .rht import check_rht_signs
from .swizzle import padded_scale_shape, swizzle_scales, unswizzle_scales

__all__ = [
    "TE_FIELD_NAMES",
    "amax_from_torchao_scale",
    "from_te_fields",
    "from_torchao",
    "read_scales",
    "to_te_fields",
    "to_torchao",
    "torchao_fields",
    "torchao_nvfp4_module",
]

_F2688 = np.float32(2688.0)  # 448 * 6: P = amax / 2688 (SPEC 5.4)

#: TE's NVFP4 tensor fields (``NVFP4TensorStorage.get_metadata()`` keys) that :func:`from_te_fields` reads
TE_FIELD_NAMES = ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv", "amax_rowwise",
                  "amax_columnwise", "with_gemm_swizzled_scales", "row_scaled_nvfp4", "nvfp4_use_4over6",
                  "nvfp4_e4m3_max")
#: get_metadata() keys that carry no bytes of the planes (accepted and ignored)
_TE_IGNORED = ("fp4_dtype", "quantizer", "fake_dtype")


# ---------------------------------------------------------------------------------------------------------------
# host arrays and plane construction
# ---------------------------------------------------------------------------------------------------------------

#: the 1-byte dtypes that hold NVFP4 bytes: codes (uint8, torch's float4_e2m1fn_x2) or E4M3 scales (float8_e4m3fn)
_BYTE_DTYPES = ("uint8", "float8_e4m3fn", "float4_e2m1fn_x2")


def _host_u8(a, what: str) -> np.ndarray:
    """A uint8 / float8_e4m3fn / float4_e2m1fn_x2 array or tensor as a host uint8 NumPy array (bytes unchanged);
    ``TypeError`` for another dtype (int8 or bool bytes are no NVFP4 field's: a wrong tensor, not a view)."""
    if is_torch(a):
        import torch

        t = a.detach()
        if str(t.dtype).removeprefix("torch.") not in _BYTE_DTYPES:
            raise TypeError(f"{what} must hold bytes (uint8, float8_e4m3fn or float4_e2m1fn_x2), got {t.dtype}")
        return t.view(torch.uint8).cpu().contiguous().numpy().copy()
    a = host_array(a)
    if a.dtype.name not in _BYTE_DTYPES:
        raise TypeError(f"{what} must hold bytes (uint8 or float8_e4m3fn), got {a.dtype}")
    return np.ascontiguousarray(a.view(np.uint8))


def _host_f32(a, what: str) -> np.ndarray:
    """A float32 array / tensor, or a Python number that float32 holds exactly, as a host float32 array (bits
    unchanged). ``TypeError`` for another dtype (a float64 array is not rounded silently), ``ValueError`` for a
    Python number that float32 would round."""
    if is_torch(a):
        import torch

        if a.dtype != torch.float32:
            raise TypeError(f"{what} must be float32, got {a.dtype}")
        return a.detach().cpu().numpy().astype(np.float32).reshape(-1).copy()
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        with np.errstate(over="ignore"):
            v = np.float32(a)
        if float(v) != a and not (np.isnan(v) and np.isnan(a)):  # (rounded, or past float32's range)
            raise ValueError(f"{what} = {a!r} is not a float32 value (pass a float32 array to give its bits)")
        return np.asarray([v], np.float32)
    v = host_array(a, what)
    if v.dtype != np.float32:
        raise TypeError(f"{what} must be a float32 number or array, got {v.dtype}")
    return v.reshape(-1).copy()


def _plane_fields() -> set:
    return {f.name for f in dataclasses.fields(QuantizedPlane)}


def _make_plane(data, scales, amax, shape, rule, *, block=(1, 16), rht=False, valid_cols=None, **extra):
    """A QuantizedPlane; ``extra`` (row_scaled, global_scale_max, ...) only where the plane class knows the field."""
    known = _plane_fields()
    extra = {k: v for k, v in extra.items() if k in known and v is not None}
    if np.asarray(amax).size == 0:
        raise ValueError("the amax field holds no value (a plane's amax is one value, or one per row when row-scaled)")
    if np.asarray(amax).size != 1 and not extra.get("row_scaled"):
        raise ValueError(f"one amax per row ({np.asarray(amax).size} values) is a row-scaled plane (SPEC 5.7): pass "
                         "row_scaled_nvfp4=True")
    a = np.asarray(amax, np.float32)
    return QuantizedPlane(data, scales, a.reshape(-1) if extra.get("row_scaled") else a.reshape(-1)[0], shape, rule,
                          check_block(block), rht, valid_cols=valid_cols, **extra)


def _rowwise_shape(d: np.ndarray, what: str) -> tuple[int, int]:
    """(M, K) of packed rowwise codes ``d`` (``[..., K/2]`` bytes, the leading axes flattened, SPEC 1.3); ``ValueError``
    for a K that is not a multiple of 16."""
    k = 2 * d.shape[-1]
    if k % 16:
        raise ValueError(f"{what} holds {d.shape[-1]} bytes per row, K = {k} values: K must be a multiple of 16 (one "
                         "scale per 16 values)")
    return (int(np.prod(d.shape[:-1])) if d.ndim > 1 else 1), k


def read_scales(buf, rows: int, scale_cols: int, layout: str) -> np.ndarray:
    """Compact scale bytes ``[rows, scale_cols]`` from a stored buffer (SPEC 8).

    ``layout``: ``"compact"`` (``rows * scale_cols`` bytes, row-major), ``"padded"`` (the SPEC 8.1 padded compact
    matrix, row-major, its padding dropped) or ``"swizzled"`` (the 128x4 layout, SPEC 8.2). Any shape with the right
    number of bytes is accepted.
    """
    b = _host_u8(buf, "scales").reshape(-1)
    pr, pc = padded_scale_shape(rows, scale_cols)
    if layout == "compact":
        if b.size != rows * scale_cols:
            raise ValueError(f"compact scales of [{rows}, {scale_cols}] need {rows * scale_cols} bytes, got {b.size}")
        return b.reshape(rows, scale_cols).copy()
    if b.size != pr * pc:
        raise ValueError(f"{layout} scales of [{rows}, {scale_cols}] need {pr * pc} bytes ([{pr}, {pc}]), got {b.size}")
    if layout == "padded":
        return b.reshape(pr, pc)[:rows, :scale_cols].copy()
    if layout == "swizzled":
        return unswizzle_scales(b, rows, scale_cols)
    raise ValueError(f"layout must be 'compact', 'padded' or 'swizzled', got {layout!r}")


def _padded(compact: np.ndarray) -> np.ndarray:
    pr, pc = padded_scale_shape(*compact.shape)
    out = np.zeros((pr, pc), np.uint8)
    out[: compact.shape[0], : compact.shape[1]] = compact
    return out


# ---------------------------------------------------------------------------------------------------------------
# torchao
# ---------------------------------------------------------------------------------------------------------------

def torchao_nvfp4_module() -> types.ModuleType:
    """``torchao.prototype.mx_formats.nvfp4_tensor``, imported without the lines torchao prints while it loads (its
    optional CUDA kernels failing to load on a CPU build, torch's pytree warnings). ImportError without torchao."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        prev = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            from torchao.prototype.mx_formats import nvfp4_tensor
        finally:
            logging.disable(prev)
    return nvfp4_tensor


def amax_from_torchao_scale(p) -> np.float32:
    """An fp32 amax A with ``fp32(A) / 2688 == P`` (SPEC 5.4), the one nearest to ``P * 2688``.

    torchao keeps P; the oracle's rule "torchao" keeps A and recomputes P from it, so any such A gives the same
    bytes and the same dequantized values. NaN, +Inf and zeros map to themselves. Raises ``ValueError`` when P is
    negative, or when no fp32 A gives P (a per-tensor scale that is not the quotient of an amax by 2688).
    """
    values = _host_f32(p, "per_tensor_scale")
    if values.size == 0:
        raise ValueError("per_tensor_scale is empty; it holds one fp32 value P")
    p = np.float32(values[0])
    if np.isnan(p) or np.isinf(p) or p == 0:
        if p < 0:
            raise ValueError(f"per_tensor_scale must be >= 0, got {float(p)}")
        return p  # NaN / 2688 keeps the payload, Inf / 2688 = Inf, 0 / 2688 = 0
    if p < 0:
        raise ValueError(f"per_tensor_scale must be >= 0, got {float(p)}")
    centre = np.float32(np.float64(p) * 2688.0)
    bits = centre.view(np.uint32).astype(np.int64)
    cand = (bits + np.arange(-8, 9)).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore"):
        ok = cand[(cand / _F2688).astype(np.float32) == p]
    if ok.size == 0:
        raise ValueError(f"per_tensor_scale {float(p)!r} (0x{p.view(np.uint32):08X}) is not fp32(amax / 2688) for any "
                         "fp32 amax; the oracle's rule 'torchao' keeps the amax (SPEC 5.4). A P that torchao formed on "
                         "a CUDA tensor is amax * fp32(1/2688), which this rule does not hold: oracle.diagnose names "
                         "those bytes (rule torchao_cuda, SPEC 14.11)")
    return np.float32(ok[np.argmin(np.abs(ok.astype(np.float64) - np.float64(p) * 2688.0))])


def torchao_fields(t) -> dict:
    """The stored fields of a torchao 0.18 ``NVFP4Tensor`` as host NumPy values, bytes as stored:
    ``qdata`` uint8, ``scale`` uint8 (its layout as stored), ``per_tensor_scale`` float32 ``[1]`` or ``None``,
    ``is_swizzled_scales``, ``block_size``, ``orig_dtype`` (the torch dtype's name), ``shape`` (logical, the
    tensor's) and ``transposed`` (a ``.t()`` view: qdata's last stride is not 1)."""
    for name in ("qdata", "scale", "block_size", "orig_dtype", "per_tensor_scale", "is_swizzled_scales"):
        if not hasattr(t, name):
            raise TypeError(f"expected a torchao NVFP4Tensor (fields qdata, scale, per_tensor_scale, ...), "
                            f"got {type(t).__name__} without {name!r}")
    q = t.qdata
    pts = t.per_tensor_scale
    return {
        "qdata": _host_u8(q, "qdata"),
        "scale": _host_u8(t.scale, "scale"),
        "per_tensor_scale": None if pts is None else _host_f32(pts, "per_tensor_scale"),
        "per_tensor_scale_shape": None if pts is None else tuple(pts.shape),
        "is_swizzled_scales": bool(t.is_swizzled_scales),
        "block_size": int(t.block_size),
        "orig_dtype": str(t.orig_dtype).replace("torch.", ""),
        "shape": tuple(int(s) for s in t.shape),
        "transposed": q.dim() >= 2 and q.stride(-2) < q.stride(-1),
    }


def from_torchao(t, *, amax=None) -> NVFP4Tensor:
    """An oracle :class:`NVFP4Tensor` (rowwise plane) from a torchao 0.18 ``NVFP4Tensor``.

    The plane's rule is "torchao" when the tensor has a ``per_tensor_scale`` P, else "torchao_noscale" (SPEC 5.4,
    5.5). An N-D tensor becomes the plane of its 2-D flattening ``[prod(...) * M, K]`` (SPEC 1.3). The amax is the
    one given (checked: ``fp32(amax) / 2688`` must be P bit for bit, a NaN's payload included, SPEC 3.5) or
    :func:`amax_from_torchao_scale` of P.
    ``act_per_tensor_scale`` (a setting for quantizing the other GEMM operand) is not part of the plane. A P of one
    value in any shape (``()``, ``(1,)``, a single expert's ``(1, 1, 1)``) is the tensor's. Refused: a per-expert P
    of several values, a block size other than 16, and a transposed view (convert ``t.t()``, the stored matrix).
    """
    f = torchao_fields(t)
    if f["block_size"] != 16:
        raise ValueError(f"NVFP4 blocks are 16 elements, the tensor says block_size={f['block_size']}")
    if f["transposed"]:
        raise ValueError("a transposed NVFP4Tensor view (qdata is column-major): convert t.t(), the matrix as stored")
    if f["per_tensor_scale_shape"] is not None and int(np.prod(f["per_tensor_scale_shape"])) != 1:
        raise ValueError(f"a per-expert per_tensor_scale of shape {f['per_tensor_scale_shape']} has one amax per "
                         "expert: convert each expert's slice separately")
    if amax is not None:
        a_in = host_array(amax)
        if not is_real(a_in) or a_in.size != 1:
            raise ValueError(f"amax must be one real number (the tensor's), got {a_in.dtype} {a_in.shape}")
        amax = a_in.reshape(-1)[0]
    q = f["qdata"]
    m, k = _rowwise_shape(q, "qdata")
    scales = read_scales(f["scale"], m, k // 16, "swizzled" if f["is_swizzled_scales"] else "compact")
    if f["per_tensor_scale"] is None:
        rule = "torchao_noscale"
        a = np.float32(0.0) if amax is None else np.float32(amax)
    else:
        rule = "torchao"
        p = np.float32(f["per_tensor_scale"][0])
        if amax is None:
            a = amax_from_torchao_scale(p)
        else:
            a = np.float32(amax)
            with np.errstate(invalid="ignore", over="ignore"):
                back = np.float32(a / _F2688)
            if back.view(np.uint32) != p.view(np.uint32):  # a NaN's payload too: it decides the codes (SPEC 3.5)
                raise ValueError(f"amax {float(a)!r} does not give the tensor's per_tensor_scale {float(p)!r} "
                                 f"(fp32(amax) / 2688 = {float(back)!r}, SPEC 5.4)")
    plane = _make_plane(q.reshape(m, k // 2), scales, a, (m, k), rule)
    return NVFP4Tensor(plane, None, (m, k), options={"rule": rule, "block": (1, 16), "orig_dtype": f["orig_dtype"],
                                                     "source": "torchao"})


def _as_plane(t, plane: str):
    """The named plane of an oracle NVFP4Tensor, or a QuantizedPlane itself."""
    if not isinstance(plane, str) or plane not in ("row", "col"):
        raise ValueError(f"plane must be 'row' or 'col', got {plane!r}")
    if isinstance(t, QuantizedPlane):
        return t
    if not isinstance(t, NVFP4Tensor):
        raise TypeError(f"expected an oracle NVFP4Tensor or QuantizedPlane, got {type(t).__name__}")
    p = t.row if plane == "row" else t.col
    if p is None:
        raise ValueError(f"the tensor has no {plane} plane")
    return p


def _torch_dtype(name):
    import torch

    if name is None:
        return torch.bfloat16
    dtype = name if isinstance(name, torch.dtype) else getattr(torch, str(name).replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"orig_dtype must be a torch floating-point dtype (or its name), got {name!r}")
    return dtype


def _refuse_grouped(t) -> None:
    """A grouped result (oracle or device) holds E planes, not one tensor's: ``TypeError``, naming the way to one."""
    if isinstance(t, GroupedNVFP4Tensor) or (hasattr(t, "splits") and hasattr(t, "offsets")):
        raise TypeError(f"a grouped result ({type(t).__name__}) holds one plane per group: convert one group's plane "
                        "(.to_oracle().row_planes[g] or .group_plane(g) for a device result)")


def _nonnegative(a: np.ndarray, what: str) -> np.ndarray:
    """A stored amax field: an absolute maximum, >= 0 (-0.0 included), +Inf or NaN (SPEC 4.3, 11.2)."""
    if np.any(a < 0):
        raise ValueError(f"{what} holds a negative value: an amax is >= 0, +Inf or NaN (SPEC 11.2)")
    return a


def _check_torchao_g(g) -> None:
    """Refuse a plane whose G (``global_scale_max``, SPEC 5.6) is not 448: torchao's P is amax / 2688 = amax / (6 * 448)
    (SPEC 5.4), so it cannot hold the factor amax / (6 * 256) of a G = 256 plane."""
    if int(g) != 448:
        raise ValueError(f"a plane with global_scale_max={int(g)} (4over6, SPEC 5.6) has no torchao NVFP4Tensor form: "
                         f"its per-tensor factor is amax / {6 * int(g)}, torchao's P is amax / 2688 (SPEC 5.4)")


def to_torchao(t, plane: str = "row", *, swizzled: bool | None = None, orig_dtype=None):
    """A torchao 0.18 ``NVFP4Tensor`` holding one plane's bytes.

    ``t``: an oracle :class:`NVFP4Tensor` (``plane`` picks "row" or "col"), a :class:`QuantizedPlane` (converted
    as it is; ``plane`` is still checked), or a device result (``device.DeviceNVFP4Tensor``, whose tensors stay on
    their device). ``swizzled``: store the scales in the 128x4 layout (``is_swizzled_scales``); default: compact for
    oracle planes, the device result's own layout.
    ``orig_dtype``: the tensor's nominal dtype (default: the one recorded in the options, else bfloat16).
    The per-tensor scale is torchao's ``per_tensor_amax_to_scale(amax)`` for every rule but "torchao_noscale" (no
    per-tensor scale), formed on the host (SPEC 5.4: on the GPU it can be one ulp off) and placed beside the data.
    torchao dequantizes by its own factor ``P * sf`` (SPEC 11.1), so a TE-rule plane's values can differ from
    :func:`oracle.dequantize` in the last bit. A row-scaled or 16x16-block plane has no torchao form, nor has a
    4over6 plane with ``global_scale_max=256`` (its factor is amax / 1536, SPEC 5.6; torchao's P is always amax /
    2688): ``ValueError``. A columnwise plane quantized with the RHT converts as its bytes are, but torchao's tensor
    has no field for the sign mask: it dequantizes to the transform's outputs (SPEC 7, as :func:`oracle.dequantize`
    does), not to X^T, and only a GEMM whose other operand had the same transform undoes it. A columnwise plane of
    M tokens with M % 16 != 0 converts whole, ``[K, roundup(M, 16)]`` with SPEC 6.2's zero padding tokens as data
    (torchao's tensor records no valid width; :func:`from_torchao` gives it back as a plane of that width).
    """
    import torch

    nvfp4_tensor = torchao_nvfp4_module()
    AoTensor, per_tensor_amax_to_scale = nvfp4_tensor.NVFP4Tensor, nvfp4_tensor.per_tensor_amax_to_scale

    if swizzled is not None:
        check_flag(swizzled, "swizzled")
    _refuse_grouped(t)
    if hasattr(t, "row_data") and hasattr(t, "swizzled"):  # a device result: keep its tensors where they are
        data, scales, amax, rows, cols, is_swz, rule, block = _device_plane(t, plane)
        opts = dict(t.options)
        _check_torchao_g(opts.get("global_scale_max", 448))
        if swizzled is None:
            swizzled = is_swz
        sc = _torch_scales(scales, rows, cols // 16, is_swz, bool(swizzled))
        q = data.reshape(rows, cols // 2)
        amax_t = amax.reshape(-1)[:1].reshape(())
    else:
        p = _as_plane(t, plane)
        opts = dict(getattr(t, "options", {}) or {})
        rows, cols, rule, block = p.rows, p.cols, p.rule, tuple(p.block)
        if getattr(p, "row_scaled", False):
            raise ValueError("a row-scaled plane (one amax per row, SPEC 5.7) has no torchao NVFP4Tensor form")
        _check_torchao_g(getattr(p, "global_scale_max", 448))
        q = torch.from_numpy(np.ascontiguousarray(p.data))
        sb = p.swizzled_scales() if swizzled else p.scales
        sc = torch.from_numpy(np.ascontiguousarray(sb))
        amax_t = torch.tensor(np.float32(p.amax))
    if tuple(block) != (1, 16):
        raise ValueError(f"torchao's NVFP4Tensor has 1x16 blocks; this plane has {block} blocks")
    if swizzled:
        sc = sc.reshape((rows + 127) // 128 * 32, (cols + 63) // 64 * 16)
    else:
        sc = sc.reshape(rows, cols // 16)
    # SPEC 5.4's P, formed on the host: on a CUDA tensor torch's division by 2688 is a product with fp32(1 / 2688)
    pts = None if rule == "torchao_noscale" else per_tensor_amax_to_scale(amax_t.cpu()).to(amax_t.device)
    return AoTensor(q.contiguous(), sc.contiguous().view(torch.float8_e4m3fn), 16,
                    _torch_dtype(orig_dtype or opts.get("orig_dtype")), per_tensor_scale=pts,
                    is_swizzled_scales=bool(swizzled))


# ---------------------------------------------------------------------------------------------------------------
# TransformerEngine
# ---------------------------------------------------------------------------------------------------------------

def from_te_fields(*, rowwise_data=None, rowwise_scale_inv=None, columnwise_data=None, columnwise_scale_inv=None,
                   amax_rowwise=None, amax_columnwise=None, with_gemm_swizzled_scales: bool = False,
                   row_scaled_nvfp4: bool = False, nvfp4_use_4over6: bool = False, nvfp4_e4m3_max: int = 448,
                   rule: str = "te", rht: bool = False, rht_signs: int | None = None, block=(1, 16),
                   four_over_six=None, four_over_six_fast_math: bool = False, **ignored) -> NVFP4Tensor:
    """An oracle :class:`NVFP4Tensor` from TransformerEngine's NVFP4 tensor fields, without importing TE.

    Pass the fields by name, e.g. ``from_te_fields(**te_tensor.get_metadata())`` (``fp4_dtype``, ``quantizer`` and
    ``fake_dtype`` are accepted and ignored). Arrays may be NumPy arrays or torch tensors on any device.
    What TE's fields do not record is given here: ``rule`` ("te", or "te_fused_rht" for TE's fused RHT cast),
    ``rht`` (whether the columnwise plane holds the RHT, SPEC 7) and ``rht_signs`` (its 16-bit sign mask, e.g.
    TE's default 0xD7E8; None: unknown, so :func:`oracle.gemm` cannot compare it with the other operand's),
    ``block`` ((16, 16) for 2-D weight quantization),
    ``four_over_six`` and ``four_over_six_fast_math`` (the 4over6 error mode and path, when ``nvfp4_use_4over6``:
    TE keeps the mode on the quantizer, ``NVFP4Quantizer.nvfp4_4over6_err_mode``, and takes the path from its
    environment variable ``NVTE_NVFP4_4OVER6_ERR_USE_FAST_MATH``; neither is in the tensor's fields).
    The columnwise plane is ``[K, M]``: TE stores one only for M a multiple of 16, where it equals SPEC 6.2's.
    With ``row_scaled_nvfp4`` (SPEC 5.7) ``amax_rowwise`` holds M values and ``amax_columnwise`` K (one per column
    of X; a single value there reads as a plain columnwise plane).
    ``nvfp4_e4m3_max`` (G, SPEC 5.6) must be 448 or 256, and 256 only with ``nvfp4_use_4over6`` (TE's quantizer and
    the oracle define G = 256 for 4over6 alone): ``ValueError`` otherwise.
    """
    unknown = sorted(set(ignored) - set(_TE_IGNORED))
    if unknown:
        raise TypeError(f"unknown TE field(s) {unknown}; the fields read are {list(TE_FIELD_NAMES)} "
                        f"(and {list(_TE_IGNORED)}, ignored)")
    if rowwise_data is None and columnwise_data is None:
        raise ValueError("no plane: give rowwise_data and/or columnwise_data")
    if not isinstance(rule, str) or rule not in _TE_RULES:
        raise ValueError(f"rule must be one of {_TE_RULES} (TE's tensors hold the TE rules), got {rule!r}")
    block = check_block(block)
    for name, v in (("with_gemm_swizzled_scales", with_gemm_swizzled_scales), ("row_scaled_nvfp4", row_scaled_nvfp4),
                    ("nvfp4_use_4over6", nvfp4_use_4over6), ("rht", rht),
                    ("four_over_six_fast_math", four_over_six_fast_math)):
        check_flag(v, name)
    if nvfp4_use_4over6 and (rule != "te" or rht):
        raise ValueError(f"a 4over6 tensor has rule 'te' without RHT (SPEC 5.6), got rule={rule!r}, rht={rht}")
    if not nvfp4_use_4over6 and (four_over_six is not None or four_over_six_fast_math):
        raise ValueError("four_over_six / four_over_six_fast_math describe a 4over6 tensor: pass nvfp4_use_4over6=True "
                         "with them")
    if rht_signs is not None:
        if not rht:
            raise ValueError("rht_signs is the sign mask of an RHT plane: pass rht=True with it")
        rht_signs = check_rht_signs(rht_signs, "rht_signs")
    check_global_scale_max(nvfp4_e4m3_max, "nvfp4_e4m3_max")
    if int(nvfp4_e4m3_max) != 448 and not nvfp4_use_4over6:
        raise ValueError(f"nvfp4_e4m3_max={int(nvfp4_e4m3_max)} with nvfp4_use_4over6=False: G = 256 is defined only "
                         "for 4over6 (SPEC 5.6); a plain TE tensor has 448")
    layout = "swizzled" if with_gemm_swizzled_scales else "padded"
    extra = dict(row_scaled=bool(row_scaled_nvfp4) or None, global_scale_max=int(nvfp4_e4m3_max) if nvfp4_use_4over6
                 else None, four_over_six=four_over_six if nvfp4_use_4over6 else None,
                 four_over_six_fast_math=bool(four_over_six_fast_math) if nvfp4_use_4over6 else None)
    row = col = None
    m = k = None
    if rowwise_data is not None:
        d = _host_u8(rowwise_data, "rowwise_data")
        m, k = _rowwise_shape(d, "rowwise_data")
        if rowwise_scale_inv is None or amax_rowwise is None:
            raise ValueError("rowwise_data needs rowwise_scale_inv and amax_rowwise")
        s = read_scales(rowwise_scale_inv, m, k // 16, layout)
        a = _nonnegative(_host_f32(amax_rowwise, "amax_rowwise"), "amax_rowwise")
        row = _make_plane(d.reshape(m, k // 2), s, a, (m, k), rule, block=block, **extra)
    if columnwise_data is not None:
        d = _host_u8(columnwise_data, "columnwise_data")
        if d.ndim < 2:
            raise ValueError(f"columnwise_data must be [K, M/2] (TE's columnwise plane), got shape {list(d.shape)}")
        kc = int(d.shape[0])
        mc = int(np.prod(d.shape[1:])) * 2
        if k is not None and (kc, mc) != (k, m):
            raise ValueError(f"columnwise_data {list(d.shape)} is not the plane of X^T for rowwise X [{m}, {k}]")
        if mc % 16:
            raise ValueError(f"a columnwise plane of {mc} tokens: TE stores one only for M a multiple of 16")
        if columnwise_scale_inv is None or amax_columnwise is None:
            raise ValueError("columnwise_data needs columnwise_scale_inv and amax_columnwise")
        s = read_scales(columnwise_scale_inv, kc, mc // 16, layout)
        a = _nonnegative(_host_f32(amax_columnwise, "amax_columnwise"), "amax_columnwise")
        # row-scaled fields: TE's columnwise plane has one amax per column of X (SPEC 5.7); one value is the plain
        # columnwise plane that TE wrote beside a row-scaled rowwise plane before it row-scaled both
        col_row_scaled = bool(row_scaled_nvfp4) and a.size != 1
        if col_row_scaled and a.size != kc:
            raise ValueError(f"amax_columnwise holds {a.size} values: a row-scaled columnwise plane has one per column "
                             f"of X ({kc}, SPEC 5.7), a plain one 1")
        col = _make_plane(d.reshape(kc, mc // 2), s, a, (kc, mc), rule, block=block, rht=rht, valid_cols=mc,
                          **{**extra, "row_scaled": col_row_scaled or None, "rht_signs": rht_signs})
        m, k = mc, kc
    opts = {"rule": rule, "block": tuple(block), "rht": rht, "rht_signs": rht_signs, "source": "te",
            "with_gemm_swizzled_scales": bool(with_gemm_swizzled_scales), "nvfp4_use_4over6": bool(nvfp4_use_4over6)}
    return NVFP4Tensor(row, col, (m, k), options=opts)


_TE_RULES = ("te", "te_fused_rht")


def _check_te_rule(rule: str) -> None:
    if not isinstance(rule, str) or rule not in _TE_RULES:
        raise ValueError(f"a plane of rule {rule!r} has no TE fields: TE's tensors hold the TE rules {_TE_RULES} "
                         "(SPEC 5.1-5.3, 5.6, 5.7)")


def to_te_fields(t, *, swizzled: bool | None = None, as_torch: bool = False) -> dict:
    """TransformerEngine's NVFP4 tensor fields (the names of :data:`TE_FIELD_NAMES`) of an oracle
    :class:`NVFP4Tensor` or a device result.

    Scales are TE's padded ``[roundup(rows,128), roundup(cols/16,4)]`` matrices, compact or (``swizzled``) in the
    128x4 layout; the amaxes float32 ``[1]`` (one per plane row for a row-scaled plane: ``[M]`` rowwise, ``[K]``
    columnwise). Absent planes give ``None``.
    Oracle tensors give NumPy arrays (``as_torch``: CPU torch tensors); a device result gives tensors on its device,
    its scale layout by default. A columnwise plane needs M to be a multiple of 16 (TE's columnwise data is
    ``[K, M/2]``). ``nvfp4_use_4over6`` and ``nvfp4_e4m3_max`` (G) record a 4over6 plane (SPEC 5.6); its error mode
    and path (``four_over_six``, ``four_over_six_fast_math``) are not carried: TE keeps the mode on the quantizer
    (``NVFP4Quantizer.nvfp4_4over6_err_mode``) and the path in an environment variable, not in the tensor, and the
    bytes do not need them to be read (a tensor made by :func:`from_te_fields` without them keeps TE's flag in its
    options, and gives it back here).
    Only TE's rules have TE fields: a plane of another rule (torchao's) raises ``ValueError``.
    """
    if swizzled is not None:
        check_flag(swizzled, "swizzled")
    check_flag(as_torch, "as_torch")
    _refuse_grouped(t)
    if hasattr(t, "row_data") and hasattr(t, "swizzled"):
        _check_te_rule(t.options.get("rule", "te"))
        return _device_te_fields(t, swizzled)
    if not isinstance(t, NVFP4Tensor):
        raise TypeError(f"expected an oracle NVFP4Tensor or a device result, got {type(t).__name__}")
    for p in (t.row, t.col):
        if p is not None:
            _check_te_rule(p.rule)
    out = {"rowwise_data": None, "rowwise_scale_inv": None, "columnwise_data": None, "columnwise_scale_inv": None,
           "amax_rowwise": None, "amax_columnwise": None, "with_gemm_swizzled_scales": bool(swizzled)}
    for name, p in (("rowwise", t.row), ("columnwise", t.col)):
        if p is None:
            continue
        if name == "columnwise" and p.valid_cols != p.cols:
            raise ValueError(f"the columnwise plane pads M={p.valid_cols} tokens to {p.cols} (SPEC 6.2); TE stores a "
                             "columnwise plane only for M a multiple of 16")
        out[f"{name}_data"] = p.data
        pad = _padded(p.scales)
        out[f"{name}_scale_inv"] = swizzle_scales(p.scales).reshape(pad.shape) if swizzled else pad
        out[f"amax_{name}"] = np.asarray(p.amax, np.float32).reshape(-1)
    row = t.row
    out["row_scaled_nvfp4"] = bool(getattr(row or t.col, "row_scaled", False))
    gmax = int(getattr(row or t.col, "global_scale_max", 448))
    # a 4over6 plane: its error mode is known (the oracle's), or TE's flag was read without it (from_te_fields)
    out["nvfp4_use_4over6"] = (getattr(row or t.col, "four_over_six", None) is not None
                               or bool(t.options.get("nvfp4_use_4over6", False)))
    out["nvfp4_e4m3_max"] = gmax
    if as_torch:
        import torch

        out = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
               for k, v in out.items()}
    return out


# ---------------------------------------------------------------------------------------------------------------
# device results (torch tensors kept on their device)
# ---------------------------------------------------------------------------------------------------------------

def _device_plane(t, plane: str):
    """(data, scales, amax, rows, cols, swizzled, rule, block) of one plane of a device result."""
    if not isinstance(plane, str) or plane not in ("row", "col"):
        raise ValueError(f"plane must be 'row' or 'col', got {plane!r}")
    m, k = t.shape
    data = t.row_data if plane == "row" else t.col_data
    if data is None:
        raise ValueError(f"the device result has no {plane} plane")
    rows, cols = (m, k) if plane == "row" else (k, (m + 15) // 16 * 16)
    o = t.options
    scales = t.row_scales if plane == "row" else t.col_scales
    amax = t.row_amax if plane == "row" else t.col_amax
    return data, scales, amax, rows, cols, bool(t.swizzled), o.get("rule", "te"), tuple(o.get("block", (1, 16)))


def _torch_scales(s, rows: int, scale_cols: int, is_swizzled: bool, want_swizzled: bool):
    """Device scale bytes in the other layout, by torch reshapes (SPEC 8.2), padding kept as 0x00: compact
    ``[rows, C]`` or, swizzled, a 1-D buffer of the padded size."""
    import torch

    pr, pc = padded_scale_shape(rows, scale_cols)
    if is_swizzled == want_swizzled:
        return s.reshape(-1) if want_swizzled else s.reshape(rows, scale_cols)
    if want_swizzled:
        padded = torch.zeros((pr, pc), dtype=torch.uint8, device=s.device)
        padded[:rows, :scale_cols] = s.reshape(rows, scale_cols)
        return padded.reshape(pr // 128, 4, 32, pc // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)
    t = s.reshape(pr // 128, pc // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(pr, pc)
    return t[:rows, :scale_cols]


def _device_te_fields(t, swizzled):
    import torch

    out = {"rowwise_data": None, "rowwise_scale_inv": None, "columnwise_data": None, "columnwise_scale_inv": None,
           "amax_rowwise": None, "amax_columnwise": None}
    want = bool(t.swizzled) if swizzled is None else bool(swizzled)
    for name, plane in (("rowwise", "row"), ("columnwise", "col")):
        if (t.row_data if plane == "row" else t.col_data) is None:
            continue
        data, scales, amax, rows, cols, is_swz, _, _ = _device_plane(t, plane)
        if plane == "col" and t.shape[0] % 16:
            raise ValueError(f"the columnwise plane pads M={t.shape[0]} tokens (SPEC 6.2); TE stores a columnwise "
                             "plane only for M a multiple of 16")
        pr, pc = padded_scale_shape(rows, cols // 16)
        s = _torch_scales(scales, rows, cols // 16, is_swz, want)
        if want:
            s = s.reshape(pr, pc)
        else:
            padded = torch.zeros((pr, pc), dtype=torch.uint8, device=s.device)
            padded[:rows, : cols // 16] = s
            s = padded
        out[f"{name}_data"] = data.reshape(rows, cols // 2)
        out[f"{name}_scale_inv"] = s
        out[f"amax_{name}"] = amax.reshape(-1).to(torch.float32)
    o = t.options
    out.update(with_gemm_swizzled_scales=want, row_scaled_nvfp4=False,
               nvfp4_use_4over6=o.get("four_over_six") is not None,
               nvfp4_e4m3_max=int(o.get("global_scale_max", 448)))
    return out
