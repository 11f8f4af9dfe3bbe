// The bf16 fast kernels, amax_fast_bf16 and quantize_fast_bf16: bf16 input, 1x16 blocks, round to nearest or
// stochastic rounding, no RHT or the RHT with SPEC 7's default sign mask; and 16x16 blocks (SPEC 6.3) under rule te,
// rounding to nearest, without the RHT (device/_dispatch.py plan_quantize runs them there; the general kernels of
// general.cuh everywhere else). Their outputs are the general kernels' byte for byte, with fewer instructions per
// element (1x16: 2.1-2.4x faster on the same bytes; 16x16: 1.66-1.69x):
//  * compile-time RHT signs: the sign flips become operand negations of the first butterfly FADDs (free);
//  * block maxima on packed bf16 pairs by integer SIMD max (the NaN-ignoring fp max of SPEC 5.2 equals the integer
//    max of the |bits| when no element is NaN / Inf; a block that has one goes to the exact slow path); the rowwise
//    pass takes one whole 16-block per thread, so its max, scale byte, multiplier and clamp test are formed once per
//    16 elements, and detects NaN / Inf by one warp vote per iteration (the warp's 4 rows);
//  * E2M1 by the three-roundings forms of SPEC 3.6, on the FMA pipe except one 3-input minimum per element; stochastic
//    rounding by SPEC 3.7's round-down form of the same candidates, one Philox4x32-10 call per 16-block (SPEC 10.2);
//  * signs: mult >= 0 and never NaN (SPEC 5.2: fminf(1/(scale*s_dec), FLT_MAX); +0 only when S_enc = 0, and x * +0
//    keeps the sign of x), so sign(x*mult) = sign(x) for the NaN/Inf-free blocks and the sign nibbles of 8 elements
//    are gathered from the bf16 words with 4 PRMT + 2 ops; the magnitude codes carry a constant bias (kBias8)
//    removed by the accumulator's start value;
//  * addresses: every data / scale pointer is formed once per thread; inside a tile the swizzled scale offset of
//    SPEC 8.2 is base + a per-iteration constant (the tile is 128-row aligned, so r>>7, c>>2 are fixed), compact
//    layouts add a per-iteration stride; bounds are 32-bit tile-local compares;
//  * the plane constants and multiplier tables: one plane per half of the CTA, shared through shared memory;
//  * the quantizer's tile is loaded by cp.async, the amax pass's loads skip L1; outputs (codes, scale bytes, padding)
//    are stored evict-first (st.global.cs);
//  * the amax pass: 256 threads of 16 rows x 4 columns, the last RHT stage skipped for the maximum
//    (max(|p+q|, |p-q|) = |p| + |q|; not under the torchao rules, where Inf - Inf must give NaN);
//  * programmatic dependent launch: the quantizer starts during the amax pass, or during init_amax_kernel with supplied
//    amaxes (griddepcontrol.wait before it reads the amaxes).
// H100 (ncu, the quantize kernel on 8192x5120): issue 74%, 2,364 instructions per warp and tile, about 20% of them
// per-tile work.
#pragma once

#include <cstdint>

#include "quantize/general.cuh"
#include "quantize/layout.cuh"
#include "quantize/numerics.cuh"

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


// SPEC 3.1 magnitude of y = RN(|x| * mult) by the three-rounding forms of SPEC 3.6, all on the FMA pipe except
// the minimum (the ALU pipe was this kernel's bound). kClamp = true: the first form, returns
// kMagicBits + index; kClamp = false (only valid when y < 7, then the fourth term never wins): the second form,
// returns kMagicLoBits + index.
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: RN(v + kMagic) = kMagic + RNE(v) for 0 <= v < 2^22
constexpr uint32_t kMagicBits = 0x4B400000u;
constexpr uint32_t kMagicLoBits = 0x4AC00000u;  // high half of the second form's 16-bit-lane minimum
template <bool kClamp>
__device__ __forceinline__ uint32_t e2m1_mag_magic(float x, float mult) {
  const float y = __fmul_rn(fabsf(x), mult);
  if constexpr (!kClamp) {
    // y < 7: SPEC 3.6's second form, three adds with immediate operands (ptxas kept 2.0 and 0.5 for the FFMAs in
    // registers and re-materialised them every iteration); the candidates are the low 16 bits of the sums.
    const uint32_t c2 = __float_as_uint(__fadd_rn(y, 0.5f * kMagic));         // 0x4AC00000 + RNE(2y)
    const uint32_t c1 = __float_as_uint(__fadd_rn(y, kMagic + 2.0f));         // 0x4B400000 + RNE(y) + 2
    const uint32_t ch = __float_as_uint(__fadd_rn(y, 2.0f * kMagic + 8.0f));  // 0x4BC00000 + RNE(y/2) + 4
    return __vminu2(__vminu2(c2, c1), ch);  // low half: the index; high half: 0x4AC0
  }
  // The first form (any y, also +Inf). Its candidates are non-negative and never NaN (mult is finite, SPEC 5.2), and
  // the IEEE order of non-negative floats is the integer order of their bits: integer minima (VIMNMX3).
  const float r2 = __fmaf_rn(y, 2.0f, kMagic);         // kMagic + RNE(2y): 2y is exact, one rounding
  const float r1 = __fadd_rn(y, kMagic + 2.0f);        // kMagic + RNE(y) + 2
  const float rh = __fmaf_rn(y, 0.5f, kMagic + 4.0f);  // kMagic + RNE(y / 2) + 4 (one rounding of the exact y/2)
  const int m = min(min(__float_as_int(r2), __float_as_int(r1)), __float_as_int(rh));
  return static_cast<uint32_t>(min(m, __float_as_int(kMagic + 7.0f)));
}
// sum over e = 0..7 of b << 4e (mod 2^32): the bias of 8 packed e2m1_mag_magic results of base b
__host__ __device__ constexpr uint32_t packed_bias8(uint32_t b) {
  return b + (b << 4) + (b << 8) + (b << 12) + (b << 16) + (b << 20) + (b << 24) + (b << 28);
}

// 8 magnitude codes (SPEC 3.6), element e in nibble e, sign bits clear.
template <bool kClamp>
__device__ __forceinline__ uint32_t mag8_magic(const float (&x)[8], float mult) {
  uint32_t acc = 0u - packed_bias8(kClamp ? kMagicBits : kMagicLoBits);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc += e2m1_mag_magic<kClamp>(x[e], mult) << (4 * e);
  return acc;
}

