// Instantiations of the exact-mode kernel over fp16 operand copies (gemm/exact_copies.cuh; SPEC 12.2 bit for bit):
// 128 x 128 tiles, fp32 (whole-line epilogue; wgrad's output by TMA stores through a map encoded per launch) or bf16
// (staged epilogue) output, the TMA loader or the cp.async one; and the TMA loader's per-group tensor maps, built on
// the device (the group sizes live there).
#include "gemm/copies.h"
#include "gemm/exact_copies.cuh"
#include "gemm/group_maps.cuh"
#include "common/tensor_map.h"
#include "gemm/out_maps.h"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for tile_of's exact tile
static_assert(exact_copies::ShapeF32::BM == fused::ExactFusedF32::BM && exact_copies::ShapeF32::BN == fused::ExactFusedF32::BN &&
                  exact_copies::ShapeBf16::BM == fused::ExactFusedF32::BM && exact_copies::ShapeBf16::BN == fused::ExactFusedF32::BN,
              "exact kernels share one tile");

namespace {

// The template map of the TMA loader: both copies and the map scratch exist and are aligned (every group's base in a
// copy is then 16-byte aligned too: K % 16 == 0 for rowwise planes, and columnwise groups start at multiples of 8
// packed bytes), and the driver encodes it.
bool copies_template(const CopiesArgs& d, CUtensorMap* tmpl) {
  if (d.a_f16 == nullptr || d.b_f16 == nullptr || d.group_maps == nullptr ||
      reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 || reinterpret_cast<uintptr_t>(d.b_f16) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(d.group_maps) % 128 != 0)
    return false;
  return nvfp4::encode_2d(tmpl, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 64, 128, 128, 64, 128,
                          CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

bool launch_copies_maps(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  // one map of each fp16 copy per group (the same template: fp16, box {64, 128}, 128-byte swizzle)
  gmap::MapSet<2> set{};
  if (!copies_template(d, &set.templates[0])) return false;
  set.templates[1] = set.templates[0];
  set.what[0] = gmap::MapOf::kAF16;
  set.what[1] = gmap::MapOf::kBF16;
  gmap::launch_group_maps(a.probs, a.E, set, static_cast<CUtensorMap*>(d.group_maps), s);
  return true;
}

namespace {

// The plan's loader: TMA (per-group maps, launch_copies_maps; false, launching nothing, when they cannot be encoded)
// or cp.async. out_map: wgrad's output map where the host encoded it (bit 2 of a.accumulate; S::kTmaEpi).
template <class S, bool OUT_F32>
bool launch_shape(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s, const CUtensorMap& out_map = {}) {
  auto* maps = static_cast<CUtensorMap*>(d.group_maps);
  if (a.loader == kLoaderTma) {
    if (!launch_copies_maps(a, d, s)) return false;
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
