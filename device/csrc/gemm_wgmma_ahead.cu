// Fast-mode instantiation of the 128 x 256 kernel for bf16-output wgrad: ShapeLargeBf16 with the next tile's lookup
// under a short tile's last wgmmas (ws_gemm_kernel's kLookAhead; docs/gemm.md, stop 50). A file of its own so it
// compiles in parallel with the other shapes.
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_large_bf16_ahead(const LaunchArgs& a, cudaStream_t s) {
  ws::launch<ws::ShapeLargeBf16Ahead, false>(a, s);
}

}  // namespace nvfp4_gemm
