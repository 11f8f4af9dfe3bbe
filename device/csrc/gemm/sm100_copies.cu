// Mode "sm100" on the tensor cores (algorithm sm100_copies): SPEC 12.7 bit for bit, i.e. oracle.gemm(model="sm100"),
// from the fp16 copies of both operand planes that exact_copies reads (gemm/copies.cu's decode_plane_kernel: v = E2M1 x
// E4M3, exact; gemm/exact_copies.cuh's TMA loads, per-group maps and tile walk).
//
// A k64 step of SPEC 12.7 adds C and four group values V_g = P_g sA_g sB_g (exact: what one wgmma k16 with C = 0
// returns for the group's 16 fp16 products, SPEC 12.6 and gemm/exact_copies.cuh), each truncated to a multiple of
// 2^(E - 35), and rounds toward zero. Where nothing is truncated and the four values add exactly in fp32, that is
// s = V_0 + V_1 + V_2 + V_3 followed by one __fadd_rz(C, s), and the kernel proves that per output and step from the
// scale exponents (the loader's per-row summaries) and the partials' magnitudes:
//   L <= E_g <= H  for every group with a nonzero scale on both sides: L = lo_A + lo_B and H = hi_A + hi_B, lo / hi
//       the least / largest e(s) over the row's nonzero scales of the step (e(s) as SPEC 12.7; a zero group adds
//       nothing and sets no exponent, so counting one only widens [L, H]);
//   every nonzero V_g is a multiple of 2^(E_g - 8) >= 2^(L - 8) (E2M1 halves times scales with 3 fraction bits);
//   so if H - L <= 27, |C| < 2^(L + 28) (E_C <= L + 27) and |C| >= 2^(H - 12) or C = 0 (E_C >= H - 12), then
//       E <= L + 27 and E <= E_C + 12: the window 2^(E - 35) divides every V_g and C's last bit 2^(E_C - 23), so
//       nothing is cut;
//   and if the sum of the |partials| stays below 2^(L + 16), every partial sum is an integer multiple of 2^(L - 8)
//       below 2^24 of them: exact in fp32 (a sum that reaches 2^(L + 16) computes to at least that, so the test on the
//       computed magnitudes is sound).
// That per-step test reads C. The running test does not: every accumulator of a tile is a multiple of 2^(L_min - 8),
// L_min the least L of its steps so far, so H <= L_min + 27 and |C| < 2^(L_min + 28) leave nothing cut either, and the
// kernel carries a bound c_max on |C| from step to step instead of reducing over C (RunningBounds).
// (tests/test_sm100_fast_step.py checks both against SPEC 12.6's and 12.7's scalar references on the CPU.)
// Three ways to form the partials, chosen per warpgroup and step from the loader's summaries:
//   one chain of four (chained spreads, below, and the chain-4 bound B = sum over g of 576 maxA_g maxB_g below
//       2^(L + 16), maxA_g the largest |scale| of group g over the warpgroup's rows, maxB_g over the tile's columns):
//       wgmma(g0), then g1, g2, g3 with scale-d = 1 into one fragment, p = V_0 + V_1 + V_2 + V_3 exactly, and C + p
//       with no magnitude sum (1 CUDA-core instruction per output and step). Every product of group g is at most
//       36 maxA_g maxB_g (|E2M1| <= 6), so every partial sum of the chain is at most B: a multiple of 2^(L - 8) below
//       2^(L + 16), exact in fp32; the k-th wgmma truncates at 2^(E' - 25) with E' = max(e(partial), E_k + 6) <=
//       max(L + 15, H + 6) <= L + 17 (H - L <= 7), a grid no coarser than 2^(L - 8). B stands in for the magnitude sums
//       in the tests and in c_max. On normal data B passes on about 97% of the steps (64 x 128 outputs), on
//       heavy-tailed tokens seldom (docs/design.md 4.6).
//   chained (the groups' exponents spread by H - L <= 7 over the warpgroup's 64 rows and the tile's 128 columns): two
//       partials, wgmma(g0) then wgmma(g1) with scale-d = 1 into one fragment, and the same for g2, g3. The second
//       wgmma is exact too: by SPEC 12.6 it truncates at 2^(E' - 25) with E' = max(e(V_0), E_1 + 6) <= H + 10 (|V_0| <
//       2^(E_0 + 11), |a b| < 2^(E_1 + 7)), at most 2^(L - 8), the grid of both addends; its sum is checked below
//       2^(L + 16) as above. Two wgmmas per fragment, 3.5 CUDA-core instructions per output and step.
//   per group (wider spreads): four m64n64 partials per half of the tile's columns, summed on the CUDA cores.
// Both tests run first with the warp's bounds (the loader's per-16-row and per-tile extremes, shared by the warp): the
// running test (one max reduction of the magnitude sums, one vote), then, where it fails, the per-step test on the
// extremes of the warp's C; where that fails for some output of the warp, every output is tested with its own row's and
// column's bounds, and the outputs that fail that too (a NaN or sign-bit scale, an exponent spread past 27,
// cancellation to C = 0, ...) run SPEC 12.7's step exactly as sm100_simt does, in int64 units of 2^-20, from the fp16
// values and scale bytes still in the stage (step_from_stage).
//
// Roles (one persistent CTA per SM, three 128-thread warpgroups; 128 x 128 output tiles, the setup kernel's list):
//   issuer (loader thread 0): each stage's two TMA boxes (A rows [m0, m0 + 128) and B rows [n0, n0 + 128) x 64 K, as
//       exact_copies) and, by bulk copies, the two operands' scale tiles of the step (the 512 bytes of 128 rows x 4
//       16-blocks, SPEC 8.2: row r's four bytes are the aligned word at (r % 32) 16 + (r / 32) 4), on raw[s].
//   summarizers (loader warps 1-3, each every third step): once raw[s] completes, the words of the 128 A rows and the
//       128 B rows, masked (zero past the group's rows and past K), and the eight bands' tests into the stage, then an
//       arrival on full[s]. They wait on shared memory only, so they run ahead of the MMA warps with the issuer. Two
//       warps that each took every step (half of the A rows each) starved the MMA warps: a third of the MMA warps'
//       stall samples were on full[s] (ncu); three rotating warps took E8 fprop from 0.16 to 0.23 of
//       torch._grouped_mm (H200). Summaries in 16-bit lanes (summarize) take a summarizer about 330 instructions per
//       step, byte-wise ones (__vminu4) 950. (Scale buffers that are not 16-byte aligned take no bulk copy: the
//       summarizers then load the words from global memory.)
//   MMA warpgroups (2, rows [64 wm, 64 wm + 64) x 128 columns): the partials, the test, the sum; SPEC 12.7's epilogue
//       (gemm/epilogue.cuh, direct stores).
//   raw[s]: the issuer's arrival with the boxes' and tiles' bytes; full[s]: the step's summarizer's arrival;
//   empty[s]: one arrival per MMA warp, after its last read of the stage.
#include <cuda_fp16.h>

