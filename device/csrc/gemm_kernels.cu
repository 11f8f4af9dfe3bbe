// NVFP4 grouped GEMM kernels for Hopper (sm_90a). Hand-written; see docs/gemm.md.
//
// Block tile 128 x 128, K tile 128 (8 NVFP4 16-blocks), 4 warps of 64 x 64, 4-stage cp.async pipeline of the raw
// packed E2M1 bytes and the swizzled E4M3 scale tiles. Operands are dequantized in registers to fp16 (an E2M1 value
// times an E4M3 scale is exact in fp16: at most 6 significant bits, magnitudes in [2^-10, 2688]) and fed to
// mma.sync.m16n8k16 f16 -> f32. Every MMA k-step covers exactly one 16-block, so
//   * fast mode: one fp32 accumulator over all of K (tensor-core accumulation),
//   * exact mode: each 16-block partial is computed from a zero accumulator (exact: all products share the scale
//     sfA*sfB and are multiples of sfA*sfB/4 below 2^12 of them) and added with __fadd_rn in K order, which is
//     SPEC 12.2's sequential model bit for bit.
// Within one MMA the K positions are permuted identically for A and B (thread q takes the 4 consecutive
// elements 4q..4q+3), which leaves the dot product unchanged and turns each fragment load into one 16-bit read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm_nvfp4.cuh"

namespace nvfp4_gemm {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 128;  // elements
constexpr int kRowBytes = kBK / 2;               // 64 packed bytes per row per K tile
constexpr int kRowStride = kRowBytes + 16;       // smem row stride (bank-conflict free 16-bit fragment reads)
constexpr int kAStage = kBM * kRowStride;        // 10240
constexpr int kBStage = kBN * kRowStride;
constexpr int kScaleStage = 1024;                // two 512-byte swizzled 128x4 tiles
constexpr int kStage = kAStage + kBStage + 2 * kScaleStage;  // 22528
constexpr int kStages = 4;
constexpr int kSmem = kStage * kStages;          // 90112
constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// 4 E2M1 codes (nibbles of x, element 0 lowest) -> two f16x2 registers {e0,e1}, {e2,e3} (unscaled, exact).
// fp16 of |E2M1| {0, .5, 1, 1.5, 2, 3, 4, 6} = 0x0000 0x3800 0x3C00 0x3E00 0x4000 0x4200 0x4400 0x4600:
// the low byte is always 0, so one byte-permute lookup gives the high bytes; the sign is ORed in.
__device__ __forceinline__ void e2m1x4_to_f16(uint32_t x, uint32_t& r0, uint32_t& r1) {
  const uint32_t hi4 = prmt(0x3E3C3800u, 0x46444240u, x & 0x7777u);  // byte j = high byte of |code j|
  const uint32_t z = prmt(x, 0u, 0x1100u);                             // bytes [x0, x0, x1, x1]
  const uint32_t sgn = ((z << 4) & 0x00800080u) | (z & 0x80008000u);   // sign of code j -> bit 8j+7
  const uint32_t h = hi4 | sgn;
  r0 = prmt(h, 0u, 0x1404u);  // {0, h0, 0, h1}
  r1 = prmt(h, 0u, 0x3424u);  // {0, h2, 0, h3}
}

__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, __half2 s) {
  __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), s);
  return *reinterpret_cast<uint32_t*>(&r);
}

// Two E4M3 bytes -> f16x2 (exact: every E4M3 value is an fp16 normal number).
__device__ __forceinline__ __half2 e4m3x2_to_h2(uint32_t two) {
  __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return *reinterpret_cast<__half2*>(&r);
}

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

__device__ __forceinline__ uint32_t lds16(const uint8_t* p) {
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p));
}

