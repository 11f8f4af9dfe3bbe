// NVFP4 grouped GEMM, wgmma version (sm_90a): the kernel template, instantiated by gemm_wgmma_fast.cu and
// gemm_wgmma_exact.cu. Semantics: SPEC 12.2 (exact mode, bit for bit) and 12.4 (fast mode, within the bound).
//
// CTA = 2 warpgroups (256 threads), tile 128 x BN (BN = 128 or 256), K tile 64 = 4 NVFP4 16-blocks.
// Warpgroup w owns rows [64w, 64w+64) of the tile and issues wgmma.m64nBNk16 (f16 x f16 -> f32) with both
// operands read from shared memory. Every thread is both a converter and an MMA issuer (no warp specialisation):
//
//   raw stages (cp.async, kRawStages deep): packed E2M1 bytes of A and B + their swizzled E4M3 scale tiles
//   fp16 buffers (2): the dequantized K tile in wgmma's canonical K-major 128-byte-swizzled layout
//
//   iteration kt:  issue raw load of K tile kt+3 | issue the wgmmas of tile kt (fp16 buffer kt%2, async)
//                  wait for the wgmmas of tile kt-1 | barrier | convert raw tile kt+1 -> fp16 buffer (kt+1)%2
//                  | fence.proxy.async | barrier
//
// so the tensor cores run tile kt while the CUDA cores dequantize tile kt+1.
//
// Dequantization (exact): an E2M1 value times an E4M3 scale has at most 6 significant bits and lies in
// [2^-10, 2688], so it is exact in fp16 and the tensor core's products of two such values are exact.
// Within each 8-element chunk the two operands use the same permutation of the K positions (word k of a chunk
// holds elements k and k+4), which leaves every 16-block dot product unchanged (SPEC 12.2 sums whole blocks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm_nvfp4.cuh"
#include "gemm_wgmma_ops.cuh"

namespace nvfp4_gemm {
namespace wg {

constexpr int kBM = 128;      // rows of A per tile (2 warpgroups x 64)
constexpr int kBK = 64;       // K elements per tile: 4 blocks; one fp16 row of the tile = 128 bytes = one swizzle atom
constexpr int kThreads = 256;
constexpr int kRawStages = 4;

template <int BN>
struct Cfg {
  static constexpr int kABytes = kBM * 128;  // fp16 A tile, 128 B per row
  static constexpr int kBBytes = BN * 128;
  static constexpr int kBuf = kABytes + kBBytes;  // multiple of 1024 (the swizzle atom alignment)
  static constexpr int kRawA = kBM * 32;          // 64 E2M1 codes = 32 bytes per row
  static constexpr int kRawB = BN * 32;
  static constexpr int kRawSA = 512;              // one swizzled 128x4 scale tile (SPEC 8.2)
  static constexpr int kRawSB = BN / 128 * 512;
  static constexpr int kRaw = kRawA + kRawB + kRawSA + kRawSB;
  static constexpr int kSmem = 2 * kBuf + kRawStages * kRaw + 1024;  // + slack to align the base to 1024
  static constexpr int kUnits = (kBM + BN) * 4 / kThreads;          // (row, block) units per thread per K tile
  static_assert((kBM + BN) * 4 % kThreads == 0, "units must divide evenly");
};

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

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, __half2 s) {
  __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), s);
  return *reinterpret_cast<uint32_t*>(&r);
}

