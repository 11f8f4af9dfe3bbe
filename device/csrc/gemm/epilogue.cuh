// The grouped GEMM's epilogues: SPEC 12.2's y = alpha * acc; y += C; y += bias; cast, from wgmma's m64nN
// accumulator fragments to the output. store_tile writes the fragments directly (any alignment); the others go
// through shared memory so that global writes are whole lines or bulk copies: store_tile_staged (bulk copies),
// store_tile_lines (fp32, whole 128-byte lines), store_tile_tma / store_tile_tma_bf16 (TMA store boxes through a
// tensor map of the output, out_maps.h). S: the kernel shape (R accumulators per thread, WN columns per warp, the
// buffer sizes).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/problem.h"
#include "gemm/ptx.cuh"

namespace nvfp4_gemm {

// Epilogue (SPEC 12.2 order): y = alpha*acc; y += C; y += bias; cast. SM100: SPEC 12.7's order instead (mode sm100,
// gemm/sm100_copies.cu): z = alpha*acc, or fma(alpha, acc, bias) with a bias; then C + z, or +0 + z without C and bias.
// Accumulator layout of wgmma m64nN (f32):
// register 4j+2h+e of thread (warp v, lane l) is row 16v + l/4 + 8h, column 8j + 2(l%4) + e.
// PAIRS: N and the row pitch are even (always, except fprop with an odd number of weight rows per group), so each
// column pair (col, col + 1) exists whenever col does and is stored as one aligned 8- / 4-byte word (the base is
// 16-byte aligned); otherwise every element is stored alone and column col + 1 is checked against N.
template <int WN, bool OUT_F32, bool PAIRS, bool SM100 = false>
__device__ __forceinline__ void store_tile_impl(const float (&acc)[WN / 2], const Prob& p, int row_base, int col_base,
                                                int accumulate) {
  const float alpha = p.alpha;
#pragma unroll
  for (int j = 0; j < WN / 8; ++j) {
    const int col = col_base + 8 * j;
    if (col >= p.N) continue;
    const bool second = PAIRS || col + 1 < p.N;
    // the bias of the pair (0 for a column past N or without a bias; SPEC 12.7 adds it inside the FMA)
    float b0 = 0.0f, b1 = 0.0f;
    if (p.bias) {
      b0 = p.bias[col];
      if (second) b1 = p.bias[col + 1];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      if (row >= p.M) continue;
      const float a0 = acc[4 * j + 2 * h], a1 = acc[4 * j + 2 * h + 1];
      float y0, y1;
      if constexpr (SM100) {
        y0 = p.bias ? __fmaf_rn(alpha, a0, b0) : __fmul_rn(alpha, a0);
        y1 = p.bias ? __fmaf_rn(alpha, a1, b1) : __fmul_rn(alpha, a1);
      } else {
        y0 = __fmul_rn(alpha, a0);
        y1 = __fmul_rn(alpha, a1);
      }
      const long long o = static_cast<long long>(row) * p.ldd + col;
      const bool with_c = OUT_F32 && accumulate;
      if (OUT_F32) {
        float* dp = static_cast<float*>(p.d) + o;
        if (with_c) {  // SPEC 12.2: y + C; SPEC 12.7: C + z (the same RN sum)
          if constexpr (PAIRS) {
            const float2 c = *reinterpret_cast<const float2*>(dp);
            y0 = __fadd_rn(y0, c.x);
            y1 = __fadd_rn(y1, c.y);
          } else {
            y0 = __fadd_rn(y0, dp[0]);
            if (second) y1 = __fadd_rn(y1, dp[1]);
          }
        }
      }
      if constexpr (SM100) {
        if (!with_c && !p.bias) {  // +0 + z
          y0 = __fadd_rn(0.0f, y0);
          y1 = __fadd_rn(0.0f, y1);
        }
      } else if (p.bias) {
        y0 = __fadd_rn(y0, b0);
        y1 = __fadd_rn(y1, b1);
      }
      if (OUT_F32) {
        float* dp = static_cast<float*>(p.d) + o;
        if constexpr (PAIRS) {
          *reinterpret_cast<float2*>(dp) = make_float2(y0, y1);
        } else {
          dp[0] = y0;
          if (second) dp[1] = y1;
        }
      } else {
        __nv_bfloat16* dp = static_cast<__nv_bfloat16*>(p.d) + o;
        if constexpr (PAIRS) {
          *reinterpret_cast<__nv_bfloat162*>(dp) = __floats2bfloat162_rn(y0, y1);
        } else {
          dp[0] = __float2bfloat16_rn(y0);
          if (second) dp[1] = __float2bfloat16_rn(y1);
        }
      }
    }
  }
}

template <int WN, bool OUT_F32, bool SM100 = false>
__device__ __forceinline__ void store_tile(const float (&acc)[WN / 2], const Prob& p, int row_base, int col_base,
                                           int accumulate) {
  if (((p.N | p.ldd) & 1) == 0)
    store_tile_impl<WN, OUT_F32, true, SM100>(acc, p, row_base, col_base, accumulate);
  else
    store_tile_impl<WN, OUT_F32, false, SM100>(acc, p, row_base, col_base, accumulate);
}

// Whether store_tile_staged can write this group's output: the bulk copies need 16-byte aligned global rows and row
// lengths (the tile's first column is a multiple of 128), and accumulate (C read back) stays on the direct path.
template <bool OUT_F32>
__device__ __forceinline__ bool staged_epilogue_ok(const Prob& p, int accumulate) {
  constexpr int kSize = OUT_F32 ? 4 : 2;
  return !accumulate && ((reinterpret_cast<uintptr_t>(p.d) | static_cast<uintptr_t>(p.ldd * kSize) |
                          static_cast<uintptr_t>(p.N * kSize)) & 15u) == 0;
}

// SPEC 12.2's epilogue value of an accumulator pair without C: y = RN(alpha * acc), then y = RN(y + b) when BIAS (b:
// the bias of the pair's columns, bias_pair); register 4j + 2h + e of the wgmma m64nWN layout. The staged and the bf16
// TMA-store epilogues write it.
// BIAS is a template parameter: the callers branch once per tile on p.bias (warp-uniform). With the test per pair
// and the loads between the stores (volatile asm with memory clobbers: no load moves above one), every pair's FADD
// would wait on its load's scoreboard, also where the load is predicated off (no bias), and the bf16 chunk writes
// took ~0.45 us per 64 columns (ncu and a per-chunk trace). With a bias the callers still load each pair's two
// values between the stores (once per column pair, for both rows h): preloading a chunk's values spilled registers.
template <class S, bool BIAS>
__device__ __forceinline__ float2 epilogue_pair(const float (&acc)[S::R], int j, int h, float alpha, float2 b) {
  float y0 = __fmul_rn(alpha, acc[4 * j + 2 * h]), y1 = __fmul_rn(alpha, acc[4 * j + 2 * h + 1]);
  if constexpr (BIAS) {
    y0 = __fadd_rn(y0, b.x);
    y1 = __fadd_rn(y1, b.y);
  }
  return make_float2(y0, y1);
}

// The same rounded to a bf16 pair (the first column in the low half), as one 32-bit word.
template <class S, bool BIAS>
__device__ __forceinline__ uint32_t epilogue_bf16x2(const float (&acc)[S::R], int j, int h, float alpha, float2 b) {
  const float2 y = epilogue_pair<S, BIAS>(acc, j, h, alpha, b);
  const __nv_bfloat162 v = __floats2bfloat162_rn(y.x, y.y);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The bias of columns col, col + 1 (both exist whenever col < N: the callers' rows have an even length); 0 past N,
// whose columns no epilogue stores, and without BIAS.
template <bool BIAS>
__device__ __forceinline__ float2 bias_pair(const Prob& p, int col) {
  if constexpr (BIAS) {
    if (col < p.N) return make_float2(p.bias[col], p.bias[col + 1]);
  }
  return make_float2(0.0f, 0.0f);
}

// Staged epilogue of one MMA warp (SPEC 12.2 order, as store_tile without accumulate: y = alpha*acc; y += bias;
// cast). The warp owns rows row0 + [0, 16) and columns col0 + [0, WN) of the output (accumulator layout of
// wgmma m64nWN: register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e). Per pass, kEpiRowBytes of
// each row go into the warp's buffer `buf` (row pitch kEpiRowBytes + 32 (fp32) or + 16 (bf16): the 8 rows of one
// store instruction then fall on distinct banks, 2 wavefronts per fp32 pair store, 1 per bf16 pair), then lane 0
// bulk-copies the rows inside the problem (row < M, column < N) to global memory and commits one bulk group. The
// buffer is rewritten only after that group has finished reading it (wait_group.read): within a tile the warp may
// wait there (fp32: 4 passes, bf16: 2), across tiles the copies have usually drained.
template <class S, bool OUT_F32, bool BIAS>
__device__ __forceinline__ void store_tile_staged(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                  uint32_t buf, int lane) {
  constexpr int kSize = OUT_F32 ? 4 : 2;
  constexpr int kCols = S::kEpiRowBytes / kSize;  // columns per pass
  constexpr int kPasses = S::WN / kCols;
  constexpr int kPitch = S::kEpiRowBytes + (OUT_F32 ? 32 : 16);
  const int r = lane >> 2, c = lane & 3;
  const float alpha = p.alpha;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    if (lane == 0) bulk_wait_read<0>();  // the previous pass's copies have read the buffer
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < kCols / 8; ++jj) {
      const int j = pass * (kCols / 8) + jj;
      // (N * size is a multiple of 16 here, staged_epilogue_ok: col + 1 < N whenever col < N)
      const float2 b = bias_pair<BIAS>(p, col0 + 8 * j + 2 * c);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a = buf + (r + 8 * h) * kPitch + (8 * jj + 2 * c) * kSize;
        if constexpr (OUT_F32) {
          const float2 y = epilogue_pair<S, BIAS>(acc, j, h, alpha, b);
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(y.x), "f"(y.y) : "memory");
        } else {
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(epilogue_bf16x2<S, BIAS>(acc, j, h, alpha, b))
                       : "memory");
        }
      }
    }
    fence_proxy_async();  // this lane's stores -> the async proxy of the bulk copies
    __syncwarp();
    if (lane == 0) {
      const int c0 = col0 + pass * kCols;
      const int cols = min(kCols, p.N - c0);
      if (cols > 0) {
        const int rows = min(16, p.M - row0);  // <= 0 for a warp past the problem's rows
        for (int rr = 0; rr < rows; ++rr) {
          char* dst = static_cast<char*>(p.d) + (static_cast<long long>(row0 + rr) * p.ldd + c0) * kSize;
          bulk_copy_to_global(dst, buf + rr * kPitch, static_cast<uint32_t>(cols * kSize));
        }
      }
      bulk_commit();
    }
  }
}

