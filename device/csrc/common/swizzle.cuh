// SPEC 8.2, the cuBLAS 128x4 scale-factor layout, written once for the quantizer and the GEMM: scale (r, c) of a
// plane with roundup(C, 4) = 4 * cp4 scale columns lives in 512-byte tile ((r / 128) * cp4 + c / 4), at byte
// (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4 inside it.
#pragma once

#include <cstdint>

namespace nvfp4 {

// Byte of (row r, block c % 4) inside its 512-byte tile. I: int64_t for whole planes, a 32-bit type for the
// GEMM's shared-memory stages (one tile column per K tile).
template <typename I>
__host__ __device__ __forceinline__ constexpr I swizzle_in_tile(I r, I c) {
  return (r & 31) * 16 + ((r & 127) >> 5) * 4 + (c & 3);
}

// Byte offset of compact scale (r, c) in the swizzled layout; cp4 = roundup(C, 4) / 4.
template <typename I>
__host__ __device__ __forceinline__ constexpr I swizzle_offset(I r, I c, I cp4) {
  return ((r >> 7) * cp4 + (c >> 2)) * 512 + swizzle_in_tile(r, c);
}

// The inverse for whole 4-byte words: word w (bytes 4w .. 4w + 3) of a swizzled plane holds scales (r, c0 .. c0 + 3).
// The word is in tile w / 128, whose row tile is tile / cp4 and column tile tile % cp4; inside the tile word
// (r % 32) * 4 + (r % 128) / 32, so r % 128 = (w % 4) * 32 + (w % 128) / 4. I: int64_t for any plane, uint32_t where
// the plane is known to hold fewer than 2^32 bytes (a 32-bit division by cp4 instead of a 64-bit one).
template <typename I>
struct SwizzledWord {
  I r, c0;
};
template <typename I>
__host__ __device__ __forceinline__ constexpr SwizzledWord<I> swizzled_word_position(I w, I cp4) {
  const I tile = w >> 7, in_tile = w & 127;
  return {(tile / cp4) * 128 + (in_tile & 3) * 32 + (in_tile >> 2), (tile % cp4) * 4};
}

}  // namespace nvfp4
