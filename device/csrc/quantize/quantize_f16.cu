// Instantiations of the amax and quantize kernels for __half input (no RHT: it needs bf16, SPEC 7).
#include "quantize/general.cuh"
#include "quantize/launch.h"

namespace nvfp4 {

void launch_amax_f16(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * amax_k_tiles<__half>(a.K);
  if (grid == 0) return;
  if (a.nan_propagating) amax_kernel<__half, false, true><<<(unsigned)grid, 128, 0, s>>>(a);  // torchao rules
  else amax_kernel<__half, false><<<(unsigned)grid, 128, 0, s>>>(a);
}

void launch_quantize_f16(const QuantArgs& a, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * quant_k_tiles<__half>(a.K);
  if (grid == 0) return;
  if (is_torchao_rule(a.rule)) quantize_kernel<__half, false, true><<<(unsigned)grid, 256, 0, s>>>(a);
  else quantize_kernel<__half, false><<<(unsigned)grid, 256, 0, s>>>(a);
}

}  // namespace nvfp4