#include <type_traits>

#include "common/pdl.cuh"
#include "common/swizzle.cuh"
#include "common/tensor_map.h"
#include "gemm/copies.h"
#include "gemm/epilogue.cuh"
#include "gemm/exact_copies.cuh"
#include "gemm/sm100_step.cuh"
#include "gemm/wgmma_ops.cuh"

namespace nvfp4_gemm {
namespace sm100_copies {
namespace {

constexpr int BM = 128, BN = 128, R = 64;  // R: fp32 accumulator registers per MMA thread (m64n128)
constexpr int kStages = 6;
constexpr int kThreads = 384, kLoaderThreads = 128;
// The MMA warps hold the accumulators and two partials (192 registers); the summarizers' chain-4 maxima spill 60-80
// bytes under 56 registers, none under 72 (docs/design.md 4.6).
constexpr int kMmaRegs = 216, kLoaderRegs = 72;
constexpr int kSummarizers = 3;  // loader warps 1-3 write the summaries of every third step each
constexpr int kTileBytes = 128 * kBK * 2;  // 128 rows x 64 fp16 = 16 KB
// A stage: the A tile, the B tile (both as exact_copies), the two raw scale tiles (A's, B's), then the masked scale
// words of the 128 A rows and the 128 B rows (group g of the step in byte g; zero past the group's rows or past K) and
// the eight 16-row bands' tests (WarpTest).
constexpr int kScaleTile = 512;
constexpr int kRawScalesA = 2 * kTileBytes, kRawScalesB = kRawScalesA + kScaleTile;
constexpr int kWordsA = kRawScalesB + kScaleTile, kWordsB = kWordsA + 4 * BM, kTests = kWordsB + 4 * BN;
constexpr int kStageBytes = (kTests + 16 * (BM / 16) + 1023) / 1024 * 1024;
constexpr int kBarBytes = 256;  // raw, full and empty
constexpr int kSmemBase = kStages * kStageBytes + kBarBytes + 1024;
constexpr int kPrefixCap = prefix_cap_for(227 * 1024 - kSmemBase);
constexpr int kSmem = kSmemBase + prefix_table_bytes(kPrefixCap);
static_assert(kSmem <= 227 * 1024, "shared memory");
static_assert(2 * kMmaRegs + kLoaderRegs <= 3 * (65536 / kThreads / 8 * 8), "setmaxnreg budget");

// 2^e as fp32, with 0 below the normal range and +Inf above it (the tests' thresholds).
__device__ __forceinline__ float pow2(int e) {
  const int f = e + 127;
  return __uint_as_float(static_cast<uint32_t>(f <= 0 ? 0 : (f >= 255 ? 255 : f)) << 23);
}

// A row's scales in one step (a word of four scale bytes), or a band's or tile's rows': the least and largest e(s) over
// the nonzero bytes (64 and -64 when there is none) and whether a byte is NaN or carries the sign bit (the fp16 copy's
// values then differ from SPEC 12.7's, which ignores that bit).
struct RowScales {
  int lo, hi;
  bool special;
};

// Scale bytes summarized for reductions, in two 16-bit lanes: the low lane the largest magnitude byte b = byte & 0x7F
// (0 when all are zero), the high lane the largest 256 - b over the nonzero ones (0 when none). Both are maxima, so
// summaries merge by __vmaxu2 (one VIMNMX.U16x2; the byte-wise __vminu4 / __vmaxu4 take six instructions each on
// sm_90). e(s) is monotone in b: e = max(b >> 3, 1) - 7 for a nonzero b.
__device__ __forceinline__ uint32_t summarize(uint32_t word) {
  const uint32_t x = word & 0x007F007Fu, y = (word >> 8) & 0x007F007Fu;  // b of bytes 0, 2 and of bytes 1, 3
  // per lane (b + 127) ^ 127: 0 for b = 0, else 128 + (b - 1) ^ 127 = 256 - b (no carry leaves a lane: b <= 127)
  const uint32_t cx = (x + 0x007F007Fu) ^ 0x007F007Fu, cy = (y + 0x007F007Fu) ^ 0x007F007Fu;
  const uint32_t h = __vmaxu2(x, y), c = __vmaxu2(cx, cy);  // lane 0: bytes 0, 1; lane 1: bytes 2, 3
  return __vmaxu2(__byte_perm(h, c, 0x5410), __byte_perm(h, c, 0x7632));  // (h, c) of lane 0 against lane 1's
}

// The bounds of a (merged) summary; `sign`: some byte carries the sign bit.
__device__ __forceinline__ RowScales unpack_summary(uint32_t summary, bool sign) {
  const int b_max = static_cast<int>(summary & 0xFFFF), c_max = static_cast<int>(summary >> 16);
  if (b_max == 0) return RowScales{64, -64, sign};
  return RowScales{max((256 - c_max) >> 3, 1) - 7, max(b_max >> 3, 1) - 7, sign || b_max == 0x7F};
}

__device__ __forceinline__ RowScales row_scales(uint32_t word) {
  return unpack_summary(summarize(word), (word & 0x80808080u) != 0);
}

// Summaries merged over the lanes whose index differs in the bits FIRST, FIRST / 2, ..., LAST (xor shuffles).
template <int FIRST, int LAST>
__device__ __forceinline__ uint32_t merge_lanes(uint32_t summary) {
#pragma unroll
  for (int d = FIRST; d >= LAST; d /= 2) summary = __vmaxu2(summary, __shfl_xor_sync(0xffffffffu, summary, d));
  return summary;
}

// The scale tile of step kt for the 128 rows from row0 (a multiple of 128) of a plane with K contraction elements:
// its first byte (SPEC 8.2: 512 bytes, tile column kt of row tile row0 / 128).
__device__ __forceinline__ const uint8_t* scale_tile(const uint8_t* scales, int K, int row0, int kt) {
  return scales + nvfp4::swizzle_offset<int64_t>(row0, 4 * kt, (K / 16 + 3) / 4);
}

// Row r's (of a tile) four scale bytes of a step by byte loads from global memory (a scale buffer that is not 16-byte
// aligned takes no bulk copy), at the tile's first byte global_tile.
__device__ __noinline__ uint32_t scale_word_global(const uint8_t* global_tile, int r) {
  const uint8_t* at = global_tile + nvfp4::swizzle_in_tile(r, 0);
  uint32_t w = 0;
#pragma unroll
  for (int g = 0; g < 4; ++g) w |= static_cast<uint32_t>(__ldg(at + g)) << (8 * g);
  return w;
}

// One 16-row band's test for a step (written by the loader, read by the band's MMA warp): t = 2^(L + 16) and
// h = 2^(H - 12) from the band's and the tile's B bounds, and the flags: kBandFast (no NaN or sign-bit scale and
// H - L <= 27, so the thresholds decide), kChained (the warpgroup's spread allows the chained partials) and kChain4
// (besides, the warpgroup's scale bound `bound` proves one chain of four exact; both the same for its four bands). The
// bound on |C| of the per-step test, 2^(L + 28), is 4096 t.
struct WarpTest {
  float t, h, bound;
  uint32_t flags;
};
constexpr uint32_t kBandFast = 1, kChained = 2, kChain4 = 4;

__device__ __forceinline__ WarpTest band_test(RowScales a, RowScales b, uint32_t path, float bound) {
  const int L = a.lo + b.lo, H = a.hi + b.hi;
  WarpTest t;
  t.t = pow2(L + 16);
  t.h = pow2(H - 12);
  t.bound = bound;
  t.flags = (!a.special && !b.special && H - L <= 27 ? kBandFast : 0u) | path;
  return t;
}

// The largest scale magnitude byte of each group of a step over a set of rows: groups 0 and 2 in the 16-bit lanes of
// `even`, groups 1 and 3 in those of `odd` (maxima merge by __vmaxu2, one instruction each).
struct GroupMax {
  uint32_t even, odd;
};

// m merged with a row's scale word w
__device__ __forceinline__ GroupMax merge_group_max(GroupMax m, uint32_t w) {
  return GroupMax{__vmaxu2(m.even, w & 0x007F007Fu), __vmaxu2(m.odd, (w >> 8) & 0x007F007Fu)};
}

// m merged over the warp's lanes: four independent warp reductions (REDUX), one per group
__device__ __forceinline__ GroupMax warp_group_max(GroupMax m) {
  constexpr uint32_t kAll = 0xffffffffu;
  const uint32_t g0 = __reduce_max_sync(kAll, m.even & 0xFFFFu), g2 = __reduce_max_sync(kAll, m.even >> 16);
  const uint32_t g1 = __reduce_max_sync(kAll, m.odd & 0xFFFFu), g3 = __reduce_max_sync(kAll, m.odd >> 16);
  return GroupMax{g0 | (g2 << 16), g1 | (g3 << 16)};
}

// The value of an E4M3 magnitude byte b <= 0x7F (SPEC 2.2; 0x7F, NaN, reads as 480: a NaN scale sends its band to the
// exact step whatever the bound says): normal bytes by their bits (exponent field + 120 is fp32's), subnormal b * 2^-9.
__device__ __forceinline__ float e4m3_magnitude(uint32_t b) {
  return b >= 8 ? __uint_as_float((b << 20) + (120u << 23)) : __uint2float_rn(b) * 0x1p-9f;
}

// The chain-4 bound of a warpgroup's step, rounded up: sum over the groups g of 576 maxA_g maxB_g, with maxA_g (maxB_g)
// the largest |scale| of group g over the warpgroup's rows (the tile's B rows). An fp16 copy's value is an E2M1 value
// (|q| <= 6) times its scale, so every product of group g is at most 36 maxA_g maxB_g and every partial sum of the four
// group values of any output at most this bound. (576 maxA maxB has at most 8 + 4 significant bits: exact.)
__device__ __forceinline__ float chain4_bound(GroupMax a, GroupMax b) {
  float s = 0.0f;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int shift = 16 * (g >> 1);
    const uint32_t ba = (((g & 1) ? a.odd : a.even) >> shift) & 0xFFu;
    const uint32_t bb = (((g & 1) ? b.odd : b.even) >> shift) & 0xFFu;
    s = __fadd_ru(s, __fmul_rn(576.0f * e4m3_magnitude(ba), e4m3_magnitude(bb)));
  }
  return s;
}

// SPEC 12.7's step for one output from the stage (the rare path): C, row r of the A tile and row c of the B tile (fp16
// values in the 128-byte swizzled layout; piece q of row r at r * 128 + ((q ^ (r % 8)) << 4)) and their scale words.
// A group value is the exact sum of its 16 fp16 products (each exact in fp32; every partial sum a multiple of
// 2^(E_g - 8) below 2^(E_g + 11)), with the sign the copy's scale bytes gave it removed; a group is live when one
// product is nonzero.
__device__ __noinline__ float step_from_stage(float c, int r, int col, uint32_t wa, uint32_t wb, uint32_t a_tile,
                                              uint32_t b_tile) {
  if (c != c) return c;  // a NaN C stays NaN
#pragma unroll
  for (int g = 0; g < 4; ++g)
    if (sm100::scale_is_nan(wa >> (8 * g)) || sm100::scale_is_nan(wb >> (8 * g))) return __uint_as_float(0x7FC00000u);
  int e = c != 0.0f ? static_cast<int>((__float_as_uint(c) >> 23) & 0xFF) - 127 : sm100::kZeroExp;  // C is normal
  long long v[4];
#pragma unroll 1
  for (int g = 0; g < 4; ++g) {
    float sum = 0.0f;
    bool live = false;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int q = 2 * g + half;  // the 16-byte piece: 8 fp16 values of K positions 8 q .. 8 q + 7
      const uint4 x = lds128(a_tile + r * 128 + ((q ^ (r & 7)) << 4));
      const uint4 y = lds128(b_tile + col * 128 + ((q ^ (col & 7)) << 4));
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&xs[i]));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&ys[i]));
        const float p0 = __fmul_rn(a.x, b.x), p1 = __fmul_rn(a.y, b.y);
        live |= p0 != 0.0f || p1 != 0.0f;
        sum = __fadd_rn(__fadd_rn(sum, p0), p1);
      }
    }
    const uint32_t ba = (wa >> (8 * g)) & 0xFF, bb = (wb >> (8 * g)) & 0xFF;
    if ((ba ^ bb) & 0x80) sum = -sum;  // SPEC 12.7 ignores the scales' sign bits
    if (live) e = max(e, sm100::scale_exp(ba) + sm100::scale_exp(bb));
    v[g] = __float2ll_rn(__fmul_rn(sum, 0x1p20f));  // exact: a multiple of 2^-20 below 2^27
  }
  const long long acc = sm100::step_sum(__float2ll_rn(__fmul_rn(c, 0x1p20f)), v, e);
  return __fmul_rn(__ll2float_rn(acc), 0x1p-20f);  // exact: 24 significant bits, a multiple of 2^-20
}

