// Exact-mode instantiations of the fused kernel (fused.cuh with exact per-block partials; SPEC 12.2 bit for bit):
// exact_fused, 128 x 128 tiles, fp32 (whole-line epilogue) or bf16 (staged epilogue) output.
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

bool launch_fused_exact(const LaunchArgs& a, cudaStream_t s) {
  if (a.epilogue != kEpilogueStaged) return false;
  if (a.out_f32) fused::launch<fused::ExactFusedF32, true>(a, s); else fused::launch<fused::ExactFusedBf16, false>(a, s);
  return true;
}

}  // namespace nvfp4_gemm
