// Exact-mode NVFP4 grouped GEMM over an fp16 copy of the B operand (SPEC 12.2 bit for bit, oracle.gemm(model=
// "sequential")); docs/gemm.md, stop 30. The B plane was decoded beforehand by gemm_dequant.cu's dequant_plane_kernel
// into fp16 v = E2M1 x E4M3 (exact and normal, SPEC 12.6) in the K order of gemm_decode_f16.cuh (0 2 4 6 1 3 5 7
// inside each 8-code group, the order of the A fragments below), and each group's Prob::b points into that copy (row
// pitch Prob::K elements). A stays packed (Prob::a, Prob::sa).
//
// Why: the fused exact kernel (gemm_wgmma_ws.cuh, kExact) is issue-bound, about 1,333 instructions per K step and
// scheduler of which 512 are the partial adds (docs/gemm.md, stop 17); its B conversion and publish are most of the
// rest. Here B arrives converted, so the MMA warps issue only the A fragment decode, the wgmmas and the adds. A stays
// packed because the loads are the other limit: a version with both operands as fp16 copies (32 KB per 128 x 128 x 64
// step) ran at ~6 TB/s of L2-to-SM traffic, about what CUTLASS's GEMM reaches; packed A makes it 20.5 KB per step.
//
// Roles (one persistent CTA per SM, three 128-thread warpgroups):
//   loader warpgroup (first): per K step, cp.async copies of the raw A tile (rows [m0, m0 + 128): 32 packed bytes each
//       and the 512-byte swizzled scale tile, wg::RawLoader: rows past M, bytes past K and scale tiles past the plane
//       are zero-filled) into a raw ring, and of the fp16 B tile (rows [n0, n0 + 128) x 64 K elements) into a B ring in
//       wgmma's K-major 128-byte-swizzled layout. B pieces past K are zero-filled (src-size 0); B rows past N are not
//       copied at all: their stale contents only reach accumulator columns that the epilogue does not store (SPEC
//       12.6: output elements are independent).
//   MMA warpgroups (2, rows [64 wm, 64 wm + 64)): decode their A fragments from the raw stage into registers (RS form,
//       ws::convert_a_frags_f16), then per 16-block one wgmma.m64n128k16 with scale-d = 0 into a partial fragment,
//       added to the accumulator with __fadd_rn in K order (SPEC 12.2); then the epilogue (gemm_wgmma_ws.cuh's
//       whole-line fp32 / staged bf16 epilogues, the direct stores where those cannot run).
//
//   full[s]   completes when the loaders' copies of stage s (raw A and fp16 B) have landed (cp.async.mbarrier.arrive
//             .noinc, 128 threads)
//   empty[s]  the MMA warps have read raw stage s and their wgmmas reading B stage s have completed (one arrival per
//             MMA warp)
// Both roles walk the same list of K steps (ws::StepCursor over the setup kernel's tile list), so stage indices and
// phases agree without further communication.
#pragma once

