// The bias gradient of the grouped linear layer (SPEC 16.4): dbias[g, n] = the sum of float(dY[r, n]) over group g's
// rows r, in a fixed fp32 order:
//   * the group's rows in chunks of 16 consecutive rows counted from the group's first row (the last chunk may be
//     shorter);
//   * each chunk summed sequentially in row order, in fp32 (one round-to-nearest-even add per row), from +0.0;
//   * the chunk sums added sequentially in chunk order, in fp32, from +0.0; an empty group gives +0.0.
// Graph-safe: the group bounds are read from the device offset table (row 0: first row of each group, SPEC 9.2, with
// SPEC 9.4's cut already applied by the grouped setup kernel); the grid depends only on (E, N). The bounds are
// clamped to [0, T] (dY's rows) on the device, so a table that does not belong to dY cannot make the kernel read
// outside it; a table of dY's splits passes unchanged.
#include <cuda_bf16.h>

#include "layer/bias_grad.h"

namespace nvfp4_layer {
namespace {

constexpr int kWarps = 8;                       // warps per CTA: chunks in flight per column slice
constexpr int kColsPerLane = 4;                 // one 8-byte load of 4 bf16 per lane and row
constexpr int kChunkRows = 16;                  // SPEC 16.4's chunk
static_assert(32 * kColsPerLane == kBiasGradCols, "a warp spans the CTA's columns");

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
__device__ __forceinline__ float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xFFFF0000u); }

__device__ __forceinline__ void add4(float4& s, const float4& v) {
  s.x = __fadd_rn(s.x, v.x);
  s.y = __fadd_rn(s.y, v.y);
  s.z = __fadd_rn(s.z, v.z);
  s.w = __fadd_rn(s.w, v.w);
}

// Grid: x = column slice of kBiasGradCols columns, y = group g. Block: kWarps warps.
// Warp w sums chunks w, w + kWarps, w + 2 kWarps, ... of the group (each chunk by one warp, its 16 rows in order);
// after each round of kWarps chunks, warp 0 adds the round's chunk sums to the running total in chunk order. So every
// column sees exactly SPEC 16.4's sequence of adds, whatever the number of warps.
__global__ void __launch_bounds__(kWarps * 32) bias_grad_kernel(const uint2* __restrict__ dy,
                                                                const int64_t* __restrict__ row_offsets, int64_t T,
                                                                int64_t N, float* __restrict__ dbias) {
  __shared__ float4 round_sums[kWarps][32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = blockIdx.y;
  // this lane's first column; N % 4 == 0, so the lane's 4 columns are all inside N or all outside
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBiasGradCols + lane * kColsPerLane;
  const bool active = col < N;
  // group g's rows [first_row, end): the table's bounds clamped to 0 <= first_row <= end <= T (a table of dY's
  // splits, SPEC 9.4's cut applied, is already inside; the clamp only guards the reads against any other table)
  const int64_t first_row = min(max(row_offsets[g], static_cast<int64_t>(0)), T);
  const int64_t end = min(max(row_offsets[g + 1], first_row), T);
  const int64_t rows = end - first_row;  // 0 <= rows <= T - first_row
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  const int64_t pitch = N / kColsPerLane;  // uint2 words per row of dY
  float4 total = make_float4(0.f, 0.f, 0.f, 0.f);
  // `chunks` is the same for every thread of the CTA (one group per CTA), so the barriers below are uniform
  for (int64_t round = 0; round < chunks; round += kWarps) {
    const int64_t chunk = round + warp;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active && chunk < chunks) {
      const int64_t r0 = first_row + chunk * kChunkRows;               // the chunk's first row in dY
      const int64_t n_rows = min(static_cast<int64_t>(kChunkRows), rows - chunk * kChunkRows);  // 1..16
      const uint2* p = dy + r0 * pitch + col / kColsPerLane;            // dY[r0, col .. col + 3]
      uint2 v[kChunkRows];
#pragma unroll
      for (int i = 0; i < kChunkRows; ++i) {  // all loads first (independent), then the adds in row order
        v[i] = i < n_rows ? __ldg(p + i * pitch) : make_uint2(0u, 0u);
      }
      // Rows past a short chunk's end add +0.0, which leaves the sum unchanged: a sum started at +0.0 under
      // round-to-nearest is never -0.0 (x + (-x) and (+0) + (-0) give +0), and s + (+0) == s for every other s.
#pragma unroll
      for (int i = 0; i < kChunkRows; ++i) {
        add4(s, make_float4(bf16_lo(v[i].x), bf16_hi(v[i].x), bf16_lo(v[i].y), bf16_hi(v[i].y)));
      }
    }
    round_sums[warp][lane] = s;
    __syncthreads();
    if (warp == 0) {
      const int64_t in_round = min(static_cast<int64_t>(kWarps), chunks - round);  // the round's chunks, in chunk order
      for (int w = 0; w < in_round; ++w) add4(total, round_sums[w][lane]);
    }
    __syncthreads();  // round_sums is rewritten by the next round
  }
  if (warp == 0 && active) {
    float4* out = reinterpret_cast<float4*>(dbias + static_cast<int64_t>(g) * N + col);  // 16-byte aligned: N % 4 == 0
    *out = total;
  }
}

}  // namespace

void launch_bias_grad(const void* dy, const int64_t* row_offsets, int E, int64_t T, int64_t N, float* dbias,
                      cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((N + kBiasGradCols - 1) / kBiasGradCols), static_cast<unsigned>(E));
  bias_grad_kernel<<<grid, kWarps * 32, 0, stream>>>(static_cast<const uint2*>(dy), row_offsets, T, N, dbias);
}

}  // namespace nvfp4_layer
