// Fast-mode NVFP4 grouped GEMM with the operands swapped (swapped_64x256 for few rows per group, and
// swapped_256x128). Bit for bit SPEC 12.6 (oracle.gemm(model="tensor_core")), like the other fast kernels.
//
// Each output tile is computed transposed: D_g^T[n, m] = sum_k B[n, k] A[m, k], so the large operand (the weights,
// B = W_g for fprop and dgrad) is wgmma's A operand, decoded straight from packed E2M1 into registers (RS form: no fp16
// tile in shared memory, no fence.proxy.async, no converter warps), and the few token rows (A) are wgmma's B operand,
// read from an fp16 copy made beforehand by gemm/copies.cu (T x K x 2 bytes: 4 MB for T = 512, K = 4096). The step
// model is symmetric in its operands (the same 16 products per k16 step), so the bits are those
// of the other fast kernels as long as every k16 step holds exactly one 16-block, in K order.
//
// Register fragments of a k16 step (wgmma A, m64k16): thread (warp v, lane l) holds rows g = 16 v + l / 4 and g + 8 at
// K positions 2c, 2c + 1 and 8 + 2c, 9 + 2c, c = l % 4. Inside a 16-block we choose the order: position p < 8 holds
// code 2p, p >= 8 holds code 2 (p - 8) + 1 (even codes, then odd codes). Then lane c needs codes 4c .. 4c + 3 of every
// block, i.e. bytes 2c, 2c + 1 of the block's 8 bytes: one PRMT gathers them for two blocks into one word, and
// decode_two_blocks turns that word into the fragments of both blocks (about 2.5 instructions per code with the scales;
// 129 per warp and K step in all). The token copy holds the same order inside each block (decode_plane_kernel with
// kEvenOddOrder), so every k16 step is one whole block.
//
// Roles (one persistent CTA per SM; the setup kernel's BM x BN tile list: swapped_64x256 walks fused_64x256's 64 x 256
// tiles, swapped_256x128 its own 256 x 128 ones, ShapeT):
//   loader: per K step of 64 K, the BM token rows x 64 fp16 of the copy (128 B per row, wgmma's K-major 128-byte
//       swizzle), the BN weight rows x 32 packed bytes, and the one or two 128-row swizzled scale tiles (SPEC 8.2) of
//       those weight rows. Two versions with the same shared-memory layout (the plan's loader):
//       - TMA (contraction K % 32 == 0, 16-byte aligned planes; ShapeTma, ShapeWideTma; fprop, and swapped_256x128's
//         dgrad): one thread issues a token box, one or two 128-row weight boxes and as many 512-byte scale tiles per
//         stage (TmaTile); dgrad's loader is one warp that copies the weight rows of a group off the weight map's
//         rows by cp.async instead (swapped_kernel's ROWS_CHECKED). Boxes past the planes' ends or past K are
//         zero-filled; rows past M / N of the group are the next group's (or zeros).
//       - cp.async (any K; Shape with 8 loader warps, ShapeWide with 4; SwapLoader): pieces past K are zero-filled;
//         rows past M (tokens) or N (weights) are not copied.
//       Either way the rows past M / N only reach accumulator elements the epilogue does not store.
//   MMA warpgroups (4 for 64 x 256, 2 for 256 x 128; weight rows [64 wm, 64 wm + 64), one m64 tile): decode their
//       fragments from the stage, issue 4 wgmma.m64nBMk16 (one per block) over the token tile, and release the stage
//       one step later (after wgmma.wait_group 1); then the epilogue stores the transposed tile directly.
//   full[s]   the loader's copies of stage s have landed (TMA: one arrive.expect_tx and the copies' complete_tx;
//             cp.async: cp.async.mbarrier.arrive.noinc, one per loader thread; ROWS_CHECKED: 32 arrivals, plain or
//             cp.async's, and the complete_tx of the bytes lane 0 expects)
//   empty[s]  every MMA thread has read stage s (its words by ld.shared, its token tile by the completed wgmmas)
#pragma once

#include "gemm/group_maps.cuh"
#include "gemm/fused.cuh"

