// Instantiations of the amax and quantize kernels for __nv_bfloat16 input (the only dtype with RHT, SPEC 7).
#include "nvfp4_kernels.cuh"
#include "nvfp4_launch.h"

namespace nvfp4 {

void launch_amax_bf16(const AmaxArgs& a, bool rht, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * amax_k_tiles<__nv_bfloat16>(a.K);
  if (grid == 0) return;
  if (rht) amax_kernel<__nv_bfloat16, true><<<(unsigned)grid, 128, 0, s>>>(a);
  else amax_kernel<__nv_bfloat16, false><<<(unsigned)grid, 128, 0, s>>>(a);
}

void launch_quantize_bf16(const QuantArgs& a, bool rht, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * quant_k_tiles<__nv_bfloat16>(a.K);
  if (grid == 0) return;
  if (rht) quantize_kernel<__nv_bfloat16, true><<<(unsigned)grid, 256, 0, s>>>(a);
  else quantize_kernel<__nv_bfloat16, false><<<(unsigned)grid, 256, 0, s>>>(a);
}

}  // namespace nvfp4
