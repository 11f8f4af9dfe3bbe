// Tile -> group resolution and per-group buffer offsets (SPEC 6, 8, 9).
//
// Both the amax and the quantize kernels cut X into tiles of kTileM (=128) rows by one tile width of columns.
// A tile never straddles two groups: group g owns ceil(m_g/128) row tiles, and the prefix sum of those counts
// (offset table row kOffTiles) maps a row-tile index back to its group by a 32-way warp search. For a single tensor
// the table is absent (offs == nullptr) and the one group is the whole tensor.
#pragma once

#include <cstdint>

#include "nvfp4_common.cuh"
#include "nvfp4_launch.h"

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

// One row tile of a grouped call, written by the setup kernel (misc.cu) so that a CTA knows where its tile lies in X
// after one load instead of a search of the tile prefix: x, y = low and high words of the tile's first row inside X,
// z = its rows of the group (1..128), w = the group.
using TileRecord = int4;

// Tile slots (grouped calls of the bf16 fast kernels; stop 60). Group g's rows are cut into floor(m_g / 128) full
// tiles of 128 rows and a remainder of m_g % 128 rows in 16-row blocks (the last one partial); the remainder blocks
// of all groups, in group order, are packed 8 to a "mixed" tile, which may hold blocks of several groups. A grouped
// call then has sum floor(m_g / 128) + ceil(sum ceil((m_g % 128) / 16) / 8) tiles (E=64 skewed: 132) instead of
// sum ceil(m_g / 128) (158), and no tile is mostly empty. The setup kernel (misc.cu) writes the slot table:
//  * record 0, the header: {tiles, full tiles, 0, 0};
//  * the full tiles' slots from record 1 (8 per tile, for T / 128 tiles at most), then the mixed tiles' slots (from
//    record slot_mixed_base(T)); tile p of a grid is mixed tile p for p < mixed tiles, else full tile p - mixed tiles
//    (slot_tile_records).
// A slot record (int4): x = low word of the block's first row in X, y = bits 32..47 of that row | rows << 16 (1..16;
// 0: an unused slot of the last mixed tile) | kSlotLast (the group's last block) | kSlotFull (a slot of a full tile),
// z = the group (-1 when unused), w = the block's index in its group (mb: group-local rows 16 mb ..).
constexpr int kSlotsPerTile = kTileM / 16;  // 8
constexpr int kSlotLast = 1 << 21;
constexpr int kSlotFull = 1 << 22;

struct SlotView {
  int64_t first_row;  // the block's first row inside X
  int rows;           // its rows (0: unused slot)
  int g;              // its group (-1: unused slot)
  int mb;             // its 16-row block index inside the group
  bool last;          // the group's last block
  bool full;          // a slot of a full tile (one group, 128 rows, 128-row aligned in the group)
};

__device__ __forceinline__ SlotView decode_slot(const int4& r) {
  SlotView v;
  v.first_row = (int64_t)(((uint64_t)((uint32_t)r.y & 0xFFFFu) << 32) | (uint32_t)r.x);
  v.rows = (r.y >> 16) & 31;
  v.g = r.z;
  v.mb = r.w;
  v.last = (r.y & kSlotLast) != 0;
  v.full = (r.y & kSlotFull) != 0;
  return v;
}

__host__ __device__ __forceinline__ int4 encode_slot(int64_t first_row, int rows, int g, int64_t mb, bool last,
                                                     bool full) {
  return make_int4((int)(uint32_t)first_row,
                   (int)(((uint32_t)((uint64_t)first_row >> 32) & 0xFFFFu) | ((uint32_t)rows << 16) |
                         (last ? (uint32_t)kSlotLast : 0u) | (full ? (uint32_t)kSlotFull : 0u)),
                   g, (int)mb);
}

static_assert(kTileM == kSlotTableTileRows, "the slot table's sizes (nvfp4_launch.h) assume 128-row tiles");

// The 8 slot records of tile p of a slot table with `full` full tiles and `tiles` tiles (the header): the mixed tiles
// first (tile p < tiles - full is mixed tile p), so that the grid's slower tiles do not form its tail.
__device__ __forceinline__ const int4* slot_tile_records(const int4* __restrict__ slots, int64_t T, uint32_t p,
                                                         uint32_t tiles, uint32_t full) {
  const uint32_t mixed = tiles - full;
  return p < mixed ? slots + slot_mixed_base(T) + kSlotsPerTile * (int64_t)p
                   : slots + 1 + kSlotsPerTile * (int64_t)(p - mixed);
}

// Slot `s` of tile p of a slot table (the quantizer's grid, in table order). False when p lies past the last tile
// (the grid is sized for max_slot_tiles).
__device__ __forceinline__ bool tile_slot(const int4* __restrict__ slots, int64_t T, uint32_t p, int s, int4& rec) {
  const int4 hdr = __ldg(slots);
  if (p >= (uint32_t)hdr.x) return false;
  rec = __ldg(slot_tile_records(slots, T, p, (uint32_t)hdr.x, (uint32_t)hdr.y) + s);
  return true;
}

