// Instantiations of the exact-mode kernel over fp16 operand copies (gemm_exact_f16.cuh; SPEC 12.2 bit for bit):
// 128 x 128 tiles, fp32 (whole-line epilogue) or bf16 (staged epilogue) output.
#include <cstdlib>

#include "gemm_exact_f16.cuh"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's exact tile
static_assert(xf16::ShapeF32::BM == ws::ShapeExactWs::BM && xf16::ShapeF32::BN == ws::ShapeExactWs::BN &&
                  xf16::ShapeBf16::BM == ws::ShapeExactWs::BM && xf16::ShapeBf16::BN == ws::ShapeExactWs::BN,
              "exact kernels share one tile");

template <class S, bool OUT_F32>
void launch_shape(const LaunchArgs& a, cudaStream_t s) {
  wg::launch_persistent<xf16::exact_f16_kernel<S, OUT_F32>, S::kThreads, S::kSmem>(a, s);
}

void launch_exact_f16(const LaunchArgs& a, cudaStream_t s) {
  static const bool quad = [] {  // A/B switch of stop 30 (removed once measured)
    const char* v = std::getenv("NVFP4_EXACT_QUAD");
    return v && v[0] == '1';
  }();
  if (quad) {
    if (a.out_f32) launch_shape<xf16::ShapeF32Quad, true>(a, s); else launch_shape<xf16::ShapeBf16Quad, false>(a, s);
  } else {
    if (a.out_f32) launch_shape<xf16::ShapeF32, true>(a, s); else launch_shape<xf16::ShapeBf16, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
