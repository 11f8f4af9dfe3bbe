// NVFP4 x NVFP4 grouped GEMM for Hopper (sm_90a): shared declarations of the kernel and its host launcher.
// See docs/gemm.md for the design. Everything the kernel needs per group (pointers, sizes, alpha) is built on
// the device by a setup kernel from the grouped tensors' offsets table, so the launch is CUDA-graph safe.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace nvfp4_gemm {

enum Kind : int { kFprop = 0, kDgrad = 1, kWgrad = 2 };

// One group's GEMM: D[M, N] (+)= alpha * A[M, K] . B[N, K]^T (both K-major NVFP4 planes, swizzled scales).
struct Prob {
  const uint8_t* a;   // packed E2M1, row stride K/2 bytes
  const uint8_t* sa;  // swizzled E4M3 scales of A (SPEC 8.2), roundup(M,128) x roundup(K/16,4)
  const uint8_t* b;
  const uint8_t* sb;
  void* d;            // output rows, row stride ldd elements
  const float* bias;  // [N] or nullptr
  long long ldd;
  int M, N, K, tiles_m;
  float alpha;
  int row0;  // the group's first output row in the bf16 TMA-store epilogue's 2D map: fprop / dgrad its first row
             // of [T, cols], wgrad g N (its plane's first row of the E N rows; 0 when that passes 2^31)
  int pad[2];
};

struct SetupArgs {
  int kind;
  int E;
  const uint8_t* a_data;
  const uint8_t* a_scales;
  const int64_t* a_offs;  // [6, E+1] table of device/_results.py
  const float* a_amax;
  const uint8_t* b_data;
  const uint8_t* b_scales;
  const int64_t* b_offs;
  const float* b_amax;
  void* out;
  const float* bias;  // [E, ldd] or nullptr
  int out_f32;
  int accumulate;
  long long b_rows;   // rows of B per group: fprop N, dgrad K, wgrad K
  long long a_rows;   // wgrad: rows of A (= N); unused otherwise
  long long kc;       // contraction length for fprop (K) / dgrad (N); wgrad: per group roundup(m_g,16)
  long long ldd;      // output row stride (elements)
  float rcp;          // fp32(1/7225344)
  int rule;           // the operands' scale rule (nvfp4::Rule, nvfp4_launch.h): it picks the SPEC 12.1 alpha
  int tile_m, tile_n; // CTA tile of the GEMM kernel that will run (tile counts per group)
  Prob* probs;        // out: [E]
  int* prefix;        // out: [E+1] tile prefix sum
};

struct LaunchArgs {
  const Prob* probs;
  const int* prefix;
  int E;
  int exact;
  int out_f32;
  int accumulate;
  int grid_upper;  // host upper bound on the number of tiles (grid = min(this, resident blocks))
  int tile_m;  // CTA rows (from pick_tile); selects the fast kernel's shape
  int max_ctas;  // 0, or at most this many CTAs (a cluster counts its CTAs; at least one cluster runs)
  // The output as the host sees it, for the TMA-store epilogue of wgrad's fp32 output (gemm_wgmma_fast.cu): wgrad's
  // [E, out_rows, out_cols] with row stride ldd; the kind; whether a bias is fused.
  void* out;
  long long out_rows, out_cols, ldd;
  int kind;
  int has_bias;
};

// Tile (rows x columns of the output; a cluster tile for the 2-CTA kernel) for this mode, given the average number of
// output rows per group and the average contraction length per group (host-known: T / E rows and K (fprop) or N
// (dgrad) for fprop/dgrad; the weight-gradient rows and T / E for wgrad). force (fast mode only): 0 = by the sizes,
// 1 = the 64 x 256 kernel, 2 = the 128 x 256 kernel, 3 = the 2-CTA cluster kernel, 6 = the swapped kernel (64 x 256
// tiles too).
void pick_tile(bool exact, long long rows_per_group, long long contraction_per_group, int force, int* tile_m,
               int* tile_n);

void launch_setup(const SetupArgs& a, cudaStream_t s);
void launch_gemm(const LaunchArgs& a, cudaStream_t s);
// the GEMM kernels (gemm_wgmma_fast.cu / gemm_wgmma_exact.cu, template in gemm_wgmma.cuh)
void launch_wgmma_fast(const LaunchArgs& a, cudaStream_t s);
void launch_wgmma_exact(const LaunchArgs& a, cudaStream_t s);
void launch_wgmma_pair(const LaunchArgs& a, cudaStream_t s);  // fast mode, 2-CTA cluster tiles
// exact mode over fp16 copies of the operands, and fast mode with the operands swapped: launch_exact_f16 and
// launch_swapped in gemm_dequant.h (they need the planes for their TMA maps)

}  // namespace nvfp4_gemm
