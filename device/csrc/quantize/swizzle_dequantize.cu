// The standalone kernels: the scale swizzle (SPEC 8.2) and the dequantize of one plane (SPEC 11).
#include "quantize/launch.h"
#include "quantize/numerics.cuh"

namespace nvfp4 {
namespace {

// SPEC 8.2: one thread per 4 output bytes (one row r, scale columns c..c+3 of a 128x4 tile).
__global__ void swizzle_kernel(const uint8_t* __restrict__ in, int64_t rows, int64_t cols, uint8_t* __restrict__ out,
                               int64_t n_words) {
  const int64_t cp4 = round_up(cols, 4) / 4;
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < n_words; w += (int64_t)gridDim.x * blockDim.x) {
    const auto [r, c0] = swizzled_word_position(w, cp4);  // word w = bytes 4w .. 4w + 3
    uint32_t v = 0;
    if (r < rows) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (c0 + i < cols) v |= (uint32_t)in[r * cols + c0 + i] << (8 * i);
    }
    reinterpret_cast<uint32_t*>(out)[w] = v;
  }
}

// SPEC 11.1: one thread per 16-block, out = e2m1 * s with the block factor s of the scale rule:
// TE rules s = (decode(sf) * amax) * rcp_six_g, rcp_six_g = fp32(1/(6G)) (G = 448: fp32(1/2688); G = 256, 4over6:
// fp32(1/1536), SPEC 5.6); torchao s = P * decode(sf), P = amax / 2688; torchao_noscale s = decode(sf). A negative
// amax is taken as its magnitude -amax (SPEC 11.2: a device tensor is not checked on the host; -0.0 is not negative).
__global__ void dequantize_kernel(const uint8_t* __restrict__ data, const uint8_t* __restrict__ scales,
                                  const float* __restrict__ amax, int64_t rows, int64_t cols, int swizzled, int rule,
                                  float rcp_six_g, float* __restrict__ out) {
  const int64_t nb = cols / 16, total = rows * nb;
  const float am = *amax < 0.0f ? -*amax : *amax;
  const float p = __fdiv_rn(am, 2688.0f);  // rule "torchao" only
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / nb, c = i % nb;
    const uint32_t sb = scales[swizzled ? swizzle_offset(r, c, round_up(nb, 4) / 4) : r * nb + c];
    const float sf = e4m3_value(sb);
    const float s = rule == kRuleTorchao ? __fmul_rn(p, sf)
                    : rule == kRuleTorchaoNoScale ? sf
                    : __fmul_rn(__fmul_rn(sf, am), rcp_six_g);
    const uint2 d = *reinterpret_cast<const uint2*>(data + r * (cols / 2) + c * 8);
    const uint64_t codes = (uint64_t)d.x | ((uint64_t)d.y << 32);
    float4* o = reinterpret_cast<float4*>(out + r * cols + c * 16);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float4 v;
      v.x = __fmul_rn(e2m1_value((uint32_t)(codes >> (16 * q)) & 0xF), s);
      v.y = __fmul_rn(e2m1_value((uint32_t)(codes >> (16 * q + 4)) & 0xF), s);
      v.z = __fmul_rn(e2m1_value((uint32_t)(codes >> (16 * q + 8)) & 0xF), s);
      v.w = __fmul_rn(e2m1_value((uint32_t)(codes >> (16 * q + 12)) & 0xF), s);
      o[q] = v;
    }
  }
}

}  // namespace

void launch_swizzle(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out, cudaStream_t stream) {
  const int64_t n_words = round_up(rows, 128) * round_up(cols, 4) / 4;
  if (n_words == 0) return;
  swizzle_kernel<<<grid_for(n_words, 256), 256, 0, stream>>>(in, rows, cols, out, n_words);
}

void launch_dequantize(const uint8_t* data, const uint8_t* scales, const float* amax, int64_t rows, int64_t cols,
                       bool swizzled, int rule, int global_scale_max, float* out, cudaStream_t stream) {
  const int64_t total = rows * (cols / 16);
  if (total == 0) return;
  dequantize_kernel<<<grid_for(total, 256), 256, 0, stream>>>(data, scales, amax, rows, cols, swizzled ? 1 : 0, rule,
                                                              inv_six_g(global_scale_max), out);
}

}  // namespace nvfp4
