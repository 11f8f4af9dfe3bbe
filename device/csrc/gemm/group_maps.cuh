// Per-group TMA tensor maps, built on the device (the exact kernels' TMA loaders: gemm_exact_f16.cu over fp16 copies,
// gemm_wgmma_exact_tma.cu over the packed planes). The group sizes and operand pointers live on the device (the setup
// kernel's Prob array), so the host encodes one template map per kind of box and a small kernel (one warp per group)
// fills in each group's base, {inner, rows} and row pitch:
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

#include "gemm/problem.h"

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

}  // namespace gmap
}  // namespace nvfp4_gemm
