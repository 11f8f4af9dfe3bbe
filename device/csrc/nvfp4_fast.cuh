// Fast paths for the common case (bf16 input, round-to-nearest, 1x16 blocks, RHT with the default sign mask
// or no RHT): the same outputs as quantize_kernel / amax_kernel byte for byte, with fewer instructions per
// element. Everything else (f16 / f32, SR, 16x16 blocks, other RHT sign masks) stays on the general kernels.
//  * compile-time RHT signs: the sign flips become operand negations of the first butterfly FADDs (free);
//  * E2M1 encode of a NaN-free product in ~11 integer/fp ops with the nibble bias absorbed by the packing sum
//    (e2m1_biased, checked exhaustively against the threshold sum of SPEC 3.1 for every fp32 |y| < 8);
//  * block maxima on packed bf16 pairs with integer SIMD max (the NaN-ignoring fp max of SPEC 5.2 equals the
//    integer max of the |bits| when no element is NaN/Inf; a block that has one goes to the exact slow path);
//  * the columnwise pass reads bf16 pairs (32-bit LDS) and handles two plane rows per thread, rounds the RHT
//    output to bf16 two at a time (cvt.rn.bf16x2.f32) and stores 16 bytes (two blocks) per plane row;
//  * amax: max |round_bf16(v * 0.25)| == round_bf16(max|v| * 0.25) (RN and *0.25 are monotone, NaN ignored
//    in both), so the RHT amax needs no per-element multiply or rounding.
#pragma once

#include <cstdint>

#include "nvfp4_common.cuh"
#include "nvfp4_kernels.cuh"
#include "nvfp4_layout.cuh"

namespace nvfp4 {

constexpr uint32_t kDefaultRhtSigns = 0xD7E8u;  // SPEC 7 default mask (also the Python API default)

// SPEC 3.1 for a y that is not NaN: returns code + 256 (bit 3 of 256 + index is clear, so the sign ORs in; the
// bias cancels in pack sums, see kBias8).
//  * a = min(|y|, 6) (Inf -> 6 -> index 7);
//  * a < 2: the quantum is 0.5 in [0, 2): a + 1.5*2^22 rounds a to a multiple of 0.5 (RNE; an even mantissa
//    LSB is an even code), so bits - 0x4AC00000 = index;
//  * a >= 2: round the pattern to 1 mantissa bit, ties to even; (bits >> 22) - 252 = index.
__device__ __forceinline__ uint32_t e2m1_biased(float y) {
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t b = __float_as_uint(a);
  const uint32_t n = (b + (0x1FFFFFu + (4u << 22)) + ((b >> 22) & 1u)) >> 22;
  const uint32_t s = __float_as_uint(__fadd_rn(a, 6291456.0f)) - (0x4AC00000u - 256u);
  return (a < 2.0f ? s : n) | ((__float_as_uint(y) >> 28) & 8u);
}
constexpr uint32_t kBias8 = 256u * 0x11111111u;  // sum of 256 << 4e, e = 0..7 (mod 2^32)

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ float bf16_half(uint32_t w, int h) { return h ? bf16_hi(w) : bf16_lo(w); }

// 8 consecutive elements (4 packed words, element 2i in the low half) -> 8 packed E2M1 nibbles.
__device__ __forceinline__ uint32_t encode8_fast(const uint32_t (&w)[4], float mult) {
  uint32_t acc = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc += e2m1_biased(__fmul_rn(bf16_half(w[e >> 1], e & 1), mult)) << (4 * e);
  return acc - kBias8;
}
__device__ __forceinline__ uint32_t encode8_slow(const uint32_t (&w)[4], float mult) {
  uint32_t acc = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc |= e2m1_rn(__fmul_rn(bf16_half(w[e >> 1], e & 1), mult)) << (4 * e);
  return acc;
}

// |bf16| pair max (per 16-bit lane, unsigned)
__device__ __forceinline__ uint32_t absmax2(uint32_t m, uint32_t w) { return __vmaxu2(m, w & 0x7FFF7FFFu); }

// ---------------------------------------------------------------------------------------------------------
// 16-point RHT with compile-time signs, without the final * 0.25 / rounding (SPEC 7).
// ---------------------------------------------------------------------------------------------------------
// kStages = 3 stops before the last stage (h = 8), for the amax shortcut of amax_fast4_bf16.
template <uint32_t kSigns, int kStages = 4>
__device__ __forceinline__ void rht16_butterfly(float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = ((kSigns >> i) & 1u) ? -v[i] : v[i];
  hadamard16_stages<kStages>(v);
}

// ---------------------------------------------------------------------------------------------------------
// amax, bf16, fast: same tiling as amax_kernel.
// ---------------------------------------------------------------------------------------------------------
template <bool kRHT>
__global__ void __launch_bounds__(128, 4) amax_fast_bf16(AmaxArgs a) {
  using T = __nv_bfloat16;
  using G = TileGeom<T>;
  const int64_t nkt = amax_k_tiles<T>(a.K);
  const int64_t tile = (int64_t)gridDim.x - 1 - blockIdx.x;
  const int64_t rt = tile / nkt, kt = tile % nkt;
  GroupView gv;
  if (!resolve_tile(a.offs, a.E, a.M, rt, gv)) return;
  const int t = threadIdx.x, chunk = t & 15, rb = t >> 4;
  const int64_t gcol = kt * G::kTileK + chunk * G::kChunkElems;
  const T* x = reinterpret_cast<const T*>(a.x);

  uint4 raw[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t r = gv.m0 + rb * 16 + i;
    raw[i] = make_uint4(0, 0, 0, 0);
    if (gcol < a.K && r < gv.m) raw[i] = __ldg(reinterpret_cast<const uint4*>(x + (gv.row0 + r) * a.K + gcol));
  }
  float rmax = 0.0f, cmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
#pragma unroll
    for (int e = 0; e < 8; ++e) rmax = fmaxf(rmax, fabsf(bf16_half(w[e >> 1], e & 1)));  // NaN-ignoring
  }
  if constexpr (kRHT) {
    float cm = 0.0f;  // NaN-ignoring max of |v| before * 0.25 and rounding (monotone, see header)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
        v[i] = bf16_half(w[e >> 1], e & 1);
      }
      rht16_butterfly<kDefaultRhtSigns>(v);
#pragma unroll
      for (int i = 0; i < 16; ++i) cm = fmaxf(cm, fabsf(v[i]));
    }
    cmax = round_bf16(__fmul_rn(cm, 0.25f));
  } else {
    cmax = rmax;
  }
  cta_amax_atomic<4>(rmax, cmax, a, gv.g);
}

