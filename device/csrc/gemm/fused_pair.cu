// Fast-mode instantiations of the fused kernel in 2-CTA clusters (fused.cuh; fused_pair_256x256: 256 x 256 cluster
// tiles, each CTA dequantizes half of the B tile and bulk-copies it into the other CTA's shared memory), bf16 or fp32
// output. A file of its own so that it compiles in parallel with the other shapes.
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

bool launch_fused_pair(const LaunchArgs& a, cudaStream_t s) {
  if (!a.out_f32) return fused::launch_bf16<fused::FusedPairBf16, fused::FusedPairBf16Tma>(a, s);
  if (a.epilogue != kEpilogueStaged) return false;
  fused::launch<fused::FusedPairF32, true>(a, s);
  return true;
}

}  // namespace nvfp4_gemm
