// Per-group TMA tensor maps, built on the device for the TMA loaders of exact_copies and exact_hybrid. The group sizes
// and operand pointers live on the device (the setup kernel's Prob array), so the host encodes one template map per
// kind of box and group_maps_kernel (one warp per group) fills in each group's base, {inner, rows} and row pitch:
//   1. the lanes that own a map copy the template into shared memory and put in the fields with tensormap.replace
//      (stage_group_map);
//   2. the whole warp copies the staged maps to global memory with tensormap.cp_fenceproxy ... release.gpu
//      (publish_group_maps);
//   3. the GEMM kernel's loader thread runs fence.proxy.tensormap::generic.acquire.gpu on a group's maps before its
//      first box through them (acquire_group_map).
// The boxes (shape, swizzle, element type) come from the template. Parts of a box past {inner, rows} are zero-filled.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "common/pdl.cuh"
#include "gemm/problem.h"
#include "gemm/tile_list.cuh"  // kBK

namespace nvfp4_gemm {
namespace gmap {

// The maps kernels run one warp per group, kMapWarps warps (groups) per CTA: map_grid(E) CTAs of kMapThreads threads.
constexpr int kMapWarps = 4;
constexpr int kMapThreads = 32 * kMapWarps;
inline dim3 map_grid(int E) { return dim3(static_cast<unsigned>((E + kMapWarps - 1) / kMapWarps)); }

// In a maps kernel: this warp's group `g` and its problem `p` (the setup kernel's); false (warp-uniform) when the
// warp has no group, or the group loads nothing (no K step or no rows: no tile of it reads a map), so it builds none.
__device__ __forceinline__ bool map_group(const Prob* __restrict__ probs, int E, int* g, Prob* p) {
  *g = static_cast<int>(blockIdx.x) * kMapWarps + static_cast<int>(threadIdx.x >> 5);
  if (*g >= E) return false;
  *p = probs[*g];
  return p->K > 0 && p->M > 0 && p->N > 0;
}

// The loader's acquire of a map that publish_group_maps wrote (generic proxy) before TMA reads it (tensormap proxy).
__device__ __forceinline__ void acquire_group_map(const CUtensorMap* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
               : "memory");
}

// One lane: `staged` (shared memory, 128-byte aligned) = `tmpl` with global address `base`, dims {inner, rows} (in
// the template's elements) and the row pitch in bytes (a multiple of 16, base 16-byte aligned).
__device__ __forceinline__ void stage_group_map(CUtensorMap* staged, const CUtensorMap& tmpl, const void* base,
                                                uint32_t inner, uint32_t rows, uint64_t pitch_bytes) {
  *staged = tmpl;
  const uint32_t sm = static_cast<uint32_t>(__cvta_generic_to_shared(staged));
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n" ::"r"(sm),
               "l"(reinterpret_cast<uint64_t>(base))
               : "memory");
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %1;\n" ::"r"(sm), "r"(inner)
               : "memory");
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %1;\n" ::"r"(sm), "r"(rows)
               : "memory");
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;\n" ::"r"(sm), "l"(pitch_bytes)
               : "memory");
}

// The whole warp (after __syncwarp): staged[i] -> dst[i], i < N, each with the release that acquire_group_map pairs
// with (.sync.aligned: every lane, same operands).
template <int N>
__device__ __forceinline__ void publish_group_maps(const CUtensorMap* staged, CUtensorMap* dst) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(staged + i));
    asm volatile(
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n" ::
            "l"(reinterpret_cast<uint64_t>(dst + i)),
        "r"(src)
        : "memory");
  }
}

// What a group's map covers (its template gives the element type, the box and the swizzle):
enum class MapOf : int {
  kAF16,     // A's fp16 copy: {K, M rows}, row pitch 2 K bytes
  kBF16,     // B's fp16 copy: {K, N rows}, row pitch 2 K bytes
  kBPacked,  // B's packed E2M1 plane: {K / 2 bytes, N rows}, row pitch K / 2
  kBScales,  // B's swizzled scale tiles as rows of 128 bytes: {128, 4 KT roundup(N, 128) / 128} (SPEC 8.2: KT =
             // ceil(K / 64) tiles of 512 bytes per 128 rows), row pitch 128
};

// A group's N maps: map i is templates[i] over what[i] of the group's problem.
template <int N>
struct MapSet {
  CUtensorMap templates[N];
  MapOf what[N];
};

// One lane: `staged` = the group's map of `what` (stage_group_map), from the template and the group's problem.
__device__ __forceinline__ void stage_map_of(MapOf what, CUtensorMap* staged, const CUtensorMap& tmpl, const Prob& p) {
  const uint32_t K = static_cast<uint32_t>(p.K), N = static_cast<uint32_t>(p.N);
  switch (what) {
    case MapOf::kAF16: stage_group_map(staged, tmpl, p.a, K, static_cast<uint32_t>(p.M), 2ull * K); break;
    case MapOf::kBF16: stage_group_map(staged, tmpl, p.b, K, N, 2ull * K); break;
    case MapOf::kBPacked: stage_group_map(staged, tmpl, p.b, K / 2, N, K / 2); break;
    case MapOf::kBScales: {
      const uint32_t kt = (K + kBK - 1) / kBK;
      stage_group_map(staged, tmpl, p.sb, 128, 4 * kt * ((N + 127) / 128), 128);
      break;
    }
  }
}

// maps[N g + i] = group g's map i of `set`: one warp per group, lane i < N stages map i; groups without a K step or
// without rows are skipped (no tile of theirs loads anything). Chained after the kernel that wrote the problems.
template <int N>
__global__ void group_maps_kernel(const Prob* __restrict__ probs, int E, const __grid_constant__ MapSet<N> set,
                                  CUtensorMap* __restrict__ maps) {
  static_assert(N <= 32, "one lane per map");
  __shared__ alignas(128) CUtensorMap staged[kMapWarps][N];
  pdl_wait_then_trigger();  // chained launch (common/pdl.cuh): the previous kernel's problems are visible from here on
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int g;
  Prob p;
  if (!map_group(probs, E, &g, &p)) return;  // (warp-uniform)
  if (lane < N) stage_map_of(set.what[lane], &staged[warp][lane], set.templates[lane], p);
  __syncwarp();
  publish_group_maps<N>(staged[warp], maps + N * g);
}

// Launches group_maps_kernel<N> for E groups on `s`, chained (PDL) to the previous kernel.
template <int N>
void launch_group_maps(const Prob* probs, int E, const MapSet<N>& set, CUtensorMap* maps, cudaStream_t s) {
  launch_chained(group_maps_kernel<N>, map_grid(E), kMapThreads, 0, s, probs, E, set, maps);
}

}  // namespace gmap
}  // namespace nvfp4_gemm
