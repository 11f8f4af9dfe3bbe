// NVFP4 grouped GEMM, warp-specialised wgmma kernel (sm_90a), both modes. Fast mode: SPEC 12.4 (within the bound) and
// SPEC 12.6 (bit for bit the measured tensor-core summation, oracle.gemm(model="tensor_core")). Exact mode (kExact
// shapes): SPEC 12.2 bit for bit (oracle.gemm(model="sequential")), every 16-block an exact partial wgmma added with
// __fadd_rn in K order (see the MMA loop).
//
// Roles (one persistent CTA per SM, 128-thread warpgroups):
//   converter warpgroups (kConv of them, first): issue the cp.async loads of the raw K tiles (packed E2M1 bytes of A
//       and B + their swizzled E4M3 scale tiles; the exact shapes' TMA instantiation: four TMA boxes issued by
//       converter thread 0, RawTma) into a kRawStages ring, and dequantize B rows [0, kConvRows) of each
//       raw tile into a kBStages ring of fp16 tiles in wgmma's K-major 128-byte-swizzled layout (gemm_decode_f16.cuh);
//   MMA warpgroups (kMma = BM / 64 of them): decode their own A fragments from the raw ring into registers (RS form),
//       dequantize B rows [kConvRows, kLoadBN) (of the current step before its wgmmas, or with kBAhead of the next
//       step while the current wgmmas run; none with MMA_UNITS 0, ShapeExactWsAllB), and issue wgmma.m64n256k16 over the fp16 B ring into fp32 accumulators;
//       then the epilogue.
// The two roles meet only at mbarriers, so the shared-memory traffic of the B conversion is spread over the whole
// K loop instead of one burst between two CTA barriers (the limit of gemm_wgmma.cuh's kernel, docs/gemm.md), and the
// converters run ahead into the next output tile while the MMA warpgroups store the previous one.
//
// 2-CTA clusters (kCluster = 2, ShapePair): both CTAs compute 128 rows each of one 256 x 256 cluster tile against the
// same 256 B rows; each loads and dequantizes only its half of them (kLoadBN = 128 rows) and bulk-copies the finished
// rows into the same place of the peer's B stage, so the B conversion per SM is halved.
//
//   raw_full[s]   completes when the converters' cp.async copies of raw stage s have landed (cp.async.mbarrier.arrive;
//                 TMA: thread 0's arrive.expect_tx and the boxes' complete_tx)
//   raw_empty[s]  every thread of both roles has read raw stage s (A fragments / B conversion)
//   b_full[t]     every warp that writes rows of fp16 B stage t has written them (lanes: st.shared, fence.proxy.async;
//                 lane 0: arrive); in a cluster also the peer's rows have landed (complete_tx of its bulk copies,
//                 expected by one arrival with expect_tx)
//   b_empty[t]    the wgmmas that read fp16 B stage t have completed, in every CTA of the cluster (each MMA warp
//                 after wgmma.wait_group: lane 0 arrives on its own CTA's barrier and on the peer's)
//
// Both roles walk the same list of K steps (the CTA's output tiles in order, KT steps each; a tile with K = 0 has
// none), so stage indices and phases agree without further communication; both CTAs of a cluster walk the same
// tiles. Register budget: setmaxnreg moves registers from the converters to the MMA warpgroups (128 fp32
// accumulators + two A register sets each).
#pragma once

#include <cuda.h>  // CUtensorMap (TMA loaders; the host encodes maps through the runtime's driver entry point)

#include "gemm/decode_f16.cuh"
#include "gemm/exact_partials.cuh"
#include "gemm/group_maps.cuh"
#include "gemm/out_maps.h"  // (launch_bf16: the output's row map)
#include "gemm/wgmma_common.cuh"

