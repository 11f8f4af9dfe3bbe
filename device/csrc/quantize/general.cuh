// Kernel templates: amax (SPEC 4) and the fused rowwise + columnwise quantizer (SPEC 5, 6, 7, 8, 10).
// Instantiated per input dtype in quantize/quantize_bf16.cu and quantize/quantize_f16_f32.cu.
#pragma once

#include <cstdint>

#include "quantize/numerics.cuh"
#include "quantize/layout.cuh"
#include "quantize/launch.h"

namespace nvfp4 {

// Column tiles of the quantize grid: they cover roundup(K, 128) so that the columnwise padding rows of the
// swizzled layout (plane rows K .. roundup(K,128)) have an owner even when a tile is only 64 columns wide.
template <typename T>
__host__ __device__ __forceinline__ int64_t quant_k_tiles(int64_t K) {
  return ceil_div(round_up(K, 128), TileGeom<T>::kTileK);
}
template <typename T>
__host__ __device__ __forceinline__ int64_t amax_k_tiles(int64_t K) {
  return ceil_div(K, TileGeom<T>::kTileK);
}

// The max of two non-negative values (absolute values, or maxima of them). TE rules: NaN-ignoring, fmaxf (SPEC 4.1,
// 5.2). torchao rules (kNanProp): NaN-propagating (4.1, 5.4); a NaN absolute value has a clear sign bit and a pattern
// above +Inf's, so the integer max of the patterns propagates it.
template <bool kNanProp>
__device__ __forceinline__ float abs_max(float m, float a) {
  if constexpr (kNanProp) return __uint_as_float(max(__float_as_uint(m), __float_as_uint(a)));
  else return fmaxf(m, a);
}

template <bool kNanProp = false>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = abs_max<kNanProp>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// End of an amax CTA (SPEC 4.1, 4.2): the maxima of all kWarps warps of the CTA (one value per thread, rowwise and
// columnwise; non-negative, and NaN-free unless kNanProp) folded into group g's amaxes in `a` (the columnwise one
// only when `a` has one). Non-negative floats order like their bit patterns, so an integer atomicMax is a float
// max; with kNanProp a NaN is first made the canonical 0x7FC00000 of SPEC 4.1, above every number and +Inf.
template <int kWarps, bool kNanProp = false>
__device__ __forceinline__ void cta_amax_atomic(float rmax, float cmax, const AmaxArgs& a, int g) {
  __shared__ float red[2][kWarps];
  const int t = threadIdx.x;
  rmax = warp_max<kNanProp>(rmax);
  cmax = warp_max<kNanProp>(cmax);
  if ((t & 31) == 0) {
    red[0][t >> 5] = rmax;
    red[1][t >> 5] = cmax;
  }
  __syncthreads();
  if (t == 0) {
    rmax = red[0][0];
    cmax = red[1][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      rmax = abs_max<kNanProp>(rmax, red[0][w]);
      cmax = abs_max<kNanProp>(cmax, red[1][w]);
    }
    if constexpr (kNanProp) {
      if (isnan(rmax)) rmax = __uint_as_float(0x7FC00000u);
      if (isnan(cmax)) cmax = __uint_as_float(0x7FC00000u);
    }
    atomicMax(reinterpret_cast<int*>(a.row_amax + g), __float_as_int(rmax));
    if (a.col_amax != nullptr) atomicMax(reinterpret_cast<int*>(a.col_amax + g), __float_as_int(cmax));
  }
}

// Element i of a 16-byte chunk held as four 32-bit words, as fp32 (exact; bit operations, so the chunk
// stays in registers).
__device__ __forceinline__ uint32_t chunk_word(const uint4& r, int w) {
  return w == 0 ? r.x : (w == 1 ? r.y : (w == 2 ? r.z : r.w));
}
template <typename T>
__device__ __forceinline__ float chunk_elem(const uint4& r, int i);
template <>
__device__ __forceinline__ float chunk_elem<__nv_bfloat16>(const uint4& r, int i) {
  const uint32_t w = chunk_word(r, i >> 1);
  return __uint_as_float((i & 1) ? (w & 0xFFFF0000u) : (w << 16));
}
template <>
__device__ __forceinline__ float chunk_elem<__half>(const uint4& r, int i) {
  const uint32_t w = chunk_word(r, i >> 1);
  return __half2float(__ushort_as_half((unsigned short)((i & 1) ? (w >> 16) : (w & 0xFFFFu))));
}

template <>
__device__ __forceinline__ float chunk_elem<float>(const uint4& r, int i) {
  return __uint_as_float(chunk_word(r, i));
}

// Values of one 16-byte chunk as fp32.
template <typename T>
__device__ __forceinline__ void chunk_to_f32(const uint4& raw, float (&v)[TileGeom<T>::kChunkElems]) {
#pragma unroll
  for (int i = 0; i < TileGeom<T>::kChunkElems; ++i) v[i] = chunk_elem<T>(raw, i);
}

// Word `i` (0..3, run-time) of a Philox output without indexing a register array dynamically.
__device__ __forceinline__ uint32_t philox_word(const Philox4& r, int i) {
  return i == 0 ? r.x[0] : (i == 1 ? r.x[1] : (i == 2 ? r.x[2] : r.x[3]));
}

// Scale byte position of compact (r, c) of a plane with `cols` compact scale columns (SPEC 8).
__device__ __forceinline__ int64_t scale_pos(int layout, int64_t r, int64_t c, int64_t cols) {
  const int64_t cp = round_up(cols, 4);
  if (layout == kSwizzled) return swizzle_offset(r, c, cp >> 2);
  return r * (layout == kPaddedCompact ? cp : cols) + c;
}

// ---------------------------------------------------------------------------------------------------------
// amax: one CTA of 128 threads per 128 x kTileK tile. Thread (chunk = t%16, rb = t/16) owns the 16 rows
// rb*16.. of one 16-byte column chunk, i.e. kChunkElems whole columnwise 16-blocks (SPEC 4.1, 4.2).
// ---------------------------------------------------------------------------------------------------------
// kNanProp: the torchao rules' NaN-propagating amax (SPEC 4.1), also of the RHT'd columnwise source (4.2).
template <typename T, bool kRHT, bool kNanProp = false>
__global__ void __launch_bounds__(128, 4) amax_kernel(AmaxArgs a) {
  using G = TileGeom<T>;
  // Tiles in reverse order: the quantize kernel that follows starts at the front of X, which this pass
  // read last and which is therefore still (partly) in L2.
  GroupView gv;
  int64_t kt;
  if (!resolve_grid_tile_reversed(a.offs, a.E, a.M, blockIdx.x, amax_k_tiles<T>(a.K), gv, kt)) return;
  const int t = threadIdx.x, chunk = t & 15, rb = t >> 4;
  const int64_t gcol = kt * G::kTileK + chunk * G::kChunkElems;
  const T* x = reinterpret_cast<const T*>(a.x);

  uint4 raw[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t r = gv.m0 + rb * 16 + i;  // group-local row
    raw[i] = make_uint4(0, 0, 0, 0);         // rows past the group are the zero padding of SPEC 6.2
    if (gcol < a.K && r < gv.m) raw[i] = __ldg(reinterpret_cast<const uint4*>(x + (gv.row0 + r) * a.K + gcol));
  }
  float rmax = 0.0f, cmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    float v[G::kChunkElems];
    chunk_to_f32<T>(raw[i], v);
#pragma unroll
    for (int e = 0; e < G::kChunkElems; ++e) rmax = abs_max<kNanProp>(rmax, fabsf(v[e]));  // SPEC 4.1
  }
  if constexpr (kRHT) {
#pragma unroll
    for (int e = 0; e < G::kChunkElems; ++e) {
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float w[G::kChunkElems];
        chunk_to_f32<T>(raw[i], w);
        v[i] = w[e];
      }
      rht16(v, a.rht_signs);  // SPEC 7, then SPEC 4.2 on the bf16-rounded result
#pragma unroll
      for (int i = 0; i < 16; ++i) cmax = abs_max<kNanProp>(cmax, fabsf(v[i]));
    }
  } else {
    cmax = rmax;  // SPEC 4.2: without RHT the columnwise amax is the rowwise amax
  }
  cta_amax_atomic<4, kNanProp>(rmax, cmax, a, gv.g);
}