// One K tile (kt) of A rows [m0, m0+128) and B rows [n0, n0+128) into a pipeline stage.
__device__ __forceinline__ void load_stage(uint8_t* st, const Prob& p, int m0, int n0, int kt, int kb4,
                                           long long lda, bool vec16, int tid) {
  uint8_t* sA = st;
  uint8_t* sB = st + kAStage;
  uint8_t* sS = st + kAStage + kBStage;
  const long long k0 = static_cast<long long>(kt) * kRowBytes;
  if (vec16) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // 4 x 16B per row, 128 rows, A then B
      const int c = tid + i * kThreads;
      const bool isb = c >= 512;
      const int cc = c & 511;
      const int row = cc >> 2, ch = cc & 3;
      const long long kb = k0 + ch * 16;
      const int grow = (isb ? n0 : m0) + row;
      const int lim = isb ? p.N : p.M;
      const uint8_t* base = isb ? p.b : p.a;
      long long rem = lda - kb;
      int bytes = grow < lim ? static_cast<int>(rem >= 16 ? 16 : (rem > 0 ? rem : 0)) : 0;
      const uint8_t* src = bytes ? base + static_cast<long long>(grow) * lda + kb : base;
      cp_async16((isb ? sB : sA) + row * kRowStride + ch * 16, src, bytes);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < 16; ++i) {  // 8 x 8B per row
      const int c = tid + i * kThreads;
      const bool isb = c >= 1024;
      const int cc = c & 1023;
      const int row = cc >> 3, ch = cc & 7;
      const long long kb = k0 + ch * 8;
      const int grow = (isb ? n0 : m0) + row;
      const int lim = isb ? p.N : p.M;
      const uint8_t* base = isb ? p.b : p.a;
      int bytes = (grow < lim && kb < lda) ? 8 : 0;  // lda and kb are multiples of 8
      const uint8_t* src = bytes ? base + static_cast<long long>(grow) * lda + kb : base;
      cp_async8((isb ? sB : sA) + row * kRowStride + ch * 8, src, bytes);
    }
  }
  {  // scales: 2 x 512 B per operand = 64 x 16B chunks each
    const bool isb = tid >= 64;
    const int j = tid & 63;
    const int c4 = 2 * kt + (j >> 5);
    const int off = (j & 31) * 16;
    const uint8_t* base = isb ? p.sb : p.sa;
    const long long rt = (isb ? n0 : m0) >> 7;
    const bool ok = c4 < kb4;
    const uint8_t* src = ok ? base + (rt * kb4 + c4) * 512 + off : base;
    cp_async16(sS + (isb ? kScaleStage : 0) + (j >> 5) * 512 + off, src, ok ? 16 : 0);
  }
}

template <bool EXACT, bool OUT_F32>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_gemm_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;
  const int r = lane >> 2, q = lane & 3;
  const int total = prefix[E];

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    int lo = 0, hi = E;  // prefix[lo] <= tile < prefix[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (__ldg(prefix + mid) <= tile) lo = mid; else hi = mid;
    }
    const Prob p = probs[lo];
    const int local = tile - __ldg(prefix + lo);
    const int m0 = (local % p.tiles_m) * kBM;
    const int n0 = (local / p.tiles_m) * kBN;
    const int KT = (p.K + kBK - 1) / kBK;
    const int kb4 = (p.K + 63) / 64;
    const long long lda = p.K / 2;
    const bool vec16 = ((lda & 15) == 0) && ((reinterpret_cast<uintptr_t>(p.a) & 15) == 0) &&
                       ((reinterpret_cast<uintptr_t>(p.b) & 15) == 0);

    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < KT) load_stage(smem + s * kStage, p, m0, n0, s, kb4, lda, vec16, tid);
      cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      {
        const int nk = kt + kStages - 1;
        if (nk < KT) load_stage(smem + (nk % kStages) * kStage, p, m0, n0, nk, kb4, lda, vec16, tid);
        cp_async_commit();
      }
      const uint8_t* st = smem + (kt % kStages) * kStage;
      const uint8_t* sA = st + wm * 64 * kRowStride;
      const uint8_t* sB = st + kAStage + wn * 64 * kRowStride;
      const uint8_t* sSA = st + kAStage + kBStage;
      const uint8_t* sSB = sSA + kScaleStage;

