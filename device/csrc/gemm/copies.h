// Host interface of the algorithms over fp16 operand copies (gemm/copies.cu): copies_cutlass, exact_copies,
// exact_hybrid and swapped_64x256.
#pragma once

#include <cuda.h>  // CUtensorMap (exact_hybrid's map templates)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gemm/cutlass.h"
#include "gemm/problem.h"

namespace nvfp4_gemm {

// One operand plane of a grouped tensor (SPEC 9.2): packed data, swizzled scales, their [E+1] byte offsets.
struct PlaneView {
  const uint8_t* data;
  const uint8_t* scales;
  const int64_t* offs;        // data byte offsets (offsets table row 2 or 4)
  const int64_t* scale_offs;  // scale byte offsets (row 3 or 5)
  int E;
  long long cap_bytes;    // size of the data buffer (host-known upper bound, SPEC 9.3)
  long long scale_cap_bytes;  // size of the scale buffer
  long long pitch_const;  // rowwise plane: K / 2; 0 for a columnwise plane (pitch = group bytes / rows_const)
  long long rows_const;   // columnwise plane: its rows (the K features); unused for rowwise
};

// Where copies_cutlass's B copy comes from: decoded from the B plane by the path itself, or given by the caller as
// the weights' values [E, N, K] fp16 (SPEC 12.6's exact E2M1 x E4M3 products of the weight planes; SPEC 6.3: with
// 16x16 blocks, RN and no RHT the rowwise and columnwise planes hold the same values transposed): fprop reads it as
// the rowwise plane's copy (K-major), dgrad as the columnwise plane's (N-contiguous, kOutBf16T's RowMajor B).
enum BCopy : int { kCopyDecoded = 0, kCopyGiven = 1, kCopyTransposed = 2 };

struct CopiesArgs {
  int E;
  int kind;      // Kind (gemm/problem.h)
  int epilogue;  // CutlassEpilogue
  int out_f32;
  int accumulate;
  const Prob* probs;  // from the setup kernel (gemm/setup.cu)
  const int* prefix;
  PlaneView a, b;
  void* a_f16;  // [2 * a.cap_bytes] fp16 each (b_f16: or the given copy)
  void* b_f16;
  int b_copy;              // BCopy (copies_cutlass only)
  long long b_copy_group;  // given copy: fp16 elements per group (N K)
  long long b_copy_ld;     // given copy: its row pitch in elements (K: fprop's contraction, dgrad's output columns)
  // 128-byte aligned scratch for per-group tensor maps (128 bytes each), or null: exact_copies' TMA loader 2 E maps,
  // exact_hybrid 3 E maps
  void* group_maps;
};

// The fp16 copy of a plane (decode_plane_kernel, natural order: fp16 elements 2j, 2j + 1 <- packed byte j) into `out`
// (2 p.cap_bytes fp16 values; bytes past the plane's last group are not decoded, their elements not written).
void launch_decode_plane(const PlaneView& p, void* out, cudaStream_t s);
// Launches the dequantize kernels (B's only without a given copy), the per-group kernel (CUTLASS's arguments and the
// zero-step epilogue) and the CUTLASS GEMM; returns the CUTLASS status code (0 = launched). `c` holds the device
// arrays and workspace (gemm/bindings.cpp sizes them).
int launch_copies_cutlass(const CopiesArgs& d, CutlassArgs c, cudaStream_t s);
size_t copies_cutlass_workspace(int epilogue, const CutlassArgs& c);
// exact_copies: decodes both planes into d.a_f16 / d.b_f16, points every group's Prob::a / Prob::b (`probs`, the
// setup kernel's array) into the copies, then runs gemm/exact_copies.cu's kernel over the setup kernel's tile list
// (`l`). Needs no CUTLASS.
bool launch_exact_copies_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
// swapped_64x256: decodes the token plane d.a into d.a_f16 (each 16-block in the even / odd code order of
// gemm/swapped.cuh; d.b_f16 must be null), points every group's Prob::a at the copy, then runs gemm/swapped.cu's
// kernel over the setup kernel's 64 x 256 tile list (`l`); false, launching nothing, when the plan's epilogue is not
// the direct one or its loader cannot run. Needs no CUTLASS.
bool launch_swapped_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
// The swapped kernel alone (gemm/swapped.cu; probs' a already points into the token copy d.a_f16, pitch Prob::K) with
// the plan's loader: TMA (fprop with K % 32 == 0 and both planes 16-byte aligned; false, launching nothing,
// otherwise) or cp.async (any K).
bool launch_swapped(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// The exact kernel over fp16 copies alone (gemm/exact_copies.cu; probs' a / b already point into the copies d.a_f16 /
// d.b_f16, pitch Prob::K) with the plan's loader and epilogue: TMA over per-group tensor maps built into d.group_maps
// (false, launching nothing, when that scratch is missing or misaligned or the driver refuses the map) or cp.async;
// the staged epilogue, or wgrad's fp32 TMA store (false when its output map does not apply).
bool launch_exact_copies(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// The per-group tensor maps of exact_copies' and sm100_copies' TMA loaders, built on the device into d.group_maps
// (gmap::group_maps_kernel: per group the A copy, then the B copy, as {K, rows} fp16 with box {64, 128} and the
// 128-byte swizzle); false, launching nothing, when a copy or the map scratch is missing or misaligned, or the driver
// refuses the template.
bool launch_copies_maps(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// Mode sm100 over fp16 copies of both planes (gemm/sm100_copies.cu, SPEC 12.7): decodes both planes, points every
// group's Prob::a / Prob::b into the copies, builds the per-group maps into d.group_maps (2 x 128 bytes per group) and
// runs the kernel over the setup kernel's 128 x 128 tile list (`l`). False, launching nothing, when the plan is not the
// TMA loader with the direct epilogue (the copies may then be enqueued already).
bool launch_sm100_copies_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
// The kernel alone (probs' a / b already point into the copies).
bool launch_sm100_copies(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// exact_hybrid (gemm/exact_hybrid.cu): its three host-encoded map templates (A's fp16 copy, B's packed plane, B's
// scale tiles), encoded by hybrid_templates from d.a_f16 / d.group_maps (false when those are missing or misaligned,
// or the driver refuses a map: nothing is launched then).
struct HybridTemplates {
  CUtensorMap f16, data, scale;
};
bool hybrid_templates(const CopiesArgs& d, HybridTemplates* t);
// The path: decodes the A plane into d.a_f16, points every group's Prob::a at the copy, builds the per-group maps into
// d.group_maps (3 x 128 bytes per group) and runs exact_hybrid's kernel over the setup kernel's 128 x 128 tile list
// (`l`).
// Fprop and dgrad with a contraction % 32 == 0 and 16-byte aligned B planes (the binding checks); false, launching
// nothing, when the plan is not the TMA loader with the staged epilogue or hybrid_templates fails. Needs no CUTLASS.
bool launch_exact_hybrid_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
void launch_exact_hybrid(const LaunchArgs& a, const CopiesArgs& d, const HybridTemplates& t, cudaStream_t s);
bool cutlass_built();  // false when the extension was built without CUTLASS (the path then refuses)

}  // namespace nvfp4_gemm
