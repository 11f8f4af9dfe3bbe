// The hybrid exact kernel (docs/gemm.md, stop 46; SPEC 12.2 bit for bit): gemm_exact_f16.cuh's kernel with a kConvB
// shape. Only A (the token operand of fprop / dgrad) is decoded beforehand into an fp16 copy, which TMA loads into
// the stages; B (the weights) stays packed in global memory and the loader warpgroup dequantizes each K step's raw B
// tile into the stage's fp16 B tile. The MMA warps only issue the wgmmas, the partial adds and the ring bookkeeping
// (no A decode, no B share), and the scratch is the A copy alone (4 bytes per packed byte of A, none for B).
// Its per-group tensor maps (exact_copies::HybridTma) are built on the device here: the group sizes live there.
#include "gemm/copies.h"
#include "gemm/exact_copies.cuh"
#include "gemm/group_maps.cuh"
#include "common/tensor_map.h"

namespace nvfp4_gemm {

static_assert(exact_copies::HybridF32::BM == fused::ExactFusedF32::BM && exact_copies::HybridF32::BN == fused::ExactFusedF32::BN &&
                  exact_copies::HybridBf16::BM == fused::ExactFusedF32::BM && exact_copies::HybridBf16::BN == fused::ExactFusedF32::BN,
              "exact kernels share one tile");

namespace {

// Group g's three maps (exact_copies::HybridTma): lane 0 A's fp16 copy {K, M}, pitch 2 K bytes (the f16 template); lane 1 the
// packed B plane {K / 2, N}, pitch K / 2 (the data template); lane 2 B's scale tiles {128, 4 KT roundup(N, 128) / 128},
// pitch 128 (the scale template; SPEC 8.2: KT = ceil(K / 64) tiles of 512 bytes per 128 rows). One warp per group;
// groups without a K step or without rows are skipped (no tile of theirs loads anything).
__global__ void hybrid_maps_kernel(const Prob* __restrict__ probs, int E, const __grid_constant__ CUtensorMap f16_tmpl,
                                   const __grid_constant__ CUtensorMap data_tmpl,
                                   const __grid_constant__ CUtensorMap scale_tmpl, CUtensorMap* __restrict__ maps) {
  __shared__ alignas(128) CUtensorMap staged[gmap::kMapWarps][exact_copies::kHybridMaps];
  pdl_wait_then_trigger();  // chained launch (gemm_pdl.cuh): the retarget kernel's Prob::a is visible from here on
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int g;
  Prob p;
  if (!gmap::map_group(probs, E, &g, &p)) return;  // (warp-uniform)
  const uint32_t K = static_cast<uint32_t>(p.K), N = static_cast<uint32_t>(p.N);
  const uint32_t kt = (K + kBK - 1) / kBK;
  if (lane == 0)
    gmap::stage_group_map(&staged[warp][0], f16_tmpl, p.a, K, static_cast<uint32_t>(p.M), 2ull * K);
  else if (lane == 1)
    gmap::stage_group_map(&staged[warp][1], data_tmpl, p.b, K / 2, N, K / 2);
  else if (lane == 2)
    gmap::stage_group_map(&staged[warp][2], scale_tmpl, p.sb, 128, 4 * kt * ((N + 127) / 128), 128);
  __syncwarp();
  gmap::publish_group_maps<exact_copies::kHybridMaps>(staged[warp], maps + exact_copies::kHybridMaps * g);
}

template <class S, bool OUT_F32>
void launch_shape(const LaunchArgs& a, const HybridTemplates& t, void* group_maps, cudaStream_t s) {
  auto* maps = static_cast<CUtensorMap*>(group_maps);
  launch_chained(hybrid_maps_kernel, dim3(gmap::map_grid(a.E)), gmap::kMapThreads, 0, s, a.probs, a.E, t.f16, t.data,
                 t.scale, maps);
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