// SPEC 3.4's magnitude code of y = RN(|x| * mult) >= 0 (not NaN) with the random byte `kByte` of `word`, by SPEC
// 3.7's floor form, on the FMA pipe as e2m1_mag_magic: returns kMagicBits + index.
//  * u * step(y) / 256 = u * P / 512, with P = 2 step(y) = 1, 2, 4 for y < 2, in [2, 4), >= 4: y's bits clamped to
//    [1.0, 4.0] with the mantissa cleared (the integer order of non-negative floats' bits is their order; +Inf -> 4);
//  * u / 512 = fma(1 + u/256, 0.5, -0.5) with 1 + u/256 built from the byte's bits (exact), so j = fma(u/512, P, y) is
//    SPEC 3.4's single rounding of y + u * step(y) (the product is exact);
//  * index(min(floor(j / step(j)) * step(j), 6)) = min(floor(2j), floor(j) + 2, floor(j / 2) + 4, 7): each term is
//    the index on its own step's range ([0, 2), [2, 4), [4, 8)) and no smaller on the others (floor(2j) <= 1 <
//    floor(j) + 2 on [0, 1) and <= floor(j) + 2 on [1, 2); floor(j) + 2 <= 5 <= floor(j / 2) + 4 below 4; j >= 8
//    makes all three >= 8). The floors are the round-down forms of e2m1_mag_magic's sums (kMagic's ulp is 1; a j too
//    large for the ulp still rounds every sum to at least kMagic + 7, which the last minimum takes).
template <int kByte>
__device__ __forceinline__ uint32_t e2m1_sr_mag_magic(float y, uint32_t word) {
  // u << 15: byte kByte moved from bit 8 kByte to bit 15
  const uint32_t u15 = (kByte < 2 ? word << (15 - 8 * kByte) : word >> (8 * kByte - 15)) & 0x007F8000u;
  const float u512 = __fmaf_rn(__uint_as_float(0x3F800000u | u15), 0.5f, -0.5f);            // u / 512 (exact)
  const uint32_t yb = __float_as_uint(y);
  const float p = __uint_as_float(min(max(yb, 0x3F800000u), 0x40800000u) & 0xFF800000u);  // 2 step(y)
  const float j = __fmaf_rn(u512, p, y);
  const float r2 = __fmaf_rd(j, 2.0f, kMagic);         // kMagic + floor(2j)
  const float r1 = __fadd_rd(j, kMagic + 2.0f);        // kMagic + floor(j) + 2
  const float rh = __fmaf_rd(j, 0.5f, kMagic + 4.0f);  // kMagic + floor(j / 2) + 4
  const int m = min(min(__float_as_int(r2), __float_as_int(r1)), __float_as_int(rh));
  return static_cast<uint32_t>(min(m, __float_as_int(kMagic + 7.0f)));
}

// 8 SPEC 3.4 magnitude codes (element e in nibble e, sign bits clear) of a NaN/Inf-free block part with a finite
// multiplier: element e takes byte e % 4 of r0 (e < 4) or r1 (SPEC 10.2's bytes of the part's two Philox words).
__device__ __forceinline__ uint32_t mag8_sr(const float (&x)[8], float mult, uint32_t r0, uint32_t r1) {
  const float y[8] = {__fmul_rn(fabsf(x[0]), mult), __fmul_rn(fabsf(x[1]), mult), __fmul_rn(fabsf(x[2]), mult),
                      __fmul_rn(fabsf(x[3]), mult), __fmul_rn(fabsf(x[4]), mult), __fmul_rn(fabsf(x[5]), mult),
                      __fmul_rn(fabsf(x[6]), mult), __fmul_rn(fabsf(x[7]), mult)};
  return (e2m1_sr_mag_magic<0>(y[0], r0) + (e2m1_sr_mag_magic<1>(y[1], r0) << 4) +
          (e2m1_sr_mag_magic<2>(y[2], r0) << 8) + (e2m1_sr_mag_magic<3>(y[3], r0) << 12) +
          (e2m1_sr_mag_magic<0>(y[4], r1) << 16) + (e2m1_sr_mag_magic<1>(y[5], r1) << 20) +
          (e2m1_sr_mag_magic<2>(y[6], r1) << 24) + (e2m1_sr_mag_magic<3>(y[7], r1) << 28)) -
         packed_bias8(kMagicBits);
}

// 16 SPEC 3.4 codes of any block (the exact per-element form, NaN / Inf included): element i with byte i % 4 of word
// i / 4 of rnd. Out of line: the blocks that need it are rare, and the hot loops stay small.
struct Floats16 {
  float v[16];
};
static __device__ __noinline__ uint64_t encode16_sr_exact(Floats16 x, float mult, Philox4 rnd) {
  uint64_t packed = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    packed |= (uint64_t)e2m1_sr(__fmul_rn(x.v[i], mult), (rnd.x[i >> 2] >> (8 * (i & 3))) & 0xFFu) << (4 * i);
  return packed;
}

// Sign bits (bit 3 of every nibble) of 8 elements held as 4 bf16 words, element 2i in the low half of w_i:
// output byte i = sign(2i) << 3 | sign(2i+1) << 7. The other bits are zero.
__device__ __forceinline__ uint32_t sign_nibbles_pairs(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const uint32_t p = __byte_perm(w0, w1, 0x7531);  // [w0.b1, w0.b3, w1.b1, w1.b3]
  const uint32_t q = __byte_perm(w2, w3, 0x7531);
  const uint32_t hi = __byte_perm(p, q, 0x7531);   // [w0.b3, w1.b3, w2.b3, w3.b3]: signs of 1, 3, 5, 7
  const uint32_t lo = __byte_perm(p, q, 0x6420);   // [w0.b1, w1.b1, w2.b1, w3.b1]: signs of 0, 2, 4, 6
  return (hi & 0x80808080u) | ((lo >> 4) & 0x08080808u);
}

// Sign nibbles of one column of 8 rows: element i is half h of word w[i] (h = 0: low half). s0 / s1: h = 0 / 1.
__device__ __forceinline__ void sign_nibbles_cols(const uint32_t* w, uint32_t& s0, uint32_t& s1) {
  const uint32_t a = __byte_perm(w[0], w[2], 0x7351);  // [w0.b1, w2.b1, w0.b3, w2.b3]
  const uint32_t b = __byte_perm(w[4], w[6], 0x7351);
  const uint32_t c = __byte_perm(w[1], w[3], 0x7351);
  const uint32_t d = __byte_perm(w[5], w[7], 0x7351);
  const uint32_t e0 = __byte_perm(a, b, 0x5410), e1 = __byte_perm(a, b, 0x7632);  // even rows
  const uint32_t o0 = __byte_perm(c, d, 0x5410), o1 = __byte_perm(c, d, 0x7632);  // odd rows
  s0 = (o0 & 0x80808080u) | ((e0 >> 4) & 0x08080808u);
  s1 = (o1 & 0x80808080u) | ((e1 >> 4) & 0x08080808u);
}

// The clamped form is needed only for blocks with tiny or zero scales (rare): kept out of line so that the
// unrolled hot loops stay small (instruction-cache misses were a top stall of this kernel).
struct Floats8 {
  float v[8];
};
static __device__ __noinline__ uint32_t mag8_magic_clamped(Floats8 x, float mult) { return mag8_magic<true>(x.v, mult); }

