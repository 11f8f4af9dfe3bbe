// Interface between copies_cutlass's host side (gemm/copies.cu, no CUTLASS headers) and its CUTLASS GEMM
// instantiations (gemm/cutlass_*.cu, one per epilogue, compiled in parallel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace nvfp4_gemm {

// Device arrays of one grouped launch (groups entries each). Problem shapes are {M, N, K} int triples; strides are
// row pitches in elements; alpha[g] is the group's fp32 alpha (SPEC 12.1).
struct CutlassArgs {
  int groups;
  int device;
  int sm_count;
  int max_active_clusters;  // 0: CUTLASS's own grid heuristic over sm_count SMs
  int* shapes;
  const void** ptr_a;
  const void** ptr_b;
  const void** ptr_c;  // nullptr unless the epilogue reads C
  const void** ptr_bias;  // group g's fp32 bias row [N]; nullptr unless the epilogue adds a bias
  void** ptr_d;
  int64_t* stride_a;
  int64_t* stride_b;  // (B's leading dimension: K for a ColumnMajor B, N for the RowMajor one)
  int64_t* stride_c;
  int64_t* stride_d;
  float* alpha;  // written by gemm/copies.cu's argument kernel, read by the epilogue
  void* workspace;
  size_t workspace_bytes;
};

// kOutBf16T: bf16 output with B read N-contiguous (gemm/cutlass.cuh's RowMajor B: dgrad over the weights' [N, K]
// copy, copies.h's CopiesArgs::b_copy == kCopyTransposed). kOutBf16Bias: bf16 output plus a per-group fp32 bias row
// (gemm/cutlass.cuh's AlphaAccPlusBias; K-major B).
enum CutlassEpilogue : int { kOutBf16 = 0, kOutF32 = 1, kOutF32PlusC = 2, kOutBf16T = 3, kOutBf16Bias = 4 };

// 0 on success; otherwise a small code (1 workspace too small, 2 cannot implement, 3 init failed, 4 launch failed).
int cutlass_run_bf16(const CutlassArgs& a, cudaStream_t s);
int cutlass_run_f32(const CutlassArgs& a, cudaStream_t s);
int cutlass_run_f32_plus_c(const CutlassArgs& a, cudaStream_t s);
int cutlass_run_bf16_t(const CutlassArgs& a, cudaStream_t s);
int cutlass_run_bf16_bias(const CutlassArgs& a, cudaStream_t s);
size_t cutlass_workspace_bf16(const CutlassArgs& a);
size_t cutlass_workspace_f32(const CutlassArgs& a);
size_t cutlass_workspace_f32_plus_c(const CutlassArgs& a);
size_t cutlass_workspace_bf16_t(const CutlassArgs& a);
size_t cutlass_workspace_bf16_bias(const CutlassArgs& a);

}  // namespace nvfp4_gemm
