// mbarrier and bulk-copy (async proxy) primitives of sm_90 (PTX ISA: mbarrier, cp.async.bulk), shared by the
// quantizer's tile load (nvfp4_fast_v4.cuh) and the GEMM kernels (gemm_wgmma_ws.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace async_copy {

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase with this parity has completed (a fresh barrier counts its "previous" phase, parity 1, as
// completed: producers start waiting on the empty barriers with parity 1).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Arrive, and expect `bytes` more bytes of complete_tx on the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Makes mbarrier inits visible to the async proxy (the complete_tx of bulk copies and TMA) and to the cluster.
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Bulk copy (async proxy) of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to this
// CTA's shared memory at `dst`, the bytes counted on mbarrier `bar` (complete_tx).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// One 2D tensor-map box (TMA) into shared memory at dst, its bytes counted on mbarrier `bar` (complete_tx); box
// coordinates {x = inner element, y = row}. Boxes reaching past the tensor are zero-filled and count in full.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

}  // namespace async_copy
