// The dequantize-first fast path (fast_kernel="dequant"; docs/gemm.md, stop 29). Three kernels around one CUTLASS
// grouped GEMM (gemm_cutlass.cuh), all on the caller's stream and driven by the setup kernel's per-group problems
// (gemm_kernels.cu), so the path stays graph-safe:
//  1. dequant_plane_kernel: each operand plane (SPEC 9.2 layout, swizzled scales of SPEC 8.2) -> fp16 values
//     E2M1 x E4M3 (exact and normal, SPEC 12.6; no S_enc: alpha is applied in the epilogue, SPEC 12.1), in the
//     plane's own layout (fp16 element 2j, 2j + 1 <- packed byte j), natural K order.
//  2. cutlass_args_kernel: per group {M, N, K}, operand / output pointers into those buffers, row pitches, alpha.
//     A group without a K step (an empty wgrad expert, or operand groups that disagree, SPEC 12.5) gets M = 0 (CUTLASS
//     SM90 computes garbage for K = 0, NVIDIA/cutlass#2674) and is written by 3.
//  3. zero_k_epilogue_kernel: the epilogue of SPEC 12.2 with acc = +0 for those groups (alpha * 0, plus C when
//     accumulating; a NaN alpha gives NaN), exactly where the fused kernels write their zero-step tiles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm_cutlass.h"
#include "gemm_decode_f16.cuh"
#include "gemm_dequant.h"

