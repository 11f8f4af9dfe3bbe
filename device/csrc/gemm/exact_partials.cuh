// Exact mode's partial pipeline (SPEC 12.2), shared by both exact kernels (gemm/fused.cuh kExact,
// gemm/exact_copies.cuh): per 16-block, the exact partial product of a warpgroup's 64 x 128 tile is computed by one
// wgmma with scale-d = 0 into a partial fragment and added to the fp32 accumulator with __fadd_rn, block by block in K
// order. Why the partial is exact is argued in gemm/fused.cuh (the exact MMA loop).
//
// Two partial fragments alternate, so one block's wgmma runs while the previous block is added (accumulator + two
// partials = 192 registers). Deeper pipelines did not pay: two m64n64 partials per block (three wgmmas in flight
// during an add) and two K steps per pass both measured the same speed.
#pragma once

#include "gemm/ptx.cuh"

namespace nvfp4_gemm {

// BLOCKS consecutive 16-blocks:
//   issue(j, part): issues block j's wgmma into `part` (after wgmma_fence; the commit follows here);
//   done(j):        called once block j's wgmma has completed, before its partial is added (a stage is free once the
//                   last block that reads it is done; wait_group completes groups in order).
// The last block ends with wait_group 0, so no wgmma stays in flight past the caller's loop back edge (ptxas would
// then serialise every wgmma, C7514).
template <int BLOCKS, int R, class Issue, class Done>
__device__ __forceinline__ void exact_blocks(float (&acc)[R], float (&part)[2][R], Issue&& issue, Done&& done) {
#pragma unroll
  for (int j = 0; j < 2 && j < BLOCKS; ++j) {
    wgmma_fence();
    issue(j, part[j]);
    wgmma_commit();
    fence_regs(part[j]);
  }
#pragma unroll
  for (int j = 0; j < BLOCKS; ++j) {
    float(&p)[R] = part[j & 1];
    if (j + 1 < BLOCKS) wgmma_wait<1>();  // block j is complete, block j + 1 may still run
    else wgmma_wait<0>();
    done(j);
    fence_regs(p);
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = __fadd_rn(acc[i], p[i]);
    if (j + 2 < BLOCKS) {
      wgmma_fence();  // `p` was just read
      issue(j + 2, p);
      wgmma_commit();
      fence_regs(p);
    }
  }
}

}  // namespace nvfp4_gemm