namespace nvfp4_gemm {
namespace ws {

using wg::kBK;

template <int BM_, int CONV_, int MMA_REGS_, int CONV_REGS_, int MMA_UNITS_, int CLUSTER_ = 1, int AHEAD_ = 0,
          int RAW_STAGES_ = 6, int B_STAGES_ = 4, int STAGED_EPI_ = 0, int EXACT_ = 0, int TMA_EPI_ = 0>
struct Shape {
  // kBAhead: the MMA threads convert their B share one K step ahead (after issuing the current step's wgmmas), off
  // the path between their A decode and their wgmma issue; otherwise the current step's share, before its wgmmas.
  static constexpr bool kBAhead = AHEAD_ != 0;
  // kExact (SPEC 12.2, exact mode): every 16-block is one wgmma.m64n128k16 with scale-d = 0 into a partial fragment
  // (exact: SPEC 12.6 with C = 0 and products on one grid, see the MMA loop), added to the accumulator with __fadd_rn
  // in K order. Two partial fragments and the accumulator take 192 registers, so the tile is 128 columns wide.
  static constexpr bool kExact = EXACT_ != 0;
  static constexpr int BM = BM_, BN = kExact ? 128 : 256, WN = BN, R = WN / 2;
  // kCluster CTAs (a thread-block cluster along M) share one 256-column B tile: CTA rank r computes output rows
  // [m0 + BM r, m0 + BM r + BM) of a (kCluster BM) x BN cluster tile, and loads and dequantizes only B rows
  // [kLoadBN r, kLoadBN r + kLoadBN) of it into its own fp16 B stage, then bulk-copies them into the peer's
  // (publish_b_rows). The tile list's unit is the cluster tile (kTileM rows).
  static constexpr int kCluster = CLUSTER_;
  static constexpr int kTileM = BM * kCluster;
  static constexpr int kLoadBN = BN / kCluster;
  static constexpr int kMma = BM / 64;   // MMA warpgroups (64 rows each, all 256 columns)
  static constexpr int kConv = CONV_;    // converter warpgroups
  static constexpr int kThreads = 128 * (kMma + kConv);
  static constexpr int kConvThreads = 128 * kConv;
  static constexpr int kMmaRegs = MMA_REGS_, kConvRegs = CONV_REGS_;
  static constexpr int kRawStages = RAW_STAGES_, kBStages = B_STAGES_;
  // The epilogue (STAGED_EPI_), each through a shared-memory buffer per MMA warp; both fall back to the direct
  // stores (wg::store_tile) for the groups they cannot write:
  //   1 (kStagedEpi, bf16 output, store_tile_staged): kEpiRowBytes of each of the warp's 16 output rows per pass,
  //     bulk-copied to global memory (cp.async.bulk, async proxy);
  //   2 (kLinesEpi, fp32 output, store_tile_lines): 32 columns (128 bytes) of the 16 rows, read back so that every
  //     st.global writes 4 whole 128-byte lines.
  // kTmaEpi (box buffers per warp: 1, 2 or 4): where the host encoded a tensor map of the output (bit 2 of
  // `accumulate`), the TMA-store epilogue writes it instead, one box of 16 rows x 128 bytes per warp and chunk; the
  // buffers then lie first in shared memory, 1024-byte aligned for the box swizzle:
  //   with kLinesEpi (fp32; wgrad, no C read back, no bias; gemm_wgmma_fast.cu): store_tile_tma, 32 columns per box
  //     (the lines epilogue's buffer is the first box buffer);
  //   with kStagedEpi (bf16, no C read back; gemm_wgmma_pair.cu, gemm_wgmma_fast.cu): store_tile_tma_bf16, 64
  //     columns per box through a 2D map of the output's rows (fprop / dgrad [T, cols], wgrad E N rows of K); a warp
  //     whose 16 rows cross its group's last row copies them from its box buffer instead.
  static_assert(STAGED_EPI_ == 1 || STAGED_EPI_ == 2, "choose an epilogue");
  static constexpr bool kStagedEpi = STAGED_EPI_ == 1;
  static constexpr bool kLinesEpi = STAGED_EPI_ == 2;
  static constexpr int kTmaEpi = TMA_EPI_;
  static_assert(kTmaEpi == 0 || kTmaEpi == 1 || kTmaEpi == 2 || kTmaEpi == 4,
                "TMA epilogue buffers: a divisor of a tile's 8 (fp32) or 4 (bf16) chunks (chunk c uses buffer c mod n)");
  static constexpr int kTmaBoxBytes = 16 * 128;
  static constexpr int kEpiRowBytes = 256;
  static constexpr int kEpiBufBytes = kStagedEpi && !kTmaEpi ? 16 * (kEpiRowBytes + 32)  // 16 rows per warp
                                                             : (kTmaEpi > 1 ? kTmaEpi * kTmaBoxBytes : kTmaBoxBytes);
  static_assert(!kTmaEpi || kEpiBufBytes % 1024 == 0, "box buffers stay 1024-byte aligned");
  static constexpr int kEpiBytes = 4 * kMma * kEpiBufBytes;
  static constexpr int kBBytes = BN * 128;  // one fp16 B stage
  static constexpr int kRawA = BM * 32;     // 64 E2M1 codes = 32 bytes per row
  static constexpr int kRawB = kLoadBN * 32;
  static constexpr int kSA = 512;           // one 128x4 swizzled scale tile (SPEC 8.2); a 64-row tile uses half
  static constexpr int kSB = kLoadBN / 128 * 512;
  static constexpr int kRaw = kRawA + kRawB + kSA + kSB;
  // B conversion split (units = (B row, 16-block) pairs, 4 per row): each converter thread converts kConvUnits units,
  // rows [0, kConvRows) of this CTA's kLoadBN B rows, and each MMA thread kMmaUnits units, rows [kConvRows, kLoadBN).
  static constexpr int kConvRPI = kConvThreads / 4, kMmaRPI = kMma * 32;  // rows per unit index
  static constexpr int kMmaUnits = MMA_UNITS_;
  static constexpr int kConvRows = kLoadBN - kMmaRPI * kMmaUnits;
  static constexpr int kConvUnits = kConvRows / kConvRPI;
  static_assert(kConvRows % kConvRPI == 0 && kConvRows % kMmaRPI == 0 && 128 % kMmaRPI == 0 && 128 % kConvRPI == 0,
                "conversion units are whole, and a thread's rows keep their position inside a 128-row scale tile");
  // mbarrier arrivals are per warp (lane 0 after __syncwarp): b_full from this CTA's B writers (the peer's rows
  // arrive as complete_tx bytes), b_empty from the MMA warps of every CTA of the cluster
  static constexpr int kBWriterWarps = 4 * kConv + (kMmaUnits > 0 ? 4 * kMma : 0);
  static constexpr int kBFullCount = kBWriterWarps, kBEmptyCount = kCluster * 4 * kMma;
  static constexpr int kBarBytes = 8 * 2 * (kRawStages + kBStages);
  static constexpr int kSmem = kBStages * kBBytes + kRawStages * kRaw + kBarBytes + kEpiBytes + 1024;
  static_assert(BM == 64 || BM == 128, "one 128-row A scale tile");
  static_assert(!kExact || (kCluster == 1 && !kBAhead), "exact mode: one CTA, the B share converted per step");
  static_assert(kCluster == 1 || (kCluster == 2 && BM == 128 && kLoadBN % 128 == 0),
                "two CTAs per cluster, each owning whole 128-row scale tiles of A and B");
  // setmaxnreg moves registers inside the CTA's launch allocation (the launch bound's per-thread count, a multiple of
  // 8: 168 for 384 threads): a setmaxnreg.inc that asks for more than the decs released waits forever.
  static_assert(kMma * kMmaRegs + kConv * kConvRegs <= (kMma + kConv) * (65536 / kThreads / 8 * 8),
                "setmaxnreg: the MMA warpgroups get only what the converters give back");
  static_assert(kSmem <= 227 * 1024, "shared memory");
  static_assert(kBBytes % 1024 == 0, "fp16 B stages stay 1024-byte aligned (swizzle atoms, wg::sw128_desc_block)");
};
// 128 x 256 tiles: two MMA warpgroups, one converter (104 + 2 x 200 = 3 x 168 registers per thread-slot); the MMA
// threads convert half of B (2 units each, between their wgmma issues), the converter the other half (4 units).
// Its fp32 form stores wgrad's output by TMA with two box buffers per warp (store_tile_tma; E64 wgrad 0.61-0.63 ->
// 0.72-0.73 of grouped_mm, docs/gemm.md stop 56), so it keeps 4 raw stages instead of 6 (the buffers take 32 KB),
// and its converters walk the steps their loads issued (gemm_wgmma_fast.cu, CONV_SEEKS = false).
using ShapeLarge = Shape<128, 1, 200, 104, 2, 1, 0, 4, 4, 2, 0, 2>;
// 64 x 256 tiles (few rows per group): one MMA warpgroup, two converters (B conversion is the bottleneck there).
using ShapeSkinny = Shape<64, 2, 200, 152, 2, 1, 0, 6, 4, 2>;
// 256 x 256 cluster tiles of two CTAs (128 x 256 each) sharing the B conversion: each CTA dequantizes 128 B rows
// (its converter 64 of them, 2 units per thread; its MMA threads the other 64, 1 unit each, one K step ahead) into
// its own B stage and bulk-copies them into the peer's (docs/gemm.md, stop 13, has the variants measured).
using ShapePair = Shape<128, 1, 200, 104, 1, 2, 1, 6, 4, 2>;
// The three shapes above store fp32 output with the whole-line epilogue (store_tile_lines, 2 KB per MMA warp; +5% on
// E64 wgrad and fp32 fprop against the direct stores, which write 8 rows x 32 bytes per instruction; the staged bulk
// copies measured 2-4% slower than direct ones for fp32: docs/gemm.md, stops 15 and 16).
// bf16 output: the same shapes with the staged epilogue (store_tile_staged, rows leave as bulk copies instead of 8
// rows x 16 bytes, half sectors, per instruction; the 128 x 256 kernel keeps 4 raw stages instead of 6 to make room
// for the buffers).
using ShapeLargeBf16 = Shape<128, 1, 200, 104, 2, 1, 0, 4, 4, 1>;
using ShapeSkinnyBf16 = Shape<64, 2, 200, 152, 2, 1, 0, 6, 4, 1>;
using ShapePairBf16 = Shape<128, 1, 200, 104, 1, 2, 1, 6, 4, 1>;
// The bf16 forms with TMA-store boxes (two 2 KB box buffers per MMA warp in place of the staged buffers' 4.5 KB):
// the output through a 2D map of its rows (fprop / dgrad: [T, cols]; wgrad: the E planes [N, K] as E N rows) when the
// host encodes it (tma_host::with_rows_out_map; gemm_wgmma_pair.cu, gemm_wgmma_fast.cu), the staged forms above
// otherwise.
using ShapePairBf16Tma = Shape<128, 1, 200, 104, 1, 2, 1, 6, 4, 1, 0, 2>;
using ShapeLargeBf16Tma = Shape<128, 1, 200, 104, 2, 1, 0, 4, 4, 1, 0, 2>;
using ShapeSkinnyBf16Tma = Shape<64, 2, 200, 152, 2, 1, 0, 6, 4, 1, 0, 2>;
// Exact mode (SPEC 12.2): 128 x 128 tiles, two MMA warpgroups (64 x 128 each: accumulator + two partial fragments =
// 192 registers) that also convert B rows [64, 128) (1 unit per thread), one converter warpgroup (rows [0, 64), 2 units
// per thread; 72 + 2 x 216 = 3 x 168 registers); fp32 or bf16 output as above.
using ShapeExactWs = Shape<128, 1, 216, 72, 1, 1, 0, 6, 4, 2, 1>;
using ShapeExactWsBf16 = Shape<128, 1, 216, 72, 1, 1, 0, 6, 4, 1, 1>;

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

// A loader -> MMA ring of STAGES stages (the swapped kernel, the exact kernel over fp16 copies): thread 0 initialises
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
// rings walks the same sequence. WARP: every lane of the calling warps walks it (wg::find_group_warp); roles of
// one thread keep the binary search.
struct StepCursor {
  int v, kt, KT, group, local, half, stride;
  template <int BN, bool WARP = false, class W>
  __device__ __forceinline__ void seek(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E,
                                       const W& w, int from) {
    for (v = from; v < w.count; v += stride) {
      group = WARP ? wg::find_group_warp(prefix, E, w.tile(v), &local) : wg::find_group(prefix, E, w.tile(v), &local);
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

// The converters' view of the tile for wg::RawLoader: the raw K tile (A rows, B rows, scale tiles) is copied by the
// kConvThreads converter threads.
template <class S>
struct LoaderShape {
  static constexpr int BM = S::BM, BN = S::kLoadBN, kThreads = S::kConvThreads;
  static constexpr int kRawA = S::kRawA, kRawB = S::kRawB, kSA = S::kSA, kSB = S::kSB;
  static constexpr int kChunks16 = ((BM + BN) * 2 + kThreads - 1) / kThreads;
  static constexpr int kChunks8 = (BM + BN) * 4 / kThreads;
  static_assert((BM + BN) * 4 % kThreads == 0 && (kSA + kSB) / 16 <= kThreads, "copy chunks divide evenly");
};

// Dequantize B rows r0 + RPI i (i < COUNT), 16-block b, of raw stage `raw` into the fp16 B stage `dst`
// (gemm_decode_f16.cuh). r0 < ROW0 + RPI with ROW0 a multiple of RPI, so every offset is a per-thread base plus a
// compile-time constant of i. Raw stage: A rows, B rows (32 B each), A scale tile, B scale tiles (SPEC 8.2: row r,
// block b of a 128-row tile at (r % 32) * 16 + (r / 32 % 4) * 4 + b). fp16 stage: row r at r * 128, its 16-byte chunk c
// (elements 8c..8c+7) at (c ^ (r % 8)) * 16 (wgmma's K-major 128-byte swizzle). All shared-memory loads first, then the
// arithmetic and the stores, so the loads' latencies overlap (the load/store helpers are volatile asm with memory
// clobbers, which keeps them in source order).
// With a 2-CTA cluster, `dst` is this CTA's B stage plus the offset of its kLoadBN rows (publish_b_rows then copies
// them into the peer's stage). A half tile (TileWalk) converts only rows [0, kHalfCols): the wgmmas still read the
// stage's other rows (what an earlier step left there, or anything at the kernel's start), but they only feed
// accumulator columns that the epilogue does not store (SPEC 12.6: columns are independent).
template <class S, int RPI, int ROW0, int COUNT>
__device__ __forceinline__ void convert_b_rows(uint32_t raw, uint32_t dst, int rr, int b, bool half_tile) {
  static_assert(ROW0 % RPI == 0 && 128 % RPI == 0, "a thread's rows keep their place inside a 128-row scale tile");
  const uint32_t raw_row = raw + S::kRawA + (ROW0 + rr) * 32 + b * 8;
  const uint32_t scale = raw + S::kRawA + S::kRawB + S::kSA + nvfp4::swizzle_in_tile<int>(rr, b);  // rr < RPI <= 128
  const uint32_t out = dst + (ROW0 + rr) * 128 + (((2 * b) ^ (rr & 7)) << 4);
  // unit i is converted unless it lies in the second half of a half tile (ROW0 + RPI i is a compile-time constant)
  auto keep = [half_tile](int i) { return ROW0 + RPI * i < kHalfCols || !half_tile; };
  uint2 w[COUNT];
  uint32_t sbyte[COUNT];
#pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    const int r = ROW0 + RPI * i;  // a multiple of 32: rr adds the rest (rr < RPI)
    if (!keep(i)) continue;
    w[i] = wg::lds64(raw_row + RPI * 32 * i);
    sbyte[i] = wg::lds8(scale + nvfp4::swizzle_offset<int>(r, 0, 1));
  }
#pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    if (!keep(i)) continue;
    const uint32_t s = f16dec::scale_to_f16x2(sbyte[i]);
    uint32_t lo[4], hi[4];
    f16dec::e2m1x8_to_f16(w[i].x, s, lo);
    f16dec::e2m1x8_to_f16(w[i].y, s, hi);
    const uint32_t d = out + RPI * 128 * i;
    wg::sts128(d, lo);
    wg::sts128(d ^ 16u, hi);
  }
}

// A operand straight into wgmma's register fragment (RS form): thread (warp v, lane l) of an MMA warpgroup holds, for
// each 16-block j of the K tile, rows 16v + l/4 and +8 of the warpgroup's 64 rows at K positions 2c, 2c+1 (chunk 0)
// and 8 + 2c, 9 + 2c (chunk 1), c = l % 4: word c of each 8-code group in the order of gemm_decode_f16.cuh, which
// this lane decodes alone (f16dec::e2m1_word_to_f16). No A tile in shared memory, no A stores.
struct AFragOffsets {
  uint32_t row0;    // raw offset of row r0 (32 B per row); row r0 + 8 is at + 256
  uint32_t scale;   // offset of row r0's 4 scales (one word) in the A scale tile, without the 64-row-tile adjustment;
                    // row r0 + 8's are kScale8 bytes further
  uint32_t rot;     // f16dec::afrag_rotation(c)
};
// r0 = 64 wm + 16 v + l / 4 has r0 mod 32 < 24, so r0 + 8 lies in the same 32-row group of the 128-row scale tile and
// its scales (SPEC 8.2: row r at (r mod 32) * 16 + (r / 32 mod 4) * 4) sit 8 * 16 bytes after row r0's.
constexpr uint32_t kScale8 = 8 * 16;

// Offsets for thread t (0..127) of the MMA warpgroup that owns rows [64 wm, 64 wm + 64) of the tile; scale_base is
// the offset of the A scale tile in the raw stage (SPEC 8.2 layout; BM <= 128, so one scale tile).
__device__ __forceinline__ AFragOffsets afrag_offsets(int wm, int t, uint32_t scale_base) {
  const int v = t >> 5, l = t & 31;
  const uint32_t r0 = 64 * wm + 16 * v + (l >> 2);
  AFragOffsets o;
  o.row0 = r0 * 32;
  o.scale = scale_base + nvfp4::swizzle_in_tile<uint32_t>(r0, 0);  // r0 < 128
  o.rot = f16dec::afrag_rotation(l & 3);
  return o;
}

// The A fragments of the 4 16-blocks of a raw stage (RS form, see AFragOffsets): a[j] = rows r0, r0 + 8 at K
// positions 2c, 2c+1 (+8) of block j, i.e. word c of each 8-code group in the fp16 order of gemm_decode_f16.cuh.
__device__ __forceinline__ void convert_a_frags_f16(uint32_t raw, const AFragOffsets& o, uint32_t a_scale_adj,
                                                    uint32_t (&a)[4][4]) {
  const uint4 r0a = wg::lds128(raw + o.row0), r0b = wg::lds128(raw + o.row0 + 16);
  const uint4 r1a = wg::lds128(raw + o.row0 + 256), r1b = wg::lds128(raw + o.row0 + 256 + 16);
  const uint32_t s0 = wg::lds32(raw + o.scale + a_scale_adj), s1 = wg::lds32(raw + o.scale + a_scale_adj + kScale8);
  const uint32_t w0[8] = {r0a.x, r0a.y, r0a.z, r0a.w, r0b.x, r0b.y, r0b.z, r0b.w};  // row r0: block j = words 2j, 2j+1
  const uint32_t w1[8] = {r1a.x, r1a.y, r1a.z, r1a.w, r1b.x, r1b.y, r1b.z, r1b.w};
  uint32_t sc0[4], sc1[4];
  f16dec::scales4_to_f16x2(s0, sc0);
  f16dec::scales4_to_f16x2(s1, sc1);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a[j][0] = f16dec::e2m1_word_to_f16(w0[2 * j], o.rot, sc0[j]);      // row r0, chunk 0
    a[j][1] = f16dec::e2m1_word_to_f16(w1[2 * j], o.rot, sc1[j]);      // row r0 + 8, chunk 0
    a[j][2] = f16dec::e2m1_word_to_f16(w0[2 * j + 1], o.rot, sc0[j]);  // row r0, chunk 1
    a[j][3] = f16dec::e2m1_word_to_f16(w1[2 * j + 1], o.rot, sc1[j]);  // row r0 + 8, chunk 1
  }
}

// The consumer release of B stage `bar` (b_empty), per warp: lane 0, after __syncwarp (the warp's wgmma.wait_group has
// completed the reads of the stage), arrives on this CTA's barrier and, in a cluster, on the peer's (which copies
// into this CTA's stage too).
template <class S>
__device__ __forceinline__ void release_b_stage(uint32_t bar, uint32_t peer_delta, int lane) {
  __syncwarp();
  if (lane == 0) {
    if constexpr (S::kCluster == 2) mbar_arrive_remote(bar + peer_delta);
    mbar_arrive(bar);
  }
}

// After convert_b_rows<S, RPI, ROW0, COUNT> by all lanes of a warp (rows ROW0 + RPI i + [8 w, 8 w + 8) of this CTA's
// share of the stage at `rows`, one 1 KB block per i, w = warp index in its role): make the stores visible to the async
// proxy (wgmma, bulk copies), and arrive on b_full. In a cluster, lane 0 first bulk-copies the warp's blocks into the
// peer's stage (same offsets) with complete_tx on the peer's b_full; one warp per CTA (`expect`) arrives with
// expect_tx for the kLoadBN rows the peer copies into this CTA's stage.
template <class S, int RPI, int ROW0, int COUNT>
__device__ __forceinline__ void publish_b_rows(uint32_t rows, uint32_t full_bar, uint32_t peer_delta, int w, int lane,
                                               bool expect) {
  wg::fence_proxy_async();
  __syncwarp();
  if (lane == 0) {
    if constexpr (S::kCluster == 2) {
#pragma unroll
      for (int i = 0; i < COUNT; ++i) {
        const uint32_t blk = rows + (ROW0 + RPI * i + 8 * w) * 128;
        bulk_copy_to_peer(blk + peer_delta, blk, 8 * 128, full_bar + peer_delta);
      }
      if (expect) {
        mbar_arrive_expect_tx(full_bar, S::kLoadBN * 128);
        return;
      }
    }
    mbar_arrive(full_bar);
  }
}

// The fp16 B ring as one thread sees it: stage base, this CTA's share of the rows in a stage, the barriers, and the
// peer's offset (cluster; 0 otherwise).
struct BRing {
  uint32_t base, rows_off, full, empty, peer_delta;
};

// One writer's part of fp16 B stage `b` from raw stage `raw`, in two halves:
// - convert_b_stage: wait until the stage is free (b_empty), dequantize this thread's COUNT units (rows ROW0 + RPI i,
//   RPI i + rr with rr = t / 4, block t % 4; t = the thread's index in its role; a half tile only those of rows
//   < kHalfCols) and issue their stores;
// - publish_b_stage: publish them (publish_b_rows, also when nothing was converted; `expect`: the warp that expects
//   the peer's bytes). Its fence waits for the warp's fp16 stores to complete, so callers put independent work
//   between the two where they can (docs/gemm.md, stop 25: without any fence the fast kernels ran 4-6% faster).
// convert_and_publish_b: both, back to back (written out: the split form changed the pair kernel's SASS).
template <class S, int RPI, int ROW0, int COUNT>
__device__ __forceinline__ void convert_b_stage(uint32_t raw, const BRing& br, const Ring<S::kBStages>& b, int t,
                                                bool half_tile) {
  mbar_wait(br.empty + 8 * b.stage, b.phase ^ 1u);
  if constexpr (COUNT > 0)
    convert_b_rows<S, RPI, ROW0, COUNT>(raw, br.base + b.stage * S::kBBytes + br.rows_off, t >> 2, t & 3, half_tile);
}
template <class S, int RPI, int ROW0, int COUNT>
__device__ __forceinline__ void publish_b_stage(const BRing& br, const Ring<S::kBStages>& b, int t, int lane,
                                                bool expect) {
  publish_b_rows<S, RPI, ROW0, COUNT>(br.base + b.stage * S::kBBytes + br.rows_off, br.full + 8 * b.stage,
                                      br.peer_delta, t >> 5, lane, expect);
}
template <class S, int RPI, int ROW0, int COUNT>
__device__ __forceinline__ void convert_and_publish_b(uint32_t raw, const BRing& br, const Ring<S::kBStages>& b, int t,
                                                      int lane, bool expect, bool half_tile) {
  mbar_wait(br.empty + 8 * b.stage, b.phase ^ 1u);
  const uint32_t rows = br.base + b.stage * S::kBBytes + br.rows_off;
  if constexpr (COUNT > 0) convert_b_rows<S, RPI, ROW0, COUNT>(raw, rows, t >> 2, t & 3, half_tile);
  publish_b_rows<S, RPI, ROW0, COUNT>(rows, br.full + 8 * b.stage, br.peer_delta, t >> 5, lane, expect);
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

// Whether store_tile_staged can write this group's output: the bulk copies need 16-byte aligned global rows and row
// lengths (the tile's first column is a multiple of 128), and accumulate (C read back) stays on the direct path.
template <bool OUT_F32>
__device__ __forceinline__ bool staged_epilogue_ok(const Prob& p, int accumulate) {
  constexpr int kSize = OUT_F32 ? 4 : 2;
  return !accumulate && ((reinterpret_cast<uintptr_t>(p.d) | static_cast<uintptr_t>(p.ldd * kSize) |
                          static_cast<uintptr_t>(p.N * kSize)) & 15u) == 0;
}

// SPEC 12.2's epilogue value of an accumulator pair without C: y = RN(alpha * acc), then y = RN(y + b) when BIAS (b:
// the bias of the pair's columns, bias_pair); register 4j + 2h + e of the wgmma m64nWN layout. The staged and the bf16
// TMA-store epilogues write it.
// BIAS is a template parameter: the callers branch once per tile on p.bias (warp-uniform). With the test per pair
// and the loads between the stores (volatile asm with memory clobbers: no load moves above one), every pair's FADD
// waited on its load's scoreboard, also where the load was predicated off (no bias), and the bf16 chunk writes took
// ~0.45 us per 64 columns (ncu and the per-chunk trace, docs/gemm.md "Stop 66"). With a bias the callers still load
// each pair's two values between the stores (once per column pair, for both rows h): preloading a chunk's values
// spilled registers.
template <class S, bool BIAS>
__device__ __forceinline__ float2 epilogue_pair(const float (&acc)[S::R], int j, int h, float alpha, float2 b) {
  float y0 = __fmul_rn(alpha, acc[4 * j + 2 * h]), y1 = __fmul_rn(alpha, acc[4 * j + 2 * h + 1]);
  if constexpr (BIAS) {
    y0 = __fadd_rn(y0, b.x);
    y1 = __fadd_rn(y1, b.y);
  }
  return make_float2(y0, y1);
}
// The same rounded to a bf16 pair (the first column in the low half), as one 32-bit word.
template <class S, bool BIAS>
__device__ __forceinline__ uint32_t epilogue_bf16x2(const float (&acc)[S::R], int j, int h, float alpha, float2 b) {
  const float2 y = epilogue_pair<S, BIAS>(acc, j, h, alpha, b);
  const __nv_bfloat162 v = __floats2bfloat162_rn(y.x, y.y);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The bias of columns col, col + 1 (both exist whenever col < N: the callers' rows have an even length); 0 past N,
// whose columns no epilogue stores, and without BIAS.
template <bool BIAS>
__device__ __forceinline__ float2 bias_pair(const Prob& p, int col) {
  if constexpr (BIAS) {
    if (col < p.N) return make_float2(p.bias[col], p.bias[col + 1]);
  }
  return make_float2(0.0f, 0.0f);
}

// Staged epilogue of one MMA warp (SPEC 12.2 order, as wg::store_tile without accumulate: y = alpha*acc; y += bias;
// cast). The warp owns rows row0 + [0, 16) and columns col0 + [0, WN) of the output (accumulator layout of
// wgmma m64nWN: register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e). Per pass, kEpiRowBytes of
// each row go into the warp's buffer `buf` (row pitch kEpiRowBytes + 32 (fp32) or + 16 (bf16): the 8 rows of one
// store instruction then fall on distinct banks, 2 wavefronts per fp32 pair store, 1 per bf16 pair), then lane 0
// bulk-copies the rows inside the problem (row < M, column < N) to global memory and commits one bulk group. The
// buffer is rewritten only after that group has finished reading it (wait_group.read): within a tile the warp may
// wait there (fp32: 4 passes, bf16: 2), across tiles the copies have usually drained.
template <class S, bool OUT_F32, bool BIAS>
__device__ __forceinline__ void store_tile_staged(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                  uint32_t buf, int lane) {
  constexpr int kSize = OUT_F32 ? 4 : 2;
  constexpr int kCols = S::kEpiRowBytes / kSize;  // columns per pass
  constexpr int kPasses = S::WN / kCols;
  constexpr int kPitch = S::kEpiRowBytes + (OUT_F32 ? 32 : 16);
  const int r = lane >> 2, c = lane & 3;
  const float alpha = p.alpha;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    if (lane == 0) bulk_wait_read<0>();  // the previous pass's copies have read the buffer
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < kCols / 8; ++jj) {
      const int j = pass * (kCols / 8) + jj;
      // (N * size is a multiple of 16 here, staged_epilogue_ok: col + 1 < N whenever col < N)
      const float2 b = bias_pair<BIAS>(p, col0 + 8 * j + 2 * c);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a = buf + (r + 8 * h) * kPitch + (8 * jj + 2 * c) * kSize;
        if constexpr (OUT_F32) {
          const float2 y = epilogue_pair<S, BIAS>(acc, j, h, alpha, b);
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(y.x), "f"(y.y) : "memory");
        } else {
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(epilogue_bf16x2<S, BIAS>(acc, j, h, alpha, b))
                       : "memory");
        }
      }
    }
    wg::fence_proxy_async();  // this lane's stores -> the async proxy of the bulk copies
    __syncwarp();
    if (lane == 0) {
      const int c0 = col0 + pass * kCols;
      const int cols = min(kCols, p.N - c0);
      if (cols > 0) {
        const int rows = min(16, p.M - row0);  // <= 0 for a warp past the problem's rows
        for (int rr = 0; rr < rows; ++rr) {
          char* dst = static_cast<char*>(p.d) + (static_cast<long long>(row0 + rr) * p.ldd + c0) * kSize;
          bulk_copy_to_global(dst, buf + rr * kPitch, static_cast<uint32_t>(cols * kSize));
        }
      }
      bulk_commit();
    }
  }
}

