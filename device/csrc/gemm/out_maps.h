// The output's tensor maps for the TMA-store epilogues (epilogue "tma_store" of the plan, device/_dispatch.py), encoded
// per launch on the host. Each encoder also checks that the epilogue may write this output (the binding refuses the
// plan otherwise): a map that does not apply is never encoded.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/tensor_map.h"
#include "gemm/problem.h"

namespace nvfp4_gemm {

// wgrad's fp32 output [E, out_rows, out_cols] with row pitch ldd as a 3D map, boxes of 32 columns x 16 rows, 128-byte
// swizzle (epilogue.cuh store_tile_tma; fused_128x256 and exact_copies). It may write the output only for wgrad
// (every group's block [out_rows, out_cols] at g * out_rows * ldd) without C read back and without a bias, with a
// 16-byte aligned base and row pitch. True when it encoded the map into `map` and set bit 2 of `a->accumulate`.
inline bool encode_wgrad_out_map(LaunchArgs* a, CUtensorMap* map) {
  const bool applies = a->out_f32 && a->kind == kWgrad && !(a->accumulate & 1) && !a->has_bias && a->out != nullptr &&
                       reinterpret_cast<uintptr_t>(a->out) % 16 == 0 && (a->ldd * 4) % 16 == 0;
  if (!applies || !nvfp4::encode_3d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a->out, a->out_cols, a->out_rows, a->E,
                                    a->ldd * 4, a->out_rows * a->ldd * 4, 32, 16, CU_TENSOR_MAP_SWIZZLE_128B))
    return false;
  a->accumulate |= 4;
  return true;
}

// bf16 output rows as a 2D map, boxes of 64 columns x 16 rows, 128-byte swizzle (epilogue.cuh store_tile_tma_bf16;
// the fused fast kernels). fprop / dgrad: [T, cols] (out_rows = T, out_cols = cols, row pitch ldd); wgrad: the E planes
// [out_rows = N, out_cols = K] as E N rows (plane g starts at row g N, Prob::row0, ldd N elements after the previous
// one), only while E N < 2^31 (TMA coordinates are 32-bit). It may write the output only without C read back, with a
// 16-byte aligned base and row pitch. True when it encoded the map into `map` and set bit 2 of `a->accumulate`.
inline bool encode_rows_out_map(LaunchArgs* a, CUtensorMap* map) {
  const unsigned long long rows = a->kind == kWgrad ? static_cast<unsigned long long>(a->E) * a->out_rows : a->out_rows;
  const bool applies = !a->out_f32 && !(a->accumulate & 1) && a->out != nullptr && rows < (1ull << 31) &&
                       reinterpret_cast<uintptr_t>(a->out) % 16 == 0 && (a->ldd * 2) % 16 == 0;
  if (!applies || !nvfp4::encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, a->out, a->out_cols, rows, a->ldd * 2, 64,
                                    16, CU_TENSOR_MAP_SWIZZLE_128B))
    return false;
  a->accumulate |= 4;
  return true;
}

}  // namespace nvfp4_gemm
