// copies_cutlass's GEMM: CUTLASS's SM90 ptr-array grouped GEMM (from the nvidia-cutlass wheel's headers) over fp16
// operands that gemm/copies.cu decoded exactly (E2M1 x E4M3, no S_enc), fp32 wgmma accumulation in K order, and an
// epilogue that applies alpha, C and bias in the order of SPEC 12.2:
//   y = fp32(alpha_g * acc); accumulating: y = fp32(y + C); with a bias: y = fp32(y + bias_g[n]); then the output cast
//   (bf16 RNE or fp32).
// Each multiply / add is its own rounding (the extension builds with --fmad=false), so the result equals the
// hand-written fast kernels' bit for bit (SPEC 12.6: same operands, same wgmma k16 steps in the same order).
// Problem shapes, pointers, strides and alphas are device arrays written by gemm/copies.cu (graph-safe).
#pragma once

// torch's extension flags disable the half operators; CUTLASS's headers need them.
#undef __CUDA_NO_HALF_OPERATORS__
#undef __CUDA_NO_HALF_CONVERSIONS__
#undef __CUDA_NO_HALF2_OPERATORS__
#undef __CUDA_NO_BFLOAT16_CONVERSIONS__

#include <cuda_runtime.h>

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm/cutlass.h"

namespace nvfp4_gemm {
namespace cutlass_path {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRne = cutlass::FloatRoundStyle::round_to_nearest;

using Alpha = fusion::Sm90ScalarBroadcastPtrArray<float, Stride<_0, _0, int64_t>>;  // alpha[g] (strided array)

// D = out(fp32(alpha * acc))
template <class ElementD>
using AlphaAcc = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRne>, Alpha,
                                 fusion::Sm90AccFetch>;
// D = fp32(fp32(alpha * acc) + C)
using AlphaAccPlusC = fusion::Sm90EVT<
    fusion::Sm90Compute<cutlass::plus, float, float, kRne>,
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRne>, Alpha, fusion::Sm90AccFetch>,
    fusion::Sm90SrcFetch<float>>;

// 128 x 256 x 64 tiles, 2 consumer warpgroups (cooperative), 2-CTA clusters along M: the fastest of four shapes
// measured on E8 T16384.
using TileShape = Shape<_128, _256, _64>;

// D = out(fp32(fp32(alpha * acc) + bias[n])): fprop / dgrad (no C) with group g's fp32 bias row at ptr_bias[g] (the
// setup kernel's Prob::bias; the binding takes fp32 bias only), staged per tile through shared memory
template <class ElementD>
using AlphaAccPlusBias = fusion::Sm90EVT<
    fusion::Sm90Compute<cutlass::plus, ElementD, float, kRne>,
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRne>, Alpha, fusion::Sm90AccFetch>,
    fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, _0>>>;

// LayoutB: ColumnMajor reads B as K x N with K contiguous (a K-major [N, K] plane, the decoded copies); RowMajor reads
// it with N contiguous (a [K, N] matrix: dgrad's B given as the weights' [N, K] copy, whose contraction N is the
// rows). kBias: the fusion is AlphaAccPlusBias (its arguments carry the bias rows).
template <class ElementD, class ElementC, class Fusion, class LayoutB_ = cutlass::layout::ColumnMajor,
          bool kBias_ = false>
struct Config {
  using ElemC = ElementC;  // void: the epilogue reads no C
  static constexpr bool kBias = kBias_;
  using TileShape = cutlass_path::TileShape;
  using ClusterShape = Shape<_2, _1, _1>;
  using LayoutA = cutlass::layout::RowMajor;  // A [M, K], K contiguous
  using LayoutB = LayoutB_;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 8;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::half_t, LayoutA*, kAlignAB, cutlass::half_t,
      LayoutB*, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  // gemm/copies.cu writes these arrays without CUTLASS's types: one int64 row stride per group and operand, and
  // three ints per problem shape.
  static_assert(sizeof(typename Kernel::InternalStrideA) == 8 && sizeof(typename Kernel::InternalStrideB) == 8 &&
                sizeof(typename Kernel::InternalStrideD) == 8, "CUTLASS stride layout changed");
  static_assert(sizeof(typename ProblemShape::UnderlyingProblemShape) == 12, "CUTLASS problem shape changed");
};

template <class Cfg>
typename Cfg::Gemm::Arguments make_arguments(const CutlassArgs& a) {
  using Gemm = typename Cfg::Gemm;
  using K = typename Cfg::Kernel;
  cutlass::KernelHardwareInfo hw;
  hw.device_id = a.device;
  hw.sm_count = a.sm_count;
  hw.max_active_clusters = a.max_active_clusters;
  typename Gemm::Arguments args;
  typename K::CollectiveEpilogue::FusionCallbacks::Arguments fusion_args{};
  const typename Alpha::Arguments alpha{{}, {a.alpha}, {}, {{_0{}, _0{}, int64_t(1)}}};
  if constexpr (Cfg::kBias) {
    fusion_args = {{alpha, {}, {}}, {reinterpret_cast<const float* const*>(a.ptr_bias), 0.0f, {}}, {}};
  } else if constexpr (std::is_void_v<typename Cfg::ElemC>) {
    fusion_args = {alpha, {}, {}};
  } else {
    fusion_args = {{alpha, {}, {}}, {}, {}};
  }
  using PS = typename ProblemShape::UnderlyingProblemShape;
  args = typename Gemm::Arguments{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {a.groups, reinterpret_cast<PS*>(a.shapes), nullptr},
      {reinterpret_cast<const cutlass::half_t**>(a.ptr_a), reinterpret_cast<typename K::InternalStrideA*>(a.stride_a),
       reinterpret_cast<const cutlass::half_t**>(a.ptr_b), reinterpret_cast<typename K::InternalStrideB*>(a.stride_b)},
      {fusion_args, reinterpret_cast<const typename K::ElementC**>(a.ptr_c),
       reinterpret_cast<typename K::InternalStrideC*>(a.stride_c),
       reinterpret_cast<typename K::ElementD**>(a.ptr_d), reinterpret_cast<typename K::InternalStrideD*>(a.stride_d)},
      hw};
  return args;
}

template <class Cfg>
size_t workspace_bytes(const CutlassArgs& a) {
  return Cfg::Gemm::get_workspace_size(make_arguments<Cfg>(a));
}

template <class Cfg>
int run(const CutlassArgs& a, cudaStream_t stream) {
  auto args = make_arguments<Cfg>(a);
  typename Cfg::Gemm gemm;
  if (Cfg::Gemm::get_workspace_size(args) > a.workspace_bytes) return 1;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 2;
  if (gemm.initialize(args, a.workspace, stream) != cutlass::Status::kSuccess) return 3;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return 4;
  return 0;
}

}  // namespace cutlass_path
}  // namespace nvfp4_gemm