namespace nvfp4_gemm {
namespace swapped {

// MMA_WGS warpgroups of TILES m64 tiles each (BN = MMA_WGS * TILES * 64 weight rows: 256, or 128 with one scale
// tile), BM token rows per tile (wgmma's N: 64, 128 or 256). Registers per thread-slot: 65536 / kThreads, rounded
// down to 8 (the launch bound's allocation), moved by setmaxnreg from the loader.
template <int MMA_WGS, int TILES, int LOADER_WARPS, int BM_ = 64>
struct ShapeT {
  static constexpr int BM = BM_;                     // token rows per tile (output rows): the wgmma N
  static constexpr int BN = 64 * MMA_WGS * TILES;    // weight rows per tile (output columns)
  static constexpr int kMma = MMA_WGS;
  static constexpr int kTiles = TILES;  // m64 tiles per MMA warpgroup
  static constexpr int kWgRows = 64 * TILES;
  static constexpr int kAcc = BM / 2;   // accumulator registers per m64 tile and thread (m64 x BM fp32 / 128 threads)
  static constexpr int kLoaderWGs = (LOADER_WARPS + 3) / 4;
  static constexpr int kThreads = 128 * (kMma + kLoaderWGs);  // the loader warpgroups first
  // the first LOADER_WARPS warps of the loader warpgroups issue the copies (any others leave after setmaxnreg)
  static constexpr int kLoaderThreads = 32 * LOADER_WARPS;
  static constexpr int kSlotRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kLoaderRegs = 32;
  static constexpr int kMmaRegs = ((kMma + kLoaderWGs) * kSlotRegs - kLoaderWGs * kLoaderRegs) / kMma / 8 * 8;
  static constexpr int kScaleTiles = BN / 128;  // 128-row scale tiles (SPEC 8.2) of a tile's weight rows
  // Half tiles (TileWalk) for the last round: 256 weight rows, so that a half is one scale tile
  static constexpr bool kSplit = BN == 2 * kHalfCols;
  static constexpr int kTokBytes = BM * 128;   // BM rows x 64 fp16
  static constexpr int kRawBytes = BN * 32;    // BN rows x 64 codes
  static constexpr int kScaleBytes = kScaleTiles * 512;
  // each stage starts on a 1024-byte boundary (the token tile's swizzle atoms)
  static constexpr int kStageBytes = (kTokBytes + kRawBytes + kScaleBytes + 1023) / 1024 * 1024;
  static constexpr int kStages = (227 * 1024 - 1024 - 8 * 2 * 8) / kStageBytes < 8
                                     ? (227 * 1024 - 1024 - 8 * 2 * 8) / kStageBytes
                                     : 8;
  static constexpr int kBarBytes = 8 * 2 * kStages;
  static constexpr int kSmem = kStages * kStageBytes + kBarBytes + 1024;
  static_assert(BM == 64 || BM == 128 || BM == 256, "wgmma's N");
  static_assert(BN == 128 || BN == 256, "one or two scale tiles (TmaTile, SwapLoader)");
  static_assert(LOADER_WARPS == 1 || LOADER_WARPS == 2 || LOADER_WARPS == 4 || LOADER_WARPS == 8,
                "copies divide evenly");
  static_assert(kStages >= 4, "ring depth");
  static_assert(kSmem <= 227 * 1024, "shared memory");
  static_assert(kMmaRegs <= 256 && kMma * kMmaRegs + kLoaderWGs * kLoaderRegs <= (kMma + kLoaderWGs) * kSlotRegs,
                "setmaxnreg budget");
};
// swapped_64x256. Chosen by E8 T512 fprop TFLOP/s on an H100: 4 MMA warpgroups of one m64 tile and 8 loader warps
// (312-318; 4 loader warps 290-306, 2 warps 245-252, 1 warp 157-168: the copies' issue rate paces the kernel); 2 MMA
// warpgroups of two m64 tiles each measured 302-314 against 307 for 4 x 1 with 4 loader warps.
using Shape = ShapeT<4, 1, 8>;
// The TMA loader (K % 32 == 0): one thread issues every copy, so one loader warp (the others of its warpgroup leave).
using ShapeTma = ShapeT<4, 1, 1>;
// swapped_256x128: 256 tokens x 128 weight rows, 2 MMA warpgroups of one m64 tile, each wgmma m64n256k16: every
// decoded weight fragment feeds 256 tokens (64 in swapped_64x256), so the decode is a quarter of the work per FMA.
// 4 loader warps (one warpgroup): with a second loader warpgroup the launch bound of 512 threads leaves ptxas 128
// registers, fewer than the m64n256k16 wgmma needs.
using ShapeWide = ShapeT<2, 1, 4, 256>;
using ShapeWideTma = ShapeT<2, 1, 1, 256>;

// wgmma m64nNk16 with A from registers, N = the tile's token rows.
template <int N>
__device__ __forceinline__ void wgmma_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (N == 64) wgmma_m64n64k16_rs_f16(d, a, desc_b, 1);
  else if constexpr (N == 128) wgmma_m64n128k16_rs_f16(d, a, desc_b, 1);
  else wgmma_m64n256k16_rs_f16(d, a, desc_b, 1);
}

// Weight row r's 32 bytes in a stage: its two 16-byte halves swapped when bit 2 of r is set, so that the 8 rows a
// warp reads at once (g = 0..7 and their words 2j + c / 2) fall on 16 different banks.
__host__ __device__ constexpr uint32_t raw_half_offset(int r, int half) {
  return static_cast<uint32_t>(r * 32 + ((half ^ ((r >> 2) & 1)) << 4));
}

// One loader thread's copies of a tile's K steps (NT = S::kLoaderThreads threads, t < NT).
//   tokens: piece q = t % 8 (16 bytes, K elements [8 q, 8 q + 8) of the step) of rows r0 + (NT / 8) i (r0 = t / 8),
//     swizzled like gemm/exact_copies.cuh's F16Loader (row r's piece q at r * 128 + ((q ^ (r % 8)) << 4));
//   weights (vec16: row pitch and group base 16-byte aligned): 16-byte halves of rows t / 2 + (NT / 2) i, half t % 2;
//     otherwise 8-byte quarters of rows t / 4 + (NT / 4) i, quarter t % 4 (row + a multiple of 8 keeps its bit 2, so
//     raw_half_offset moves by a constant per i);
//   scales: 16-byte pieces t + NT j of the tile's 512-byte scale tiles (piece / 32 = the 128-row tile).
template <class S>
struct SwapLoader {
  static constexpr int NT = S::kLoaderThreads;
  static constexpr int kTok = S::BM * 8 / NT;          // token pieces per thread
  static constexpr int kW16 = S::BN * 2 / NT;          // 16-byte weight pieces per thread
  static constexpr int kW8 = S::BN * 4 / NT;           // 8-byte weight pieces per thread
  static constexpr int kScPieces = 32 * S::kScaleTiles;  // 16-byte pieces of the tile's scale tiles
  static constexpr int kSc = (kScPieces + NT - 1) / NT;  // scale pieces per thread
  const __half* tok;      // token row m0 + r0, piece q, step 0
  const uint8_t* w;       // weight piece 0 at step 0
  const uint8_t* sc;      // scale piece 0 at step 0; piece j is (NT / 32) j scale tiles further
  int tok_step;           // NT / 8 token rows, in elements (NT / 8 * K; i * tok_step <= (BM - NT / 8) K)
  int w_step;             // to piece i + 1: NT / 2 (vec16) or NT / 4 rows, in bytes (i * w_step <= 96 K). The host
                          // runs contractions K < 2^24 (64-token tiles: offsets <= 96 K) or < 2^23 (256-token tiles:
                          // <= 240 K) only, _dispatch.py SWAPPED_MAX_CONTRACTION, so all stay < 2^31
  int sc_tile;            // one 128-row scale tile of the group: KT * 512 bytes
  int tok_rows;           // i < tok_rows: token row m0 + r0 + (NT / 8) i < M
  int k_pieces;           // K / 8
  int w_rows;             // i < w_rows: weight row inside N
  int w_left;             // bytes of a piece's row from the piece's offset to K / 2
  uint32_t sc_ok;         // bit j: scale piece j has a tile
  uint32_t tok_dst[2];    // rows r0 + (NT / 8) i for even / odd i: r * 128 + ((q ^ (r % 8)) << 4) at i = 0 / 1
  uint32_t w_dst;
  bool vec16;

