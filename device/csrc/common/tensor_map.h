// Tensor maps (TMA descriptors) encoded on the host through the runtime's driver entry point
// (cudaGetDriverEntryPointByVersion), so the extensions need no -lcuda.
#pragma once

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace nvfp4 {

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

}  // namespace nvfp4
