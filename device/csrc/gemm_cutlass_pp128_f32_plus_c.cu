// CUTLASS grouped GEMM instantiation of the dequantize-first fast path: schedule Pingpong128x128, epilogue "f32_plus_c"
// (gemm_cutlass.cuh).
#include "gemm_cutlass.cuh"

NVFP4_CUTLASS_INSTANCE(pp128_f32_plus_c, float, float, cutlass_path::AlphaAccPlusC, Pingpong128x128)