  SwapLoader() = default;
  __device__ __forceinline__ SwapLoader(const Prob& p, int m0, int n0, int KT, int t) {
    const int q = t & 7, r0 = t >> 3;
    const long long K = p.K;
    tok = reinterpret_cast<const __half*>(p.a) + (m0 + r0) * K + 8 * q;
    tok_step = static_cast<int>((NT / 8) * K);
    tok_rows = max(0, min(kTok, (p.M - m0 - r0 + NT / 8 - 1) / (NT / 8)));
    k_pieces = p.K / 8;
    // (r0 + (NT / 8) i) % 8 takes at most two values: NT / 8 is 4 or a multiple of 8, and r0 < NT / 8
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + (NT / 8) * i;
      tok_dst[i] = r * 128 + ((q ^ (r & 7)) << 4) - (NT / 8) * 128 * i;
    }
    const long long ldb = K / 2;
    vec16 = (ldb % 16 == 0) && (reinterpret_cast<uintptr_t>(p.b) % 16 == 0);
    const int row = vec16 ? t >> 1 : t >> 2, off = vec16 ? (t & 1) * 16 : (t & 3) * 8;
    const int rstep = vec16 ? NT / 2 : NT / 4;
    w = p.b + (n0 + row) * ldb + off;
    w_step = static_cast<int>(rstep * ldb);
    w_rows = max(0, min(vec16 ? kW16 : kW8, (p.N - n0 - row + rstep - 1) / rstep));
    w_left = static_cast<int>(ldb - off);
    w_dst = vec16 ? raw_half_offset(row, t & 1) : raw_half_offset(row, (t & 3) >> 1) + (t & 1) * 8;
    sc_ok = 0;
#pragma unroll
    for (int j = 0; j < kSc; ++j) {
      const int piece = t + NT * j;
      const int rt = (n0 >> 7) + (piece >> 5);  // the piece's 128-row scale tile
      sc_ok |= (piece < kScPieces && rt * 128 < p.N) ? 1u << j : 0u;
    }
    sc_tile = KT * 512;
    sc = p.sb + (sc_ok ? static_cast<long long>((n0 >> 7) + (t >> 5)) * sc_tile + (t & 31) * 16 : 0);
  }

  __device__ __forceinline__ void load(uint32_t stage, int kt, int t) const {
    {  // token tile
      const int piece = 8 * kt + (t & 7);
      const bool in_k = piece < k_pieces;
      const long long off = in_k ? 64LL * kt : 0;
      const int bytes = in_k ? 16 : 0;
#pragma unroll
      for (int i = 0; i < kTok; ++i)
        if (i < tok_rows)
          cp_async16(stage + tok_dst[i & 1] + (NT / 8) * 128 * i, tok + i * tok_step + off, bytes);
    }
    load_weights(stage, kt);
#pragma unroll
    for (int j = 0; j < kSc; ++j)
      if (sc_ok & (1u << j))
        cp_async16(stage + S::kTokBytes + S::kRawBytes + (t + NT * j) * 16, sc + (NT / 32) * j * sc_tile + kt * 512,
                       16);
  }

  // K step kt's weight pieces alone (also the checked TMA loader's copies of a group off the rows of its map)
  __device__ __forceinline__ void load_weights(uint32_t stage, int kt) const {
    const uint32_t raw = stage + S::kTokBytes + w_dst;
    const int kb = kt * 32, left = w_left - kb;
    const uint8_t* src = left > 0 ? w + kb : w;  // (src-size 0 reads nothing; the address stays inside the row)
    if (vec16) {
      const int bytes = left > 0 ? min(left, 16) : 0;
#pragma unroll
      for (int i = 0; i < kW16; ++i)
        if (i < w_rows) cp_async16(raw + (NT / 2) * 32 * i, src + i * w_step, bytes);
    } else {
      const int bytes = left > 0 ? 8 : 0;
#pragma unroll
      for (int i = 0; i < kW8; ++i)
        if (i < w_rows) cp_async8(raw + (NT / 4) * 32 * i, src + i * w_step, bytes);
    }
  }
};

