// CUTLASS grouped GEMM instantiation of copies_cutlass, epilogue "f32" (gemm/cutlass.cuh).
#include "gemm/cutlass.cuh"

namespace nvfp4_gemm {
using Cfg_f32 = cutlass_path::Config<float, void, cutlass_path::AlphaAcc<float>>;
int cutlass_run_f32(const CutlassArgs& a, cudaStream_t s) { return cutlass_path::run<Cfg_f32>(a, s); }
size_t cutlass_workspace_f32(const CutlassArgs& a) { return cutlass_path::workspace_bytes<Cfg_f32>(a); }
}  // namespace nvfp4_gemm
