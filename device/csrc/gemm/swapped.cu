// Instantiations of the swapped fast kernel (gemm/swapped.cuh; SPEC 12.6 bit for bit): 64 x 256 tiles
// (swapped_64x256) or 256 x 128 tiles (swapped_256x128; tokens x weight rows; also wgrad over exchanged operands),
// fp32 or bf16 output, the TMA loader (contraction K % 32 == 0; wgrad: any) or the cp.async one (any K), and the host
// side of the TMA loader: its tensor maps, encoded through the runtime's driver entry point (no -lcuda).
#include "gemm/copies.h"
#include "gemm/group_maps.cuh"
#include "gemm/swapped.cuh"
#include "common/tensor_map.h"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for tile_of's tile of swapped_64x256, which is fused_64x256's
static_assert(swapped::Shape::BM == fused::Fused64x256F32::BM && swapped::Shape::BN == fused::Fused64x256F32::BN,
              "swapped_64x256 walks fused_64x256's tile list");
static_assert(swapped::ShapeTma::BM == swapped::Shape::BM && swapped::ShapeTma::BN == swapped::Shape::BN, "one tile list");
static_assert(swapped::ShapeWideTma::BM == swapped::ShapeWide::BM && swapped::ShapeWideTma::BN == swapped::ShapeWide::BN,
              "one tile list");

