// NVFP4 x NVFP4 grouped GEMM for Hopper (sm_90a): shared declarations of the kernels and their host launchers.
// Everything the kernels need per group (pointers, sizes, alpha) is built on the device by a setup kernel from the
// grouped tensors' offsets table, so the launch is CUDA-graph safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#include "common/codes.h"  // Kind, Algorithm, Loader, Epilogue

namespace nvfp4_gemm {

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
  int band_m;  // swapped_256x128's wgrad walks the group's tiles in bands of band_m token tiles (swapped.cuh's
               // group_tile); tiles_m (one band) in every other case
  int pad;
};
// (tests/test_device_gemm.py's band test reads band_m from the setup kernel's workspace at this byte)
static_assert(offsetof(Prob, band_m) == 80, "Prob::band_m moved: update the band test's byte offset");

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
  float rcp;          // TE rules' alpha factor fp32(1/(36 G_A G_B)) (SPEC 12.1; fp32(1/7225344) for G = 448)
  int rule;           // the operands' scale rule (nvfp4::Rule, common/codes.h): it picks the SPEC 12.1 alpha
  int tile_m, tile_n; // CTA tile of the GEMM kernel that will run (tile counts per group)
  int swap_wgrad;     // wgrad with the operands exchanged (swapped_256x128): Prob A = X_g columnwise [K, ru16(m_g)],
                      // B = dY_g columnwise [N, ru16(m_g)], so M = K and N = N; the output stays dW_g [N, K]
  Prob* probs;        // out: [E]
  int* prefix;        // out: [E+1] tile prefix sum
};

// The GEMM kernel's launch: the setup kernel's problems and tile list, and the plan (device/_dispatch.py).
struct LaunchArgs {
  const Prob* probs;
  const int* prefix;
  int E;
  Algorithm algorithm;
  Loader loader;
  Epilogue epilogue;
  int out_f32;
  // bit 0: C is read back (wgrad's accumulate); bit 1: the whole-line epilogue prefetches the tile's C rows into L2;
  // bit 2: the host encoded the output's tensor map (the TMA-store epilogues run)
  int accumulate;
  int grid_upper;  // host upper bound on the number of tiles (grid = min(this, resident blocks))
  int max_ctas;  // 0, or at most this many CTAs (a cluster counts its CTAs; at least one cluster runs)
  // The output as the host sees it, for the TMA-store epilogues' maps (out_maps.h): wgrad's [E, out_rows, out_cols],
  // fprop / dgrad [out_rows = T, out_cols], row stride ldd; the kind; whether a bias is fused.
  void* out;
  long long out_rows, out_cols, ldd;
  int kind;
  int has_bias;
};

// The output tile (rows x columns; a cluster's tile for the 2-CTA kernel) whose list the setup kernel builds for
// `algorithm` (device/_dispatch.py ALGORITHM_TILES holds the same table).
void tile_of(Algorithm algorithm, int* tile_m, int* tile_n);

void launch_setup(const SetupArgs& a, cudaStream_t s);
// The fused kernels (fused.cuh) for the fused algorithms, instantiated in fused_fast.cu (64 x 256, 128 x 256),
// fused_pair.cu (2-CTA clusters) and fused_exact.cu (exact mode). False, launching nothing, when the plan's epilogue
// cannot run this call (its output map does not apply or the driver refuses it).
bool launch_fused(const LaunchArgs& a, cudaStream_t s);
bool launch_fused_fast(const LaunchArgs& a, cudaStream_t s);
bool launch_fused_pair(const LaunchArgs& a, cudaStream_t s);
bool launch_fused_exact(const LaunchArgs& a, cudaStream_t s);
// Mode sm100 (gemm/sm100_simt.cu, SPEC 12.7): the loads loader and direct epilogue only (false otherwise).
bool launch_sm100(const LaunchArgs& a, cudaStream_t s);
// the algorithms over fp16 copies (swapped, exact_copies, exact_hybrid, copies_cutlass): copies.h

}  // namespace nvfp4_gemm
