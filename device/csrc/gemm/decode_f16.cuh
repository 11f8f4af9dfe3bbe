// E2M1 x E4M3 -> fp16 wgmma operands through the hardware E4M3 converter (the fused kernels' A and B decodes,
// gemm/fused_stages.cuh; the fp16 copies, gemm/copies.cu; exact_hybrid's and swapped_64x256's decodes).
// Semantics: SPEC 12.6 (operands are exact and normal, so the tensor-core model holds).
//
// An E2M1 nibble (s, e1, e0, m) becomes the E4M3 byte (s, 0, 0, e1, e0, m, 0, 0): exponent field e1e0, top mantissa
// bit m. Its value is exactly 2^-6 * E2M1 (E4M3 bias 7 vs E2M1 bias 1; the E2M1 subnormal 0.5 = m * 2^-1 becomes the
// E4M3 subnormal 4 * 2^-9 = 2^-7). The converter (cvt.rn.f16x2.e4m3x2) turns two such bytes into two fp16 numbers,
// and one HMUL2 by sf * 2^6 (also exact in fp16: |sf| * 2^6 <= 28672) gives v = E2M1 * sf exactly: v has at most
// 6 significant bits and |v| lies in [2^-10, 2688], so every nonzero operand is a NORMAL fp16 number (min 2^-14).
// Unlike a bf16 decode there is no 2^-14 offset to undo in the epilogue.
//
// Byte construction for 4 codes at once: shift the packed word so that the wanted nibbles sit on bits 2-5 of their
// bytes (m on bit 2, e0 on 3, e1 on 4, s on 5), mask, and move the sign from bit 5 to bit 7 by adding 3 times itself
// (bits 6 and 7 are zero after the mask, so 0x20 + 0x60 = 0x80 carries no further): 2 LOP3 + 1 IMAD + the shift
// for 4 codes, against 4 LOP3 + 2 IMAD + 2 shifts for a bf16 decode.
//
// Element order inside an 8-code group: the word pair (w << 2, w >> 2) holds the even codes (0, 2, 4, 6) and the odd
// codes (1, 3, 5, 7) in their bytes, so the four fp16x2 words are {0, 2}, {4, 6}, {1, 3}, {5, 7}: K position 2j, 2j+1
// of the chunk holds elements o[2j], o[2j+1] of the order o = 0 2 4 6 1 3 5 7. Both operands use this
// permutation, which leaves every 16-block dot product (one wgmma k16 step, SPEC 12.6) unchanged.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace nvfp4_gemm {
namespace f16dec {

// Nibbles on bits 2-5 of each byte (other bits arbitrary) -> 4 E4M3 bytes of value 2^-6 * E2M1.
__device__ __forceinline__ uint32_t e2m1_to_e4m3_bytes(uint32_t shifted) {
  const uint32_t t = shifted & 0x3C3C3C3Cu;
  return t + 3u * (t & 0x20202020u);
}

// Bytes 0 and 1 of `bytes` (E4M3) -> fp16x2 {byte 0, byte 1}, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t bytes) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
}

__device__ __forceinline__ uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

constexpr uint32_t kF16x2_64 = 0x54005400u;  // {64, 64} in fp16

// E4M3 scale byte (bits 0-7, higher bits ignored) -> {sf * 2^6, sf * 2^6} in fp16, exact (zero's sign and NaN kept).
__device__ __forceinline__ uint32_t scale_to_f16x2(uint32_t byte) {
  const uint32_t sf = e4m3x2_to_f16x2(byte);                   // {sf, other}
  return hmul2_f16(__byte_perm(sf, 0u, 0x1010u), kF16x2_64);  // {sf, sf} * 64
}

// Four E4M3 scales (byte j = 16-block j) -> lo = {sf_0, sf_1} * 2^6, hi = {sf_2, sf_3} * 2^6 in fp16, exact.
__device__ __forceinline__ void scales4_to_pairs(uint32_t four_bytes, uint32_t& lo, uint32_t& hi) {
  lo = hmul2_f16(e4m3x2_to_f16x2(four_bytes), kF16x2_64);
  hi = hmul2_f16(e4m3x2_to_f16x2(four_bytes >> 16), kF16x2_64);
}

// Four E4M3 scales (byte j = 16-block j) -> s[j] = {sf_j * 2^6, sf_j * 2^6}.
__device__ __forceinline__ void scales4_to_f16x2(uint32_t four_bytes, uint32_t (&s)[4]) {
  uint32_t lo, hi;
  scales4_to_pairs(four_bytes, lo, hi);
  s[0] = __byte_perm(lo, 0u, 0x1010u);
  s[1] = __byte_perm(lo, 0u, 0x3232u);
  s[2] = __byte_perm(hi, 0u, 0x1010u);
  s[3] = __byte_perm(hi, 0u, 0x3232u);
}

// 8 codes (nibble j = element j) times the scale s (scale_to_f16x2) -> 4 fp16x2 words in kChunkOrder.
__device__ __forceinline__ void e2m1x8_to_f16(uint32_t w, uint32_t s, uint32_t (&o)[4]) {
  const uint32_t even = e2m1_to_e4m3_bytes(w << 2), odd = e2m1_to_e4m3_bytes(w >> 2);
  o[0] = hmul2_f16(e4m3x2_to_f16x2(even), s);        // elements 0, 2
  o[1] = hmul2_f16(e4m3x2_to_f16x2(even >> 16), s);  // 4, 6
  o[2] = hmul2_f16(e4m3x2_to_f16x2(odd), s);         // 1, 3
  o[3] = hmul2_f16(e4m3x2_to_f16x2(odd >> 16), s);   // 5, 7
}

// Word c (0..3) of e2m1x8_to_f16 alone, for a lane that holds K positions 2c, 2c+1 of the chunk (wgmma's register
// A fragment): rotate the code word right by rot = (c < 2 ? 30 : 2) + 16 (c & 1) mod 32 (afrag_rotation), which
// puts the wanted pair of nibbles on bits 2-5 and 10-13, then decode those two bytes.
__host__ __device__ constexpr uint32_t afrag_rotation(int c) { return ((c < 2 ? 30 : 2) + 16 * (c & 1)) & 31; }
__device__ __forceinline__ uint32_t e2m1_word_to_f16(uint32_t w, uint32_t rot, uint32_t s) {
  return hmul2_f16(e4m3x2_to_f16x2(e2m1_to_e4m3_bytes(__funnelshift_r(w, w, rot))), s);
}

}  // namespace f16dec
}  // namespace nvfp4_gemm