// Whether a block with max |x| = bmax needs the clamp term of SPEC 3.6 (RN(bmax * mult) >= 7 bounds every y).
__device__ __forceinline__ bool needs_clamp(float bmax, float mult) { return !(__fmul_rn(bmax, mult) < 7.0f); }

// 8 magnitude codes of x (SPEC 3.6), the clamped form out of line.
__device__ __forceinline__ uint32_t mag8_encode(const Floats8& x, float mult, bool clamp) {
  return clamp ? mag8_magic_clamped(x, mult) : mag8_magic<false>(x.v, mult);
}

// The 16 codes of a NaN/Inf-free 16-block held as two uint4 of bf16 pairs (element 2i in the low half of word i):
// codes of p in lo, of q in hi. clamp: the block needs SPEC 3.6's clamp term (needs_clamp of its max); one branch
// for both halves.
__device__ __forceinline__ void encode16_words(const uint4& p, const uint4& q, float mult, bool clamp, uint32_t& lo,
                                               uint32_t& hi) {
  const uint32_t wp[4] = {p.x, p.y, p.z, p.w}, wq[4] = {q.x, q.y, q.z, q.w};
  Floats8 xp, xq;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    xp.v[e] = bf16_half(wp[e >> 1], e & 1);
    xq.v[e] = bf16_half(wq[e >> 1], e & 1);
  }
  uint32_t mp, mq;
  if (clamp) {
    mp = mag8_magic_clamped(xp, mult);
    mq = mag8_magic_clamped(xq, mult);
  } else {
    mp = mag8_magic<false>(xp.v, mult);
    mq = mag8_magic<false>(xq.v, mult);
  }
  lo = mp + sign_nibbles_pairs(wp[0], wp[1], wp[2], wp[3]);  // nibble bit 3 of mag is clear: + is |
  hi = mq + sign_nibbles_pairs(wq[0], wq[1], wq[2], wq[3]);
}

// encode16_words under SPEC 3.4's stochastic rounding: element i takes byte i % 4 of word i / 4 of rnd (SPEC 10.2;
// no clamp test: the SR form always clamps).
__device__ __forceinline__ void encode16_words_sr(const uint4& p, const uint4& q, float mult, const Philox4& rnd,
                                                  uint32_t& lo, uint32_t& hi) {
  const uint32_t wp[4] = {p.x, p.y, p.z, p.w}, wq[4] = {q.x, q.y, q.z, q.w};
  float xp[8], xq[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    xp[e] = bf16_half(wp[e >> 1], e & 1);
    xq[e] = bf16_half(wq[e >> 1], e & 1);
  }
  lo = mag8_sr(xp, mult, rnd.x[0], rnd.x[1]) + sign_nibbles_pairs(wp[0], wp[1], wp[2], wp[3]);
  hi = mag8_sr(xq, mult, rnd.x[2], rnd.x[3]) + sign_nibbles_pairs(wq[0], wq[1], wq[2], wq[3]);
}

// Max |x| of a 16-block held as two uint4 of bf16 pairs, as the fp32 bits of that bf16 (integer max of the |bits|:
// equal to the NaN-ignoring fp max of SPEC 5.2 when no element is NaN / Inf; >= 0x7F800000 flags a block that has
// one).
__device__ __forceinline__ uint32_t block_max_f32_bits(const uint4& p, const uint4& q) {
  constexpr uint32_t kAbs = 0x7FFF7FFFu;
  const uint32_t m = __vmaxu2(__vmaxu2(__vmaxu2(p.x & kAbs, p.y & kAbs), __vmaxu2(p.z & kAbs, p.w & kAbs)),
                              __vmaxu2(__vmaxu2(q.x & kAbs, q.y & kAbs), __vmaxu2(q.z & kAbs, q.w & kAbs)));
  return __vmaxu2(m, __byte_perm(m, 0, 0x1032)) & 0xFFFF0000u;  // the larger half, in both halves; keep the upper
}

// SPEC 6.3: the NaN-ignoring max |x| of each 16x16 tile of a 128 x 128 bf16 tile in shared memory (rows past the
// group and columns past K are zeros, which change no max of magnitudes), into tmax[16-row block][16-column block].
// Thread t forms the 16-block maxima of tile rows 32 it + t / 8, block t % 8 (block_max_f32_bits, or the fp max where
// that flags a NaN / Inf) into bmax (128 x 8 floats of scratch), then threads 0-63 reduce 16 of them each. Every thread
// of the CTA calls it (two CTA barriers); on return tmax is visible to all and bmax may be reused.
__device__ __forceinline__ void tile_maxima_16x16(const uint8_t* tile, float (*bmax)[8], float (*tmax)[8]) {
  const int t = threadIdx.x, blk = t & 7, rrow = t >> 3;
#pragma unroll 1
  for (int it = 0; it < 4; ++it) {
    const int row = it * 32 + rrow;
    const uint4 qa = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32);
    const uint4 qb = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32 + 16);
    const uint32_t bits = block_max_f32_bits(qa, qb);
    float m = __uint_as_float(bits);
    if (bits >= 0x7F800000u) {
      const uint32_t w[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
      m = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(bf16_half(w[e >> 1], e & 1)));
    }
    bmax[row][blk] = m;
  }
  __syncthreads();
  if (t < 64) {
    const int tb = t >> 3, cb = t & 7;
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) m = fmaxf(m, bmax[tb * 16 + i][cb]);
    tmax[tb][cb] = m;
  }
  __syncthreads();
}

// Byte offset of the 8 codes of (plane row p, 16-row block j) of a tile in the columnwise stage (128 rows x 64
// bytes as 64 row pairs x 128 bytes; the 8-byte unit u = 8 (p & 1) + j of a pair is stored at u ^ (pair & 15)).
// Writes (16 lanes: 16 consecutive pairs, same p & 1 and j) and reads (16 lanes: the 16 units of one pair) are
// both free of bank conflicts.
__device__ __forceinline__ int col_stage_offset(int p, int j) {
  const int pair = p >> 1;
  return pair * 128 + ((((p & 1) << 3) | j) ^ (pair & 15)) * 8;
}

// The outputs are written once and not read again by this kernel: stored evict-first (st.global.cs), so that they,
// and not the X lines that the amax pass left in L2 (it walks the tiles in reverse order, so this grid's first
// tiles are resident) and that this grid has still to read, are L2's first victims. H100: fused call -1 to -2%,
// grouped -1%; marking the X loads evict-first as well was no better.
template <class V>
__device__ __forceinline__ void store_once(V* p, V v) {
  __stcs(p, v);
}

// The plane constants (SPEC 5.1 / 5.2, or 5.4 / 5.5) and multiplier tables of one group, in shared memory.
struct PlaneTables {
  float mtab[2][128];  // [plane][scale byte & 127]: the encode multiplier (rowwise plane 0, columnwise plane 1)
  PlaneScale ps[2];
  TorchaoPlane tp[2];
};

