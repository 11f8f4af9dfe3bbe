// The 4over6 quantizer (SPEC 5.6): bf16 input, rule "te", round to nearest, no RHT, 1x16 or 16x16 blocks, the rowwise
// plane of X and the columnwise plane of X^T in one kernel (the tile, grid and output layout of quantize_kernel in
// general.cuh; device/_dispatch.py plan_quantize runs it for every 4over6 call).
//
// Every block is quantized twice, with its amax mapped to E2M1's 6 (byte_6) and to 4 (byte_4, a 1.5x larger scale);
// each candidate's error over the block row is summed in element order, and the candidate with the smaller error is
// written (a tie or a NaN keeps map-to-6). With 16x16 blocks the 16 row errors of a tile are summed as SPEC 5.6's tree
// before the comparison:
//  * rowwise plane: a block row is split over a lane pair (8 elements each), so the even lane's partial sum is handed
//    to the odd lane, which continues it (the element order of 5.6). 1x16 blocks write the kept candidate's codes at
//    once; 16x16 blocks put the row errors in shared memory, one thread per tile forms the two tree sums, and a second
//    pass encodes each row with the tile's chosen multiplier.
//  * columnwise plane: a thread holds a whole 16-element block row (one column of X), so the sum is sequential; the
//    16 plane rows of a 16x16 tile are 16 adjacent lanes, whose errors are summed by xor shuffles with offsets
//    8, 4, 2, 1 (every lane forms the same tree as 5.6, since each fp32 add is commutative).
// The input-domain error ((p * A) / 6G) - x is formed per block row from two quotients instead of one division per
// element (fo6_plane_values); the exact per-element form is kept for an amax outside [2^-100, 2^100].
#pragma once

#include <cstdint>

#include "quantize/general.cuh"
#include "quantize/layout.cuh"
#include "quantize/numerics.cuh"

