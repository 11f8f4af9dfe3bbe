// NVFP4 grouped GEMM, exact mode (sm_90a; SPEC 12.2 bit for bit): the kernel template instantiated by
// gemm_wgmma_exact.cu, plus the helpers it shares with the fast mode's warp-specialised kernel (gemm_wgmma_ws.cuh):
// cp.async / wgmma / shared-memory wrappers, the raw-tile loader, the 128-byte-swizzle descriptor and the epilogue.
//
// CTA tile 128 x 128, K tile 64 = 4 NVFP4 16-blocks, two warpgroups (128 threads each); warpgroup wm owns rows
// [64 wm, 64 wm + 64) and issues wgmma.m64n128k16 (bf16 x bf16 -> f32) with A and B from shared memory. Every thread
// is both a converter and an MMA issuer (no warp specialisation):
//
//   raw stages (cp.async, kRawStages deep): packed E2M1 bytes of A and B + their swizzled E4M3 scale tiles
//   bf16 buffers (2): the dequantized K tile in wgmma's canonical K-major 128-byte-swizzled layout
//
//   iteration kt:  issue raw load of K tile kt+3 | per pair of 16-blocks: wgmmas into partial fragments, convert
//                  half of raw tile kt+1 -> bf16 buffer (kt+1)%2, wait, add the partials in K order
//                  | fence.proxy.async | barrier
//
// Dequantization (exact): an E2M1 value times an E4M3 scale has at most 6 significant bits and lies in
// [2^-10, 2688], so it is exact in bf16 (times 2^-14, see e2m1x8_to_bf16_scaled) and the tensor core's products of two
// such values are exact.
// Within each 8-element chunk the two operands use the same permutation of the K positions (word k of a chunk
// holds elements k and k+4), which leaves every 16-block dot product unchanged (SPEC 12.2 sums whole blocks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "gemm_nvfp4.cuh"
#include "gemm_wgmma_ops.cuh"
#include "scale_swizzle.cuh"