// Forms group g's plane tables: warps 0-3 the rowwise plane's, warps 4-7 the columnwise plane's (each thread one
// table entry), and the first thread of each half publishes its plane's constants; every thread reads both after
// the CTA barrier that must follow (two fewer divisions per thread than forming both).
template <bool kTorchao>
__device__ __forceinline__ void build_plane_tables(const QuantArgs& a, int g, PlaneTables& pt) {
  const int t = threadIdx.x;
  const int plane = t >> 7, entry = t & 127;  // warp-uniform plane
  const bool present = (plane == 0 ? a.row_data : a.col_data) != nullptr;
  const float amax = present ? (plane == 0 ? a.row_amax : a.col_amax)[g] : 0.0f;
  if constexpr (kTorchao) {
    const TorchaoPlane tp = make_torchao_plane(amax, a.rule);
    pt.mtab[plane][entry] = torchao_multiplier((uint32_t)entry, tp);
    if (entry == 0) pt.tp[plane] = tp;
  } else {
    const PlaneScale ps = make_plane_scale(amax, a.rule);
    pt.mtab[plane][entry] = block_multiplier((uint32_t)entry, ps);
    if (entry == 0) pt.ps[plane] = ps;
  }
}

// Each thread's copy of both planes' constants (after the barrier that follows build_plane_tables).
struct PlaneConsts {
  PlaneScale ps_row{}, ps_col{};
  TorchaoPlane tp_row{}, tp_col{};
  bool row_fast = true, col_fast = true;  // torchao: the plane's multipliers are finite and > 0
};
template <bool kTorchao>
__device__ __forceinline__ PlaneConsts read_plane_consts(const PlaneTables& pt) {
  PlaneConsts c;
  if constexpr (kTorchao) {
    c.tp_row = pt.tp[0];
    c.tp_col = pt.tp[1];
    c.row_fast = torchao_fast_plane(c.tp_row);
    c.col_fast = torchao_fast_plane(c.tp_col);
  } else {
    c.ps_row = pt.ps[0];
    c.ps_col = pt.ps[1];
  }
  return c;
}

// Where one thread's blocks of a tile go in the rowwise plane (SPEC 6.1, 8.2), for rowwise_tile's thread layout (block
// blk of tile rows 32 it + rrow, it = 0..3): the codes of iteration it at data + it * data_step, its scale byte at
// scale + it * scale_step. (Every size and offset here is non-negative: shifts and masks instead of the signed
// divisions' sign fix-ups.)
struct RowTileOut {
  int64_t gblk;  // the block's 16-block column in the plane
  bool blk_ok;   // the block lies inside K (K % 16 == 0: a block is wholly inside K or wholly past it)
  bool pad_ok;   // the block column has a SPEC 8.2 padding byte
  uint8_t* data;
  int64_t data_step;
  uint8_t* scale;
  int64_t scale_step;
};
__device__ __forceinline__ RowTileOut rowwise_tile_out(const QuantArgs& a, const GroupView& gv, int64_t k0, int kleft,
                                                       int blk, int rrow) {
  const int64_t C = a.K >> 4;
  const int64_t cp = (C + 3) & ~int64_t{3};  // round_up(C, 4)
  const int64_t gblk = (k0 >> 4) + blk;
  RowTileOut o{gblk, blk * 16 < kleft, a.layout != kCompact && gblk < cp,
               a.row_data + gv.row_data + (gv.m0 + rrow) * (a.K >> 1) + gblk * 8, 16 * a.K,  // 32 rows of K / 2 bytes
               nullptr, 0};
  if (a.layout == kSwizzled) {
    o.scale = a.row_scales + gv.row_scale + swizzle_offset(gv.m0 + rrow, gblk, cp >> 2);
    o.scale_step = 4;  // row + 32: (r & 127) >> 5 + 1, same 128-row tile (SPEC 8.2)
  } else {
    const int64_t cols = a.layout == kPaddedCompact ? cp : C;
    o.scale = a.row_scales + gv.row_scale + (gv.m0 + rrow) * cols + gblk;
    o.scale_step = 32 * cols;
  }
  return o;
}

// Where one thread's blocks of a tile go in the columnwise plane (SPEC 6.2, 8.2), for columnwise_tile_encode's thread
// layout (plane rows kk + h, h = 0, 1, with kk = k0 + 2 cpair; 16-row blocks jb + 4 jj): the scale byte of (h, jj) at
// scale + h * step_h + jj * step_j.
struct ColTileOut {
  int64_t mb0;  // the tile's first 16-row block (a multiple of 8)
  int64_t kk;   // plane row of h = 0
  int jleft;    // valid 16-row blocks of this tile
  int jpad;     // blocks with a (padding) scale byte
  uint8_t* scale;
  int64_t step_h, step_j;
};
__device__ __forceinline__ ColTileOut columnwise_tile_out(const QuantArgs& a, const GroupView& gv, int64_t k0,
                                                          int cpair, int jb) {
  const int64_t cblocks = (gv.m + 15) >> 4;         // ceil_div(m_g, 16); sizes are non-negative
  const int64_t cpd = (cblocks + 3) & ~int64_t{3};  // round_up(cblocks, 4)
  const int64_t mb0 = gv.m0 >> 4;
  const int64_t jg0 = mb0 + jb;  // block column of jj = 0
  const int64_t kk = k0 + 2 * cpair;
  ColTileOut o{mb0, kk, (int)(cblocks - mb0), (int)(cpd - mb0), nullptr, 0, 0};
  if (a.layout == kSwizzled) {
    o.scale = a.col_scales + gv.col_scale + swizzle_offset(kk, jg0, cpd >> 2);
    o.step_h = 16;
    o.step_j = 512;  // block column + 4: the next 128x4 scale tile of the same rows (SPEC 8.2)
  } else {
    const int64_t cols = a.layout == kPaddedCompact ? cpd : cblocks;
    o.scale = a.col_scales + gv.col_scale + kk * cols + jg0;
    o.step_h = cols;
    o.step_j = 4;
  }
  return o;
}

// The columnwise block j of tile column pair cpair (columnwise_tile_encode's layout): its 16 rows' bf16 pairs (word i
// holds row 16 j + i of tile columns 2 cpair, 2 cpair + 1). A block wholly past the group's rows holds no element:
// col_block_padding writes its two plane rows' SPEC 8.2 padding bytes (when it has them) and the caller skips it.
__device__ __forceinline__ void load_col_block(const uint8_t* tile, int j, int cpair, uint32_t (&w)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = *reinterpret_cast<const uint32_t*>(tile + (j * 16 + i) * 256 + cpair * 4);
}
__device__ __forceinline__ void col_block_padding(const QuantArgs& a, const ColTileOut& o, int jj, int j) {
  if (a.layout != kCompact && j < o.jpad) {
    store_once(o.scale + jj * o.step_j, (uint8_t)0);
    store_once(o.scale + jj * o.step_j + o.step_h, (uint8_t)0);
  }
}

