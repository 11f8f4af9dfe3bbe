// Fast-mode instantiations of the grouped GEMM for wgrad with short contractions: the 128 x 256 kernel of
// gemm_wgmma_ws.cuh in its B-reuse form (REUSE_B: contiguous tile ranges balanced by work, and the row tiles of one
// column tile computed over the same fp16 B stages; docs/gemm.md, stop 64), fp32 output (wgrad's TMA stores when the
// host encodes the map, as gemm_wgmma_fast.cu) or bf16. A file of its own so it compiles in parallel with the others.
#include "gemm_tma_host.h"
#include "gemm_wgmma_ws.cuh"

namespace nvfp4_gemm {

void launch_wgmma_reuse(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32) {
    CUtensorMap map{};
    ws::launch<ws::ShapeLarge, true, /*CONV_SEEKS=*/false, /*REUSE_B=*/true>(tma_host::with_wgrad_out_map(a, &map), s,
                                                                              map);
  } else {
    ws::launch<ws::ShapeLargeBf16, false, /*CONV_SEEKS=*/false, /*REUSE_B=*/true>(a, s);
  }
}

}  // namespace nvfp4_gemm
