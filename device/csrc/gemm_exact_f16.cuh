// Exact-mode NVFP4 grouped GEMM over fp16 copies of the operands (SPEC 12.2 bit for bit, oracle.gemm(model=
// "sequential")); docs/gemm.md, stop 30. The operand planes were decoded beforehand by gemm_dequant.cu's
// dequant_plane_kernel into fp16 v = E2M1 x E4M3 (exact and normal, SPEC 12.6; natural K order, each plane in its own
// layout), and each group's Prob::a / Prob::b point into those copies (row pitch Prob::K fp16 elements).
//
// Why: the fused exact kernel (gemm_wgmma_ws.cuh, kExact) is issue-bound, about 1,333 instructions per K step and
// scheduler of which 512 are the partial adds (docs/gemm.md, stop 17). Here the MMA warps issue only the wgmmas, the
// adds and the ring bookkeeping: no A decode, no B conversion, no B publish. The decode moved into a separate
// bandwidth-bound pass (about 4 bytes written per packed byte), which pays when each operand element is reused by
// many output rows or columns.
//
// Roles (one persistent CTA per SM, three 128-thread warpgroups):
//   loader warpgroup (first): each K step's fp16 tiles, A rows [m0, m0 + 128) and B rows [n0, n0 + 128) x 64 K
//       elements, into a kStages ring in wgmma's K-major 128-byte-swizzled layout, either as two TMA boxes issued by
//       one thread through the group's tensor maps (stop 33) or by cp.async copies of all 128 threads. Pieces past K
//       are zero-filled; rows past M or N are zero-filled (TMA) or not copied (cp.async, their stale contents): either
//       way they only reach accumulator rows / columns that the epilogue does not store (SPEC 12.6: output elements
//       are independent).
//   MMA warpgroups (2, rows [64 wm, 64 wm + 64)): per 16-block one wgmma.m64n128k16 (SS form) with scale-d = 0 into a
//       partial fragment, added to the accumulator with __fadd_rn in K order (SPEC 12.2); then the epilogue
//       (gemm_wgmma_ws.cuh's whole-line fp32 / staged bf16 epilogues, the direct stores where those cannot run).
//
//   full[s]   completes when the loaders' copies of stage s have landed (cp.async.mbarrier.arrive.noinc, 128 threads)
//   empty[s]  the wgmmas that read stage s have completed (one arrival per MMA warp)
// Both roles walk the same list of K steps (ws::StepCursor over the setup kernel's tile list), so stage indices and
// phases agree without further communication.
#pragma once

#include "gemm_exact_partials.cuh"
#include "gemm_group_maps.cuh"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {
namespace xf16 {

using wg::kBK;

// Two MMA warpgroups (rows [64 wm, 64 wm + 64), all 128 columns) of 216 registers each (accumulator + two partial
// fragments = 192) and one loader warpgroup of 72 (3 x 168). Four MMA warpgroups of 64 x 64 (twice the independent
// wgmma -> adds chains, 112 registers each) measured 11% slower on E8 fprop (docs/gemm.md, stop 30).
template <int STAGES_, int EPI_>
struct Shape {
  static constexpr int BM = 128, BN = 128, WN = BN, R = WN / 2;  // R: fp32 accumulator registers per thread
  static constexpr int kMma = BM / 64;
  static constexpr int kThreads = 128 * (kMma + 1);
  static constexpr int kLoaderThreads = 128;
  static constexpr int kCluster = 1;  // (ws::release_b_stage)
  static constexpr int kMmaRegs = 216, kLoaderRegs = 72;
  static constexpr int kStages = STAGES_;
  static constexpr int kTileBytes = 128 * kBK * 2;       // 128 rows x 64 fp16 = 16 KB
  static constexpr int kStageBytes = 2 * kTileBytes;     // the A tile, then the B tile
  // epilogue buffers, as ws::Shape (1: staged bf16, store_tile_staged; 2: whole-line fp32, store_tile_lines)
  static_assert(EPI_ == 1 || EPI_ == 2, "choose an epilogue");
  static constexpr bool kStagedEpi = EPI_ == 1, kLinesEpi = EPI_ == 2;
  static constexpr int kEpiRowBytes = 256;
  static constexpr int kEpiBufBytes = kLinesEpi ? 16 * 128 : 16 * (kEpiRowBytes + 32);
  static constexpr int kEpiBytes = 4 * kMma * kEpiBufBytes;
  static constexpr int kBarBytes = 8 * 2 * kStages;
  static constexpr int kSmem = kStages * kStageBytes + kBarBytes + kEpiBytes + 1024;
  static_assert(kSmem <= 227 * 1024, "shared memory");
  static_assert(kMma * kMmaRegs + kLoaderRegs <= (kMma + 1) * (65536 / kThreads / 8 * 8), "setmaxnreg budget");
};
using ShapeF32 = Shape<6, 2>;   // fp32 output: 6 stages (192 KB) + 16 KB of line buffers
using ShapeBf16 = Shape<5, 1>;  // bf16 output: 5 stages (160 KB) + 36 KB of staging buffers

// One loader thread's copies of a tile's K steps. Thread t copies the 16-byte piece q = t % 8 (K elements
// [8 q, 8 q + 8) of the K tile) of rows r0 + 16 i (r0 = t / 8, i < 8) of the A tile and of the B tile. In the swizzled
// stage, row r's piece q sits at r * 128 + ((q ^ (r % 8)) << 4) (wgmma's K-major 128-byte swizzle), and r % 8 = r0 % 8
// for all of a thread's rows, so one swizzled offset serves them all.
struct F16Loader {
  const __half* a;  // row m0 + r0 (n0 + r0), piece q, K tile 0
  const __half* b;
  long long step16;  // 16 rows, in elements (16 K)
  int rows_a, rows_b;  // this thread's rows inside the problem: i < rows_a (A), i < rows_b (B)
  int k_pieces;        // K / 8: piece q of K tile kt has data when 8 (8 kt + q) < K, i.e. 8 kt + q < k_pieces
  uint32_t dst;        // r0 * 128 + swizzled piece offset

