// The fp16 operand copies and the algorithms over them (copies.h). copies_cutlass is up to three kernels around one
// CUTLASS grouped GEMM (gemm/cutlass.cuh), all on the caller's stream and driven by the setup kernel's per-group
// problems (gemm/setup.cu), so the path stays graph-safe:
//  1. decode_plane_kernel: each operand plane (B's only when the caller gives no copy of it, CopiesArgs::b_copy;
//     SPEC 9.2 layout, swizzled scales of SPEC 8.2) -> fp16 values E2M1 x E4M3 (exact and normal, SPEC 12.6; no
//     S_enc: alpha is applied in the epilogue, SPEC 12.1), in the plane's own layout (fp16 element 2j, 2j + 1 <- packed
//     byte j), natural K order.
//  2. cutlass_groups_kernel: per group {M, N, K}, operand / output pointers into those buffers, row pitches, alpha.
//     A group without a K step (an empty wgrad expert, or operand groups that disagree, SPEC 12.5) gets M = 0 (CUTLASS
//     SM90 computes garbage for K = 0, NVIDIA/cutlass#2674) and is written by the same kernel: the epilogue of
//     SPEC 12.2 with acc = +0 for those groups (alpha * 0; operands that disagree have a NaN alpha: NaN, plus C when
//     accumulating), exactly where the fused kernels write their zero-step tiles; an empty expert that accumulates has
//     no tiles and leaves C bit for bit (SPEC 12.5).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm/cutlass.h"
#include "gemm/decode_f16.cuh"
#include "gemm/copies.h"
#include "common/pdl.cuh"
#include "common/swizzle.cuh"
#include "common/warp_search.cuh"