namespace nvfp4 {

// One plane's constants under 4over6 (SPEC 5.6).
struct Fo6Plane {
  float amax;     // A, as given (0, +Inf or NaN included)
  float s_enc;    // s_enc_te_g(A, 6G)
  float six_g;    // fp32(6G): 2688 or 1536
  bool by_parts;  // A in [2^-100, 2^100]: the input-domain values come from fo6_plane_values (exact there)
};

__device__ __forceinline__ Fo6Plane make_fo6_plane(float amax, float six_g) {
  return Fo6Plane{amax, s_enc_te_g(amax, six_g), six_g, amax >= 0x1p-100f && amax <= 0x1p100f};
}

// SPEC 5.6: a block's map-to-6 and map-to-4 scale bytes from its amax b (b >= 0, never NaN under rule "te"; the
// bytes are 0x00..0x7E).
__device__ __forceinline__ void fo6_scale_bytes(float b, float s_enc, uint32_t& byte6, uint32_t& byte4) {
  const float base = __fmul_rn(__fdiv_rn(b, 6.0f), s_enc);
  byte6 = e4m3_scale(fminf(base, 448.0f));
  byte4 = e4m3_scale(fminf(__fmul_rn(base, 1.5f), 448.0f));
}

// One candidate of one block row: its decoded scale d, encode multiplier m (the plane's table, SPEC 5.6's
// fminf(1 / (d * S_dec), FLT_MAX)) and, for the input-domain error, w1 = ((d * A) / 6G) and w15 = ((1.5 d * A) / 6G).
struct Fo6Candidate {
  float d, mult, w1, w15;
};

template <bool kFastMath>
__device__ __forceinline__ Fo6Candidate make_candidate(uint32_t byte, const float* mtab, const Fo6Plane& fp) {
  Fo6Candidate c{e4m3_value(byte), mtab[byte], 0.0f, 0.0f};
  if (!kFastMath && fp.by_parts) {
    c.w1 = __fdiv_rn(__fmul_rn(c.d, fp.amax), fp.six_g);
    c.w15 = __fdiv_rn(__fmul_rn(__fmul_rn(c.d, 1.5f), fp.amax), fp.six_g);  // 1.5 d is exact (d has <= 4 bits)
  }
  return c;
}

// SPEC 5.6's input-domain value ((p * A) / 6G) of the E2M1 value q (p = q * d, exact), by parts: q is 2^k or
// 1.5 * 2^k (k = -1 .. 2), so p * A is 2^k (d A) or 2^k (1.5 d A), and with every product and quotient in fp32's
// normal range (A in [2^-100, 2^100], d in [2^-9, 448] or 0) the scaling by 2^k commutes with both roundings: the value
// is 2^k * w1 or 2^k * w15, exactly. q's mantissa bit 22 marks 1.5 * 2^k; clearing it leaves 2^k (with q's sign; a
// zero q gives a zero, whose sign no error sees).
__device__ __forceinline__ float fo6_plane_value(float q, const Fo6Candidate& c) {
  const uint32_t qb = __float_as_uint(q);
  const float w = (qb & 0x00400000u) ? c.w15 : c.w1;
  return __fmul_rn(__uint_as_float(qb & ~0x00400000u), w);
}

// SPEC 5.6's input-domain value ((q d) * A) / 6G as written, for an amax outside fo6_plane_value's range (out of line:
// the rare path stays out of the unrolled loops).
__device__ __noinline__ float fo6_exact_value(float q, float d, float amax, float six_g) {
  return __fdiv_rn(__fmul_rn(__fmul_rn(q, d), amax), six_g);
}

// SPEC 5.6: the error of element x under a candidate, and its E2M1 code. xs = x * S_enc (the fast-math domain).
template <bool kMse, bool kFastMath>
__device__ __forceinline__ float fo6_element_error(float x, float xs, const Fo6Candidate& c, const Fo6Plane& fp,
                                                   uint32_t& code) {
  code = e2m1_rn(__fmul_rn(x, c.mult));  // SPEC 3.1 (a NaN x gives 0x7)
  const float q = e2m1_value(code);
  float diff;
  if constexpr (kFastMath) {
    diff = __fsub_rn(__fmul_rn(q, c.d), xs);  // p - x S_enc (p exact)
  } else {
    const float v = fp.by_parts ? fo6_plane_value(q, c) : fo6_exact_value(q, c.d, fp.amax, fp.six_g);
    diff = __fsub_rn(v, x);
  }
  return kMse ? __fmul_rn(diff, diff) : fabsf(diff);
}

// Both candidates of N consecutive elements of a block row: packed codes (element e in nibble e) and the N element
// errors of each, in element order.
template <int N, bool kMse, bool kFastMath>
__device__ __forceinline__ void fo6_candidates(const float (&x)[N], const Fo6Candidate& c6, const Fo6Candidate& c4,
                                               const Fo6Plane& fp, uint64_t& codes6, uint64_t& codes4,
                                               float (&e6)[N], float (&e4)[N]) {
  codes6 = codes4 = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float xs = kFastMath ? __fmul_rn(x[i], fp.s_enc) : 0.0f;
    uint32_t k6, k4;
    e6[i] = fo6_element_error<kMse, kFastMath>(x[i], xs, c6, fp, k6);
    e4[i] = fo6_element_error<kMse, kFastMath>(x[i], xs, c4, fp, k4);
    codes6 |= (uint64_t)k6 << (4 * i);
    codes4 |= (uint64_t)k4 << (4 * i);
  }
}

// SPEC 5.6: +0 plus the N errors in element order.
template <int N>
__device__ __forceinline__ float sum_in_order(float s, const float (&e)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) s = __fadd_rn(s, e[i]);
  return s;
}

// The error of a 16-element block row held by a lane pair (even lane: elements 0-7, odd lane: 8-15), on both lanes:
// the even lane's partial sum from +0, continued by the odd lane (SPEC 5.6's element order). All lanes call it.
__device__ __forceinline__ float pair_sum16(const float (&e)[8], bool odd) {
  float s = sum_in_order(0.0f, e);
  const float even_part = __shfl_xor_sync(0xffffffffu, s, 1);
  if (odd) s = sum_in_order(even_part, e);
  const float other = __shfl_xor_sync(0xffffffffu, s, 1);
  return odd ? s : other;
}