#pragma unroll
      for (int h = 0; h < 2; ++h) {  // 4 k-blocks share one 512-byte scale tile
        // Row R = wm*64 + rho + 32j (rho = r + 8i < 32) lives at byte rho*16 + (2wm + j)*4 + kb%4.
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint2 scA[4], scB[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            scA[i] = *reinterpret_cast<const uint2*>(sSA + h * 512 + (r + 8 * i) * 16 + 8 * wm);
            scB[i] = *reinterpret_cast<const uint2*>(sSB + h * 512 + (r + 8 * i) * 16 + 8 * wn);
          }
          const int kb = h * 4 + kk;
          const int boff = kb * 8 + 2 * q;
          uint32_t af[4][4];
#pragma unroll
          for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int idx = 2 * mi + hh;  // row wm*64 + 8*idx + r
              const uint32_t w = (idx >> 2) ? scA[idx & 3].y : scA[idx & 3].x;
              const __half2 s2 = e4m3x2_to_h2(w >> (16 * (kk >> 1)));
              const __half2 s = (kk & 1) ? __high2half2(s2) : __low2half2(s2);
              uint32_t x = lds16(sA + (16 * mi + 8 * hh + r) * kRowStride + boff);
              uint32_t v0, v1;
              e2m1x4_to_f16(x, v0, v1);
              af[mi][hh] = hmul2_u32(v0, s);      // a0 / a1: k 2q..2q+1 (physical 4q..4q+1)
              af[mi][2 + hh] = hmul2_u32(v1, s);  // a2 / a3: k 2q+8..2q+9 (physical 4q+2..4q+3)
            }
          }
#pragma unroll
          for (int ni = 0; ni < 8; ++ni) {
            const uint32_t w = (ni >> 2) ? scB[ni & 3].y : scB[ni & 3].x;
            const __half2 s2 = e4m3x2_to_h2(w >> (16 * (kk >> 1)));
            const __half2 s = (kk & 1) ? __high2half2(s2) : __low2half2(s2);
            uint32_t y = lds16(sB + (8 * ni + r) * kRowStride + boff);
            uint32_t v0, v1;
            e2m1x4_to_f16(y, v0, v1);
            uint32_t bf[2] = {hmul2_u32(v0, s), hmul2_u32(v1, s)};
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
              if constexpr (EXACT) {
                const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float t[4];
                mma16816(t, af[mi], bf, z);
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[mi][ni][c] = __fadd_rn(acc[mi][ni][c], t[c]);
              } else {
                mma16816(acc[mi][ni], af[mi], bf, acc[mi][ni]);
              }
            }
          }
        }
      }
    }
    cp_async_wait<0>();

    // Epilogue (SPEC 12.2 order): y = alpha*acc; y += C; y += bias; cast.
    const float alpha = p.alpha;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = m0 + wm * 64 + mi * 16 + hh * 8 + r;
        if (row >= p.M) continue;
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
          const int col = n0 + wn * 64 + ni * 8 + 2 * q;
          if (col >= p.N) continue;  // N is a multiple of 16, so col + 1 < N too
          float y0 = __fmul_rn(alpha, acc[mi][ni][2 * hh]);
          float y1 = __fmul_rn(alpha, acc[mi][ni][2 * hh + 1]);
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
            __nv_bfloat162* dp = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.d) + o);
            *dp = __floats2bfloat162_rn(y0, y1);
          }
        }
      }
    }
    __syncthreads();  // the next tile's prologue overwrites the stages
  }
}

