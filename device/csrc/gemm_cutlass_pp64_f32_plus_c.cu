// CUTLASS grouped GEMM instantiation of the dequantize-first fast path: schedule Pingpong64x256, epilogue "f32_plus_c"
// (gemm_cutlass.cuh).
#include "gemm_cutlass.cuh"

NVFP4_CUTLASS_INSTANCE(pp64_f32_plus_c, float, float, cutlass_path::AlphaAccPlusC, Pingpong64x256)
