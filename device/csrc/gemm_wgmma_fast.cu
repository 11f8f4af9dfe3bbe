// Fast-mode instantiations of the wgmma grouped GEMM (gemm_wgmma.cuh; SPEC 12.4): tile 128 x 128 or 128 x 256,
// bf16 or fp32 output. Split from the exact mode so the two compile in parallel.
#include "gemm_wgmma.cuh"

namespace nvfp4_gemm {

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_n == 256) {
    if (a.out_f32) wg::launch<256, false, true>(a, s); else wg::launch<256, false, false>(a, s);
  } else {
    if (a.out_f32) wg::launch<128, false, true>(a, s); else wg::launch<128, false, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