// Whether store_tile_lines can write this group's fp32 output: rows of whole 16-byte pieces (N and the row pitch
// multiples of 4), a 16-byte aligned base and bias.
__device__ __forceinline__ bool lines_epilogue_ok(const Prob& p) {
  return ((p.N | p.ldd) & 3) == 0 &&
         ((reinterpret_cast<uintptr_t>(p.d) | reinterpret_cast<uintptr_t>(p.bias)) & 15u) == 0;
}

// accumulate (C read back, wgrad's main_grad) with the whole-line epilogue: lanes 0-15 of an MMA warp ask the L2 to
// fetch the C rows the warp will read at the end of this tile (row0 + lane, columns col0 + [0, WN) clipped to N), so
// that the epilogue's loads hit L2 instead of waiting on DRAM after the K loop (docs/gemm.md, stop 37). A hint only:
// no data is written and nothing waits for it. `bulk prefetch` needs 16-byte aligned rows and sizes, which
// lines_epilogue_ok guarantees (N, ldd multiples of 4 fp32; col0 a multiple of 128).
template <class S>
__device__ __forceinline__ void prefetch_tile_c_lines(const Prob& p, int row0, int col0, int lane) {
  const int row = row0 + lane;
  const int cols = min(S::WN, p.N - col0);
  if (lane < 16 && row < p.M && cols > 0) {
    const float* src = static_cast<const float*>(p.d) + static_cast<long long>(row) * p.ldd + col0;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(static_cast<uint32_t>(cols * 4))
                 : "memory");
  }
}