// The TMA loader's operands (contraction K % 32 == 0, 16-byte aligned planes; gemm/swapped.cu encodes the maps).
//   tok: the fp16 token copy, {K elements, rows}, box {64, BM} with the 128-byte swizzle: row r's 16-byte piece q at
//        r * 128 + ((q ^ (r % 8)) << 4), wgmma's K-major swizzled layout (the same as SwapLoader's copies);
//   w:   the packed weight plane, {K / 2 bytes, rows}, box {32, 128} with the 32-byte swizzle, which swaps the 16-byte
//        halves of row r when bit 2 of r is set: raw_half_offset's layout (address bit 4 ^= bit 7, rows of 32 bytes);
//   sc:  the weights' swizzled scale plane as rows of 128 bytes, box {128, 4}: each 128-row x 4-block tile of it
//        (SPEC 8.2) is 512 contiguous bytes, i.e. 4 map rows.
// wgrad (WGRAD: the columnwise planes' pitch differs per group) reads its token rows through one map per group
// instead of `tok` (group_tok[g]: the group's rows of the copy, {K_g, M} with the box and swizzle of `tok`, built on
// the device by gemm/group_maps.cuh), and its weights by cp.async (`w` unused); `sc` is the same map.
// Boxes past the tensor's end (K tail, the plane's last rows) are zero-filled and still count their whole bytes.
struct SwapMaps {
  CUtensorMap tok;
  CUtensorMap w;
  CUtensorMap sc;
  const uint8_t* tok_base;  // first byte of the token copy (Prob::a points into it)
  const uint8_t* w_base;    // first byte of the weight plane (Prob::b points into it)
  const uint8_t* sc_base;   // first byte of the weights' scale plane (Prob::sb points into it)
  long long w_pitch;        // K / 2: bytes per weight row; the copy's rows are 4 w_pitch bytes (wgrad: 0)
  const CUtensorMap* group_tok;  // wgrad: the per-group token maps (global memory); else null
};

// The TMA loader's per-tile state (the thread that issues the boxes): the stage's copies are one token box, one or two
// 128-row weight boxes (the second only for 256-row tiles whose rows, or whose half's, reach past the first 128) and as
// many scale tiles.
template <class S>
struct TmaTile {
  const CUtensorMap* tok;  // the token map: the launch's `tok`, or (wgrad) group g's map
  int tok_row, w_row;  // map rows of the tile's first token and weight row (wgrad: w_row unused)
  int sc_row;          // map row of the scale tile of weight rows [n0, n0 + 128) at K step 0 (+4 per K step)
  int sc_next;         // 4 KT: the scale tile of the next 128 weight rows
  int boxes;           // 1 or 2

  TmaTile() = default;
  // group: the tile's group, whose own token map (m.group_tok[group], its rows from the group's first) serves wgrad
  __device__ __forceinline__ TmaTile(const Prob& p, const SwapMaps& m, int group, int m0, int n0, int n_end, int KT) {
    if (m.group_tok != nullptr) {
      tok = m.group_tok + group;
      tok_row = m0;
      w_row = 0;
    } else {
      tok = &m.tok;
      tok_row = static_cast<int>((p.a - m.tok_base) / (4 * m.w_pitch)) + m0;
      w_row = static_cast<int>((p.b - m.w_base) / m.w_pitch) + n0;
    }
    boxes = S::kScaleTiles == 2 && n0 + 128 < n_end ? 2 : 1;
    sc_next = 4 * KT;
    // (scale groups start at multiples of 512 bytes, SPEC 9.2: always a whole tile of `sc`)
    sc_row = static_cast<int>((p.sb - m.sc_base) / 128) + (n0 >> 7) * sc_next;
  }
  // K step kt's boxes, their bytes expected on `bar`, with this thread's arrival (ARRIVE) or without it; the weight
  // boxes only where `weights` (else the checked loader's cp.async pieces copy those rows).
  template <bool ARRIVE>
  __device__ __forceinline__ void load(const SwapMaps& m, uint32_t stage, uint32_t bar, int kt, bool weights) const {
    const uint32_t bytes = S::kTokBytes + boxes * ((weights ? 128 * 32 : 0) + 512);
    if constexpr (ARRIVE) mbar_arrive_expect_tx(bar, bytes);
    else mbar_expect_tx(bar, bytes);
    tma_load_2d(stage, tok, bar, 64 * kt, tok_row);
    for (int h = 0; h < boxes; ++h) {
      if (weights) tma_load_2d(stage + S::kTokBytes + h * (128 * 32), &m.w, bar, 32 * kt, w_row + 128 * h);
      tma_load_2d(stage + S::kTokBytes + S::kRawBytes + h * 512, &m.sc, bar, 0,
                  sc_row + h * sc_next + 4 * kt);
    }
  }
};