// Whether store_tile_lines can write this group's fp32 output: rows of whole 16-byte pieces (N and the row pitch
// multiples of 4), a 16-byte aligned base and bias.
__device__ __forceinline__ bool lines_epilogue_ok(const Prob& p) {
  return ((p.N | p.ldd) & 3) == 0 &&
         ((reinterpret_cast<uintptr_t>(p.d) | reinterpret_cast<uintptr_t>(p.bias)) & 15u) == 0;
}

// accumulate (C read back, wgrad's main_grad) with the whole-line epilogue: lanes 0-15 of an MMA warp ask the L2 to
// fetch the C rows the warp will read at the end of this tile (row0 + lane, columns col0 + [0, WN) clipped to N), so
// that the epilogue's loads hit L2 instead of waiting on DRAM after the K loop. A hint only: no data is written and
// nothing waits for it. `bulk prefetch` needs 16-byte aligned rows and sizes, which lines_epilogue_ok guarantees (N,
// ldd multiples of 4 fp32; col0 a multiple of 128).
template <class S>
__device__ __forceinline__ void prefetch_tile_c_lines(const Prob& p, int row0, int col0, int lane) {
  const int row = row0 + lane;
  const int cols = min(S::WN, p.N - col0);
  if (lane < 16 && row < p.M && cols > 0) {
    const float* src = static_cast<const float*>(p.d) + static_cast<long long>(row) * p.ldd + col0;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(static_cast<uint32_t>(cols * 4))
                 : "memory");
  }
}