// 8 E2M1 codes (nibble j of w = element j) times the fp16 scale -> 4 f16x2 words; word k = {element k, element k+4}.
// |E2M1| in fp16 = 0x0000 0x3800 0x3C00 0x3E00 0x4000 0x4200 0x4400 0x4600: the low byte is always 0, so one
// byte-permute with the selector nibbles [0, code_k, 0, code_k+4] produces the word's two magnitudes directly
// (selector 0 picks the table's 0x00 byte). The signs (bits 4k+3 and 4k+19) move to bits 15 and 31 by one shift.
// lut_lo must hold 0x3E3C3800 (the table's low word, see lut_lo_register()).
__device__ const uint32_t kE2m1F16LutLo[1] = {0x3E3C3800u};
__device__ __forceinline__ uint32_t lut_lo_register() {
  // loaded from memory so ptxas keeps it in one register: a literal is re-materialised before every PRMT
  return __ldg(kE2m1F16LutLo);
}
__device__ __forceinline__ void e2m1x8_to_f16_scaled(uint32_t w, __half2 s, uint32_t lut_lo, uint32_t (&o)[4]) {
  constexpr uint32_t kLutHi = 0x46444240u;
  const uint32_t kLutLo = lut_lo;
  const uint32_t t = prmt(w, 0u, 0x3120u);         // nibbles [n0 n1 n4 n5 | n2 n3 n6 n7]
  const uint32_t ev = (t << 4) & 0x70707070u;      // selectors [0 n0 0 n4 | 0 n2 0 n6] (magnitudes only)
  const uint32_t od = t & 0x70707070u;             // selectors [0 n1 0 n5 | 0 n3 0 n7]
  const uint32_t m0 = prmt(kLutLo, kLutHi, ev);
  const uint32_t m1 = prmt(kLutLo, kLutHi, od);
  const uint32_t m2 = prmt(kLutLo, kLutHi, ev >> 16);
  const uint32_t m3 = prmt(kLutLo, kLutHi, od >> 16);
  o[0] = hmul2_u32(((w << 12) & 0x80008000u) | m0, s);
  o[1] = hmul2_u32(((w << 8) & 0x80008000u) | m1, s);
  o[2] = hmul2_u32(((w << 4) & 0x80008000u) | m2, s);
  o[3] = hmul2_u32((w & 0x80008000u) | m3, s);
}

// One E4M3 byte -> {s, s} in fp16 (exact: every finite E4M3 value is an fp16 number; NaN stays NaN).
__device__ __forceinline__ __half2 e4m3_to_h2(uint32_t byte) {
  __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(byte * 0x101u), __NV_E4M3);
  return *reinterpret_cast<__half2*>(&r);
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
template <int BN>
struct RawLoader {
  using C = Cfg<BN>;
  static constexpr int kChunks16 = (kBM + BN) * 2 / kThreads;  // 16-byte chunks per thread (K % 32 == 0)
  static constexpr int kChunks8 = (kBM + BN) * 4 / kThreads;   // 8-byte chunks per thread (otherwise)
  const uint8_t* row[kChunks8];  // this thread's rows (nullptr: past the problem), at its chunk's byte offset
  const uint8_t* scale;          // this thread's scale chunk at K tile 0 (nullptr: none)
  const uint8_t* safe;           // a valid global address for zero-byte copies
  long long rem0;                // lda minus the chunk's byte offset: bytes left in the row at K tile 0
  int kb4;
  bool vec16;

  __device__ __forceinline__ RawLoader(const Prob& p, int m0, int n0, int KT, long long lda, int tid) {
    kb4 = KT;
    safe = p.sa;
    vec16 = ((lda & 15) == 0) && ((reinterpret_cast<uintptr_t>(p.a) & 15) == 0) &&
            ((reinterpret_cast<uintptr_t>(p.b) & 15) == 0);
    // vec16: chunk i is row (tid >> 1) + 128 i of [A; B], half (tid & 1); else row (tid >> 2) + 64 i, quarter (tid & 3)
    const int off = vec16 ? (tid & 1) * 16 : (tid & 3) * 8;
    rem0 = lda - off;
#pragma unroll
    for (int i = 0; i < kChunks8; ++i) {
      const int r = vec16 ? (tid >> 1) + 128 * i : (tid >> 2) + 64 * i;
      const bool isb = r >= kBM;
      const int grow = (isb ? n0 - kBM : m0) + r;
      const bool ok = (!vec16 || i < kChunks16) && grow < (isb ? p.N : p.M);
      row[i] = ok ? (isb ? p.b : p.a) + static_cast<long long>(grow) * lda + off : nullptr;
    }
    scale = nullptr;
    if (tid < (1 + BN / 128) * 32) {  // a K tile is one 4-block column of 512-byte swizzled tiles (SPEC 8.2)
      const int t = tid >> 5;
      const bool isb = t > 0;
      const int rt = isb ? (n0 >> 7) + t - 1 : (m0 >> 7);
      if (!isb || rt * 128 < p.N) scale = (isb ? p.sb : p.sa) + static_cast<long long>(rt) * kb4 * 512 + (tid & 31) * 16;
    }
  }

