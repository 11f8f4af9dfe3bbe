// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 (staged epilogue) or fp32 output, and the
// dispatch to the 2-CTA cluster shape (gemm_wgmma_pair.cu). Split from the exact mode so they compile in parallel.
// wgrad's fp32 output leaves the 128 x 256 kernel through TMA stores (a tensor map encoded here per launch).
#include "gemm_tma_host.h"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

namespace {

// The output's tensor map for the TMA-store epilogue of the 128 x 256 fp32 kernel (ws::Shape::kTmaEpi): wgrad's
// [E, out_rows, out_cols] fp32 with row pitch ldd, boxes of 32 columns x 16 rows, 128-byte swizzle. Only where
// store_tile_tma may write the output: wgrad (every group's block [out_rows, out_cols] at g * out_rows * ldd), no C
// read back, no bias, 16-byte aligned base and row pitch. Returns the launch arguments with bit 2 of `accumulate` set
// when it encoded the map (the kernel takes its whole-line or direct epilogue otherwise).
LaunchArgs with_out_map(const LaunchArgs& a, CUtensorMap* map) {
  LaunchArgs b = a;
  const bool applies = a.out_f32 && a.kind == kWgrad && !(a.accumulate & 1) && !a.has_bias && a.out != nullptr &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.ldd * 4) % 16 == 0;
  if (applies && tma_host::encode_3d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.out, a.out_cols, a.out_rows, a.E,
                                     a.ldd * 4, a.out_rows * a.ldd * 4, 32, 16, CU_TENSOR_MAP_SWIZZLE_128B))
    b.accumulate |= 4;
  return b;
}

}  // namespace

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == ws::ShapePair::kTileM) {
    launch_wgmma_pair(a, s);
  } else if (a.tile_m == ws::ShapeSkinny::BM) {
    if (a.out_f32) ws::launch<ws::ShapeSkinny, true>(a, s); else ws::launch<ws::ShapeSkinnyBf16, false>(a, s);
  } else if (a.out_f32) {
    CUtensorMap map{};
    // (the converters walk the loads' steps instead of a second cursor: E64 wgrad +3-4%, docs/gemm.md stop 56)
    ws::launch<ws::ShapeLarge, true, /*CONV_SEEKS=*/false>(with_out_map(a, &map), s, map);
  } else {
    ws::launch<ws::ShapeLargeBf16, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