// Codes of two 16-blocks P, Q in one word (nibbles 0-3: codes 4c .. 4c + 3 of P, nibbles 4-7: the same of Q) times
// their scales (spq = {sf_P * 2^6, sf_Q * 2^6} in fp16, f16dec's decode: the E4M3 bytes of gemm/decode_f16.cuh hold
// 2^-6 * E2M1) -> the fragment words: f[0] = P at positions 2c, 2c + 1 (codes 4c, 4c + 2), f[1] = Q there, f[2] = P at
// 8 + 2c, 9 + 2c (codes 4c + 1, 4c + 3), f[3] = Q there. Each half of spq is broadcast by the multiply's operand
// selector (HMUL2 ... .H0_H0 / .H1_H1), not by a separate permute.
__device__ __forceinline__ void decode_two_blocks(uint32_t x, uint32_t spq, uint32_t (&f)[4]) {
  using namespace f16dec;
  const uint32_t even = e2m1_to_e4m3_bytes(x << 2), odd = e2m1_to_e4m3_bytes(x >> 2);
  const __half2 s = *reinterpret_cast<const __half2*>(&spq);
  const __half2 sp = __low2half2(s), sq = __high2half2(s);
  auto mul = [](uint32_t v, __half2 m) {
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&v), m);
    return *reinterpret_cast<const uint32_t*>(&r);
  };
  f[0] = mul(e4m3x2_to_f16x2(even), sp);
  f[1] = mul(e4m3x2_to_f16x2(even >> 16), sq);
  f[2] = mul(e4m3x2_to_f16x2(odd), sp);
  f[3] = mul(e4m3x2_to_f16x2(odd >> 16), sq);
}

// Per-thread offsets of the fragment decode (MMA thread t of warpgroup wm; weight row R0 = kWgRows wm + 16 v + l / 4
// of the tile, and rows R0 + 8 (+256 bytes), R0 + 64 i (m64 tile i, +2048 i) and R0 + 64 i + 8).
struct FragOffsets {
  uint32_t word[4];  // block j's word 2 j + c / 2 of row R0 (raw_half_offset's half swap included)
  uint32_t scale;    // row R0's 4 scales (one word) in the stage's scale tiles
  uint32_t sel;      // PRMT selector: bytes 2c, 2c + 1 of two words (c = l % 4)
};
template <class S>
__device__ __forceinline__ FragOffsets frag_offsets(int wm, int t) {
  const int v = t >> 5, l = t & 31, c = l & 3;
  const int r0 = S::kWgRows * wm + 16 * v + (l >> 2);
  FragOffsets o;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int wd = 2 * j + (c >> 1);  // the word holding bytes 8 j + 2 c, 8 j + 2 c + 1 of the row
    o.word[j] = S::kTokBytes + raw_half_offset(r0, wd >> 2) + (wd & 3) * 4;
  }
  o.scale = S::kTokBytes + S::kRawBytes + (r0 >> 7) * 512 + nvfp4::swizzle_in_tile<uint32_t>(r0 & 127, 0);
  o.sel = (c & 1) ? 0x7632u : 0x5410u;
  return o;
}

// The shared-memory words one thread decodes for a K step: w[i][h][j] = block j's word of row R0 + 64 i + 8 h, and
// s[i][h] = that row's 4 scales.
template <int T>
struct StepWords {
  static_assert(T <= 2, "a thread's rows R0 + 64 i stay in its 128-row scale tile");
  uint32_t w[T][2][4], s[T][2];
  __device__ __forceinline__ void load(uint32_t stage, const FragOffsets& o) {
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t d = stage + 2048 * i + 256 * h;
#pragma unroll
        for (int j = 0; j < 4; ++j) w[i][h][j] = lds32(d + o.word[j]);
        // SPEC 8.2 (row r at (r mod 32) * 16 + (r / 32 mod 4) * 4): R0 mod 32 < 24, so row R0 + 8 h + 64 i is 8 h rows
        // further in the same 32-row group (+ 128 h bytes) and 2 i groups further (+ 8 i bytes)
        s[i][h] = lds32(stage + o.scale + 128 * h + 8 * i);
      }
  }
  // Fragments of the step: a[i][j] = m64 tile i (rows + 64 i), block j.
  __device__ __forceinline__ void decode(const FragOffsets& o, uint32_t (&a)[T][4][4]) const {
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t s01, s23, f[4];
        f16dec::scales4_to_pairs(s[i][h], s01, s23);  // {sf0, sf1} * 64, {sf2, sf3} * 64
        decode_two_blocks(__byte_perm(w[i][h][0], w[i][h][1], o.sel), s01, f);
        a[i][0][h] = f[0];
        a[i][0][2 + h] = f[2];
        a[i][1][h] = f[1];
        a[i][1][2 + h] = f[3];
        decode_two_blocks(__byte_perm(w[i][h][2], w[i][h][3], o.sel), s23, f);
        a[i][2][h] = f[0];
        a[i][2][2 + h] = f[2];
        a[i][3][h] = f[1];
        a[i][3][2 + h] = f[3];
      }
  }
};

template <int T>
__device__ __forceinline__ void fence_frags(uint32_t (&a)[T][4][4]) {
#pragma unroll
  for (int i = 0; i < T; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][j][r])::"memory");
}

// Epilogue of one m64 tile (SPEC 12.2 order: y = alpha * acc; y += C; y += bias; cast). Accumulator register
// 4j + 2h + e of thread (warp v, lane l) is weight row (output column) n_base + 8 h, n_base = n0 + 16 v + l / 4, and
// token (output row) m_base + 8 j + e, m_base = m0 + 2 (l % 4). Stores go element by element: a warp writes 4 rows x
// 16 bytes (bf16) per instruction.
template <bool OUT_F32, int ACC>
__device__ __forceinline__ void store_tile_transposed(const float (&acc)[ACC], const Prob& p, int m_base, int n_base,
                                                      int accumulate) {
  const float alpha = p.alpha;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = n_base + 8 * h;
    if (n >= p.N) continue;
    const float b = p.bias ? p.bias[n] : 0.0f;
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = m_base + 8 * j + e;
        if (m >= p.M) continue;
        float y = __fmul_rn(alpha, acc[4 * j + 2 * h + e]);
        const long long o = static_cast<long long>(m) * p.ldd + n;
        if (OUT_F32) {
          float* dp = static_cast<float*>(p.d) + o;
          if (accumulate) y = __fadd_rn(y, *dp);
          if (p.bias) y = __fadd_rn(y, b);
          *dp = y;
        } else {
          if (p.bias) y = __fadd_rn(y, b);
          static_cast<__nv_bfloat16*>(p.d)[o] = __float2bfloat16_rn(y);
        }
      }
  }
}

