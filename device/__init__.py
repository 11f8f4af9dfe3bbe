"""Hopper (sm_90a) CUDA kernels for NVFP4, byte-exact with the NumPy oracle (SPEC.md).

The API mirrors the oracle name for name on torch CUDA tensors (current stream, no host synchronization):

* :func:`quantize` / :func:`group_quantize`: :func:`oracle.quantize` / :func:`oracle.group_quantize`; the results
  (:class:`DeviceNVFP4Tensor`, :class:`DeviceGroupedNVFP4Tensor`) have ``.to_oracle()``.
* :func:`swizzle_scales`, :func:`dequantize`.
* :func:`grouped_gemm`: graph-safe grouped NVFP4 GEMM (fprop / dgrad / wgrad; "fast", "exact" and "sm100" modes, SPEC 12);
  :func:`grouped_gemm_plan`: the kernel plan a call runs.
* :class:`GroupedLinear`: the grouped (MoE) linear layer of NVFP4 training (SPEC 16), a ``torch.nn.Module`` whose
  forward and backward run these kernels (CUDA-graph and ``torch.compile`` safe).
* :func:`set_num_sms` / :func:`get_num_sms`: cap the GEMM's persistent grid.
* :func:`is_available`: whether the current CUDA device can run the kernels (sm_90).
* :mod:`device.testing`: test-only hooks (``force_plan``, ``gemm_over_weight_copy``).

Importing this package needs neither torch nor CUDA: the functions above are imported on first access (their
modules import torch, so without torch that access, ``help(device)`` included, raises ModuleNotFoundError), and the
CUDA extensions are JIT-built on the first kernel call (:mod:`device._build`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DeviceGroupedNVFP4Tensor", "DeviceNVFP4Tensor", "GroupedLinear", "dequantize", "get_num_sms", "group_quantize",
    "grouped_gemm", "grouped_gemm_plan", "is_available", "quantize", "set_num_sms", "swizzle_scales",
]

# public name -> the module that defines it
_LAZY = {
    "quantize": "quantization", "group_quantize": "quantization", "swizzle_scales": "quantization",
    "dequantize": "quantization", "grouped_gemm": "gemm", "grouped_gemm_plan": "gemm", "set_num_sms": "gemm",
    "get_num_sms": "gemm",
    "DeviceNVFP4Tensor": "_results", "DeviceGroupedNVFP4Tensor": "_results", "GroupedLinear": "grouped_linear",
}


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


def __getattr__(name: str) -> Any:
    """The public functions and classes, imported from their modules on first access (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later accesses skip this function
        return value
    if name == "testing":
        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'device' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"testing"})
