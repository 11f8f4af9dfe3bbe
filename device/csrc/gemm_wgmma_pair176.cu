// Fast-mode instantiations of the 2-CTA cluster kernel with 256 x 176 cluster tiles (ws::ShapePair176: 88 B rows per
// CTA, m64n176k16 wgmmas, the staged epilogue for bf16 and fp32 output; docs/gemm.md, stop 54). A file of its own so
// it compiles in parallel with the other shapes. NVFP4_PAIR176_CONV_ALL=1 (read at each launch; an A/B switch) runs
// the variant whose converter warpgroup converts all 88 B rows.
#include <cstdlib>

#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_pair176(const LaunchArgs& a, cudaStream_t s) {
  const char* conv_all = std::getenv("NVFP4_PAIR176_CONV_ALL");
  if (conv_all != nullptr && conv_all[0] == '1') {
    if (a.out_f32) ws::launch<ws::ShapePair176ConvAll, true>(a, s); else ws::launch<ws::ShapePair176ConvAll, false>(a, s);
  } else if (a.out_f32) {
    ws::launch<ws::ShapePair176, true>(a, s);
  } else {
    ws::launch<ws::ShapePair176, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
