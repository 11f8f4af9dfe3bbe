// Instantiations of the exact-mode kernel over fp16 operand copies (gemm_exact_f16.cuh; SPEC 12.2 bit for bit):
// 128 x 128 tiles, fp32 (whole-line epilogue; wgrad's output by TMA stores through a map encoded per launch) or bf16
// (staged epilogue) output, the TMA loader or the cp.async one; and the TMA loader's per-group tensor maps, built on
// the device (the group sizes live there).
#include "gemm/copies.h"
#include "gemm/exact_copies.cuh"
#include "gemm/group_maps.cuh"
#include "common/tensor_map.h"
#include "gemm/out_maps.h"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's exact tile
static_assert(exact_copies::ShapeF32::BM == fused::ExactFusedF32::BM && exact_copies::ShapeF32::BN == fused::ExactFusedF32::BN &&
                  exact_copies::ShapeBf16::BM == fused::ExactFusedF32::BM && exact_copies::ShapeBf16::BN == fused::ExactFusedF32::BN,
              "exact kernels share one tile");

namespace {

// Group g's two tensor maps (gemm_group_maps.cuh): the host-encoded template (fp16, box {64, 128},
// 128-byte swizzle) with the group's base, {K, rows} and row pitch 2 K bytes put in by tensormap.replace in shared
// memory, then copied to maps[2 g + i] with the release that the loader's acquire pairs with. One warp per group;
// groups without a K step or without rows are skipped (no tile of theirs loads anything).
__global__ void exact_maps_kernel(const Prob* __restrict__ probs, int E, const __grid_constant__ CUtensorMap tmpl,
                                  CUtensorMap* __restrict__ maps) {
  __shared__ alignas(128) CUtensorMap staged[gmap::kMapWarps][2];
  pdl_wait_then_trigger();  // chained launch (gemm_pdl.cuh): the previous kernel's outputs are visible from here on
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int g;
  Prob p;
  if (!gmap::map_group(probs, E, &g, &p)) return;  // (warp-uniform)
  if (lane < 2)  // lane 0: A (rows M), lane 1: B (rows N); row pitch 2 K bytes
    gmap::stage_group_map(&staged[warp][lane], tmpl, lane == 0 ? p.a : p.b, static_cast<uint32_t>(p.K),
                          static_cast<uint32_t>(lane == 0 ? p.M : p.N), 2ull * static_cast<uint64_t>(p.K));
  __syncwarp();
  gmap::publish_group_maps<2>(staged[warp], maps + 2 * g);
}

// The template map of the TMA loader: both copies and the map scratch exist and are aligned (every group's base in a
// copy is then 16-byte aligned too: K % 16 == 0 for rowwise planes, and columnwise groups start at multiples of 8
// packed bytes), and the driver encodes it.
bool exact_template(const CopiesArgs& d, CUtensorMap* tmpl) {
  if (d.a_f16 == nullptr || d.b_f16 == nullptr || d.group_maps == nullptr ||
      reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 || reinterpret_cast<uintptr_t>(d.b_f16) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(d.group_maps) % 128 != 0)
    return false;
  return nvfp4::encode_2d(tmpl, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 64, 128, 128, 64, 128,
                          CU_TENSOR_MAP_SWIZZLE_128B);
}

// The plan's loader: TMA (per-group maps from exact_template's template; false, launching nothing, when it cannot be
// encoded) or cp.async. out_map: wgrad's output map where the host encoded it (bit 2 of a.accumulate; S::kTmaEpi).
template <class S, bool OUT_F32>
bool launch_shape(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s, const CUtensorMap& out_map = {}) {
  auto* maps = static_cast<CUtensorMap*>(d.group_maps);
  if (a.loader == kLoaderTma) {
    CUtensorMap tmpl{};
    if (!exact_template(d, &tmpl)) return false;
    launch_chained(exact_maps_kernel, dim3(gmap::map_grid(a.E)), gmap::kMapThreads, 0, s, a.probs, a.E, tmpl, maps);
    launch_persistent<exact_copies::exact_copies_kernel<S, OUT_F32, true>, S::kThreads, S::kSmem>(a, s, maps, out_map);
  } else {
    launch_persistent<exact_copies::exact_copies_kernel<S, OUT_F32, false>, S::kThreads, S::kSmem>(a, s, maps, out_map);
  }
  return true;
}

}  // namespace

bool launch_exact_copies(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  if (a.epilogue == kEpilogueStaged)
    return a.out_f32 ? launch_shape<exact_copies::ShapeF32, true>(a, d, s) : launch_shape<exact_copies::ShapeBf16, false>(a, d, s);
  // wgrad's fp32 output by TMA stores (ShapeF32Tma)
  CUtensorMap out_map{};
  LaunchArgs t = a;
  if (a.epilogue != kEpilogueTmaStore || !encode_wgrad_out_map(&t, &out_map)) return false;
  return launch_shape<exact_copies::ShapeF32Tma, true>(t, d, s, out_map);
}

}  // namespace nvfp4_gemm
