// Exact-mode instantiations of the grouped GEMM (SPEC 12.2 bit for bit): the warp-specialised kernel of
// gemm_wgmma_ws.cuh with exact per-block partials, tile 128 x 128, bf16 (staged epilogue) or fp32 output, its raw
// stages copied by the converters' cp.async; or, when launch_wgmma_exact_tma takes the launch
// (gemm_wgmma_exact_tma.cu), loaded by TMA through per-group tensor maps.
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

void launch_wgmma_exact(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) ws::launch<ws::ShapeExactWs, true>(a, s); else ws::launch<ws::ShapeExactWsBf16, false>(a, s);
}

}  // namespace nvfp4_gemm
