// The PTX the grouped GEMM's kernels are built from, one thin wrapper each: cp.async and bulk copies, TMA loads and
// stores, mbarriers (and the rings of stages they guard), cluster shared memory, wgmma's fences and matrix
// descriptors, setmaxnreg, shared-memory loads and stores. No policy: the kernels decide what to issue when.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstdint>

namespace nvfp4_gemm {

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

template <int N>
__device__ __forceinline__ void fence_uregs(uint32_t (&a)[4][N]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
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

// Cluster (distributed shared memory) primitives. A shared::cta address of this CTA maps to the same offset in
// another CTA's window through mapa; the mapping is linear inside a CTA, so one delta per CTA serves every offset.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t mapa(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// Arrive on an mbarrier of another CTA of the cluster (the consumer release of the B ring: the wgmmas that read
// this CTA's copy of a stage have completed, so the peer may copy into it again). Plain arrive: the cluster-scope
// .release form costs a MEMBAR.GPU per arrival.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}

// Arrive, and expect `bytes` more bytes of complete_tx on the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Expect `bytes` more bytes of complete_tx on the current phase, without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Bulk copy (async proxy) of `bytes` from this CTA's shared memory to another CTA's (shared::cluster address), with
// complete_tx of the bytes on that CTA's mbarrier (shared::cluster address).
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   dst),
               "r"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// All threads of all CTAs of the cluster (release/acquire): barrier inits before remote use, and no CTA exits while
// another may still write into its shared memory or arrive on its barriers.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
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

__device__ __forceinline__ void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// A loader -> MMA ring of STAGES stages (swapped.cuh, exact_copies.cuh): thread 0 initialises
// full[s] (full_count arrivals) and empty[s] (empty_count), 8 bytes apart, and makes the inits visible to the async
// proxy (TMA's complete_tx); then the CTA barrier.
template <int STAGES>
__device__ __forceinline__ void init_ring_barriers(uint32_t full, uint32_t empty, int full_count, int empty_count) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, full_count);
      mbar_init(empty + 8 * s, empty_count);
    }
    fence_mbarrier_init_cluster();
  }
  __syncthreads();
}

// Arrive on `bar` when all cp.async copies issued so far by this thread have completed (the count was preset).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Bulk copy of `bytes` (a multiple of 16; 16-byte aligned source and destination) from global memory into this CTA's
// shared memory, completing its bytes on the mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_from_global(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Bulk copy (async proxy) of `bytes` (a multiple of 16; both addresses 16-byte aligned) from this CTA's shared memory
// to global memory, in this thread's current bulk async-group.
__device__ __forceinline__ void bulk_copy_to_global(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's bulk async-groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Wait until all of this thread's bulk async-groups have completed (their global writes performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// One 3D tensor-map box from this CTA's shared memory to global memory (TMA store), in this thread's current bulk
// async-group; coordinates {x = inner element, y = row, z = group}.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(z), "r"(src)
               : "memory");
}

// One 2D tensor-map box from this CTA's shared memory to global memory (TMA store), in this thread's current bulk
// async-group; coordinates {x = inner element, y = row}.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(src)
               : "memory");
}

// Position in a ring of N stages: stage index and the parity of the current pass over the ring.
template <int N>
struct Ring {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next() {
    if (++stage == N) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// The K loop of a kernel whose wgmmas read A from registers: KT steps, alternating two register sets (`even`,
// `odd`), so that a step's A fragments are written while the previous step's wgmmas still read the other set.
// The exits are explicit: with `kt + 1 < KT` guarding the odd step, ptxas sees a path even -> even with the first set
// still in flight and serialises every wgmma (warning C7513).
template <class Set, class Step>
__device__ __forceinline__ void k_loop_two_sets(int KT, Set& even, Set& odd, Step&& step) {
  for (int kt = 0; kt < KT; kt += 2) {
    step(even);
    if (kt + 1 == KT) break;
    step(odd);
  }
}

}  // namespace nvfp4_gemm
