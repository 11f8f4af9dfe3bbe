// Packed columnwise scales (SPEC 9.5): the grouped columnwise scales of SPEC 9.2 without the 128 x 4 tiles' padding.
// Group g's compact [K, C_g] scales (C_g = ceil(m_g / 16)) are row-major at byte P_g = K * sum_{h<g} C_h, which is
// the group's columnwise data offset / 8 (that offset is K * 16 * sum_{h<g} C_h / 2). The grouped linear layer keeps
// X's columnwise scales in this form between its forward and backward (K * W(16) bytes against
// roundup(K, 128) * 4 * W(64) swizzled).
//
// Both kernels run one thread per swizzled word (4 scale bytes of one row) and find its group by a binary search of
// the offsets table's kOffColScale row on the device, so they can be captured in a CUDA graph. The bindings refuse
// buffers of 2^32 bytes or more, so the index math inside a group runs in 32 bits (a 64-bit division costs several
// times a 32-bit one, and each word divides twice). Every index is checked against its buffer's size, so a table that
// does not belong to the buffers reads and writes nothing outside them.
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

// Where swizzled word w of the grouped plane goes in the packed one: group g (by the search above), its packed first
// byte P_g = (columnwise data offset) / 8 and columns C_g = (P_{g+1} - P_g) / K, and the word's row r and first
// column c0 in the group's compact [K, C_g] scales (SPEC 8.2's inverse, swizzled_word_position, of the word's index
// inside the group). valid is false past the last group, for padding rows (r >= K) and for a table whose values do
// not fit the buffers (then nothing is read or written for the word).
struct WordPlace {
  bool valid;
  int64_t first;   // P_g
  uint32_t cols;   // C_g
  uint32_t r, c0;  // row, first of the word's 4 columns (columns c0 + i >= C_g are padding)
};
__device__ __forceinline__ WordPlace word_place(int64_t w, const int64_t* __restrict__ data_off,
                                                const int64_t* __restrict__ scale_off, int E, uint32_t K,
                                                int64_t packed_bytes) {
  WordPlace p{false, 0, 0, 0, 0};
  const int g = group_of(scale_off, E, 4 * w);
  if (g >= E) return p;
  p.first = __ldg(data_off + g) / 8;
  const int64_t bytes = __ldg(data_off + g + 1) / 8 - p.first;  // K * C_g
  const int64_t local = w - __ldg(scale_off + g) / 4;             // the word inside the group's swizzled scales
  if (p.first < 0 || bytes <= 0 || p.first + bytes > packed_bytes || local < 0 || local >= (int64_t{1} << 32)) {
    return p;
  }
  p.cols = static_cast<uint32_t>(bytes) / K;
  if (p.cols == 0) return p;
  const auto pos = nvfp4::swizzled_word_position<uint32_t>(static_cast<uint32_t>(local), (p.cols + 3) / 4);
  p.r = pos.r;
  p.c0 = pos.c0;
  p.valid = p.r < K;
  return p;
}

// Each word's bytes c0 + i < C_g go to packed byte P_g + r * C_g + c0 + i (every byte of a group is some word's: the
// swizzled scales cover each group's [K, C_g] scales once); then the bytes from P_E (past the last group) are zeroed.
__global__ void pack_col_scales_kernel(const uint32_t* __restrict__ swizzled, int64_t swizzled_words,
                                       const int64_t* __restrict__ offs, int E, uint32_t K,
                                       uint8_t* __restrict__ packed, int64_t packed_bytes) {
  const int64_t* data_off = offs + (int64_t)kOffColData * (E + 1);
  const int64_t* scale_off = offs + (int64_t)kOffColScale * (E + 1);
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t w = tid; w < swizzled_words; w += stride) {
    const WordPlace p = word_place(w, data_off, scale_off, E, K, packed_bytes);
    if (!p.valid) continue;
    const uint32_t v = swizzled[w];
    const int64_t row = p.first + (int64_t)p.r * p.cols;  // < P_g + K * C_g <= packed_bytes (word_place's checks)
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i)
      if (p.c0 + i < p.cols) packed[row + p.c0 + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  const int64_t tail = __ldg(data_off + E) / 8;  // P_E
  for (int64_t q = (tail < 0 ? 0 : tail) + tid; q < packed_bytes; q += stride) packed[q] = 0;
}

// The inverse: word w takes packed bytes P_g + r * C_g + c0 + i for c0 + i < C_g, 0x00 elsewhere (SPEC 8.2's padding
// rows and columns, and everything past the last group).
__global__ void unpack_col_scales_kernel(const uint8_t* __restrict__ packed, int64_t packed_bytes,
                                         const int64_t* __restrict__ offs, int E, uint32_t K,
                                         uint32_t* __restrict__ swizzled, int64_t swizzled_words) {
  const int64_t* data_off = offs + (int64_t)kOffColData * (E + 1);
  const int64_t* scale_off = offs + (int64_t)kOffColScale * (E + 1);
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < swizzled_words;
       w += (int64_t)gridDim.x * blockDim.x) {
    const WordPlace p = word_place(w, data_off, scale_off, E, K, packed_bytes);
    uint32_t v = 0;
    if (p.valid) {
      const int64_t row = p.first + (int64_t)p.r * p.cols;
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i)
        if (p.c0 + i < p.cols) v |= (uint32_t)packed[row + p.c0 + i] << (8 * i);
    }
    swizzled[w] = v;
  }
}

}  // namespace

// (swizzled_bytes is a multiple of 512, packed_bytes and swizzled_bytes below 2^32: checked by the bindings)
void launch_pack_col_scales(const uint8_t* swizzled, int64_t swizzled_bytes, const int64_t* offs, int E, int64_t K,
                            uint8_t* packed, int64_t packed_bytes, cudaStream_t stream) {
  if (packed_bytes == 0) return;
  const int64_t words = swizzled_bytes / 4;
  pack_col_scales_kernel<<<nvfp4::grid_for(words > packed_bytes / 4 ? words : packed_bytes / 4, 256), 256, 0,
                           stream>>>(reinterpret_cast<const uint32_t*>(swizzled), words, offs, E,
                                     static_cast<uint32_t>(K), packed, packed_bytes);
}

void launch_unpack_col_scales(const uint8_t* packed, int64_t packed_bytes, const int64_t* offs, int E, int64_t K,
                              uint8_t* swizzled, int64_t swizzled_bytes, cudaStream_t stream) {
  const int64_t words = swizzled_bytes / 4;
  if (words == 0) return;
  unpack_col_scales_kernel<<<nvfp4::grid_for(words, 256), 256, 0, stream>>>(
      packed, packed_bytes, offs, E, static_cast<uint32_t>(K), reinterpret_cast<uint32_t*>(swizzled), words);
}

}  // namespace nvfp4_layer
