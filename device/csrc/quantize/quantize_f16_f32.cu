// The amax and quantize passes of __half and float input: the general kernels (general.cuh) only, no RHT (it needs
// bf16, SPEC 7).
#include <cuda_fp16.h>

#include "quantize/general.cuh"
#include "quantize/launch.h"

namespace nvfp4 {
namespace {

template <typename T>
void launch_amax_general(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * amax_k_tiles<T>(a.K);
  if (grid == 0) return;
  if (a.nan_propagating) amax_kernel<T, false, true><<<(unsigned)grid, 128, 0, s>>>(a);  // torchao rules
  else amax_kernel<T, false><<<(unsigned)grid, 128, 0, s>>>(a);
}

template <typename T>
void launch_quantize_general(const QuantArgs& a, int64_t row_tiles, cudaStream_t s) {
  const int64_t grid = row_tiles * quant_k_tiles<T>(a.K);
  if (grid == 0) return;
  if (is_torchao_rule(a.rule)) quantize_kernel<T, false, true><<<(unsigned)grid, 256, 0, s>>>(a);
  else quantize_kernel<T, false><<<(unsigned)grid, 256, 0, s>>>(a);
}

}  // namespace

void launch_amax_f16(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s) {
  launch_amax_general<__half>(a, row_tiles, s);
}
void launch_amax_f32(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s) {
  launch_amax_general<float>(a, row_tiles, s);
}
void launch_quantize_f16(const QuantArgs& a, int64_t row_tiles, cudaStream_t s) {
  launch_quantize_general<__half>(a, row_tiles, s);
}
void launch_quantize_f32(const QuantArgs& a, int64_t row_tiles, cudaStream_t s) {
  launch_quantize_general<float>(a, row_tiles, s);
}

}  // namespace nvfp4
