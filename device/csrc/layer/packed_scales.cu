// Packed columnwise scales (SPEC 9.5): the grouped columnwise scales of SPEC 9.2 without the 128 x 4 tiles' padding.
// Group g's compact [K, C_g] scales (C_g = ceil(m_g / 16)) are row-major at byte P_g = K * sum_{h<g} C_h, which is
// the group's columnwise data offset / 8 (that offset is K * 16 * sum_{h<g} C_h / 2). The grouped linear layer keeps
// X's columnwise scales in this form between its forward and backward (K * W(16) bytes against
// roundup(K, 128) * 4 * W(64) swizzled).
//
// Each kernel runs one thread per 32-bit word of its output and finds the word's group by a binary search of a row of
// the offsets table on the device, so both can be captured in a CUDA graph: pack one thread per packed word (stores
// of whole words, consecutive across a warp), unpack one thread per swizzled word (4 scale bytes of one row). Pack
// with one thread per swizzled word wrote 4 single bytes per thread, C_g bytes apart across a warp: 63 us on the
// E8 T16384 K4096 skewed layer step (H200), where unpack took 16 us. The bindings refuse buffers of 2^32 bytes or
// more, so the index math inside a group runs in 32 bits (a 64-bit division costs several times a 32-bit one). Every
// index is checked against its buffer's size, so a table that does not belong to the buffers reads and writes nothing
// outside them.
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

// Packed word q (bytes 4q .. 4q + 3): in group g (P_g <= 4q < P_{g+1}; P_g = K * sum_{h<g} C_h is a multiple of 16,
// so no word spans two groups) its first byte is compact scale (r, c) with r * C_g + c = 4q - P_g, and each next byte
// the next column (wrapping to the next row). With C_g % 4 == 0 the four are columns c .. c + 3 (c % 4 == 0) of row r,
// which SPEC 8.2 keeps as one aligned swizzled word: one 32-bit load; otherwise one byte load each. Words from P_E
// on, and words of a table that does not fit the buffers, are 0x00.
__global__ void pack_col_scales_kernel(const uint32_t* __restrict__ swizzled, int64_t swizzled_words,
                                       const int64_t* __restrict__ offs, int E, uint32_t K,
                                       uint32_t* __restrict__ packed, int64_t packed_words) {
  const int64_t* data_off = offs + (int64_t)kOffColData * (E + 1);
  const int64_t* scale_off = offs + (int64_t)kOffColScale * (E + 1);
  const uint8_t* swizzled_bytes = reinterpret_cast<const uint8_t*>(swizzled);
  const int64_t n_swizzled = 4 * swizzled_words;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < packed_words;
       q += (int64_t)gridDim.x * blockDim.x) {
    uint32_t v = 0;
    const int g = group_of(data_off, E, 32 * q);  // (data offsets are 8 x the packed ones)
    const int64_t first = g < E ? __ldg(data_off + g) / 8 : 0;  // P_g
    const int64_t bytes = g < E ? __ldg(data_off + g + 1) / 8 - first : 0;  // K * C_g
    const int64_t base = g < E ? __ldg(scale_off + g) : 0;  // the group's first swizzled byte
    const int64_t local = 4 * q - first;
    if (g < E && first >= 0 && bytes >= K && base >= 0 && local >= 0 && local < bytes &&
        bytes < (int64_t{1} << 32)) {
      const uint32_t cols = static_cast<uint32_t>(bytes) / K, cp4 = (cols + 3) / 4;
      uint32_t r = static_cast<uint32_t>(local) / cols, c = static_cast<uint32_t>(local) - r * cols;
      if (cols % 4 == 0) {
        const int64_t at = base + nvfp4::swizzle_offset<int64_t>(r, c, cp4);  // a multiple of 4 when base is
        if (r < K && at % 4 == 0 && at + 4 <= n_swizzled) v = swizzled[at / 4];
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (i > 0 && ++c == cols) {  // the next byte: the next column, or column 0 of the next row
            c = 0;
            ++r;
          }
          const int64_t at = base + nvfp4::swizzle_offset<int64_t>(r, c, cp4);
          if (r < K && at < n_swizzled) v |= static_cast<uint32_t>(swizzled_bytes[at]) << (8 * i);
        }
      }
    }
    packed[q] = v;
  }
}

// The inverse: word w takes packed bytes P_g + r * C_g + c0 + i for c0 + i < C_g, 0x00 elsewhere (SPEC 8.2's padding
// rows and columns, and everything past the last group); with C_g % 4 == 0 the four are one aligned packed word.
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
      const int64_t at = p.first + (int64_t)p.r * p.cols + p.c0;  // column c0 of row r
      if (p.cols % 4 == 0 && at % 4 == 0) {  // columns c0 .. c0 + 3 < C_g: one aligned packed word
        v = reinterpret_cast<const uint32_t*>(packed)[at / 4];
      } else {
#pragma unroll
        for (uint32_t i = 0; i < 4; ++i)
          if (p.c0 + i < p.cols) v |= (uint32_t)packed[at + i] << (8 * i);
      }
    }
    swizzled[w] = v;
  }
}

}  // namespace

// (swizzled_bytes is a multiple of 512, packed_bytes a multiple of 4, both buffers 4-byte aligned and below 2^32
// bytes: checked by the bindings)
void launch_pack_col_scales(const uint8_t* swizzled, int64_t swizzled_bytes, const int64_t* offs, int E, int64_t K,
                            uint8_t* packed, int64_t packed_bytes, cudaStream_t stream) {
  const int64_t packed_words = packed_bytes / 4;
  if (packed_words == 0) return;
  pack_col_scales_kernel<<<nvfp4::grid_for(packed_words, 256), 256, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(swizzled), swizzled_bytes / 4, offs, E, static_cast<uint32_t>(K),
      reinterpret_cast<uint32_t*>(packed), packed_words);
}

void launch_unpack_col_scales(const uint8_t* packed, int64_t packed_bytes, const int64_t* offs, int E, int64_t K,
                              uint8_t* swizzled, int64_t swizzled_bytes, cudaStream_t stream) {
  const int64_t words = swizzled_bytes / 4;
  if (words == 0) return;
  unpack_col_scales_kernel<<<nvfp4::grid_for(words, 256), 256, 0, stream>>>(
      packed, packed_bytes, offs, E, static_cast<uint32_t>(K), reinterpret_cast<uint32_t*>(swizzled), words);
}

}  // namespace nvfp4_layer