// The per-step test of one output (band_test on its own row's and column's bounds) for an output whose warp failed
// both shared tests; if it fails too, the exact step. s: the partials' sum, m: a bound on the sum of their magnitudes.
__device__ __forceinline__ float output_step(float c, float s, float m, int r, int col, uint32_t stage) {
  const uint32_t wa = lds32(stage + kWordsA + 4 * r), wb = lds32(stage + kWordsB + 4 * col);
  const WarpTest t = band_test(row_scales(wa), row_scales(wb), 0u, 0.0f);
  const float ac = fabsf(c);
  if ((t.flags & kBandFast) && m < t.t && ac < 4096.0f * t.t && (ac >= t.h || c == 0.0f)) return __fadd_rz(c, s);
  return step_from_stage(c, r, col, wa, wb, stage, stage + kTileBytes);
}

// The outputs of one warp whose shared tests failed: N accumulators acc[OFF .. OFF + N) (columns COL0 + 8 j + 2 (l % 4)
// + e for register 4 j + 2 h + e), with their partial sums and bounds on their magnitude sums. Through local memory,
// one output at a time (a rare path: the loop is not unrolled, so its code exists once per call site).
template <int N, int OFF, int COL0, class SumOf, class BoundOf>
__device__ __forceinline__ void warp_slow(float (&acc)[R], SumOf&& sum_of, BoundOf&& bound_of, int row0, int lane,
                                          uint32_t stage) {
  float cl[N], sl[N], ml[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    cl[i] = acc[OFF + i];
    sl[i] = sum_of(i);
    ml[i] = bound_of(i);
  }
#pragma unroll 1
  for (int i = 0; i < N; ++i) {
    const int r = row0 + 8 * ((i >> 1) & 1), col = COL0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
    cl[i] = output_step(cl[i], sl[i], ml[i], r, col, stage);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) acc[OFF + i] = cl[i];
}