  F16Loader() = default;
  __device__ __forceinline__ F16Loader(const Prob& p, int m0, int n0, int t) {
    const int q = t & 7, r0 = t >> 3;
    const long long K = p.K;
    a = reinterpret_cast<const __half*>(p.a) + (m0 + r0) * K + 8 * q;
    b = reinterpret_cast<const __half*>(p.b) + (n0 + r0) * K + 8 * q;
    step16 = 16 * K;
    rows_a = max(0, min(8, (p.M - m0 - r0 + 15) / 16));
    rows_b = max(0, min(8, (p.N - n0 - r0 + 15) / 16));
    k_pieces = p.K / 8;
    dst = r0 * 128 + ((q ^ (r0 & 7)) << 4);
  }
  // K tile kt into the stage's A tile at `a_tile` and B tile at `b_tile`
  __device__ __forceinline__ void load(uint32_t a_tile, uint32_t b_tile, int kt, int t) const {
    const int piece = 8 * kt + (t & 7);
    const bool in_k = piece < k_pieces;
    const long long off = in_k ? 64LL * kt : 0;  // (src-size 0 reads nothing; the address stays inside the row)
    const int bytes = in_k ? 16 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < rows_a) wg::cp_async16(a_tile + dst + 2048 * i, a + i * step16 + off, bytes);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < rows_b) wg::cp_async16(b_tile + dst + 2048 * i, b + i * step16 + off, bytes);
  }
};

