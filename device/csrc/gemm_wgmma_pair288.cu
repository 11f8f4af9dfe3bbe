// Fast-mode instantiations of the 2-CTA cluster kernel with 256 x 288 cluster tiles (ws::ShapePair288: 144 B rows per
// CTA, two m64n144k16 wgmmas per k16 step, or m64n256k16 + m64n32k16 with NVFP4_PAIR288_VARIANT=1, or the
// converter on 64 rows and the MMA threads on 80 with =2 (read at each launch; A/B switches); bf16 output through
// the staged epilogue, fp32 through the whole-line one; docs/gemm.md, stop 55).
// A file of its own so it compiles in parallel with the other shapes.
#include <cstdlib>

#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_pair288(const LaunchArgs& a, cudaStream_t s) {
  const char* v = std::getenv("NVFP4_PAIR288_VARIANT");
  if (v != nullptr && v[0] == '2') {
    if (a.out_f32) ws::launch<ws::ShapePair288Mma80F32, true>(a, s); else ws::launch<ws::ShapePair288Mma80, false>(a, s);
  } else if (v != nullptr && v[0] == '1') {
    if (a.out_f32) ws::launch<ws::ShapePair288N256F32, true>(a, s); else ws::launch<ws::ShapePair288N256, false>(a, s);
  } else if (a.out_f32) {
    ws::launch<ws::ShapePair288F32, true>(a, s);
  } else {
    ws::launch<ws::ShapePair288, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