// The largest |C| over N accumulators from OFF.
template <int N, int OFF>
__device__ __forceinline__ float max_abs(const float (&acc)[R]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) m = fmaxf(m, fabsf(acc[OFF + i]));
  return m;
}

// The per-step test shared by a warp's N outputs, for a step whose running test (below) failed: the largest magnitude
// sum mm below t, |C| below 2^(L + 28) = 4096 t and, unless C = 0, at least h, as a test of the extremes. The least
// nonzero |C| is found on the keys 2 bits(C) - 1 as unsigned integers: the sign bit drops out, +0 and -0 become the
// largest key, and for the others the key's order is |C|'s. A NaN C passes (fmaxf drops it, its key lies above every
// finite one), which is sound: a NaN C stays NaN through __fadd_rz, as SPEC 12.7's step keeps it.
template <int N, int OFF>
__device__ __forceinline__ bool warp_test_c(const float (&acc)[R], float mm, const WarpTest& t) {
  const float hi = max_abs<N, OFF>(acc);
  uint32_t lo_key = 0xFFFFFFFFu;
#pragma unroll
  for (int i = 0; i < N; ++i) lo_key = min(lo_key, 2u * __float_as_uint(acc[OFF + i]) - 1u);
  const bool lo_ok = t.h == 0.0f || lo_key >= 2u * __float_as_uint(t.h) - 1u;
  const bool ok = (t.flags & kBandFast) != 0 && mm < t.t && hi < 4096.0f * t.t && lo_ok;
  return __all_sync(0xffffffffu, ok);
}