// SPEC 5.6: the 16 row errors of a 16x16 tile summed as the tree of offsets 8, 4, 2, 1 (e is overwritten).
__device__ __forceinline__ float tile_tree_sum(float (&e)[16]) {
#pragma unroll
  for (int r = 0; r < 8; ++r) e[r] = __fadd_rn(e[r], e[r + 8]);
#pragma unroll
  for (int r = 0; r < 4; ++r) e[r] = __fadd_rn(e[r], e[r + 4]);
#pragma unroll
  for (int r = 0; r < 2; ++r) e[r] = __fadd_rn(e[r], e[r + 2]);
  return __fadd_rn(e[0], e[1]);
}

// The same tree over the 16 lanes of a half warp, lane r holding e_r (all 32 lanes call it).
__device__ __forceinline__ float half_warp_tree_sum(float e) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) e = __fadd_rn(e, __shfl_xor_sync(0xffffffffu, e, o));
  return e;
}

// 4over6 quantizer: one CTA of 256 threads per 128 x 128 tile of X (bf16), as quantize_kernel.
//  1. The tile is loaded into shared memory (rows past the group and columns past K as zeros), with the 1x16 block
//     maxima (bmax_s) and, for 16x16 blocks, the tile maxima (tmax_s); then the planes' constants and tables.
//  2. Rowwise plane: thread t owns chunk t % 16 (8 elements, half a block) of tile rows 16 it + t / 16, it = 0..7.
//  3. Columnwise plane: thread t owns tile column t % 128 and the 16-row blocks 4 (t / 128) + jj, jj = 0..3.
// kMse: the squared error (else the absolute error); kFastMath: the error in the product domain (SPEC 5.6).
template <bool kMse, bool kFastMath>
__global__ void __launch_bounds__(256, 3) quantize_4over6_kernel(QuantArgs a) {
  using T = __nv_bfloat16;
  constexpr int EPL = 8, NB = 8, TK = 128;  // elements per chunk, 16-blocks per tile row, tile columns
  __shared__ alignas(16) uint8_t tile[kTileM * 256];
  __shared__ float bmax_s[kTileM][NB];     // the 1x16 block maxima
  __shared__ float tmax_s[8][NB];          // 16x16 blocks: the tile maxima
  __shared__ float rerr_s[2][kTileM][NB];  // 16x16 blocks: the rowwise row errors of map-to-6 [0] and map-to-4 [1]
  __shared__ uint8_t rpick_s[8][NB];       // 16x16 blocks: the rowwise plane's tile takes map-to-4
  __shared__ float mtab[2][128];           // per plane: the encode multiplier of each scale byte (SPEC 5.6's m_c)

  GroupView gv;
  int64_t kt;
  if (!resolve_grid_tile(a.offs, a.E, a.M, blockIdx.x, quant_k_tiles<T>(a.K), gv, kt, a.tile_recs)) return;
  const int t = threadIdx.x, chunk = t & 15, rsub = t >> 4;
  const int64_t k0 = kt * TK;
  const int64_t gcol = k0 + chunk * EPL;
  const bool col_ok = gcol < a.K;
  const T* x = reinterpret_cast<const T*>(a.x);

  // ---- 1. load (X and the offsets only: this part may overlap the amax pass, launch_quantize_4over6_bf16) ----
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = it * 16 + rsub;
    const int64_t r = gv.m0 + row;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (col_ok && r < gv.m) raw = __ldg(reinterpret_cast<const uint4*>(x + (gv.row0 + r) * a.K + gcol));
    *reinterpret_cast<uint4*>(tile + row * 256 + chunk * 16) = raw;
    float v[EPL];
    chunk_to_f32<T>(raw, v);
    float m = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) m = fmaxf(m, fabsf(v[e]));  // SPEC 5.2: NaN-ignoring
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));     // the lane pair of the block
    if ((chunk & 1) == 0) bmax_s[row][chunk >> 1] = m;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the amax pass's results are visible from here
  const float six_g = a.global_scale_max == 256 ? 1536.0f : 2688.0f;
  const Fo6Plane fp_row = make_fo6_plane(a.row_data != nullptr ? a.row_amax[gv.g] : 0.0f, six_g);
  const Fo6Plane fp_col = make_fo6_plane(a.col_data != nullptr ? a.col_amax[gv.g] : 0.0f, six_g);
  {
    const int plane = t >> 7, entry = t & 127;  // SPEC 5.6: m_c = fminf(1 / (d_c * S_dec), FLT_MAX)
    const float s_enc = plane == 0 ? fp_row.s_enc : fp_col.s_enc;
    mtab[plane][entry] = block_multiplier((uint32_t)entry, PlaneScale{0.0f, __fdiv_rn(1.0f, s_enc)});
  }
  __syncthreads();
  if (a.block2d && t < 8 * NB) {  // SPEC 6.3: one max per 16x16 tile
    const int tb = t / NB, cb = t % NB;
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) m = fmaxf(m, bmax_s[tb * 16 + i][cb]);
    tmax_s[tb][cb] = m;
  }
  __syncthreads();

  // ---- 2. rowwise plane of X (SPEC 6.1) ----
  if (a.row_data != nullptr) {
    const int64_t C = a.K / 16;
    const int64_t pad_rows = round_up(gv.m, kTileM);
    const int64_t cp = round_up(C, 4);
    const int blk_local = chunk >> 1;
    const int64_t blk = k0 / 16 + blk_local;
    const bool odd = chunk & 1, lead = !odd;
    // pass 1: both candidates of every block row; 1x16 blocks are written here, 16x16 blocks keep their row errors
#pragma unroll 1
    for (int it = 0; it < 8; ++it) {
      const int row = it * 16 + rsub;
      const int64_t r = gv.m0 + row;
      const bool valid = r < gv.m && col_ok;
      const float b = a.block2d ? tmax_s[row >> 4][blk_local] : bmax_s[row][blk_local];
      uint32_t byte6, byte4;
      fo6_scale_bytes(b, fp_row.s_enc, byte6, byte4);
      const Fo6Candidate c6 = make_candidate<kFastMath>(byte6, mtab[0], fp_row),
                         c4 = make_candidate<kFastMath>(byte4, mtab[0], fp_row);
      float v[EPL], e6[EPL], e4[EPL];
      chunk_to_f32<T>(*reinterpret_cast<const uint4*>(tile + row * 256 + chunk * 16), v);
      uint64_t k6, k4;
      fo6_candidates<EPL, kMse, kFastMath>(v, c6, c4, fp_row, k6, k4, e6, e4);
      const float s6 = pair_sum16(e6, odd), s4 = pair_sum16(e4, odd);
      if (a.block2d) {
        if (lead) {  // a row past the group adds +0 (SPEC 5.6)
          rerr_s[0][row][blk_local] = r < gv.m ? s6 : 0.0f;
          rerr_s[1][row][blk_local] = r < gv.m ? s4 : 0.0f;
        }
      } else if (valid) {
        const bool pick4 = s4 < s6;  // a tie or a NaN keeps map-to-6
        *reinterpret_cast<uint32_t*>(a.row_data + gv.row_data + r * (a.K / 2) + gcol / 2) =
            (uint32_t)(pick4 ? k4 : k6);
        if (lead) a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = (uint8_t)(pick4 ? byte4 : byte6);
      } else if (lead && a.layout != kCompact && r < pad_rows && blk < cp) {
        a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = 0;  // SPEC 8.2 padding
      }
    }
    if (a.block2d) {
      __syncthreads();
      if (t < 8 * NB) {  // one thread per tile: the two tree sums (SPEC 5.6)
        const int tb = t / NB, cb = t % NB;
        float e6[16], e4[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          e6[i] = rerr_s[0][tb * 16 + i][cb];
          e4[i] = rerr_s[1][tb * 16 + i][cb];
        }
        rpick_s[tb][cb] = tile_tree_sum(e4) < tile_tree_sum(e6) ? 1 : 0;
      }
      __syncthreads();
      // pass 2: every row of a tile with the tile's candidate
#pragma unroll 1
      for (int it = 0; it < 8; ++it) {
        const int row = it * 16 + rsub;
        const int64_t r = gv.m0 + row;
        if (r < gv.m && col_ok) {
          uint32_t byte6, byte4;
          fo6_scale_bytes(tmax_s[row >> 4][blk_local], fp_row.s_enc, byte6, byte4);
          const uint32_t sb = rpick_s[row >> 4][blk_local] ? byte4 : byte6;
          const float mult = mtab[0][sb];
          float v[EPL];
          chunk_to_f32<T>(*reinterpret_cast<const uint4*>(tile + row * 256 + chunk * 16), v);
          uint32_t packed = 0;
#pragma unroll
          for (int e = 0; e < EPL; ++e) packed |= e2m1_rn(__fmul_rn(v[e], mult)) << (4 * e);
          *reinterpret_cast<uint32_t*>(a.row_data + gv.row_data + r * (a.K / 2) + gcol / 2) = packed;
          if (lead) a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = (uint8_t)sb;
        } else if (lead && a.layout != kCompact && r < pad_rows && blk < cp) {
          a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = 0;  // SPEC 8.2 padding
        }
      }
    }
  }

  // ---- 3. columnwise plane of X^T (SPEC 6.2): the padded token axis's zeros are elements like any other ----
  if (a.col_data != nullptr) {
    const int c = t % TK;
    const int64_t k = k0 + c;                    // plane row
    const int64_t cblocks = ceil_div(gv.m, 16);  // compact scale columns = Mp/16
    const int64_t kpad = round_up(a.K, 128);
    const int64_t cp = round_up(cblocks, 4);
    const int jbase = (t / TK) * 4;
#pragma unroll 1
    for (int jj = 0; jj < 4; ++jj) {
      const int j = jbase + jj;           // 16-row block inside the tile (warp-uniform)
      const int64_t jg = gv.m0 / 16 + j;  // plane column block (padded-token axis)
      if (j * 16 >= gv.rows) {  // no row of the group in this block: padding bytes only (warp-uniform)
        if (a.layout != kCompact && k < kpad && jg < cp)
          a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = 0;  // SPEC 8.2 padding
        continue;
      }
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = to_f32(reinterpret_cast<const T*>(tile + (j * 16 + i) * 256)[c]);
      float b = 0.0f;
      if (a.block2d) {
        b = tmax_s[j][c / 16];  // the same 16x16 tile of X as the rowwise plane
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) b = fmaxf(b, fabsf(v[i]));
      }
      uint32_t byte6, byte4;
      fo6_scale_bytes(b, fp_col.s_enc, byte6, byte4);
      const Fo6Candidate c6 = make_candidate<kFastMath>(byte6, mtab[1], fp_col),
                         c4 = make_candidate<kFastMath>(byte4, mtab[1], fp_col);
      float e6[16], e4[16];
      uint64_t k6, k4;
      fo6_candidates<16, kMse, kFastMath>(v, c6, c4, fp_col, k6, k4, e6, e4);
      float s6 = sum_in_order(0.0f, e6), s4 = sum_in_order(0.0f, e4);
      if (a.block2d) {  // the tile's 16 plane rows are lanes 16 h .. 16 h + 15 (c % 16 = lane % 16)
        s6 = half_warp_tree_sum(s6);
        s4 = half_warp_tree_sum(s4);
      }
      if (k < a.K && jg < cblocks) {
        const bool pick4 = s4 < s6;  // a tie or a NaN keeps map-to-6
        *reinterpret_cast<uint64_t*>(a.col_data + gv.col_data + k * (cblocks * 8) + jg * 8) = pick4 ? k4 : k6;
        a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = (uint8_t)(pick4 ? byte4 : byte6);
      } else if (a.layout != kCompact && k < kpad && jg < cp) {
        a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = 0;  // SPEC 8.2 padding
      }
    }
  }
}

}  // namespace nvfp4
