// Packed columnwise scales (SPEC 9.5): the grouped columnwise scales of SPEC 9.2 without the 128 x 4 tiles' padding.
// Group g's compact [K, C_g] scales (C_g = ceil(m_g / 16)) are row-major at byte P_g = K * sum_{h<g} C_h, which is
// the group's columnwise data offset / 8 (that offset is K * 16 * sum_{h<g} C_h / 2). The grouped linear layer keeps
// X's columnwise scales in this form between its forward and backward (K * W(16) bytes against
// roundup(K, 128) * 4 * W(64) swizzled).
//
// Both kernels find each output byte's group by a binary search of the offsets table on the device (row kOffColData
// for packed bytes, kOffColScale for swizzled ones), so they can be captured in a CUDA graph; every source index is
// checked against its buffer's size, so a table that does not belong to the buffers reads nothing outside them.
#include "layer/packed_scales.h"

#include "common/swizzle.cuh"
#include "quantize/launch.h"
#include "quantize/layout.cuh"

namespace nvfp4_layer {
namespace {

using nvfp4::kOffColData;
using nvfp4::kOffColScale;

// The group g with row[g] <= pos < row[g + 1] (the last such g when empty groups repeat an offset), or E when
// pos >= row[E] (past the last group). row: one row of the offsets table, E + 1 non-decreasing values from 0.
__device__ __forceinline__ int group_of(const int64_t* __restrict__ row, int E, int64_t pos) {
  if (pos >= __ldg(row + E)) return E;
  int lo = 0, hi = E;  // row[lo] <= pos < row[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(row + mid) <= pos) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Group g's packed scales: first byte P_g and columns C_g, from its columnwise data offsets (0, 0 for g == E).
struct PackedGroup {
  int64_t first, cols;
};
__device__ __forceinline__ PackedGroup packed_group(const int64_t* __restrict__ data_off, int E, int64_t K, int g) {
  if (g >= E) return {0, 0};
  const int64_t first = __ldg(data_off + g) / 8;
  return {first, (__ldg(data_off + g + 1) / 8 - first) / K};  // C_g > 0 for a non-empty group of a valid table
}

// One thread per packed byte p: group g, local byte p - P_g = r * C_g + c, read from the group's swizzled scales at
// S_g + swizzle_offset(r, c, roundup(C_g, 4) / 4) (S_g: its columnwise scale offset).
__global__ void pack_col_scales_kernel(const uint8_t* __restrict__ swizzled, int64_t swizzled_bytes,
                                       const int64_t* __restrict__ offs, int E, int64_t K,
                                       uint8_t* __restrict__ packed, int64_t packed_bytes) {
  const int64_t* data_off = offs + (int64_t)kOffColData * (E + 1);
  const int64_t* scale_off = offs + (int64_t)kOffColScale * (E + 1);
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < packed_bytes;
       p += (int64_t)gridDim.x * blockDim.x) {
    // P_g = data_off[g] / 8: searching data_off for 8 p finds the same group
    const int g = group_of(data_off, E, 8 * p);
    uint8_t v = 0;
    const auto [first, cols] = packed_group(data_off, E, K, g);
    if (cols > 0 && p >= first) {
      const int64_t local = p - first, r = local / cols, c = local % cols;
      const int64_t src = __ldg(scale_off + g) + nvfp4::swizzle_offset<int64_t>(r, c, (cols + 3) / 4);
      if (src >= 0 && src < swizzled_bytes) v = swizzled[src];
    }
    packed[p] = v;
  }
}

// One thread per 4 swizzled bytes (one row r, scale columns c0 .. c0 + 3 of a 128 x 4 tile; group offsets are
// multiples of 512, so a word never straddles two groups): word w is word w' = w - S_g / 4 of its group's plane, whose
// (r, c0) swizzled_word_position gives (SPEC 8.2). Padding rows (r >= K) and columns (c >= C_g) are 0x00, as is
// everything past the last group.
__global__ void unpack_col_scales_kernel(const uint8_t* __restrict__ packed, int64_t packed_bytes,
                                         const int64_t* __restrict__ offs, int E, int64_t K,
                                         uint32_t* __restrict__ swizzled, int64_t swizzled_words) {
  const int64_t* data_off = offs + (int64_t)kOffColData * (E + 1);
  const int64_t* scale_off = offs + (int64_t)kOffColScale * (E + 1);
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < swizzled_words;
       w += (int64_t)gridDim.x * blockDim.x) {
    const int g = group_of(scale_off, E, 4 * w);
    uint32_t v = 0;
    const auto [first, cols] = packed_group(data_off, E, K, g);
    if (cols > 0 && 4 * w >= __ldg(scale_off + g)) {
      const auto [r, c0] = nvfp4::swizzled_word_position(w - __ldg(scale_off + g) / 4, (cols + 3) / 4);
      if (r < K) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t src = first + r * cols + c0 + i;
          if (c0 + i < cols && src >= 0 && src < packed_bytes) v |= (uint32_t)packed[src] << (8 * i);
        }
      }
    }
    swizzled[w] = v;
  }
}

}  // namespace

void launch_pack_col_scales(const uint8_t* swizzled, int64_t swizzled_bytes, const int64_t* offs, int E, int64_t K,
                            uint8_t* packed, int64_t packed_bytes, cudaStream_t stream) {
  if (packed_bytes == 0) return;
  pack_col_scales_kernel<<<nvfp4::grid_for(packed_bytes, 256), 256, 0, stream>>>(swizzled, swizzled_bytes, offs, E, K,
                                                                                 packed, packed_bytes);
}

void launch_unpack_col_scales(const uint8_t* packed, int64_t packed_bytes, const int64_t* offs, int E, int64_t K,
                              uint8_t* swizzled, int64_t swizzled_bytes, cudaStream_t stream) {
  const int64_t words = swizzled_bytes / 4;  // (a multiple of 512 bytes)
  if (words == 0) return;
  unpack_col_scales_kernel<<<nvfp4::grid_for(words, 256), 256, 0, stream>>>(
      packed, packed_bytes, offs, E, K, reinterpret_cast<uint32_t*>(swizzled), words);
}

}  // namespace nvfp4_layer