namespace nvfp4_gemm {
namespace wg {

constexpr int kBK = 64;  // K elements per tile: 4 blocks; one bf16 row of the tile = 128 bytes = one swizzle atom
constexpr int kRawStages = 4;

template <int BM_, int BN_, int WGM_, int WGN_>
struct Shape {
  static constexpr int BM = BM_, BN = BN_, WGM = WGM_, WGN = WGN_;
  static constexpr int kThreads = 128 * WGM * WGN;
  static constexpr int WN = BN / WGN;  // wgmma N of one warpgroup
  static constexpr int R = WN / 2;     // fp32 accumulator registers per thread
  static constexpr int kABytes = BM * 128;  // bf16 A tile, 128 B per row
  static constexpr int kBBytes = BN * 128;
  static constexpr int kBuf = kABytes + kBBytes;  // multiple of 1024 (the swizzle atom alignment)
  static constexpr int kRawA = BM * 32;           // 64 E2M1 codes = 32 bytes per row
  static constexpr int kRawB = BN * 32;
  static constexpr int kSA = BM / 128 * 512;  // swizzled 128x4 scale tiles (SPEC 8.2)
  static constexpr int kSB = BN / 128 * 512;
  static constexpr int kRaw = kRawA + kRawB + kSA + kSB;
  static constexpr int kSmem = 2 * kBuf + kRawStages * kRaw + 1024;  // + slack to align the base to 1024
  static constexpr int kRPI = kThreads / 4;                          // rows per conversion step (4 blocks per row)
  static constexpr int kUnits = (BM + BN) / kRPI;                    // (row, block) units per thread per K tile
  static constexpr int kChunks16 = ((BM + BN) * 2 + kThreads - 1) / kThreads;
  static constexpr int kChunks8 = (BM + BN) * 4 / kThreads;
  static_assert(BM == 64 * WGM && BM % 128 == 0 && (WN == 128 || WN == 256) && BN % 128 == 0, "tile shape");
  static_assert((BM + BN) % kRPI == 0 && BM % kRPI == 0, "units are whole and all-A or all-B");
  static_assert((BM + BN) * 4 % kThreads == 0, "8-byte chunks divide evenly");
};
using ShapeExact = Shape<128, 128, 2, 1>;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes (our st.shared) must be made visible to the async proxy (wgmma) before it reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pin accumulator registers around wgmma issue/wait so the compiler cannot move their uses across them.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma shared-memory matrix descriptor, K-major operand with the 128-byte swizzle: start address >> 4 (bits 0-13),
// leading byte offset (unused for swizzled K-major layouts; 1), stride byte offset = 1024 B between 8-row groups
// (bits 32-45), base offset 0 (atoms are 1024-byte aligned), layout type 1 = 128B swizzle (bits 62-63).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, uint32_t s) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&s));
  return *reinterpret_cast<uint32_t*>(&r);
}

// 8 E2M1 codes (nibble j of w = element j) times the scale -> 4 bf16x2 words; word k holds {element k, element k+4}.
// Shifting the nibble so that its 3 magnitude bits land on bf16 bits 6-8 (exponent bits 7-8, mantissa bit 6) gives
// exactly |E2M1| * 2^-126 (the code 0.5 becomes the subnormal 2^-127); the sign bit lands on bit 9 and is moved to
// bit 15 by adding 63 times itself. One bf16 multiply by s = sf * 2^112 (e4m3_to_bf16x2_scaled) is exact: the
// product E2M1 * sf * 2^-14 has at most 6 significant bits and lies in [2^-24, 2688 * 2^-14], far inside bf16's
// normal range. So every nonzero operand the tensor core sees is a NORMAL bf16 number. That matters (SPEC 12.6):
// wgmma aligns the addends of a step to the largest exponent-field sum, and counts a subnormal operand at the
// format's minimum normal exponent; with fp16 operands (min normal 2^-14) a subnormal such as 2^-22 made the step
// truncate the other addends up to 2^10 times too coarsely (the fast mode's old bound violations).
// The tensor core then sums exact products of (a 2^-14)(b 2^-14); the epilogue multiplies the fp32 accumulator by
// 2^28 (exact: no fp32 underflow, every nonzero term is at least 2^-48) before alpha, so results are unchanged.
// Cost per 8 codes: 9 integer-logic ops (8 LOP3, 1 SHF), 7 IMAD, 4 HMUL2.
__device__ __forceinline__ uint32_t e2m1_pair_bf16_raw(uint32_t a) {  // nibbles at bits 6-9 and 22-25
  return (a & 0x03C003C0u) + 63u * (a & 0x02000200u);
}
__device__ __forceinline__ void e2m1x8_to_bf16_scaled(uint32_t w, uint32_t s, uint32_t (&o)[4]) {
  o[0] = hmul2_u32(e2m1_pair_bf16_raw(w << 6), s);
  o[1] = hmul2_u32(e2m1_pair_bf16_raw(w << 2), s);
  o[2] = hmul2_u32(e2m1_pair_bf16_raw(w >> 2), s);
  o[3] = hmul2_u32(e2m1_pair_bf16_raw(w >> 6), s);
}
constexpr float kOperandScaleUndo = 268435456.0f;  // 2^28 = (2^14)^2, see e2m1x8_to_bf16_scaled

// E4M3 scales -> {s, s} with s = sf * 2^112 in bf16, exact: the hardware conversion gives sf in fp16 (every E4M3
// value is an fp16 number), fp16 -> fp32 and * 2^112 are exact (448 * 2^112 < 2^128), and the bf16 pack is exact
// (sf has 4 significant bits). Zero keeps its sign and NaN stays NaN. About 3.5 instructions per scale, none of
// them on the integer-logic pipe that the E2M1 decode keeps busy.
constexpr float kScaleToBf16 = 0x1p112f;
__device__ __forceinline__ uint32_t scale_to_bf16x2(float sf) {  // {sf * 2^112, sf * 2^112}
  __nv_bfloat162 r = __floats2bfloat162_rn(__fmul_rn(sf, kScaleToBf16), __fmul_rn(sf, kScaleToBf16));
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two_bytes) {  // bytes 0 and 1 of two_bytes
  __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFFu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<__half2*>(&r));
}
__device__ __forceinline__ uint32_t e4m3_to_bf16x2_scaled(uint32_t byte) {
  return scale_to_bf16x2(e4m3x2_to_float2(byte).x);
}
__device__ __forceinline__ uint2 lds64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds8(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

// Raw K tiles of A rows [m0, m0+128) and B rows [n0, n0+BN) into raw stages. Stage layout: raw A rows (32 B each)
// then raw B rows, so copy chunk c of a thread lands at stage + c * chunk bytes; then the A scale tile and the B
// scale tiles (512 B each). Rows past the problem, bytes past K and scale tiles past the plane are zero-filled
// (src-size 0): a zero code times a zero scale contributes +0, and no byte of a neighbouring group or past an
// allocation is read. Row pointers are computed once per tile; a K tile only adds its byte offset.
template <class S>
struct RawLoader {
  const uint8_t* src[S::kChunks8];  // chunk i of this thread at K tile 0 (a valid address even when it has no data)
  int kt_end[S::kChunks8];          // K tiles with data for chunk i: bytes kt*32 + off < lda (0: row past the problem)
  const uint8_t* scale;             // this thread's 16 bytes of the scale tiles at K tile 0 (threads < kScaleThreads)
  int scale_end;                    // K tiles with a scale chunk (0: tile past the plane)
  bool vec16;
  static constexpr int kScaleThreads = (S::kSA + S::kSB) / 16;

  RawLoader() = default;
  __device__ __forceinline__ RawLoader(const Prob& p, int m0, int n0, int KT, long long lda, int tid) {
    vec16 = ((lda & 15) == 0) && ((reinterpret_cast<uintptr_t>(p.a) & 15) == 0) &&
            ((reinterpret_cast<uintptr_t>(p.b) & 15) == 0);
    // chunk c = tid + kThreads i of [A rows; B rows]: vec16: row c / 2, half c % 2; else row c / 4, quarter c % 4.
    // lda is a multiple of the chunk size, so a chunk lies wholly inside its row or wholly past it.
    const int off = vec16 ? (tid & 1) * 16 : (tid & 3) * 8;
#pragma unroll
    for (int i = 0; i < S::kChunks8; ++i) {
      const int c = tid + S::kThreads * i;
      const int r = vec16 ? c >> 1 : c >> 2;
      const bool isb = r >= S::BM;
      const int grow = isb ? n0 + r - S::BM : m0 + r;
      const bool ok = (vec16 ? (i < S::kChunks16 && c < (S::BM + S::BN) * 2) : true) && grow < (isb ? p.N : p.M);
      src[i] = ok ? (isb ? p.b : p.a) + static_cast<long long>(grow) * lda + off : p.sa;
      kt_end[i] = ok ? static_cast<int>((lda - off + kBK / 2 - 1) / (kBK / 2)) : 0;
    }
    scale = p.sa;
    scale_end = 0;
    if (tid < kScaleThreads) {  // a K tile is one 4-block column of 512-byte swizzled tiles (SPEC 8.2)
      const int t = tid >> 5;
      const int na = S::kSA / 512;
      const bool isb = t >= na;
      const int rt = isb ? (n0 >> 7) + t - na : (m0 >> 7) + t;
      if (rt * 128 < (isb ? p.N : p.M)) {  // a 256-row A tile may reach past the group's scale rows
        scale = (isb ? p.sb : p.sa) + static_cast<long long>(rt) * KT * 512 + (tid & 31) * 16;
        scale_end = KT;
      }
    }
  }

  // Copies of K tile kt into stage st: one compare, one address add and the cp.async per chunk.
  __device__ __forceinline__ void load(uint32_t st, int kt, int tid) const {
    const int kb = kt * (kBK / 2);
    if (vec16) {
#pragma unroll
      for (int i = 0; i < S::kChunks16; ++i) {
        const int c = tid + S::kThreads * i;
        if (c < (S::BM + S::BN) * 2) {
          const bool ok = kt < kt_end[i];
          cp_async16(st + c * 16, ok ? src[i] + kb : src[i], ok ? 16 : 0);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < S::kChunks8; ++i) {
        const bool ok = kt < kt_end[i];
        cp_async8(st + (tid + S::kThreads * i) * 8, ok ? src[i] + kb : src[i], ok ? 8 : 0);
      }
    }
    if (tid < kScaleThreads) {
      const bool ok = kt < scale_end;
      cp_async16(st + S::kRawA + S::kRawB + tid * 16, ok ? scale + kt * 512 : scale, ok ? 16 : 0);
    }
  }
};

// The group of output tile `tile` (binary search in the tile prefix sum) and the tile's index inside the group.
__device__ __forceinline__ int find_group(const int* __restrict__ prefix, int E, int tile, int* local) {
  int lo = 0, hi = E;  // prefix[lo] <= tile < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(prefix + mid) <= tile) lo = mid; else hi = mid;
  }
  *local = tile - __ldg(prefix + lo);
  return lo;
}

// Per-thread shared-memory offsets of the dequantization units. Unit i of thread tid is (row q + kRPI i of
// [A rows; B rows], 16-block b) with q = tid / 4, b = tid % 4: consecutive threads take the 4 blocks of 8 consecutive
// rows, so the 8-byte raw loads, the scale loads and the 16-byte bf16 stores are bank-conflict free. Every offset is
// a per-thread base plus a compile-time constant of i (tiles are whole 128-row scale tiles: BM % 128 == 0).
struct UnitOffsets {
  uint32_t raw;     // + i * kRPI * 32: the unit's 8 raw bytes (A and B raw rows are contiguous, 32 B each)
  uint32_t scale;   // + unit_scale_offset(i): its E4M3 scale in the swizzled tiles (SPEC 8.2)
  uint32_t dst;     // + i * kRPI * 128: its first bf16 chunk (elements 0-7); the second chunk is at dst ^ 16
};

template <class S>
__device__ __forceinline__ UnitOffsets unit_offsets(int tid) {
  const uint32_t q = tid >> 2, b = tid & 3;
  UnitOffsets o;
  o.raw = tid * 8;
  o.scale = S::kRawA + S::kRawB + nvfp4::swizzle_in_tile(q, b);  // q < 128
  // bf16 layout (wgmma K-major, 128-byte swizzle): row r at r*128, its chunk c (elements 8c..8c+7) at
  // ((c ^ (r % 8)) * 16); rows of unit i are q + kRPI i, so r % 8 = q % 8 for every i.
  o.dst = q * 128 + (((2 * b) ^ (q & 7)) << 4);
  return o;
}

// Scale-tile offset of unit I's first row (a multiple of 32 within its 128-row tile; q adds the rest).
template <class S, int I>
__device__ __forceinline__ constexpr uint32_t unit_scale_offset() {
  constexpr int r = S::kRPI * I;
  constexpr bool isb = r >= S::BM;
  constexpr int rr = isb ? r - S::BM : r;
  return (isb ? S::kSA : 0) + nvfp4::swizzle_offset<int>(rr, 0, 1);
}

// Dequantize unit I of this thread: raw stage (shared address raw) -> bf16 buffer (shared address buf).
template <class S, int I>
__device__ __forceinline__ void convert_unit(uint32_t raw, uint32_t buf, const UnitOffsets& o) {
  const uint2 w = lds64(raw + o.raw + I * S::kRPI * 32);
  const uint32_t sbyte = lds8(raw + o.scale + unit_scale_offset<S, I>());
  const uint32_t s = e4m3_to_bf16x2_scaled(sbyte);
  uint32_t lo[4], hi[4];
  e2m1x8_to_bf16_scaled(w.x, s, lo);
  e2m1x8_to_bf16_scaled(w.y, s, hi);
  const uint32_t d = buf + o.dst + I * S::kRPI * 128;
  sts128(d, lo);
  sts128(d ^ 16u, hi);
}

template <class S, int FIRST, int COUNT>
__device__ __forceinline__ void convert_units(uint32_t raw, uint32_t buf, const UnitOffsets& o) {
  if constexpr (COUNT > 0) {
    convert_unit<S, FIRST>(raw, buf, o);
    convert_units<S, FIRST + 1, COUNT - 1>(raw, buf, o);
  }
}

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
  return v;
}

