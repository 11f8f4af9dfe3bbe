// Does compute-sanitizer's racecheck see the ordering of a per-warp stage release?
//
// The sm100_copies GEMM kernel (device/csrc/gemm/sm100_copies.cu) releases a ring stage per warp: every lane reads
// the stage with ld.shared, then __syncwarp() (bar.warp.sync, which orders the memory accesses of the participating
// lanes) and lane 0 alone arrives on the stage's `empty` mbarrier (release semantics); the loader waits on it
// (acquire) and overwrites the stage with cp.async. Per the PTX memory model the reads of lanes 1-31 happen before the
// overwrite.
// This program runs that ring with one consumer warp and one producer warp, in three modes:
//   0  per-warp release: __syncwarp, lane 0 arrives (empty count 1)        -- the kernel's pattern
//   1  every lane arrives (empty count 32)                                  -- the same ordering, per thread
//   2  per-warp release, each lane reading only the word its own lane's cp.async wrote
// and checks the sums (a real race would change them).
//   nvcc -gencode=arch=compute_90a,code=sm_90a -I device/csrc -o /tmp/warp_release_repro tools/sanitizer/warp_release_repro.cu
//   compute-sanitizer --tool racecheck /tmp/warp_release_repro 0    (and 1, 2)
// (tools/gpu_session.sh racecheck-repro runs these.)
#include <cstdint>
#include <cstdio>
#include <cstdlib>

// the kernels' own primitives: mbarrier init / arrive / wait, cp.async and its mbarrier arrival
#include "gemm/ptx.cuh"

using nvfp4_gemm::cp_async16;
using nvfp4_gemm::smem_u32;
using nvfp4_gemm::cp_async_mbar_arrive;
using nvfp4_gemm::mbar_arrive;
using nvfp4_gemm::mbar_init;
using nvfp4_gemm::mbar_wait;

constexpr int kStages = 2;

__global__ void ring(const int4* __restrict__ src, int rounds, int mode, long long* out) {
  __shared__ alignas(16) int4 buf[kStages][32];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_u32(&full[s]), 32);
      mbar_init(smem_u32(&empty[s]), mode == 1 ? 32 : 1);
    }
    nvfp4_gemm::fence_mbarrier_init_cluster();
  }
  __syncthreads();
  if (warp == 1) {  // producer
    for (int r = 0; r < rounds; ++r) {
      const int s = r % kStages;
      const uint32_t phase = (r / kStages) & 1;
      mbar_wait(smem_u32(&empty[s]), phase ^ 1u);
      cp_async16(smem_u32(&buf[s][lane]), src + r * 32 + lane, 16);
      cp_async_mbar_arrive(smem_u32(&full[s]));
    }
  } else {  // consumer
    long long acc = 0;
    for (int r = 0; r < rounds; ++r) {
      const int s = r % kStages;
      const uint32_t phase = (r / kStages) & 1;
      mbar_wait(smem_u32(&full[s]), phase);
      const int4 v = buf[s][mode == 2 ? lane : (lane + 1) & 31];
      acc += v.x + v.y + v.z + v.w;
      if (mode == 1) {
        mbar_arrive(smem_u32(&empty[s]));
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(smem_u32(&empty[s]));
      }
    }
    out[lane] = acc;
  }
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0, rounds = 64;
  int4* src;
  long long* out;
  cudaMallocManaged(&src, sizeof(int4) * 32 * rounds);
  cudaMallocManaged(&out, sizeof(long long) * 32);
  for (int i = 0; i < 32 * rounds; ++i) src[i] = make_int4(i, 2 * i, 3 * i, 4 * i);
  ring<<<1, 64>>>(src, rounds, mode, out);
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  int bad = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int from = mode == 2 ? lane : (lane + 1) & 31;
    long long want = 0;
    for (int r = 0; r < rounds; ++r) want += 10LL * (r * 32 + from);
    bad += out[lane] != want;
  }
  printf("mode %d: %s\n", mode, bad ? "WRONG SUMS" : "sums ok");
  return bad ? 1 : 0;
}
