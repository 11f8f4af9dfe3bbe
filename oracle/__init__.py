"""NVFP4 oracle: a pure-NumPy, bit-exact model of NVFP4 quantization, layouts and GEMM (see SPEC.md)."""

from . import fp4_numpy, swizzle
from .planes import GroupedNVFP4Tensor, NVFP4Tensor, QuantizedPlane
from .quantize import quantize
from .rht import rht

__all__ = [
    "GroupedNVFP4Tensor",
    "NVFP4Tensor",
    "QuantizedPlane",
    "fp4_numpy",
    "quantize",
    "rht",
    "swizzle",
]
