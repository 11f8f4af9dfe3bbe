// The grouped setup kernel (SPEC 9: device offsets from the splits, the amaxes zeroed or supplied, the tail zero-fill,
// the row-tile records) and the single tensor's amax initialisation (SPEC 4).
#include "quantize/launch.h"

#include "quantize/numerics.cuh"
#include "quantize/layout.cuh"

namespace nvfp4 {
static_assert(kTileM == kRowTileRows, "the host's row-tile counts (nvfp4_launch.h) are the kernels' tiles");
namespace {

// Zero bytes [offs[row][E], cap) of up to four buffers (offsets and capacities are multiples of 8).
struct TailFill {
  uint8_t* buf[kTailBufs];
  int64_t cap[kTailBufs];
  int row[kTailBufs];
};

// The setup of a grouped call, one launch (SPEC 9): the offset table [6, E+1] from the device splits (CTA 0 writes
// it and the per-group amaxes: zeros for the amax pass, or the supplied values of SPEC 4.3), the row-tile records
// (`recs`, when given), and zeros past the last group of the worst-case sized buffers. Splits that do not add up to
// T (SPEC 9.4): a negative size counts as 0 and the running total is capped at T, so every offset stays inside the
// buffers sized from T; a group is what is left of it below row T.
// Warp 0 of every CTA scans the splits alone (3.1-3.3 us; six int64 block-wide scans over 1024 threads with three
// barriers made it a 5.3-5.6 us kernel), each lane taking G consecutive groups (G = ceil(E / 32) up to
// kSetupLaneGroups, more groups in further rounds; cut_lane_groups, quantize/layout.cuh),
// and only four counts are scanned: rows, ceil(m/16), ceil(m/64), ceil(m/128). The six rows of the offset table are
// these counts times constants (SPEC 9.2):
//   rows; tiles = n128; row data = rows K/2; row scales = 128 n128 roundup(K/16, 4);
//   col data = K roundup(m, 16) / 2 = 8K n16; col scales = roundup(K, 128) roundup(n16, 4) = 4 roundup(K, 128) n64
// (roundup(ceil(m/16), 4) = 4 ceil(m/64)). Every CTA has the whole scan, so no CTA reads another's results; the other
// warps wait at one barrier for the totals and zero the tail.
constexpr int kSetupThreads = 256;
// At most 64 registers per thread: a setup CTA then takes a quarter of an SM's register file, so 3 of the
// amax pass's CTAs (256 threads x 64 registers) stay resident beside it; at 8 groups per lane and 168 registers only
// 1 did. 2 groups per lane (E <= 64 in one round) keep the scan inside that bound without spills; setup kernel 3.8 /
// 4.0 -> 3.1 / 3.3 us (E = 8 / 64; the calls within their spread).
constexpr int kSetupMinBlocks = 4;
constexpr int kSetupLaneGroups = 2;
enum SetupCount : int { kCntRows = 0, kCnt16 = 1, kCnt64 = 2, kCnt128 = 3, kNumCounts = 4 };

// Adds a group of `rows` rows to the four counts.
__device__ __forceinline__ void add_group_counts(int64_t (&c)[kNumCounts], int64_t rows) {
  c[kCntRows] += rows;
  c[kCnt16] += ceil_div(rows, 16);
  c[kCnt64] += ceil_div(rows, 64);
  c[kCnt128] += ceil_div(rows, (int64_t)kTileM);
}

// Offset-table row r from the four counts (SPEC 9.2, as above).
__device__ __forceinline__ int64_t offset_from_counts(int r, const int64_t (&c)[kNumCounts], int64_t K) {
  switch (r) {
    case kOffRows: return c[kCntRows];
    case kOffTiles: return c[kCnt128];
    case kOffRowData: return c[kCntRows] * (K / 2);
    case kOffRowScale: return c[kCnt128] * kTileM * round_up(K / 16, 4);
    case kOffColData: return c[kCnt16] * 8 * K;
    default: return c[kCnt64] * 4 * round_up(K, 128);  // kOffColScale
  }
}

__global__ void __launch_bounds__(kSetupThreads, kSetupMinBlocks)
    group_setup_kernel(const int64_t* __restrict__ splits, int E, int64_t T, int64_t K, int64_t* __restrict__ offs,
                       float* __restrict__ row_amax, float* __restrict__ col_amax,
                       const float* __restrict__ supplied_row, const float* __restrict__ supplied_col, TailFill f,
                       TileRecord* __restrict__ recs) {
  // The amax pass is launched with a programmatic dependency on this grid: let it become resident now (its first
  // wave finds its tiles from the splits and waits for this grid only before its atomics; amax_fast_bf16).
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ int64_t total[kNumCounts];
  const int lane = threadIdx.x & 31;
  const bool writer = blockIdx.x == 0;
  if (threadIdx.x < 32) {
    const int G = min(kSetupLaneGroups, max(1, (E + 31) / 32));
    int64_t raw = 0;  // SPEC 9.4's capped running total before this round (cut_lane_groups)
    int64_t carry[kNumCounts] = {0, 0, 0, 0};  // the counts before this chunk (warp-uniform)
    if (writer && lane < kNumOffRows) offs[(int64_t)lane * (E + 1)] = 0;
    for (int base = 0; base < E; base += 32 * G) {
      const int g0 = base + lane * G;  // this lane's groups: g0 .. g0 + G - 1
      int64_t m[kSetupLaneGroups];
      cut_lane_groups(splits, E, T, base, G, raw, m);  // SPEC 9.4: m[e] = the rows of group g0 + e
      int64_t cnt[kNumCounts] = {0, 0, 0, 0};  // this lane's counts
#pragma unroll
      for (int e = 0; e < kSetupLaneGroups; ++e) add_group_counts(cnt, m[e]);
      // exclusive prefix of the four counts over the lanes, plus the chunks before
      int64_t pre[kNumCounts];
#pragma unroll
      for (int c = 0; c < kNumCounts; ++c) pre[c] = cnt[c];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
        for (int c = 0; c < kNumCounts; ++c) {
          const int64_t n = __shfl_up_sync(0xffffffffu, pre[c], o);
          if (lane >= o) pre[c] += n;
        }
      }
#pragma unroll
      for (int c = 0; c < kNumCounts; ++c) {
        const int64_t lane_incl = pre[c];
        pre[c] = carry[c] + lane_incl - cnt[c];
        carry[c] += __shfl_sync(0xffffffffu, lane_incl, 31);
      }
      // pre = the counts before group g0; walk this lane's groups
#pragma unroll
      for (int e = 0; e < kSetupLaneGroups; ++e) {
        const int i = g0 + e;
        if (e >= G || i >= E) break;
        const int64_t own = m[e];
        if (recs != nullptr) {
          // tile j of the group by CTA j % gridDim.x: a large group's records spread over the grid (one thread
          // writing a 110-tile group's records made the setup 3 us longer)
          for (int64_t j = blockIdx.x; j * kTileM < own; j += gridDim.x) {
            const int64_t first = pre[kCntRows] + j * kTileM;
            recs[pre[kCnt128] + j] = make_int4((int)(uint32_t)first, (int)(uint32_t)((uint64_t)first >> 32),
                                               (int)min(own - j * kTileM, (int64_t)kTileM), i);
          }
        }
        add_group_counts(pre, own);
        if (writer) {
#pragma unroll
          for (int r = 0; r < kNumOffRows; ++r) offs[(int64_t)r * (E + 1) + i + 1] = offset_from_counts(r, pre, K);
          if (row_amax) row_amax[i] = supplied_row ? supplied_amax(supplied_row[i]) : 0.0f;
          if (col_amax) col_amax[i] = supplied_col ? supplied_amax(supplied_col[i]) : 0.0f;
        }
      }
    }
    if (lane == 0) {  // carry is warp-uniform (constant indices: no local-memory copy)
#pragma unroll
      for (int c = 0; c < kNumCounts; ++c) total[c] = carry[c];
    }
  }
  __syncthreads();
  int64_t tot[kNumCounts];
#pragma unroll
  for (int c = 0; c < kNumCounts; ++c) tot[c] = total[c];
  const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
#pragma unroll
  for (int b = 0; b < kTailBufs; ++b) {  // unrolled: f's arrays are indexed by constants (no local-memory copy)
    // [start, end) in bytes, both multiples of 8 (row data: m K / 2 with K % 16 == 0; the others multiples of 16);
    // an 8-byte piece at either end, 16-byte stores between (the buffers are 256-byte aligned allocations)
    if (f.buf[b] == nullptr) continue;
    int64_t start = 0;
#pragma unroll
    for (int r = 0; r < kNumOffRows; ++r)  // constant r (a runtime row would copy tot to local memory)
      if (f.row[b] == r) start = offset_from_counts(r, tot, K);
    const int64_t end = f.cap[b];
    if (start >= end) continue;
    const int64_t s16 = round_up(start, (int64_t)16), e16 = end / 16 * 16;
    if (first == 0 && s16 != start) *reinterpret_cast<uint2*>(f.buf[b] + start) = make_uint2(0, 0);
    // (start < end, both multiples of 8: e16 >= s16, so the two 8-byte pieces never overlap)
    if (first == 1 && e16 != end) *reinterpret_cast<uint2*>(f.buf[b] + e16) = make_uint2(0, 0);
    uint4* p = reinterpret_cast<uint4*>(f.buf[b]);
    for (int64_t j = s16 / 16 + first; j < e16 / 16; j += stride) p[j] = make_uint4(0, 0, 0, 0);
  }
}

// A single tensor's amaxes before its quantize pass (launch_init_amax): zeros for the amax pass's atomics (SPEC 4.1),
// or the supplied values (SPEC 4.3). The next kernel is launched with a programmatic dependency on this grid and
// waits for it only where it reads the amaxes (the amax pass before its atomics, the quantize pass after its tile
// loads), so this grid lets it start at once: the write overlaps that kernel's loads instead of a kernel boundary.
__global__ void init_amax_kernel(float* __restrict__ row_amax, float* __restrict__ col_amax,
                                 const float* __restrict__ supplied_row, const float* __restrict__ supplied_col) {
  asm volatile("griddepcontrol.launch_dependents;");
  row_amax[0] = supplied_row ? supplied_amax(supplied_row[0]) : 0.0f;
  if (col_amax != nullptr) col_amax[0] = supplied_col ? supplied_amax(supplied_col[0]) : 0.0f;
}

}  // namespace

