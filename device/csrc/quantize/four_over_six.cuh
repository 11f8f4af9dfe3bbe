// The 4over6 quantizer (SPEC 5.6): bf16 input, rule "te", round to nearest, no RHT, 1x16 or 16x16 blocks, the rowwise
// plane of X and the columnwise plane of X^T in one kernel (the tile, grid and output layout of quantize_fast_bf16 in
// fast_bf16.cuh; device/_dispatch.py plan_quantize runs it for every 4over6 call).
//
// Every block is quantized twice, with its amax mapped to E2M1's 6 (byte_6) and to 4 (byte_4, a 1.5x larger scale);
// each candidate's error over the block row is summed in element order from +0, and the candidate with the smaller
// error is written (a tie or a NaN keeps map-to-6). With 16x16 blocks the 16 row errors of a tile are summed as SPEC
// 5.6's tree before the comparison. Thread layout as quantize_fast_bf16: one thread per whole 16-element block row in
// both planes (rowwise: block t % 8 of tile rows 32 it + t / 8; columnwise: tile columns 2 (t % 64) + h, 16-row blocks
// t / 64 + 4 jj), so a block's scale bytes, table entries and clamp tests are formed once per 16 elements and no lane
// pair exchanges partial sums.
//
// The fast path (fo6_block_fast), per element and candidate: the magnitude index by fast_bf16's three-candidate
// minimum (SPEC 3.6, e2m1_mag_magic), the value of that index in the error's domain by one byte lookup (PRMT), a shift
// and an exact product whose difference to |x| (or |x| S_enc) is one FMA (fo6_diff: no I2F, no division), then the
// sum. Exact because:
//  * magnitudes: the multiplier m is > 0 and finite, so a finite x and its code's value q (hence p = q d and the
//    input-domain value) carry x's sign or are zero; every rounding is odd-symmetric, so diff = sign(x) * RN(|v| - |x|)
//    (q = 0: diff = -x, |diff| = |x|) and |diff| and diff * diff do not see the sign. The sign nibbles come from the
//    bf16 sign bits (fast_bf16's sign_nibbles_*), as the plain fast kernel forms them;
//  * the per-byte factors (m, (d A) / 6G, ((1.5 d A) / 6G) 2^-4 or 16 d) are one table per plane and CTA (Fo6Entry),
//    each formed with SPEC 5.6's roundings;
//  * it runs on block rows without NaN / Inf whose multipliers keep every product below 7 (needs_clamp false for both
//    candidates), and in the input domain only for an amax in [2^-100, 2^100] (fo6_diff's exactness range). Any other
//    block row (a warp vote, so the warp stays converged) takes fo6_block_slow: SPEC 5.6 element by element.
// 1x16 blocks, input domain (fo6_choose_fast): the candidates are compared by filter sums first, which cost about half
// of the exact ones (no decode into the input domain: fo6_filter_sum), with a proven bound on their distance from the
// exact sums (fo6_filter_bound). Where the bound decides, only the kept candidate is encoded; where it cannot (about
// 0.01-0.2% of random block rows, and every exact tie) the row takes fo6_block_fast's exact sums. In the fast-math
// domain the exact sums cost no more than the filter (the value is a byte lookup and one exact product), so those
// kernels run fo6_block_fast on every row, and so do 16x16 blocks (their choice is made on tile sums).
// The tile is loaded by cp.async; block maxima are integer SIMD maxima of the bf16 magnitudes (block_max_f32_bits).
// 16x16 blocks: the tile maxima come first (exact NaN-ignoring maxima through shared memory); the rowwise row errors
// go through shared memory to one thread per tile and candidate for the tree, then a second pass encodes each row with
// the tile's choice; the columnwise tile's 16 plane rows are 8 lanes x 2 columns, whose tree is three xor shuffles
// (offsets 4, 2, 1) and one add.
#pragma once

#include <cstdint>

#include "quantize/fast_bf16.cuh"
#include "quantize/general.cuh"
#include "quantize/layout.cuh"
#include "quantize/numerics.cuh"