// What a warp carries through a tile's steps for the running test: t_min = 2^(L_min + 16), L_min the least L of the
// band over the steps so far (this one included), and per lane c_max >= |C| for each of its outputs.
//   Every accumulator is a multiple of 2^(L_min - 8): each step adds group values that are multiples of 2^(L - 8), and
//   SPEC 12.7's truncation and rounding keep a value on any grid at least as coarse. So if H <= L_min + 27 and
//   |C| < 2^(L_min + 28), then E <= L_min + 27, and the window 2^(E - 35) divides C and every group value: nothing is
//   cut, whatever C's exponent (the per-step test needs |C| >= 2^(H - 12) instead). With the partials' magnitude test,
//   RZ(C + s) is the step.
// c_max grows by the step's largest magnitude sum, rounded up, after a step the running test passed; after any other
// step it is the largest |C| again. In a contraction of K elements it stays below K / 64 * 2^(L_max + 16), so the test
// fails on c_max only where the scales fall by 2^12 or more between steps.
struct RunningBounds {
  float t_min = __builtin_huge_valf();  // +Inf: no step yet
  float c_max = 0.0f;

  // Whether the step may add RZ(C + s) for this lane's outputs, given the band's test (t_min updated first).
  __device__ __forceinline__ bool ok(const WarpTest& t, float mm) {
    t_min = fminf(t_min, t.t);
    return (t.flags & kBandFast) != 0 && mm < t.t && t.h <= 0.5f * t_min && c_max < 4096.0f * t_min;
  }

  // c_max after the step: grown by mm (the step's largest magnitude sum) where the running test passed, else the
  // largest |C| of the accumulators.
  __device__ __forceinline__ void after_step(bool passed, float mm, const float (&acc)[R]) {
    if (passed)
      c_max = __fadd_ru(c_max, mm);
    else
      c_max = max_abs<R, 0>(acc);
  }
};

// One warp's step for N outputs from OFF whose partial sums sum_of(i) are exact and whose magnitude sums are at most mm
// (the same in every lane of the warp, or this lane's largest): the running test (one vote); where it fails, the
// per-step test of the extremes; where that fails, warp_slow (bound_of(i): a bound on output i's magnitude sum).
// Returns the running test's vote.
template <int N, int OFF, int COL0, class SumOf, class BoundOf>
__device__ __forceinline__ bool add_step_bounded(float (&acc)[R], SumOf&& sum_of, BoundOf&& bound_of,
                                                 const WarpTest& test, RunningBounds& run, float mm, int row0, int lane,
                                                 uint32_t stage) {
  const bool fast = __all_sync(0xffffffffu, run.ok(test, mm));
  if (fast || warp_test_c<N, OFF>(acc, mm, test)) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[OFF + i] = __fadd_rz(acc[OFF + i], sum_of(i));
  } else {
    warp_slow<N, OFF, COL0>(acc, sum_of, bound_of, row0, lane, stage);
  }
  return fast;
}

// One warp's step for N outputs from OFF: the running test (one max reduction of the magnitude sums, one vote); where
// it fails, the per-step test of the extremes; where that fails, warp_slow. mm: the largest magnitude sum of this
// lane's outputs. Returns the running test's vote. bound_of is another bound on the magnitude sum than mag_of (twice or
// four times the largest |partial|): with the same expression ptxas keeps the N sums alive for the rare path.
template <int N, int OFF, int COL0, class SumOf, class MagOf, class BoundOf>
__device__ __forceinline__ bool add_step(float (&acc)[R], SumOf&& sum_of, MagOf&& mag_of, BoundOf&& bound_of,
                                         const WarpTest& test, RunningBounds& run, float& mm, int row0, int lane,
                                         uint32_t stage) {
  // The magnitude sums are +0, positive or a positive NaN, so their bits order as unsigned integers as the values do
  // (a NaN above every finite value: the tests then fail): the max by three-way integer maxima (VIMNMX3, one
  // instruction per two outputs), in four independent chains (a 32-long chain waits on each result).
  uint32_t m4[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < N; i += 2)
    m4[(i >> 1) & 3] = __vimax3_u32(m4[(i >> 1) & 3], __float_as_uint(mag_of(i)), __float_as_uint(mag_of(i + 1)));
  mm = __uint_as_float(max(max(m4[0], m4[1]), max(m4[2], m4[3])));
  return add_step_bounded<N, OFF, COL0>(acc, sum_of, bound_of, test, run, mm, row0, lane, stage);
}

