// Fast-mode instantiations of the grouped GEMM (SPEC 12.4 / 12.6): the warp-specialised kernel of gemm_wgmma_ws.cuh,
// tile 128 x 256 (large groups) or 64 x 256 (few rows per group), bf16 or fp32 output. Split from the exact mode so
// the two compile in parallel. NVFP4_GEMM_FAST_KERNEL=rs selects the previous (non-specialised) kernel of
// gemm_wgmma.cuh, kept for A/B timing in benchmarks/bench_grouped_gemm.py; both produce the same bits.
#include <cstdlib>
#include <cstring>

#include "gemm_wgmma.cuh"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

static_assert(ws::ShapeLarge::BM == wg::ShapeLarge::BM && ws::ShapeLarge::BN == wg::ShapeLarge::BN &&
                  ws::ShapeSkinny::BM == wg::ShapeSkinny::BM && ws::ShapeSkinny::BN == wg::ShapeSkinny::BN,
              "both fast kernels tile the output the same way (pick_tile)");

namespace {
bool use_rs_kernel() {
  static const int rs = [] {
    const char* v = std::getenv("NVFP4_GEMM_FAST_KERNEL");
    return v != nullptr && std::strcmp(v, "rs") == 0 ? 1 : 0;
  }();
  return rs != 0;
}
}  // namespace

void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s) {
  const bool skinny = a.tile_m == ws::ShapeSkinny::BM;
  if (use_rs_kernel()) {
    if (skinny) {
      if (a.out_f32) wg::launch<wg::ShapeSkinny, false, true>(a, s); else wg::launch<wg::ShapeSkinny, false, false>(a, s);
    } else {
      if (a.out_f32) wg::launch<wg::ShapeLarge, false, true>(a, s); else wg::launch<wg::ShapeLarge, false, false>(a, s);
    }
    return;
  }
  if (skinny) {
    if (a.out_f32) ws::launch<ws::ShapeSkinny, true>(a, s); else ws::launch<ws::ShapeSkinny, false>(a, s);
  } else {
    if (a.out_f32) ws::launch<ws::ShapeLarge, true>(a, s); else ws::launch<ws::ShapeLarge, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
