// Fast-mode instantiations of the 2-CTA cluster kernel with 256 x 288 cluster tiles (ws::ShapePair288: 144 B rows per
// CTA, two m64n144k16 wgmmas per k16 step, bf16 output through the staged epilogue, fp32 through the whole-line one;
// docs/gemm.md, stop 55). A file of its own so it compiles in parallel with the other shapes.
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_pair288(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) ws::launch<ws::ShapePair288F32, true>(a, s); else ws::launch<ws::ShapePair288, false>(a, s);
}

}  // namespace nvfp4_gemm
