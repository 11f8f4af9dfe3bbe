// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 or fp32 output, and the dispatch to the 2-CTA
// cluster shape (gemm_wgmma_pair.cu). Split from the exact mode so they compile in parallel. wgrad's fp32 output leaves
// the 128 x 256 kernel through TMA stores, and bf16 output both kernels through TMA-store boxes (tensor maps encoded
// here per launch; the staged epilogue where a map does not apply).
#include "gemm/tma_host.h"
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == ws::ShapePair::kTileM) {
    launch_wgmma_pair(a, s);
  } else if (a.out_f32) {
    if (a.tile_m == ws::ShapeSkinny::BM) {
      ws::launch<ws::ShapeSkinny, true>(a, s);
    } else {
      CUtensorMap map{};
      // (the converters walk the loads' steps instead of a second cursor: E64 wgrad +3-4%, docs/gemm.md stop 56)
      ws::launch<ws::ShapeLarge, true, /*CONV_SEEKS=*/false>(tma_host::with_wgrad_out_map(a, &map), s, map);
    }
  } else if (a.tile_m == ws::ShapeSkinny::BM) {  // bf16: TMA-store boxes where the row map applies (ws::launch_bf16)
    ws::launch_bf16<ws::ShapeSkinnyBf16, ws::ShapeSkinnyBf16Tma>(a, s);
  } else {
    ws::launch_bf16<ws::ShapeLargeBf16, ws::ShapeLargeBf16Tma>(a, s);
  }
}

}  // namespace nvfp4_gemm
