// A warp-wide search of a non-decreasing int64 table (the grouped layouts' offset rows, SPEC 9.2): the largest index
// g < n with table[g] <= key, given table[0] <= key. Empty groups share their start with the next group, so the
// search lands on the group that holds `key`.
#pragma once

#include <cstdint>

namespace nvfp4 {

// 32-way search: each round, lane l tests table[lo + l * stride] (a prefix of the lanes passes, the table being
// non-decreasing and table[lo] <= key), and lo moves to the last passing point: ceil(log32(n)) rounds of loads issued
// in parallel (1 for n <= 32, 2 for n <= 1024) instead of a binary search's log2(n) dependent ones. `key` must be the
// same in every lane, and the whole warp must call it.
__device__ __forceinline__ int64_t warp_search_at_or_before(const int64_t* __restrict__ table, int64_t n,
                                                            int64_t key) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  int64_t stride = 1;
  while (stride * 32 < n) stride *= 32;
  int64_t lo = 0;
  for (; stride >= 1; stride >>= 5) {
    const int64_t idx = lo + lane * stride;
    const bool pass = idx < n && __ldg(table + idx) <= key;
    lo += static_cast<int64_t>(__popc(__ballot_sync(0xffffffffu, pass)) - 1) * stride;
  }
  return lo;
}

}  // namespace nvfp4