  __device__ __forceinline__ void load(uint32_t st, int kt, int tid) const {
    const long long kb = static_cast<long long>(kt) * 32;
    const long long rem = rem0 - kb;
    if (vec16) {
      const int full = static_cast<int>(rem >= 16 ? 16 : (rem > 0 ? rem : 0));
#pragma unroll
      for (int i = 0; i < kChunks16; ++i) {
        const int bytes = row[i] ? full : 0;
        cp_async16(st + tid * 16 + i * 4096, bytes ? row[i] + kb : safe, bytes);
      }
    } else {
      const int full = rem > 0 ? 8 : 0;  // lda % 8 == 0
#pragma unroll
      for (int i = 0; i < kChunks8; ++i) {
        const int bytes = row[i] ? full : 0;
        cp_async8(st + tid * 8 + i * 2048, bytes ? row[i] + kb : safe, bytes);
      }
    }
    if (tid < (1 + BN / 128) * 32) {
      const bool ok = scale != nullptr && kt < kb4;
      cp_async16(st + C::kRawA + C::kRawB + tid * 16, ok ? scale + kt * 512 : safe, ok ? 16 : 0);
    }
  }
};

// Per-thread shared-memory offsets of the dequantization units. Unit i of thread tid is (row q + 64 i of [A; B],
// 16-block b) with q = tid / 4, b = tid % 4: consecutive threads take the 4 blocks of 8 consecutive rows, so the
// 8-byte raw loads, the scale loads and the 16-byte fp16 stores are bank-conflict free. Every offset is a
// per-thread base plus a compile-time constant of i.
struct UnitOffsets {
  uint32_t lut_lo; // the E2M1 -> fp16 table's low word (kE2m1F16LutLo), kept in a register
  uint32_t raw;    // + i * 2048: the unit's 8 raw bytes (A and B raw rows are contiguous, 32 B each)
  uint32_t scale;  // + (i >> 1) * 512 + (i & 1) * 8: its E4M3 scale in the swizzled tiles (SPEC 8.2)
  uint32_t dst;    // + i * 8192: its first fp16 chunk (elements 0-7); the second chunk is at dst ^ 16
};

template <int BN>
__device__ __forceinline__ UnitOffsets unit_offsets(int tid) {
  using C = Cfg<BN>;
  const uint32_t q = tid >> 2, b = tid & 3;
  UnitOffsets o;
  o.lut_lo = lut_lo_register();
  o.raw = tid * 8;
  o.scale = C::kRawA + C::kRawB + (q & 31) * 16 + (q >> 5) * 4 + b;
  // fp16 layout (wgmma K-major, 128-byte swizzle): row r at r*128, its chunk c (elements 8c..8c+7) at
  // ((c ^ (r % 8)) * 16); rows of unit i are q + 64 i, so r % 8 = q % 8 for every i.
  o.dst = q * 128 + (((2 * b) ^ (q & 7)) << 4);
  return o;
}

// Dequantize unit i of this thread: raw stage (shared address raw) -> fp16 buffer (shared address buf).
template <int I>
__device__ __forceinline__ void convert_unit(uint32_t raw, uint32_t buf, const UnitOffsets& o) {
  const uint2 w = lds64(raw + o.raw + I * 2048);
  const uint32_t sbyte = lds8(raw + o.scale + (I >> 1) * 512 + (I & 1) * 8);
  const __half2 s = e4m3_to_h2(sbyte);
  uint32_t lo[4], hi[4];
  e2m1x8_to_f16_scaled(w.x, s, o.lut_lo, lo);
  e2m1x8_to_f16_scaled(w.y, s, o.lut_lo, hi);
  const uint32_t d = buf + o.dst + I * 8192;
  sts128(d, lo);
  sts128(d ^ 16u, hi);
}

