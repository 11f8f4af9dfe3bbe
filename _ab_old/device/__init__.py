"""Hopper (sm_90a) CUDA kernels for NVFP4 quantization, byte-exact with the NumPy oracle (SPEC.md).

Importing this package needs neither torch nor CUDA: everything heavy is imported on first use, and the
CUDA extension is JIT-built on the first kernel call (see :mod:`device._build`). Public API:

* :func:`quantize` / :func:`group_quantize`: mirror :func:`oracle.quantize` / :func:`oracle.group_quantize`
  on torch CUDA tensors; results have ``.to_oracle()``.
* :func:`swizzle_scales`, :func:`dequantize`.
* :func:`grouped_gemm`: graph-safe grouped NVFP4 GEMM (fprop / dgrad / wgrad, "fast" and "exact" modes, SPEC 12).
* :func:`is_available`: whether a CUDA device that can run the kernels (sm_90) is present.
* :class:`DeviceNVFP4Tensor` / :class:`DeviceGroupedNVFP4Tensor`: the result types (``device._results``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DeviceGroupedNVFP4Tensor", "DeviceNVFP4Tensor", "dequantize", "group_quantize", "grouped_gemm", "is_available",
    "quantize", "swizzle_scales",
]


def is_available() -> bool:
    """True when torch is importable, CUDA is available and the current device is sm_90 (Hopper)."""
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.get_device_capability() == (9, 0)
    except Exception:  # noqa: BLE001 - a broken driver means "not available"
        return False


def quantize(x, **kwargs) -> Any:
    """NVFP4-quantize a CUDA tensor; see :func:`device._api.quantize` for the options."""
    from ._api import quantize as _f

    return _f(x, **kwargs)


def group_quantize(x, splits, **kwargs) -> Any:
    """Grouped NVFP4 quantize driven by device int64 splits; see :func:`device._api.group_quantize`."""
    from ._api import group_quantize as _f

    return _f(x, splits, **kwargs)


def swizzle_scales(compact) -> Any:
    """Compact uint8 scales -> swizzled zero-padded buffer (SPEC 8.2); see :func:`device._api.swizzle_scales`."""
    from ._api import swizzle_scales as _f

    return _f(compact)


def dequantize(q, plane: str = "row", **kwargs) -> Any:
    """Dequantize one NVFP4 plane to float32 (SPEC 11); see :func:`device._api.dequantize`."""
    from ._api import dequantize as _f

    return _f(q, plane, **kwargs)


def grouped_gemm(a, b, **kwargs) -> Any:
    """NVFP4 grouped GEMM (fprop / dgrad / wgrad) over grouped quantized tensors; see :func:`device.gemm.grouped_gemm`."""
    from .gemm import grouped_gemm as _f

    return _f(a, b, **kwargs)


def __getattr__(name: str) -> Any:
    """The result classes, imported on first use (``device.DeviceNVFP4Tensor``, ``device.DeviceGroupedNVFP4Tensor``)."""
    if name in ("DeviceNVFP4Tensor", "DeviceGroupedNVFP4Tensor"):
        from . import _results

        return getattr(_results, name)
    raise AttributeError(f"module 'device' has no attribute {name!r}")