namespace nvfp4_gemm {
namespace {

// The group of a lane's packed byte `byte` (group g of the plane holds bytes [offs[g], offs[g+1]); empty groups share
// the next start): the warp's first byte `warp_byte` by the warp search (common/warp_search.cuh), then each lane steps
// on while the next group starts at or before its own byte (a warp spans 256 bytes: a step is rare).
__device__ __forceinline__ int warp_byte_group(const PlaneView& p, long long warp_byte, long long byte) {
  int g = static_cast<int>(nvfp4::warp_search_at_or_before(p.offs, p.E, warp_byte));
  while (g + 1 < p.E && p.offs[g + 1] <= byte) ++g;
  return g;
}

// One thread per 8 packed bytes (16 codes = one 16-block, one scale); a group's row pitch is `pitch` bytes
// (pitch_const, or the group's bytes / rows_const for a columnwise plane, whose rows are the K features and whose
// pitch is roundup(m_g, 16) / 2).
// Order inside each 16-block of the copy (CopyOrder): natural (codes 0..15); even / odd (codes 0, 2, .., 14, 1, 3, ..,
// 15: the token operand of swapped_64x256, gemm/swapped.cuh, whose register fragments hold that order); or the
// decode order of gemm/decode_f16.cuh (codes 0, 2, 4, 6, 1, 3, 5, 7, then the same for 8..15: the A operand of
// exact_hybrid, whose B tiles fused::convert_b_rows writes in that order; a 16-block's partial is the same exact
// sum of products when both operands permute its K positions alike).
enum CopyOrder { kNaturalOrder, kEvenOddOrder, kDecodeOrder };
constexpr int kDecodeThreads = 256;
template <int ORDER>
__global__ void __launch_bounds__(kDecodeThreads) decode_plane_kernel(PlaneView p, uint4* __restrict__ out) {
  pdl_wait_then_trigger();  // chained launch (common/pdl.cuh): the previous kernel's outputs are visible from here on
  const int lane = threadIdx.x & 31;
  const long long chunk = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long warp_chunk = chunk - lane;
  const long long end = p.offs[p.E];  // past the last group: not decoded (the buffers' worst-case tail is never read)
  if (warp_chunk * 8 >= end) return;  // (the whole warp)
  const bool live = chunk * 8 < end;
  const int g = warp_byte_group(p, warp_chunk * 8, live ? chunk * 8 : warp_chunk * 8);
  if (live) {
    const long long g0 = p.offs[g];
    const long long pitch = p.pitch_const ? p.pitch_const : (p.offs[g + 1] - g0) / p.rows_const;
    const uint32_t blocks = static_cast<uint32_t>(pitch / 8);  // 16-blocks per row
    // row and block of the chunk inside its group: a 32-bit division where the chunk index fits
    const unsigned long long local = static_cast<unsigned long long>(chunk * 8 - g0) / 8;
    const unsigned long long row = local <= 0xFFFFFFFFull ? static_cast<uint32_t>(local) / blocks : local / blocks;
    const long long block = static_cast<long long>(local - row * blocks);
    const long long cp4 = (blocks + 3) / 4;  // scale tile columns
    const uint32_t sf = f16dec::scale_to_f16x2(
        p.scales[p.scale_offs[g] + nvfp4::swizzle_offset<int64_t>(static_cast<long long>(row), block, cp4)]);
    const uint2 w = *reinterpret_cast<const uint2*>(p.data + chunk * 8);
    uint32_t a[4], b[4];
    f16dec::e2m1x8_to_f16(w.x, sf, a);  // chunk order {0,2} {4,6} {1,3} {5,7}
    f16dec::e2m1x8_to_f16(w.y, sf, b);  // {8,10} {12,14} {9,11} {13,15}
    uint4 lo, hi;  // the chunk's fp16 values 0-7 and 8-15 of the copy's order
    if constexpr (ORDER == kEvenOddOrder) {
      lo = make_uint4(a[0], a[1], b[0], b[1]);
      hi = make_uint4(a[2], a[3], b[2], b[3]);
    } else if constexpr (ORDER == kDecodeOrder) {
      lo = make_uint4(a[0], a[1], a[2], a[3]);
      hi = make_uint4(b[0], b[1], b[2], b[3]);
    } else {
      lo = make_uint4(__byte_perm(a[0], a[2], 0x5410), __byte_perm(a[0], a[2], 0x7632),
                      __byte_perm(a[1], a[3], 0x5410), __byte_perm(a[1], a[3], 0x7632));
      hi = make_uint4(__byte_perm(b[0], b[2], 0x5410), __byte_perm(b[0], b[2], 0x7632),
                      __byte_perm(b[1], b[3], 0x5410), __byte_perm(b[1], b[3], 0x7632));
    }
    out[2 * chunk] = lo;
    out[2 * chunk + 1] = hi;
  }
}

// The fp16 copy (`f16`, made by decode_plane_kernel from `plane`) of the operand that starts at packed byte `p` of the
// plane: fp16 elements 2j, 2j + 1 of a copy hold packed byte j.
__device__ __forceinline__ const __half* f16_copy_of(const void* f16, const uint8_t* plane, const uint8_t* p) {
  return static_cast<const __half*>(f16) + 2 * (p - plane);
}

// Group g's CUTLASS arguments: {M, N, K}, operand / output pointers, row pitches, alpha.
__device__ void cutlass_group_args(const CopiesArgs& d, const CutlassArgs& c, int g) {
  const Prob& p = d.probs[g];
  const bool has_tiles = d.prefix[g + 1] > d.prefix[g];
  c.shapes[3 * g + 0] = (p.K > 0 && has_tiles) ? p.M : 0;
  c.shapes[3 * g + 1] = p.N;
  c.shapes[3 * g + 2] = p.K;
  c.ptr_a[g] = f16_copy_of(d.a_f16, d.a.data, p.a);
  // a given copy (fprop / dgrad over the weights' [E, N, K] values): group g's matrix at g N K, whatever the plane's
  // group bytes (every weight group has N rows)
  c.ptr_b[g] = d.b_copy == kCopyDecoded ? f16_copy_of(d.b_f16, d.b.data, p.b)
                                        : static_cast<const __half*>(d.b_f16) + g * d.b_copy_group;
  c.ptr_d[g] = p.d;
  if (c.ptr_c) c.ptr_c[g] = p.d;  // accumulate in place: C = the output buffer
  if (c.ptr_bias) c.ptr_bias[g] = p.bias;  // (the setup kernel's bias + g ldd)
  c.stride_a[g] = p.K;  // fprop / dgrad: the contraction; wgrad: roundup(m_g, 16), the columnwise pitch
  c.stride_b[g] = d.b_copy == kCopyDecoded ? p.K : d.b_copy_ld;
  c.stride_d[g] = p.ldd;
  if (c.stride_c) c.stride_c[g] = p.ldd;
  c.alpha[g] = p.alpha;
}

// Groups with tiles but no K step: y = fp32(alpha * +0) [+ C], cast to the output (SPEC 12.2 with acc = +0). Only
// wgrad has such groups by its sizes (and no bias); fprop / dgrad groups lack K steps only where the operands
// disagree (alpha NaN: the output is NaN with or without a bias).
// The group's rows are strided over blockIdx.x, its columns over the threads (coalesced stores, no division per
// element). Rows that start 16-byte aligned (copies_cutlass's outputs always do) are written 16 bytes per
// thread and store (8 bf16 or 4 fp32; C read the same way), the columns past the last whole vector one by one: an
// empty wgrad expert's output is large (E8 T16384 skewed: 14336 x 4096 bf16 zeros, 131 us with one 2-byte store per
// element and 128 CTAs per group on the H200).
template <typename T>
__device__ __forceinline__ void zero_k_row(T* o, long long cols, float y0, bool accumulate) {
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte store
  const long long vec_cols = reinterpret_cast<uintptr_t>(o) % 16 == 0 ? cols / kVec * kVec : 0;
  for (long long c = threadIdx.x * kVec; c < vec_cols; c += blockDim.x * kVec) {
    uint4* v = reinterpret_cast<uint4*>(o + c);
    if constexpr (sizeof(T) == 4) {  // fp32
      float4 y = make_float4(y0, y0, y0, y0);
      if (accumulate) {
        const float4 cv = *reinterpret_cast<const float4*>(v);
        y = make_float4(__fadd_rn(y0, cv.x), __fadd_rn(y0, cv.y), __fadd_rn(y0, cv.z), __fadd_rn(y0, cv.w));
      }
      *reinterpret_cast<float4*>(v) = y;
    } else {  // bf16 (no C)
      const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(y0));  // (the tail's conversion, NaN included)
      const uint32_t w = b | (b << 16);
      *v = make_uint4(w, w, w, w);
    }
  }
  for (long long c = vec_cols + threadIdx.x; c < cols; c += blockDim.x) {
    if constexpr (sizeof(T) == 4) {
      o[c] = accumulate ? __fadd_rn(y0, o[c]) : y0;
    } else {
      o[c] = __float2bfloat16_rn(y0);
    }
  }
}

// Grid (x, E): block (0, g) writes group g's CUTLASS arguments (cutlass_group_args); then every block of column g
// takes its share of the group's zero-step epilogue (zero_k_row) when the group has tiles but no K step.
__global__ void cutlass_groups_kernel(CopiesArgs d, CutlassArgs c) {
  const int g = blockIdx.y;
  if (blockIdx.x == 0 && threadIdx.x == 0) cutlass_group_args(d, c, g);
  const Prob& p = d.probs[g];
  if (p.K != 0 || d.prefix[g + 1] == d.prefix[g]) return;
  const float y0 = __fmul_rn(p.alpha, 0.0f);
  for (long long r = blockIdx.x; r < p.M; r += gridDim.x) {
    if (d.out_f32) {
      zero_k_row(static_cast<float*>(p.d) + r * p.ldd, p.N, y0, d.accumulate != 0);
    } else {
      zero_k_row(static_cast<__nv_bfloat16*>(p.d) + r * p.ldd, p.N, y0, false);
    }
  }
}

// Points group g's operands at their fp16 copies (b only when it has one: d.b_f16 set).
__global__ void retarget_probs_kernel(Prob* probs, CopiesArgs d) {
  pdl_wait_then_trigger();  // chained launch (common/pdl.cuh): the previous kernel's outputs are visible from here on
  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < d.E; g += gridDim.x * blockDim.x) {
    Prob& p = probs[g];
    p.a = reinterpret_cast<const uint8_t*>(f16_copy_of(d.a_f16, d.a.data, p.a));
    if (d.b_f16) p.b = reinterpret_cast<const uint8_t*>(f16_copy_of(d.b_f16, d.b.data, p.b));
  }
}