namespace nvfp4 {


// One plane's constants under 4over6 (SPEC 5.6).
struct Fo6Plane {
  float amax;     // A, as given (0, +Inf or NaN included)
  float s_enc;    // s_enc_te_g(A, 6G)
  float six_g;    // fp32(6G): 2688 or 1536
  bool by_parts;  // A in [2^-100, 2^100]: the input-domain values come from fo6_plane_value (exact there)
};

__device__ __forceinline__ Fo6Plane make_fo6_plane(float amax, float six_g) {
  return Fo6Plane{amax, s_enc_te_g(amax, six_g), six_g, amax >= 0x1p-100f && amax <= 0x1p100f};
}

// SPEC 5.6's b / 6, correctly rounded, for a block amax b that is a bf16 value (the 4over6 kernel reads bf16 only):
// q = RN(b c) with c = fp32(1/6), r = b - 6 q exact in one FMA, then RN(q + r c). For every finite bf16 b >= 0 this
// is RN(b / 6), subnormal quotients included (tests/test_four_over_six_filter.py checks all 32,640 of them in exact
// arithmetic); three instructions against __fdiv_rn's eleven, its FCHK branch and its slow-path call in the loop. An
// Inf or NaN b (a flagged block, which leaves for the per-element path) gives NaN where the division gives Inf or
// NaN: fo6_scale_bytes' fminf turns either into 448.
__device__ __forceinline__ float fo6_div6(float b) {
  const float q = __fmul_rn(b, kOneSixth);
  return __fmaf_rn(__fmaf_rn(-6.0f, q, b), kOneSixth, q);
}

// SPEC 5.6: a block's map-to-6 and map-to-4 scale bytes from its amax b (b >= 0, a bf16 value, never NaN under rule
// "te"; the bytes are 0x00..0x7E).
__device__ __forceinline__ void fo6_scale_bytes(float b, float s_enc, uint32_t& byte6, uint32_t& byte4) {
  const float base = __fmul_rn(fo6_div6(b), s_enc);
  byte6 = e4m3_scale(fminf(base, 448.0f));
  byte4 = e4m3_scale(fminf(__fmul_rn(base, 1.5f), 448.0f));
}

// One candidate of one block row: its decoded scale d, encode multiplier m (the plane's table, SPEC 5.6's
// fminf(1 / (d * S_dec), FLT_MAX)) and, for the input-domain error, w1 = ((d * A) / 6G) and w15 = ((1.5 d * A) / 6G).
struct Fo6Candidate {
  float d, mult, w1, w15;
};

template <bool kFastMath>
__device__ __forceinline__ Fo6Candidate make_candidate(uint32_t byte, float mult, const Fo6Plane& fp) {
  Fo6Candidate c{e4m3_value(byte), mult, 0.0f, 0.0f};
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

// SPEC 5.6's input-domain value ((q d) * A) / 6G as written, for an amax outside fo6_plane_value's range.
__device__ __forceinline__ float fo6_exact_value(float q, float d, float amax, float six_g) {
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

// fo6_diff's byte tables (idx 0-3 in the low word, 4-7 in the high word)
constexpr uint32_t kFo6QTabLo = 0xF7F6F400u, kFo6QTabHi = 0xFBFAF9F8u;  // fast-math: idx 0-3, 4-7
constexpr uint32_t kFo6ExpTabLo = 0x837F7E00u, kFo6ExpTabHi = 0x85818480u;  // input domain: idx 0-3, 4-7

// One scale byte's factors in one plane (SPEC 5.6), a table of 128 per plane built once per CTA:
//  mult: m = fminf(1 / (d * S_dec), FLT_MAX);
//  input domain: w1 = (d * A) / 6G and w15 = ((1.5 d * A) / 6G) * 2^-4 (fo6_diff); fast-math: w1 = 16 d;
struct alignas(16) Fo6Entry {
  float mult, w1, w15;
  uint32_t tab_lo;  // fo6_diff's table word (a constant: read from here, it stays in a register)
};
__device__ __forceinline__ Fo6Entry make_fo6_entry(uint32_t byte, const Fo6Plane& fp, bool fast_math) {
  const float d = e4m3_value(byte);
  Fo6Entry e{block_multiplier(byte, PlaneScale{0.0f, __fdiv_rn(1.0f, fp.s_enc)}), 0.0f, 0.0f,
             fast_math ? kFo6QTabLo : kFo6ExpTabLo};
  if (fast_math) {
    e.w1 = __fmul_rn(d, 16.0f);  // exact (d <= 448)
  } else if (fp.by_parts) {
    e.w1 = __fdiv_rn(__fmul_rn(d, fp.amax), fp.six_g);
    // 1.5 d is exact (d has <= 4 significant bits); the quotient is >= 2^-120 (d >= 2^-9, A >= 2^-100, 6G <= 2688)
    // or 0, so the scaling by 2^-4 is exact (the result stays normal)
    e.w15 = __fmul_rn(__fdiv_rn(__fmul_rn(__fmul_rn(d, 1.5f), fp.amax), fp.six_g), 0x1p-4f);
  }
  return e;
}

// The exact per-element path for one block row of 16 elements (SPEC 5.6 as written), for a block row with a NaN / Inf
// element, a candidate whose products may reach 7, or an input-domain amax outside [2^-100, 2^100]. A loop that is not
// unrolled, reading element i as the bf16 at src + i * stride of the tile: the rare path stays small. b: the block's
// amax (SPEC 6.3's tile max), or a negative value for "the NaN-ignoring max of these 16 elements" (SPEC 5.2).
struct Fo6Block {
  uint64_t k6, k4;  // the codes, element i in nibble i
  float s6, s4;     // the error sums, from +0 in element order
  uint32_t byte6, byte4;

  // Into the fast path's variables: the bytes, the codes as two words (elements 0-7, 8-15) and the sums.
  __device__ __forceinline__ void unpack(uint32_t& b6, uint32_t& b4, uint32_t (&c6)[2], uint32_t (&c4)[2], float& e6,
                                         float& e4) const {
    b6 = byte6;
    b4 = byte4;
    c6[0] = (uint32_t)k6;
    c6[1] = (uint32_t)(k6 >> 32);
    c4[0] = (uint32_t)k4;
    c4[1] = (uint32_t)(k4 >> 32);
    e6 = s6;
    e4 = s4;
  }
};
template <bool kMse, bool kFastMath>
__device__ __forceinline__ Fo6Block fo6_block_slow(const uint8_t* src, int stride, float b, const Fo6Entry* tab,
                                                   const Fo6Plane& fp) {
  if (b < 0.0f) {
    b = 0.0f;
#pragma unroll 1
    for (int i = 0; i < 16; ++i) b = fmaxf(b, fabsf(to_f32(*reinterpret_cast<const __nv_bfloat16*>(src + i * stride))));
  }
  Fo6Block r{0, 0, 0.0f, 0.0f, 0u, 0u};
  fo6_scale_bytes(b, fp.s_enc, r.byte6, r.byte4);
  const Fo6Candidate c6 = make_candidate<kFastMath>(r.byte6, tab[r.byte6].mult, fp),
                     c4 = make_candidate<kFastMath>(r.byte4, tab[r.byte4].mult, fp);
#pragma unroll 1
  for (int i = 0; i < 16; ++i) {
    const float x = to_f32(*reinterpret_cast<const __nv_bfloat16*>(src + i * stride));
    const float xs = kFastMath ? __fmul_rn(x, fp.s_enc) : 0.0f;
    uint32_t k6, k4;
    r.s6 = __fadd_rn(r.s6, fo6_element_error<kMse, kFastMath>(x, xs, c6, fp, k6));
    r.s4 = __fadd_rn(r.s4, fo6_element_error<kMse, kFastMath>(x, xs, c4, fp, k4));
    r.k6 |= (uint64_t)k6 << (4 * i);
    r.k4 |= (uint64_t)k4 << (4 * i);
  }
  return r;
}

// The value, in the error's domain, of the magnitude index in the low half of t (e2m1_mag_magic's result: bits 4-15
// are zero), without a conversion: __byte_perm looks up byte idx of an 8-byte table (byte 0 is 0 for idx 0, and the
// zero selector nibbles 1-3 repeat it in bytes 1-3).
//  * fast-math (p = q d, exact: SPEC 5.6): the byte is the top 8 bits (exponent and first mantissa bit) of q / 16
//    (0.5 / 16 = 2^-5 -> 0xF4, 1 / 16 -> 0xF6, 1.5 / 16 -> 0xF7, ... 6 / 16 -> 0xFB), so byte << 22 is q / 16 exactly
//    and q / 16 * 16 d = q d (both products exact: at most 6 significant bits).
//  * input domain: fo6_plane_value's identity, ((q d) A) / 6G = 2^k w1 for q = 2^k (k = -1 .. 2: idx 1, 2, 4, 6) and
//    2^k w15' for q = 1.5 2^k (k = 0 .. 2: idx 3, 5, 7), w15' = (1.5 d A) / 6G. The byte is the biased exponent of 2^k,
//    plus 4 for the 1.5 entries (0x7E, 0x7F, 0x83, 0x80, 0x84, 0x81, 0x85; 0 for idx 0), so byte << 23 is 2^k or
//    2^(k+4), and byte >= 0x83 picks the table's w15 = w15' 2^-4: 2^(k+4) * w15' 2^-4 = 2^k w15'. Every factor and
//    product is normal or zero for A in [2^-100, 2^100] (fo6_plane_value), so the products are exact.
// byte idx of the table {lo, hi} for t = (anything) << 16 | idx: PRMT with t as the selector (its nibbles 1-3 are zero,
// and nibble 0 < 8 selects without sign replication; __byte_perm would mask the selector with 0x7777 first)
__device__ __forceinline__ uint32_t fo6_table_byte(uint32_t lo, uint32_t hi, uint32_t t) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(t));
  return r;
}
// RN(v - ref), v the value of the magnitude index in the low half of t in the error's domain: v = a * w, a from the
// table byte (q / 16, 2^k or 2^(k+4)) and w the entry's factor, is an exact product (above), so one FMA,
// fma(a, w, -ref) = RN(a w - ref), gives the bits of SPEC 5.6's RN(v - ref) (SPEC 1.1: a fused form that changes no
// result). tab_lo: the table's low word, kFo6QTabLo or kFo6ExpTabLo, held in a register by the caller
// (Fo6Entry::tab_lo).
template <bool kFastMath>
__device__ __forceinline__ float fo6_diff(uint32_t t, const Fo6Entry& c, float ref) {
  if constexpr (kFastMath) {
    const uint32_t byte = fo6_table_byte(c.tab_lo, kFo6QTabHi, t);
    return __fmaf_rn(__uint_as_float(byte << 22), c.w1, -ref);
  } else {
    const uint32_t byte = fo6_table_byte(c.tab_lo, kFo6ExpTabHi, t);
    return __fmaf_rn(__uint_as_float(byte << 23), byte >= 0x83u ? c.w15 : c.w1, -ref);
  }
}

// Both candidates of one block row of 16 elements without NaN / Inf, whose multipliers keep every product below 7
// (needs_clamp false for both: SPEC 3.6's second form): the magnitude codes (element e in nibble e % 8 of word e / 8,
// sign bits clear) and the error sums, each from +0 in element order (SPEC 5.6). The error of element e is
// |RN(|v| - |x|)| or its square, v its value in the comparison domain and |x| replaced by RN(|x| S_enc) in the
// fast-math domain: the sign-free form of diff (file comment), by fo6_diff. Every other operation is one fp32 rounding
// (no FMA contraction: explicit __fmul_rn / __fadd_rn).
template <bool kMse, bool kFastMath>
__device__ __forceinline__ void fo6_block_fast(const float (&x)[16], const Fo6Entry& c6, const Fo6Entry& c4,
                                               float s_enc, uint32_t (&k6)[2], uint32_t (&k4)[2], float& s6,
                                               float& s4) {
  constexpr uint32_t kBias = packed_bias8(kMagicLoBits);  // e2m1_mag_magic<false> returns 0x4AC0 << 16 | idx
  k6[0] = k6[1] = k4[0] = k4[1] = 0u - kBias;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float ax = fabsf(x[i]);
    const float ref = kFastMath ? __fmul_rn(ax, s_enc) : ax;
    const uint32_t t6 = e2m1_mag_magic<false>(ax, c6.mult), t4 = e2m1_mag_magic<false>(ax, c4.mult);
    k6[i >> 3] += t6 << (4 * (i & 7));
    k4[i >> 3] += t4 << (4 * (i & 7));
    const float d6 = fo6_diff<kFastMath>(t6, c6, ref), d4 = fo6_diff<kFastMath>(t4, c4, ref);
    const float e6 = kMse ? __fmul_rn(d6, d6) : fabsf(d6), e4 = kMse ? __fmul_rn(d4, d4) : fabsf(d4);
    s6 = i == 0 ? e6 : __fadd_rn(s6, e6);  // +0 + e = e (e is >= +0 or NaN)
    s4 = i == 0 ? e4 : __fadd_rn(s4, e4);
  }
}