// RN(alpha * acc) of columns [32 c, 32 c + 32) of an MMA warp's 16 rows into its 16 x 128-byte buffer (accumulator
// layout of wgmma m64nWN: register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e): lane l's pair of
// columns 8 jj + 2 q, + 1 (q = l % 4) is 8 bytes of 16-byte piece k = 2 jj + q / 2 of its row lr. A half-warp's
// 8-byte stores (rows lr..lr+3, one jj each) then hit 32 distinct banks, 2 wavefronts per store, when
//   - piece k sits at slot k ^ (2 lr mod 8) (store_tile_lines, whose read-back is conflict-free too): every row stores
//     the same jj, and the 4 rows' pairs of slots are distinct;
//   - TMA_SWIZZLE (a tensor map's 128-byte swizzle, store_tile_tma): piece k sits at slot k ^ (lr mod 8), and rows lr
//     and lr ^ 1 would share their pair of slots if they stored the same jj (4 wavefronts per store, ncu), so an odd
//     row stores jj ^ 2 where an even row stores jj: the slot pairs jj ^ (lr / 2 mod 4) ^ (2 (lr mod 2)) of 4
//     consecutive rows are distinct. The odd rows' registers come by selects.
template <class S, bool TMA_SWIZZLE>
__device__ __forceinline__ void write_chunk_f32(const float (&acc)[S::R], int c, float alpha, uint32_t buf, int lane) {
  const int q = lane & 3, r = lane >> 2;
  const bool odd = TMA_SWIZZLE && (r & 1);  // (lr = r + 8 h has r's parity)
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int jj = odd ? i ^ 2 : i;
    const int j = 4 * c + i, j_odd = 4 * c + (i ^ 2);  // (the registers of jj, both a compile-time index)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = r + 8 * h;
      const int k = 2 * jj + (q >> 1);
      const int slot = k ^ (TMA_SWIZZLE ? (lr & 7) : ((2 * lr) & 7));
      const uint32_t a = buf + lr * 128 + (slot << 4) + ((q & 1) << 3);
      const float x0 = odd ? acc[4 * j_odd + 2 * h] : acc[4 * j + 2 * h];
      const float x1 = odd ? acc[4 * j_odd + 2 * h + 1] : acc[4 * j + 2 * h + 1];
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(__fmul_rn(alpha, x0)), "f"(__fmul_rn(alpha, x1))
                   : "memory");
    }
  }
}

