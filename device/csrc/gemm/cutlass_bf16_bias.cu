// CUTLASS grouped GEMM instantiation of copies_cutlass, epilogue "bf16" plus a per-group fp32 bias row
// (gemm/cutlass.cuh's AlphaAccPlusBias): fprop, and dgrad over decoded copies, with a bias.
#include "gemm/cutlass.cuh"

namespace nvfp4_gemm {
using Cfg_bf16_bias =
    cutlass_path::Config<cutlass::bfloat16_t, void, cutlass_path::AlphaAccPlusBias<cutlass::bfloat16_t>,
                         cutlass::layout::ColumnMajor, /*kBias=*/true>;
int cutlass_run_bf16_bias(const CutlassArgs& a, cudaStream_t s) { return cutlass_path::run<Cfg_bf16_bias>(a, s); }
size_t cutlass_workspace_bf16_bias(const CutlassArgs& a) { return cutlass_path::workspace_bytes<Cfg_bf16_bias>(a); }
}  // namespace nvfp4_gemm