// The words of C that store_tile_rows loads in one batch: 16 keep the MMA threads within their 168 registers (32
// spill).
constexpr int kCWords = 16;

// Epilogue of one m64 tile of wgrad over exchanged operands (SetupArgs::swap_wgrad; SPEC 12.2 order: y = alpha * acc;
// y += C; cast; wgrad has no bias): the kernel's weight rows are dW_g's rows (dY_g's N features) and its token rows
// dW_g's columns (X_g's K features), so the tile is stored as it lies. Accumulator register 4j + 2h + e of thread
// (warp v, lane l) is dW row n_base + 8 h (n_base = n0 + 16 v + l / 4), column m_base + 8 j + e (m_base = m0 +
// 2 (l % 4)): e = 0, 1 are adjacent columns, stored as one 8-byte (fp32) or 4-byte (bf16) word. M = K is a multiple of
// 16 (wgrad's planes), so a column m < M has m + 1 < M, and the words are aligned (even m, even row pitch). With C
// the row's words are loaded kCWords at a time ahead of their stores: a load placed between stores to the same row
// waits out its whole latency, since the compiler keeps it behind them.
template <bool OUT_F32, int ACC>
__device__ __forceinline__ void store_tile_rows(const float (&acc)[ACC], const Prob& p, int m_base, int n_base,
                                                int accumulate) {
  static_assert((ACC / 4) % kCWords == 0, "whole batches of C's words per row");
  const float alpha = p.alpha;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = n_base + 8 * h;
    if (n >= p.N) continue;
    const long long row = static_cast<long long>(n) * p.ldd;  // (elements)
#pragma unroll
    for (int j0 = 0; j0 < ACC / 4; j0 += kCWords) {
      float2 c[kCWords];  // with C: the row's words at columns m_base + 8 j, j0 <= j < j0 + kCWords
      if constexpr (OUT_F32) {
        if (accumulate) {
#pragma unroll
          for (int jj = 0; jj < kCWords; ++jj) {
            const int m = m_base + 8 * (j0 + jj);
            c[jj] = m < p.M ? *reinterpret_cast<const float2*>(static_cast<const float*>(p.d) + row + m)
                            : make_float2(0.0f, 0.0f);
          }
        }
      }
#pragma unroll
      for (int jj = 0; jj < kCWords; ++jj) {
        const int j = j0 + jj, m = m_base + 8 * j;
        if (m >= p.M) continue;
        float y0 = __fmul_rn(alpha, acc[4 * j + 2 * h]), y1 = __fmul_rn(alpha, acc[4 * j + 2 * h + 1]);
        const long long o = row + m;
        if constexpr (OUT_F32) {
          if (accumulate) {
            y0 = __fadd_rn(y0, c[jj].x);
            y1 = __fadd_rn(y1, c[jj].y);
          }
          *reinterpret_cast<float2*>(static_cast<float*>(p.d) + o) = make_float2(y0, y1);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.d) + o) = __floats2bfloat162_rn(y0, y1);
        }
      }
    }
  }
}

// A group's tile `local`: token tile *mt (token rows from S::BM mt) and weight tile *nt (weight rows from BN nt),
// as the loader and the MMA warpgroups both walk them. fprop / dgrad run the token tile fastest over the whole group:
// mt = local % tiles_m, nt = local / tiles_m. wgrad (WGRAD: token tiles over X_g's K rows, weight tiles over dY_g's N
// rows) runs in bands of band_m token tiles (Prob::band_m): band b = local / (band_m tiles_n) holds token tiles
// [b band_m, b band_m + bm) x every weight tile, bm = min(band_m, tiles_m - b band_m), the token tile fastest; one
// band (band_m = tiles_m) is the order of fprop / dgrad.
template <bool WGRAD, int BN>
__device__ __forceinline__ void group_tile(int local, int tiles_m, int band_m, int rows_n, int* mt, int* nt) {
  if constexpr (WGRAD) {
    const int per_band = band_m * ((rows_n + BN - 1) / BN);  // band_m x tiles_n (<= the group's tile count)
    const int b = local / per_band, r = local - b * per_band;
    const int bm = min(band_m, tiles_m - b * band_m);  // the last band may be narrower
    *mt = b * band_m + r % bm;
    *nt = r / bm;
  } else {
    *mt = local % tiles_m;
    *nt = local / tiles_m;
  }
}

