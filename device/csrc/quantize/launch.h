// Host-side launchers of the NVFP4 quantize-side kernels (implemented in quantize/*.cu, called from
// quantize/bindings.cpp).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "common/codes.h"  // Rule, ScaleLayout, QuantizeKernel

namespace nvfp4 {

struct AmaxArgs {
  const void* x;
  int64_t M, K;          // rows of X (T when grouped) and columns
  const int64_t* offs;   // grouped offset table [6, E+1] or nullptr
  int E;
  float* row_amax;       // [E]; zeroed by launch_init_amax (single tensor) or the setup kernel (grouped)
  float* col_amax;       // [E] or nullptr when no columnwise plane is wanted
  uint32_t rht_signs;
  int nan_propagating;   // SPEC 4.1: 1 for the torchao rules (a NaN amax is 0x7FC00000), 0 for the TE rules
  const int4* tile_recs = nullptr;  // grouped: the setup kernel's row-tile records (quantize/layout.cuh), or nullptr
  // grouped, bf16 fast pass after the setup kernel, E <= kSplitScanMaxGroups: the device splits, from which the pass
  // finds its tiles itself (resolve_grid_tile_reversed_splits) instead of waiting for the records; or nullptr
  const int64_t* splits = nullptr;
  int64_t late_wait_ctas = 0;  // with `splits`: CTAs below it wait for the setup kernel only before their atomics
  // single tensor: the previous launch is launch_init_amax, zeroing these amaxes (the bf16 fast pass then starts
  // with a programmatic dependency on it and waits for it only before its atomics)
  int after_zero = 0;
};

struct QuantArgs {
  const void* x;
  int64_t M, K;
  const int64_t* offs;
  int E;
  const float* row_amax;  // [E]
  const float* col_amax;  // [E]
  uint8_t* row_data;      // nullptr: no rowwise plane
  uint8_t* row_scales;
  uint8_t* col_data;      // nullptr: no columnwise plane
  uint8_t* col_scales;
  int layout;             // ScaleLayout
  int block2d;            // 16x16 blocks (SPEC 6.3)
  int sr;                 // stochastic rounding (SPEC 3.4, 10)
  int rule;               // Rule
  uint32_t rht_signs;
  uint32_t seed_lo, seed_hi, offset;
  const int4* tile_recs = nullptr;  // grouped: the setup kernel's row-tile records (quantize/layout.cuh), or nullptr
  int global_scale_max = 448;  // G, the E4M3 maximum inside S_enc (SPEC 5.6): 448, or 256 (4over6 only)
};

// The 4over6 variants (SPEC 5.6): the error measure and its domain.
enum FourOverSixError : int { kFo6Mae = 1, kFo6Mse = 2 };


// Rows per row tile of the amax and quantize grids (kTileM, quantize/layout.cuh), and the row tiles a grid must cover:
// ceil(M / 128) for a single tensor of M rows; for a grouped call over T rows and E groups the worst case of
// sum ceil(m_g / 128), T / 128 + E (grids and the setup kernel's records are sized for it, the kernels read the real
// count from the offset table). device/_ops.py computes the same numbers.
constexpr int64_t kRowTileRows = 128;
constexpr int64_t row_tiles_needed(int64_t rows, int64_t E, bool grouped) {
  return grouped ? rows / kRowTileRows + E : (rows + kRowTileRows - 1) / kRowTileRows;
}

// The grid of a grid-stride loop over `work` items, `threads` per CTA: at least 1, at most 4096 CTAs.
inline int grid_for(int64_t work, int threads) {
  const int64_t g = (work + threads - 1) / threads;
  return (int)(g < 1 ? 1 : (g > 4096 ? 4096 : g));
}

__host__ __device__ inline bool is_torchao_rule(int rule) { return rule == kRuleTorchao || rule == kRuleTorchaoNoScale; }

// SPEC 7's default RHT sign mask: the bf16 fast kernels compile it in (kQuantizeFastBf16 runs the RHT with it only).
constexpr uint32_t kDefaultRhtSigns = 0xD7E8u;

enum DType : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

// amax pass (SPEC 4); `row_tiles` is the (worst-case) number of 128-row tiles; `kernel` the QuantizeKernel family
// (bf16 input: kQuantizeFastBf16 needs no RHT or the default sign mask). after_setup: the previous launch on `s` is
// launch_group_setup for these offsets (the bf16 fast kernel then starts with a programmatic dependency).
void launch_amax_bf16(const AmaxArgs& a, bool rht, int64_t row_tiles, cudaStream_t s, bool after_setup,
                      QuantizeKernel kernel);
void launch_amax_f16(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s);
void launch_amax_f32(const AmaxArgs& a, int64_t row_tiles, cudaStream_t s);
// fused quantizer (SPEC 5-8, 10); `kernel` as above (kQuantizeFastBf16 also needs round-to-nearest and 1x16 blocks).
// after_amax: the previous launch on `s` is the amax pass of this input, or a single tensor's launch_init_amax with
// supplied amaxes (so the bf16 fast kernel may overlap it, reading only X and the offsets before it waits for it).
void launch_quantize_bf16(const QuantArgs& a, bool rht, int64_t row_tiles, cudaStream_t s, bool after_amax,
                          QuantizeKernel kernel);
void launch_quantize_f16(const QuantArgs& a, int64_t row_tiles, cudaStream_t s);
// the 4over6 quantizer (SPEC 5.6; quantize/four_over_six.cuh): bf16, rule "te", round to nearest, no RHT, 1x16 or
// 16x16 blocks (a.block2d), G = a.global_scale_max; `error` a FourOverSixError, fast_math its product domain.
void launch_quantize_4over6_bf16(const QuantArgs& a, int error, bool fast_math, int64_t row_tiles, cudaStream_t s,
                                 bool after_amax);
void launch_quantize_f32(const QuantArgs& a, int64_t row_tiles, cudaStream_t s);

// Writes row_amax[0] and, when given, col_amax[0] of a single tensor: 0 (the amax pass's atomics start from 0,
// SPEC 4) or, where supplied_row / supplied_col is given, that value as SPEC 4.3 uses it (a negative one as its
// magnitude). One CTA, which lets a programmatically dependent amax pass (AmaxArgs::after_zero) or quantize pass
// (after_amax) start at once.
void launch_init_amax(float* row_amax, float* col_amax, const float* supplied_row, const float* supplied_col,
                      cudaStream_t stream);

// One launch per grouped call (SPEC 9): the offset table [6, E+1] from the device splits (running total capped at
// the T rows of x, SPEC 9.4), the per-group amaxes (those given: zeroed, or supplied_row / supplied_col as SPEC 4.3
// uses them), and zero bytes past the last group in up to kTailBufs buffers (bufs[i] of caps[i] bytes, whose used
// length is offset row rows[i], entry E).
constexpr int kTailBufs = 4;
// tile_recs (optional): [T/128 + E] row-tile records for the bf16 fast kernels (quantize/layout.cuh, TileRecord).
void launch_group_setup(const int64_t* splits, int E, int64_t T, int64_t K, int64_t* offs, float* row_amax,
                        float* col_amax, const float* supplied_row, const float* supplied_col,
                        uint8_t* const bufs[kTailBufs], const int64_t caps[kTailBufs],
                        const int rows[kTailBufs], int4* tile_recs, cudaStream_t stream);
void launch_swizzle(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out, cudaStream_t stream);
// SPEC 11.1; global_scale_max: the plane's G (448, or 256 under 4over6, SPEC 5.6) in the TE rules' fp32(1/(6G)).
void launch_dequantize(const uint8_t* data, const uint8_t* scales, const float* amax, int64_t rows, int64_t cols,
                       bool swizzled, int rule, int global_scale_max, float* out, cudaStream_t stream);

}  // namespace nvfp4
