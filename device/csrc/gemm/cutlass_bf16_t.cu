// CUTLASS grouped GEMM instantiation of copies_cutlass, epilogue "bf16" with B read N-contiguous (gemm/cutlass.cuh):
// dgrad over the weights' fp16 copy [N, K] (copies.h, kCopyTransposed).
#include "gemm/cutlass.cuh"

namespace nvfp4_gemm {
using Cfg_bf16_t = cutlass_path::Config<cutlass::bfloat16_t, void, cutlass_path::AlphaAcc<cutlass::bfloat16_t>,
                                        cutlass::layout::RowMajor>;
int cutlass_run_bf16_t(const CutlassArgs& a, cudaStream_t s) { return cutlass_path::run<Cfg_bf16_t>(a, s); }
size_t cutlass_workspace_bf16_t(const CutlassArgs& a) { return cutlass_path::workspace_bytes<Cfg_bf16_t>(a); }
}  // namespace nvfp4_gemm