template <int BN, int FIRST, int COUNT>
__device__ __forceinline__ void convert_units(uint32_t raw, uint32_t buf, const UnitOffsets& o) {
  if constexpr (COUNT > 0) {
    convert_unit<FIRST>(raw, buf, o);
    convert_units<BN, FIRST + 1, COUNT - 1>(raw, buf, o);
  }
}

template <int R>
__device__ __forceinline__ void wgmma_k16(float (&d)[R], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (R == 128) wgmma_m64n256k16(d, da, db, scale_d);
  else wgmma_m64n128k16(d, da, db, scale_d);
}

// Epilogue (SPEC 12.2 order): y = alpha*acc; y += C; y += bias; cast. Accumulator layout of wgmma m64nN (f32):
// register 4j+2h+e of thread (warp v, lane l) is row 16v + l/4 + 8h, column 8j + 2(l%4) + e.
template <int BN, bool OUT_F32>
__device__ __forceinline__ void store_tile(const float (&acc)[BN / 2], const Prob& p, int row_base, int col_base,
                                           int accumulate) {
  const float alpha = p.alpha;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = col_base + 8 * j;
    if (col >= p.N) continue;  // N is a multiple of 16, so col + 1 < N too
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      if (row >= p.M) continue;
      float y0 = __fmul_rn(alpha, acc[4 * j + 2 * h]);
      float y1 = __fmul_rn(alpha, acc[4 * j + 2 * h + 1]);
      const long long o = static_cast<long long>(row) * p.ldd + col;
      if (OUT_F32) {
        float2* dp = reinterpret_cast<float2*>(static_cast<float*>(p.d) + o);
        if (accumulate) {
          const float2 c = *dp;
          y0 = __fadd_rn(y0, c.x);
          y1 = __fadd_rn(y1, c.y);
        }
        if (p.bias) {
          y0 = __fadd_rn(y0, p.bias[col]);
          y1 = __fadd_rn(y1, p.bias[col + 1]);
        }
        *dp = make_float2(y0, y1);
      } else {
        if (p.bias) {
          y0 = __fadd_rn(y0, p.bias[col]);
          y1 = __fadd_rn(y1, p.bias[col + 1]);
        }
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.d) + o) = __floats2bfloat162_rn(y0, y1);
      }
    }
  }
}