// RN(alpha * acc) of columns [32 c, 32 c + 32) of an MMA warp's 16 rows into its 16 x 128-byte buffer (accumulator
// layout of wgmma m64nWN: register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e): lane l's pair of
// columns 8 jj + 2 q, + 1 (q = l % 4) is 8 bytes of 16-byte piece k = 2 jj + q / 2 of its row lr. A half-warp's
// 8-byte stores (rows lr..lr+3, one jj each) then hit 32 distinct banks, 2 wavefronts per store, when
//   - piece k sits at slot k ^ (2 lr mod 8) (store_tile_lines, whose read-back is conflict-free too): every row stores
//     the same jj, and the 4 rows' pairs of slots are distinct;
//   - TMA_SWIZZLE (a tensor map's 128-byte swizzle, store_tile_tma): piece k sits at slot k ^ (lr mod 8), and rows lr
//     and lr ^ 1 would share their pair of slots if they stored the same jj (4 wavefronts per store: ncu, docs/gemm.md
//     "Stop 66"), so an odd row stores jj ^ 2 where an even row stores jj: the slot pairs jj ^ (lr / 2 mod 4) ^
//     (2 (lr mod 2)) of 4 consecutive rows are distinct. The odd rows' registers come by selects.
template <class S, bool TMA_SWIZZLE>
__device__ __forceinline__ void write_chunk_f32(const float (&acc)[S::R], int c, float alpha, uint32_t buf, int lane) {
  const int q = lane & 3, r = lane >> 2;
  const bool odd = TMA_SWIZZLE && (r & 1);  // (lr = r + 8 h has r's parity)
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int jj = odd ? i ^ 2 : i;
    const int j = 4 * c + i, j_odd = 4 * c + (i ^ 2);  // (the registers of jj, both a compile-time index)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = r + 8 * h;
      const int k = 2 * jj + (q >> 1);
      const int slot = k ^ (TMA_SWIZZLE ? (lr & 7) : ((2 * lr) & 7));
      const uint32_t a = buf + lr * 128 + (slot << 4) + ((q & 1) << 3);
      const float x0 = odd ? acc[4 * j_odd + 2 * h] : acc[4 * j + 2 * h];
      const float x1 = odd ? acc[4 * j_odd + 2 * h + 1] : acc[4 * j + 2 * h + 1];
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(__fmul_rn(alpha, x0)), "f"(__fmul_rn(alpha, x1))
                   : "memory");
    }
  }
}