namespace nvfp4_gemm {
namespace {

// Byte of compact scale (row r, 16-block c) in a swizzled plane with Cp (multiple of 4) scale columns: SPEC 8.2.
__device__ __forceinline__ long long swizzled_offset(long long r, long long c, long long cp) {
  return ((r / 128 * (cp / 4) + c / 4) * 32 + r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// Decodes packed bytes [8 chunk, 8 chunk + 8) of plane p (16 codes = one 16-block, one scale) into out[2 chunk],
// out[2 chunk + 1]. Group g of the plane holds bytes [offs[g], offs[g+1]) with a row pitch of `pitch` bytes
// (pitch_const, or the group's bytes / rows_const for a columnwise plane, whose rows are the K features and whose pitch
// is roundup(m_g, 16) / 2); the chunk's group is found by a binary search over groups [g_lo, g_hi) (the caller knows the
// chunk lies in them). Every group starts at a multiple of 8 bytes (K % 16 == 0; columnwise pitches are multiples of 8).
// Order inside each 16-block of the copy: natural (codes 0..15), or EVEN_ODD (codes 0, 2, .., 14, 1, 3, .., 15: the
// token operand of the swapped kernel, gemm_swapped.cuh, whose register fragments hold that order).
// Where one group of a plane lives: its first byte, row pitch (bytes), scale columns (multiple of 4) and scale base.
struct GroupSpan {
  long long start, pitch, cp, scale_base;
};

__device__ __forceinline__ GroupSpan group_span(const PlaneView& p, int g) {
  GroupSpan s;
  s.start = p.offs[g];
  s.pitch = p.pitch_const ? p.pitch_const : (p.offs[g + 1] - s.start) / p.rows_const;
  s.cp = s.pitch > 0 ? (s.pitch / 8 + 3) / 4 * 4 : 4;
  s.scale_base = p.scale_offs[g];
  return s;
}

// The byte of the swizzled scale of packed chunk `chunk` (8 bytes = one 16-block) of the group at `span`.
__device__ __forceinline__ long long chunk_scale_byte(const GroupSpan& span, long long chunk) {
  const long long local = chunk * 8 - span.start;
  const long long row = local / span.pitch;
  const long long block = (local - row * span.pitch) / 8;
  return span.scale_base + swizzled_offset(row, block, span.cp);
}

// Decodes packed bytes w (8 bytes, one 16-block) with scale byte `scale` into out[2 chunk], out[2 chunk + 1].
// Order inside each 16-block of the copy: natural (codes 0..15), or EVEN_ODD (codes 0, 2, .., 14, 1, 3, .., 15: the
// token operand of the swapped kernel, gemm_swapped.cuh, whose register fragments hold that order).
template <bool EVEN_ODD>
__device__ __forceinline__ void store_decoded(uint4* __restrict__ out, long long chunk, uint2 w, uint8_t scale) {
  const uint32_t sf = f16dec::scale_to_f16x2(scale);
  uint32_t a[4], b[4];
  f16dec::e2m1x8_to_f16(w.x, sf, a);  // chunk order {0,2} {4,6} {1,3} {5,7}
  f16dec::e2m1x8_to_f16(w.y, sf, b);  // {8,10} {12,14} {9,11} {13,15}
  if constexpr (EVEN_ODD) {
    out[2 * chunk] = make_uint4(a[0], a[1], b[0], b[1]);
    out[2 * chunk + 1] = make_uint4(a[2], a[3], b[2], b[3]);
    return;
  }
  out[2 * chunk] = make_uint4(__byte_perm(a[0], a[2], 0x5410), __byte_perm(a[0], a[2], 0x7632),
                              __byte_perm(a[1], a[3], 0x5410), __byte_perm(a[1], a[3], 0x7632));
  out[2 * chunk + 1] = make_uint4(__byte_perm(b[0], b[2], 0x5410), __byte_perm(b[0], b[2], 0x7632),
                                  __byte_perm(b[1], b[3], 0x5410), __byte_perm(b[1], b[3], 0x7632));
}

// The whole plane: one thread per 8 packed bytes (chunk), the grid sized for the buffer; only bytes below the last
// group's end are read (the buffers' worst-case tail is never read). Group g of the plane holds bytes
// [offs[g], offs[g+1]) with a row pitch of pitch_const bytes, or for a columnwise plane (rows = the K features) the
// group's bytes / rows_const = roundup(m_g, 16) / 2; every group starts at a multiple of 8 bytes (K % 16 == 0).
template <bool EVEN_ODD>
__global__ void dequant_plane_kernel(PlaneView p, uint4* __restrict__ out) {
  const long long chunk = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long byte = chunk * 8;
  if (byte >= p.offs[p.E]) return;
  int lo = 0, hi = p.E - 1;  // the last group starting at or before `byte` (empty groups share the next start)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.offs[mid] <= byte) lo = mid; else hi = mid - 1;
  }
  const GroupSpan span = group_span(p, lo);
  const uint2 w = *reinterpret_cast<const uint2*>(p.data + byte);
  store_decoded<EVEN_ODD>(out, chunk, w, p.scales[chunk_scale_byte(span, chunk)]);
}

// Chunks [c0, c1) of plane p (groups [g, ..)), this thread's share of a grid-stride walk of `threads` threads, kUnroll
// chunks per step with all their loads issued before any decode (few SMs must keep many bytes in flight: the side
// decode runs on the SMs a capped GEMM leaves free). A thread's chunks only move forward, so its group is tracked
// incrementally (empty groups are stepped over) instead of searched per chunk.
constexpr int kUnroll = 8;

__device__ __forceinline__ void decode_range_strided(const PlaneView& p, uint4* __restrict__ out, int g, long long c0,
                                                     long long c1, long long first, long long threads) {
  GroupSpan span = group_span(p, g);
  long long end = p.offs[g + 1];
  for (long long i = c0 + first; i < c1; i += threads * kUnroll) {
    uint2 w[kUnroll];
    uint8_t sc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long ch = i + u * threads;
      if (ch < c1) {
        while (ch * 8 >= end) {  // ends before c1 * 8 = the range's end, so g stays inside it
          ++g;
          span = group_span(p, g);
          end = p.offs[g + 1];
        }
        w[u] = __ldg(reinterpret_cast<const uint2*>(p.data) + ch);
        sc[u] = __ldg(p.scales + chunk_scale_byte(span, ch));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long ch = i + u * threads;
      if (ch < c1) store_decoded<false>(out, ch, w[u], sc[u]);
    }
  }
}

// Groups [g_lo, g_hi) of both planes (natural order), grid-stride: the chunked path's decode (launch_chunked below),
// on every SM for its first chunk and on the few SMs a capped GEMM leaves free for the others. The byte ranges come
// from the device offsets, so the launch needs no host knowledge of the splits (graph-safe).
__global__ void __launch_bounds__(256, 3) dequant_groups_kernel(PlaneView a, uint4* __restrict__ out_a, PlaneView b,
                                                                 uint4* __restrict__ out_b, int g_lo, int g_hi) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long threads = static_cast<long long>(gridDim.x) * blockDim.x;
  decode_range_strided(a, out_a, g_lo, a.offs[g_lo] / 8, a.offs[g_hi] / 8, first, threads);
  decode_range_strided(b, out_b, g_lo, b.offs[g_lo] / 8, b.offs[g_hi] / 8, first, threads);
}

// The fp16 copy (`f16`, made by dequant_plane_kernel from `plane`) of the operand that starts at packed byte `p` of the
// plane: fp16 elements 2j, 2j + 1 of a copy hold packed byte j.
__device__ __forceinline__ const __half* f16_copy_of(const void* f16, const uint8_t* plane, const uint8_t* p) {
  return static_cast<const __half*>(f16) + 2 * (p - plane);
}

__global__ void cutlass_args_kernel(DequantGemmArgs d, CutlassArgs c) {
  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < d.E; g += gridDim.x * blockDim.x) {
    const Prob& p = d.probs[g];
    const bool has_tiles = d.prefix[g + 1] > d.prefix[g];
    c.shapes[3 * g + 0] = (p.K > 0 && has_tiles) ? p.M : 0;
    c.shapes[3 * g + 1] = p.N;
    c.shapes[3 * g + 2] = p.K;
    c.ptr_a[g] = f16_copy_of(d.a_f16, d.a.data, p.a);
    c.ptr_b[g] = f16_copy_of(d.b_f16, d.b.data, p.b);
    c.ptr_d[g] = p.d;
    if (c.ptr_c) c.ptr_c[g] = p.d;  // accumulate in place: C = the output buffer
    c.stride_a[g] = p.K;  // fprop / dgrad: the contraction; wgrad: roundup(m_g, 16), the columnwise pitch
    c.stride_b[g] = p.K;
    c.stride_d[g] = p.ldd;
    if (c.stride_c) c.stride_c[g] = p.ldd;
    c.alpha[g] = p.alpha;
  }
}

// Groups with tiles but no K step: y = fp32(alpha * +0) [+ C], cast to the output (SPEC 12.2 with acc = +0).
__global__ void zero_k_epilogue_kernel(DequantGemmArgs d) {
  const int g = blockIdx.y;
  const Prob& p = d.probs[g];
  if (p.K != 0 || d.prefix[g + 1] == d.prefix[g]) return;
  const long long n = static_cast<long long>(p.M) * p.N;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long off = (i / p.N) * p.ldd + i % p.N;
    float y = __fmul_rn(p.alpha, 0.0f);
    if (d.out_f32) {
      float* o = static_cast<float*>(p.d) + off;
      if (d.accumulate) y = __fadd_rn(y, *o);
      *o = y;
    } else {
      static_cast<__nv_bfloat16*>(p.d)[off] = __float2bfloat16_rn(y);
    }
  }
}

