// Shared numeric helpers of the NVFP4 device kernels. Every function implements one rule of SPEC.md; the
// section is named next to it. All fp32 arithmetic is IEEE round-to-nearest-even with no FMA contraction:
// the products and sums that matter go through __fmul_rn / __fadd_rn / __fdiv_rn explicitly (and the build
// passes --fmad=false as a second guard).
#pragma once

#include <cstdint>
#include <cfloat>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "quantize/launch.h"
#include "common/swizzle.cuh"

namespace nvfp4 {

constexpr float kFltMax = FLT_MAX;
// SPEC 5.2: the fp32 constant 1.0f/6.0f (0x3E2AAAAB).
constexpr float kOneSixth = 1.0f / 6.0f;
// SPEC 11: fp32(1/2688), correctly rounded = 0x1.861862p-12f (NOT 0x1.86186p-12f, which is 1 ulp below).
constexpr float kInv2688 = 0x1.861862p-12f;


// ---------------------------------------------------------------------------------------------------------
// Element loads: every input dtype to fp32 (exact).
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// SPEC 4.3: a supplied amax read from a device tensor, as the kernels use it: a negative value as its magnitude (-a),
// -0.0 and NaN with their bits (`a < 0` is false for both).
__device__ __forceinline__ float supplied_amax(float a) { return a < 0.0f ? -a : a; }

// ---------------------------------------------------------------------------------------------------------
// SPEC 3.1: fp32 -> E2M1, round to nearest even, saturating. NaN -> 0x7, sign kept on zero / underflow.
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t e2m1_rn(float y) {
  // Equivalent to the threshold sum idx = (a>0.25)+(a>=0.75)+(a>1.25)+(a>=1.75)+(a>2.5)+(a>=3.5)+(a>5), in
  // fewer instructions (checked against the oracle on ~12M values incl. every threshold +-4 ulp):
  //  * a = fminf(|y|, 6) (a NaN becomes 6, i.e. index 7);
  //  * a >= 1: round the fp32 pattern to 1 mantissa bit, ties to even; (bits >> 22) - 252 is then the index
  //    (1.0 -> 2, 1.5 -> 3, 2 -> 4, 3 -> 5, 4 -> 6, 6 -> 7);
  //  * a < 1: quantum 0.5: 2a + 1.5*2^23 rounds 2a to an integer (RNE) in the low mantissa bits.
  const uint32_t yb = __float_as_uint(y);
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t b = __float_as_uint(a);
  const uint32_t idx_n = ((b + 0x1FFFFFu + ((b >> 22) & 1u)) >> 22) - 252u;
  const uint32_t idx_s = __float_as_uint(__fadd_rn(__fmul_rn(a, 2.0f), 12582912.0f)) - 0x4B400000u;
  const uint32_t idx = a < 1.0f ? idx_s : idx_n;
  const uint32_t sign = (yb & 0x7FFFFFFFu) > 0x7F800000u ? 0u : ((yb >> 28) & 8u);  // NaN -> +6 (0x7)
  return idx | sign;
}

// SPEC 3.1 for a y that is known not to be NaN (the sign bit is then always copied).
__device__ __forceinline__ uint32_t e2m1_rn_not_nan(float y) {
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t b = __float_as_uint(a);
  const uint32_t idx_n = ((b + 0x1FFFFFu + ((b >> 22) & 1u)) >> 22) - 252u;
  const uint32_t idx_s = __float_as_uint(__fadd_rn(__fmul_rn(a, 2.0f), 12582912.0f)) - 0x4B400000u;
  return (a < 1.0f ? idx_s : idx_n) | ((__float_as_uint(y) >> 28) & 8u);
}

// SPEC 3.4: stochastic rounding of y with the random byte u8.
__device__ __forceinline__ uint32_t e2m1_sr(float y, uint32_t u8) {
  if (isnan(y)) return 0x7u;
  const float a = fabsf(y);
  const float step_a = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  // (u8/256)*step is exact (power-of-two scalings of an 8-bit integer); the sum rounds once (RN).
  const float j = __fadd_rn(a, __fmul_rn(__fmul_rn((float)u8, 0.00390625f), step_a));
  const float step_j = j < 2.0f ? 0.5f : (j < 4.0f ? 1.0f : 2.0f);
  const float inv_step_j = j < 2.0f ? 2.0f : (j < 4.0f ? 1.0f : 0.5f);
  // j / step(j) is a power-of-two scaling, so multiplying by 1/step(j) is the same exact quotient.
  float q = __fmul_rn(floorf(__fmul_rn(j, inv_step_j)), step_j);
  q = fminf(q, 6.0f);
  return e2m1_rn_not_nan(q) | (signbit(y) ? 0x8u : 0u);
}

// SPEC 2.1: E2M1 code -> value. Twice the magnitudes (0,1,2,3,4,6,8,12) packed as nibbles (no local array).
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const float v = __fmul_rn((float)((0xC8643210u >> ((code & 7u) * 4u)) & 0xFu), 0.5f);
  return (code & 8u) ? -v : v;
}