// The TMA loader's tensor maps: two per group (group_maps[2 g]: A, [2 g + 1]: B), built on the device by
// gemm_exact_f16.cu's exact_maps_kernel from the setup kernel's problems (gemm_group_maps.cuh), so every group has its
// own pitch (wgrad's columnwise copies: 2 roundup(m_g, 16) bytes per row). Each is the copy of one operand of one
// group as a {K, rows} fp16 matrix (rows = M for A, N for B), box {64, 128} with the 128-byte swizzle: one box is one
// K step's 128-row tile in the layout F16Loader writes, and the parts of a box past K or past the group's rows are
// zero-filled.
// TMA: one loader thread issues each stage's two boxes through the group's maps (full[s] counts its one arrival and
// the boxes' bytes); the other loader threads leave. Otherwise the 128 loader threads copy with cp.async (F16Loader)
// and group_maps is not read.
template <class S, bool OUT_F32, bool TMA>
__global__ void __launch_bounds__(S::kThreads, 1)
    exact_f16_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                     const CUtensorMap* __restrict__ group_maps) {
  pdl_wait();  // the retarget / maps kernel's outputs: nothing global is touched before (gemm_pdl.cuh)
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (wg::smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t ring = smem;                                        // kStages x kStageBytes
  const uint32_t bars = ring + S::kStages * S::kStageBytes;
  const uint32_t full = bars, empty = bars + 8 * S::kStages;
  const int tid = threadIdx.x, lane = tid & 31;
  const int first_tile = blockIdx.x, tile_stride = gridDim.x;
  const ws::TileWalk<false> walk(__ldg(prefix + E), tile_stride);

  ws::init_ring_barriers<S::kStages>(full, empty, TMA ? 1 : S::kLoaderThreads, 4 * S::kMma);

  if (tid < S::kLoaderThreads) {
    // ------------------------------------------------------------------------------------------------ loaders
    ws::setmaxnreg_dec<S::kLoaderRegs>();
    if (TMA && tid != 0) return;
    ws::StepCursor cur;
    cur.stride = tile_stride;
    cur.seek<S::BN>(probs, prefix, E, walk, first_tile);
    ws::Ring<S::kStages> st;
    F16Loader ld;  // cp.async: set at every tile's first K step
    const CUtensorMap* map_a = nullptr;  // TMA: the same
    int m0 = 0, n0 = 0;
    while (cur.valid(walk)) {
      if (cur.kt == 0) {
        const Prob& p = probs[cur.group];
        const int tiles_m = p.tiles_m;
        m0 = (cur.local % tiles_m) * S::BM;
        n0 = (cur.local / tiles_m) * S::BN;
        if constexpr (TMA) {
          map_a = group_maps + 2 * cur.group;
          gmap::acquire_group_map(map_a);  // written by exact_maps_kernel (generic proxy), read here by TMA
          gmap::acquire_group_map(map_a + 1);
        } else {
          ld = F16Loader(p, m0, n0, tid);
        }
      }
      ws::mbar_wait(empty + 8 * st.stage, st.phase ^ 1u);
      const uint32_t stage = ring + st.stage * S::kStageBytes;
      const uint32_t bar = full + 8 * st.stage;
      if constexpr (TMA) {
        ws::mbar_arrive_expect_tx(bar, S::kStageBytes);
        ws::tma_load_2d(stage, map_a, bar, 64 * cur.kt, m0);
        ws::tma_load_2d(stage + S::kTileBytes, map_a + 1, bar, 64 * cur.kt, n0);
      } else {
        ld.load(stage, stage + S::kTileBytes, cur.kt, tid);
        ws::cp_async_mbar_arrive(bar);
      }
      st.next();
      cur.next<S::BN>(probs, prefix, E, walk);
    }
  } else {
    // ------------------------------------------------------------------------------------------------ MMA warpgroups
    ws::setmaxnreg_inc<S::kMmaRegs>();
    const int mt = tid - S::kLoaderThreads;
    const int wm = mt >> 7;  // rows [64 wm, 64 wm + 64) of the tile
    const int warp = (mt >> 5) & 3;
    ws::Ring<S::kStages> st;
    for (int v = first_tile; v < walk.count; v += tile_stride) {
      int local;
      const int group = wg::find_group(prefix, E, v, &local);
      const Prob* pp = probs + group;
      const int tiles_m = __ldg(&pp->tiles_m);
      const int m0 = (local % tiles_m) * S::BM, n0 = (local / tiles_m) * S::BN;
      const int KT = (__ldg(&pp->K) + kBK - 1) / kBK;
      if constexpr (S::kLinesEpi) {
        if (accumulate & 2) {  // C's lines into L2 while the K loop runs (ws::prefetch_tile_c_lines; a hint)
          const Prob p = *pp;
          if (ws::lines_epilogue_ok(p)) ws::prefetch_tile_c_lines<S>(p, m0 + 64 * wm + 16 * warp, n0, lane);
        }
      }

      // SPEC 12.2: block j of a K step is one wgmma with scale-d = 0 into a partial fragment (exact: the products of
      // fp16 v = E2M1 * sf are exact integer multiples of g = uA * uB / 4 below 2^15 g, so SPEC 12.6's truncation
      // grid with C = 0 cuts nothing and the sum fits fp32; gemm_wgmma_ws.cuh has the argument), then
      // acc = RN(acc + partial) in K order, through wg::exact_blocks (gemm_exact_partials.cuh).
      float acc[S::R], parts[2][S::R];
#pragma unroll
      for (int i = 0; i < S::R; ++i) acc[i] = 0.0f;
      for (int kt = 0; kt < KT; ++kt) {
        ws::mbar_wait(full + 8 * st.stage, st.phase);
        const uint32_t stage = ring + st.stage * S::kStageBytes;
        const uint32_t da = wg::sw128_desc_lo(stage + wm * 64 * 128), db = wg::sw128_desc_lo(stage + S::kTileBytes);
        wg::exact_blocks<4>(
            acc, parts,
            [&](int j, float(&part)[S::R]) {
              wgmma_m64n128k16_ss_f16(part, wg::sw128_desc_block(da, j), wg::sw128_desc_block(db, j), 0);
            },
            [&](int j) {  // block 3 done: the stage is free
              if (j == 3) {
                ws::release_b_stage<S>(empty + 8 * st.stage, 0u, lane);
                st.next();
              }
            });
      }
      wg::fence_regs(acc);

      // epilogue (every MMA warp runs it, also one whose rows lie past M: see gemm_wgmma_ws.cuh, stop 15)
      const Prob p = *pp;
      const uint32_t buf = bars + S::kBarBytes + (mt >> 5) * S::kEpiBufBytes;  // this warp's buffer
      if constexpr (S::kStagedEpi) {
        if (ws::staged_epilogue_ok<OUT_F32>(p, accumulate)) {
          ws::store_tile_staged<S, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane);
        } else if (m0 + 64 * wm < p.M) {
          wg::store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2), n0 + 2 * (lane & 3),
                                         accumulate);
        }
      } else {
        if (ws::lines_epilogue_ok(p)) {
          ws::store_tile_lines<S>(acc, p, m0 + 64 * wm + 16 * warp, n0, buf, lane, accumulate);
        } else if (m0 + 64 * wm < p.M) {
          wg::store_tile<S::WN, OUT_F32>(acc, p, m0 + 64 * wm + 16 * warp + (lane >> 2), n0 + 2 * (lane & 3),
                                         accumulate);
        }
      }
    }
    if constexpr (S::kStagedEpi) {
      if (lane == 0) ws::bulk_wait_all();  // the last bulk copies have read the buffers and written their rows
    }
  }
}

}  // namespace xf16
}  // namespace nvfp4_gemm
