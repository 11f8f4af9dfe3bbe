// How the fused kernel (fused.cuh) fills its stages: the converters' raw K tiles (RawLoader: packed E2M1 rows of A
// and B and their swizzled scale tiles, by cp.async), B dequantized from the raw stage into wgmma's fp16 B ring
// (convert_b_rows, published by publish_b_rows; in a 2-CTA cluster also copied into the peer's ring), and A decoded
// straight into wgmma's register fragments (convert_a_frags_f16).
#pragma once

#include "common/swizzle.cuh"
#include "gemm/decode_f16.cuh"
#include "gemm/ptx.cuh"
#include "gemm/tile_list.cuh"

namespace nvfp4_gemm {
namespace fused {

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

// The converters' view of the tile for RawLoader: the raw K tile (A rows, B rows, scale tiles) is copied by the
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
// (gemm/decode_f16.cuh). r0 < ROW0 + RPI with ROW0 a multiple of RPI, so every offset is a per-thread base plus a
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
    w[i] = lds64(raw_row + RPI * 32 * i);
    sbyte[i] = lds8(scale + nvfp4::swizzle_offset<int>(r, 0, 1));
  }
#pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    if (!keep(i)) continue;
    const uint32_t s = f16dec::scale_to_f16x2(sbyte[i]);
    uint32_t lo[4], hi[4];
    f16dec::e2m1x8_to_f16(w[i].x, s, lo);
    f16dec::e2m1x8_to_f16(w[i].y, s, hi);
    const uint32_t d = out + RPI * 128 * i;
    sts128(d, lo);
    sts128(d ^ 16u, hi);
  }
}

// A operand straight into wgmma's register fragment (RS form): thread (warp v, lane l) of an MMA warpgroup holds, for
// each 16-block j of the K tile, rows 16v + l/4 and +8 of the warpgroup's 64 rows at K positions 2c, 2c+1 (chunk 0)
// and 8 + 2c, 9 + 2c (chunk 1), c = l % 4: word c of each 8-code group in the order of gemm/decode_f16.cuh, which
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
// positions 2c, 2c+1 (+8) of block j, i.e. word c of each 8-code group in the fp16 order of gemm/decode_f16.cuh.
__device__ __forceinline__ void convert_a_frags_f16(uint32_t raw, const AFragOffsets& o, uint32_t a_scale_adj,
                                                    uint32_t (&a)[4][4]) {
  const uint4 r0a = lds128(raw + o.row0), r0b = lds128(raw + o.row0 + 16);
  const uint4 r1a = lds128(raw + o.row0 + 256), r1b = lds128(raw + o.row0 + 256 + 16);
  const uint32_t s0 = lds32(raw + o.scale + a_scale_adj), s1 = lds32(raw + o.scale + a_scale_adj + kScale8);
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
  fence_proxy_async();
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
//   between the two where they can (the fence costs the fast kernels 4-6%).
// convert_and_publish_b: both, back to back (written out: the split form changed fused_pair_256x256's SASS).
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

}  // namespace fused
}  // namespace nvfp4_gemm