// A block row's path: the fast one needs no NaN / Inf (bmax_bits, block_max_f32_bits' flag), products below 7 for both
// candidates, and a plane whose values fo6_diff forms exactly (plane_fast).
__device__ __forceinline__ bool fo6_fast_ok(bool plane_fast, uint32_t bmax_bits, const Fo6Entry& c6,
                                            const Fo6Entry& c4) {
  const float bmax = __uint_as_float(bmax_bits);
  return plane_fast && bmax_bits < 0x7F800000u && !needs_clamp(bmax, c6.mult) && !needs_clamp(bmax, c4.mult);
}

// The 1x16 choice by filter sums (file comment): a sum within a proven distance of a candidate's SPEC 5.6 error, and
// the exact sums only where that distance leaves the comparison open.
//
// fo6_filter_sum: F = sum over the block row of D^2 (mse) or |D| (mae), D = Y - r(Y), Y = RN(|x| m) the encode's
// product (SPEC 3.1) and r(Y) a nearest E2M1 point of Y, found without a table: Y' = RN(Y 2^-126) places E2M1 in fp32
// (0.5 -> the subnormal 2^-127, 1 -> the least normal 2^-126, 6 -> 1.5 * 2^-124), so that E2M1's points are exactly
// the fp32 values with one mantissa bit, and (Y'bits + 2^21) & ~(2^22 - 1) rounds Y' to the nearest of them (half up;
// a tie is as near either way). Y < 7 (needs_clamp false), so r(Y) <= 6 and |D| <= 1. D = fma(r', -2^126, Y) has
// one rounding, and |D| lies in [dist(Y), dist(Y) + 3u], u = 2^-24 (Y' is within u of Y).
template <bool kMse>
__device__ __forceinline__ float fo6_filter_sum(const float (&x)[16], float mult) {
  float f = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float y = __fmul_rn(fabsf(x[i]), mult);
    const uint32_t yb = __float_as_uint(__fmul_rn(y, 0x1p-126f));  // subnormal below Y = 1 (no flush to zero)
    const float r = __uint_as_float((yb + 0x00200000u) & 0xFFC00000u);
    const float dlt = __fmaf_rn(r, -0x1p126f, y);
    f = kMse ? __fmaf_rn(dlt, dlt, f) : __fadd_rn(f, fabsf(dlt));
  }
  return f;
}

