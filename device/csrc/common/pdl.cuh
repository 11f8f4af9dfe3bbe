// Programmatic dependent launch for the grouped GEMM's kernel chains.
//
// A call enqueues a short chain: the setup kernel, then (depending on the path) the fp16 decode, the pointer retarget,
// the tensor-map kernel, and the GEMM kernel. Launched with programmatic stream serialization, a kernel of the chain is
// scheduled as soon as every CTA of its predecessor has executed `griddepcontrol.launch_dependents` (pdl_trigger),
// so its launch and CTA placement overlap the predecessor instead of following its completion.
//
// The rule that keeps this correct: a kernel launched this way executes `griddepcontrol.wait` (pdl_wait) in every CTA
// before it reads or writes global memory. The wait returns once the predecessor grid has completed and its writes
// are visible; since the predecessor, if launched the same way, completed only after its own wait returned, each
// kernel's completion implies that of every earlier kernel of the chain (the first kernel, the setup kernel, is an
// ordinary launch). A kernel launched without the attribute (an ordinary launch) returns from pdl_wait at once and
// triggers nothing.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace nvfp4 {

// Blocks until the previous kernel of the stream has completed and its memory is visible (no-op without PDL).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next kernel of the stream, if launched with PDL, be scheduled now (it still waits in pdl_wait).
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// The entry of a chained kernel that has a chained successor (decode, retarget, maps kernels): wait for the previous
// kernel, then let the next one be placed.
__device__ __forceinline__ void pdl_wait_then_trigger() {
  pdl_wait();
  pdl_trigger();
}

// Sets `attr` to programmatic stream serialization; returns the number of attributes written.
inline int pdl_attribute(cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  return 1;
}

// KERNEL<<<grid, threads, smem, s>>>(args...) with PDL. KERNEL must execute pdl_wait() before it touches memory that
// the previous kernel of the stream writes.
template <class... KArgs, class... Args>
void launch_chained(void (*kernel)(KArgs...), dim3 grid, int threads, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_attribute(&attr);
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace nvfp4

namespace nvfp4_gemm {  // (the GEMM's kernel chains use them unqualified)
using nvfp4::launch_chained;
using nvfp4::pdl_attribute;
using nvfp4::pdl_trigger;
using nvfp4::pdl_wait;
using nvfp4::pdl_wait_then_trigger;
}  // namespace nvfp4_gemm
