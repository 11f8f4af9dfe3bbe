// Fast-mode instantiations of the wgmma grouped GEMM (gemm_wgmma.cuh; SPEC 12.4): tile 128 x 256 (large groups) or
// 64 x 256 (few rows per group), bf16 or fp32 output. Split from the exact mode so the two compile in parallel.
#include "gemm_wgmma.cuh"

namespace nvfp4_gemm {

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == wg::ShapeSkinny::BM) {
    if (a.out_f32) wg::launch<wg::ShapeSkinny, false, true>(a, s); else wg::launch<wg::ShapeSkinny, false, false>(a, s);
  } else {
    if (a.out_f32) wg::launch<wg::ShapeLarge, false, true>(a, s); else wg::launch<wg::ShapeLarge, false, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
