// CUTLASS grouped GEMM instantiation of the dequantize-first fast path: schedule Cooperative128x256, epilogue "bf16"
// (gemm_cutlass.cuh).
#include "gemm_cutlass.cuh"

NVFP4_CUTLASS_INSTANCE(coop_bf16, cutlass::bfloat16_t, void, cutlass_path::AlphaAcc<cutlass::bfloat16_t>, Cooperative128x256)
