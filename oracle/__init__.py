"""NVFP4 oracle: a pure-NumPy, bit-exact model of NVFP4 quantization, layouts and GEMM (see SPEC.md)."""

from . import fp4_numpy, swizzle
from .bias_grad import grouped_bias_grad
from .dequantize import dequantize
from .diagnose import diagnose
from .gemm import gemm, gemm_alpha, gemm_error_bound, within_bound
from .grouped import cut_splits, group_quantize, grouped_capacities
from .grouped_gemm import grouped_gemm, grouped_gemm_error_bound
from .grouped_linear import (
    GroupedLinearGrads,
    GroupedLinearOperands,
    grouped_linear_backward,
    grouped_linear_forward,
    grouped_linear_operands,
)
from .interop import from_te_fields, from_torchao, to_te_fields, to_torchao
from .planes import GroupedNVFP4Tensor, NVFP4Tensor, QuantizedPlane
from .quantize import quantize
from .recipe import DEFAULT_RECIPE, NVFP4Recipe
from .rht import rht

__all__ = [
    "DEFAULT_RECIPE",
    "GroupedLinearGrads",
    "GroupedLinearOperands",
    "GroupedNVFP4Tensor",
    "NVFP4Recipe",
    "NVFP4Tensor",
    "QuantizedPlane",
    "cut_splits",
    "dequantize",
    "diagnose",
    "fp4_numpy",
    "from_te_fields",
    "from_torchao",
    "gemm",
    "gemm_alpha",
    "gemm_error_bound",
    "group_quantize",
    "grouped_capacities",
    "grouped_gemm",
    "grouped_bias_grad",
    "grouped_gemm_error_bound",
    "grouped_linear_backward",
    "grouped_linear_forward",
    "grouped_linear_operands",
    "quantize",
    "rht",
    "swizzle",
    "to_te_fields",
    "to_torchao",
    "within_bound",
]