template <bool OUT_F32>
__global__ void __launch_bounds__(kThreads, 1)
    sm100_copies_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                        const CUtensorMap* __restrict__ group_maps) {
  pdl_wait();  // the retarget / maps kernel's outputs: nothing global is touched before (common/pdl.cuh)
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t ring = smem, bars = ring + kStages * kStageBytes;
  const uint32_t raw = bars, full = bars + 8 * kStages, empty = bars + 16 * kStages;
  const uint32_t prefix_table = bars + kBarBytes;
  const int tid = threadIdx.x, lane = tid & 31;
  const int first_tile = blockIdx.x, tile_stride = gridDim.x;
  const TileWalk<false> walk(__ldg(prefix + E), tile_stride);
  stage_prefix<kPrefixCap>(prefix_table, prefix, E, tid, kThreads);
  if (tid == 0)
    for (int s = 0; s < kStages; ++s) mbar_init(raw + 8 * s, 1);  // (init_ring_barriers' fence and barrier follow)
  init_ring_barriers<kStages>(full, empty, 1, 8);

  if (tid < kLoaderThreads) {
    // ------------------------------------------------------------------------------------------------ loaders
    setmaxnreg_dec<kLoaderRegs>();
    const int w = (tid >> 5) - 1;  // summarizer w: loader warp 1 + w, every kSummarizers-th step; the issuer: thread 0
    if (tid != 0 && w < 0) return;
    int step = 0;  // the steps walked
    StepCursor cur;
    cur.stride = tile_stride;
    cur.seek<BN>(probs, prefix, E, walk, first_tile);
    Ring<kStages> st;
    const CUtensorMap* maps = nullptr;
    Prob p{};
    int m0 = 0, n0 = 0;
    bool bulk = false;  // both scale buffers 16-byte aligned: the scale tiles come by bulk copies
    while (cur.valid(walk)) {
      if (cur.kt == 0) {
        p = probs[cur.group];
        m0 = (cur.local % p.tiles_m) * BM;
        n0 = (cur.local / p.tiles_m) * BN;
        bulk = ((reinterpret_cast<uintptr_t>(p.sa) | reinterpret_cast<uintptr_t>(p.sb)) & 15) == 0;
        if (tid == 0) {
          maps = group_maps + 2 * cur.group;
          gmap::acquire_group_map(maps);  // written by group_maps_kernel (generic proxy), read here by TMA
          gmap::acquire_group_map(maps + 1);
        }
      }
      const int kt = cur.kt;
      const uint32_t stage = ring + st.stage * kStageBytes;
      const uint8_t* tile_a = scale_tile(p.sa, p.K, m0, kt);
      const uint8_t* tile_b = scale_tile(p.sb, p.K, n0, kt);
      if (tid == 0) {  // the issuer
        mbar_wait(empty + 8 * st.stage, st.phase ^ 1u);
        const uint32_t bar = raw + 8 * st.stage;
        mbar_arrive_expect_tx(bar, 2 * kTileBytes + (bulk ? 2 * kScaleTile : 0));
        tma_load_2d(stage, maps, bar, 64 * kt, m0);
        tma_load_2d(stage + kTileBytes, maps + 1, bar, 64 * kt, n0);
        if (bulk) {
          bulk_copy_from_global(stage + kRawScalesA, tile_a, kScaleTile, bar);
          bulk_copy_from_global(stage + kRawScalesB, tile_b, kScaleTile, bar);
        }
      } else if (step % kSummarizers == w) {  // this summarizer's step: A rows and B rows lane + 32 i
        mbar_wait(raw + 8 * st.stage, st.phase);
        // rows lane + 32 i (i < 4) of A and B: A's row in band 2 i + lane / 16, its scale word at lane 16 + 4 i of
        // the tile (SPEC 8.2); va, vb: the group's rows from the tile's first
        const int va = p.M - m0, vb = p.N - n0;
        uint32_t wa[4], wb[4];
        if (bulk) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            wa[i] = lds32(stage + kRawScalesA + nvfp4::swizzle_in_tile(lane + 32 * i, 0));
            wb[i] = lds32(stage + kRawScalesB + nvfp4::swizzle_in_tile(lane + 32 * i, 0));
          }
        } else {  // (no load past the group's rows)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            wa[i] = lane + 32 * i < va ? scale_word_global(tile_a, lane + 32 * i) : 0u;
            wb[i] = lane + 32 * i < vb ? scale_word_global(tile_b, lane + 32 * i) : 0u;
          }
        }
        // masked: the bytes of 16-blocks past K zero (SPEC 12.7's padding: zero groups), a row past the group's
        // rows all zero
        const int blocks = p.K / 16 - 4 * kt;  // 16-blocks of the step inside K (>= 1)
        const uint32_t k_mask = blocks >= 4 ? 0xFFFFFFFFu : (1u << (8 * blocks)) - 1u;
        uint32_t sa[4], sb = 0, sign_b = 0, sign_a[4];
        GroupMax ga[2] = {{0u, 0u}, {0u, 0u}}, gb{0u, 0u};  // the chain-4 bounds' maxima: A per warpgroup, B
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          wa[i] = lane + 32 * i < va ? wa[i] & k_mask : 0u;
          wb[i] = lane + 32 * i < vb ? wb[i] & k_mask : 0u;
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(stage + kWordsA + 4 * (lane + 32 * i)), "r"(wa[i]) : "memory");
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(stage + kWordsB + 4 * (lane + 32 * i)), "r"(wb[i]) : "memory");
          sa[i] = merge_lanes<8, 1>(summarize(wa[i]));  // band 2 i + lane / 16
          sign_a[i] = __ballot_sync(0xffffffffu, (wa[i] & 0x80808080u) != 0);
          sb = __vmaxu2(sb, summarize(wb[i]));
          sign_b |= wb[i];
          ga[i >> 1] = merge_group_max(ga[i >> 1], wa[i]);
          gb = merge_group_max(gb, wb[i]);
        }
        const RowScales bs = unpack_summary(merge_lanes<16, 1>(sb), __any_sync(0xffffffffu, sign_b & 0x80808080u));
        // the two warpgroups' 64 rows each (bands 0-3: words 0 and 1; bands 4-7: words 2 and 3); no sign needed
        const RowScales g0 = unpack_summary(merge_lanes<16, 16>(__vmaxu2(sa[0], sa[1])), false);
        const RowScales g1 = unpack_summary(merge_lanes<16, 16>(__vmaxu2(sa[2], sa[3])), false);
        const bool chained0 = (g0.hi - g0.lo) + (bs.hi - bs.lo) <= 7, chained1 = (g1.hi - g1.lo) + (bs.hi - bs.lo) <= 7;
        // each warpgroup's chain-4 bound (its 64 rows: words 0, 1 / 2, 3; B: the tile's 128 rows) against 2^(L + 16)
        gb = warp_group_max(gb);
        const float bound0 = chain4_bound(warp_group_max(ga[0]), gb);
        const float bound1 = chain4_bound(warp_group_max(ga[1]), gb);
        const uint32_t path0 = chained0 ? (bound0 < pow2(g0.lo + bs.lo + 16) ? kChained | kChain4 : kChained) : 0u;
        const uint32_t path1 = chained1 ? (bound1 < pow2(g1.lo + bs.lo + 16) ? kChained | kChain4 : kChained) : 0u;
        // lane 16 h + q (q < 4) writes band 2 q + h's test
        const int q = lane & 15;
        if (q < 4) {
          const uint32_t summary = q == 0 ? sa[0] : q == 1 ? sa[1] : q == 2 ? sa[2] : sa[3];
          const uint32_t signs = q == 0 ? sign_a[0] : q == 1 ? sign_a[1] : q == 2 ? sign_a[2] : sign_a[3];
          const bool sign = ((lane < 16 ? signs : signs >> 16) & 0xFFFFu) != 0;
          const WarpTest t =
              band_test(unpack_summary(summary, sign), bs, q < 2 ? path0 : path1, q < 2 ? bound0 : bound1);
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(stage + kTests + 16 * (2 * q + (lane >> 4))),
                       "r"(__float_as_uint(t.t)), "r"(__float_as_uint(t.h)), "r"(__float_as_uint(t.bound)),
                       "r"(t.flags) : "memory");
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(full + 8 * st.stage);  // the step's words and tests are in place
      }
      ++step;
      st.next();
      cur.next<BN>(probs, prefix, E, walk);
    }
  } else {
    // ------------------------------------------------------------------------------------------------ MMA warpgroups
    setmaxnreg_inc<kMmaRegs>();
    const int mt = tid - kLoaderThreads;
    const int wm = mt >> 7;  // rows [64 wm, 64 wm + 64) of the tile
    const int warp = (mt >> 5) & 3;
    const int band = 4 * wm + warp;
    const int row0 = 64 * wm + 16 * warp + (lane >> 2);  // this thread's first row in the tile (and row0 + 8)
    Ring<kStages> st;
    for (int v = first_tile; v < walk.count; v += tile_stride) {
      int local = 0;
      const int group = find_group_cached<kPrefixCap>(prefix, prefix_table, E, v, &local);
      const Prob* pp = probs + group;
      const int tiles_m = __ldg(&pp->tiles_m);
      const int m0 = (local % tiles_m) * BM, n0 = (local / tiles_m) * BN;
      const int KT = (__ldg(&pp->K) + kBK - 1) / kBK;
      float acc[R];
#pragma unroll
      for (int i = 0; i < R; ++i) acc[i] = 0.0f;
      RunningBounds run;
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(raw + 8 * st.stage, st.phase);  // the boxes landed (observed here: the wgmmas read them)
        mbar_wait(full + 8 * st.stage, st.phase);
        const uint32_t stage = ring + st.stage * kStageBytes;
        const uint4 tw = lds128(stage + kTests + 16 * band);
        const WarpTest test{__uint_as_float(tw.x), __uint_as_float(tw.y), __uint_as_float(tw.z), tw.w};
        const uint32_t da = sw128_desc_lo(stage + wm * 64 * 128);
        if (test.flags & kChain4) {  // (warpgroup-uniform) one chain of four wgmmas: p = V_0 + V_1 + V_2 + V_3, exact
          float part[R];
          const uint32_t db = sw128_desc_lo(stage + kTileBytes);
          wgmma_fence();
#pragma unroll
          for (int g = 0; g < 4; ++g)
            wgmma_m64n128k16_ss_f16(part, sw128_desc_block(da, g), sw128_desc_block(db, g), g > 0 ? 1 : 0);
          wgmma_commit();
          fence_regs(part);
          wgmma_wait<0>();
          fence_regs(part);
          // the loader's bound on every partial sum stands in for the magnitude sums (no reduction)
          auto sum_of = [&](int i) { return part[i]; };
          auto bound_of = [&](int) { return test.bound; };
          const bool passed =
              add_step_bounded<R, 0, 0>(acc, sum_of, bound_of, test, run, test.bound, row0, lane, stage);
          run.after_step(passed, test.bound, acc);
        } else if (test.flags & kChained) {  // (warpgroup-uniform)
          float part[2][R];
          const uint32_t db = sw128_desc_lo(stage + kTileBytes);
          wgmma_fence();
          wgmma_m64n128k16_ss_f16(part[0], sw128_desc_block(da, 0), sw128_desc_block(db, 0), 0);
          wgmma_m64n128k16_ss_f16(part[0], sw128_desc_block(da, 1), sw128_desc_block(db, 1), 1);
          wgmma_m64n128k16_ss_f16(part[1], sw128_desc_block(da, 2), sw128_desc_block(db, 2), 0);
          wgmma_m64n128k16_ss_f16(part[1], sw128_desc_block(da, 3), sw128_desc_block(db, 3), 1);
          wgmma_commit();
          fence_regs(part[0]);
          fence_regs(part[1]);
          wgmma_wait<0>();
          fence_regs(part[0]);
          fence_regs(part[1]);
          // the partials' sum, the sum of their magnitudes (two separate functions: the test keeps no sum alive) and
          // the rare path's bound on it
          auto sum_of = [&](int i) { return __fadd_rn(part[0][i], part[1][i]); };
          auto mag_of = [&](int i) { return __fadd_rn(fabsf(part[0][i]), fabsf(part[1][i])); };
          auto bound_of = [&](int i) { return 2.0f * fmaxf(fabsf(part[0][i]), fabsf(part[1][i])); };
          float mm;
          const bool passed = add_step<R, 0, 0>(acc, sum_of, mag_of, bound_of, test, run, mm, row0, lane, stage);
          run.after_step(passed, mm, acc);
        } else {
          // per group: four m64n64 partials for each half h of the columns (B rows 64 h .. 64 h + 63: 8 KB further),
          // accumulators [32 h, 32 h + 32); both halves test against c_max from before the step
          auto half = [&](auto half_index, float& mm) {
            constexpr int h = decltype(half_index)::value, off = (R / 2) * h;
            float q[4][R / 2];
            const uint32_t db = sw128_desc_lo(stage + kTileBytes + h * 64 * 128);
            wgmma_fence();
#pragma unroll
            for (int g = 0; g < 4; ++g)
              wgmma_m64n64k16_ss_f16(q[g], sw128_desc_block(da, g), sw128_desc_block(db, g), 0);
            wgmma_commit();
#pragma unroll
            for (int g = 0; g < 4; ++g) fence_regs(q[g]);
            wgmma_wait<0>();
#pragma unroll
            for (int g = 0; g < 4; ++g) fence_regs(q[g]);
            auto sum_of = [&](int i) { return __fadd_rn(__fadd_rn(q[0][i], q[1][i]), __fadd_rn(q[2][i], q[3][i])); };
            auto mag_of = [&](int i) {
              return __fadd_rn(__fadd_rn(fabsf(q[0][i]), fabsf(q[1][i])), __fadd_rn(fabsf(q[2][i]), fabsf(q[3][i])));
            };
            auto bound_of = [&](int i) {
              return 4.0f * fmaxf(fmaxf(fabsf(q[0][i]), fabsf(q[1][i])), fmaxf(fabsf(q[2][i]), fabsf(q[3][i])));
            };
            return add_step<R / 2, off, 64 * h>(acc, sum_of, mag_of, bound_of, test, run, mm, row0, lane, stage);
          };
          float mm0, mm1;
          const bool fast0 = half(std::integral_constant<int, 0>{}, mm0);
          const bool fast1 = half(std::integral_constant<int, 1>{}, mm1);
          run.after_step(fast0 && fast1, fmaxf(mm0, mm1), acc);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * st.stage);  // this warp has read the stage
        st.next();
      }
      // SPEC 12.7's epilogue (every MMA warp runs it; rows past M are not stored)
      const Prob p = *pp;
      if (m0 + 64 * wm < p.M)
        store_tile<BN, OUT_F32, true>(acc, p, m0 + row0, n0 + 2 * (lane & 3), accumulate & 1);
    }
  }
}

}  // namespace
}  // namespace sm100_copies

bool launch_sm100_copies(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s) {
  using namespace sm100_copies;
  if (a.loader != kLoaderTma || a.epilogue != kEpilogueDirect || !launch_copies_maps(a, d, s)) return false;
  const auto* maps = static_cast<const CUtensorMap*>(d.group_maps);
  if (a.out_f32)
    launch_persistent<sm100_copies_kernel<true>, kThreads, kSmem>(a, s, maps);
  else
    launch_persistent<sm100_copies_kernel<false>, kThreads, kSmem>(a, s, maps);
  return true;
}

}  // namespace nvfp4_gemm