// The rowwise plane (SPEC 6.1) of one tile: codes and scale bytes (padding included, SPEC 8.2) of the tile's rows of
// group gv, from `tile` (128 rows x 256 bytes of bf16 in shared memory, rows past the group and columns past K zero),
// columns k0 .. k0 + kleft and rleft valid rows; mtab is the rowwise plane's multiplier table (PlaneTables).
// Thread t owns the 16-block blk = t % 8 of tile rows 32 it + t / 8, it = 0..3, i.e. a whole block per thread: its
// max, scale byte, multiplier and clamp test are formed once for 16 elements (two lanes per block would form them
// twice). kBlock2d (16x16 blocks, SPEC 6.3): the block's max is its tile's, tmax[row / 16][blk] (tile_maxima_16x16);
// a block row without NaN / Inf takes the fast path with it (it bounds the row's products as the row's own max does).
template <bool kTorchao, bool kSR, bool kBlock2d = false>
__device__ __forceinline__ void rowwise_tile(const QuantArgs& a, const GroupView& gv, int64_t k0, int kleft, int rleft,
                                             const uint8_t* tile, const float* mtab, const PlaneScale& ps_row,
                                             [[maybe_unused]] const TorchaoPlane& tp_row,
                                             [[maybe_unused]] bool row_fast,
                                             [[maybe_unused]] const float (*tmax)[8] = nullptr) {
  const int t = threadIdx.x;
  const int blk = t & 7, rrow = t >> 3;
  const auto [gblk, blk_ok, pad_ok, dptr, dstep, sptr, sstep] = rowwise_tile_out(a, gv, k0, kleft, blk, rrow);
  const uint8_t* src = tile + rrow * 256 + blk * 32;
  int it_slow = 4;  // first iteration that needs the exact path (4: none)
  if (kTorchao && !row_fast) it_slow = 0;
  if (it_slow == 4) {
    uint8_t* dp = dptr;
    uint8_t* sp = sptr;
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      // (the 8 lanes of one 128-bit shared-memory phase read 8 blocks of one row at a 32-byte stride: two-way
      // bank conflicts; ordering the halves per lane to avoid them cost more instructions than it saved)
      const uint4 qa = *reinterpret_cast<const uint4*>(src + it * 32 * 256);
      const uint4 qb = *reinterpret_cast<const uint4*>(src + it * 32 * 256 + 16);
      const uint32_t bbits = block_max_f32_bits(qa, qb);
      if (__any_sync(0xffffffffu, bbits >= 0x7F800000u)) {  // a NaN or Inf in some block of this warp
        it_slow = it;
        break;
      }
      if (it * 32 + rrow < rleft && blk_ok) {
        const float bmax = kBlock2d ? tmax[(it * 32 + rrow) >> 4][blk] : __uint_as_float(bbits);
        const uint32_t sb = kTorchao ? torchao_scale_byte(bmax, tp_row) : block_scale_byte(bmax, ps_row);
        const float mult = mtab[sb];
        uint32_t lo, hi;
        if constexpr (kSR) {  // SPEC 10.2: counter (block column, group-local row, plane 0, offset + g)
          const Philox4 rnd = philox4x32_10((uint32_t)gblk, (uint32_t)(gv.m0 + it * 32 + rrow), 0u,
                                            a.offset + (uint32_t)gv.g, a.seed_lo, a.seed_hi);
          encode16_words_sr(qa, qb, mult, rnd, lo, hi);
        } else {
          encode16_words(qa, qb, mult, needs_clamp(bmax, mult), lo, hi);
        }
        store_once(reinterpret_cast<uint2*>(dp), make_uint2(lo, hi));
        store_once(sp, (uint8_t)sb);
      } else if (pad_ok) {
        store_once(sp, (uint8_t)0);
      }
      dp += dstep;
      sp += sstep;
    }
  }
  // From the first iteration whose warp holds a NaN / Inf block on (or every iteration of a torchao plane whose
  // multipliers are not all finite and positive): per-iteration vote, exact path where needed.
#pragma unroll 1
  for (int it = it_slow; it < 4; ++it) {
    const int row = it * 32 + rrow;
    const uint4 lo = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32);
    const uint4 hi = *reinterpret_cast<const uint4*>(tile + row * 256 + blk * 32 + 16);
    const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
    const uint32_t bbits = block_max_f32_bits(lo, hi);
    const bool slow = __any_sync(0xffffffffu, bbits >= 0x7F800000u);  // warp-uniform
    float b = kBlock2d ? tmax[row >> 4][blk] : __uint_as_float(bbits);
    if (slow && !kBlock2d) {  // exact fp max: NaN-ignoring (SPEC 5.2), NaN-propagating for the torchao rules (5.4)
      float mm = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        mm = abs_max<kTorchao>(mm, fabsf(bf16_half(wl[e >> 1], e & 1)));
        mm = abs_max<kTorchao>(mm, fabsf(bf16_half(wh[e >> 1], e & 1)));
      }
      b = mm;
    }
    uint8_t* sp = sptr + it * sstep;
    if (row < rleft && blk_ok) {
      uint32_t sb, pl, ph;
      const float mult = block_byte_and_multiplier<kTorchao>(b, ps_row, tp_row, mtab, sb);
      if constexpr (kSR) {  // SPEC 3.4 per element (torchao too: its clamp changes no SR code, a NaN product is 0x7)
        const Philox4 rnd =
            philox4x32_10((uint32_t)gblk, (uint32_t)(gv.m0 + row), 0u, a.offset + (uint32_t)gv.g, a.seed_lo, a.seed_hi);
        Floats16 xb;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          xb.v[e] = bf16_half(wl[e >> 1], e & 1);
          xb.v[e + 8] = bf16_half(wh[e >> 1], e & 1);
        }
        const uint64_t packed = encode16_sr_exact(xb, mult, rnd);
        pl = (uint32_t)packed;
        ph = (uint32_t)(packed >> 32);
      } else if constexpr (kTorchao) {
        pl = ph = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          pl |= torchao_code_rn(bf16_half(wl[e >> 1], e & 1), mult) << (4 * e);
          ph |= torchao_code_rn(bf16_half(wh[e >> 1], e & 1), mult) << (4 * e);
        }
      } else {
        pl = slow ? encode8_slow(wl, mult) : encode8_fast(wl, mult);
        ph = slow ? encode8_slow(wh, mult) : encode8_fast(wh, mult);
      }
      store_once(reinterpret_cast<uint2*>(dptr + it * dstep), make_uint2(pl, ph));
      store_once(sp, (uint8_t)sb);
    } else if (pad_ok) {
      store_once(sp, (uint8_t)0);
    }
  }
}