// EXACT = false: one fp32 accumulator over K (tensor-core accumulation, SPEC 12.4); the wgmmas of tile kt stay in
// flight while tile kt+1 is dequantized (wait_group 1).
// EXACT = true (BN = 128): each 16-block partial is one wgmma with scale_d = 0 into a partial fragment (exact: SPEC
// 12.2, all products share sfA*sfB and their sum has at most 20 significant bits), added with __fadd_rn in K order.
// Blocks go in pairs (two partial fragments); half of the next tile's dequantization runs while a pair is in flight.
// The partials are read only after wait_group 0: ptxas serialises every wgmma if registers of an open wgmma
// pipeline are read (C7514), and the two warpgroups overlap each other's additions with their wgmmas.
template <int BN, bool EXACT, bool OUT_F32>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                      int dbg_skip_convert) {
  using C = Cfg<BN>;
  static_assert(!EXACT || BN == 128, "exact mode keeps two partial fragments: BN = 128");
  constexpr int R = BN / 2;  // accumulator registers per thread
  extern __shared__ uint8_t smem_dyn[];
  // 32-bit shared addresses throughout (a generic pointer would turn every access into a 64-bit LD/ST)
  const uint32_t smem = (smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t raw_base = smem + 2 * C::kBuf;
  const int tid = threadIdx.x;
  const int wgi = tid >> 7;  // warpgroup: rows [64 wgi, 64 wgi + 64) of the tile
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int total = prefix[E];
  const UnitOffsets uo = unit_offsets<BN>(tid);
  __shared__ Prob sp;  // the current tile's problem (kept in shared memory: frees ~20 registers)
  __shared__ int s_local;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    if (tid == 0) {
      int lo = 0, hi = E;  // prefix[lo] <= tile < prefix[hi]
      while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (__ldg(prefix + mid) <= tile) lo = mid; else hi = mid;
      }
      sp = probs[lo];
      s_local = tile - __ldg(prefix + lo);
    }
    __syncthreads();  // (the previous tile's epilogue has finished reading sp: it precedes this barrier)
    const Prob& p = sp;
    const int local = s_local;
    const int m0 = (local % p.tiles_m) * kBM;
    const int n0 = (local / p.tiles_m) * BN;
    const int KT = (p.K + kBK - 1) / kBK;
    const RawLoader<BN> loader(p, m0, n0, KT, static_cast<long long>(p.K / 2), tid);
    // Both warpgroups always issue their wgmmas, even one whose 64 rows are all past M (it multiplies zeros):
    // a branch around wgmma makes ptxas serialise every wgmma of the kernel (C7518, "divergent path").

    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < kRawStages - 1; ++s) {
      if (s < KT) loader.load(raw_base + s * C::kRaw, s, tid);
      cp_async_commit();
    }
    cp_async_wait<kRawStages - 2>();
    __syncthreads();  // raw tile 0 visible; every warpgroup is done with the previous tile's buffers
    if (KT > 0) convert_units<BN, 0, C::kUnits>(raw_base, smem, uo);
    fence_proxy_async();
    __syncthreads();

    for (int kt = 0; kt < KT; ++kt) {
      {
        const int nk = kt + kRawStages - 1;  // its stage held raw tile kt-1, converted before the last barrier
        if (nk < KT) loader.load(raw_base + (nk % kRawStages) * C::kRaw, nk, tid);
        cp_async_commit();
      }
      const uint32_t buf = smem + (kt & 1) * C::kBuf;
      const uint32_t a_addr = buf + wgi * 64 * 128;
      const uint32_t b_addr = buf + C::kABytes;
      const bool more = kt + 1 < KT;
      const uint32_t raw_next = raw_base + ((kt + 1) % kRawStages) * C::kRaw;
      const uint32_t buf_next = smem + ((kt + 1) & 1) * C::kBuf;
      if constexpr (!EXACT) {
        fence_regs(acc);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; ++j) wgmma_k16(acc, sw128_desc(a_addr + 32 * j), sw128_desc(b_addr + 32 * j), 1);
        wgmma_commit();
        fence_regs(acc);
        if (more) {
          cp_async_wait<kRawStages - 2>();  // raw tile kt+1 has landed (this thread's copies)
          wgmma_wait<1>();                  // this warpgroup's tile kt-1 wgmmas are done with buffer (kt+1)%2
          __syncthreads();
          if (!dbg_skip_convert) convert_units<BN, 0, C::kUnits>(raw_next, buf_next, uo);
          fence_proxy_async();
          __syncthreads();
        }
      } else {
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
            if (pair == 0) convert_units<BN, 0, C::kUnits / 2>(raw_next, buf_next, uo);
            else convert_units<BN, C::kUnits / 2, C::kUnits / 2>(raw_next, buf_next, uo);
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
    if (m0 + 64 * wgi < p.M)
      store_tile<BN, OUT_F32>(acc, p, m0 + 64 * wgi + 16 * warp + (lane >> 2), n0 + 2 * (lane & 3), accumulate);
    __syncthreads();  // everyone is done with sp before thread 0 overwrites it
  }
  cp_async_wait<0>();
}

template <int BN, bool EXACT, bool OUT_F32>
void launch(const LaunchArgs& a, cudaStream_t s) {
  using C = Cfg<BN>;
  auto k = wgmma_gemm_kernel<BN, EXACT, OUT_F32>;
  static int num_sms = 0;  // per instantiation; read once
  if (num_sms == 0) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
  }
  int grid = num_sms;  // one resident CTA per SM (register and shared-memory bound)
  if (a.grid_upper < grid) grid = a.grid_upper;
  if (grid < 1) grid = 1;
  k<<<grid, kThreads, C::kSmem, s>>>(a.probs, a.prefix, a.E, a.accumulate, a.dbg);
}

}  // namespace wg
}  // namespace nvfp4_gemm
