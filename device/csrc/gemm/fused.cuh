// NVFP4 grouped GEMM, warp-specialised wgmma kernel (sm_90a), both modes. Fast mode: SPEC 12.4 (within the bound) and
// SPEC 12.6 (bit for bit the measured tensor-core summation, oracle.gemm(model="tensor_core")). Exact mode (kExact
// shapes): SPEC 12.2 bit for bit (oracle.gemm(model="sequential")), every 16-block an exact partial wgmma added with
// __fadd_rn in K order (see the MMA loop).
//
// Roles (one persistent CTA per SM, 128-thread warpgroups):
//   converter warpgroups (kConv of them, first): issue the cp.async loads of the raw K tiles (packed E2M1 bytes of A
//       and B + their swizzled E4M3 scale tiles) into a kRawStages ring, and dequantize B rows [0, kConvRows) of each
//       raw tile into a kBStages ring of fp16 tiles in wgmma's K-major 128-byte-swizzled layout (gemm/decode_f16.cuh);
//   MMA warpgroups (kMma = BM / 64 of them): decode their own A fragments from the raw ring into registers (RS form),
//       dequantize B rows [kConvRows, kLoadBN) (of the current step before its wgmmas, or with kBAhead of the next
//       step while the current wgmmas run), and issue wgmma.m64n256k16 over the fp16 B ring into fp32 accumulators;
//       then the epilogue.
// The two roles meet only at mbarriers, so the shared-memory traffic of the B conversion is spread over the whole
// K loop instead of one burst between two CTA barriers, and the converters run ahead into the next output tile while
// the MMA warpgroups store the previous one.
//
// 2-CTA clusters (kCluster = 2, fused_pair_256x256): both CTAs compute 128 rows each of one 256 x 256 cluster tile
// against the same 256 B rows; each loads and dequantizes only its half of them (kLoadBN = 128 rows) and bulk-copies
// the finished rows into the same place of the peer's B stage, so the B conversion per SM is halved.
//
//   raw_full[s]   completes when the converters' cp.async copies of raw stage s have landed (cp.async.mbarrier.arrive)
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

#include <cuda.h>  // CUtensorMap

#include "gemm/epilogue.cuh"
#include "gemm/exact_partials.cuh"
#include "gemm/fused_stages.cuh"
#include "gemm/out_maps.h"
#include "gemm/ptx.cuh"
#include "gemm/tile_list.cuh"
#include "gemm/wgmma_ops.cuh"

