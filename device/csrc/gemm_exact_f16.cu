// Instantiations of the exact-mode kernel over fp16 operand copies (gemm_exact_f16.cuh; SPEC 12.2 bit for bit):
// 128 x 128 tiles, fp32 (whole-line epilogue) or bf16 (staged epilogue) output, the TMA loader or the cp.async one,
// and the TMA loader's tensor maps.
#include "gemm_dequant.h"
#include "gemm_exact_f16.cuh"
#include "gemm_tma_host.h"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's exact tile
static_assert(xf16::ShapeF32::BM == ws::ShapeExactWs::BM && xf16::ShapeF32::BN == ws::ShapeExactWs::BN &&
                  xf16::ShapeBf16::BM == ws::ShapeExactWs::BM && xf16::ShapeBf16::BN == ws::ShapeExactWs::BN,
              "exact kernels share one tile");

namespace {

// The TMA loader's maps, when A is a rowwise plane (fprop, dgrad: its copy's row pitch is 2 x the contraction bytes for
// every group) and B is rowwise with the same pitch or columnwise (dgrad's weights: groups of one size, so the same
// pitch; a group that is not on a whole row falls back inside the kernel, see TmaTile), both copies are 16-byte aligned
// and their rows fit the map's int32 coordinates; false (the cp.async loader runs) otherwise, e.g. for wgrad (columnwise
// A: a pitch per group), or when NVFP4_XF16_TMA=0.
bool exact_f16_maps(const DequantGemmArgs& d, xf16::XF16Maps* m) {
  const long long half_k = d.a.pitch_const;  // contraction / 2 packed bytes per row
  if (!tma_host::tma_enabled("NVFP4_XF16_TMA") || half_k <= 0 || (d.b.pitch_const != 0 && d.b.pitch_const != half_k) ||
      d.a_f16 == nullptr || d.b_f16 == nullptr || reinterpret_cast<uintptr_t>(d.a_f16) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(d.b_f16) % 16 != 0)
    return false;
  const long long row_bytes = 4 * half_k;  // fp16 copy: 2 bytes per element, 2 elements per packed byte
  const long long a_rows = d.a.cap_bytes / half_k, b_rows = d.b.cap_bytes / half_k;
  if (a_rows < 1 || b_rows < 1 || a_rows >= (1LL << 31) || b_rows >= (1LL << 31)) return false;
  m->a_base = static_cast<const uint8_t*>(d.a_f16);
  m->b_base = static_cast<const uint8_t*>(d.b_f16);
  m->row_bytes = row_bytes;
  return tma_host::encode_2d(&m->a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.a_f16, 2 * half_k, a_rows, row_bytes, 64, 128,
                             CU_TENSOR_MAP_SWIZZLE_128B) &&
         tma_host::encode_2d(&m->b, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.b_f16, 2 * half_k, b_rows, row_bytes, 64, 128,
                             CU_TENSOR_MAP_SWIZZLE_128B);
}

template <class S, bool OUT_F32>
void launch_shape(const LaunchArgs& a, const DequantGemmArgs& d, cudaStream_t s) {
  xf16::XF16Maps m{};
  if (exact_f16_maps(d, &m))
    wg::launch_persistent<xf16::exact_f16_kernel<S, OUT_F32, true>, S::kThreads, S::kSmem>(a, s, m);
  else
    wg::launch_persistent<xf16::exact_f16_kernel<S, OUT_F32, false>, S::kThreads, S::kSmem>(a, s, m);
}

}  // namespace

void launch_exact_f16(const LaunchArgs& a, const DequantGemmArgs& d, cudaStream_t s) {
  if (a.out_f32)
    launch_shape<xf16::ShapeF32, true>(a, d, s);
  else
    launch_shape<xf16::ShapeBf16, false>(a, d, s);
}

}  // namespace nvfp4_gemm
