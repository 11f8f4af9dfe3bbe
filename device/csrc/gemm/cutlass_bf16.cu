// CUTLASS grouped GEMM instantiation of copies_cutlass, epilogue "bf16" (gemm/cutlass.cuh).
#include "gemm/cutlass.cuh"

namespace nvfp4_gemm {
using Cfg_bf16 = cutlass_path::Config<cutlass::bfloat16_t, void, cutlass_path::AlphaAcc<cutlass::bfloat16_t>>;
int cutlass_run_bf16(const CutlassArgs& a, cudaStream_t s) { return cutlass_path::run<Cfg_bf16>(a, s); }
size_t cutlass_workspace_bf16(const CutlassArgs& a) { return cutlass_path::workspace_bytes<Cfg_bf16>(a); }
}  // namespace nvfp4_gemm