template <int ORDER = kNaturalOrder>
void decode_plane(const PlaneView& p, void* out, cudaStream_t s) {
  if (p.cap_bytes <= 0) return;
  const long long chunks = p.cap_bytes / 8;
  const auto blocks = static_cast<unsigned>((chunks + kDecodeThreads - 1) / kDecodeThreads);
  launch_chained(decode_plane_kernel<ORDER>, dim3(blocks), kDecodeThreads, 0, s, p, static_cast<uint4*>(out));
}

}  // namespace

#ifdef NVFP4_NO_CUTLASS  // built without CUTLASS's headers: the path reports "not built" (code 5)
int cutlass_run_bf16(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_f32(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_f32_plus_c(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_bf16_t(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_bf16_bias(const CutlassArgs&, cudaStream_t) { return 5; }
size_t cutlass_workspace_bf16(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_f32(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_f32_plus_c(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_bf16_t(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_bf16_bias(const CutlassArgs&) { return 0; }
bool cutlass_built() { return false; }
#else
bool cutlass_built() { return true; }
#endif

int launch_copies_cutlass(const CopiesArgs& d, CutlassArgs c, cudaStream_t s) {
  decode_plane(d.a, d.a_f16, s);
  if (d.b_copy == kCopyDecoded) decode_plane(d.b, d.b_f16, s);
  // CTAs per group for the zero-step epilogue: wgrad's empty experts are ordinary (E8 T16384 skewed has one: 14336 x
  // 4096 bf16 zeros), so up to 1024 per group and 8K in all (groups with K steps return at once); fprop and dgrad
  // groups lack K steps only when the operands disagree (SPEC 12.5, NaN output), so 8 per group keep the launch small
  // (the E64 layer step's fprop and dgrad: 17.5 us with 128 per group and the arguments in a kernel of their own,
  // 5.1 us so, torch.profiler)
  const int per_group = d.kind != kWgrad ? 8 : (d.E >= 8192 ? 1 : (d.E >= 8 ? 8192 / d.E : 1024));
  cutlass_groups_kernel<<<dim3(per_group, d.E), 256, 0, s>>>(d, c);
  switch (d.epilogue) {
    case kOutBf16: return cutlass_run_bf16(c, s);
    case kOutBf16T: return cutlass_run_bf16_t(c, s);
    case kOutBf16Bias: return cutlass_run_bf16_bias(c, s);
    case kOutF32: return cutlass_run_f32(c, s);
    default: return cutlass_run_f32_plus_c(c, s);
  }
}

void launch_decode_plane(const PlaneView& p, void* out, cudaStream_t s) { decode_plane(p, out, s); }

namespace {

// Both planes decoded into their fp16 copies, and every group's Prob::a / Prob::b pointed into them.
void copies_of_both_planes(const CopiesArgs& d, Prob* probs, cudaStream_t s) {
  decode_plane(d.a, d.a_f16, s);
  decode_plane(d.b, d.b_f16, s);
  launch_chained(retarget_probs_kernel, dim3((d.E + 255) / 256), 256, 0, s, probs, d);
}

}  // namespace

bool launch_exact_copies_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  copies_of_both_planes(d, probs, s);
  return launch_exact_copies(l, d, s);
}

bool launch_sm100_copies_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  if (l.loader != kLoaderTma || l.epilogue != kEpilogueDirect) return false;
  copies_of_both_planes(d, probs, s);
  return launch_sm100_copies(l, d, s);
}

bool launch_exact_hybrid_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  HybridTemplates t;
  if (d.b_f16 != nullptr || l.loader != kLoaderTma || l.epilogue != kEpilogueStaged || !hybrid_templates(d, &t))
    return false;
  decode_plane<kDecodeOrder>(d.a, d.a_f16, s);
  launch_chained(retarget_probs_kernel, dim3((d.E + 255) / 256), 256, 0, s, probs, d);  // (A only: d.b_f16 is null)
  launch_exact_hybrid(l, d, t, s);
  return true;
}

bool launch_swapped_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  if (l.epilogue != kEpilogueDirect) return false;
  decode_plane<kEvenOddOrder>(d.a, d.a_f16, s);
  launch_chained(retarget_probs_kernel, dim3((d.E + 255) / 256), 256, 0, s, probs, d);
  return launch_swapped(l, d, s);
}

size_t copies_cutlass_workspace(int epilogue, const CutlassArgs& c) {
  switch (epilogue) {
    case kOutBf16: return cutlass_workspace_bf16(c);
    case kOutBf16T: return cutlass_workspace_bf16_t(c);
    case kOutBf16Bias: return cutlass_workspace_bf16_bias(c);
    case kOutF32: return cutlass_workspace_f32(c);
    default: return cutlass_workspace_f32_plus_c(c);
  }
}

}  // namespace nvfp4_gemm