// Whole-line epilogue of one MMA warp (kLinesEpi), fp32 output (SPEC 12.2 order, as wg::store_tile: y = alpha*acc;
// y += C; y += bias). The warp owns rows row0 + [0, 16), columns col0 + [0, WN) (accumulator layout of wgmma m64nWN:
// register 4j + 2h + e of lane l is row l/4 + 8h, column 8j + 2(l%4) + e). Per chunk of 32 columns it writes
// RN(alpha * acc) into its 16 x 128-byte buffer in that layout, then reads the buffer back as one 16-byte piece per
// lane (lanes 8i..8i+7: pieces 0..7 of one row), adds C and the bias on those pieces and stores them: every global
// access is 4 whole 128-byte rows. Piece k of buffer row r sits at slot k ^ (2r mod 8): the half-warp's 8-byte
// fragment stores (rows r..r+3) and the read-back are then free of bank conflicts. Runs in every MMA warp, also in
// one whose rows all lie past M (no store then): its __syncwarp must not sit in a branch on per-warp values (stop 15).
template <class S>
__device__ __forceinline__ void store_tile_lines(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                 uint32_t buf, int lane, int accumulate) {
  const int piece = lane & 7, prow = lane >> 3;
  const float alpha = p.alpha;
#pragma unroll
  for (int c = 0; c < S::WN / 32; ++c) {  // chunks of 32 columns
    __syncwarp();                // the previous chunk's read-back is done with the buffer
    write_chunk_f32<S, false>(acc, c, alpha, buf, lane);
    __syncwarp();
    const int col = col0 + 32 * c + 4 * piece;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i > 0) __syncwarp();  // one piece in flight at a time (fewer live registers next to the accumulators)
      const int lr = prow + 4 * i;
      const uint4 v = wg::lds128(buf + lr * 128 + ((piece ^ ((2 * lr) & 7)) << 4));
      const int row = row0 + lr;
      if (row < p.M && col < p.N) {  // N % 4 == 0: the whole piece lies inside the row
        float* dp = static_cast<float*>(p.d) + static_cast<long long>(row) * p.ldd + col;
        float4 y = make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
        if (accumulate) {
          const float4 cv = *reinterpret_cast<const float4*>(dp);
          y = make_float4(__fadd_rn(y.x, cv.x), __fadd_rn(y.y, cv.y), __fadd_rn(y.z, cv.z), __fadd_rn(y.w, cv.w));
        }
        if (p.bias) {
          const float4 b = *reinterpret_cast<const float4*>(p.bias + col);
          y = make_float4(__fadd_rn(y.x, b.x), __fadd_rn(y.y, b.y), __fadd_rn(y.z, b.z), __fadd_rn(y.w, b.w));
        }
        *reinterpret_cast<float4*>(dp) = y;
      }
    }
  }
}

// TMA-store epilogue of one MMA warp (kTmaEpi; wgrad's fp32 output, no C read back, no bias: SPEC 12.2's
// y = RN(alpha * acc), as store_tile_lines). Per chunk of 32 columns (128 bytes) of its 16 rows the warp writes y into
// a box buffer of 16 x 128 bytes in the tensor map's 128-byte swizzle (16-byte piece k of row r at slot k ^ (r mod 8);
// the buffer is 1024-byte aligned; write_chunk_f32 orders the odd rows' stores so that they hit 32 distinct banks), and lane 0 stores the
// box {32 columns, 16 rows, group} through `map` ([E, M, N]: rows past M and columns past N are clipped by the map,
// nothing else is written). Chunk c uses buffer c mod kTmaEpi, and first waits until the store that last read it has
// (every chunk commits one bulk group, empty when nothing was stored, so the count of groups still reading says which).
template <class S>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[S::R], const Prob& p, int group, int row0, int col0,
                                               uint32_t bufs, int lane, const CUtensorMap* map) {
  constexpr int kBufs = S::kTmaEpi > 0 ? S::kTmaEpi : 1;  // (instantiated, never run, for shapes without it)
  const float alpha = p.alpha;
  const bool rows_in = row0 < p.M;
#pragma unroll
  for (int c = 0; c < S::WN / 32; ++c) {
    const uint32_t buf = bufs + (c % kBufs) * S::kTmaBoxBytes;
    if (lane == 0) bulk_wait_read<kBufs - 1>();  // the store that last read this buffer (kBufs chunks ago) is done
    __syncwarp();
    write_chunk_f32<S, true>(acc, c, alpha, buf, lane);
    wg::fence_proxy_async();  // this lane's stores -> the async proxy of the TMA store
    __syncwarp();
    if (lane == 0) {
      if (rows_in && col0 + 32 * c < p.N) tma_store_3d(map, buf, col0 + 32 * c, row0, group);
      bulk_commit();
    }
  }
}

// One 2D tensor-map box from this CTA's shared memory to global memory (TMA store), in this thread's current bulk
// async-group; coordinates {x = inner element, y = row}.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(src)
               : "memory");
}