template <int N>
__device__ __forceinline__ void fence_uregs(uint32_t (&a)[4][N]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
}

template <int R>
__device__ __forceinline__ void wgmma_k16(float (&d)[R], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (R == 128) wgmma_m64n256k16(d, da, db, scale_d);
  else wgmma_m64n128k16(d, da, db, scale_d);
}

// Epilogue (SPEC 12.2 order): y = alpha*acc; y += C; y += bias; cast. Accumulator layout of wgmma m64nN (f32):
// register 4j+2h+e of thread (warp v, lane l) is row 16v + l/4 + 8h, column 8j + 2(l%4) + e.
// UNDO: multiply the accumulator by 2^28 first (the bf16 decode's operands are v * 2^-14; the fp16 decode of
// gemm_decode_f16.cuh presents v itself).
// PAIRS: N and the row pitch are even (always, except fprop with an odd number of weight rows per group), so each
// column pair (col, col + 1) exists whenever col does and is stored as one aligned 8- / 4-byte word (the base is
// 16-byte aligned); otherwise every element is stored alone and column col + 1 is checked against N.
template <int WN, bool OUT_F32, bool UNDO, bool PAIRS>
__device__ __forceinline__ void store_tile_impl(const float (&acc)[WN / 2], const Prob& p, int row_base, int col_base,
                                                int accumulate) {
  const float alpha = p.alpha;
#pragma unroll
  for (int j = 0; j < WN / 8; ++j) {
    const int col = col_base + 8 * j;
    if (col >= p.N) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      if (row >= p.M) continue;
      const float a0 = acc[4 * j + 2 * h], a1 = acc[4 * j + 2 * h + 1];
      float y0 = __fmul_rn(alpha, UNDO ? __fmul_rn(a0, kOperandScaleUndo) : a0);  // exact rescale, then alpha
      float y1 = __fmul_rn(alpha, UNDO ? __fmul_rn(a1, kOperandScaleUndo) : a1);
      const long long o = static_cast<long long>(row) * p.ldd + col;
      const bool second = PAIRS || col + 1 < p.N;
      if (OUT_F32) {
        float* dp = static_cast<float*>(p.d) + o;
        if (accumulate) {
          if constexpr (PAIRS) {
            const float2 c = *reinterpret_cast<const float2*>(dp);
            y0 = __fadd_rn(y0, c.x);
            y1 = __fadd_rn(y1, c.y);
          } else {
            y0 = __fadd_rn(y0, dp[0]);
            if (second) y1 = __fadd_rn(y1, dp[1]);
          }
        }
        if (p.bias) {
          y0 = __fadd_rn(y0, p.bias[col]);
          if (second) y1 = __fadd_rn(y1, p.bias[col + 1]);
        }
        if constexpr (PAIRS) {
          *reinterpret_cast<float2*>(dp) = make_float2(y0, y1);
        } else {
          dp[0] = y0;
          if (second) dp[1] = y1;
        }
      } else {
        __nv_bfloat16* dp = static_cast<__nv_bfloat16*>(p.d) + o;
        if (p.bias) {
          y0 = __fadd_rn(y0, p.bias[col]);
          if (second) y1 = __fadd_rn(y1, p.bias[col + 1]);
        }
        if constexpr (PAIRS) {
          *reinterpret_cast<__nv_bfloat162*>(dp) = __floats2bfloat162_rn(y0, y1);
        } else {
          dp[0] = __float2bfloat16_rn(y0);
          if (second) dp[1] = __float2bfloat16_rn(y1);
        }
      }
    }
  }
}