// ---------------------------------------------------------------------------------------------------------
// Fused quantizer: one CTA of 256 threads per 128 x kTileK tile of X (a tile never straddles two groups).
//  1. Load: iteration it (0..7), thread t reads chunk t%16 of tile row it*16 + t/16 (a warp reads two 256-byte
//     rows, fully coalesced) and keeps it in registers; it also stores it to shared memory for step 3.
//  2. Rowwise plane (SPEC 6.1): the kLanesPerBlock lanes holding one 16-block reduce its max by shuffles.
//  3. Columnwise plane (SPEC 6.2): thread t owns tile column t%kTileK and kBlocksPerThread consecutive 16-row
//     blocks of it, reads them from shared memory (a warp reads 32 consecutive columns of one row: no bank
//     conflicts), applies the RHT (SPEC 7) and writes 8 bytes of X^T data per block.
// Padding scale bytes of the swizzled / padded-compact layouts (rows up to roundup(rows,128), scale columns up
// to roundup(C,4)) always fall inside the last tile of a group / of K, whose threads write them as 0 (SPEC 8.1 / 8.2).
// ---------------------------------------------------------------------------------------------------------
// SPEC 5.2 (TE rules: the plane's multiplier table mtab_p) or 5.4 / 5.5 (kTorchao): block max b -> the block's
// scale byte (sb) and encode multiplier.
template <bool kTorchao>
__device__ __forceinline__ float block_byte_and_multiplier(float b, const PlaneScale& ps, const TorchaoPlane& tp,
                                                           const float* mtab_p, uint32_t& sb) {
  if constexpr (kTorchao) {
    sb = torchao_scale_byte(b, tp);
    return torchao_multiplier(sb, tp);
  } else {
    sb = block_scale_byte(b, ps);
    return mtab_p[sb];
  }
}