namespace {

using nvfp4::encode_2d;

// The TMA loader's maps for the token copy d.a_f16 (made from the rowwise token plane d.a) and the weight plane d.b,
// both with the row pitch K / 2 packed bytes, token boxes of TOK_ROWS rows (the tile's BM); false when K % 32 != 0, a
// base is not 16-byte aligned, a plane is shorter than one row (the scale plane than one tile), or the driver refuses
// a map.
template <int TOK_ROWS>
bool swap_maps(const CopiesArgs& d, swapped::SwapMaps* m) {
  const long long pitch = d.a.pitch_const;  // K / 2
  if (pitch <= 0 || pitch % 16 != 0 || reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(d.b.data) % 16 != 0)
    return false;
  const long long tok_rows = d.a.cap_bytes / pitch, w_rows = d.b.cap_bytes / pitch, sc_rows = d.b.scale_cap_bytes / 128;
  if (tok_rows < 1 || w_rows < 1 || sc_rows < 4 || tok_rows >= (1LL << 31) || w_rows >= (1LL << 31) ||
      sc_rows >= (1LL << 31) || reinterpret_cast<uintptr_t>(d.b.scales) % 16 != 0)
    return false;
  m->tok_base = static_cast<const uint8_t*>(d.a_f16);
  m->w_base = d.b.data;
  m->sc_base = d.b.scales;
  m->w_pitch = pitch;
  return encode_2d(&m->tok, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 2 * pitch, tok_rows, 4 * pitch, 64, TOK_ROWS,
                   CU_TENSOR_MAP_SWIZZLE_128B) &&
         encode_2d(&m->w, CU_TENSOR_MAP_DATA_TYPE_UINT8, d.b.data, pitch, w_rows, pitch, 32, 128,
                   CU_TENSOR_MAP_SWIZZLE_32B) &&
         encode_2d(&m->sc, CU_TENSOR_MAP_DATA_TYPE_UINT8, d.b.scales, 128, sc_rows, 128, 128, 4,
                   CU_TENSOR_MAP_SWIZZLE_NONE);
}

// wgrad's TMA maps (swapped_256x128 over exchanged operands: d.a is X's columnwise plane, whose fp16 copy d.a_f16
// holds the token rows, d.b dY's): the weights' scale map `sc` as for fprop, and one token map per group, built on the
// device into d.group_maps from a template (fp16, box {64, TOK_ROWS}, the 128-byte swizzle; each group's base, {K_g,
// M} and row pitch 2 K_g bytes put in by gmap::group_maps_kernel, launched here after the retarget kernel). False,
// launching nothing, when a buffer is misaligned, the scale plane is shorter than one tile or the driver refuses a map.
template <int TOK_ROWS>
bool wgrad_maps(const LaunchArgs& a, const CopiesArgs& d, swapped::SwapMaps* m, cudaStream_t s) {
  const long long sc_rows = d.b.scale_cap_bytes / 128;
  if (d.a_f16 == nullptr || reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 || d.group_maps == nullptr ||
      reinterpret_cast<uintptr_t>(d.group_maps) % 128 != 0 || reinterpret_cast<uintptr_t>(d.b.scales) % 16 != 0 ||
      sc_rows < 4 || sc_rows >= (1LL << 31))
    return false;
  gmap::MapSet<1> set{};
  set.what[0] = gmap::MapOf::kAF16;
  if (!encode_2d(&set.templates[0], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 64, TOK_ROWS, 128, 64, TOK_ROWS,
                 CU_TENSOR_MAP_SWIZZLE_128B) ||
      !encode_2d(&m->sc, CU_TENSOR_MAP_DATA_TYPE_UINT8, d.b.scales, 128, sc_rows, 128, 128, 4,
                 CU_TENSOR_MAP_SWIZZLE_NONE))
    return false;
  m->sc_base = d.b.scales;
  m->group_tok = static_cast<const CUtensorMap*>(d.group_maps);
  gmap::launch_group_maps(a.probs, a.E, set, static_cast<CUtensorMap*>(d.group_maps), s);
  return true;
}

// The plan's loader: TMA (swap_maps; false, launching nothing, when its maps cannot be encoded) or cp.async. dgrad's
// weights are W's columnwise plane, and after a group that disagrees with N (SPEC 12.5) the next group need not start
// on a whole row of the one map `w`: dgrad runs the TMA loader in its checked form (swapped_kernel's ROWS_CHECKED),
// which copies such a group's weight rows by cp.async, and only where WIDE (swapped_256x128; swapped_64x256's
// dgrad keeps the cp.async loader, the binding refusing TMA for it). fprop's rowwise weight groups always start on a
// whole row. wgrad (swapped_256x128 only, WIDE): the kernel's WGRAD form, its TMA loader over wgrad_maps.
template <class S, class STma, bool WIDE, bool OUT_F32>
bool launch_out(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  swapped::SwapMaps m{};
  if (a.kind == kWgrad) {
    if constexpr (WIDE) {
      if (a.loader != kLoaderTma) {
        launch_persistent<swapped::swapped_kernel<S, OUT_F32, false, false, true>, S::kThreads, S::kSmem>(a, s, m);
        return true;
      }
      if (!wgrad_maps<STma::BM>(a, d, &m, s)) return false;
      launch_persistent<swapped::swapped_kernel<STma, OUT_F32, true, true, true>, STma::kThreads, STma::kSmem>(a, s, m);
      return true;
    }
    return false;
  }
  if (a.loader != kLoaderTma) {
    launch_persistent<swapped::swapped_kernel<S, OUT_F32, false>, S::kThreads, S::kSmem>(a, s, m);
    return true;
  }
  if (!swap_maps<STma::BM>(d, &m)) return false;
  if (a.kind != kDgrad) {
    launch_persistent<swapped::swapped_kernel<STma, OUT_F32, true>, STma::kThreads, STma::kSmem>(a, s, m);
    return true;
  }
  if constexpr (WIDE) {
    launch_persistent<swapped::swapped_kernel<STma, OUT_F32, true, true>, STma::kThreads, STma::kSmem>(a, s, m);
    return true;
  }
  return false;
}

template <class S, class STma, bool WIDE>
bool launch_shape(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  return a.out_f32 ? launch_out<S, STma, WIDE, true>(a, d, s) : launch_out<S, STma, WIDE, false>(a, d, s);
}

}  // namespace

bool launch_swapped(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  if (a.algorithm == kSwapped256x128) return launch_shape<swapped::ShapeWide, swapped::ShapeWideTma, true>(a, d, s);
  return launch_shape<swapped::Shape, swapped::ShapeTma, false>(a, d, s);
}

}  // namespace nvfp4_gemm