// Points group g's operands at their fp16 copies (b only when it has one: d.b_f16 set).
__global__ void retarget_probs_kernel(Prob* probs, DequantGemmArgs d) {
  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < d.E; g += gridDim.x * blockDim.x) {
    Prob& p = probs[g];
    p.a = reinterpret_cast<const uint8_t*>(f16_copy_of(d.a_f16, d.a.data, p.a));
    if (d.b_f16) p.b = reinterpret_cast<const uint8_t*>(f16_copy_of(d.b_f16, d.b.data, p.b));
  }
}

template <bool EVEN_ODD = false>
void dequant_plane(const PlaneView& p, void* out, cudaStream_t s) {
  if (p.cap_bytes <= 0) return;
  const long long chunks = p.cap_bytes / 8;
  dequant_plane_kernel<EVEN_ODD>
      <<<static_cast<unsigned>((chunks + 255) / 256), 256, 0, s>>>(p, static_cast<uint4*>(out));
}

}  // namespace

#ifdef NVFP4_NO_CUTLASS  // built without CUTLASS's headers: the path reports "not built" (code 5)
int cutlass_run_bf16(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_f32(const CutlassArgs&, cudaStream_t) { return 5; }
int cutlass_run_f32_plus_c(const CutlassArgs&, cudaStream_t) { return 5; }
size_t cutlass_workspace_bf16(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_f32(const CutlassArgs&) { return 0; }
size_t cutlass_workspace_f32_plus_c(const CutlassArgs&) { return 0; }
bool cutlass_built() { return false; }
#else
bool cutlass_built() { return true; }
#endif

namespace {

int cutlass_run(int epilogue, const CutlassArgs& c, cudaStream_t s) {
  switch (epilogue) {
    case kOutBf16: return cutlass_run_bf16(c, s);
    case kOutF32: return cutlass_run_f32(c, s);
    default: return cutlass_run_f32_plus_c(c, s);
  }
}

// Group g_lo of chunk `i` of `chunks` over E groups (chunks of ceil(E / chunks) groups; the last may be shorter).
int chunk_start(int i, int chunks, int E) {
  const int per = (E + chunks - 1) / chunks;
  return i * per < E ? i * per : E;
}

// The chunked dequantize-first path (docs/gemm.md, stop 39): the groups in d.chunks chunks; chunk 0 decoded on every
// SM, then per chunk its CUTLASS GEMM on a grid capped to leave d.side_sms SMs free, launched with the early trigger
// (gemm_cutlass.cuh), and the next chunk's decode launched behind it with programmatic stream serialization on
// d.side_sms x 3 CTAs of 256 threads, which land on the free SMs while the GEMM runs. The next GEMM is an ordinary
// launch: it waits for that decode. One stream, so graph capture records the same dependencies.
int launch_chunked(const DequantGemmArgs& d, const CutlassArgs& c, size_t chunk_workspace, cudaStream_t s) {
  const int chunks = d.chunks < d.E ? d.chunks : d.E;
  auto* out_a = static_cast<uint4*>(d.a_f16);
  auto* out_b = static_cast<uint4*>(d.b_f16);
  // a resident grid (3 CTAs of 256 threads per SM) over every SM, capped by the work of the largest possible chunk
  const long long most_steps = (d.a.cap_bytes + d.b.cap_bytes) / 8 / kUnroll;
  const unsigned first_grid = static_cast<unsigned>(
      std::min<long long>((most_steps + 255) / 256 + 1, 3LL * (c.sm_count + std::max(d.side_sms, 0))));
  dequant_groups_kernel<<<first_grid, 256, 0, s>>>(d.a, out_a, d.b, out_b, 0, chunk_start(1, chunks, d.E));
  cutlass_args_kernel<<<(d.E + 255) / 256, 256, 0, s>>>(d, c);
  zero_k_epilogue_kernel<<<dim3(8, d.E), 256, 0, s>>>(d);
  for (int i = 0; i < chunks; ++i) {
    const int g_lo = chunk_start(i, chunks, d.E), g_hi = chunk_start(i + 1, chunks, d.E);
    if (g_hi <= g_lo) continue;
    CutlassArgs ci = c;  // the chunk's groups: every per-group array offset by g_lo, its own workspace
    ci.groups = g_hi - g_lo;
    ci.shapes = c.shapes + 3 * g_lo;
    ci.ptr_a = c.ptr_a + g_lo;
    ci.ptr_b = c.ptr_b + g_lo;
    ci.ptr_c = c.ptr_c ? c.ptr_c + g_lo : nullptr;
    ci.ptr_d = c.ptr_d + g_lo;
    ci.stride_a = c.stride_a + g_lo;
    ci.stride_b = c.stride_b + g_lo;
    ci.stride_c = c.stride_c ? c.stride_c + g_lo : nullptr;
    ci.stride_d = c.stride_d + g_lo;
    ci.alpha = c.alpha + g_lo;
    ci.workspace = static_cast<uint8_t*>(c.workspace) + i * chunk_workspace;
    ci.workspace_bytes = chunk_workspace;
    const int n_lo = g_hi, n_hi = chunk_start(i + 2, chunks, d.E);
    ci.trigger_dependents = n_hi > n_lo;
    const int rc = cutlass_run(d.epilogue, ci, s);
    if (rc != 0) return rc;
    if (n_hi <= n_lo) continue;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(d.side_sms > 0 ? d.side_sms * 3 : 3));
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, dequant_groups_kernel, d.a, out_a, d.b, out_b, n_lo, n_hi) != cudaSuccess) return 4;
  }
  return 0;
}

}  // namespace