// kTorchao: the torchao rules (SPEC 5.4 / 5.5 with 3.5 and NaN-propagating block maxima): per-block scale bytes and
// multipliers by torchao_scale_byte / torchao_multiplier instead of the table, elements encoded by torchao_code_rn.
// A NaN element's own payload never gives its code (its block's max, hence its multiplier, is NaN). With the RHT
// too: a NaN output of the butterfly lies in a block whose max is NaN, so the block's multiplier is NaN and gives the
// code (the multiplier comes first in the product, 3.5); the payload the butterfly gave it never reaches a byte.
template <typename T, bool kRHT, bool kTorchao = false>
__global__ void __launch_bounds__(256, 4) quantize_kernel(QuantArgs a) {
  using G = TileGeom<T>;
  constexpr int EPL = G::kChunkElems, LPB = G::kLanesPerBlock, NB = G::kBlocksPerRow, TK = G::kTileK;
  constexpr int kThreadsPerCol = 256 / TK;              // 2 (16-bit types) or 4 (fp32)
  constexpr int kBlocksPerThread = 8 / kThreadsPerCol;  // 16-row blocks per thread in the column pass
  __shared__ alignas(16) uint8_t tile[kTileM * 256];
  __shared__ float bmax_s[kTileM][NB];  // 16x16 blocks: per-(row, block) max
  __shared__ float tmax_s[8][NB];       // 16x16 blocks: per-tile max
  // SPEC 5.2 encode multiplier of every possible scale byte (0x00..0x7E; block scales are never negative
  // or NaN), per plane: one division per table entry instead of one per block.
  __shared__ float mtab[2][128];

  GroupView gv;
  int64_t kt;
  if (!resolve_grid_tile(a.offs, a.E, a.M, blockIdx.x, quant_k_tiles<T>(a.K), gv, kt)) return;
  const int t = threadIdx.x, chunk = t & 15, rsub = t >> 4;
  const int64_t k0 = kt * TK;
  const int64_t gcol = k0 + chunk * EPL;
  const bool col_ok = gcol < a.K;
  const T* x = reinterpret_cast<const T*>(a.x);
  const uint32_t ctr3 = a.offset + (uint32_t)gv.g;  // SPEC 10: (offset + g) & 0xffffffff

  const PlaneScale ps_row = make_plane_scale(a.row_data != nullptr ? a.row_amax[gv.g] : 0.0f, a.rule);
  const PlaneScale ps_col = make_plane_scale(a.col_data != nullptr ? a.col_amax[gv.g] : 0.0f, a.rule);
  [[maybe_unused]] TorchaoPlane tp_row{}, tp_col{};
  if constexpr (kTorchao) {
    tp_row = make_torchao_plane(a.row_data != nullptr ? a.row_amax[gv.g] : 0.0f, a.rule);
    tp_col = make_torchao_plane(a.col_data != nullptr ? a.col_amax[gv.g] : 0.0f, a.rule);
  } else {
    if (t < 128) mtab[0][t] = block_multiplier((uint32_t)t, ps_row);
    else mtab[1][t - 128] = block_multiplier((uint32_t)(t - 128), ps_col);
  }

  // ---- 1. load ----
  uint4 raw[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = it * 16 + rsub;
    const int64_t r = gv.m0 + row;
    raw[it] = make_uint4(0, 0, 0, 0);
    if (col_ok && r < gv.m) raw[it] = __ldg(reinterpret_cast<const uint4*>(x + (gv.row0 + r) * a.K + gcol));
  }
  float bm[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = it * 16 + rsub;
    *reinterpret_cast<uint4*>(tile + row * 256 + chunk * 16) = raw[it];
    float v[EPL];
    chunk_to_f32<T>(raw[it], v);
    float m = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) m = abs_max<kTorchao>(m, fabsf(v[e]));  // SPEC 5.2 / 5.4
#pragma unroll
    for (int o = 1; o < LPB; o <<= 1) m = abs_max<kTorchao>(m, __shfl_xor_sync(0xffffffffu, m, o));
    bm[it] = m;
    if (a.block2d && (chunk % LPB) == 0) bmax_s[row][chunk / LPB] = m;
  }
  __syncthreads();
  if (a.block2d) {  // SPEC 6.3: one max per 16x16 tile
    if (t < 8 * NB) {
      const int tb = t / NB, cb = t % NB;
      float m = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) m = abs_max<kTorchao>(m, bmax_s[tb * 16 + i][cb]);
      tmax_s[tb][cb] = m;
    }
    __syncthreads();
  }

  // ---- 2. rowwise plane of X (SPEC 6.1) ----
  if (a.row_data != nullptr) {
    const PlaneScale& ps = ps_row;
    const int64_t C = a.K / 16;
    const int64_t pad_rows = round_up(gv.m, kTileM);
    const int64_t cp = round_up(C, 4);
    const int blk_local = chunk / LPB;
    const int64_t blk = k0 / 16 + blk_local;
    const bool lead = (chunk % LPB) == 0;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int row = it * 16 + rsub;
      const int64_t r = gv.m0 + row;
      if (r < gv.m && col_ok) {
        const float b = a.block2d ? tmax_s[row >> 4][blk_local] : bm[it];
        uint32_t sb;
        const float mult = block_byte_and_multiplier<kTorchao>(b, ps, tp_row, mtab[0], sb);
        float v[EPL];
        // re-read the chunk from shared memory rather than keeping raw[] live across the barrier
        chunk_to_f32<T>(*reinterpret_cast<const uint4*>(tile + row * 256 + chunk * 16), v);
        uint32_t packed = 0;
        bool special = false;  // a NaN or Inf element: only then can the product be NaN
#pragma unroll
        for (int e = 0; e < EPL; ++e) special |= !(fabsf(v[e]) < INFINITY);
        if (a.sr) {
          const Philox4 rnd = philox4x32_10((uint32_t)blk, (uint32_t)r, 0u, ctr3, a.seed_lo, a.seed_hi);
#pragma unroll
          for (int e = 0; e < EPL; ++e) {
            // element index inside the 16-block is (chunk % LPB) * EPL + e; word (index / 4), byte (index % 4)
            const uint32_t word = philox_word(rnd, ((chunk % LPB) * EPL + e) >> 2);
            const uint32_t u8 = (word >> ((e & 3) * 8)) & 0xFFu;
            // (torchao: its clamp to [-6, 6] changes no SR code, and a NaN product is 0x7 whatever its payload)
            packed |= e2m1_sr(__fmul_rn(v[e], mult), u8) << (4 * e);
          }
        } else if (kTorchao) {
#pragma unroll
          for (int e = 0; e < EPL; ++e) packed |= torchao_code_rn(v[e], mult) << (4 * e);
        } else if (special) {
#pragma unroll
          for (int e = 0; e < EPL; ++e) packed |= e2m1_rn(__fmul_rn(v[e], mult)) << (4 * e);
        } else {
#pragma unroll
          for (int e = 0; e < EPL; ++e) packed |= e2m1_rn_not_nan(__fmul_rn(v[e], mult)) << (4 * e);
        }
        uint8_t* dst = a.row_data + gv.row_data + r * (a.K / 2) + gcol / 2;
        if constexpr (EPL == 8) *reinterpret_cast<uint32_t*>(dst) = packed;
        else *reinterpret_cast<uint16_t*>(dst) = (uint16_t)packed;
        if (lead) a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = (uint8_t)sb;
      } else if (lead && a.layout != kCompact && r < pad_rows && blk < cp) {
        a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = 0;  // SPEC 8.1 / 8.2 padding
      }
    }
  }

  // ---- 3. columnwise plane of X^T (SPEC 6.2, 7) ----
  if (a.col_data != nullptr) {
    const PlaneScale& ps = ps_col;
    const int c = t % TK;
    const int64_t k = k0 + c;                  // plane row
    const int64_t cblocks = ceil_div(gv.m, 16);  // compact scale columns = Mp/16
    const int64_t kpad = round_up(a.K, 128);
    const int64_t cp = round_up(cblocks, 4);
    const int jbase = (t / TK) * kBlocksPerThread;
#pragma unroll
    for (int jj = 0; jj < kBlocksPerThread; ++jj) {
      const int j = jbase + jj;                   // 16-row block inside the tile
      const int64_t jg = gv.m0 / 16 + j;          // plane column block (padded-token axis)
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = to_f32(reinterpret_cast<const T*>(tile + (j * 16 + i) * 256)[c]);
      if constexpr (kRHT) rht16(v, a.rht_signs);
      float b = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) b = abs_max<kTorchao>(b, fabsf(v[i]));
      if (a.block2d) {
        if constexpr (kRHT) {  // 16x16 tile of the RHT'd plane: the 16 plane rows are 16 adjacent lanes
#pragma unroll
          for (int o = 1; o < 16; o <<= 1) b = abs_max<kTorchao>(b, __shfl_xor_sync(0xffffffffu, b, o));
        } else {
          b = tmax_s[j][c / 16];  // same 16x16 tile of X as the rowwise plane
        }
      }
      if (k < a.K && jg < cblocks) {
        uint32_t sb;
        const float mult = block_byte_and_multiplier<kTorchao>(b, ps, tp_col, mtab[1], sb);
        uint64_t packed = 0;
        bool special = false;
#pragma unroll
        for (int i = 0; i < 16; ++i) special |= !(fabsf(v[i]) < INFINITY);
        if (a.sr) {
          const Philox4 rnd = philox4x32_10((uint32_t)jg, (uint32_t)k, 1u, ctr3, a.seed_lo, a.seed_hi);
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const uint32_t u8 = (rnd.x[i >> 2] >> ((i & 3) * 8)) & 0xFFu;
            packed |= (uint64_t)e2m1_sr(__fmul_rn(v[i], mult), u8) << (4 * i);
          }
        } else if (kTorchao) {
#pragma unroll
          for (int i = 0; i < 16; ++i) packed |= (uint64_t)torchao_code_rn(v[i], mult) << (4 * i);
        } else if (special) {
#pragma unroll
          for (int i = 0; i < 16; ++i) packed |= (uint64_t)e2m1_rn(__fmul_rn(v[i], mult)) << (4 * i);
        } else {
#pragma unroll
          for (int i = 0; i < 16; ++i) packed |= (uint64_t)e2m1_rn_not_nan(__fmul_rn(v[i], mult)) << (4 * i);
        }
        *reinterpret_cast<uint64_t*>(a.col_data + gv.col_data + k * (cblocks * 8) + jg * 8) = packed;
        a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = (uint8_t)sb;
      } else if (a.layout != kCompact && k < kpad && jg < cp) {
        a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = 0;  // SPEC 8.1 / 8.2 padding
      }
    }
  }
}

}  // namespace nvfp4