// With 256 weight rows per tile (S::kSplit) the last round's tiles run as half tiles (TileWalk: weight rows
// [128 h, 128 h + 128) of the tile) when they fill at most half of the CTAs (E8 T512 fprop: SM active 81% -> 93% of
// the kernel's cycles); the warpgroups whose rows lie in the other half then only follow the ring (wait for each
// stage, release it at once).
// TMA: the loader is one thread issuing TMA boxes (S = ShapeTma / ShapeWideTma, `maps` set); otherwise the
// S::kLoaderThreads threads of SwapLoader issue cp.async copies (any K; `maps` unused).
// ROWS_CHECKED (TMA, dgrad): the weight plane is W's columnwise plane, whose group g starts on a whole row of the map
// `w` only when every group before it holds N rows (SPEC 12.5: a disagreeing group is written as NaN, but it still
// shifts the groups after it). Every lane of the loader warp follows the ring; lane 0 issues the token and scale
// boxes, and the weight boxes where the tile's group starts on a whole row of `w`; elsewhere the warp copies the
// weight rows by cp.async (SwapLoader's weight pieces, 32 threads). `full` then counts the warp's 32 arrivals (plain,
// or cp.async's once the lane's copies have landed) and the bytes lane 0 expects.
// WGRAD: wgrad over exchanged operands (SetupArgs::swap_wgrad: the tokens are X_g's columnwise rows, the weights dY_g's;
// each group's contraction is its own ru16(m_g)); the tile is stored by store_tile_rows. With TMA it takes the checked
// loader's form (ROWS_CHECKED) with every tile's weight rows by cp.async (the columnwise rows have a pitch per group)
// and the token boxes through the group's own map (SwapMaps::group_tok, acquired by lane 0 at the tile's start).
// Stage release (`empty`): every MMA thread arrives after its own shared-memory reads of the stage. (A per-warp
// release, __syncwarp() and one arrival by lane 0, orders the lanes' reads as well, bar.warp.sync ordering its lanes'
// memory accesses, and measured the same speed; but compute-sanitizer's racecheck follows only per-thread arrivals
// and reports the loader's cp.async writes against the lanes' reads: tools/sanitizer/warp_release_repro.cu.)
template <class S, bool OUT_F32, bool TMA, bool ROWS_CHECKED = false, bool WGRAD = false>
__global__ void __launch_bounds__(S::kThreads, 1)
    swapped_kernel(const Prob* __restrict__ probs, const int* __restrict__ prefix, int E, int accumulate,
                   const __grid_constant__ SwapMaps maps) {
  pdl_wait();  // the retarget kernel's outputs: nothing global is touched before (common/pdl.cuh)
  constexpr int T = S::kTiles;
  static_assert(!S::kSplit || S::kWgRows * 2 <= kHalfCols, "a half tile is whole warpgroups' rows");
  static_assert(!ROWS_CHECKED || (TMA && S::kLoaderThreads == 32), "the checked TMA loader is one warp");
  static_assert(!WGRAD || !TMA || ROWS_CHECKED, "wgrad's TMA loader is the checked one (weights by cp.async)");
  static_assert(!WGRAD || !S::kSplit, "wgrad runs the 128-weight-row tiles (no half tiles)");
  constexpr int kLoaders = !TMA || ROWS_CHECKED ? S::kLoaderThreads : 1;  // threads of the loader loop
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t smem = (smem_u32(smem_dyn) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t ring = smem;
  const uint32_t bars = ring + S::kStages * S::kStageBytes;
  const uint32_t full = bars, empty = bars + 8 * S::kStages;
  const int tid = threadIdx.x, lane = tid & 31;
  const int first_tile = blockIdx.x, tile_stride = gridDim.x;
  const TileWalk<S::kSplit> walk(__ldg(prefix + E), tile_stride);

  init_ring_barriers<S::kStages>(full, empty, kLoaders, 128 * S::kMma);

  if (tid < 128 * S::kLoaderWGs) {
    // ------------------------------------------------------------------------------------------------ loader
    setmaxnreg_dec<S::kLoaderRegs>();
    if (tid >= kLoaders) return;
    StepCursor cur;
    cur.stride = tile_stride;
    cur.seek<S::BN>(probs, prefix, E, walk, first_tile);
    Ring<S::kStages> st;
    TmaTile<S> tt;  // TMA: set at every tile's first K step
    SwapLoader<S> ld;  // cp.async (ROWS_CHECKED: its weight pieces, for a group off the rows of `w`): the same
    bool w_boxes = true;    // ROWS_CHECKED: the tile's weight rows come by TMA boxes
    uint32_t cp_fills = 0;  // ROWS_CHECKED: bit s, stage s's weight rows were last copied by cp.async
    while (cur.valid(walk)) {
      if (cur.kt == 0) {
        Prob p = probs[cur.group];
        int mt, nt;  // token tile, weight tile
        group_tile<WGRAD, S::BN>(cur.local, p.tiles_m, p.band_m, p.N, &mt, &nt);
        const ColumnRange cols = walk_columns(nt * S::BN, S::kSplit ? cur.half : -1, p.N);
        const int m0 = mt * S::BM;
        if constexpr (TMA) {
          tt = TmaTile<S>(p, maps, cur.group, m0, cols.begin, cols.end, cur.KT);
          if constexpr (WGRAD) {
            if (tid == 0) gmap::acquire_group_map(tt.tok);  // (before the first box through the group's map)
          }
          if constexpr (ROWS_CHECKED) {
            w_boxes = !WGRAD && (p.b - maps.w_base) % maps.w_pitch == 0;
            p.N = cols.end;
            if (!w_boxes) ld = SwapLoader<S>(p, m0, cols.begin, cur.KT, tid);
          }
        } else {
          p.N = cols.end;  // a half tile loads its 128 rows (one scale tile)
          ld = SwapLoader<S>(p, m0, cols.begin, cur.KT, tid);
        }
      }
      mbar_wait(empty + 8 * st.stage, st.phase ^ 1u);
      const uint32_t stage = ring + st.stage * S::kStageBytes, bar = full + 8 * st.stage;
      if constexpr (ROWS_CHECKED) {
        if (tid == 0) {
          // boxes into weight rows whose last copy was cp.async's (generic proxy): order those writes before the
          // async proxy's (the stage's release chain orders them for the generic proxy only)
          if (w_boxes && ((cp_fills >> st.stage) & 1u)) fence_proxy_async();
          tt.template load<false>(maps, stage, bar, cur.kt, w_boxes);
        }
        cp_fills = w_boxes ? cp_fills & ~(1u << st.stage) : cp_fills | (1u << st.stage);
        if (w_boxes) {
          mbar_arrive(bar);
        } else {
          ld.load_weights(stage, cur.kt);
          cp_async_mbar_arrive(bar);
        }
      } else if constexpr (TMA) {
        tt.template load<true>(maps, stage, bar, cur.kt, true);
      } else {
        ld.load(stage, cur.kt, tid);
        cp_async_mbar_arrive(bar);
      }
      st.next();
      cur.next<S::BN>(probs, prefix, E, walk);
    }
  } else {
    // ------------------------------------------------------------------------------------------------ MMA warpgroups
    setmaxnreg_inc<S::kMmaRegs>();
    const int mt = tid - 128 * S::kLoaderWGs;
    const int wm = mt >> 7;  // weight rows [kWgRows wm, kWgRows (wm + 1)) of the tile
    const int warp = (mt >> 5) & 3;
    const FragOffsets fo = frag_offsets<S>(wm, mt & 127);
    Ring<S::kStages> st;
    auto release = [&](int stage) { mbar_arrive(empty + 8 * stage); };  // this thread is done with the stage
    for (int v = first_tile; v < walk.count; v += tile_stride) {
      int local;
      const int group = find_group_warp(prefix, E, walk.tile(v), &local);
      const int half = walk.half(v);  // -1: the whole tile
      const Prob* pp = probs + group;
      const int tiles_m = __ldg(&pp->tiles_m), rows_n = __ldg(&pp->N);
      int tile_m, tile_n;  // token tile, weight tile (the loader's)
      group_tile<WGRAD, S::BN>(local, tiles_m, WGRAD ? __ldg(&pp->band_m) : tiles_m, rows_n, &tile_m, &tile_n);
      const int m0 = tile_m * S::BM;
      const ColumnRange cols = walk_columns(tile_n * S::BN, half, rows_n);
      if (half >= 0 && cols.empty()) continue;  // a second half past N: no steps, nothing stored
      const int n0 = cols.begin;
      const int KT = (__ldg(&pp->K) + kBK - 1) / kBK;
      if (S::kSplit && half >= 0 && S::kWgRows * wm >= kHalfCols) {
        // a half tile without rows for this warpgroup: follow the ring (the loader waits for every MMA warp)
        for (int kt = 0; kt < KT; ++kt) {
          mbar_wait(full + 8 * st.stage, st.phase);
          release(st.stage);
          st.next();
        }
        continue;
      }

      float acc[T][S::kAcc];
#pragma unroll
      for (int i = 0; i < T; ++i)
#pragma unroll
        for (int r = 0; r < S::kAcc; ++r) acc[i][r] = 0.0f;
      auto fence_acc = [&]() {
#pragma unroll
        for (int i = 0; i < T; ++i) fence_regs(acc[i]);
      };
      uint32_t a_even[T][4][4], a_odd[T][4][4];
      // (Loading the next step's words right after this step's wgmmas, before the wait for the previous step's,
      // measured 5% slower: the stage release then waits behind the next stage's arrival.)
      StepWords<T> words;
      int prev = -1;  // stage read by the wgmmas still in flight (released once they complete)
      auto step = [&](uint32_t(&a)[T][4][4]) {
        const uint32_t stage = ring + st.stage * S::kStageBytes;
        mbar_wait(full + 8 * st.stage, st.phase);
        words.load(stage, fo);
        fence_frags(a);
        words.decode(fo, a);
        const uint32_t tok_desc = sw128_desc_lo(stage);
        fence_acc();
        fence_frags(a);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint64_t db = sw128_desc_block(tok_desc, j);
#pragma unroll
          for (int i = 0; i < T; ++i) wgmma_rs_f16<S::BM>(acc[i], a[i][j], db);
        }
        wgmma_commit();
        fence_acc();
        fence_frags(a);
        wgmma_wait<1>();  // the previous step's wgmmas are done with their stage and fragment registers
        if (prev >= 0) release(prev);
        prev = st.stage;
        st.next();
      };
      k_loop_two_sets(KT, a_even, a_odd, step);
      wgmma_wait<0>();
      fence_acc();
      if (prev >= 0) release(prev);

      Prob p = *pp;
      p.N = cols.end;
      const int n_base = n0 + S::kWgRows * wm + 16 * warp + (lane >> 2), m_base = m0 + 2 * (lane & 3);
#pragma unroll
      for (int i = 0; i < T; ++i) {
        if constexpr (WGRAD) store_tile_rows<OUT_F32>(acc[i], p, m_base, n_base + 64 * i, accumulate);
        else store_tile_transposed<OUT_F32>(acc[i], p, m_base, n_base + 64 * i, accumulate);
      }
    }
  }
}

}  // namespace swapped
}  // namespace nvfp4_gemm