// Whole-line epilogue of one MMA warp (kLinesEpi), fp32 output (SPEC 12.2 order, as store_tile: y = alpha*acc;
// y += C; y += bias). The warp owns rows row0 + [0, 16), columns col0 + [0, WN) (accumulator layout of wgmma m64nWN:
// register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e). Per chunk of 32 columns it writes
// RN(alpha * acc) into its 16 x 128-byte buffer in that layout, then reads the buffer back as one 16-byte piece per
// lane (lanes 8i..8i+7: pieces 0..7 of one row), adds C and the bias on those pieces and stores them: every global
// access is 4 whole 128-byte rows. Piece k of buffer row r sits at slot k ^ (2r mod 8): the half-warp's 8-byte
// fragment stores (rows r..r+3) and the read-back are then free of bank conflicts. Runs in every MMA warp, also in
// one whose rows all lie past M (no store then): its __syncwarp must not sit in a branch on per-warp values (the
// fused kernel's epilogue says why).
template <class S>
__device__ __forceinline__ void store_tile_lines(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                 uint32_t buf, int lane, int accumulate) {
  const int piece = lane & 7, prow = lane >> 3;
  const float alpha = p.alpha;
#pragma unroll
  for (int c = 0; c < S::WN / 32; ++c) {  // chunks of 32 columns
    __syncwarp();                // the previous chunk's read-back is done with the buffer
    write_chunk_f32<S, false>(acc, c, alpha, buf, lane);
    __syncwarp();
    const int col = col0 + 32 * c + 4 * piece;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i > 0) __syncwarp();  // one piece in flight at a time (fewer live registers next to the accumulators)
      const int lr = prow + 4 * i;
      const uint4 v = lds128(buf + lr * 128 + ((piece ^ ((2 * lr) & 7)) << 4));
      const int row = row0 + lr;
      if (row < p.M && col < p.N) {  // N % 4 == 0: the whole piece lies inside the row
        float* dp = static_cast<float*>(p.d) + static_cast<long long>(row) * p.ldd + col;
        float4 y = make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
        if (accumulate) {
          const float4 cv = *reinterpret_cast<const float4*>(dp);
          y = make_float4(__fadd_rn(y.x, cv.x), __fadd_rn(y.y, cv.y), __fadd_rn(y.z, cv.z), __fadd_rn(y.w, cv.w));
        }
        if (p.bias) {
          const float4 b = *reinterpret_cast<const float4*>(p.bias + col);
          y = make_float4(__fadd_rn(y.x, b.x), __fadd_rn(y.y, b.y), __fadd_rn(y.z, b.z), __fadd_rn(y.w, b.w));
        }
        *reinterpret_cast<float4*>(dp) = y;
      }
    }
  }
}