// A bound on |S / W^k - F| (k = 2 for mse, 1 for mae): S a candidate's SPEC 5.6 error sum, F its fo6_filter_sum,
// W = d A / 6G (input domain) or d (fast-math), d the candidate's decoded scale. Per element with a normal Y,
// |diff| = W (dist(Y) + t) with |t| <= 48u (v = q W (1 +- 2u), |x| = Y W (1 +- 5u) from m's roundings, q <= 6, Y < 7,
// and diff's own rounding; with a subnormal Y the error is absolute, below 2^-149 W), and |D| = dist(Y) + p with
// 0 <= p <= 3u, so each term of S / W^k and of F differs by at most 51u (mae) or 51u (2 dist + 51u) (mse, with
// sum(dist) <= sum |D| <= 4 sqrt(F) (1 + 8u)); the fp32 squares and the two sums of 16 terms add 17u and 16u of their
// totals. Hence 816u + 40u F (mae) and 408u sqrt(F) + 40u F + 16 (51u)^2 (mse), rounded up here to 1024u + 48u F and
// 448u sqrt(F) + 48u F (sqrt.approx is within 2^-22), plus 2^-30, which holds the mse's u^2 term (2^-32.6; it is all
// of the bound where F = 0 but S is not), the subnormal Y and the products that may fall below fp32's normal range
// (W^k >= 2^-80: fo6_choose_fast's range test).
template <bool kMse>
__device__ __forceinline__ float fo6_filter_bound(float f) {
  constexpr float u = 0x1p-24f;
  if constexpr (kMse) {
    float root;
    asm("sqrt.approx.f32 %0, %1;" : "=f"(root) : "f"(f));
    return __fadd_rn(__fmaf_rn(448.0f * u, root, __fmul_rn(48.0f * u, f)), 0x1p-30f);
  } else {
    return __fmaf_rn(48.0f * u, f, 1024.0f * u + 0x1p-30f);
  }
}

