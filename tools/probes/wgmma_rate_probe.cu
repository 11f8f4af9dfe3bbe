// How fast the tensor cores run chains of wgmma.m64nNk16 (f32 += f16 x f16) by shape, operand form and warpgroups:
// every CTA (one per SM) has W warpgroups; each issues `iters` steps of 4 k16 wgmmas (one per 16-block of a k64
// step, as the grouped GEMM kernels do) into each of its TILES accumulators, commits the step and waits for the
// previous step's group (wait_group 1), with nothing else in the loop. B (and A in the SS form) is a zeroed shared
// tile in the 128-byte swizzled K-major layout; the values do not matter for the rate. Printed: the mean cycles
// per step and SM (clock64 around the loop) and the SM's dense rate in f16 FMA per cycle (peak: 2048 on Hopper).
// Shapes whose accumulators do not fit the registers of 128 * W threads are reported as not run.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Idevice/csrc tools/probes/wgmma_rate_probe.cu \
//       -o /tmp/wgmma_rate_probe && /tmp/wgmma_rate_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "gemm/ptx.cuh"
#include "gemm/wgmma_ops.cuh"

using namespace nvfp4_gemm;

constexpr int kTileBytes = 32 * 1024;  // 256 rows x 128 bytes: B of any N here, then A (SS form)

template <int N, bool SS>
__device__ __forceinline__ void mma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t da, uint64_t db) {
  if constexpr (SS) {
    if constexpr (N == 64) wgmma_m64n64k16_ss_f16(d, da, db, 1);
    else wgmma_m64n128k16_ss_f16(d, da, db, 1);
  } else {
    if constexpr (N == 64) wgmma_m64n64k16_rs_f16(d, a, db, 1);
    else if constexpr (N == 128) wgmma_m64n128k16_rs_f16(d, a, db, 1);
    else wgmma_m64n256k16_rs_f16(d, a, db, 1);
  }
}

template <int N, int TILES, bool SS>
__global__ void rate_kernel(long long* cycles, float* sink, int iters) {
  extern __shared__ uint8_t smem_dyn[];
  const uint32_t base = (smem_u32(smem_dyn) + 1023u) & ~1023u;
  for (uint32_t o = 4 * threadIdx.x; o < 2 * kTileBytes; o += 4 * blockDim.x)
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + o), "r"(0u));
  fence_proxy_async();
  __syncthreads();
  float acc[TILES][N / 2];
#pragma unroll
  for (int i = 0; i < TILES; ++i)
#pragma unroll
    for (int r = 0; r < N / 2; ++r) acc[i][r] = 0.0f;
  const uint32_t a[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};  // fp16 ones (RS form)
  const uint32_t db = sw128_desc_lo(base), da = sw128_desc_lo(base + kTileBytes);
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < TILES; ++i) fence_regs(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < TILES; ++i) mma<N, SS>(acc[i], a, sw128_desc_block(da, j), sw128_desc_block(db, j));
    wgmma_commit();
#pragma unroll
    for (int i = 0; i < TILES; ++i) fence_regs(acc[i]);
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < TILES; ++i) fence_regs(acc[i]);
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < TILES; ++i)
#pragma unroll
    for (int r = 0; r < N / 2; ++r) s += acc[i][r];
  if (s != 0.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;  // never true (B is zero); keeps the wgmmas
}

template <int N, int TILES, bool SS>
void run(int wgs, int sms, long long* d_cycles, float* d_sink) {
  constexpr int kIters = 4096;
  const int smem = 2 * kTileBytes + 1024;
  cudaFuncSetAttribute(rate_kernel<N, TILES, SS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  rate_kernel<N, TILES, SS><<<sms, 128 * wgs, smem>>>(d_cycles, d_sink, kIters / 8);  // warm-up
  rate_kernel<N, TILES, SS><<<sms, 128 * wgs, smem>>>(d_cycles, d_sink, kIters);
  cudaError_t err = cudaGetLastError();  // a launch refused (e.g. too many registers for 128 * wgs threads)
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("m64n%-3dk16 %s  warpgroups %d  accumulators per warpgroup %d  not run: %s\n", N, SS ? "SS" : "RS",
                wgs, TILES, cudaGetErrorString(err));
    return;
  }
  std::vector<long long> c(sms);
  cudaMemcpy(c.data(), d_cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost);
  double mean = 0;
  for (long long v : c) mean += static_cast<double>(v) / sms;
  const double per_step = mean / kIters;
  const double fma = static_cast<double>(wgs) * TILES * 4 * 64 * N * 16 / per_step;
  std::printf("m64n%-3dk16 %s  warpgroups %d  accumulators per warpgroup %d  cycles per step %7.1f  "
              "f16 FMA per cycle and SM %6.0f\n", N, SS ? "SS" : "RS", wgs, TILES, per_step, fma);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  long long* d_cycles = nullptr;
  float* d_sink = nullptr;
  cudaMalloc(&d_cycles, sizeof(long long) * sms);
  cudaMalloc(&d_sink, sizeof(float) * sms * 1024);
  for (int wgs : {1, 2, 4}) {
    run<64, 1, false>(wgs, sms, d_cycles, d_sink);
    run<64, 2, false>(wgs, sms, d_cycles, d_sink);
    run<128, 1, false>(wgs, sms, d_cycles, d_sink);
    run<256, 1, false>(wgs, sms, d_cycles, d_sink);
    run<64, 1, true>(wgs, sms, d_cycles, d_sink);
    run<128, 1, true>(wgs, sms, d_cycles, d_sink);
  }
  return 0;
}