// The columnwise plane of X^T (SPEC 6.2, 7) of one tile, first half: the scale bytes (padding included) are stored,
// the codes go to the stage `cstage` (col_stage_offset), which columnwise_tile_store writes out after a CTA barrier.
// Same tile and table conventions as rowwise_tile (mtab: the columnwise plane's table).
// Thread t owns tile columns 2(t%64) + h, h = 0, 1, and the 16-row blocks jb + 4 jj, jb = t/64, jj = 0, 1
// (warp-uniform). A block wholly past the group's rows only writes its padding scale bytes, so the last tile of a
// group with <= 64 rows left runs one block per warp instead of two: every warp's share of the tile shrinks with the
// tile, not only some warps'. kBlock2d (16x16 blocks, SPEC 6.3; no RHT): both columns' blocks take their tile's max,
// tmax[j][cpair / 8] (columns 2 cpair, 2 cpair + 1 lie in 16-column block cpair / 8), as rowwise_tile.
template <bool kRHT, bool kTorchao, bool kSR, bool kBlock2d = false>
__device__ __forceinline__ void columnwise_tile_encode(const QuantArgs& a, const GroupView& gv, int64_t k0, int kleft,
                                                      const uint8_t* tile, const float* mtab, const PlaneScale& ps_col,
                                                      [[maybe_unused]] const TorchaoPlane& tp_col,
                                                      [[maybe_unused]] bool col_fast, uint8_t* cstage,
                                                      [[maybe_unused]] const float (*tmax)[8] = nullptr) {
  static_assert(!kBlock2d || !kRHT, "16x16 blocks without the RHT");
  const int t = threadIdx.x;
  const int cpair = t & 63;
  const int jb = t >> 6;
  const ColTileOut out = columnwise_tile_out(a, gv, k0, cpair, jb);
  const auto [mb0, kk, jleft, jpad, csp, sH, sJ] = out;
  // Not unrolled: the two blocks run the same code, so the kernel is 26% smaller (3,570 instead of 4,808 SASS
  // instructions) and the quantize kernel 1.5-2% faster on the H100.
#pragma unroll 1
  for (int jj = 0; jj < 2; ++jj) {
    uint64_t o[2];  // this block's packed codes of plane rows h = 0, 1 (constant indices: stays in registers)
    const int j = jb + 4 * jj;
    if (j >= jleft) {  // no row of the group in this block (and then none in the next): padding bytes only
      col_block_padding(a, out, jj, j);
      continue;
    }
    uint32_t w[16];
    load_col_block(tile, j, cpair, w);
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
    const uint32_t mh2[2] = {m & 0xFFFFu, m >> 16};
    const bool jpok = j < jpad;
    const float b2d = kBlock2d ? tmax[j][cpair >> 3] : 0.0f;
    if (max(mh2[0], mh2[1]) < 0x7F80u && col_fast) {  // no NaN / Inf in either block
      uint32_t sg[2][2];                   // [h][rows 0-7 / 8-15]
      sign_nibbles_cols(w, sg[0][0], sg[1][0]);
      sign_nibbles_cols(w + 8, sg[0][1], sg[1][1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[h] = 0;
        uint8_t* sp = csp + h * sH + jj * sJ;
        if (2 * cpair + h < kleft) {
          const float bmax = kBlock2d ? b2d : __uint_as_float(mh2[h] << 16);
          const uint32_t sb = kTorchao ? torchao_scale_byte(bmax, tp_col) : block_scale_byte(bmax, ps_col);
          const float mult = mtab[sb];
          Floats8 xl, xh;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            xl.v[i] = bf16_half(w[i], h);
            xh.v[i] = bf16_half(w[i + 8], h);
          }
          uint32_t lo, hi;
          if constexpr (kSR) {  // SPEC 10.2: counter (plane column block, plane row, plane 1, offset + g)
            const Philox4 rnd = philox4x32_10((uint32_t)(mb0 + j), (uint32_t)(kk + h), 1u, a.offset + (uint32_t)gv.g,
                                              a.seed_lo, a.seed_hi);
            lo = mag8_sr(xl.v, mult, rnd.x[0], rnd.x[1]);
            hi = mag8_sr(xh.v, mult, rnd.x[2], rnd.x[3]);
          } else {
            const bool clamp = needs_clamp(bmax, mult);
            lo = mag8_encode(xl, mult, clamp);
            hi = mag8_encode(xh, mult, clamp);
          }
          o[h] = ((uint64_t)(hi + sg[h][1]) << 32) | (lo + sg[h][0]);
          store_once(sp, (uint8_t)sb);
        } else if (a.layout != kCompact && jpok) {
          store_once(sp, (uint8_t)0);  // SPEC 8.2 padding (every plane row of the tile is below roundup(K, 128))
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[h] = 0;
        uint8_t* sp = csp + h * sH + jj * sJ;
        if (2 * cpair + h < kleft) {
          float b = b2d;
          if constexpr (!kBlock2d) {
#pragma unroll
            for (int i = 0; i < 16; ++i) b = abs_max<kTorchao>(b, fabsf(bf16_half(w[i], h)));
          }
          uint32_t sb;
          const float mult = block_byte_and_multiplier<kTorchao>(b, ps_col, tp_col, mtab, sb);
          if constexpr (kSR) {
            const Philox4 rnd = philox4x32_10((uint32_t)(mb0 + j), (uint32_t)(kk + h), 1u, a.offset + (uint32_t)gv.g,
                                              a.seed_lo, a.seed_hi);
            Floats16 xb;
#pragma unroll
            for (int i = 0; i < 16; ++i) xb.v[i] = bf16_half(w[i], h);
            o[h] = encode16_sr_exact(xb, mult, rnd);
          } else {
            uint32_t lo = 0, hi = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              if constexpr (kTorchao) {
                lo |= torchao_code_rn(bf16_half(w[i], h), mult) << (4 * i);
                hi |= torchao_code_rn(bf16_half(w[i + 8], h), mult) << (4 * i);
              } else {
                lo |= e2m1_rn(__fmul_rn(bf16_half(w[i], h), mult)) << (4 * i);
                hi |= e2m1_rn(__fmul_rn(bf16_half(w[i + 8], h), mult)) << (4 * i);
              }
            }
            o[h] = ((uint64_t)hi << 32) | lo;
          }
          store_once(sp, (uint8_t)sb);
        } else if (a.layout != kCompact && jpok) {
          store_once(sp, (uint8_t)0);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) *reinterpret_cast<uint64_t*>(cstage + col_stage_offset(2 * cpair + h, j)) = o[h];
  }
}

// The columnwise plane of one tile, second half: the staged codes to the plane (called after a CTA barrier that
// follows columnwise_tile_encode). The tile's columnwise codes are 128 plane rows of 8 blocks x 8 bytes, at a row
// pitch of ceil(m_g/16) * 8 bytes: 8-byte aligned only, for a group whose m_g is not a multiple of 32. Written from the
// threads that encoded them, each warp store would touch 32 plane rows with 16 bytes (two 8-byte pieces when
// misaligned); from the stage, lanes 8i..8i+7 write the 64 contiguous bytes of one plane row (4 rows per warp store),
// so a misaligned group costs about as much as an aligned one.
__device__ __forceinline__ void columnwise_tile_store(const QuantArgs& a, const GroupView& gv, int64_t k0, int kleft,
                                                     const uint8_t* cstage) {
  const int t = threadIdx.x;
  const int64_t cblocks = (gv.m + 15) >> 4;  // ceil_div(m_g, 16)
  const int64_t mb0 = gv.m0 >> 4;            // the tile's first 16-row block
  const int jleft = (int)(cblocks - mb0);    // valid 16-row blocks of this tile
  const int64_t dH = cblocks * 8;
  const int sj = t & 7;  // block of this lane's piece
  uint8_t* cdp = a.col_data + gv.col_data + (k0 + (t >> 3)) * dH + (mb0 + sj) * 8;
  // plane row p + 32 is pair + 16, whose swizzle (pair & 15) is p's: its unit lies 16 x 128 bytes further on
  const uint8_t* stage_piece = cstage + col_stage_offset(t >> 3, sj);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int p = i * 32 + (t >> 3);  // plane row within the tile
    const uint64_t v = *reinterpret_cast<const uint64_t*>(stage_piece + i * 2048);
    if (p < kleft && sj < jleft) store_once(reinterpret_cast<unsigned long long*>(cdp), (unsigned long long)v);
    cdp += 32 * dH;
  }
}

// kTorchao: the torchao rules (SPEC 5.4 / 5.5). A plane whose P gives finite positive multipliers
// (torchao_fast_plane) takes the same fast paths, with the block scale byte by torchao_scale_byte (every byte of a
// NaN/Inf-free block is then 0x08..0x7E) and the table built by torchao_multiplier: the products are finite and
// non-NaN, where 3.5 equals 3.1. A NaN/Inf block, and every block of a plane whose P is 0, subnormal enough to
// overflow 1 / P, Inf or NaN, take the per-element path with torchao_code_rn (NaN-propagating block maxima).
// With kRHT too, a NaN out of the butterfly (an input NaN, or Inf - Inf) lies in a block whose NaN-propagating max
// is NaN, so its multiplier is NaN and gives the code (the multiplier comes first, SPEC 3.5), as in quantize_kernel.
// kBlock2d: 16x16 blocks (SPEC 6.3; rule "te", rounding to nearest, no RHT): after the load, the tile's 64 maxima
// (tile_maxima_16x16, with the columnwise stage as its scratch), then both planes as with 1x16 blocks, each block
// with its tile's max.
template <bool kRHT, bool kTorchao = false, bool kSR = false, bool kBlock2d = false>
__global__ void __launch_bounds__(256, 4) quantize_fast_bf16(QuantArgs a) {
  static_assert(!kBlock2d || (!kRHT && !kTorchao && !kSR), "16x16 blocks: rule te, round to nearest, no RHT");
  using T = __nv_bfloat16;
  using G = TileGeom<T>;
  constexpr int TK = G::kTileK;  // 128
  __shared__ alignas(16) uint8_t tile[kTileM * 256];
  __shared__ alignas(16) uint8_t cstage[kTileM * 64];  // columnwise codes of the tile, staged (col_stage_offset)
  __shared__ float tmax_s[kBlock2d ? 8 : 1][8];        // kBlock2d: the 16x16 tile maxima

  GroupView gv;
  int64_t kt;
  if (!resolve_grid_tile(a.offs, a.E, a.M, blockIdx.x, quant_k_tiles<T>(a.K), gv, kt, a.tile_recs)) return;
  const int t = threadIdx.x, chunk = t & 15, rsub = t >> 4;
  const int64_t k0 = kt * TK;
  const int64_t gcol = k0 + chunk * 8;
  const int kleft = (int)min(a.K - k0, (int64_t)TK);        // valid columns of this tile (> 0)
  const int rleft = gv.rows;  // valid rows of this tile (> 0)
  const bool col_ok = chunk * 8 < kleft;
  const T* x = reinterpret_cast<const T*>(a.x);

  // ---- 1. load the tile into shared memory (rows past the group and columns past K as zeros) ----
  // cp.async: the 16-byte pieces go from global to shared memory without passing through registers, and the
  // thread goes on (plane constants below) while they are in flight; cp.async.wait_all before the barrier. A piece
  // past the group's rows or past K is zero-filled (source size 0: its source address, which may lie past X, is
  // not read). Against loads into registers and shared-memory stores: quantize kernel -3 to -6%, fused call -2 to
  // -4%.
  {
    const char* src = reinterpret_cast<const char*>(x + (gv.first_row + rsub) * a.K + gcol);
    const int64_t step = 32 * a.K;  // 16 rows, in bytes
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(tile + rsub * 256 + chunk * 16));
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const bool ok = col_ok && it * 16 + rsub < rleft;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + it * 16 * 256), "l"(src),
                   "r"(ok ? 16 : 0)
                   : "memory");
      src += step;
    }
  }
  // Programmatic dependent launch (launch_quantize_bf16 with after_amax): everything above only reads X and the
  // offsets, which the kernel this one may overlap (the amax pass, or init_amax_kernel) does not write; the amaxes are
  // read after the wait, which returns once that kernel has finished and its writes are visible. Without a
  // programmatic dependency the wait returns at once.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ PlaneTables planes;
  build_plane_tables<kTorchao>(a, gv.g, planes);
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // this thread's tile pieces have landed; the barrier: all
  __syncthreads();
  const PlaneConsts pc = read_plane_consts<kTorchao>(planes);
  if constexpr (kBlock2d) tile_maxima_16x16(tile, reinterpret_cast<float(*)[8]>(cstage), tmax_s);
  if (a.row_data != nullptr)
    rowwise_tile<kTorchao, kSR, kBlock2d>(a, gv, k0, kleft, rleft, tile, planes.mtab[0], pc.ps_row, pc.tp_row,
                                          pc.row_fast, tmax_s);
  if (a.col_data != nullptr) {
    columnwise_tile_encode<kRHT, kTorchao, kSR, kBlock2d>(a, gv, k0, kleft, tile, planes.mtab[1], pc.ps_col,
                                                          pc.tp_col, pc.col_fast, cstage, tmax_s);
    __syncthreads();
    columnwise_tile_store(a, gv, k0, kleft, cstage);
  }
}

