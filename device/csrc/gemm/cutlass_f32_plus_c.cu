// CUTLASS grouped GEMM instantiation of copies_cutlass, epilogue "f32_plus_c" (gemm/cutlass.cuh).
#include "gemm/cutlass.cuh"

namespace nvfp4_gemm {
using Cfg_f32_plus_c = cutlass_path::Config<float, float, cutlass_path::AlphaAccPlusC>;
int cutlass_run_f32_plus_c(const CutlassArgs& a, cudaStream_t s) { return cutlass_path::run<Cfg_f32_plus_c>(a, s); }
size_t cutlass_workspace_f32_plus_c(const CutlassArgs& a) { return cutlass_path::workspace_bytes<Cfg_f32_plus_c>(a); }
}  // namespace nvfp4_gemm
