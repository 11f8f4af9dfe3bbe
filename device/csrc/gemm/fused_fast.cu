// Fast-mode instantiations of the fused kernel (fused.cuh; SPEC 12.4 / 12.6): fused_64x256 and fused_128x256, bf16
// or fp32 output. A file of its own so that it compiles in parallel with the other shapes. wgrad's fp32 output leaves
// fused_128x256 through TMA stores and bf16 output both algorithms through TMA-store boxes when the plan's
// epilogue is "tma_store" (the output's tensor map encoded here per launch).
#include "gemm/fused.cuh"
#include "gemm/out_maps.h"

namespace nvfp4_gemm {

bool launch_fused_fast(const LaunchArgs& a, cudaStream_t s) {
  const bool rows64 = a.algorithm == kFused64x256;
  if (!a.out_f32)
    return rows64 ? fused::launch_bf16<fused::Fused64x256Bf16, fused::Fused64x256Bf16Tma>(a, s)
                  : fused::launch_bf16<fused::Fused128x256Bf16, fused::Fused128x256Bf16Tma>(a, s);
  if (rows64) {
    if (a.epilogue != kEpilogueStaged) return false;
    fused::launch<fused::Fused64x256F32, true>(a, s);
    return true;
  }
  // (fused_128x256's fp32 converters walk the loads' steps instead of a second cursor: E64 wgrad +3-4%)
  CUtensorMap map{};
  LaunchArgs b = a;
  if (a.epilogue == kEpilogueTmaStore && !encode_wgrad_out_map(&b, &map)) return false;
  fused::launch<fused::Fused128x256F32, true, /*CONV_SEEKS=*/false>(b, s, map);
  return true;
}

}  // namespace nvfp4_gemm