// amax, bf16: the amax_kernel tile (128 rows x 128 columns, reverse tile order), 256 threads, each owns 16 rows x 4
// columns (8-byte loads): half the registers per thread of amax_kernel's 16 rows x one 16-byte chunk, so twice the
// warps per SM to hide the load latency. Rowwise max: integer SIMD max of |bits| (equal to the NaN-ignoring fp max
// unless a NaN is present; a thread that sees a NaN pattern, |bits| > 0x7F80, takes the fp max).
// kNanProp: the torchao rules' NaN-propagating amax (SPEC 4.1): a NaN pattern seen by the integer max makes the
// rowwise result the canonical NaN at once; the columnwise (RHT) maximum runs the whole butterfly and a
// NaN-propagating max, since the last-stage shortcut below would turn the NaN of Inf - Inf into Inf.
template <bool kRHT, bool kNanProp = false>
__global__ void __launch_bounds__(256, 4) amax_fast_bf16(AmaxArgs a) {
  using T = __nv_bfloat16;
  // Grouped calls launch this grid with a programmatic dependency on the setup kernel (offsets, records, zeroed
  // amaxes); a CTA waits for it (griddepcontrol.wait, a no-op without the dependency) before it reads what that
  // kernel writes, and only then lets a programmatically dependent quantize grid start its X loads as this grid's
  // last wave runs (the quantizer reads the offsets and records before its own wait, so they must be complete by
  // then; it waits for this grid's completion before it reads the amaxes).
  // Where: with a.splits the CTAs below a.late_wait_ctas (the first wave, resident beside the setup kernel)
  // find their tiles from the splits themselves, so only their atomics need the setup kernel (the zeroed amaxes):
  // they wait just before them, and their loads overlap the setup kernel. The others, which start after the setup
  // kernel has ended, wait at once and read the records (one load against the scan's loads, shuffles and barrier; every
  // CTA on the scan cost the E=64 pass 2.6 us). Every CTA waits before it triggers or exits: the quantize grid starts
  // only when every CTA of this grid has done one or the other.
  // A single tensor with a.after_zero is launched with a programmatic dependency on launch_init_amax: every
  // CTA lets the quantize grid start at once (it reads nothing of this grid's before its own wait, which waits for
  // this grid's completion) and waits for the zeroing only before its atomics.
  const bool from_splits = a.splits != nullptr && blockIdx.x < a.late_wait_ctas;
  const bool wait_late = from_splits || a.after_zero;
  if (!wait_late) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!from_splits) asm volatile("griddepcontrol.launch_dependents;");
  GroupView gv;
  int64_t kt;
  const bool has_tile =
      from_splits ? resolve_grid_tile_reversed_splits(a.splits, a.E, a.M, blockIdx.x, amax_k_tiles<T>(a.K), gv, kt)
                  : resolve_grid_tile_reversed(a.offs, a.E, a.M, blockIdx.x, amax_k_tiles<T>(a.K), gv, kt, a.tile_recs);
  if (!has_tile) {
    if (wait_late) asm volatile("griddepcontrol.wait;" ::: "memory");
    return;
  }
  const int t = threadIdx.x, chunk = t & 31, rb = t >> 5;
  const int64_t gcol = kt * 128 + chunk * 4;
  const T* x = reinterpret_cast<const T*>(a.x);

  // One pointer per thread, stepped by one row per load, and a 32-bit count of this thread's valid rows (the
  // per-load 64-bit row products and compares were ~40% of this kernel's instructions).
  const int rows = gcol < a.K ? max(min(gv.rows - rb * 16, 16), 0) : 0;  // this thread's valid rows
  const uint2* src = reinterpret_cast<const uint2*>(x + (gv.first_row + rb * 16) * a.K + gcol);
  const int64_t step = a.K / 4;  // one row, in uint2 units (K % 16 == 0)
  uint2 raw[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    raw[i] = make_uint2(0, 0);
    // ld.global.nc.L1::no_allocate: the pass reads each byte once; without allocating L1 lines for the
    // loads in flight it runs 9-11% faster on the H100 (33.0 -> 29.1 us on 8192x5120; a 128- or 256-byte L2 prefetch
    // hint on top, or the whole carveout as L1 for the allocating loads, changed nothing).
    if (i < rows)
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(raw[i].x), "=r"(raw[i].y) : "l"(src));
    src += step;
  }
  uint32_t mu = 0;
