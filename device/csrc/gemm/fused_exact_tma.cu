// The fused exact kernel's TMA instantiations (gemm_wgmma_ws.cuh with TMA = true, ws::RawTma; SPEC 12.2 bit for bit)
// and their per-group tensor maps, built on the device (the group sizes live there). A file of their own: compiled next
// to the cp.async instantiations (gemm_wgmma_exact.cu), they changed ptxas's code for those (docs/gemm.md, stop 34).
#include "gemm/group_maps.cuh"
#include "gemm/tma_host.h"
#include "gemm/fused.cuh"

namespace nvfp4_gemm {

namespace {

// Group g's four maps (ws::RawTma): lanes 0 / 1 the packed A / B plane as {K / 2 bytes, M / N rows}, row pitch K / 2
// (data_tmpl: uint8, box {32, 128}); lanes 2 / 3 the A / B scale tiles as {128 bytes, 4 KT roundup(rows, 128) / 128
// rows} (scale_tmpl: uint8, box {128, 4}; SPEC 8.2: KT = ceil(K / 64) tiles of 512 bytes per 128 rows). One warp per
// group; groups without a K step or without rows are skipped (no tile of theirs loads anything).
__global__ void packed_maps_kernel(const Prob* __restrict__ probs, int E, const __grid_constant__ CUtensorMap data_tmpl,
                                   const __grid_constant__ CUtensorMap scale_tmpl, CUtensorMap* __restrict__ maps) {
  __shared__ alignas(128) CUtensorMap staged[gmap::kMapWarps][4];
  pdl_wait_then_trigger();  // chained launch (gemm_pdl.cuh): the previous kernel's outputs are visible from here on
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int g;
  Prob p;
  if (!gmap::map_group(probs, E, &g, &p)) return;  // (warp-uniform)
  if (lane < 4) {
    const bool is_b = (lane & 1) != 0;
    const uint32_t rows = static_cast<uint32_t>(is_b ? p.N : p.M);
    const uint32_t pitch = static_cast<uint32_t>(p.K) / 2, kt = (static_cast<uint32_t>(p.K) + wg::kBK - 1) / wg::kBK;
    if (lane < 2)
      gmap::stage_group_map(&staged[warp][lane], data_tmpl, is_b ? p.b : p.a, pitch, rows, pitch);
    else
      gmap::stage_group_map(&staged[warp][lane], scale_tmpl, is_b ? p.sb : p.sa, 128, 4 * kt * ((rows + 127) / 128),
                            128);
  }
  __syncwarp();
  gmap::publish_group_maps<4>(staged[warp], maps + 4 * g);
}

// The two templates, when the TMA loader can run: the caller gave the map scratch (LaunchArgs::exact_maps: pitches
// and planes fit), NVFP4_EXACT_TMA=1 and the driver encodes them. Their base is the scratch (any 16-byte aligned
// address; every group replaces it). The loader is opt-in (NVFP4_EXACT_TMA=1) until it has been run on a GPU: it was
// written in a session without one (docs/gemm.md, stop 34).
bool packed_templates(const LaunchArgs& a, CUtensorMap* data_tmpl, CUtensorMap* scale_tmpl) {
  if (a.E <= 0 || a.exact_maps == nullptr || reinterpret_cast<uintptr_t>(a.exact_maps) % 128 != 0 ||
      !tma_host::tma_opted_in("NVFP4_EXACT_TMA"))
    return false;
  return tma_host::encode_2d(data_tmpl, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.exact_maps, 32, 128, 32, 32, 128,
                             CU_TENSOR_MAP_SWIZZLE_NONE) &&
         tma_host::encode_2d(scale_tmpl, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.exact_maps, 128, 4, 128, 128, 4,
                             CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <class S, bool OUT_F32>
void launch_tma(const LaunchArgs& a, const CUtensorMap& data_tmpl, const CUtensorMap& scale_tmpl, cudaStream_t s) {
  static_assert(!S::kLinesEpi || OUT_F32, "the whole-line epilogue stores fp32 output");
  auto* maps = static_cast<CUtensorMap*>(a.exact_maps);
  launch_chained(packed_maps_kernel, dim3(gmap::map_grid(a.E)), gmap::kMapThreads, 0, s, a.probs, a.E, data_tmpl,
                 scale_tmpl, maps);
  wg::launch_persistent<ws::ws_gemm_kernel<S, OUT_F32, true>, S::kThreads, S::kSmem, S::kCluster>(
      a, s, static_cast<const CUtensorMap*>(maps), CUtensorMap{});
}

}  // namespace

bool launch_wgmma_exact_tma(const LaunchArgs& a, cudaStream_t s) {
  CUtensorMap data_tmpl{}, scale_tmpl{};
  if (!packed_templates(a, &data_tmpl, &scale_tmpl)) return false;
  // NVFP4_EXACT_CONV_ALL_B=1: the converter converts all of B, so the (issue-bound) MMA warpgroups convert none; the
  // same bits (SPEC 12.2: only who writes the fp16 B stage changes). Opt-in and unrun (stop 35).
  const bool all_b = tma_host::tma_opted_in("NVFP4_EXACT_CONV_ALL_B");
  if (a.out_f32) {
    if (all_b)
      launch_tma<ws::ShapeExactWsAllB, true>(a, data_tmpl, scale_tmpl, s);
    else
      launch_tma<ws::ShapeExactWs, true>(a, data_tmpl, scale_tmpl, s);
  } else {
    if (all_b)
      launch_tma<ws::ShapeExactWsAllBBf16, false>(a, data_tmpl, scale_tmpl, s);
    else
      launch_tma<ws::ShapeExactWsBf16, false>(a, data_tmpl, scale_tmpl, s);
  }
  return true;
}

}  // namespace nvfp4_gemm
