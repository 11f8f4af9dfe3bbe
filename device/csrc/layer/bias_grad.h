// Host-side launcher of the grouped linear layer's bias gradient (layer/bias_grad.cu; binding in
// quantize/bindings.cpp, bias_grad_).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace nvfp4_layer {

// Columns of dY one CTA sums (32 lanes x 4 columns): the grid's x extent is ceil(N / kBiasGradCols).
constexpr int kBiasGradCols = 128;

// dbias [E, N] fp32 from dY [T, N] bf16 and the group row offsets row_offsets[0..E] (row 0 of a grouped offsets table,
// SPEC 9.2 / 9.4), in SPEC 16.4's order. N % 4 == 0, dY 8-byte aligned, 1 <= E <= 65535 (checked by the binding).
// Reads the offsets on the device only: the grid depends on (E, N), so the launch can be captured in a CUDA graph.
// Each group's bounds are clamped to [0, T] on the device, so a table that does not match dY reads no row outside it.
void launch_bias_grad(const void* dy, const int64_t* row_offsets, int E, int64_t T, int64_t N, float* dbias,
                      cudaStream_t stream);

}  // namespace nvfp4_layer
