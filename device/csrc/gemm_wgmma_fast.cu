// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 (staged epilogue) or fp32 output, and the
// dispatch to the 2-CTA cluster shape (gemm_wgmma_pair.cu). Split from the exact mode so they compile in parallel.
#include <cstdlib>

#include "gemm_tma_host.h"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

namespace {

// The output's tensor map for the TMA-store epilogue (ws::Shape::kTmaEpi): wgrad's [E, out_rows, out_cols] with row
// pitch ldd, fp32 or bf16, boxes of 128 bytes x 16 rows, 128-byte swizzle. Only where store_tile_tma may write the
// output: wgrad (every group has the same [out_rows, out_cols] block at g * out_rows * ldd), no C read back, no bias,
// 16-byte aligned base and row pitch. Returns the launch arguments with bit 2 of `accumulate` set when it encoded
// the map (the kernels take their other epilogues otherwise).
LaunchArgs with_out_map(const LaunchArgs& a, CUtensorMap* map) {
  LaunchArgs b = a;
  const long long size = a.out_f32 ? 4 : 2;
  const bool applies = a.kind == kWgrad && !(a.accumulate & 1) && !a.has_bias && a.out != nullptr &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.ldd * size) % 16 == 0;
  if (applies && tma_host::encode_3d(map, a.out_f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                     a.out, a.out_cols, a.out_rows, a.E, a.ldd * size, a.out_rows * a.ldd * size,
                                     static_cast<unsigned>(128 / size), 16, CU_TENSOR_MAP_SWIZZLE_128B))
    b.accumulate |= 4;
  return b;
}

}  // namespace

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == ws::ShapePair::kTileM) {
    launch_wgmma_pair(a, s);
  } else if (a.tile_m == ws::ShapeSkinny::BM) {
    if (a.out_f32) ws::launch<ws::ShapeSkinny, true>(a, s); else ws::launch<ws::ShapeSkinnyBf16, false>(a, s);
  } else {
    CUtensorMap map{};
    const LaunchArgs b = with_out_map(a, &map);
    const char* variant = std::getenv("NVFP4_WS_VARIANT");
    const int v = variant ? std::atoi(variant) : 0;
    if (a.out_f32 && v == 5) ws::launch<ws::ShapeLargeV5, true>(b, s, map);
    else if (a.out_f32 && v == 8) ws::launch<ws::ShapeLargeV8, true>(a, s);
    else if (a.out_f32 && v == 9) ws::launch<ws::ShapeLargeV9, true>(b, s, map);
    else if (a.out_f32 && v == 11) ws::launch<ws::ShapeLargeV11, true>(b, s, map);
    else if (!a.out_f32 && v == 12) ws::launch<ws::ShapeLargeBf16V12, false>(b, s, map);
    else if (!a.out_f32 && v == 6) ws::launch<ws::ShapeLargeBf16V6, false>(b, s, map);
    else if (!a.out_f32 && v == 7) ws::launch<ws::ShapeLargeBf16V7, false>(a, s);
    else if (a.out_f32) ws::launch<ws::ShapeLarge, true>(b, s, map);
    else ws::launch<ws::ShapeLargeBf16, false>(b, s, map);
  }
}

}  // namespace nvfp4_gemm
