// Building blocks of the bf16 fast path (the kernels are in nvfp4_fast_v4.cuh; common case: bf16 input,
// round-to-nearest, 1x16 blocks, RHT with the default sign mask or no RHT; the same outputs as quantize_kernel /
// amax_kernel byte for byte, with fewer instructions per element):
//  * compile-time RHT signs: the sign flips become operand negations of the first butterfly FADDs (free);
//  * E2M1 encode of a NaN-free product in ~11 integer/fp ops with the nibble bias absorbed by the packing sum
//    (e2m1_biased, checked exhaustively against the threshold sum of SPEC 3.1 for every fp32 |y| < 8);
//  * block maxima on packed bf16 pairs with integer SIMD max (the NaN-ignoring fp max of SPEC 5.2 equals the
//    integer max of the |bits| when no element is NaN/Inf; a block that has one goes to the exact slow path).
// (The first fast kernels, v3, lived here too; removed in stop 13 after v4 replaced them: device/NOTES.md.)
#pragma once

#include <cstdint>

#include "quantize/numerics.cuh"
#include "quantize/general.cuh"
#include "quantize/layout.cuh"

namespace nvfp4 {

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
// kStages = 3 stops before the last stage (h = 8), for the amax shortcut of amax_fast_bf16.
template <uint32_t kSigns, int kStages = 4>
__device__ __forceinline__ void rht16_butterfly(float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = ((kSigns >> i) & 1u) ? -v[i] : v[i];
  hadamard16_stages<kStages>(v);
}

}  // namespace nvfp4
