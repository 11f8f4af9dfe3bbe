// SPEC 12.7's pieces that both mode-sm100 kernels evaluate (gemm/sm100_simt.cu, gemm/sm100_copies.cu): a UE4M3
// scale byte's exponent, the step's integer arithmetic in units of 2^-20, and the CUTLASS SM100 epilogue.
#pragma once

#include <cstdint>

namespace nvfp4_gemm {
namespace sm100 {

constexpr int kUnitExp = -20;  // every group value, truncated addend and accumulator is a multiple of 2^-20
constexpr int kWindow = 35;    // addends truncated toward zero at 2^(E - 35)
constexpr int kZeroExp = -139; // the exponent of a zero group and of a zero C

// e(s) of a UE4M3 scale byte (sign bit ignored): floor(log2 s) of a normal value, -6 of a subnormal one. (A zero or
// NaN byte gets a number too; callers test those first.)
__device__ __forceinline__ int scale_exp(uint32_t byte) {
  const int ef = static_cast<int>((byte >> 3) & 15);
  return ef > 0 ? ef - 7 : -6;
}

// Whether a scale byte is UE4M3's NaN (0x7F; 0xFF with the ignored sign bit).
__device__ __forceinline__ bool scale_is_nan(uint32_t byte) { return (byte & 0x7F) == 0x7F; }

// x truncated toward zero to a multiple of 2^s (s >= 0).
__device__ __forceinline__ long long truncate_to(long long x, int s) {
  const unsigned long long a = static_cast<unsigned long long>(x < 0 ? -x : x);
  const long long t = static_cast<long long>((a >> s) << s);
  return x < 0 ? -t : t;
}

// x rounded toward zero to 24 significant bits (fp32's; every value here lies far above fp32's subnormals).
__device__ __forceinline__ long long round_fp32_rz(long long x) {
  const unsigned long long a = static_cast<unsigned long long>(x < 0 ? -x : x);
  const int bits = 64 - __clzll(static_cast<long long>(a));
  const int cut = bits > 24 ? bits - 24 : 0;
  const long long t = static_cast<long long>((a >> cut) << cut);
  return x < 0 ? -t : t;
}

// One step's sum (SPEC 12.7, item 4) in units of 2^-20: C and the four group values v[g], E their largest exponent;
// every addend truncated to a multiple of 2^(E - 35), the exact sum rounded toward zero to 24 bits (a zero sum is +0).
__device__ __forceinline__ long long step_sum(long long c, const long long (&v)[4], int e) {
  const int cut = e - kWindow - kUnitExp > 0 ? e - kWindow - kUnitExp : 0;
  long long sum = truncate_to(c, cut);
#pragma unroll
  for (int g = 0; g < 4; ++g) sum += truncate_to(v[g], cut);
  return round_fp32_rz(sum);
}

// The CUTLASS SM100 epilogue (SPEC 12.7) of one accumulator value: z = RN(alpha * acc) (no bias) or
// RN(alpha * acc + bias) (one FMA); then RN(C + z) with C (`c` non-null), RN(+0 + z) without C and bias, else z.
__device__ __forceinline__ float epilogue_value(float acc, float alpha, const float* bias, int col, const float* c) {
  float z;
  if (bias) z = __fmaf_rn(alpha, acc, bias[col]);
  else z = __fmul_rn(alpha, acc);
  if (c) return __fadd_rn(*c, z);
  return bias ? z : __fadd_rn(0.0f, z);
}

}  // namespace sm100
}  // namespace nvfp4_gemm
