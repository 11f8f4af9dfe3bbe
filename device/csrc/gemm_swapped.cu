// Instantiations of the swapped fast kernel (gemm_swapped.cuh; SPEC 12.6 bit for bit): 64 x 256 tiles (tokens x
// weight rows), fp32 or bf16 output.
#include <cstdlib>

#include "gemm_swapped.cuh"

namespace nvfp4_gemm {

// the setup kernel's tile list is built for pick_tile's tile of force 6, the skinny kernel's
static_assert(swp::Shape::BM == ws::ShapeSkinny::BM && swp::Shape::BN == ws::ShapeSkinny::BN,
              "the swapped kernel walks the skinny kernel's tile list");

template <class S, bool SPLIT, bool PREFETCH>
static void launch_shape(const LaunchArgs& a, cudaStream_t s) {
  if (a.out_f32)
    wg::launch_persistent<swp::swapped_kernel<S, true, SPLIT, PREFETCH>, S::kThreads, S::kSmem>(a, s);
  else
    wg::launch_persistent<swp::swapped_kernel<S, false, SPLIT, PREFETCH>, S::kThreads, S::kSmem>(a, s);
}

void launch_swapped(const LaunchArgs& a, cudaStream_t s) {
  static const int ab = getenv("NVFP4_SWAP_AB") ? atoi(getenv("NVFP4_SWAP_AB")) : 0;  // (scratch A/B, not committed)
  using S4 = swp::ShapeT<4, 1, 4>;
  switch (ab) {
    case 1: launch_shape<S4, true, false>(a, s); break;
    case 2: launch_shape<S4, false, false>(a, s); break;
    case 3: launch_shape<swp::ShapeT<4, 1, 8>, true, false>(a, s); break;
    case 4: launch_shape<swp::ShapeT<4, 1, 8>, false, false>(a, s); break;
    default: launch_shape<S4, true, true>(a, s); break;
  }
}

}  // namespace nvfp4_gemm