template <int WN, bool OUT_F32, bool UNDO = true>
__device__ __forceinline__ void store_tile(const float (&acc)[WN / 2], const Prob& p, int row_base, int col_base,
                                           int accumulate) {
  if (((p.N | p.ldd) & 1) == 0)
    store_tile_impl<WN, OUT_F32, UNDO, true>(acc, p, row_base, col_base, accumulate);
  else
    store_tile_impl<WN, OUT_F32, UNDO, false>(acc, p, row_base, col_base, accumulate);
}

// Exact mode (BN = 128): each 16-block partial is one wgmma with scale_d = 0 into a partial fragment (exact: SPEC
// 12.2, all products share sfA*sfB and their sum has at most 20 significant bits), added with __fadd_rn in K order.
// Blocks go in pairs (two partial fragments); half of the next tile's dequantization runs while a pair is in flight.
// The partials are read only after wait_group 0: ptxas serialises every wgmma if registers of an open wgmma
// pipeline are read (C7514), and the two warpgroups overlap each other's additions with their wgmmas.
template <class S, bool OUT_F32>
__global__ void __launch_bounds__(S::kThreads, 1)
    exact_gemm_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate) {
  static_assert(S::WGN == 1 && S::WN == 128, "exact mode keeps two partial fragments: WN = 128");
  constexpr int R = S::R;
  extern __shared__ uint8_t smem_dyn[];
  // 32-bit shared addresses throughout (a generic pointer would turn every access into a 64-bit LD/ST)
  const uint32_t smem = (smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t raw_base = smem + 2 * S::kBuf;
  const int tid = threadIdx.x;
  const int wgi = tid >> 7;
  const int wm = wgi % S::WGM, wn = wgi / S::WGM;  // this warpgroup's rows [64 wm, +64), columns [WN wn, +WN)
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int total = prefix[E];
  const UnitOffsets uo = unit_offsets<S>(tid);
  __shared__ Prob sp;  // the current tile's problem (kept in shared memory: frees ~20 registers)
  __shared__ int s_local;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    if (tid == 0) {
      int local;
      sp = probs[find_group(prefix, E, tile, &local)];
      s_local = local;
    }
    __syncthreads();  // (the previous tile's epilogue has finished reading sp: it precedes this barrier)
    const Prob& p = sp;
    const int local = s_local;
    const int m0 = (local % p.tiles_m) * S::BM;
    const int n0 = (local / p.tiles_m) * S::BN;
    const int KT = (p.K + kBK - 1) / kBK;
    const RawLoader<S> loader(p, m0, n0, KT, static_cast<long long>(p.K / 2), tid);
    // Every warpgroup always issues its wgmmas, even one whose 64 rows are all past M (it multiplies zeros):
    // a branch around wgmma makes ptxas serialise every wgmma of the kernel (C7518, "divergent path").

    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < kRawStages - 1; ++s) {
      if (s < KT) loader.load(raw_base + s * S::kRaw, s, tid);
      cp_async_commit();
    }
    cp_async_wait<kRawStages - 2>();
    __syncthreads();  // raw tile 0 visible; every warpgroup is done with the previous tile's buffers

    {
      if (KT > 0) convert_units<S, 0, S::kUnits>(raw_base, smem, uo);
      fence_proxy_async();
      __syncthreads();
      for (int kt = 0; kt < KT; ++kt) {
        {
          const int nk = kt + kRawStages - 1;
          if (nk < KT) loader.load(raw_base + (nk % kRawStages) * S::kRaw, nk, tid);
          cp_async_commit();
        }
        const uint32_t buf = smem + (kt & 1) * S::kBuf;
        const uint32_t a_addr = buf + wm * 64 * 128;
        const uint32_t b_addr = buf + S::kABytes + wn * S::WN * 128;
        const bool more = kt + 1 < KT;
        const uint32_t raw_next = raw_base + ((kt + 1) % kRawStages) * S::kRaw;
        const uint32_t buf_next = smem + ((kt + 1) & 1) * S::kBuf;
        float part0[R], part1[R];
        if (more) {
          cp_async_wait<kRawStages - 2>();
          __syncthreads();  // raw tile kt+1 visible; both warpgroups finished tile kt-1 (wait_group 0 below)
        }
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          wgmma_fence();
          wgmma_k16(part0, sw128_desc(a_addr + 64 * pair), sw128_desc(b_addr + 64 * pair), 0);
          wgmma_k16(part1, sw128_desc(a_addr + 64 * pair + 32), sw128_desc(b_addr + 64 * pair + 32), 0);
          wgmma_commit();
          fence_regs(part0);
          fence_regs(part1);
          if (more) {
            if (pair == 0) convert_units<S, 0, S::kUnits / 2>(raw_next, buf_next, uo);
            else convert_units<S, S::kUnits / 2, S::kUnits - S::kUnits / 2>(raw_next, buf_next, uo);
          }
          wgmma_wait<0>();
          fence_regs(part0);
          fence_regs(part1);
#pragma unroll
          for (int i = 0; i < R; ++i) acc[i] = __fadd_rn(__fadd_rn(acc[i], part0[i]), part1[i]);
        }
        if (more) {
          fence_proxy_async();
          __syncthreads();
        }
      }
    }
    wgmma_wait<0>();  // (no-op when nothing is in flight)
    fence_regs(acc);
    if (m0 + 64 * wm < p.M)
      store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2), n0 + wn * S::WN + 2 * (lane & 3),
                                 accumulate);
    __syncthreads();  // everyone is done with sp before thread 0 overwrites it
  }
  cp_async_wait<0>();
}