#pragma unroll
  for (int i = 0; i < 16; i += 2)
    mu = absmax2(absmax2(absmax2(mu, raw[i].x), absmax2(raw[i].y & 0x7FFF7FFFu, raw[i + 1].x)), raw[i + 1].y);
  const uint32_t mh = max(mu & 0xFFFFu, mu >> 16);
  float rmax = __uint_as_float(mh << 16), cmax;
  if (kNanProp && mh > 0x7F80u) {
    rmax = __uint_as_float(0x7FC00000u);  // SPEC 4.1, torchao rules
  } else if (mh > 0x7F80u) {  // a NaN: NaN-ignoring fp max (SPEC 4.1), re-read (rare path, keeps raw[] out of it)
    rmax = 0.0f;
#pragma unroll 1
    for (int i = 0; i < rows; ++i) {
      const uint2 q = __ldg(reinterpret_cast<const uint2*>(x + (gv.first_row + rb * 16 + i) * a.K + gcol));
      const uint32_t w[2] = {q.x, q.y};
#pragma unroll
      for (int e = 0; e < 4; ++e) rmax = fmaxf(rmax, fabsf(bf16_half(w[e >> 1], e & 1)));
    }
  }
  if constexpr (kRHT) {
    float cm = 0.0f;  // NaN-ignoring max of |v| before * 0.25 and rounding (both monotone: the max commutes)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = bf16_half(e < 2 ? raw[i].x : raw[i].y, e & 1);
      if constexpr (kNanProp) {  // SPEC 4.2 (4.1's NaN rule) over 7.2's outputs, NaN-propagating (Inf - Inf is NaN)
        rht16_butterfly<kDefaultRhtSigns>(v);
#pragma unroll
        for (int i = 0; i < 16; ++i) cm = abs_max<true>(cm, fabsf(v[i]));
      } else {
        rht16_butterfly<kDefaultRhtSigns, 3>(v);
        // The last butterfly stage (h = 8) outputs RN(p + q) and RN(p - q); the larger magnitude of the two is
        // RN(|p| + |q|) (RN is monotone and odd, max(|p+q|, |p-q|) = |p| + |q|; Inf/NaN cases agree under the
        // NaN-ignoring fmaxf), so the stage is replaced by one add per pair.
#pragma unroll
        for (int i = 0; i < 8; ++i) cm = fmaxf(cm, __fadd_rn(fabsf(v[i]), fabsf(v[i + 8])));
      }
    }
    cmax = round_bf16(__fmul_rn(cm, 0.25f));
  } else {
    cmax = rmax;
  }
  if (wait_late) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (from_splits) asm volatile("griddepcontrol.launch_dependents;");
  cta_amax_atomic<8, kNanProp>(rmax, cmax, a, gv.g);
}

}  // namespace nvfp4
