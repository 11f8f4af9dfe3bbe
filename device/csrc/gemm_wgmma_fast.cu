// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 (staged epilogue) or fp32 output, and the
// dispatch to the 2-CTA cluster shape (gemm_wgmma_pair.cu). Split from the exact mode so they compile in parallel.
// wgrad's fp32 output leaves the 128 x 256 kernel through TMA stores (a tensor map encoded here per launch).
#include "gemm_tma_host.h"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == ws::ShapePair::kTileM) {
    launch_wgmma_pair(a, s);
  } else if (a.tile_m == ws::ShapeSkinny::BM) {
    if (a.out_f32) ws::launch<ws::ShapeSkinny, true>(a, s); else ws::launch<ws::ShapeSkinnyBf16, false>(a, s);
  } else if (a.out_f32) {
    CUtensorMap map{};
    // (the converters walk the loads' steps instead of a second cursor: E64 wgrad +3-4%, docs/gemm.md stop 56)
    ws::launch<ws::ShapeLarge, true, /*CONV_SEEKS=*/false>(tma_host::with_wgrad_out_map(a, &map), s, map);
  } else {
    ws::launch<ws::ShapeLargeBf16, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