// TMA-store epilogue of one MMA warp (kTmaEpi; wgrad's fp32 output, no C read back, no bias: SPEC 12.2's
// y = RN(alpha * acc), as store_tile_lines). Per chunk of 32 columns (128 bytes) of its 16 rows the warp writes y into
// a box buffer of 16 x 128 bytes in the tensor map's 128-byte swizzle (16-byte piece k of row r at slot k ^ (r mod 8);
// the buffer is 1024-byte aligned; write_chunk_f32 orders the odd rows' stores so that they hit 32 distinct banks),
// and lane 0 stores the box {32 columns, 16 rows, group} through `map` ([E, M, N]: rows past M and columns past N are
// clipped by the map, nothing else is written). Chunk c uses buffer c mod kTmaEpi, and first waits until the store
// that last read it has (every chunk commits one bulk group, empty when nothing was stored, so the count of groups
// still reading says which).
template <class S>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[S::R], const Prob& p, int group, int row0, int col0,
                                               uint32_t bufs, int lane, const CUtensorMap* map) {
  constexpr int kBufs = S::kTmaEpi > 0 ? S::kTmaEpi : 1;  // (instantiated, never run, for shapes without it)
  const float alpha = p.alpha;
  const bool rows_in = row0 < p.M;
#pragma unroll
  for (int c = 0; c < S::WN / 32; ++c) {
    const uint32_t buf = bufs + (c % kBufs) * S::kTmaBoxBytes;
    if (lane == 0) bulk_wait_read<kBufs - 1>();  // the store that last read this buffer (kBufs chunks ago) is done
    __syncwarp();
    write_chunk_f32<S, true>(acc, c, alpha, buf, lane);
    fence_proxy_async();  // this lane's stores -> the async proxy of the TMA store
    __syncwarp();
    if (lane == 0) {
      if (rows_in && col0 + 32 * c < p.N) tma_store_3d(map, buf, col0 + 32 * c, row0, group);
      bulk_commit();
    }
  }
}

// TMA-store epilogue of one MMA warp for bf16 output (kStagedEpi with kTmaEpi; no C: SPEC 12.2's y = alpha * acc;
// y += bias; RN to bf16, as store_tile_staged). Per chunk of 64 columns (128 bytes) of its 16 rows the warp writes y
// into a 16 x 128-byte box buffer in the map's 128-byte swizzle (the bf16 pair of columns 8 jj + 2 q, +1 of row lr,
// jj < 8, is 4 bytes of 16-byte piece jj, at slot jj ^ (lr mod 8): a warp's 32 stores of one (jj, h) hit 32 distinct
// banks), and lane 0 stores the box {64 columns, 16 rows} at row p.row0 + row0 of the 2D map (fprop / dgrad: [T,
// cols]; wgrad: E N rows of K, plane g from row g N), which clips columns past N (cols) and nothing else. So only a
// warp whose 16 rows all lie inside the group stores boxes (full_rows); a warp whose rows cross the group's last row M
// (every warp runs the same loop) copies its rows below M from the box buffer to global memory itself, one 16-byte
// piece (8 columns; N is a multiple of 8) per lane and step. Chunk c uses buffer c mod kTmaEpi after the store that
// last read it has (one bulk group per chunk; the direct copies' shared-memory loads have completed before the
// __syncwarp that precedes its next use).
template <class S, bool BIAS>
__device__ __forceinline__ void store_tile_tma_bf16(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                    uint32_t bufs, int lane, const CUtensorMap* map) {
  constexpr int kBufs = S::kTmaEpi > 0 ? S::kTmaEpi : 1;
  const float alpha = p.alpha;
  const bool full_rows = row0 + 16 <= p.M;
  const int q = lane & 3, r = lane >> 2;
#pragma unroll
  for (int c = 0; c < S::WN / 64; ++c) {
    const uint32_t buf = bufs + (c % kBufs) * S::kTmaBoxBytes;
    if (lane == 0) bulk_wait_read<kBufs - 1>();  // the store that last read this buffer (kBufs chunks ago) is done
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * c + jj;
      // (N is a multiple of 8 here, the map's 16-byte pitch: col + 1 < N whenever col < N)
      const float2 b = bias_pair<BIAS>(p, col0 + 8 * j + 2 * q);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = r + 8 * h;
        const uint32_t a = buf + lr * 128 + ((jj ^ (lr & 7)) << 4) + 4 * q;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(epilogue_bf16x2<S, BIAS>(acc, j, h, alpha, b))
                     : "memory");
      }
    }
    fence_proxy_async();  // this lane's stores -> the async proxy of the TMA store
    __syncwarp();
    if (!full_rows) {  // (warp-uniform; no __syncwarp inside)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = lane + 32 * k, lr = i >> 3, slot = i & 7;
        const int col = col0 + 64 * c + 8 * (slot ^ (lr & 7));
        if (row0 + lr < p.M && col < p.N) {
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.d) + static_cast<long long>(row0 + lr) * p.ldd + col;
          *reinterpret_cast<uint4*>(dst) = lds128(buf + lr * 128 + (slot << 4));
        }
      }
    }
    if (lane == 0) {
      if (full_rows && col0 + 64 * c < p.N) tma_store_2d(map, buf, col0 + 64 * c, p.row0 + row0);
      bulk_commit();
    }
  }
}

}  // namespace nvfp4_gemm