// TMA-store epilogue of one MMA warp for bf16 output (kStagedEpi with kTmaEpi; no C: SPEC 12.2's y = alpha * acc;
// y += bias; RN to bf16, as store_tile_staged). Per chunk of 64 columns (128 bytes) of its 16 rows the warp writes y
// into a 16 x 128-byte box buffer in the map's 128-byte swizzle (the bf16 pair of columns 8 jj + 2 q, +1 of row lr,
// jj < 8, is 4 bytes of 16-byte piece jj, at slot jj ^ (lr mod 8): a warp's 32 stores of one (jj, h) hit 32 distinct
// banks), and lane 0 stores the box {64 columns, 16 rows} at row p.row0 + row0 of the 2D map (fprop / dgrad: [T,
// cols]; wgrad: E N rows of K, plane g from row g N), which clips columns past N (cols) and nothing else. So only a warp whose 16 rows all lie inside the group stores boxes
// (full_rows); a warp whose rows cross the group's last row M (every warp runs the same loop, stop 15) copies its
// rows below M from the box buffer to global memory itself, one 16-byte piece (8 columns; N is a multiple of 8) per
// lane and step. Chunk c uses buffer c mod kTmaEpi after the store that last read it has (one bulk group per chunk;
// the direct copies' shared-memory loads have completed before the __syncwarp that precedes its next use).
template <class S, bool BIAS>
__device__ __forceinline__ void store_tile_tma_bf16(const float (&acc)[S::R], const Prob& p, int row0, int col0,
                                                    uint32_t bufs, int lane, const CUtensorMap* map) {
  constexpr int kBufs = S::kTmaEpi > 0 ? S::kTmaEpi : 1;
  const float alpha = p.alpha;
  const bool full_rows = row0 + 16 <= p.M;
  const int q = lane & 3, r = lane >> 2;
#pragma unroll
  for (int c = 0; c < S::WN / 64; ++c) {
    const uint32_t buf = bufs + (c % kBufs) * S::kTmaBoxBytes;
    if (lane == 0) bulk_wait_read<kBufs - 1>();  // the store that last read this buffer (kBufs chunks ago) is done
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * c + jj;
      // (N is a multiple of 8 here, the map's 16-byte pitch: col + 1 < N whenever col < N)
      const float2 b = bias_pair<BIAS>(p, col0 + 8 * j + 2 * q);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = r + 8 * h;
        const uint32_t a = buf + lr * 128 + ((jj ^ (lr & 7)) << 4) + 4 * q;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(epilogue_bf16x2<S, BIAS>(acc, j, h, alpha, b))
                     : "memory");
      }
    }
    wg::fence_proxy_async();  // this lane's stores -> the async proxy of the TMA store
    __syncwarp();
    if (!full_rows) {  // (warp-uniform; no __syncwarp inside)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = lane + 32 * k, lr = i >> 3, slot = i & 7;
        const int col = col0 + 64 * c + 8 * (slot ^ (lr & 7));
        if (row0 + lr < p.M && col < p.N) {
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.d) + static_cast<long long>(row0 + lr) * p.ldd + col;
          *reinterpret_cast<uint4*>(dst) = wg::lds128(buf + lr * 128 + (slot << 4));
        }
      }
    }
    if (lane == 0) {
      if (full_rows && col0 + 64 * c < p.N) tma_store_2d(map, buf, col0 + 64 * c, p.row0 + row0);
      bulk_commit();
    }
  }
}