// SPEC 2.2: E4M3 byte -> fp32 (0x7F / 0xFF -> NaN).
__device__ __forceinline__ float e4m3_value(uint32_t b) {
  const uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
  float v;
  if ((b & 0x7Fu) == 0x7Fu) {
    v = __uint_as_float(0x7FC00000u);
  } else if (e == 0) {
    v = __fmul_rn((float)m, 0.001953125f);  // m * 2^-9, exact
  } else {
    v = __uint_as_float(((e + 120u) << 23) | (m << 20));  // (1 + m/8) * 2^(e-7)
  }
  return (b & 0x80u) ? -v : v;
}

// SPEC 3.3: fp32 -> bf16 -> fp32 (RNE; NaN stays NaN).
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// ---------------------------------------------------------------------------------------------------------
// SPEC 5.1 / 5.3: the per-tensor encode scale S_enc from amax.
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ float s_enc_from_amax(float amax, int rule) {
  if (rule == kRuleTEFusedRHT) {  // SPEC 5.3
    if (!(amax > 0.0f)) return 1.0f;
    const float s = __fdiv_rn(2688.0f, amax);
    return isnan(s) ? s : fminf(s, kFltMax);  // NaN-propagating min
  }
  float s = fminf(__fdiv_rn(2688.0f, amax), kFltMax);  // SPEC 5.1 (fminf drops a NaN quotient)
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

// Per-plane constants derived from S_enc (SPEC 5.1, 5.2).
struct PlaneScale {
  float s_enc_6;  // S_enc * (1/6), formed first (SPEC 5.2)
  float s_dec;    // 1 / S_enc, correctly rounded (SPEC 5.1)
};

__device__ __forceinline__ PlaneScale make_plane_scale(float amax, int rule) {
  const float s = s_enc_from_amax(amax, rule);
  return PlaneScale{__fmul_rn(s, kOneSixth), __fdiv_rn(1.0f, s)};
}

// SPEC 5.6: S_enc of rule "te" with the E4M3 maximum G inside it, six_g = fp32(6G) (2688 or 1536): 5.1 with 2688
// replaced by 6G (G = 448 is s_enc_from_amax's rule "te").
__device__ __forceinline__ float s_enc_te_g(float amax, float six_g) {
  float s = fminf(__fdiv_rn(six_g, amax), kFltMax);  // (fminf drops a NaN quotient)
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

// SPEC 11.1 with G (5.6): the dequantize factor's fp32(1/(6G)), correctly rounded: 0x1.861862p-12f (1/2688) or
// 0x1.555556p-11f (1/1536).
constexpr float kInv1536 = 0x1.555556p-11f;
__host__ __device__ __forceinline__ float inv_six_g(int global_scale_max) {
  return global_scale_max == 256 ? kInv1536 : kInv2688;
}

// SPEC 3.2 through the hardware conversion (cvt.rn.satfinite.e4m3x2.f32, sm_89+): RNE, saturating to 448. Only used
// on non-negative, non-NaN block scales: SPEC 5.2's, torchao's (5.4, 5.5) and both 4over6 candidates' (5.6).
__device__ __forceinline__ uint32_t e4m3_scale(float sf) {
  return (uint32_t)__nv_cvt_float_to_fp8(sf, __NV_SATFINITE, __NV_E4M3);
}

// SPEC 5.2: block max b -> scale byte, and scale byte -> encode multiplier m.
__device__ __forceinline__ uint32_t block_scale_byte(float b, const PlaneScale& ps) {
  return e4m3_scale(fminf(__fmul_rn(b, ps.s_enc_6), kFltMax));
}
__device__ __forceinline__ float block_multiplier(uint32_t scale_byte, const PlaneScale& ps) {
  const float d = __fmul_rn(e4m3_value(scale_byte), ps.s_dec);
  // d = +0 (byte 0x00, or a product that underflows) and d = NaN (byte 0x7F) give 1 / d = +Inf and NaN, and fminf
  // makes both kFltMax. Those lanes divide 1 by 1 instead and take kFltMax directly: the same values, without the
  // division's slow path, which cost 4 of every 8 warps of the quantize kernel a call (entries 0 and 127 of each
  // table).
  const bool inf_or_nan = __float_as_uint(d) == 0u || d != d;
  const float q = __fdiv_rn(1.0f, inf_or_nan ? 1.0f : d);
  return inf_or_nan ? kFltMax : fminf(q, kFltMax);
}

// ---------------------------------------------------------------------------------------------------------
// SPEC 5.4 / 5.5 and 3.5: the torchao rules. torchao runs on the host's torch, so its NaNs follow x86 (SPEC 3.5):
// an operation with a NaN operand returns that NaN quieted (for a * b and a / b with two NaNs: as listed below), and
// an invalid operation (0/0, Inf/Inf, 0*Inf) creates the default NaN 0xFFC00000. The GPU's own arithmetic returns
// 0x7FFFFFFF instead, so every NaN these rules can produce is formed here explicitly. Payloads matter: a NaN's E2M1
// code depends on them (3.5), and a NaN block scale's sign decides its byte (0x7F / 0xFF).
// ---------------------------------------------------------------------------------------------------------
constexpr uint32_t kX86DefaultNaN = 0xFFC00000u;  // SPEC 3.5: a NaN created by an invalid operation
constexpr uint32_t kTorchE4M3NaN = 0x7FF00000u;   // SPEC 3.5: torch's fp32 decode of the E4M3 NaN byte 0x7F
constexpr uint32_t kQuietBit = 0x00400000u;

// Per-plane constants of rule "torchao" (P = A / 2688 and 1 / P, SPEC 5.4) or "torchao_noscale" (no P, 5.5).
struct TorchaoPlane {
  float p, inv_p;
  bool scaled;
};

__device__ __forceinline__ TorchaoPlane make_torchao_plane(float amax, int rule) {
  // A NaN amax (torch.max's NaN, or a supplied one) passes its quieted pattern on to P and to 1 / P.
  const float p = isnan(amax) ? __uint_as_float(__float_as_uint(amax) | kQuietBit) : __fdiv_rn(amax, 2688.0f);
  return TorchaoPlane{p, isnan(p) ? p : __fdiv_rn(1.0f, p), rule == kRuleTorchao};
}

// SPEC 5.4 / 5.5: block amax b (>= 0 or a positive NaN; NaN-propagating) -> scale byte.
// bs = (b / 6) / P; a NaN bs keeps the sign of the NaN it came from: b's (positive), else P's, else the created
// 0xFFC00000 (b = 0 with P = 0, or b = Inf with P = Inf); clamp(bs, 2^-6, 448) keeps a NaN; torch's cast gives
// 0x7F / 0xFF by the NaN's sign, and RNE for numbers (3.2, in range after the clamp).
__device__ __forceinline__ uint32_t torchao_scale_byte(float b, const TorchaoPlane& tp) {
  float bs = __fdiv_rn(b, 6.0f);
  if (isnan(bs)) return 0x7Fu;
  if (tp.scaled) {
    if (isnan(tp.p)) return signbit(tp.p) ? 0xFFu : 0x7Fu;
    bs = __fdiv_rn(bs, tp.p);
    if (isnan(bs)) return 0xFFu;  // created: the x86 default NaN is negative
  }
  return e4m3_scale(fminf(fmaxf(bs, 0.015625f), 448.0f));
}

// SPEC 5.4 / 5.5: scale byte -> multiplier, (1 / P) / decode(byte) or 1 / decode(byte). A NaN P gives its own
// pattern ((1/P) is P's NaN, and a / b keeps a's); else a NaN byte gives torch's decoded NaN 0x7FF00000 with the
// byte's sign (a / b keeps b's when only b is NaN). No other NaN can arise: decode(byte) is in [2^-6, 448].
__device__ __forceinline__ float torchao_multiplier(uint32_t byte, const TorchaoPlane& tp) {
  if (tp.scaled && isnan(tp.p)) return tp.p;
  if ((byte & 0x7Fu) == 0x7Fu) return __uint_as_float(kTorchE4M3NaN | ((byte & 0x80u) << 24));
  const float sf = e4m3_value(byte);
  return tp.scaled ? __fdiv_rn(tp.inv_p, sf) : __fdiv_rn(1.0f, sf);
}

// Whether every multiplier of a NaN/Inf-free block of this plane is finite and > 0 (P > 0 finite with 64 / P
// finite; torchao_noscale: always), so that its products are numbers and the TE fast paths' encode applies.
__device__ __forceinline__ bool torchao_fast_plane(const TorchaoPlane& tp) {
  return !tp.scaled || (tp.p > 0.0f && tp.p < INFINITY && __fmul_rn(tp.inv_p, 64.0f) < INFINITY);
}

// SPEC 3.5: torchao's E2M1 code of a NaN pattern q: its sign bit, and index 2, 3 or 4 from its payload.
__device__ __forceinline__ uint32_t torchao_nan_code(uint32_t q) {
  const uint32_t u = q & 0x7FFFFFFFu;
  return (((u - 0x3EE00001u + ((u >> 22) & 1u)) >> 22) & 7u) | ((q >> 28) & 8u);
}

// SPEC 5.4 / 3.5, round to nearest: the code of element x with multiplier mult. y = mult * x (the multiplier first,
// as the oracle and torch's CPU kernel: a NaN product carries mult's NaN if mult is one, else x's quieted, else it was
// created by 0 * Inf); clamp(y, -6, 6) then 3.1, which is what e2m1_rn_not_nan does to every number (it saturates at
// 6 and keeps the sign). In the quantizers a NaN x always comes with a NaN mult (its block's max is NaN), so x's own
// payload, which the conversion to fp32 may not keep, never reaches a code.
__device__ __forceinline__ uint32_t torchao_code_rn(float x, float mult) {
  const float y = __fmul_rn(mult, x);
  if (!isnan(y)) return e2m1_rn_not_nan(y);
  const uint32_t q =
      isnan(mult) ? __float_as_uint(mult) : (isnan(x) ? (__float_as_uint(x) | kQuietBit) : kX86DefaultNaN);
  return torchao_nan_code(q);
}

// ---------------------------------------------------------------------------------------------------------
// SPEC 7: the 16-point RHT of one block, in place: sign flip, 4 butterfly stages (h = 1, 2, 4, 8), * 0.25,
// round to bf16.
// ---------------------------------------------------------------------------------------------------------
// The butterfly stages h = 1, 2, .., 2^(kStages-1) of SPEC 7 in place (kStages = 4: the whole transform
// before the * 0.25; fewer stages serve the amax shortcut of amax_fast_bf16).
template <int kStages = 4>
__device__ __forceinline__ void hadamard16_stages(float (&v)[16]) {
#pragma unroll
  for (int h = 1; h < (1 << kStages); h <<= 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if ((i & h) == 0) {
        const float a = v[i], b = v[i + h];
        v[i] = __fadd_rn(a, b);
        v[i + h] = __fsub_rn(a, b);
      }
    }
  }
}

__device__ __forceinline__ void rht16(float (&v)[16], uint32_t signs) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = ((signs >> i) & 1u) ? -v[i] : v[i];  // exact sign flip (x * -1)
  hadamard16_stages(v);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = round_bf16(__fmul_rn(v[i], 0.25f));
}

// ---------------------------------------------------------------------------------------------------------
// SPEC 10: Philox4x32-10 (Random123 / curand constants).
// ---------------------------------------------------------------------------------------------------------
struct Philox4 {
  uint32_t x[4];
};

__device__ __forceinline__ Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                 uint32_t k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // key schedule: bump before every round but the first
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

__host__ __device__ __forceinline__ int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
__host__ __device__ __forceinline__ int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

}  // namespace nvfp4
