// NVFP4 grouped GEMM (sm_90a): the setup kernel (per-group problems on the device, SPEC 12.1 alpha and 12.5 group
// semantics), the algorithms' tiles (tile_of) and launch_fused. The fused kernel is in gemm/fused.cuh (instantiated
// by gemm/fused_fast.cu, gemm/fused_pair.cu and gemm/fused_exact.cu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/codes.h"  // nvfp4::Rule
#include "gemm/fused.cuh"   // the kernel shapes (tile_of), so tile counts and kernels cannot disagree
#include "gemm/swapped.cuh"
#include "gemm/problem.h"

namespace nvfp4_gemm {
namespace {

// SPEC 12.1: a group's alpha from the amaxes of the planes its operands supply. TE rules: (A * B) * rcp, with
// rcp = fp32(1/(36 G_A G_B)) from the host (fp32(1/7225344) when both planes have G = 448, SPEC 5.6),
// left to right; torchao: P_A * P_B with P = A / 2688 (torchao's per-tensor scale, SPEC 5.4; a NaN amax gives a NaN
// alpha, whose payload is free: 12.2 compares NaN as a class); torchao_noscale: 1.
__device__ __forceinline__ float group_alpha(int rule, float a_amax, float b_amax, float rcp) {
  if (rule == nvfp4::kRuleTorchao) return __fmul_rn(__fdiv_rn(a_amax, 2688.0f), __fdiv_rn(b_amax, 2688.0f));
  if (rule == nvfp4::kRuleTorchaoNoScale) return 1.0f;
  return __fmul_rn(__fmul_rn(a_amax, b_amax), rcp);
}

// The bytes of X's fp16 copy that one band of swapped wgrad's token tiles may span (Prob::band_m): a third of the
// H100's and H200's 50 MB L2.
constexpr long long kWgradBandBytes = 16ll << 20;

// Group g's problem (pointers into the grouped tensors' planes, offsets table of device/_results.py; sizes; alpha)
// into a.probs[g]; returns the group's tile count.
__device__ int setup_group(const SetupArgs& a, int g) {
  const int E1 = a.E + 1;
  const long long row0 = a.a_offs[g];
  const long long m = a.a_offs[g + 1] - row0;
  // B's group g (offset row 0) must hold the rows this kind reads (SPEC 12.5): wgrad the same m_g as A, fprop and
  // dgrad the N rows of W_g (fprop: the output columns b_rows, dgrad: the contraction kc). Sizes live on the device,
  // so a disagreement cannot raise: that group reads nothing (K = 0) and is written as NaN (alpha = NaN).
  const long long mb = a.b_offs[g + 1] - a.b_offs[g];
  const bool groups_agree = mb == (a.kind == kWgrad ? m : (a.kind == kFprop ? a.b_rows : a.kc));
  Prob p{};
  int tiles = 0;
  if (a.kind == kWgrad) {
    // dY_g's and X_g's columnwise planes (swap_wgrad: X_g's as A, so that swapped_256x128 reads its fp16 copy and
    // decodes dY_g's rows in registers; the step model is symmetric in its operands, SPEC 12.6)
    const uint8_t* dy = a.a_data + a.a_offs[4 * E1 + g];
    const uint8_t* dy_s = a.a_scales + a.a_offs[5 * E1 + g];
    const uint8_t* x = a.b_data + a.b_offs[4 * E1 + g];
    const uint8_t* x_s = a.b_scales + a.b_offs[5 * E1 + g];
    p.a = a.swap_wgrad ? x : dy;
    p.sa = a.swap_wgrad ? x_s : dy_s;
    p.b = a.swap_wgrad ? dy : x;
    p.sb = a.swap_wgrad ? dy_s : x_s;
    p.M = static_cast<int>(a.swap_wgrad ? a.b_rows : a.a_rows);
    p.N = static_cast<int>(a.swap_wgrad ? a.a_rows : a.b_rows);
    p.K = static_cast<int>((m + 15) / 16 * 16);
    const long long plane_row0 = static_cast<long long>(g) * a.a_rows;
    p.row0 = plane_row0 < (1ll << 31) ? static_cast<int>(plane_row0) : 0;  // (the host maps E N < 2^31 rows only)
    const long long doff = plane_row0 * a.ldd;
    p.d = a.out_f32 ? static_cast<void*>(static_cast<float*>(a.out) + doff)
                    : static_cast<void*>(static_cast<__nv_bfloat16*>(a.out) + doff);
    // an empty expert (K = 0): dW = alpha * 0 (the kernel's zero accumulator), or C left untouched; operands that
    // disagree on m_g (SPEC 12.5): no K step, alpha NaN, every tile written (accumulating too)
    if (p.K > 0 || !a.accumulate || !groups_agree)
      tiles = ((p.M + a.tile_m - 1) / a.tile_m) * ((p.N + a.tile_n - 1) / a.tile_n);
  } else {
    p.a = a.a_data + a.a_offs[2 * E1 + g];
    p.sa = a.a_scales + a.a_offs[3 * E1 + g];
    const int bp = a.kind == kFprop ? 2 : 4;
    p.b = a.b_data + a.b_offs[bp * E1 + g];
    p.sb = a.b_scales + a.b_offs[(bp + 1) * E1 + g];
    p.M = static_cast<int>(m);
    p.N = static_cast<int>(a.b_rows);
    p.K = static_cast<int>(a.kc);
    p.row0 = static_cast<int>(row0);  // < T < 2^31 (device/gemm.py bounds the sizes)
    const long long doff = row0 * a.ldd;
    p.d = a.out_f32 ? static_cast<void*>(static_cast<float*>(a.out) + doff)
                    : static_cast<void*>(static_cast<__nv_bfloat16*>(a.out) + doff);
    if (m > 0) tiles = ((p.M + a.tile_m - 1) / a.tile_m) * ((p.N + a.tile_n - 1) / a.tile_n);
  }
  p.bias = a.bias ? a.bias + static_cast<long long>(g) * a.ldd : nullptr;
  p.ldd = a.ldd;
  p.tiles_m = (p.M + a.tile_m - 1) / a.tile_m;
  if (p.tiles_m == 0) p.tiles_m = 1;
  p.band_m = p.tiles_m;
  if (a.swap_wgrad && p.K > 0) {
    // as many token tiles per band as keep one band's rows of X's fp16 copy (tile_m rows x K fp16 each) within
    // kWgradBandBytes, so that the band stays in L2 while the walk passes over every weight tile
    const long long band = kWgradBandBytes / (static_cast<long long>(a.tile_m) * p.K * 2);
    p.band_m = static_cast<int>(band < 1 ? 1 : (band < p.tiles_m ? band : p.tiles_m));
  }
  p.alpha = group_alpha(a.rule, a.a_amax[g], a.b_amax[g], a.rcp);
  if (!groups_agree) {
    p.K = 0;
    p.alpha = __int_as_float(0x7FC00000);
  }
  a.probs[g] = p;
  return tiles;
}

constexpr int kSetupThreads = 256;

// One thread per group (setup_group), then the prefix sum of the tile counts (one block; chunks of kSetupThreads
// groups, each scanned by warp shuffles and the warps' totals in shared memory, so no thread walks all E groups
// through global memory).
__global__ void __launch_bounds__(kSetupThreads) setup_kernel(SetupArgs a) {
  pdl_trigger();  // the next kernel may be placed now; it waits for this one's completion (common/pdl.cuh)
  __shared__ int warp_tiles[kSetupThreads / 32];
  const int E = a.E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) a.prefix[0] = 0;
  int before_chunk = 0;  // tiles of the groups before this chunk (the same in every thread)
  for (int base = 0; base < E; base += kSetupThreads) {  // (block-uniform trip count: the barriers below)
    const int g = base + static_cast<int>(threadIdx.x);
    // inclusive scan of the chunk's tile counts: within each warp, then the totals of the warps before it
    int incl = g < E ? setup_group(a, g) : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) warp_tiles[warp] = incl;
    __syncthreads();
    int chunk = 0;
#pragma unroll
    for (int w = 0; w < kSetupThreads / 32; ++w) {
      if (w < warp) incl += warp_tiles[w];
      chunk += warp_tiles[w];
    }
    if (g < E) a.prefix[g + 1] = before_chunk + incl;
    before_chunk += chunk;
    __syncthreads();  // every thread has read warp_tiles before the next chunk writes it
  }
}

}  // namespace

