// The grouped GEMM's tile list and its walk. The setup kernel (setup.cu) writes each group's problem and the
// prefix sum of the groups' tile counts; a persistent CTA walks tiles first, first + stride, ... of that list and
// finds each tile's group by a search of the prefix (groups in order; SPEC 12.5: an empty fprop / dgrad group, and an
// empty wgrad group that accumulates, write nothing and have no tiles).
// Also the persistent launch (one CTA, or one cluster, per SM).
#pragma once

#include "common/pdl.cuh"
#include "common/per_device.h"
#include "gemm/problem.h"

namespace nvfp4_gemm {

constexpr int kBK = 64;  // K elements per tile: 4 blocks; one fp16 row of the tile = 128 bytes = one swizzle atom

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

// The same search by a whole warp (all 32 lanes active, the same tile in each): the group is the number of
// entries prefix[1..E-1] that are <= tile (prefix is non-decreasing from prefix[0] = 0 and tile < prefix[E], so that
// count is search_prefix's lo, empty groups included). Lane l tests entries 1 + l, 33 + l, ...: the loads are
// independent and issue together, where the binary search waits for ~log2(E) dependent loads (the second most
// sampled stall line of fast E64 wgrad, 4 K steps per tile; +6% there). E past
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

// The group table's prefix in shared memory (exact_copies and exact_hybrid, gemm/exact_copies.cuh): its MMA
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

// The list of output tiles the CTAs walk (walk index v = first, first + stride, ...; stride = the number of walkers,
// i.e. clusters). Tail split (kSplitTail shapes: one CTA per tile, 256 columns): when the tiles do not fill the last
// round of walkers and their remainder `tail` fits twice into it (2 tail <= walkers), the last `tail` tiles run as
// 2 tail half tiles instead, columns (B rows) [128 h, 128 h + 128) of the tile, h = 0, 1: one half per walker, so the
// last round takes about half as long (each half converts only its 128 B rows). Walk index v < full is tile v;
// v >= full is half (v - full) % 2 of tile full + (v - full) / 2. Every role and CTA computes the same list. The bits
// of an output element do not depend on the split (columns are independent, SPEC 12.6). SPLIT = false (the other
// shapes): the plain list, with everything about halves compiled out.
template <bool SPLIT>
struct TileWalk {
  static constexpr bool kSplit = SPLIT;
  int full, count;  // tiles run whole; walk length
  __device__ __forceinline__ TileWalk(int total, int walkers) : full(total), count(total) {
    if constexpr (SPLIT) {
      const int tail = total % walkers;
      if (tail > 0 && 2 * tail <= walkers) {
        full = total - tail;
        count = total + tail;
      }
    }
  }
  __device__ __forceinline__ int tile(int v) const {
    if constexpr (SPLIT) return v < full ? v : full + ((v - full) >> 1);
    return v;
  }
  __device__ __forceinline__ int half(int v) const {  // -1: the whole tile
    if constexpr (SPLIT) return v < full ? -1 : (v - full) & 1;
    return -1;
  }
};

constexpr int kHalfCols = 128;  // columns (B rows) of a half tile: one 128-row B scale tile

// The output columns [begin, end) of a walk entry whose tile starts at column tile_n0 of a group with N columns: a
// whole tile (half < 0) runs from tile_n0 to N (the loader and the epilogue clip at N; 256 columns at most), a half
// from tile_n0 + 128 half to at most 128 columns later. The second half of a tile whose columns end within the first
// has no columns (empty()). The one definition used by the step cursor, the loader and the MMA warps.
struct ColumnRange {
  int begin, end;
  __device__ __forceinline__ bool empty() const { return end <= begin; }
};

__device__ __forceinline__ ColumnRange walk_columns(int tile_n0, int half, int N) {
  if (half < 0) return {tile_n0, N};
  return {tile_n0 + kHalfCols * half, min(N, tile_n0 + kHalfCols * (half + 1))};
}

// Walks this CTA's K steps in order: output tiles (whole or half, TileWalk) v = first, + stride, ... (first = the
// cluster's index, stride = the number of clusters; every CTA of a cluster walks the same tiles) and K tiles
// 0..KT-1 of each (tiles with no K tile, and half tiles with no columns, are skipped). Every role that consumes the
// rings walks the same sequence. WARP: every lane of the calling warps walks it (find_group_warp); roles of
// one thread keep the binary search.
struct StepCursor {
  int v, kt, KT, group, local, half, stride;
  template <int BN, bool WARP = false, class W>
  __device__ __forceinline__ void seek(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E,
                                       const W& w, int from) {
    for (v = from; v < w.count; v += stride) {
      group = WARP ? find_group_warp(prefix, E, w.tile(v), &local) : find_group(prefix, E, w.tile(v), &local);
      const Prob* pp = probs + group;
      KT = (__ldg(&pp->K) + kBK - 1) / kBK;
      if constexpr (W::kSplit) {  // (otherwise `half` is never set nor read)
        half = w.half(v);
        // only a second half can be empty
        if (half > 0 && walk_columns((local / __ldg(&pp->tiles_m)) * BN, half, __ldg(&pp->N)).empty()) KT = 0;
      }
      if (KT > 0) break;
    }
    kt = 0;
  }
  template <class W>
  __device__ __forceinline__ bool valid(const W& w) const { return v < w.count; }
  template <int BN, bool WARP = false, class W>
  __device__ __forceinline__ void next(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E,
                                       const W& w) {
    if (++kt == KT) seek<BN, WARP>(probs, prefix, E, w, v + stride);
  }
};

// A tile's group (by a whole warp, count_group_warp; E > kWarpSearchGroups: the binary search), its index
// within the group, and the fields of the group's Prob that the MMA warps' K loop needs. Two rounds of global loads:
// the count's, then prefix[group] and the three fields together (all four depend on the group only).
struct TileLookup {
  int group, local, tiles_m, N, K;
};

__device__ __forceinline__ TileLookup lookup_tile(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E,
                                                  int tile) {
  TileLookup t;
  const bool by_warp = E <= kWarpSearchGroups;
  int start = 0;
  if (by_warp) {
    t.group = count_group_warp(prefix, E, tile);
  } else {
    t.group = find_group(prefix, E, tile, &t.local);
    start = tile - t.local;
  }
  const Prob* pp = probs + t.group;
  t.tiles_m = __ldg(&pp->tiles_m);
  t.N = __ldg(&pp->N);
  t.K = __ldg(&pp->K);
  if (by_warp) start = __ldg(prefix + t.group);
  t.local = tile - start;
  return t;
}

// Launch configuration of `clusters` clusters of `cluster` CTAs along x (attr: storage for two attributes: the
// cluster shape, then, when `chained`, programmatic stream serialization, common/pdl.cuh).
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
// tile list's unit is the cluster tile) and at most a.max_ctas / CLUSTER (device.set_num_sms; when set; at least
// one); the clusters stride over the tile list. The grid is the number of clusters that can be resident at once, so
// no cluster waits for another to finish. The shared-memory attribute and that number are set up once per kernel and
// device (nvfp4::PerDevice). The launch is chained to the previous kernel (PDL, common/pdl.cuh): KERNEL begins with
// pdl_wait().
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

}  // namespace nvfp4_gemm
