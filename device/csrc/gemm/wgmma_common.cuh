// NVFP4 grouped GEMM (sm_90a): helpers shared by the warp-specialised kernels of gemm_wgmma_ws.cuh (fast mode, SPEC
// 12.4 / 12.6, and exact mode, SPEC 12.2): cp.async / wgmma / shared-memory wrappers, the raw-tile loader, the tile
// list lookup, the 128-byte-swizzle descriptor, the direct-store epilogue and the persistent launcher.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/problem.h"
#include "common/pdl.cuh"
#include "gemm/wgmma_ops.cuh"
#include "common/per_device.h"
#include "common/swizzle.cuh"

namespace nvfp4_gemm {
namespace wg {

constexpr int kBK = 64;  // K elements per tile: 4 blocks; one fp16 row of the tile = 128 bytes = one swizzle atom

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
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
// Low word (sw128_desc_lo, per stage address) and high word (kSw128DescHi, constant).
constexpr uint32_t kSw128DescHi = (1024u >> 4) | (1u << 30);  // bits 32-63: stride byte offset, layout type
__device__ __forceinline__ uint32_t sw128_desc_lo(uint32_t saddr) { return ((saddr & 0x3FFFFu) >> 4) | (1u << 16); }
// The descriptor of k16 block j (0..3) of a 1024-byte aligned fp16 stage whose base has the low word `stage_lo`: the
// block's rows start 32 j bytes further, i.e. the address field grows by 2 j, and since the base's field ends in 6
// zero bits the addition never carries out of it (one add per wgmma instead of a mask and shift).
__device__ __forceinline__ uint64_t sw128_desc_block(uint32_t stage_lo, int j) {
  return (static_cast<uint64_t>(kSw128DescHi) << 32) | (stage_lo + 2u * static_cast<uint32_t>(j));
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
// scale tiles (512 B each). Rows past the problem (A: M; B: n_end <= N, which a half tile sets to the end of its
// 128 rows), bytes past K and scale tiles past the plane or past n_end are zero-filled (src-size 0): a zero code
// times a zero scale contributes +0, and no byte of a neighbouring group or past an allocation is read. Row pointers
// are computed once per tile; a K tile only adds its byte offset.
template <class S>
struct RawLoader {
  const uint8_t* src[S::kChunks8];  // chunk i of this thread at K tile 0 (a valid address even when it has no data)
  int kt_end[S::kChunks8];          // K tiles with data for chunk i: bytes kt*32 + off < lda (0: row past the problem)
  const uint8_t* scale;             // this thread's 16 bytes of the scale tiles at K tile 0 (threads < kScaleThreads)
  int scale_end;                    // K tiles with a scale chunk (0: tile past the plane)
  bool vec16;
  static constexpr int kScaleThreads = (S::kSA + S::kSB) / 16;

  RawLoader() = default;
  __device__ __forceinline__ RawLoader(const Prob& p, int m0, int n0, int n_end, int KT, long long lda, int tid) {
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
      const bool ok = (vec16 ? (i < S::kChunks16 && c < (S::BM + S::BN) * 2) : true) && grow < (isb ? n_end : p.M);
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
      if (rt * 128 < (isb ? n_end : p.M)) {  // a 256-row A tile may reach past the group's scale rows
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

// The group of output tile `tile` (binary search in the tile prefix sum, entry i read by at(i)) and the tile's index
// inside the group.
template <class At>
__device__ __forceinline__ int search_prefix(At&& at, int E, int tile, int* local) {
  int lo = 0, hi = E;  // prefix[lo] <= tile < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (at(mid) <= tile) lo = mid; else hi = mid;
  }
  *local = tile - at(lo);
  return lo;
}
// The same over the prefix in global memory.
__device__ __forceinline__ int find_group(const int* __restrict__ prefix, int E, int tile, int* local) {
  return search_prefix([prefix](int i) { return __ldg(prefix + i); }, E, tile, local);
}

// The same search by a whole warp (all 32 lanes active, the same tile in each; stop 48): the group is the number of
// entries prefix[1..E-1] that are <= tile (prefix is non-decreasing from prefix[0] = 0 and tile < prefix[E], so that
// count is search_prefix's lo, empty groups included). Lane l tests entries 1 + l, 33 + l, ...: the loads are
// independent and issue together, where the binary search waits for ~log2(E) dependent loads (the second most
// sampled stall line of fast E64 wgrad, 4 K steps per tile; +6% there, docs/gemm.md stop 48). E past
// kWarpSearchGroups takes find_group.
constexpr int kWarpSearchChunks = 8;
constexpr int kWarpSearchGroups = 32 * kWarpSearchChunks + 1;
// The count itself (E <= kWarpSearchGroups only): the group of `tile`, without its place in the group.
__device__ __forceinline__ int count_group_warp(const int* __restrict__ prefix, int E, int tile) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int entry[kWarpSearchChunks];
#pragma unroll
  for (int c = 0; c < kWarpSearchChunks; ++c) {
    const int i = 1 + 32 * c + lane;
    entry[c] = i < E ? __ldg(prefix + i) : 0x7fffffff;
  }
  int group = 0;
#pragma unroll
  for (int c = 0; c < kWarpSearchChunks; ++c) group += __popc(__ballot_sync(0xffffffffu, entry[c] <= tile));
  return group;
}
__device__ __forceinline__ int find_group_warp(const int* __restrict__ prefix, int E, int tile, int* local) {
  if (E > kWarpSearchGroups) return find_group(prefix, E, tile, local);
  const int group = count_group_warp(prefix, E, tile);
  *local = tile - __ldg(prefix + group);
  return group;
}

// The group table's prefix in shared memory (stop 47; the exact kernel over fp16 copies, gemm_exact_f16.cuh): its MMA
// warps look up every tile's group, and ~log2(E) dependent global loads per tile cost E64 wgrad (4 K steps per tile)
// about a sixth of its MMA warp time (ncu).
// A kernel reserves prefix_table_bytes(CAP) of shared memory for up to CAP groups (prefix_cap_for: as many as its
// spare shared memory holds, at most kMaxCachedGroups); stage_prefix copies prefix[0..E] there when E <= CAP (before
// the CTA barrier that publishes it), and find_group_cached then searches it there (shared-memory latencies), else
// falls back to find_group_warp (so it too needs a whole warp).
constexpr int kMaxCachedGroups = 512;
constexpr int prefix_table_bytes(int cap) { return cap == 0 ? 0 : ((cap + 1) * 4 + 15) / 16 * 16; }
constexpr int prefix_cap_for(int spare_bytes) {
  return spare_bytes < 64 ? 0 : (spare_bytes / 4 - 4 < kMaxCachedGroups ? spare_bytes / 4 - 4 : kMaxCachedGroups);
}
template <int CAP>
__device__ __forceinline__ void stage_prefix(uint32_t table, const int* __restrict__ prefix, int E, int tid,
                                             int threads) {
  if constexpr (CAP > 0) {
    if (E > CAP) return;
    for (int i = tid; i <= E; i += threads)
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(table + 4 * i), "r"(__ldg(prefix + i)) : "memory");
  }
}
template <int CAP>
__device__ __forceinline__ int find_group_cached(const int* __restrict__ prefix, uint32_t table, int E, int tile,
                                                 int* local) {
  if constexpr (CAP == 0) {
    return find_group_warp(prefix, E, tile, local);
  } else {
    if (E > CAP) return find_group_warp(prefix, E, tile, local);
    return search_prefix(
        [table](int i) {
          int v;
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(table + 4 * i) : "memory");
          return v;
        },
        E, tile, local);
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

// Epilogue (SPEC 12.2 order): y = alpha*acc; y += C; y += bias; cast. Accumulator layout of wgmma m64nN (f32):
// register 4j+2h+e of thread (warp v, lane l) is row 16v + l/4 + 8h, column 8j + 2(l%4) + e.
// PAIRS: N and the row pitch are even (always, except fprop with an odd number of weight rows per group), so each
// column pair (col, col + 1) exists whenever col does and is stored as one aligned 8- / 4-byte word (the base is
// 16-byte aligned); otherwise every element is stored alone and column col + 1 is checked against N.
template <int WN, bool OUT_F32, bool PAIRS>
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
      float y0 = __fmul_rn(alpha, a0);
      float y1 = __fmul_rn(alpha, a1);
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

template <int WN, bool OUT_F32>
__device__ __forceinline__ void store_tile(const float (&acc)[WN / 2], const Prob& p, int row_base, int col_base,
                                           int accumulate) {
  if (((p.N | p.ldd) & 1) == 0)
    store_tile_impl<WN, OUT_F32, true>(acc, p, row_base, col_base, accumulate);
  else
    store_tile_impl<WN, OUT_F32, false>(acc, p, row_base, col_base, accumulate);
}

// Launch configuration of `clusters` clusters of `cluster` CTAs along x (attr: storage for two attributes: the
// cluster shape, then, when `chained` and NVFP4_GEMM_PDL allows, programmatic stream serialization, gemm_pdl.cuh).
inline cudaLaunchConfig_t cluster_launch_config(int clusters, int cluster, int threads, int smem, cudaStream_t s,
                                                cudaLaunchAttribute* attr, bool chained = false) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster * clusters, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1 + (chained ? pdl_attribute(attr + 1) : 0);
  return cfg;
}

// Launches KERNEL(probs, prefix, E, accumulate, extra...) with one persistent CTA per SM (the kernels are register- and
// shared-memory bound to one CTA per SM), in clusters of CLUSTER CTAs along x, at most a.grid_upper clusters (the
// tile list's unit is the cluster tile) and at most a.max_ctas / CLUSTER (when set; at least one); the clusters
// stride over the tile list. The grid is the number of clusters that can be resident at once, so no cluster waits
// for another to finish. The shared-memory attribute and that number are set up once per kernel and device
// (nvfp4::PerDevice). The launch is chained to the previous kernel (PDL, gemm_pdl.cuh): KERNEL begins with pdl_wait().
template <auto KERNEL, int kThreads, int kSmem, int CLUSTER = 1, class... Extra>
void launch_persistent(const LaunchArgs& a, cudaStream_t s, const Extra&... extra) {
  static nvfp4::PerDevice<int> resident_by_device;  // clusters (CTAs when CLUSTER == 1); 0 = not set up
  int dev = 0;
  cudaGetDevice(&dev);
  int resident = resident_by_device.get(dev);
  if (resident == 0) {
    cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    resident = sms / CLUSTER;
    if constexpr (CLUSTER > 1) {  // SMs of a GPC that cannot pair up stay idle
      cudaLaunchAttribute attr[2];
      const cudaLaunchConfig_t cfg = cluster_launch_config(resident, CLUSTER, kThreads, kSmem, s, attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, KERNEL, &cfg) == cudaSuccess && clusters > 0 &&
          clusters < resident)
        resident = clusters;
    }
    if (resident < 1) resident = 1;
    resident_by_device.set(dev, resident);
  }
  int grid = resident;
  if (a.grid_upper < grid) grid = a.grid_upper;
  if (a.max_ctas > 0 && a.max_ctas / CLUSTER < grid) grid = a.max_ctas / CLUSTER;
  if (grid < 1) grid = 1;
  if constexpr (CLUSTER == 1) {
    launch_chained(KERNEL, dim3(grid, 1, 1), kThreads, kSmem, s, a.probs, a.prefix, a.E, a.accumulate, extra...);
  } else {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = cluster_launch_config(grid, CLUSTER, kThreads, kSmem, s, attr, true);
    cudaLaunchKernelEx(&cfg, KERNEL, a.probs, a.prefix, a.E, a.accumulate, extra...);
  }
}

}  // namespace wg
}  // namespace nvfp4_gemm