// A tile's group (by a whole warp, wg::count_group_warp; E > wg::kWarpSearchGroups: the binary search), its index
// within the group, and the fields of the group's Prob that the MMA warps' K loop needs. Two rounds of global loads:
// the count's, then prefix[group] and the three fields together (all four depend on the group only).
struct TileLookup {
  int group, local, tiles_m, N, K;
};
__device__ __forceinline__ TileLookup lookup_tile(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E,
                                                  int tile) {
  TileLookup t;
  const bool by_warp = E <= wg::kWarpSearchGroups;
  int start = 0;
  if (by_warp) {
    t.group = wg::count_group_warp(prefix, E, tile);
  } else {
    t.group = wg::find_group(prefix, E, tile, &t.local);
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

// The converter threads copy the raw stages with cp.async (wg::RawLoader).
template <class S, bool OUT_F32, bool CONV_SEEKS = true>
__global__ void __launch_bounds__(S::kThreads, 1)
    ws_gemm_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                   const __grid_constant__ CUtensorMap out_map) {
  pdl_wait();  // the setup (or maps) kernel's outputs: nothing global is touched before (gemm_pdl.cuh)
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (wg::smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  // kTmaEpi: the epilogue buffers first (the box buffers 1024-byte aligned for the TMA store's swizzle), then the rings
  const uint32_t b_ring = smem + (S::kTmaEpi ? S::kEpiBytes : 0);  // kBStages x kBBytes
  const uint32_t raw_ring = b_ring + S::kBStages * S::kBBytes;       // kRawStages x kRaw
  const uint32_t bars = raw_ring + S::kRawStages * S::kRaw;          // 8-byte mbarriers
  const uint32_t raw_full = bars, raw_empty = raw_full + 8 * S::kRawStages;
  const uint32_t b_full = raw_empty + 8 * S::kRawStages, b_empty = b_full + 8 * S::kBStages;
  const uint32_t epi_buf0 = S::kTmaEpi ? smem : bars + S::kBarBytes;  // the MMA warps' epilogue buffers
  const int tid = threadIdx.x, lane = tid & 31;
  // Half tiles for the last round (TileWalk): one CTA per tile and 256 columns, so a half is one B scale tile. Not in
  // exact mode (its 128-column tiles would split inside a scale tile) nor in clusters.
  constexpr bool kSplitTail = S::kCluster == 1 && !S::kExact && S::BN == 2 * kHalfCols;
  static_assert(!(kSplitTail && S::kBAhead), "the B share converted ahead assumes whole tiles");
  const int first_tile = blockIdx.x / S::kCluster, tile_stride = gridDim.x / S::kCluster;
  const TileWalk<kSplitTail> walk(__ldg(prefix + E), tile_stride);
  // Tile lookups by wg::find_group_warp (stop 48; every role walks its cursor with whole warps): E64 fast wgrad +6%
  // (4 K steps per tile). The exact shapes keep the binary search: with the warp search ptxas spilled 4 bytes in the
  // MMA warps of the TMA form (216 registers).
  constexpr bool kWarpSearch = !S::kExact;
  // Cluster: rank, the peer's shared::cluster address of our offsets (same dynamic layout in both CTAs), and the
  // B rows this CTA converts (rows [kLoadBN rank, ...) of the B tile, at the same place in both CTAs' stages).
  const uint32_t rank = S::kCluster == 2 ? cluster_rank() : 0u;
  const uint32_t peer_delta = S::kCluster == 2 ? mapa(smem, rank ^ 1u) - smem : 0u;
  const BRing br{b_ring, rank * S::kLoadBN * 128, b_full, b_empty, peer_delta};

  if (tid == 0) {
    for (int s = 0; s < S::kRawStages; ++s) {
      mbar_init(raw_full + 8 * s, S::kConvThreads);
      mbar_init(raw_empty + 8 * s, S::kThreads);
    }
    for (int s = 0; s < S::kBStages; ++s) {
      mbar_init(b_full + 8 * s, S::kBFullCount);
      mbar_init(b_empty + 8 * s, S::kBEmptyCount);
    }
    if constexpr (S::kCluster == 2) fence_mbarrier_init_cluster();
  }
  if constexpr (S::kCluster == 2) cluster_sync(); else __syncthreads();

  if (tid < S::kConvThreads) {
    // ---------------------------------------------------------------- converters: loads + B dequantization
    setmaxnreg_dec<S::kConvRegs>();
    const int ct = tid;
    StepCursor load, conv;
    load.stride = tile_stride;
    load.seek<S::BN, kWarpSearch>(probs, prefix, E, walk, first_tile);
    conv = load;
    // The conversion walks the steps the loads issued, in order (the same thread issues and converts): `pending`
    // stages are loaded and not yet converted, and bit s of `half_bits` says whether raw stage s holds a step of a
    // half tile (kSplitTail), so the conversion needs no cursor of its own (whose per-tile lookups were dependent
    // global loads). Taken by the 128 x 256 fp32 kernel (E64 wgrad, 4 K steps per tile: +3-4%); CONV_SEEKS (the
    // others): the conv cursor (the pair bf16 kernel measured neutral to -4% with the walk, and the 72-register
    // converters of the exact shapes spilled with it).
    int pending = 0;
    uint32_t half_bits = 0;
    Ring<S::kRawStages> load_ring, raw;
    Ring<S::kBStages> bst;
    wg::RawLoader<LoaderShape<S>> loader;  // row pointers of the load cursor's output tile
    auto issue_load = [&]() {  // the next raw tile in step order, once its stage has been released
      if (load.kt == 0) {
        const Prob* pp = probs + load.group;
        const int tiles_m = __ldg(&pp->tiles_m);
        // B rows: the walk entry's columns; in a cluster (never split) this CTA's kLoadBN of them
        const ColumnRange cols =
            walk_columns((load.local / tiles_m) * S::BN, kSplitTail ? load.half : -1, __ldg(&pp->N));
        const int m0 = (load.local % tiles_m) * S::kTileM + static_cast<int>(rank) * S::BM;
        loader = wg::RawLoader<LoaderShape<S>>(*pp, m0, cols.begin + static_cast<int>(rank) * S::kLoadBN, cols.end,
                                               load.KT, static_cast<long long>(__ldg(&pp->K) / 2), ct);
      }
      mbar_wait(raw_empty + 8 * load_ring.stage, load_ring.phase ^ 1u);
      loader.load(raw_ring + load_ring.stage * S::kRaw, load.kt, ct);
      cp_async_mbar_arrive(raw_full + 8 * load_ring.stage);
      if constexpr (kSplitTail && !CONV_SEEKS) {
        const uint32_t bit = 1u << load_ring.stage;
        half_bits = load.half >= 0 ? (half_bits | bit) : (half_bits & ~bit);
      }
      if constexpr (!CONV_SEEKS) ++pending;
      load_ring.next();
      load.next<S::BN, kWarpSearch>(probs, prefix, E, walk);
    };
    for (int i = 0; i < S::kRawStages - 1 && load.valid(walk); ++i) issue_load();
    while (CONV_SEEKS ? conv.valid(walk) : pending > 0) {
      const uint32_t raw_st = raw_ring + raw.stage * S::kRaw;
      mbar_wait(raw_full + 8 * raw.stage, raw.phase);
      const bool half_step = kSplitTail && (CONV_SEEKS ? conv.half >= 0 : ((half_bits >> raw.stage) & 1u) != 0);
      convert_and_publish_b<S, S::kConvRPI, 0, S::kConvUnits>(raw_st, br, bst, ct, lane, ct < 32, half_step);
      mbar_arrive(raw_empty + 8 * raw.stage);
      raw.next();
      bst.next();
      if constexpr (CONV_SEEKS) conv.next<S::BN, kWarpSearch>(probs, prefix, E, walk); else --pending;
      if (load.valid(walk)) issue_load();
    }
  } else {
    // ---------------------------------------------------------------- MMA warpgroups: A fragments, wgmma, epilogue
    setmaxnreg_inc<S::kMmaRegs>();
    const int mt = tid - S::kConvThreads;
    const int wm = mt >> 7;  // rows [64 wm, 64 wm + 64) of the tile
    const int warp = (mt >> 5) & 3;
    const AFragOffsets ao = afrag_offsets(wm, mt & 127, S::kRawA + S::kRawB);
    Ring<S::kRawStages> raw;
    Ring<S::kBStages> bst;
    // kBAhead: the step whose B share this thread converts next, one step ahead of the wgmma step (the same
    // global step sequence as the converters', across output tiles), and its ring positions.
    StepCursor bnext;
    Ring<S::kRawStages> raw_b;
    Ring<S::kBStages> bst_b;
    // This step's B share: converted and published back to back, or converted (stores issued) and published (fence,
    // arrive) apart, with the A fragments decoded in between while the stores complete.
    auto convert_b_share = [&](const Ring<S::kRawStages>& r, const Ring<S::kBStages>& b, bool half_tile) {
      if constexpr (S::kMmaUnits > 0)
        convert_and_publish_b<S, S::kMmaRPI, S::kConvRows, S::kMmaUnits>(raw_ring + r.stage * S::kRaw, br, b, mt,
                                                                          lane, false, half_tile);
    };
    auto convert_b_share_rows = [&](const Ring<S::kRawStages>& r, const Ring<S::kBStages>& b, bool half_tile) {
      if constexpr (S::kMmaUnits > 0)
        convert_b_stage<S, S::kMmaRPI, S::kConvRows, S::kMmaUnits>(raw_ring + r.stage * S::kRaw, br, b, mt, half_tile);
    };
    auto publish_b_share = [&](const Ring<S::kBStages>& b) {
      if constexpr (S::kMmaUnits > 0)
        publish_b_stage<S, S::kMmaRPI, S::kConvRows, S::kMmaUnits>(br, b, mt, lane, false);
    };
    // kBAhead: the B share of step bnext, if there is one, converted and published while the current step's wgmmas
    // run (publishing it after the wait for the previous wgmmas instead was 3-7% slower: docs/gemm.md, stop 25)
    auto convert_next_b_share = [&]() {
      if (!bnext.valid(walk)) return;
      mbar_wait(raw_full + 8 * raw_b.stage, raw_b.phase);
      convert_b_share(raw_b, bst_b, false);  // (no kBAhead shape splits its last round)
      raw_b.next();
      bst_b.next();
      bnext.next<S::BN, kWarpSearch>(probs, prefix, E, walk);
    };
    if constexpr (S::kMmaUnits > 0 && S::kBAhead) {
      bnext.stride = tile_stride;
      bnext.seek<S::BN, kWarpSearch>(probs, prefix, E, walk, first_tile);
      convert_next_b_share();  // step 0's share
    }
    // The group of tile v and the fields of its Prob that the K loop needs: rounds of global loads during which no
    // wgmma of this CTA runs when they come at the tile's start. kLookAhead (stop 49; the fast 128-row kernels with
    // fp32 output, wgrad's): lookup_tile (two rounds), and for tile v + stride already while the last K step's wgmmas
    // of a short tile v (at most kLookAheadSteps K steps) run, before its epilogue (E64 wgrad, 4 K steps, +5%).
    // Longer tiles keep the lookup at their start: ahead, it delayed the release of the last B stage, and the B
    // conversion paces them (E64 fprop / dgrad -2%). In the bf16 kernels (fprop / dgrad) the code alone cost about 1%
    // (ptxas schedules their K loop differently), so they, the exact shapes (216 registers) and the 64-row shape (its
    // fp32 form spilled 40 bytes) keep the lookup of stop 48 at each tile's start.
    constexpr bool kLookAhead = !S::kExact && S::BM == 128 && OUT_F32;
    constexpr int kLookAheadSteps = 8;
    TileLookup next{};
    bool have_next = false;  // next holds tile v's lookup
    for (int v = first_tile; v < walk.count; v += tile_stride) {
      int local;
      int group;
      if constexpr (kLookAhead) {
        if (!have_next) next = lookup_tile(probs, prefix, E, walk.tile(v));
        have_next = false;
        group = next.group;
        local = next.local;
      } else {
        group = kWarpSearch ? wg::find_group_warp(prefix, E, walk.tile(v), &local)
                            : wg::find_group(prefix, E, walk.tile(v), &local);
      }
      const int half = walk.half(v);  // -1: the whole tile; 0 / 1: columns [128 half, 128 half + 128) of it
      const bool half_tile = kSplitTail && half >= 0;
      const Prob* pp = probs + group;
      const int tiles_m = kLookAhead ? next.tiles_m : __ldg(&pp->tiles_m);
      const int m0 = (local % tiles_m) * S::kTileM + static_cast<int>(rank) * S::BM;
      const ColumnRange cols =
          walk_columns((local / tiles_m) * S::BN, half_tile ? half : -1, kLookAhead ? next.N : __ldg(&pp->N));
      const int n0 = cols.begin;  // stored: columns [n0, cols.end)
      // (as StepCursor::seek: a half tile without columns has no K steps)
      const int KT = half_tile && cols.empty() ? 0 : ((kLookAhead ? next.K : __ldg(&pp->K)) + kBK - 1) / kBK;
      const uint32_t a_scale_adj = ((m0 & 127) >> 5) * 4;  // 64-row tiles: rows (m0 mod 128) of the scale tile

      if constexpr (S::kLinesEpi) {
        if (accumulate & 2) {  // (bit 1: the C prefetch; launch() sets it, NVFP4_C_PREFETCH=0 clears it)
          Prob p = *pp;
          if (half_tile) p.N = cols.end;
          if (lines_epilogue_ok(p)) prefetch_tile_c_lines<S>(p, m0 + 64 * wm + 16 * warp, n0, lane);
        }
      }
      float acc[S::R];
#pragma unroll
      for (int i = 0; i < S::R; ++i) acc[i] = 0.0f;
      if constexpr (S::kExact) {
        // Exact mode (SPEC 12.2): block j of a K step is one wgmma with scale-d = 0 into a partial fragment, then
        // acc = RN(acc + partial) in K order. The partial is exact: its 16 products are exact (fp16 operands
        // v = E2M1 * sf) and integer multiples of g = uA * uB / 4 below 2^15 g (uA, uB: the two scales' quanta,
        // powers of two; |E2M1| <= 6 = 12 halves, E4M3 significands <= 15), so the step's truncation grid
        // 2^(E - 25) (SPEC 12.6, E the largest product exponent, C = 0) is a power of two below g and cuts nothing,
        // and the sum (below 2^19 g) fits fp32. The partials' pipeline is wg::exact_blocks (gemm_exact_partials.cuh).
        uint32_t a_frag[4][4];
        float parts[2][S::R];
        for (int kt = 0; kt < KT; ++kt) {
          const uint32_t raw_st = raw_ring + raw.stage * S::kRaw;
          mbar_wait(raw_full + 8 * raw.stage, raw.phase);
          convert_b_share_rows(raw, bst, half_tile);  // this step's share of B, then the A fragments while its
          wg::fence_uregs(a_frag);                    // stores complete, then its publish
          convert_a_frags_f16(raw_st, ao, a_scale_adj, a_frag);
          publish_b_share(bst);
          mbar_arrive(raw_empty + 8 * raw.stage);
          raw.next();
          mbar_wait(b_full + 8 * bst.stage, bst.phase);
          const uint32_t b_desc = wg::sw128_desc_lo(b_ring + bst.stage * S::kBBytes);
          wg::fence_uregs(a_frag);
          // block j into a partial, added once wait_group shows it complete (wg::exact_blocks)
          wg::exact_blocks<4>(
              acc, parts,
              [&](int j, float(&part)[S::R]) {
                wgmma_m64n128k16_rs_f16(part, a_frag[j], wg::sw128_desc_block(b_desc, j), 0);
              },
              [&](int j) {  // block 3 done: the B stage and the A registers are free
                if (j == 3) {
                  release_b_stage<S>(b_empty + 8 * bst.stage, peer_delta, lane);
                  bst.next();
                }
              });
        }
        wg::fence_regs(acc);
      } else {
        uint32_t a_even[4][4], a_odd[4][4];
        int prev_b = -1;  // B stage read by the wgmmas still in flight (released once they complete)
        // One K step: A fragments of the raw stage into `cur` (the wgmmas of the previous step still read the other
        // set), then the 4 wgmmas over the fp16 B stage; wait for the previous step's wgmmas and release its B stage.
        auto step = [&](uint32_t(&cur)[4][4]) {
          const uint32_t raw_st = raw_ring + raw.stage * S::kRaw;
          mbar_wait(raw_full + 8 * raw.stage, raw.phase);
          // This step's B share (not kBAhead). 128-row tiles: its rows first, then the A fragments while its stores
          // complete, then its publish (+5% on E8 fprop with 128 x 256 tiles, stop 25). The 64-row tile keeps the
          // A fragments first: the reordered fp32 variant spilled 8 bytes and gained nothing measurable.
          constexpr bool kShareFirst = S::kMmaUnits > 0 && !S::kBAhead && S::BM == 128;
          constexpr bool kShareLast = S::kMmaUnits > 0 && !S::kBAhead && S::BM != 128;
          if constexpr (kShareFirst) convert_b_share_rows(raw, bst, half_tile);
          wg::fence_uregs(cur);
          convert_a_frags_f16(raw_st, ao, a_scale_adj, cur);
          if constexpr (kShareFirst) publish_b_share(bst);
          if constexpr (kShareLast) convert_b_share(raw, bst, half_tile);
          mbar_arrive(raw_empty + 8 * raw.stage);  // (kBAhead: the B share of this stage was converted a step ago)
          raw.next();
          mbar_wait(b_full + 8 * bst.stage, bst.phase);  // this CTA's rows stored, the peer's rows copied in
          const uint32_t b_desc = wg::sw128_desc_lo(b_ring + bst.stage * S::kBBytes);
          wg::fence_regs(acc);
          wg::fence_uregs(cur);
          wg::wgmma_fence();
#pragma unroll
          for (int j = 0; j < 4; ++j) wgmma_m64n256k16_rs_f16(acc, cur[j], wg::sw128_desc_block(b_desc, j), 1);
          wg::wgmma_commit();
          wg::fence_regs(acc);
          wg::fence_uregs(cur);
          // the next step's B share while this step's wgmmas run (its B stage was last read by the wgmmas of step
          // k - 3, released during step k - 2)
          if constexpr (S::kMmaUnits > 0 && S::kBAhead) convert_next_b_share();
          wg::wgmma_wait<1>();  // the previous step's wgmmas are done with their B stage and A registers
          if (prev_b >= 0) release_b_stage<S>(b_empty + 8 * prev_b, peer_delta, lane);
          prev_b = bst.stage;
          bst.next();
        };
        // (explicit exits: with `kt + 1 < KT` guarding the odd step, ptxas sees a path even -> even with the first
        // set still in flight and serialises every wgmma, C7513)
        for (int kt = 0; kt < KT; kt += 2) {
          step(a_even);
          if (kt + 1 == KT) break;
          step(a_odd);
        }
        // a short tile: the next tile's lookup while this tile's last wgmmas run
        if (kLookAhead && KT <= kLookAheadSteps && v + tile_stride < walk.count) {
          next = lookup_tile(probs, prefix, E, walk.tile(v + tile_stride));
          have_next = true;
        }
        wg::wgmma_wait<0>();
        wg::fence_regs(acc);
        if (prev_b >= 0) release_b_stage<S>(b_empty + 8 * prev_b, peer_delta, lane);
      }
      if constexpr (S::kStagedEpi) {
        // The staged (and the whole-line) epilogue runs in every MMA warp, also in one whose rows are all past M (it
        // then stores no row): with its __syncwarp inside a branch on the warp's rows, ptxas gave up the uniform
        // registers of the K loop's ring addresses and sank the A decode past the b_full wait (5-15% slower;
        // docs/gemm.md, stop 15). (The two branches stay separate: merged, ptxas scheduled every kernel differently.)
        Prob p = *pp;
        if (half_tile) p.N = cols.end;  // its 128 columns (accumulator columns [0, 128) are columns n0 + [0, 128))
        // (the bias test once per tile, warp-uniform: epilogue_pair)
        const uint32_t buf = epi_buf0 + (mt >> 5) * S::kEpiBufBytes;  // this warp's buffer(s)
        if (S::kTmaEpi && (accumulate & 4)) {  // (bit 2: the host encoded out_map, gemm_wgmma_pair.cu)
          if (p.bias)
            store_tile_tma_bf16<S, true>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane, &out_map);
          else
            store_tile_tma_bf16<S, false>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane, &out_map);
        } else if (staged_epilogue_ok<OUT_F32>(p, accumulate)) {
          if (p.bias)
            store_tile_staged<S, OUT_F32, true>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane);
          else
            store_tile_staged<S, OUT_F32, false>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane);
        } else if (m0 + 64 * wm < p.M) {
          wg::store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2),
                                                         n0 + 2 * (lane & 3), accumulate);
        }
      } else {  // kLinesEpi
        Prob p = *pp;
        if (half_tile) p.N = cols.end;
        if (S::kTmaEpi && (accumulate & 4)) {  // (bit 2: the host encoded out_map, gemm_wgmma_fast.cu)
          store_tile_tma<S>(acc, p, group, m0 + 64 * wm + 16 * warp, n0, epi_buf0 + (mt >> 5) * S::kEpiBufBytes, lane,
                            &out_map);
        } else if (lines_epilogue_ok(p)) {
          const uint32_t buf = epi_buf0 + (mt >> 5) * S::kEpiBufBytes;  // this warp's buffer
          store_tile_lines<S>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane, accumulate);
        } else if (m0 + 64 * wm < p.M) {
          wg::store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2),
                                                         n0 + 2 * (lane & 3), accumulate);
        }
      }
    }
    // the staged epilogue's last bulk copies have read this CTA's shared memory and written their rows
    if constexpr (S::kStagedEpi || S::kTmaEpi) {  // (and the TMA stores have read theirs)
      if (lane == 0) bulk_wait_all();
    }
  }
  // no CTA of the cluster leaves while the other may still store into its B stages or arrive on its barriers
  if constexpr (S::kCluster == 2) cluster_sync();
}

template <class S, bool OUT_F32, bool CONV_SEEKS = true>
void launch(const LaunchArgs& a, cudaStream_t s, const CUtensorMap& out_map = CUtensorMap{}) {
  static_assert(!S::kLinesEpi || OUT_F32, "the whole-line epilogue stores fp32 output");
  wg::launch_persistent<ws_gemm_kernel<S, OUT_F32, CONV_SEEKS>, S::kThreads, S::kSmem, S::kCluster>(a, s, out_map);
}

// bf16 output of a fast shape: its TMA-store form `Tma` for the plan's epilogue "tma_store" (false, launching nothing,
// when the output's row map cannot be encoded for this call), its staged form `Staged` otherwise.
template <class Staged, class Tma>
bool launch_bf16(const LaunchArgs& a, cudaStream_t s) {
  if (a.epilogue != kEpilogueTmaStore) {
    launch<Staged, false>(a, s);
    return true;
  }
  CUtensorMap map{};
  LaunchArgs b = a;
  if (!encode_rows_out_map(&b, &map)) return false;
  launch<Tma, false>(b, s, map);
  return true;
}

}  // namespace ws
}  // namespace nvfp4_gemm
