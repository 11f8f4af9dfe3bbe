// CUTLASS grouped GEMM instantiation of the dequantize-first fast path: schedule Pingpong64x256, epilogue "f32"
// (gemm_cutlass.cuh).
#include "gemm_cutlass.cuh"

NVFP4_CUTLASS_INSTANCE(pp64_f32, float, void, cutlass_path::AlphaAcc<float>, Pingpong64x256)