__global__ void setup_kernel(SetupArgs a) {
  const int E = a.E;
  const int E1 = E + 1;
  for (int g = threadIdx.x; g < E; g += blockDim.x) {
    const long long row0 = a.a_offs[g];
    const long long m = a.a_offs[g + 1] - row0;
    Prob p{};
    int tiles = 0;
    if (a.kind == kWgrad) {
      p.a = a.a_data + a.a_offs[4 * E1 + g];
      p.sa = a.a_scales + a.a_offs[5 * E1 + g];
      p.b = a.b_data + a.b_offs[4 * E1 + g];
      p.sb = a.b_scales + a.b_offs[5 * E1 + g];
      p.M = static_cast<int>(a.a_rows);
      p.N = static_cast<int>(a.b_rows);
      p.K = static_cast<int>((m + 15) / 16 * 16);
      const long long doff = static_cast<long long>(g) * a.a_rows * a.ldd;
      p.d = a.out_f32 ? static_cast<void*>(static_cast<float*>(a.out) + doff)
                      : static_cast<void*>(static_cast<__nv_bfloat16*>(a.out) + doff);
      // an empty expert (K = 0): dW = alpha * 0 (the kernel's zero accumulator), or C left untouched
      if (p.K > 0 || !a.accumulate) tiles = ((p.M + a.tile_m - 1) / a.tile_m) * ((p.N + a.tile_n - 1) / a.tile_n);
    } else {
      p.a = a.a_data + a.a_offs[2 * E1 + g];
      p.sa = a.a_scales + a.a_offs[3 * E1 + g];
      const int bp = a.kind == kFprop ? 2 : 4;
      p.b = a.b_data + a.b_offs[bp * E1 + g];
      p.sb = a.b_scales + a.b_offs[(bp + 1) * E1 + g];
      p.M = static_cast<int>(m);
      p.N = static_cast<int>(a.b_rows);
      p.K = static_cast<int>(a.kc);
      const long long doff = row0 * a.ldd;
      p.d = a.out_f32 ? static_cast<void*>(static_cast<float*>(a.out) + doff)
                      : static_cast<void*>(static_cast<__nv_bfloat16*>(a.out) + doff);
      if (m > 0) tiles = ((p.M + a.tile_m - 1) / a.tile_m) * ((p.N + a.tile_n - 1) / a.tile_n);
    }
    p.bias = a.bias ? a.bias + static_cast<long long>(g) * a.ldd : nullptr;
    p.ldd = a.ldd;
    p.tiles_m = (p.M + a.tile_m - 1) / a.tile_m;
    if (p.tiles_m == 0) p.tiles_m = 1;
    p.alpha = __fmul_rn(__fmul_rn(a.a_amax[g], a.b_amax[g]), a.rcp);  // SPEC 12.1, left to right
    a.probs[g] = p;
    a.prefix[g + 1] = tiles;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    a.prefix[0] = 0;
    for (int g = 0; g < E; ++g) {
      s += a.prefix[g + 1];
      a.prefix[g + 1] = s;
    }
  }
}

template <bool EXACT, bool OUT_F32>
void launch_impl(const LaunchArgs& a, cudaStream_t s) {
  auto k = grouped_gemm_kernel<EXACT, OUT_F32>;
  static int blocks_per_sm = -1;  // per instantiation; device properties are read once
  static int num_sms = 0;
  if (blocks_per_sm < 0) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
    int b = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, kThreads, kSmem);
    blocks_per_sm = b > 0 ? b : 1;
  }
  int grid = num_sms * blocks_per_sm;
  if (a.grid_upper < grid) grid = a.grid_upper;
  if (grid < 1) grid = 1;
  k<<<grid, kThreads, kSmem, s>>>(a.probs, a.prefix, a.E, a.accumulate);
}

}  // namespace

void launch_setup(const SetupArgs& a, cudaStream_t s) { setup_kernel<<<1, 256, 0, s>>>(a); }

void pick_tile(int impl, bool exact, long long cols, int* tile_m, int* tile_n) {
  if (impl == kImplMma) {
    *tile_m = kBM;
    *tile_n = kBN;
    return;
  }
  *tile_m = 128;
  // exact mode keeps two partial fragments (BN = 128); fast mode takes 256 columns unless that wastes a
  // large part of the last column tile (e.g. N = 1408 = 5.5 x 256)
  *tile_n = (!exact && (cols % 256 == 0 || cols >= 4096)) ? 256 : 128;
}

void launch_gemm(const LaunchArgs& a, cudaStream_t s) {
  if (a.impl == kImplWgmma) {
    if (a.exact) launch_wgmma_exact(a, s); else launch_wgmma_fast(a, s);
    return;
  }
  if (a.exact) {
    if (a.out_f32) launch_impl<true, true>(a, s); else launch_impl<true, false>(a, s);
  } else {
    if (a.out_f32) launch_impl<false, true>(a, s); else launch_impl<false, false>(a, s);
  }
}

}  // namespace nvfp4_gemm