// A full tile's group view (slot 0 of the tile): the tile's first row and the group's offsets (SPEC 9).
__device__ __forceinline__ GroupView full_tile_view(const int64_t* __restrict__ offs, int E, const SlotView& s) {
  const int64_t* roff = offs + (int64_t)kOffRows * (E + 1);
  GroupView v;
  v.g = s.g;
  v.first_row = s.first_row;
  v.rows = kTileM;
  v.row0 = roff[s.g];
  v.m = roff[s.g + 1] - v.row0;
  v.m0 = (int64_t)s.mb * 16;
  v.row_data = offs[(int64_t)kOffRowData * (E + 1) + s.g];
  v.row_scale = offs[(int64_t)kOffRowScale * (E + 1) + s.g];
  v.col_data = offs[(int64_t)kOffColData * (E + 1) + s.g];
  v.col_scale = offs[(int64_t)kOffColScale * (E + 1) + s.g];
  return v;
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
    const int64_t* roff = offs + (int64_t)kOffRows * (E + 1);
    v.g = r.w;
    v.first_row = (int64_t)(((uint64_t)(uint32_t)r.y << 32) | (uint32_t)r.x);
    v.rows = r.z;
    v.row0 = roff[r.w];
    v.m = roff[r.w + 1] - v.row0;
    v.m0 = v.first_row - v.row0;
    v.row_data = offs[(int64_t)kOffRowData * (E + 1) + r.w];
    v.row_scale = offs[(int64_t)kOffRowScale * (E + 1) + r.w];
    v.col_data = offs[(int64_t)kOffColData * (E + 1) + r.w];
    v.col_scale = offs[(int64_t)kOffColScale * (E + 1) + r.w];
    return true;
  }
  // Largest g < E with toff[g] <= rt (empty groups share their start with the next group and are skipped), by a
  // 32-way search: each round, lane l tests toff[lo + l * stride] (a prefix of the lanes passes, toff being
  // non-decreasing and toff[lo] <= rt), and lo moves to the last passing point. ceil(log32(E)) dependent loads
  // (1 for E <= 32, 2 for E <= 1024) instead of the binary search's log2(E): those loads sit in front of every
  // tile's X loads (stop 19, device/NOTES.md). Needs the whole warp here, as every caller has.
  const int lane = (int)(threadIdx.x & 31u);
  int64_t stride = 1;
  while (stride * 32 < E) stride *= 32;
  int64_t lo = 0;
  for (; stride >= 1; stride >>= 5) {
    const int64_t idx = lo + lane * stride;
    const bool pass = idx < E && __ldg(toff + idx) <= rt;
    lo += (int64_t)(__popc(__ballot_sync(0xffffffffu, pass)) - 1) * stride;
    if (rt >= tiles) return false;  // a tile of the worst-case grid past the last group: leave after one round
  }
  const int64_t* roff = offs + (int64_t)kOffRows * (E + 1);
  v.g = (int)lo;
  v.row0 = roff[lo];
  v.m = roff[lo + 1] - roff[lo];
  v.m0 = (rt - toff[lo]) * kTileM;
  v.row_data = offs[(int64_t)kOffRowData * (E + 1) + lo];
  v.row_scale = offs[(int64_t)kOffRowScale * (E + 1) + lo];
  v.col_data = offs[(int64_t)kOffColData * (E + 1) + lo];
  v.col_scale = offs[(int64_t)kOffColScale * (E + 1) + lo];
  v.first_row = v.row0 + v.m0;
  v.rows = (int)min(v.m - v.m0, (int64_t)kTileM);
  return true;
}

// The tile of a grid laid out as row tiles x `nkt` column tiles (`tile` = rt * nkt + kt): its group view and its
// column tile index kt. False when the row tile lies past the last group.
// tile is a CTA index (< 2^31, the grid's x limit) and nkt divides the grid, so the division is done in 32 bits
// (the 64-bit one was ~30 instructions per CTA of the quantize kernel; stop 58).
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
// would otherwise start with its empty CTAs, up to E x nkt of them (E = 128 cost ~10 us, stop 20).
__device__ __forceinline__ bool resolve_grid_tile_reversed(const int64_t* __restrict__ offs, int E, int64_t M,
                                                           int64_t block, int64_t nkt, GroupView& v, int64_t& kt,
                                                           const TileRecord* __restrict__ recs = nullptr) {
  const int64_t tiles =
      offs == nullptr ? ceil_div(M, (int64_t)kTileM) : __ldg(offs + (int64_t)kOffTiles * (E + 1) + E);
  if (block >= tiles * nkt) return false;
  return resolve_grid_tile(offs, E, M, tiles * nkt - 1 - block, nkt, v, kt, recs);
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
