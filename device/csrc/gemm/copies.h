// Host interface of the dequantize-first fast path (gemm_dequant.cu). docs/gemm.md, stop 29.
#pragma once

#include <cuda.h>  // CUtensorMap (the hybrid exact kernel's map templates)
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

struct CopiesArgs {
  int E;
  int epilogue;  // CutlassEpilogue
  int out_f32;
  int accumulate;
  const Prob* probs;  // from the setup kernel (gemm_kernels.cu)
  const int* prefix;
  PlaneView a, b;
  void* a_f16;  // [2 * a.cap_bytes] fp16 each
  void* b_f16;
  // 128-byte aligned scratch for per-group tensor maps (128 bytes each), or null: the exact kernel over the copies 2 E
  // maps; the swapped kernel for dgrad E weight maps (gemm_swapped.cu)
  void* group_maps;
};

// Launches the dequantize kernels, the argument kernel, the zero-step epilogue and the CUTLASS GEMM; returns the
// CUTLASS status code (0 = launched). `c` holds the device arrays and workspace (gemm_bindings.cpp sizes them).
int launch_copies_cutlass(const CopiesArgs& d, CutlassArgs c, cudaStream_t s);
size_t copies_cutlass_workspace(int epilogue, const CutlassArgs& c);
// Exact mode over fp16 copies (docs/gemm.md, stop 30): decodes both planes into d.a_f16 / d.b_f16, points every
// group's Prob::a / Prob::b (`probs`, the setup kernel's array) into the copies, then runs gemm_exact_f16.cu's kernel
// over the setup kernel's tile list (`l`). Needs no CUTLASS.
bool launch_exact_copies_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
// The swapped fast kernel (docs/gemm.md, stop 31): decodes the token plane d.a into d.a_f16 (each 16-block in the
// even / odd code order of gemm_swapped.cuh; d.b_f16 must be null), points every group's Prob::a at the copy, then runs
// gemm_swapped.cu's kernel over the setup kernel's 64 x 256 tile list (`l`). Needs no CUTLASS.
bool launch_swapped_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
// The swapped kernel alone (gemm_swapped.cu; probs' a already points into the token copy d.a_f16, pitch Prob::K): the
// TMA loader when K % 32 == 0 and both planes are 16-byte aligned, the cp.async loader otherwise.
bool launch_swapped(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// The exact kernel over fp16 copies alone (gemm_exact_f16.cu; probs' a / b already point into the copies d.a_f16 /
// d.b_f16, pitch Prob::K): the TMA loader over per-group tensor maps built into d.group_maps when that scratch is given
// and aligned, the cp.async loader otherwise or when NVFP4_XF16_TMA=0.
bool launch_exact_copies(const LaunchArgs& a, const CopiesArgs& d, cudaStream_t s);
// The hybrid exact kernel (gemm_exact_hybrid.cu; docs/gemm.md, stop 46): its three host-encoded map templates (A's fp16
// copy, B's packed plane, B's scale tiles), encoded by hybrid_templates from d.a_f16 / d.group_maps (false when those
// are missing or misaligned, or the driver refuses a map: nothing is launched then).
struct HybridTemplates {
  CUtensorMap f16, data, scale;
};
bool hybrid_templates(const CopiesArgs& d, HybridTemplates* t);
// The path: decodes the A plane into d.a_f16, points every group's Prob::a at the copy, builds the per-group maps into
// d.group_maps (3 x 128 bytes per group) and runs the hybrid kernel over the setup kernel's 128 x 128 tile list (`l`).
// Fprop and dgrad with a contraction % 32 == 0 and 16-byte aligned B planes (the binding checks); false, launching
// nothing, when hybrid_templates fails. Needs no CUTLASS.
bool launch_exact_hybrid_path(const CopiesArgs& d, Prob* probs, const LaunchArgs& l, cudaStream_t s);
void launch_exact_hybrid(const LaunchArgs& a, const CopiesArgs& d, const HybridTemplates& t, cudaStream_t s);
bool cutlass_built();  // false when the extension was built without CUTLASS (the path then refuses)

}  // namespace nvfp4_gemm
