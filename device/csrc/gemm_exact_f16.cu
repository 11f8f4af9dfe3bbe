// Instantiations of the exact-mode kernel over fp16 operand copies (gemm_exact_f16.cuh; SPEC 12.2 bit for bit):
// 128 x 128 tiles, fp32 (whole-line epilogue) or bf16 (staged epilogue) output.
#include "gemm_exact_f16.cuh"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's exact tile
static_assert(xf16::ShapeF32::BM == ws::ShapeExactWs::BM && xf16::ShapeF32::BN == ws::ShapeExactWs::BN &&
                  xf16::ShapeBf16::BM == ws::ShapeExactWs::BM && xf16::ShapeBf16::BN == ws::ShapeExactWs::BN,
              "exact kernels share one tile");

void launch_exact_f16(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) {
    using S = xf16::ShapeF32;
    wg::launch_persistent<xf16::exact_f16_kernel<S, true>, S::kThreads, S::kSmem>(a, s);
  } else {
    using S = xf16::ShapeBf16;
    wg::launch_persistent<xf16::exact_f16_kernel<S, false>, S::kThreads, S::kSmem>(a, s);
  }
}

}  // namespace nvfp4_gemm