void launch_group_setup(const int64_t* splits, int E, int64_t T, int64_t K, int64_t* offs, float* row_amax,
                        float* col_amax, const float* supplied_row, const float* supplied_col,
                        uint8_t* const bufs[kTailBufs], const int64_t caps[kTailBufs],
                        const int rows[kTailBufs], int4* tile_recs, cudaStream_t stream) {
  TailFill f;
  int64_t most = 0;
  for (int i = 0; i < kTailBufs; ++i) {
    f.buf[i] = bufs[i];
    f.cap[i] = caps[i];
    f.row[i] = rows[i];
    if (bufs[i] && caps[i] / 16 > most) most = caps[i] / 16;
  }
  // The tail is at most ~E*16*K/2 bytes per buffer; size the grid by capacity, at most 132 CTAs (each also scans
  // the E splits, which is cheap next to the fill).
  const int grid = grid_for(most, kSetupThreads) < 132 ? grid_for(most, kSetupThreads) : 132;
  group_setup_kernel<<<grid, kSetupThreads, 0, stream>>>(splits, E, T, K, offs, row_amax, col_amax, supplied_row,
                                                          supplied_col, f, tile_recs);
}

void launch_init_amax(float* row_amax, float* col_amax, const float* supplied_row, const float* supplied_col,
                      cudaStream_t stream) {
  init_amax_kernel<<<1, 1, 0, stream>>>(row_amax, col_amax, supplied_row, supplied_col);
}

}  // namespace nvfp4
