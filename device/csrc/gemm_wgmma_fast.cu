// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 (staged epilogue) or fp32 output, and the
// dispatch to the 2-CTA cluster shape (gemm_wgmma_pair.cu). Split from the exact mode so they compile in parallel.
#include <cstdlib>

#include "gemm_tma_host.h"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  if (a.tile_m == ws::ShapePair::kTileM) {
    launch_wgmma_pair(a, s);
  } else if (a.tile_m == ws::ShapeSkinny::BM) {
    if (a.out_f32) ws::launch<ws::ShapeSkinny, true>(a, s); else ws::launch<ws::ShapeSkinnyBf16, false>(a, s);
  } else {
    const char* variant = std::getenv("NVFP4_WS_VARIANT");
    const int v = variant ? std::atoi(variant) : 0;
    if (a.out_f32 && v == 1) ws::launch<ws::ShapeLargeV1, true>(a, s);
    else if (a.out_f32 && v == 2) ws::launch<ws::ShapeLargeV2, true>(a, s);
    else if (a.out_f32 && v == 3) ws::launch<ws::ShapeLargeV3, true>(a, s);
    else if (a.out_f32 && v == 4) {
      // the TMA-store epilogue where it applies (wgrad, no C read back, no bias, 16-byte aligned rows), else the
      // same kernel's whole-line epilogue
      CUtensorMap map{};
      LaunchArgs b = a;
      const bool ok = a.kind == kWgrad && !(a.accumulate & 1) && !a.has_bias && a.out != nullptr &&
                      reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.ldd * 4) % 16 == 0 &&
                      tma_host::encode_3d(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.out, a.out_cols, a.out_rows, a.E,
                                          a.ldd * 4, a.out_rows * a.ldd * 4, 32, 16, CU_TENSOR_MAP_SWIZZLE_128B);
      if (ok) b.accumulate |= 4;
      ws::launch<ws::ShapeLargeV4, true>(b, s, map);
    }
    else if (a.out_f32) ws::launch<ws::ShapeLarge, true>(a, s); else ws::launch<ws::ShapeLargeBf16, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
