// Fast-mode instantiations of the grouped GEMM for large groups: the warp-specialised kernel of gemm_wgmma_ws.cuh
// in 2-CTA clusters (256 x 256 cluster tiles; each CTA dequantizes half of the B tile and bulk-copies it into the
// other CTA's shared memory), bf16 or fp32 output. A file of its own so it compiles in parallel with the other shapes.
#include "gemm/tma_host.h"
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

void launch_wgmma_pair(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) {
    ws::launch<ws::ShapePair, true>(a, s);
    return;
  }
  ws::launch_bf16<ws::ShapePairBf16, ws::ShapePairBf16Tma>(a, s);  // bf16: TMA-store boxes where the row map applies
}

}  // namespace nvfp4_gemm
