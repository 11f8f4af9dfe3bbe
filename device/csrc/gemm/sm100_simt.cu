// Mode "sm100" (algorithm sm100_simt): SPEC 12.7 bit for bit on Hopper, i.e. oracle.gemm(model="sm100"): the chain of
// Blackwell tcgen05.mma kind::mxf4nvf4.block16 k64 steps in K order from +0, then the CUTLASS SM100 epilogue.
//
// One CTA of 256 threads computes a 64 x 64 output tile of one group (the setup kernel's problems and tile list,
// gemm/setup.cu); each thread owns a 4 x 4 block of it. Per k64 step the CTA decodes its 64 A rows and 64 B rows
// into shared memory as doubled E2M1 values (int8 -12..12, so a product of two is 4 x the E2M1 product), with per
// row and group the scale byte's parts and the group's nonzero-code mask; each thread then forms its 16 outputs'
// group sums with dp4a (exact integers) and runs SPEC 12.7's step in int64 arithmetic, in units of 2^-20 (every
// group value, truncated addend and accumulator is an integer multiple of 2^-20, SPEC 12.7). The K loop of a group
// has fewer than 2^13 steps (the host refuses a contraction of 2^19 or more), so the int64 sums stay below 2^62.
//
// The step's integer arithmetic is the whole cost (the tensor cores are idle): this kernel defines the bits, not the
// speed of a Hopper GEMM.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/pdl.cuh"
#include "common/swizzle.cuh"
#include "gemm/problem.h"
#include "gemm/sm100_step.cuh"
#include "gemm/tile_list.cuh"