#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {
namespace xf16 {

using wg::kBK;

template <int STAGES_, int EPI_>
struct Shape {
  static constexpr int BM = 128, BN = 128, WN = BN, R = WN / 2;  // R: fp32 accumulator registers per thread
  // the raw A stage as ws::convert_a_frags_f16 / wg::RawLoader see it: A rows (32 B each), no B rows, the A scale tile
  static constexpr int kRawA = BM * 32, kRawB = 0, kSA = 512, kSB = 0;
  static constexpr int kRaw = kRawA + kSA;
  static constexpr int kLoadThreads = 128;
  static constexpr int kMma = BM / 64;
  static constexpr int kThreads = 128 * (kMma + 1);
  static constexpr int kCluster = 1;  // (ws::release_b_stage)
  // per MMA thread: accumulator + two partial fragments (192), the A fragments (16) and addressing; 2 x 224 + 56 =
  // 3 x 168 (with 216 / 72 the fp32 kernel spilled 24 bytes)
  static constexpr int kMmaRegs = 224, kLoaderRegs = 56;
  static constexpr int kStages = STAGES_;
  static constexpr int kBBytes = BN * kBK * 2;  // one fp16 B stage: 128 rows x 64 fp16 = 16 KB
  // epilogue buffers, as ws::Shape (1: staged bf16, store_tile_staged; 2: whole-line fp32, store_tile_lines)
  static_assert(EPI_ == 1 || EPI_ == 2, "choose an epilogue");
  static constexpr bool kStagedEpi = EPI_ == 1, kLinesEpi = EPI_ == 2;
  static constexpr int kEpiRowBytes = 256;
  static constexpr int kEpiBufBytes = kLinesEpi ? 16 * 128 : 16 * (kEpiRowBytes + 32);
  static constexpr int kEpiBytes = 4 * kMma * kEpiBufBytes;
  static constexpr int kBarBytes = 8 * 2 * kStages;
  static constexpr int kSmem = kStages * (kBBytes + kRaw) + kBarBytes + kEpiBytes + 1024;
  static_assert(kSmem <= 227 * 1024, "shared memory");
  static_assert(kMma * kMmaRegs + kLoaderRegs <= (kMma + 1) * (65536 / kThreads / 8 * 8), "setmaxnreg budget");
};
using ShapeF32 = Shape<8, 2>;   // fp32 output: 8 stages (164 KB) + 16 KB of line buffers
using ShapeBf16 = Shape<8, 1>;  // bf16 output: 8 stages (164 KB) + 36 KB of staging buffers

// The loader warpgroup's view of the raw A tile for wg::RawLoader (no raw B rows).
template <class S>
struct ALoaderShape {
  static constexpr int BM = S::BM, BN = 0, kThreads = S::kLoadThreads;
  static constexpr int kRawA = S::kRawA, kRawB = 0, kSA = S::kSA, kSB = 0;
  static constexpr int kChunks16 = (BM * 2 + kThreads - 1) / kThreads;
  static constexpr int kChunks8 = BM * 4 / kThreads;
  static_assert(BM * 4 % kThreads == 0 && kSA / 16 <= kThreads, "copy chunks divide evenly");
};

// One loader thread's copies of the fp16 B tile of a tile's K steps. Thread t copies the 16-byte piece q = t % 8 (K
// positions [8 q, 8 q + 8) of the K tile) of rows r0 + 16 i (r0 = t / 8, i < 8). In the swizzled stage, row r's piece q
// sits at r * 128 + ((q ^ (r % 8)) << 4) (wgmma's K-major 128-byte swizzle), and r % 8 = r0 % 8 for all of a thread's
// rows, so one swizzled offset serves them all.
struct F16Loader {
  const __half* b;     // row n0 + r0, piece q, K tile 0
  long long step16;    // 16 rows, in elements (16 K)
  int rows;            // this thread's rows inside the problem: i < rows
  int k_pieces;        // K / 8: piece q of K tile kt has data when 8 kt + q < k_pieces
  uint32_t dst;        // r0 * 128 + the swizzled piece offset