// SPEC 5.6's choice from the two filter sums, where the bounds decide it. S_4 < S_6 compares as
// (d_4 / d_6)^k S_4 / W_4^k < S_6 / W_6^k (W_4 / W_6 = d_4 / d_6 in both domains); d_4 / d_6 = m_6 / m_4 to within
// 4u (m = fminf(1 / (d S_dec), FLT_MAX), unclamped here), formed with rcp.approx (1 ulp). The margin adds 64u of both
// sides for these ratios and the comparison's own roundings. Returns false where the sums cannot decide (the
// difference within the margin, a NaN).
template <bool kMse>
__device__ __forceinline__ bool fo6_filter_decides(float f6, float f4, float m6, float m4, bool& pick4) {
  constexpr float u = 0x1p-24f;
  float inv_m4;
  asm("rcp.approx.f32 %0, %1;" : "=f"(inv_m4) : "f"(m4));
  const float rho = __fmul_rn(m6, inv_m4);  // d_4 / d_6
  const float k = kMse ? __fmul_rn(rho, rho) : rho;
  const float a4 = __fmul_rn(k, f4);
  const float margin = __fmaf_rn(k, fo6_filter_bound<kMse>(f4),
                                 __fmaf_rn(64.0f * u, __fadd_rn(a4, f6), fo6_filter_bound<kMse>(f6)));
  pick4 = a4 < f6;
  return fabsf(__fsub_rn(a4, f6)) > margin;
}

// The 16 magnitude codes of a block row under one multiplier (SPEC 3.6's second form, products below 7): element e in
// nibble e % 8 of word e / 8, sign bits clear.
__device__ __forceinline__ void encode16_mag(const float (&x)[16], float mult, uint32_t (&k)[2]) {
  constexpr uint32_t kBias = packed_bias8(kMagicLoBits);
  k[0] = k[1] = 0u - kBias;
#pragma unroll
  for (int i = 0; i < 16; ++i) k[i >> 3] += e2m1_mag_magic<false>(x[i], mult) << (4 * (i & 7));
}

// One block row with 1x16 blocks on the fast path (fo6_fast_ok holds for every active lane): SPEC 5.6's kept candidate.
// Warp-collective (every lane calls it; `active` marks the lanes with a block row). A row whose two scale bytes are
// equal keeps map-to-6 (the candidates are the same, the errors tie); otherwise the filter sums decide, and the rows
// they cannot decide (or whose W^k may leave fp32's normal range: both multipliers must lie in [2^-40, 2^40]) take
// fo6_block_fast's exact sums. `plane_ok` (the plane's amax in [2^-100, 2^100], which the bound's unclamped multipliers
// need) holds on every row the input domain sends here; it keeps the precondition local. On return k6 and byte6 hold
// the kept candidate's magnitude codes and scale byte.
template <bool kMse, bool kFastMath>
__device__ __forceinline__ void fo6_choose_fast(bool active, const float (&x)[16], const Fo6Entry& c6,
                                                const Fo6Entry& c4, uint32_t& byte6, uint32_t byte4, bool plane_ok,
                                                float s_enc, uint32_t (&k6)[2]) {
  bool pick4 = false, exact = false;
  if (active && byte4 != byte6) {
    if (plane_ok && c4.mult >= 0x1p-40f && c6.mult <= 0x1p40f) {
      const float f6 = fo6_filter_sum<kMse>(x, c6.mult), f4 = fo6_filter_sum<kMse>(x, c4.mult);
      exact = !fo6_filter_decides<kMse>(f6, f4, c6.mult, c4.mult, pick4);
    } else {
      exact = true;
    }
  }
  if (__any_sync(0xffffffffu, exact) && exact) {
    uint32_t k4[2];
    float s6 = 0.0f, s4 = 0.0f;
    fo6_block_fast<kMse, kFastMath>(x, c6, c4, s_enc, k6, k4, s6, s4);
    pick4 = s4 < s6;  // a tie or a NaN keeps map-to-6
    if (pick4) {
      k6[0] = k4[0];
      k6[1] = k4[1];
    }
  } else if (active) {
    encode16_mag(x, pick4 ? c4.mult : c6.mult, k6);
  }
  if (pick4) byte6 = byte4;
}

// SPEC 5.6's 16x16 tree over plane rows r = 2 p + h of a columnwise tile, p = lane % 8 holding rows 2p (h = 0, e0)
// and 2p + 1 (e1): (e_r + e_r+8) is lanes p, p ^ 4; (.. + ..) over r, r + 4 is p, p ^ 2; over r, r + 2 is p, p ^ 1;
// the last add joins the even rows' sum (h = 0) and the odd rows' (h = 1). Every lane of the 8 gets the same sum (each
// fp32 add is commutative). All 32 lanes call it.
__device__ __forceinline__ float col_tile_tree_sum(float e0, float e1) {
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) {
    e0 = __fadd_rn(e0, __shfl_xor_sync(0xffffffffu, e0, o));
    e1 = __fadd_rn(e1, __shfl_xor_sync(0xffffffffu, e1, o));
  }
  return __fadd_rn(e0, e1);
}