namespace nvfp4_gemm {
namespace fused {

// A configuration of the fused kernel: what differs between its algorithms. Each names every field:
//   kRows            output rows per CTA (BM; one MMA warpgroup per 64 rows)
//   kConverters      converter warpgroups (the raw loads and most of the B decode)
//   kMmaRegs, kConverterRegs   registers per thread of each role after setmaxnreg
//   kMmaUnits        B decode units (a B row's 16-block) per MMA thread and K step; the converters decode the rest
//   kClusterCtas     CTAs per thread-block cluster sharing one B tile (2: each decodes half of it for both)
//   kConvertAhead    the MMA threads decode their B share one K step ahead, while the current step's wgmmas run,
//                    off the path between their A decode and their wgmma issue (otherwise the current step's share,
//                    before its wgmmas)
//   kRawStages, kBStages   ring depths: raw K tiles (packed operands and scales), fp16 B tiles
//   kExact           exact mode (SPEC 12.2): every 16-block is one wgmma.m64n128k16 with scale-d = 0 into a partial
//                    fragment (exact: SPEC 12.6 with C = 0 and products on one grid, see the MMA loop), added to the
//                    accumulator with __fadd_rn in K order; two partials and the accumulator take 192 registers, so
//                    the tile is 128 columns wide (256 otherwise)
// Registers: setmaxnreg moves them from the converters to the MMA warpgroups inside the launch bound's allocation
// (168 per thread-slot for 384 threads): 104 + 2 x 200 = 3 x 168, 2 x 152 + 200 = 3 x 168, 72 + 2 x 216 = 3 x 168.

// fused_64x256 (few rows per group): one MMA warpgroup, two converters (the B decode bounds these tiles).
struct Fused64x256 {
  static constexpr int kRows = 64, kConverters = 2, kMmaRegs = 200, kConverterRegs = 152, kMmaUnits = 2;
  static constexpr int kClusterCtas = 1, kRawStages = 6, kBStages = 4;
  static constexpr bool kConvertAhead = false, kExact = false;
};
// fused_128x256: two MMA warpgroups, one converter; the MMA threads decode half of B (2 units each, between their
// wgmma issues), the converter the other half (4 units). 4 raw stages: its epilogue buffers take 32 KB.
struct Fused128x256 {
  static constexpr int kRows = 128, kConverters = 1, kMmaRegs = 200, kConverterRegs = 104, kMmaUnits = 2;
  static constexpr int kClusterCtas = 1, kRawStages = 4, kBStages = 4;
  static constexpr bool kConvertAhead = false, kExact = false;
};
// fused_pair_256x256: clusters of two 128 x 256 CTAs sharing the B decode: each CTA decodes 128 B rows (its converter
// 64 of them, 2 units per thread; its MMA threads the other 64, 1 unit each, one K step ahead) into its own B stage and
// bulk-copies them into the peer's.
struct FusedPair256x256 {
  static constexpr int kRows = 128, kConverters = 1, kMmaRegs = 200, kConverterRegs = 104, kMmaUnits = 1;
  static constexpr int kClusterCtas = 2, kRawStages = 6, kBStages = 4;
  static constexpr bool kConvertAhead = true, kExact = false;
};
// exact_fused: 128 x 128 tiles, two MMA warpgroups (64 x 128 each: accumulator + two partial fragments = 192
// registers) that also decode B rows [64, 128) (1 unit per thread), one converter warpgroup (rows [0, 64), 2 units).
struct ExactFused128x128 {
  static constexpr int kRows = 128, kConverters = 1, kMmaRegs = 216, kConverterRegs = 72, kMmaUnits = 1;
  static constexpr int kClusterCtas = 1, kRawStages = 6, kBStages = 4;
  static constexpr bool kConvertAhead = false, kExact = true;
};

// The output's way out of shared memory (epilogue.cuh), each through a buffer per MMA warp: bf16 rows by bulk copies
// (store_tile_staged), or fp32 whole 128-byte lines (store_tile_lines).
enum BufferedStore : int { kBulkCopyRows = 1, kWholeLines = 2 };

// Every size of a fused kernel: its configuration C, its buffered store and TMA_BOXES box buffers per MMA warp for
// the TMA-store epilogue (0: none).
template <class C, int STORE, int TMA_BOXES = 0>
struct Shape {
  static constexpr bool kBAhead = C::kConvertAhead;
  static constexpr bool kExact = C::kExact;
  static constexpr int BM = C::kRows, BN = kExact ? 128 : 256, WN = BN, R = WN / 2;
  // kCluster CTAs (a thread-block cluster along M) share one 256-column B tile: CTA rank r computes output rows
  // [m0 + BM r, m0 + BM r + BM) of a (kCluster BM) x BN cluster tile, and loads and dequantizes only B rows
  // [kLoadBN r, kLoadBN r + kLoadBN) of it into its own fp16 B stage, then bulk-copies them into the peer's
  // (publish_b_rows). The tile list's unit is the cluster tile (kTileM rows).
  static constexpr int kCluster = C::kClusterCtas;
  static constexpr int kTileM = BM * kCluster;
  static constexpr int kLoadBN = BN / kCluster;
  static constexpr int kMma = BM / 64;   // MMA warpgroups (64 rows each, all 256 columns)
  static constexpr int kConv = C::kConverters;  // converter warpgroups
  static constexpr int kThreads = 128 * (kMma + kConv);
  static constexpr int kConvThreads = 128 * kConv;
  static constexpr int kMmaRegs = C::kMmaRegs, kConvRegs = C::kConverterRegs;
  static constexpr int kRawStages = C::kRawStages, kBStages = C::kBStages;
  // The buffered store (STORE), each through a shared-memory buffer per MMA warp; both fall back to the direct
  // stores (store_tile) for the groups they cannot write:
  //   1 (kStagedEpi, bf16 output, store_tile_staged): kEpiRowBytes of each of the warp's 16 output rows per pass,
  //     bulk-copied to global memory (cp.async.bulk, async proxy);
  //   2 (kLinesEpi, fp32 output, store_tile_lines): 32 columns (128 bytes) of the 16 rows, read back so that every
  //     st.global writes 4 whole 128-byte lines.
  // kTmaEpi (box buffers per warp: 1, 2 or 4): where the host encoded a tensor map of the output (bit 2 of
  // `accumulate`), the TMA-store epilogue writes it instead, one box of 16 rows x 128 bytes per warp and chunk; the
  // buffers then lie first in shared memory, 1024-byte aligned for the box swizzle:
  //   with kLinesEpi (fp32; wgrad, no C read back, no bias; gemm/fused_fast.cu): store_tile_tma, 32 columns per box
  //     (the lines epilogue's buffer is the first box buffer);
  //   with kStagedEpi (bf16, no C read back; gemm/fused_pair.cu, gemm/fused_fast.cu): store_tile_tma_bf16, 64
  //     columns per box through a 2D map of the output's rows (fprop / dgrad [T, cols], wgrad E N rows of K); a warp
  //     whose 16 rows cross its group's last row copies them from its box buffer instead.
  static_assert(STORE == kBulkCopyRows || STORE == kWholeLines, "choose a buffered store");
  static constexpr bool kStagedEpi = STORE == kBulkCopyRows;
  static constexpr bool kLinesEpi = STORE == kWholeLines;
  static constexpr int kTmaEpi = TMA_BOXES;
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
  static constexpr int kMmaUnits = C::kMmaUnits;
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
  static_assert(kBBytes % 1024 == 0, "fp16 B stages stay 1024-byte aligned (swizzle atoms, sw128_desc_block)");
};
// The kernels. fp32 output leaves by whole lines (store_tile_lines: +5% on E64 wgrad and fp32 fprop against direct
// stores, which write 8 rows x 32 bytes per instruction; bulk copies measured 2-4% slower than direct stores for
// fp32), bf16 by bulk-copied rows (rather than 8 rows x 16 bytes, half sectors, per instruction). fused_128x256's
// fp32 form also stores wgrad's output by TMA, with two box buffers per warp (store_tile_tma, where the plan says
// "tma_store": E64 wgrad 0.61-0.63 -> 0.72-0.73 of grouped_mm); the bf16 *Tma forms store by TMA boxes through a 2D
// map of the output's rows (store_tile_tma_bf16; two 2 KB box buffers per warp in place of the staged 4.5 KB).
using Fused64x256F32 = Shape<Fused64x256, kWholeLines>;
using Fused64x256Bf16 = Shape<Fused64x256, kBulkCopyRows>;
using Fused64x256Bf16Tma = Shape<Fused64x256, kBulkCopyRows, 2>;
using Fused128x256F32 = Shape<Fused128x256, kWholeLines, 2>;
using Fused128x256Bf16 = Shape<Fused128x256, kBulkCopyRows>;
using Fused128x256Bf16Tma = Shape<Fused128x256, kBulkCopyRows, 2>;
using FusedPairF32 = Shape<FusedPair256x256, kWholeLines>;
using FusedPairBf16 = Shape<FusedPair256x256, kBulkCopyRows>;
using FusedPairBf16Tma = Shape<FusedPair256x256, kBulkCopyRows, 2>;
using ExactFusedF32 = Shape<ExactFused128x128, kWholeLines>;
using ExactFusedBf16 = Shape<ExactFused128x128, kBulkCopyRows>;

// The converter threads copy the raw stages with cp.async (RawLoader).
template <class S, bool OUT_F32, bool CONV_SEEKS = true>
__global__ void __launch_bounds__(S::kThreads, 1)
    fused_gemm_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                   const __grid_constant__ CUtensorMap out_map) {
  pdl_wait();  // the setup (or maps) kernel's outputs: nothing global is touched before (common/pdl.cuh)
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
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
  // Tile lookups by find_group_warp (every role walks its cursor with whole warps): E64 fast wgrad +6% (4 K steps per
  // tile). The exact shapes keep the binary search: their MMA warps run at 216 registers, where the warp search
  // spilled (4 bytes).
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
    // global loads). Taken by fused_128x256's fp32 form (E64 wgrad, 4 K steps per tile: +3-4%); CONV_SEEKS (the
    // others): the conv cursor (the pair's bf16 form measured neutral to -4% with the walk, and the 72-register
    // converters of the exact shapes spilled with it).
    int pending = 0;
    uint32_t half_bits = 0;
    Ring<S::kRawStages> load_ring, raw;
    Ring<S::kBStages> bst;
    RawLoader<LoaderShape<S>> loader;  // row pointers of the load cursor's output tile
    auto issue_load = [&]() {  // the next raw tile in step order, once its stage has been released
      if (load.kt == 0) {
        const Prob* pp = probs + load.group;
        const int tiles_m = __ldg(&pp->tiles_m);
        // B rows: the walk entry's columns; in a cluster (never split) this CTA's kLoadBN of them
        const ColumnRange cols =
            walk_columns((load.local / tiles_m) * S::BN, kSplitTail ? load.half : -1, __ldg(&pp->N));
        const int m0 = (load.local % tiles_m) * S::kTileM + static_cast<int>(rank) * S::BM;
        loader = RawLoader<LoaderShape<S>>(*pp, m0, cols.begin + static_cast<int>(rank) * S::kLoadBN, cols.end,
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
    // run (publishing it after the wait for the previous wgmmas instead measured 3-7% slower)
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
    // wgmma of this CTA runs when they come at the tile's start. kLookAhead (the fast 128-row kernels with
    // fp32 output, wgrad's): lookup_tile (two rounds), and for tile v + stride already while the last K step's wgmmas
    // of a short tile v (at most kLookAheadSteps K steps) run, before its epilogue (E64 wgrad, 4 K steps, +5%).
    // Longer tiles keep the lookup at their start: ahead, it delayed the release of the last B stage, and the B
    // conversion paces them (E64 fprop / dgrad -2%). In the bf16 kernels (fprop / dgrad) the code alone cost about 1%
    // (ptxas schedules their K loop differently), so they, the exact shapes (216 registers) and the 64-row shape (its
    // fp32 form spilled 40 bytes) keep the lookup (find_group_warp / find_group) at each tile's start.
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
        group = kWarpSearch ? find_group_warp(prefix, E, walk.tile(v), &local)
                            : find_group(prefix, E, walk.tile(v), &local);
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
        if (accumulate & 2) {  // (bit 1: the C prefetch; the binding sets it with bit 0)
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
        // and the sum (below 2^19 g) fits fp32. The partials' pipeline is exact_blocks (gemm/exact_partials.cuh).
        uint32_t a_frag[4][4];
        float parts[2][S::R];
        for (int kt = 0; kt < KT; ++kt) {
          const uint32_t raw_st = raw_ring + raw.stage * S::kRaw;
          mbar_wait(raw_full + 8 * raw.stage, raw.phase);
          convert_b_share_rows(raw, bst, half_tile);  // this step's share of B, then the A fragments while its
          fence_uregs(a_frag);                    // stores complete, then its publish
          convert_a_frags_f16(raw_st, ao, a_scale_adj, a_frag);
          publish_b_share(bst);
          mbar_arrive(raw_empty + 8 * raw.stage);
          raw.next();
          mbar_wait(b_full + 8 * bst.stage, bst.phase);
          const uint32_t b_desc = sw128_desc_lo(b_ring + bst.stage * S::kBBytes);
          fence_uregs(a_frag);
          // block j into a partial, added once wait_group shows it complete (exact_blocks)
          exact_blocks<4>(
              acc, parts,
              [&](int j, float(&part)[S::R]) {
                wgmma_m64n128k16_rs_f16(part, a_frag[j], sw128_desc_block(b_desc, j), 0);
              },
              [&](int j) {  // block 3 done: the B stage and the A registers are free
                if (j == 3) {
                  release_b_stage<S>(b_empty + 8 * bst.stage, peer_delta, lane);
                  bst.next();
                }
              });
        }
        fence_regs(acc);
      } else {
        uint32_t a_even[4][4], a_odd[4][4];
        int prev_b = -1;  // B stage read by the wgmmas still in flight (released once they complete)
        // One K step: A fragments of the raw stage into `cur` (the wgmmas of the previous step still read the other
        // set), then the 4 wgmmas over the fp16 B stage; wait for the previous step's wgmmas and release its B stage.
        auto step = [&](uint32_t(&cur)[4][4]) {
          const uint32_t raw_st = raw_ring + raw.stage * S::kRaw;
          mbar_wait(raw_full + 8 * raw.stage, raw.phase);
          // This step's B share (not kBAhead). 128-row tiles: its rows first, then the A fragments while its stores
          // complete, then its publish (+5% on E8 fprop with 128 x 256 tiles). The 64-row tile keeps the
          // A fragments first: the reordered fp32 variant spilled 8 bytes and gained nothing measurable.
          constexpr bool kShareFirst = S::kMmaUnits > 0 && !S::kBAhead && S::BM == 128;
          constexpr bool kShareLast = S::kMmaUnits > 0 && !S::kBAhead && S::BM != 128;
          if constexpr (kShareFirst) convert_b_share_rows(raw, bst, half_tile);
          fence_uregs(cur);
          convert_a_frags_f16(raw_st, ao, a_scale_adj, cur);
          if constexpr (kShareFirst) publish_b_share(bst);
          if constexpr (kShareLast) convert_b_share(raw, bst, half_tile);
          mbar_arrive(raw_empty + 8 * raw.stage);  // (kBAhead: the B share of this stage was converted a step ago)
          raw.next();
          mbar_wait(b_full + 8 * bst.stage, bst.phase);  // this CTA's rows stored, the peer's rows copied in
          const uint32_t b_desc = sw128_desc_lo(b_ring + bst.stage * S::kBBytes);
          fence_regs(acc);
          fence_uregs(cur);
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < 4; ++j) wgmma_m64n256k16_rs_f16(acc, cur[j], sw128_desc_block(b_desc, j), 1);
          wgmma_commit();
          fence_regs(acc);
          fence_uregs(cur);
          // the next step's B share while this step's wgmmas run (its B stage was last read by the wgmmas of step
          // k - 3, released during step k - 2)
          if constexpr (S::kMmaUnits > 0 && S::kBAhead) convert_next_b_share();
          wgmma_wait<1>();  // the previous step's wgmmas are done with their B stage and A registers
          if (prev_b >= 0) release_b_stage<S>(b_empty + 8 * prev_b, peer_delta, lane);
          prev_b = bst.stage;
          bst.next();
        };
        k_loop_two_sets(KT, a_even, a_odd, step);
        // a short tile: the next tile's lookup while this tile's last wgmmas run
        if (kLookAhead && KT <= kLookAheadSteps && v + tile_stride < walk.count) {
          next = lookup_tile(probs, prefix, E, walk.tile(v + tile_stride));
          have_next = true;
        }
        wgmma_wait<0>();
        fence_regs(acc);
        if (prev_b >= 0) release_b_stage<S>(b_empty + 8 * prev_b, peer_delta, lane);
      }
      if constexpr (S::kStagedEpi) {
        // The staged (and the whole-line) epilogue runs in every MMA warp, also in one whose rows are all past M (it
        // then stores no row): with its __syncwarp inside a branch on the warp's rows, ptxas gave up the uniform
        // registers of the K loop's ring addresses and sank the A decode past the b_full wait (5-15% slower).
        // (The two branches stay separate: merged, ptxas scheduled every kernel differently.)
        Prob p = *pp;
        if (half_tile) p.N = cols.end;  // its 128 columns (accumulator columns [0, 128) are columns n0 + [0, 128))
        // (the bias test once per tile, warp-uniform: epilogue_pair)
        const uint32_t buf = epi_buf0 + (mt >> 5) * S::kEpiBufBytes;  // this warp's buffer(s)
        if (S::kTmaEpi && (accumulate & 4)) {  // (bit 2: the host encoded out_map, launch_bf16)
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
          store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2),
                                                         n0 + 2 * (lane & 3), accumulate);
        }
      } else {  // kLinesEpi
        Prob p = *pp;
        if (half_tile) p.N = cols.end;
        if (S::kTmaEpi && (accumulate & 4)) {  // (bit 2: the host encoded out_map, gemm/fused_fast.cu)
          store_tile_tma<S>(acc, p, group, m0 + 64 * wm + 16 * warp, n0, epi_buf0 + (mt >> 5) * S::kEpiBufBytes, lane,
                            &out_map);
        } else if (lines_epilogue_ok(p)) {
          const uint32_t buf = epi_buf0 + (mt >> 5) * S::kEpiBufBytes;  // this warp's buffer
          store_tile_lines<S>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane, accumulate);
        } else if (m0 + 64 * wm < p.M) {
          store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2),
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
  launch_persistent<fused_gemm_kernel<S, OUT_F32, CONV_SEEKS>, S::kThreads, S::kSmem, S::kCluster>(a, s, out_map);
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

}  // namespace fused
}  // namespace nvfp4_gemm
