// Tile -> group resolution and per-group buffer offsets (SPEC 6, 8, 9).
//
// Both the amax and the quantize kernels cut X into tiles of kTileM (=128) rows by one tile width of columns.
// A tile never straddles two groups: group g owns ceil(m_g/128) row tiles, and the prefix sum of those counts
// (offset table row kOffTiles) maps a row-tile index back to its group by a 32-way warp search. For a single tensor
// the table is absent (offs == nullptr) and the one group is the whole tensor.
#pragma once

#include <cstdint>

#include "common/warp_search.cuh"
#include "quantize/numerics.cuh"

namespace nvfp4 {

constexpr int kTileM = 128;  // rows (tokens) per tile; also the swizzle row-block, so padding stays in-tile

// Rows of the device offset table, each int64 [E+1] with a leading 0 (SPEC 9).
enum OffsetRow : int {
  kOffRows = 0,      // first row of each group (prefix sum of the splits)
  kOffTiles = 1,     // first row tile of each group (prefix sum of ceil(m_g/128))
  kOffRowData = 2,   // rowwise data bytes, m_g*K/2
  kOffRowScale = 3,  // rowwise scales, roundup(m_g,128)*roundup(K/16,4)
  kOffColData = 4,   // columnwise data bytes, K*roundup(m_g,16)/2
  kOffColScale = 5,  // columnwise scales, roundup(K,128)*roundup(ceil(m_g/16),4)
  kNumOffRows = 6
};

// Where one group lives; everything a tile needs to address its group's planes.
struct GroupView {
  int g;                // group index (0 for a single tensor)
  int64_t m;            // rows of this group (m_g)
  int64_t row0;         // first row of the group inside X
  int64_t m0;           // first group-local row of this tile
  int64_t row_data;     // byte offsets of the group's regions in the flat buffers
  int64_t row_scale;
  int64_t col_data;
  int64_t col_scale;
  int64_t first_row;    // row0 + m0: the tile's first row inside X
  int rows;             // min(m - m0, kTileM): the tile's rows of the group (> 0)
};

// One row tile of a grouped call, written by the setup kernel (quantize/grouped_setup.cu) so that a CTA knows where
// its tile lies in X after one load instead of a search of the tile prefix: x, y = low and high words of the tile's
// first row inside X, z = its rows of the group (1..128), w = the group.
using TileRecord = int4;

// Group g's place in X (v.g, row0, m) and its regions in the flat buffers (the four byte offsets), from the offset
// table (SPEC 9.2). (I: the caller's index type, int or int64_t; the callers' code is the one they had inline.)
template <typename I>
__device__ __forceinline__ void load_group_rows(const int64_t* __restrict__ offs, int E, I g, GroupView& v) {
  const int64_t* roff = offs + (int64_t)kOffRows * (E + 1);
  v.g = (int)g;
  v.row0 = roff[g];
  v.m = roff[g + 1] - v.row0;
}
template <typename I>
__device__ __forceinline__ void load_group_regions(const int64_t* __restrict__ offs, int E, I g, GroupView& v) {
  v.row_data = offs[(int64_t)kOffRowData * (E + 1) + g];
  v.row_scale = offs[(int64_t)kOffRowScale * (E + 1) + g];
  v.col_data = offs[(int64_t)kOffColData * (E + 1) + g];
  v.col_scale = offs[(int64_t)kOffColScale * (E + 1) + g];
}

// Resolve row tile `rt` to its group. Returns false when the tile lies past the last group (worst-case grid).
// recs (grouped calls, optional): the setup kernel's TileRecord of every row tile; the tile's place in X then comes
// from one load, and the group's offsets, which only the output addresses need, are loaded after it.
__device__ __forceinline__ bool resolve_tile(const int64_t* __restrict__ offs, int E, int64_t M, int64_t rt,
                                             GroupView& v, const TileRecord* __restrict__ recs = nullptr) {
  if (offs == nullptr) {
    v = GroupView{0, M, 0, rt * kTileM, 0, 0, 0, 0, rt * kTileM, (int)min(M - rt * kTileM, (int64_t)kTileM)};
    return rt * kTileM < M;
  }
  const int64_t* toff = offs + (int64_t)kOffTiles * (E + 1);
  const int64_t tiles = __ldg(toff + E);  // checked after the search, so that its load overlaps the first round
  if (recs != nullptr) {
    // (rt < T/128 + E, the records' length; a record past the last tile is not written, and not used.) The quantize
    // kernel reads it before its griddepcontrol.wait, as it reads the offsets: the amax pass lets it launch only after
    // its own wait for the setup kernel, whose writes are then complete.
    const TileRecord r = __ldg(recs + rt);
    if (rt >= tiles) return false;
    v.first_row = (int64_t)(((uint64_t)(uint32_t)r.y << 32) | (uint32_t)r.x);
    v.rows = r.z;
    load_group_rows(offs, E, r.w, v);
    v.m0 = v.first_row - v.row0;
    load_group_regions(offs, E, r.w, v);
    return true;
  }
  // Largest g < E with toff[g] <= rt (empty groups share their start with the next group and are skipped), by the
  // 32-way warp search (common/warp_search.cuh: 1 round of loads for E <= 32, 2 for E <= 1024, instead of the binary
  // search's log2(E) dependent loads; those loads sit in front of every tile's X loads). Needs the whole warp here, as
  // every caller has.
  const int64_t lo = warp_search_at_or_before(toff, E, rt);
  if (rt >= tiles) return false;  // a tile of the worst-case grid past the last group
  load_group_rows(offs, E, lo, v);
  v.m0 = (rt - toff[lo]) * kTileM;
  load_group_regions(offs, E, lo, v);
  v.first_row = v.row0 + v.m0;
  v.rows = (int)min(v.m - v.m0, (int64_t)kTileM);
  return true;
}

// The tile of a grid laid out as row tiles x `nkt` column tiles (`tile` = rt * nkt + kt): its group view and its
// column tile index kt. False when the row tile lies past the last group.
// tile is a CTA index (< 2^31, the grid's x limit) and nkt divides the grid, so the division is done in 32 bits
// (the 64-bit one was ~30 instructions per CTA of the quantize kernel).
__device__ __forceinline__ bool resolve_grid_tile(const int64_t* __restrict__ offs, int E, int64_t M, int64_t tile,
                                                  int64_t nkt, GroupView& v, int64_t& kt,
                                                  const TileRecord* __restrict__ recs = nullptr) {
  const uint32_t t32 = static_cast<uint32_t>(tile), n32 = static_cast<uint32_t>(nkt);
  kt = t32 % n32;
  return resolve_tile(offs, E, M, t32 / n32, v, recs);
}

// The same grid walked in reverse tile order (the amax pass: the tiles it reads last are the ones the quantizer
// reads first, so they are still partly in L2). Only the first `tiles * nkt` CTAs get a tile, where `tiles` is the
// real row-tile count (offset table row kOffTiles, entry E): a grid sized for the worst case (T/128 + E row tiles)
// would otherwise start with its empty CTAs, up to E x nkt of them (E = 128 cost ~10 us).
__device__ __forceinline__ bool resolve_grid_tile_reversed(const int64_t* __restrict__ offs, int E, int64_t M,
                                                           int64_t block, int64_t nkt, GroupView& v, int64_t& kt,
                                                           const TileRecord* __restrict__ recs = nullptr) {
  const int64_t tiles =
      offs == nullptr ? ceil_div(M, (int64_t)kTileM) : __ldg(offs + (int64_t)kOffTiles * (E + 1) + E);
  if (block >= tiles * nkt) return false;
  return resolve_grid_tile(offs, E, M, tiles * nkt - 1 - block, nkt, v, kt, recs);
}

// The amax pass of a grouped call with at most kSplitScanMaxGroups groups, without the setup kernel's outputs:
// warp 0 reads the device splits itself (lane l takes groups l G .. l G + G - 1, G = ceil(E / 32)), forms the
// groups of SPEC 9.4 (sizes clamped to [0, M], running total capped at M) and their row-tile counts, and finds the
// reverse-order tile of `block` as resolve_grid_tile_reversed does from the records: the same tile, group, first row
// and rows, since both follow the same rule (the setup kernel writes the offset table the quantizer reads from it).
// So the pass need not wait for the setup kernel before its loads, only before its atomics (amax_fast_bf16).
constexpr int kSplitScanLaneGroups = 8;
constexpr int kSplitScanMaxGroups = 32 * kSplitScanLaneGroups;

__device__ __forceinline__ int64_t warp_inclusive_sum(int64_t v) {
  const int lane = (int)(threadIdx.x & 31u);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// SPEC 9.4 for one round of a warp's scan of the device splits: lane l takes groups g0 .. g0 + G - 1, g0 = base +
// l G (G <= kSplitScanLaneGroups; sizes past E count 0), clamps each size to [0, T] and cuts the groups at row T.
// `raw` (warp-uniform) is the capped running total of the rounds before, min(P_base, T); it advances past this
// round (min(P, T) = min(min(P_before, T) + sizes, T), so it may stay capped). Out: m[e] = the rows of group g0 + e
// below row T; returns the first row of group g0. (Used by the setup kernel, quantize/grouped_setup.cu, and the amax
// pass below: the same groups in both.)
template <int kLaneGroups>
__device__ __forceinline__ int64_t cut_lane_groups(const int64_t* __restrict__ splits, int E, int64_t T, int base,
                                                   int G, int64_t& raw, int64_t (&m)[kLaneGroups]) {
  const int g0 = base + (int)(threadIdx.x & 31u) * G;
#pragma unroll
  for (int e = 0; e < kLaneGroups; ++e) {
    const int i = g0 + e;
    const int64_t s = (e < G && i < E) ? __ldg(splits + i) : 0;
    m[e] = s < 0 ? 0 : (s > T ? T : s);  // clamped to [0, T]: the same groups, and no int64 overflow in the sums
  }
  int64_t local = 0;
#pragma unroll
  for (int e = 0; e < kLaneGroups; ++e) local += m[e];
  const int64_t incl = warp_inclusive_sum(local);
  const int64_t first = min(raw + incl - local, T);
  int64_t p = first;
#pragma unroll
  for (int e = 0; e < kLaneGroups; ++e) {
    const int64_t next = min(p + m[e], T);
    m[e] = next - p;
    p = next;
  }
  raw = min(raw + __shfl_sync(0xffffffffu, incl, 31), T);
  return first;
}

// Needs the whole CTA (one barrier); E <= kSplitScanMaxGroups.
__device__ __forceinline__ bool resolve_grid_tile_reversed_splits(const int64_t* __restrict__ splits, int E,
                                                                  int64_t M, int64_t block, int64_t nkt,
                                                                  GroupView& v, int64_t& kt) {
  struct Found {
    long long first_row;
    int rows, g, kt, valid;
  };
  __shared__ Found found;
  if (threadIdx.x < 32) {
    const int G = min(kSplitScanLaneGroups, max(1, (E + 31) / 32));  // one round: E <= 32 G
    const int g0 = (int)threadIdx.x * G;
    int64_t m[kSplitScanLaneGroups], raw = 0;
    const int64_t row_start = cut_lane_groups(splits, E, M, 0, G, raw, m);  // the first row of group g0
    int64_t ntiles = 0;
#pragma unroll
    for (int e = 0; e < kSplitScanLaneGroups; ++e) ntiles += ceil_div(m[e], (int64_t)kTileM);
    const int64_t tincl = warp_inclusive_sum(ntiles);
    const int64_t tiles = __shfl_sync(0xffffffffu, tincl, 31);
    if (block < tiles * nkt) {
      // (as resolve_grid_tile: a CTA index and a divisor of the grid, so 32-bit division)
      const uint32_t tile = static_cast<uint32_t>(tiles * nkt - 1 - block), n32 = static_cast<uint32_t>(nkt);
      const int64_t rt = tile / n32;
      int64_t t0 = tincl - ntiles, row = row_start;
      if (t0 <= rt && rt < tincl) {  // this lane's groups hold row tile rt (exactly one lane)
#pragma unroll
        for (int e = 0; e < kSplitScanLaneGroups; ++e) {
          const int64_t c = ceil_div(m[e], (int64_t)kTileM);
          if (rt < t0 + c) {
            const int64_t m0 = (rt - t0) * kTileM;
            found = Found{row + m0, (int)min(m[e] - m0, (int64_t)kTileM), g0 + e, (int)(tile % n32), 1};
            break;
          }
          t0 += c;
          row += m[e];
        }
      }
    } else if (threadIdx.x == 0) {
      found.valid = 0;
    }
  }
  __syncthreads();
  const Found f = found;
  v.first_row = f.first_row;
  v.rows = f.rows;
  v.g = f.g;
  kt = f.kt;
  return f.valid != 0;
}

// Input tile geometry per element type: a tile row is 256 bytes = 16 chunks of 16 bytes.
template <typename T>
struct TileGeom {
  static constexpr int kChunkElems = 16 / (int)sizeof(T);      // elements per 16-byte chunk (8 or 4)
  static constexpr int kTileK = 16 * kChunkElems;              // columns per tile (128 or 64)
  static constexpr int kLanesPerBlock = 16 / kChunkElems;      // lanes sharing one 16-block (2 or 4)
  static constexpr int kBlocksPerRow = kTileK / 16;            // 16-blocks per tile row (8 or 4)
};

}  // namespace nvfp4