int launch_dequant_gemm(const DequantGemmArgs& d, CutlassArgs c, size_t chunk_workspace, cudaStream_t s) {
  if (d.chunks > 1 && d.E > 1) return launch_chunked(d, c, chunk_workspace, s);
  dequant_plane(d.a, d.a_f16, s);
  dequant_plane(d.b, d.b_f16, s);
  cutlass_args_kernel<<<(d.E + 255) / 256, 256, 0, s>>>(d, c);
  zero_k_epilogue_kernel<<<dim3(8, d.E), 256, 0, s>>>(d);
  return cutlass_run(d.epilogue, c, s);
}

void launch_dequant_exact(const DequantGemmArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  dequant_plane(d.a, d.a_f16, s);
  dequant_plane(d.b, d.b_f16, s);
  retarget_probs_kernel<<<(d.E + 255) / 256, 256, 0, s>>>(probs, d);
  launch_exact_f16(l, d, s);
}

void launch_swapped_path(const DequantGemmArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s) {
  dequant_plane<true>(d.a, d.a_f16, s);
  retarget_probs_kernel<<<(d.E + 255) / 256, 256, 0, s>>>(probs, d);
  launch_swapped(l, d, s);
}

size_t dequant_gemm_workspace(int epilogue, const CutlassArgs& c) {
  switch (epilogue) {
    case kOutBf16: return cutlass_workspace_bf16(c);
    case kOutF32: return cutlass_workspace_f32(c);
    default: return cutlass_workspace_f32_plus_c(c);
  }
}

}  // namespace nvfp4_gemm
