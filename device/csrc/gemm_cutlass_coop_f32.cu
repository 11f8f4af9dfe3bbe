// CUTLASS grouped GEMM instantiation of the dequantize-first fast path: schedule Cooperative128x256, epilogue "f32"
// (gemm_cutlass.cuh).
#include "gemm_cutlass.cuh"

NVFP4_CUTLASS_INSTANCE(coop_f32, float, void, cutlass_path::AlphaAcc<float>, Cooperative128x256)