// 4over6 quantizer: one CTA of 256 threads per 128 x 128 tile of X (bf16), as quantize_fast_bf16; one instantiation
// per block shape (kBlock2d), so that each compiles to its own path only.
//  1. The tile is loaded into shared memory by cp.async (rows past the group and columns past K as zeros); then the
//     planes' constants and byte tables (tab_s); with 16x16 blocks, the tile maxima (tmax_s).
//  2. Rowwise plane: thread t owns the 16-block t % 8 of tile rows 32 it + t / 8, it = 0..3.
//  3. Columnwise plane: thread t owns tile columns 2 (t % 64) + h, h = 0, 1, and the 16-row blocks t / 64 + 4 jj,
//     jj = 0, 1 (warp-uniform); the codes are staged and stored as quantize_fast_bf16's (columnwise_tile_store).
// kMse: the squared error (else the absolute error); kFastMath: the error in the product domain (SPEC 5.6); kBlock2d:
// 16x16 blocks (SPEC 6.3). Four CTAs per SM (64 registers; the input-domain kernels spill a few words): the kernel is
// bound by instruction issue, and it measured up to 1.9% faster than with three CTAs per SM (docs/design.md, 3.1).
template <bool kMse, bool kFastMath, bool kBlock2d>
__global__ void __launch_bounds__(256, 4) quantize_4over6_kernel(QuantArgs a) {
  using T = __nv_bfloat16;
  constexpr int TK = 128;  // tile columns
  __shared__ alignas(16) uint8_t tile[kTileM * 256];
  // the columnwise codes' stage (col_stage_offset); before the columnwise plane, with 16x16 blocks: the (row, block)
  // maxima, then the rowwise row errors [candidate 6 / 4][row][block]
  __shared__ alignas(16) uint8_t cstage[kTileM * 64];
  __shared__ Fo6Entry tab_s[2][128];  // [plane][scale byte]
  __shared__ float tmax_s[8][8];      // 16x16 blocks: the tile maxima
  __shared__ float tsum_s[2][8][8];   // 16x16 blocks: the rowwise tile error sums [candidate 6 / 4]
  float(*bmax_s)[8] = reinterpret_cast<float(*)[8]>(cstage);           // [128][8]
  float(*rerr_s)[kTileM][8] = reinterpret_cast<float(*)[kTileM][8]>(cstage);  // [2][128][8]

  GroupView gv;
  int64_t kt;
  if (!resolve_grid_tile(a.offs, a.E, a.M, blockIdx.x, quant_k_tiles<T>(a.K), gv, kt, a.tile_recs)) return;
  const int t = threadIdx.x;
  const int64_t k0 = kt * TK;
  const int kleft = (int)min(a.K - k0, (int64_t)TK);  // valid columns of this tile (> 0)
  const int rleft = gv.rows;                           // valid rows of this tile (> 0)

  // ---- 1. load (X and the offsets only: this part may overlap the launch that writes the amaxes) ----
  {
    const int chunk = t & 15, rsub = t >> 4;
    const bool col_ok = chunk * 8 < kleft;
    const char* src = reinterpret_cast<const char*>(reinterpret_cast<const T*>(a.x) + (gv.first_row + rsub) * a.K +
                                                    k0 + chunk * 8);
    const int64_t step = 32 * a.K;  // 16 rows, in bytes
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(tile + rsub * 256 + chunk * 16));
#pragma unroll
    for (int it = 0; it < 8; ++it) {  // a piece past the rows or K is zero-filled (source size 0, not read)
      const bool ok = col_ok && it * 16 + rsub < rleft;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + it * 16 * 256), "l"(src),
                   "r"(ok ? 16 : 0)
                   : "memory");
      src += step;
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the amaxes' writer has finished: they are visible from here
  const float six_g = a.global_scale_max == 256 ? 1536.0f : 2688.0f;
  const Fo6Plane fp_row = make_fo6_plane(a.row_data != nullptr ? a.row_amax[gv.g] : 0.0f, six_g);
  const Fo6Plane fp_col = make_fo6_plane(a.col_data != nullptr ? a.col_amax[gv.g] : 0.0f, six_g);
  {  // warps 0-3: the rowwise plane's table, warps 4-7 the columnwise plane's (one entry per thread)
    const Fo6Plane fp = make_fo6_plane((t >> 7) == 0 ? fp_row.amax : fp_col.amax, six_g);
    tab_s[t >> 7][t & 127] = make_fo6_entry((uint32_t)(t & 127), fp, kFastMath);
  }
  // the fast path's planes (fo6_diff): any amax in the fast-math domain, [2^-100, 2^100] in the input domain
  const bool row_fast = kFastMath || fp_row.by_parts, col_fast = kFastMath || fp_col.by_parts;
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // this thread's tile pieces have landed; the barrier: all
  __syncthreads();

  const int blk = t & 7, rrow = t >> 3;  // rowwise ownership
  if constexpr (kBlock2d) tile_maxima_16x16(tile, bmax_s, tmax_s);  // SPEC 6.3: one max per 16x16 tile

  // ---- 2. rowwise plane of X (SPEC 6.1) ----
  if (a.row_data != nullptr) {
    const Fo6Entry* tab = tab_s[0];
    const auto [gblk, blk_ok, pad_ok, dptr, dstep, sptr, sstep] = rowwise_tile_out(a, gv, k0, kleft, blk, rrow);
    // pass 1: both candidates of every block row; 1x16 blocks are written here, 16x16 blocks keep their row errors
#pragma unroll 1
    for (int it = 0; it < 4; ++it) {
      const int row = it * 32 + rrow;
      const bool active = row < rleft && blk_ok;
      const uint4 qa = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32);
      const uint4 qb = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32 + 16);
      const uint32_t w[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
      const uint32_t bbits = block_max_f32_bits(qa, qb);
      const float b = kBlock2d ? tmax_s[row >> 4][blk] : __uint_as_float(bbits);
      uint32_t byte6, byte4;
      fo6_scale_bytes(b, fp_row.s_enc, byte6, byte4);
      const Fo6Entry c6 = tab[byte6], c4 = tab[byte4];
      float x[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) x[e] = bf16_half(w[e >> 1], e & 1);
      uint32_t k6[2], k4[2] = {0u, 0u};
      float s6 = 0.0f, s4 = 0.0f;
      if (__all_sync(0xffffffffu, !active || fo6_fast_ok(row_fast, bbits, c6, c4))) {
        if constexpr (!kFastMath && !kBlock2d) {  // the kept candidate in k6 / byte6 (s6 = s4 = 0 keeps it below)
          fo6_choose_fast<kMse, kFastMath>(active, x, c6, c4, byte6, byte4, fp_row.by_parts, fp_row.s_enc, k6);
        } else if (active) {
          fo6_block_fast<kMse, kFastMath>(x, c6, c4, fp_row.s_enc, k6, k4, s6, s4);
        }
        if (active) {
          const uint32_t sg0 = sign_nibbles_pairs(w[0], w[1], w[2], w[3]), sg1 = sign_nibbles_pairs(w[4], w[5], w[6], w[7]);
          k6[0] += sg0;  // nibble bit 3 of a magnitude code is clear: + is |
          k6[1] += sg1;
          k4[0] += sg0;
          k4[1] += sg1;
        }
      } else if (active) {
        fo6_block_slow<kMse, kFastMath>(tile + row * 256 + blk * 32, 2, kBlock2d ? b : -1.0f, tab, fp_row)
            .unpack(byte6, byte4, k6, k4, s6, s4);
      }
      uint8_t* sp = sptr + it * sstep;
      if constexpr (kBlock2d) {
        rerr_s[0][row][blk] = s6;  // a row past the group adds +0 (SPEC 5.6)
        rerr_s[1][row][blk] = s4;
      } else if (active) {
        const bool pick4 = s4 < s6;  // a tie or a NaN keeps map-to-6
        store_once(reinterpret_cast<uint2*>(dptr + it * dstep),
                   pick4 ? make_uint2(k4[0], k4[1]) : make_uint2(k6[0], k6[1]));
        store_once(sp, (uint8_t)(pick4 ? byte4 : byte6));
      } else if (pad_ok) {
        store_once(sp, (uint8_t)0);
      }
    }
    if constexpr (kBlock2d) {
      __syncthreads();
      if (t < 128) {  // one thread per tile and candidate: SPEC 5.6's tree of the 16 row errors
        const int cand = t >> 6, tb = (t >> 3) & 7, cb = t & 7;
        float e[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) e[i] = rerr_s[cand][tb * 16 + i][cb];
        tsum_s[cand][tb][cb] = tile_tree_sum(e);
      }
      __syncthreads();
      // pass 2: every row of a tile with the tile's candidate (SPEC 3.6 / 3.1 encodes of its multiplier)
#pragma unroll 1
      for (int it = 0; it < 4; ++it) {
        const int row = it * 32 + rrow;
        uint8_t* sp = sptr + it * sstep;
        if (row < rleft && blk_ok) {
          uint32_t byte6, byte4;
          fo6_scale_bytes(tmax_s[row >> 4][blk], fp_row.s_enc, byte6, byte4);
          const uint32_t sb = tsum_s[1][row >> 4][blk] < tsum_s[0][row >> 4][blk] ? byte4 : byte6;
          const float mult = tab[sb].mult;
          const uint4 qa = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32);
          const uint4 qb = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32 + 16);
          const uint32_t bbits = block_max_f32_bits(qa, qb);
          uint32_t lo, hi;
          if (bbits < 0x7F800000u) {
            encode16_words(qa, qb, mult, needs_clamp(__uint_as_float(bbits), mult), lo, hi);
          } else {
            const uint32_t wl[4] = {qa.x, qa.y, qa.z, qa.w}, wh[4] = {qb.x, qb.y, qb.z, qb.w};
            lo = encode8_slow(wl, mult);
            hi = encode8_slow(wh, mult);
          }
          store_once(reinterpret_cast<uint2*>(dptr + it * dstep), make_uint2(lo, hi));
          store_once(sp, (uint8_t)sb);
        } else if (pad_ok) {
          store_once(sp, (uint8_t)0);
        }
      }
    }
  }

  // ---- 3. columnwise plane of X^T (SPEC 6.2): the padded token axis's zeros are elements like any other ----
  if (a.col_data != nullptr) {
    if constexpr (kBlock2d) __syncthreads();  // the stage held the rowwise row errors
    const Fo6Entry* tab = tab_s[1];
    const int cpair = t & 63;
    const int jb = t >> 6;
    const ColTileOut out = columnwise_tile_out(a, gv, k0, cpair, jb);
    const auto [mb0, kk, jleft, jpad, csp, sH, sJ] = out;
#pragma unroll 1
    for (int jj = 0; jj < 2; ++jj) {
      const int j = jb + 4 * jj;  // warp-uniform
      if (j >= jleft) {  // no row of the group in this block (and then none in the next): padding bytes only
        col_block_padding(a, out, jj, j);
        continue;
      }
      uint32_t w[16];
      load_col_block(tile, j, cpair, w);
      uint32_t m = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) m = absmax2(m, w[i]);
      uint32_t sg[2][2];  // [h][rows 0-7 / 8-15]
      sign_nibbles_cols(w, sg[0][0], sg[1][0]);
      sign_nibbles_cols(w + 8, sg[0][1], sg[1][1]);
      const float b2d = kBlock2d ? tmax_s[j][cpair >> 3] : 0.0f;  // the same 16x16 tile of X as the rowwise plane
      // h = 1 (the high halves) first, then the words are shifted so that h = 0 runs the same code
      uint32_t h1_k6[2], h1_k4[2], h1_b6 = 0, h1_b4 = 0;
      float h1_s6 = 0.0f, h1_s4 = 0.0f;
      uint32_t k6[2], k4[2] = {0u, 0u}, byte6, byte4;
      float s6, s4;
#pragma unroll 1
      for (int h = 1; h >= 0; --h) {
        const bool active = 2 * cpair + h < kleft;
        const uint32_t bbits = (h ? m : m << 16) & 0xFFFF0000u;
        const float b = kBlock2d ? b2d : __uint_as_float(bbits);
        fo6_scale_bytes(b, fp_col.s_enc, byte6, byte4);
        const Fo6Entry c6 = tab[byte6], c4 = tab[byte4];
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = __uint_as_float(w[i] & 0xFFFF0000u);
        s6 = s4 = 0.0f;
        if (__all_sync(0xffffffffu, !active || fo6_fast_ok(col_fast, bbits, c6, c4))) {
          if constexpr (!kFastMath && !kBlock2d) {  // the kept candidate in k6 / byte6 (s6 = s4 = 0 keeps it below)
            fo6_choose_fast<kMse, kFastMath>(active, x, c6, c4, byte6, byte4, fp_col.by_parts, fp_col.s_enc, k6);
          } else if (active) {
            fo6_block_fast<kMse, kFastMath>(x, c6, c4, fp_col.s_enc, k6, k4, s6, s4);
          }
          if (active) {
            const uint32_t sg0 = h ? sg[1][0] : sg[0][0], sg1 = h ? sg[1][1] : sg[0][1];
            k6[0] += sg0;
            k6[1] += sg1;
            k4[0] += sg0;
            k4[1] += sg1;
          }
        } else if (active) {
          fo6_block_slow<kMse, kFastMath>(tile + j * 16 * 256 + (2 * cpair + h) * 2, 256, kBlock2d ? b : -1.0f, tab,
                                          fp_col)
              .unpack(byte6, byte4, k6, k4, s6, s4);
        }
        if (!active) k6[0] = k6[1] = k4[0] = k4[1] = 0;
        if (h) {
          h1_k6[0] = k6[0];
          h1_k6[1] = k6[1];
          h1_k4[0] = k4[0];
          h1_k4[1] = k4[1];
          h1_b6 = byte6;
          h1_b4 = byte4;
          h1_s6 = s6;
          h1_s4 = s4;
#pragma unroll
          for (int i = 0; i < 16; ++i) w[i] <<= 16;
        }
      }
      // h = 0's results are in k6, k4, byte6, byte4, s6, s4; h = 1's in h1_*
      bool pick4_0 = s4 < s6, pick4_1 = h1_s4 < h1_s6;  // a tie or a NaN keeps map-to-6
      if constexpr (kBlock2d) {  // the tile's 16 plane rows: lanes 8 q .. 8 q + 7, both h (col_tile_tree_sum)
        const float t6 = col_tile_tree_sum(s6, h1_s6), t4 = col_tile_tree_sum(s4, h1_s4);
        pick4_0 = pick4_1 = t4 < t6;
      }
      const uint64_t o0 = pick4_0 ? ((uint64_t)k4[1] << 32 | k4[0]) : ((uint64_t)k6[1] << 32 | k6[0]);
      const uint64_t o1 = pick4_1 ? ((uint64_t)h1_k4[1] << 32 | h1_k4[0]) : ((uint64_t)h1_k6[1] << 32 | h1_k6[0]);
      *reinterpret_cast<uint64_t*>(cstage + col_stage_offset(2 * cpair, j)) = o0;
      *reinterpret_cast<uint64_t*>(cstage + col_stage_offset(2 * cpair + 1, j)) = o1;
      uint8_t* sp = csp + jj * sJ;
      if (2 * cpair < kleft) {
        store_once(sp, (uint8_t)(pick4_0 ? byte4 : byte6));
      } else if (a.layout != kCompact && j < jpad) {
        store_once(sp, (uint8_t)0);  // SPEC 8.2 padding (every plane row of the tile is below roundup(K, 128))
      }
      if (2 * cpair + 1 < kleft) {
        store_once(sp + sH, (uint8_t)(pick4_1 ? h1_b4 : h1_b6));
      } else if (a.layout != kCompact && j < jpad) {
        store_once(sp + sH, (uint8_t)0);
      }
    }
    __syncthreads();
    columnwise_tile_store(a, gv, k0, kleft, cstage);
  }
}

}  // namespace nvfp4