namespace nvfp4_gemm {
namespace {

constexpr int kTile = 64;      // output rows and columns of a CTA tile
constexpr int kStepK = 64;     // K of one tcgen05 block-scaled MMA (four 16-element groups)
constexpr int kGroups = 4;
constexpr int kThreads = 256;  // 16 x 16 threads, each 4 x 4 outputs
using sm100::kUnitExp;
using sm100::kZeroExp;

// A scale byte's parts (SPEC 12.7, UE4M3: the sign bit ignored, 0x7F NaN): value m * 2^x (m 0..15), exponent e of the
// step (floor(log2) of a normal value, -6 of a subnormal one). Packed as m | (x + 16) << 4 | (e + 16) << 9 | nan << 14.
__device__ __forceinline__ uint32_t scale_parts(uint32_t byte) {
  const uint32_t b = byte & 0x7F, ef = b >> 3, mant = b & 7;
  const uint32_t nan = sm100::scale_is_nan(b);
  const uint32_t m = nan ? 0 : (ef > 0 ? mant + 8 : mant);
  const int e = sm100::scale_exp(b);  // and x = e - 3: m counts eighths of 2^e
  return m | static_cast<uint32_t>(e - 3 + 16) << 4 | static_cast<uint32_t>(e + 16) << 9 | nan << 14;
}

// Doubled E2M1 value of a code (SPEC 2.1 values x 2): 0, 1, 2, 3, 4, 6, 8, 12 with the sign bit 3.
__device__ __forceinline__ int doubled_e2m1(uint32_t code) {
  constexpr uint32_t kMag = 0xC8643210u;  // nibble i = doubled magnitude of code i (12 = 0xC)
  const int v = static_cast<int>((kMag >> (4 * (code & 7))) & 0xF);
  return (code & 8) ? -v : v;
}

// Shared memory of one k64 step: the tile's 64 A rows and 64 B rows as doubled values (16 words of four int8 per row),
// and per row and group the scale's parts (scale_parts) with the group's nonzero-code mask in bits 16..31.
struct Stage {
  uint32_t a[kTile][kStepK / 4 + 1];  // (+1: rows start in different banks)
  uint32_t b[kTile][kStepK / 4 + 1];
  uint32_t sa[kTile][kGroups];
  uint32_t sb[kTile][kGroups];
};

// Loads step j of rows [row0, row0 + 64) of one operand (packed rows of `k` codes, swizzled scales with cp4 128x4
// tile columns) into `vals` / `parts`; rows at or past `rows` and groups past K are zero (SPEC 12.7: the zero codes
// and scale bytes a TMA zero-fill presents).
__device__ __forceinline__ void load_operand(uint32_t (*vals)[kStepK / 4 + 1], uint32_t (*parts)[kGroups],
                                             const uint8_t* data, const uint8_t* scales, int rows, int k, int row0,
                                             int j) {
  const int cp4 = (k / 16 + 3) / 4;
  // 64 rows x 16 words: thread t decodes word t % 16 (four codes, two bytes) of rows t / 16, t / 16 + 16, ...
  for (int i = threadIdx.x; i < kTile * (kStepK / 4); i += kThreads) {
    const int r = i / (kStepK / 4), w = i % (kStepK / 4);
    const int row = row0 + r, col = j * kStepK + 4 * w;  // the word's first code
    uint32_t word = 0;
    if (row < rows && col < k) {
      const uint8_t* p = data + static_cast<long long>(row) * (k / 2) + col / 2;
      const uint32_t codes = p[0] | static_cast<uint32_t>(p[1]) << 8;  // codes col .. col + 3, low nibble first
#pragma unroll
      for (int c = 0; c < 4; ++c) word |= (static_cast<uint32_t>(doubled_e2m1(codes >> (4 * c))) & 0xFF) << (8 * c);
    }
    vals[r][w] = word;
  }
  __syncthreads();  // the words are in place: the masks below read them
  for (int i = threadIdx.x; i < kTile * kGroups; i += kThreads) {
    const int r = i / kGroups, g = i % kGroups;
    const int row = row0 + r, blk = j * kGroups + g;  // the scale's 16-block column
    uint32_t p = scale_parts(0);
    // 64-bit offset: a plane's swizzled scale buffer can reach 2^31 bytes (SPEC 8.2)
    if (row < rows && blk < k / 16)
      p = scale_parts(scales[nvfp4::swizzle_offset<int64_t>(row, blk, cp4)]);
    uint32_t mask = 0;  // bit 4 w + c: code c of word w of the group is nonzero
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t v = vals[r][4 * g + w];
#pragma unroll
      for (int c = 0; c < 4; ++c) mask |= (((v >> (8 * c)) & 0xFF) != 0 ? 1u : 0u) << (4 * w + c);
    }
    parts[r][g] = p | mask << 16;
  }
}

// The tile walk: CTAs stride over the setup kernel's tile list (prefix[E] tiles; group g owns tiles
// [prefix[g], prefix[g + 1]), tile t of a group at rows (t % tiles_m) * 64, columns (t / tiles_m) * 64).
__global__ void __launch_bounds__(kThreads) sm100_kernel(const Prob* probs, const int* prefix, int E, int accumulate,
                                                          int out_f32) {
  nvfp4::pdl_wait();
  __shared__ Stage st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // this thread's outputs: rows 4 ty .. +3, cols 4 tx .. +3
  const int total = prefix[E];
  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    int lo = 0, hi = E - 1;  // the group g with prefix[g] <= tile < prefix[g + 1]
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (prefix[mid] <= tile) lo = mid; else hi = mid - 1;
    }
    const Prob p = probs[lo];
    const int t = tile - prefix[lo];
    const int m0 = (t % p.tiles_m) * kTile, n0 = (t / p.tiles_m) * kTile;
    long long acc[4][4] = {};  // units of 2^-20
    bool nan[4][4] = {};
    const int steps = (p.K + kStepK - 1) / kStepK;
    for (int j = 0; j < steps; ++j) {
      __syncthreads();  // the previous step's stage has been read
      load_operand(st.a, st.sa, p.a, p.sa, p.M, p.K, m0, j);
      load_operand(st.b, st.sb, p.b, p.sb, p.N, p.K, n0, j);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        uint32_t av[kStepK / 4];  // row 4 ty + r's 64 doubled values, four per word
#pragma unroll
        for (int w = 0; w < kStepK / 4; ++w) av[w] = st.a[4 * ty + r][w];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          // SPEC 12.7's step for output (4 ty + r, 4 tx + c): the four group addends and exponents, C's exponent,
          // E = their maximum, every addend truncated to a multiple of 2^(E - 35), the exact sum rounded toward zero
          long long term[kGroups];
          int e = kZeroExp;
          if (acc[r][c] != 0) {  // C's exponent: floor(log2 |C|), C = acc * 2^-20
            const long long a = acc[r][c] < 0 ? -acc[r][c] : acc[r][c];
            e = 63 - __clzll(a) + kUnitExp;
          }
#pragma unroll
          for (int g = 0; g < kGroups; ++g) {
            const uint32_t pa = st.sa[4 * ty + r][g], pb = st.sb[4 * tx + c][g];
            int d = 0;  // 4 x the group's exact sum of E2M1 products (|d| <= 16 * 144)
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              d = __dp4a(static_cast<int>(av[4 * g + w]), static_cast<int>(st.b[4 * tx + c][4 * g + w]), d);
            }
            // the addend in units of 2^-20: d / 4 * (mA 2^xA) (mB 2^xB) = d mA mB 2^(xA + xB + 18); x >= -9, so the
            // shift is >= 0; |d mA mB| <= 2304 * 225 < 2^19 and the shift <= 28: below 2^47
            const int ma = pa & 15, mb = pb & 15;
            const int shift = static_cast<int>((pa >> 4) & 31) + static_cast<int>((pb >> 4) & 31) - 32 + 18;
            term[g] = static_cast<long long>(d * ma * mb) * (1ll << shift);
            // the group's exponent: its scales' when it has a nonzero product (the nonzero-code masks meet and both
            // scales are nonzero), else -139
            const bool live = ((pa & pb) >> 16) != 0 && ma > 0 && mb > 0;
            if (live) e = max(e, static_cast<int>((pa >> 9) & 31) + static_cast<int>((pb >> 9) & 31) - 32);
            nan[r][c] |= (((pa | pb) >> 14) & 1) != 0;  // a NaN scale makes the step (and the chain) NaN
          }
          acc[r][c] = sm100::step_sum(acc[r][c], term, e);  // a zero sum is +0 (an integer zero)
        }
      }
    }
    // the epilogue: acc * 2^-20 is exact in fp32 (24 significant bits, at least 2^-20)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = m0 + 4 * ty + r;
      if (row >= p.M) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = n0 + 4 * tx + c;
        if (col >= p.N) continue;
        const float a = nan[r][c] ? __int_as_float(0x7FC00000) : __fmul_rn(__ll2float_rn(acc[r][c]), 0x1p-20f);
        const long long at = static_cast<long long>(row) * p.ldd + col;
        if (out_f32) {
          float* d = static_cast<float*>(p.d) + at;
          *d = sm100::epilogue_value(a, p.alpha, p.bias, col, (accumulate & 1) ? d : nullptr);
        } else {
          static_cast<__nv_bfloat16*>(p.d)[at] = __float2bfloat16_rn(sm100::epilogue_value(a, p.alpha, p.bias, col, nullptr));
        }
      }
    }
  }
}

}  // namespace

bool launch_sm100(const LaunchArgs& a, cudaStream_t s) {
  if (a.loader != kLoaderLoads || a.epilogue != kEpilogueDirect) return false;
  launch_persistent<sm100_kernel, kThreads, 0>(a, s, a.out_f32);
  return true;
}

}  // namespace nvfp4_gemm