// Launch configuration of `clusters` clusters of `cluster` CTAs along x (attr: storage for the one attribute).
inline cudaLaunchConfig_t cluster_launch_config(int clusters, int cluster, int threads, int smem, cudaStream_t s,
                                                cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster * clusters, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Launches KERNEL(probs, prefix, E, accumulate) with one persistent CTA per SM (the kernels are register- and
// shared-memory bound to one CTA per SM), in clusters of CLUSTER CTAs along x, at most a.grid_upper clusters (the
// tile list's unit is the cluster tile); the clusters stride over the tile list. The grid is the number of clusters
// that can be resident at once, so no cluster waits for another to finish. The shared-memory attribute and that
// number are set up once per kernel and device (devices of one process may differ; ordinals >= kMaxDevices are
// set up at every launch).
constexpr int kMaxDevices = 64;
template <auto KERNEL, int kThreads, int kSmem, int CLUSTER = 1>
void launch_persistent(const LaunchArgs& a, cudaStream_t s) {
  static std::atomic<int> resident_by_device[kMaxDevices];  // clusters (CTAs when CLUSTER == 1); 0 = not set up
  int dev = 0;
  cudaGetDevice(&dev);
  int resident = dev < kMaxDevices ? resident_by_device[dev].load(std::memory_order_relaxed) : 0;
  if (resident == 0) {
    cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    resident = sms / CLUSTER;
    if constexpr (CLUSTER > 1) {  // SMs of a GPC that cannot pair up stay idle
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = cluster_launch_config(resident, CLUSTER, kThreads, kSmem, s, &attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, KERNEL, &cfg) == cudaSuccess && clusters > 0 &&
          clusters < resident)
        resident = clusters;
    }
    if (resident < 1) resident = 1;
    if (dev < kMaxDevices) resident_by_device[dev].store(resident, std::memory_order_relaxed);
  }
  int grid = resident;
  if (a.grid_upper < grid) grid = a.grid_upper;
  if (grid < 1) grid = 1;
  if constexpr (CLUSTER == 1) {
    KERNEL<<<grid, kThreads, kSmem, s>>>(a.probs, a.prefix, a.E, a.accumulate);
  } else {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch_config(grid, CLUSTER, kThreads, kSmem, s, &attr);
    cudaLaunchKernelEx(&cfg, KERNEL, a.probs, a.prefix, a.E, a.accumulate);
  }
}

template <class S, bool OUT_F32>
void launch(const LaunchArgs& a, cudaStream_t s) {
  launch_persistent<exact_gemm_kernel<S, OUT_F32>, S::kThreads, S::kSmem>(a, s);
}

}  // namespace wg
}  // namespace nvfp4_gemm
