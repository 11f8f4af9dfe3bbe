// The launcher and instantiations of the 4over6 quantizer (SPEC 5.6, quantize/four_over_six.cuh): one kernel per error
// measure (MAE / MSE), domain (input / fast-math product) and block shape (1x16 / 16x16), all eight on bf16 input.
#include "quantize/four_over_six.cuh"
#include "quantize/launch.h"
#include "common/pdl.cuh"

namespace nvfp4 {

template <bool kMse, bool kFastMath>
static void launch_variant(const QuantArgs& a, int64_t grid, cudaStream_t s, bool after_amax) {
  // one instantiation per block shape: each compiles to its own path only (the 16x16 tree sums or the 1x16 choice)
  auto kernel = a.block2d ? quantize_4over6_kernel<kMse, kFastMath, true>
                          : quantize_4over6_kernel<kMse, kFastMath, false>;
  // after_amax: the previous launch wrote the amaxes (the amax pass, or init_amax_kernel with supplied amaxes); the
  // kernel loads its tile before it waits for that launch
  if (after_amax) launch_chained(kernel, dim3((unsigned)grid), 256, 0, s, a);
  else kernel<<<(unsigned)grid, 256, 0, s>>>(a);
}

void launch_quantize_4over6_bf16(const QuantArgs& a, int error, bool fast_math, int64_t row_tiles, cudaStream_t s,
                                 bool after_amax) {
  const int64_t grid = row_tiles * quant_k_tiles<__nv_bfloat16>(a.K);
  if (grid == 0) return;
  const bool mse = error == kFo6Mse;
  if (mse && fast_math) launch_variant<true, true>(a, grid, s, after_amax);
  else if (mse) launch_variant<true, false>(a, grid, s, after_amax);
  else if (fast_math) launch_variant<false, true>(a, grid, s, after_amax);
  else launch_variant<false, false>(a, grid, s, after_amax);
}

}  // namespace nvfp4
