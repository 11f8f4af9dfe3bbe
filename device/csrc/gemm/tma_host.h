// Host side of the TMA loaders (the swapped fast kernel, the exact kernel over fp16 copies) and of the TMA-store
// epilogue of wgrad's fp32 output: tensor maps encoded through the runtime's driver entry point
// (cudaGetDriverEntryPointByVersion), so the extension needs no -lcuda.
#pragma once

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "gemm/problem.h"

namespace nvfp4_gemm {
namespace tma_host {

// cuTensorMapEncodeTiled, or null when the driver does not provide it
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2D row-major map {inner elements, rows} with the given box and swizzle; false when the driver refuses it.
inline bool encode_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, unsigned long long inner,
                      unsigned long long rows, unsigned long long pitch_bytes, unsigned box_inner, unsigned box_rows,
                      CUtensorMapSwizzle swizzle) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {inner, rows};
  const cuuint64_t strides[1] = {pitch_bytes};
  const cuuint32_t box[2] = {box_inner, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A 3D map {inner elements, rows, planes} (row pitch and plane pitch in bytes) with the given 2D box (one plane).
inline bool encode_3d(CUtensorMap* map, CUtensorMapDataType type, const void* base, unsigned long long inner,
                      unsigned long long rows, unsigned long long planes, unsigned long long pitch_bytes,
                      unsigned long long plane_bytes, unsigned box_inner, unsigned box_rows,
                      CUtensorMapSwizzle swizzle) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {inner, rows, planes};
  const cuuint64_t strides[2] = {pitch_bytes, plane_bytes};
  const cuuint32_t box[3] = {box_inner, box_rows, 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  return encode(map, type, 3, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// False when the environment variable `name` starts with '0' (a test switch that forces a kernel's cp.async loader;
// read at every launch).
inline bool tma_enabled(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || env[0] != '0';
}

// True when the environment variable `name` is set and does not start with '0': a loader that stays opt-in until it
// has been checked on a GPU (read at every launch).
inline bool tma_opted_in(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && env[0] != '\0' && env[0] != '0';
}

// The output's tensor map for the TMA-store epilogue of the fp32 kernels (ws::Shape::kTmaEpi in the 128 x 256 fast
// kernel, xf16::Shape::kTmaEpi in the exact kernel over fp16 copies; ws::store_tile_tma): wgrad's [E, out_rows,
// out_cols] fp32 with row pitch ldd, boxes of 32 columns x 16 rows, 128-byte swizzle. Only where store_tile_tma may
// write the output: wgrad (every group's block [out_rows, out_cols] at g * out_rows * ldd), no C read back, no bias,
// 16-byte aligned base and row pitch. Returns the launch arguments with bit 2 of `accumulate` set when it encoded the
// map (the kernels take their whole-line or direct epilogue otherwise).
inline LaunchArgs with_wgrad_out_map(const LaunchArgs& a, CUtensorMap* map) {
  LaunchArgs b = a;
  const bool applies = a.out_f32 && a.kind == kWgrad && !(a.accumulate & 1) && !a.has_bias && a.out != nullptr &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.ldd * 4) % 16 == 0;
  if (applies && encode_3d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.out, a.out_cols, a.out_rows, a.E, a.ldd * 4,
                           a.out_rows * a.ldd * 4, 32, 16, CU_TENSOR_MAP_SWIZZLE_128B))
    b.accumulate |= 4;
  return b;
}

// The output's tensor map for the bf16 TMA-store epilogue (ws::Shape*Bf16Tma, ws::store_tile_tma_bf16): a 2D map of
// the output's rows, boxes of 64 columns x 16 rows, 128-byte swizzle. fprop / dgrad: [T, cols] (out_rows = T,
// out_cols = cols, row pitch ldd); wgrad: the E planes [out_rows = N, out_cols = K] as E N rows (plane g starts at row
// g N, Prob::row0, ldd N elements after the previous one), only while E N < 2^31 (TMA coordinates are 32-bit). Only
// without C read back, with a 16-byte aligned base and pitch, and unless NVFP4_BF16_TMA=0 (read at every launch).
// Returns the launch arguments with bit 2 of `accumulate` set when it encoded the map.
inline LaunchArgs with_rows_out_map(const LaunchArgs& a, CUtensorMap* map) {
  LaunchArgs b = a;
  const unsigned long long rows = a.kind == kWgrad ? static_cast<unsigned long long>(a.E) * a.out_rows : a.out_rows;
  const bool applies = !a.out_f32 && !(a.accumulate & 1) && a.out != nullptr && rows < (1ull << 31) &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.ldd * 2) % 16 == 0 &&
                       tma_enabled("NVFP4_BF16_TMA");
  if (applies && encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, a.out, a.out_cols, rows, a.ldd * 2, 64, 16,
                           CU_TENSOR_MAP_SWIZZLE_128B))
    b.accumulate |= 4;
  return b;
}

}  // namespace tma_host
}  // namespace nvfp4_gemm