  F16Loader() = default;
  __device__ __forceinline__ F16Loader(const Prob& p, int n0, int t) {
    const int q = t & 7, r0 = t >> 3;
    const long long K = p.K;
    b = reinterpret_cast<const __half*>(p.b) + (n0 + r0) * K + 8 * q;
    step16 = 16 * K;
    rows = max(0, min(8, (p.N - n0 - r0 + 15) / 16));
    k_pieces = p.K / 8;
    dst = r0 * 128 + ((q ^ (r0 & 7)) << 4);
  }
  __device__ __forceinline__ void load(uint32_t stage, int kt, int t) const {
    const bool in_k = 8 * kt + (t & 7) < k_pieces;
    const long long off = in_k ? 64LL * kt : 0;  // (src-size 0 reads nothing; the address stays inside the row)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < rows) wg::cp_async16(stage + dst + 2048 * i, b + i * step16 + off, in_k ? 16 : 0);
  }
};

template <class S, bool OUT_F32>
__global__ void __launch_bounds__(S::kThreads, 1)
    exact_f16_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate) {
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (wg::smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t b_ring = smem;                                      // kStages x kBBytes (1024-byte aligned)
  const uint32_t raw_ring = b_ring + S::kStages * S::kBBytes;        // kStages x kRaw
  const uint32_t bars = raw_ring + S::kStages * S::kRaw;
  const uint32_t full = bars, empty = bars + 8 * S::kStages;
  const int tid = threadIdx.x, lane = tid & 31;
  const int first_tile = blockIdx.x, tile_stride = gridDim.x;
  const ws::TileWalk<false> walk(__ldg(prefix + E), tile_stride);

  if (tid == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      ws::mbar_init(full + 8 * s, S::kLoadThreads);
      ws::mbar_init(empty + 8 * s, 4 * S::kMma);
    }
  }
  __syncthreads();

  if (tid < S::kLoadThreads) {
    // ------------------------------------------------------------------------------------------------ loaders
    ws::setmaxnreg_dec<S::kLoaderRegs>();
    ws::StepCursor cur;
    cur.stride = tile_stride;
    cur.seek<S::BN>(probs, prefix, E, walk, first_tile);
    ws::Ring<S::kStages> st;
    F16Loader ldb;  // both set at every tile's first K step
    wg::RawLoader<ALoaderShape<S>> lda;
    while (cur.valid(walk)) {
      if (cur.kt == 0) {
        const Prob& p = probs[cur.group];
        const int tiles_m = p.tiles_m, m0 = (cur.local % tiles_m) * S::BM, n0 = (cur.local / tiles_m) * S::BN;
        ldb = F16Loader(p, n0, tid);
        lda = wg::RawLoader<ALoaderShape<S>>(p, m0, 0, 0, cur.KT, static_cast<long long>(p.K / 2), tid);
      }
      ws::mbar_wait(empty + 8 * st.stage, st.phase ^ 1u);
      lda.load(raw_ring + st.stage * S::kRaw, cur.kt, tid);
      ldb.load(b_ring + st.stage * S::kBBytes, cur.kt, tid);
      ws::cp_async_mbar_arrive(full + 8 * st.stage);
      st.next();
      cur.next<S::BN>(probs, prefix, E, walk);
    }
  } else {
    // ------------------------------------------------------------------------------------------------ MMA warpgroups
    ws::setmaxnreg_inc<S::kMmaRegs>();
    const int mt = tid - S::kLoadThreads;
    const int wm = mt >> 7;  // rows [64 wm, 64 wm + 64) of the tile
    const int warp = (mt >> 5) & 3;
    const ws::AFragOffsets ao = ws::afrag_offsets(wm, mt & 127, S::kRawA + S::kRawB);
    ws::Ring<S::kStages> st;
    for (int v = first_tile; v < walk.count; v += tile_stride) {
      int local;
      const int group = wg::find_group(prefix, E, v, &local);
      const Prob* pp = probs + group;
      const int tiles_m = __ldg(&pp->tiles_m);
      const int m0 = (local % tiles_m) * S::BM, n0 = (local / tiles_m) * S::BN;
      const int KT = (__ldg(&pp->K) + kBK - 1) / kBK;

      // SPEC 12.2: block j of a K step is one wgmma with scale-d = 0 into a partial fragment (exact: the products of
      // fp16 v = E2M1 * sf are exact integer multiples of g = uA * uB / 4 below 2^15 g, so SPEC 12.6's truncation
      // grid with C = 0 cuts nothing and the sum fits fp32; gemm_wgmma_ws.cuh has the argument), then
      // acc = RN(acc + partial) in K order. Two partials alternate: block j's wgmma is issued, then block j - 1 is
      // added once wait_group 1 shows its wgmma complete. Block 3 is added after wait_group 0 at the end of the step:
      // carrying it into the next step (added after that step's block 0 is issued) made ptxas serialise every wgmma
      // (C7514: it does not follow wait_group across the loop's back edge); the other MMA warpgroup's wgmmas keep the
      // tensor pipe busy meanwhile.
      float acc[S::R], part0[S::R], part1[S::R];
      uint32_t a_frag[4][4];
#pragma unroll
      for (int i = 0; i < S::R; ++i) acc[i] = 0.0f;
      auto add_partial = [&](float(&part)[S::R]) {
        wg::fence_regs(part);  // (after the wait: the adds read the completed partial)
#pragma unroll
        for (int i = 0; i < S::R; ++i) acc[i] = __fadd_rn(acc[i], part[i]);
      };
      for (int kt = 0; kt < KT; ++kt) {
        ws::mbar_wait(full + 8 * st.stage, st.phase);
        wg::fence_uregs(a_frag);
        ws::convert_a_frags_f16(raw_ring + st.stage * S::kRaw, ao, 0u, a_frag);  // (128-row tiles: no scale offset)
        const uint32_t db = wg::sw128_desc_lo(b_ring + st.stage * S::kBBytes);
        wg::fence_uregs(a_frag);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float(&part)[S::R] = (j & 1) ? part1 : part0;
          wg::wgmma_fence();  // `part` was read by the adds of block j - 2; a_frag was just written
          wgmma_m64n128k16_rs_f16(part, a_frag[j], wg::sw128_desc_block(db, j), 0);
          wg::wgmma_commit();
          wg::fence_regs(part);
          if (j > 0) {
            wg::wgmma_wait<1>();  // block j - 1 is complete
            add_partial((j & 1) ? part0 : part1);
          }
        }
        wg::wgmma_wait<0>();  // block 3 is complete: the B stage and the A registers are free (raw A was read above)
        ws::release_b_stage<S>(empty + 8 * st.stage, 0u, lane);
        st.next();
        add_partial(part1);
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
