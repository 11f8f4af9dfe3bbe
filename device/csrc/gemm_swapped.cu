// Instantiations of the swapped fast kernel (gemm_swapped.cuh; SPEC 12.6 bit for bit): 64 x 256 tiles (tokens x
// weight rows), fp32 or bf16 output.
#include "gemm_swapped.cuh"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's tile of force 6, the skinny kernel's
static_assert(swp::Shape::BM == ws::ShapeSkinny::BM && swp::Shape::BN == ws::ShapeSkinny::BN,
              "the swapped kernel walks the skinny kernel's tile list");

void launch_swapped(const LaunchArgs& a, cudaStream_t s) {
  using S = swp::Shape;
  if (a.out_f32)
    wg::launch_persistent<swp::swapped_kernel<S, true>, S::kThreads, S::kSmem>(a, s);
  else
    wg::launch_persistent<swp::swapped_kernel<S, false>, S::kThreads, S::kSmem>(a, s);
}

}  // namespace nvfp4_gemm
