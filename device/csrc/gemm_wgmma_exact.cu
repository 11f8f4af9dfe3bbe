// Exact-mode instantiations of the wgmma grouped GEMM (gemm_wgmma.cuh; SPEC 12.2 bit for bit): tile 128 x 128,
// bf16 or fp32 output.
#include "gemm_wgmma.cuh"

namespace nvfp4_gemm {

void launch_wgmma_exact(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) wg::launch<wg::ShapeExact, true>(a, s); else wg::launch<wg::ShapeExact, false>(a, s);
}

}  // namespace nvfp4_gemm
