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

}  // namespace nvfp4
