// exact_hybrid's kernel (SPEC 12.2 bit for bit): gemm/exact_copies.cuh's kernel with a kConvB shape. Only A (the
// token operand of fprop / dgrad) is decoded beforehand into an fp16 copy, which TMA loads into the stages; B (the
// weights) stays packed in global memory and the loader warpgroup dequantizes each K step's raw B tile into the
// stage's fp16 B tile. The MMA warps only issue the wgmmas, the partial adds and the ring bookkeeping
// (no A decode, no B share), and the scratch is the A copy alone (4 bytes per packed byte of A, none for B).
// Its per-group tensor maps (exact_copies::HybridTma) are built on the device (gmap::launch_group_maps): the group
// sizes live there.
#include "gemm/copies.h"
#include "gemm/exact_copies.cuh"
#include "gemm/group_maps.cuh"
#include "common/tensor_map.h"

namespace nvfp4_gemm {

static_assert(exact_copies::HybridF32::BM == fused::ExactFusedF32::BM && exact_copies::HybridF32::BN == fused::ExactFusedF32::BN &&
                  exact_copies::HybridBf16::BM == fused::ExactFusedF32::BM && exact_copies::HybridBf16::BN == fused::ExactFusedF32::BN,
              "exact kernels share one tile");

namespace {

template <class S, bool OUT_F32>
void launch_shape(const LaunchArgs& a, const HybridTemplates& t, void* group_maps, cudaStream_t s) {
  auto* maps = static_cast<CUtensorMap*>(group_maps);
  // the group's three maps (exact_copies::HybridTma): A's fp16 copy, B's packed plane, B's scale tiles
  gmap::MapSet<exact_copies::kHybridMaps> set{};
  set.templates[0] = t.f16;
  set.templates[1] = t.data;
  set.templates[2] = t.scale;
  set.what[0] = gmap::MapOf::kAF16;
  set.what[1] = gmap::MapOf::kBPacked;
  set.what[2] = gmap::MapOf::kBScales;
  gmap::launch_group_maps(a.probs, a.E, set, maps, s);
  launch_persistent<exact_copies::exact_copies_kernel<S, OUT_F32, true>, S::kThreads, S::kSmem>(
      a, s, static_cast<const CUtensorMap*>(maps), CUtensorMap{});  // (no TMA-store epilogue: fprop / dgrad only)
}

}  // namespace

bool hybrid_templates(const CopiesArgs& d, HybridTemplates* t) {
  if (d.a_f16 == nullptr || d.group_maps == nullptr || reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(d.group_maps) % 128 != 0)
    return false;
  // placeholders (every group replaces base, dims and pitch); the boxes, element types and swizzles stay
  return nvfp4::encode_2d(&t->f16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 64, 128, 128, 64, 128,
                             CU_TENSOR_MAP_SWIZZLE_128B) &&
         nvfp4::encode_2d(&t->data, CU_TENSOR_MAP_DATA_TYPE_UINT8, d.group_maps, 32, 128, 32, 32, 128,
                             CU_TENSOR_MAP_SWIZZLE_NONE) &&
         nvfp4::encode_2d(&t->scale, CU_TENSOR_MAP_DATA_TYPE_UINT8, d.group_maps, 128, 4, 128, 128, 4,
                             CU_TENSOR_MAP_SWIZZLE_NONE);
}

void launch_exact_hybrid(const LaunchArgs& a, const CopiesArgs& d, const HybridTemplates& t, cudaStream_t s) {
  if (a.out_f32)
    launch_shape<exact_copies::HybridF32, true>(a, t, d.group_maps, s);
  else
    launch_shape<exact_copies::HybridBf16, false>(a, t, d.group_maps, s);
}

}  // namespace nvfp4_gemm