// ---------------------------------------------------------------------------------------------------------
// Fused quantizer, bf16, RN, 1x16 blocks; kRHT: default sign mask. Same tiling as quantize_kernel
// (128 x 128 tile, 256 threads); the columnwise pass: thread t owns tile columns 2(t%64), 2(t%64)+1 and the
// 16-row blocks 2(t/64), 2(t/64)+1.
// ---------------------------------------------------------------------------------------------------------
template <bool kRHT>
__global__ void __launch_bounds__(256, 4) quantize_fast_bf16(QuantArgs a) {
  using T = __nv_bfloat16;
  using G = TileGeom<T>;
  constexpr int TK = G::kTileK;  // 128
  __shared__ alignas(16) uint8_t tile[kTileM * 256];
  __shared__ float mtab[2][128];

  const int64_t nkt = quant_k_tiles<T>(a.K);
  const int64_t rt = blockIdx.x / nkt, kt = blockIdx.x % nkt;
  GroupView gv;
  if (!resolve_tile(a.offs, a.E, a.M, rt, gv)) return;
  const int t = threadIdx.x, chunk = t & 15, rsub = t >> 4;
  const int64_t k0 = kt * TK;
  const int64_t gcol = k0 + chunk * 8;
  const bool col_ok = gcol < a.K;
  const T* x = reinterpret_cast<const T*>(a.x);

  const PlaneScale ps_row = make_plane_scale(a.row_data != nullptr ? a.row_amax[gv.g] : 0.0f, a.rule);
  const PlaneScale ps_col = make_plane_scale(a.col_data != nullptr ? a.col_amax[gv.g] : 0.0f, a.rule);
  if (t < 128) mtab[0][t] = block_multiplier((uint32_t)t, ps_row);
  else mtab[1][t - 128] = block_multiplier((uint32_t)(t - 128), ps_col);

  // ---- 1. load; rowwise block max as bf16 bits (integer SIMD max of |bits|) ----
  uint4 raw[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int64_t r = gv.m0 + it * 16 + rsub;
    raw[it] = make_uint4(0, 0, 0, 0);
    if (col_ok && r < gv.m) raw[it] = __ldg(reinterpret_cast<const uint4*>(x + (gv.row0 + r) * a.K + gcol));
  }
  uint32_t bmh[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = it * 16 + rsub;
    *reinterpret_cast<uint4*>(tile + row * 256 + chunk * 16) = raw[it];
    uint32_t m = absmax2(absmax2(raw[it].x & 0x7FFF7FFFu, raw[it].y), absmax2(raw[it].z & 0x7FFF7FFFu, raw[it].w));
    m = __vmaxu2(m, __shfl_xor_sync(0xffffffffu, m, 1));  // the two lanes of one 16-block
    bmh[it] = max(m & 0xFFFFu, m >> 16);                  // >= 0x7F80: the block has a NaN or Inf
  }
  __syncthreads();

  // ---- 2. rowwise plane (SPEC 6.1) ----
  if (a.row_data != nullptr) {
    const PlaneScale& ps = ps_row;
    const int64_t C = a.K / 16;
    const int64_t pad_rows = round_up(gv.m, kTileM);
    const int64_t cp = round_up(C, 4);
    const int64_t blk = k0 / 16 + chunk / 2;
    const bool lead = (chunk & 1) == 0;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int row = it * 16 + rsub;
      const int64_t r = gv.m0 + row;
      const uint4 q = *reinterpret_cast<const uint4*>(tile + row * 256 + chunk * 16);
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
      const bool slow = __any_sync(0xffffffffu, bmh[it] >= 0x7F80u);  // warp-uniform
      float b = __uint_as_float(bmh[it] << 16);
      if (slow) {  // exact NaN-ignoring fp max (SPEC 5.2)
        float m = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(bf16_half(w[e >> 1], e & 1)));
        b = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      }
      if (r < gv.m && col_ok) {
        const uint32_t sb = block_scale_byte(b, ps);
        const float mult = mtab[0][sb];
        const uint32_t packed = slow ? encode8_slow(w, mult) : encode8_fast(w, mult);
        *reinterpret_cast<uint32_t*>(a.row_data + gv.row_data + r * (a.K / 2) + gcol / 2) = packed;
        if (lead) a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = (uint8_t)sb;
      } else if (lead && a.layout != kCompact && r < pad_rows && blk < cp) {
        a.row_scales[gv.row_scale + scale_pos(a.layout, r, blk, C)] = 0;  // SPEC 8.2 padding
      }
    }
  }

  // ---- 3. columnwise plane of X^T (SPEC 6.2, 7) ----
  if (a.col_data != nullptr) {
    const PlaneScale& ps = ps_col;
    const int cpair = t & 63;
    const int j0 = (t >> 6) * 2;
    const int64_t cblocks = ceil_div(gv.m, 16);
    const int64_t kpad = round_up(a.K, 128);
    const int64_t cpd = round_up(cblocks, 4);
    const int64_t jg0 = gv.m0 / 16 + j0;
    uint64_t out[2][2];  // [plane row h][block jj]
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = j0 + jj;
      const int64_t jg = jg0 + jj;
      uint32_t w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i] = *reinterpret_cast<const uint32_t*>(tile + (j * 16 + i) * 256 + cpair * 4);
      if constexpr (kRHT) {
        float va[16], vb[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          va[i] = bf16_lo(w[i]);
          vb[i] = bf16_hi(w[i]);
        }
        rht16_butterfly<kDefaultRhtSigns>(va);
        rht16_butterfly<kDefaultRhtSigns>(vb);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const __nv_bfloat162 p = __floats2bfloat162_rn(__fmul_rn(va[i], 0.25f), __fmul_rn(vb[i], 0.25f));
          w[i] = *reinterpret_cast<const uint32_t*>(&p);
        }
      }
      uint32_t m = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) m = absmax2(m, w[i]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k = k0 + 2 * cpair + h;
        const uint32_t mh = h ? (m >> 16) : (m & 0xFFFFu);
        out[h][jj] = 0;
        if (k < a.K && jg < cblocks) {
          float b = __uint_as_float(mh << 16);
          const bool slow = mh >= 0x7F80u;
          if (slow) {
            b = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) b = fmaxf(b, fabsf(bf16_half(w[i], h)));
          }
          const uint32_t sb = block_scale_byte(b, ps);
          const float mult = mtab[1][sb];
          uint32_t lo = 0, hi = 0;
          if (!slow) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              lo += e2m1_biased(__fmul_rn(bf16_half(w[i], h), mult)) << (4 * i);
              hi += e2m1_biased(__fmul_rn(bf16_half(w[i + 8], h), mult)) << (4 * i);
            }
            lo -= kBias8;
            hi -= kBias8;
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              lo |= e2m1_rn(__fmul_rn(bf16_half(w[i], h), mult)) << (4 * i);
              hi |= e2m1_rn(__fmul_rn(bf16_half(w[i + 8], h), mult)) << (4 * i);
            }
          }
          out[h][jj] = ((uint64_t)hi << 32) | lo;
          a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = (uint8_t)sb;
        } else if (a.layout != kCompact && k < kpad && jg < cpd) {
          a.col_scales[gv.col_scale + scale_pos(a.layout, k, jg, cblocks)] = 0;  // SPEC 8.2 padding
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t k = k0 + 2 * cpair + h;
      if (k < a.K && jg0 < cblocks) {
        uint8_t* dst = a.col_data + gv.col_data + k * (cblocks * 8) + jg0 * 8;
        if (jg0 + 1 < cblocks && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
          *reinterpret_cast<uint4*>(dst) = make_uint4((uint32_t)out[h][0], (uint32_t)(out[h][0] >> 32),
                                                      (uint32_t)out[h][1], (uint32_t)(out[h][1] >> 32));
        } else {
          *reinterpret_cast<uint64_t*>(dst) = out[h][0];
          if (jg0 + 1 < cblocks) *reinterpret_cast<uint64_t*>(dst + 8) = out[h][1];
        }
      }
    }
  }
}

}  // namespace nvfp4