void launch_setup(const SetupArgs& a, cudaStream_t s) { setup_kernel<<<1, kSetupThreads, 0, s>>>(a); }

void tile_of(Algorithm algorithm, int* tile_m, int* tile_n) {
  switch (algorithm) {
    case kFused64x256:
    case kSwapped64x256:  // (the swapped kernel walks the same 64 x 256 tiles)
      *tile_m = fused::Fused64x256F32::BM;
      *tile_n = fused::Fused64x256F32::BN;
      return;
    case kFusedPair256x256:
      *tile_m = fused::FusedPairF32::kTileM;
      *tile_n = fused::FusedPairF32::BN;
      return;
    case kExactFused:
    case kExactCopies:
    case kExactHybrid:
    case kSm100Copies:
      *tile_m = fused::ExactFusedF32::BM;
      *tile_n = fused::ExactFusedF32::BN;
      return;
    case kSm100Simt:
      *tile_m = 64;  // gemm/sm100_simt.cu's CTA tile
      *tile_n = 64;
      return;
    case kSwapped256x128:
      *tile_m = swapped::ShapeWide::BM;
      *tile_n = swapped::ShapeWide::BN;
      return;
    default:  // fused_128x256; copies_cutlass (CUTLASS tiles its groups itself; the list is not walked)
      *tile_m = fused::Fused128x256F32::BM;
      *tile_n = fused::Fused128x256F32::BN;
  }
}

bool launch_fused(const LaunchArgs& a, cudaStream_t s) {
  // the fused kernels load by cp.async and store through their staged buffers or TMA boxes
  if (a.loader != kLoaderCpAsync || (a.epilogue != kEpilogueStaged && a.epilogue != kEpilogueTmaStore)) return false;
  switch (a.algorithm) {
    case kFused64x256:
    case kFused128x256: return launch_fused_fast(a, s);
    case kFusedPair256x256: return launch_fused_pair(a, s);
    case kExactFused: return launch_fused_exact(a, s);
    default: return false;
  }
}

}  // namespace nvfp4_gemm
