// Host-side launchers of the packed columnwise scales (layer/packed_scales.cu, SPEC 9.5): the grouped linear layer
// keeps X's columnwise scales for its backward in this form. Bindings in quantize/bindings.cpp
// (pack_col_scales_, unpack_col_scales_).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace nvfp4_layer {

// packed [packed_bytes] from the swizzled grouped columnwise scales swizzled [swizzled_bytes] of a grouped offsets
// table offs [6, E+1] (SPEC 9.2; its columnwise rows are read on the device). Every byte of `packed` is written when
// the table is the one of these buffers: group g's compact [K, ceil(m_g / 16)] scales at K * (its columnwise data
// offset / (8 K)), 0x00 past the last group.
void launch_pack_col_scales(const uint8_t* swizzled, int64_t swizzled_bytes, const int64_t* offs, int E, int64_t K,
                            uint8_t* packed, int64_t packed_bytes, cudaStream_t stream);

// The inverse: swizzled [swizzled_bytes] (every byte written: SPEC 8.2's padding and the bytes past the last group
// 0x00) from packed [packed_bytes].
void launch_unpack_col_scales(const uint8_t* packed, int64_t packed_bytes, const int64_t* offs, int E, int64_t K,
                              uint8_t* swizzled, int64_t swizzled_bytes, cudaStream_t stream);

}  // namespace nvfp4_layer
