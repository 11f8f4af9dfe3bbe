// PyTorch binding of the NVFP4 grouped GEMM (module nvfp4_gemm). Argument checking lives in device/gemm.py;
// this layer only re-checks what would make the kernels touch invalid memory, then launches on the current stream.
// A refusal is a returned message (common/refusal.h), which device/gemm.py raises as RuntimeError.
#include <string>
#include <tuple>
#include <utility>

#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gemm/copies.h"
#include "gemm/problem.h"
#include "common/refusal.h"

namespace {

using at::Tensor;

template <typename T>
const T* cptr(const Tensor& t) {
  return t.numel() ? reinterpret_cast<const T*>(t.data_ptr()) : nullptr;
}

// One operand plane for the algorithms over fp16 copies: rowwise planes have a constant pitch (contraction / 2 bytes);
// columnwise planes have `rows` K-feature rows and a per-group pitch.
nvfp4_gemm::PlaneView plane_view(const Tensor& data, const Tensor& scales, const Tensor& offs, int E, bool columnwise,
                                 long long contraction, long long rows) {
  nvfp4_gemm::PlaneView p{};
  p.data = cptr<uint8_t>(data);
  p.scales = cptr<uint8_t>(scales);
  p.offs = offs.data_ptr<int64_t>() + (columnwise ? 4 : 2) * (E + 1);
  p.scale_offs = offs.data_ptr<int64_t>() + (columnwise ? 5 : 3) * (E + 1);
  p.E = E;
  p.cap_bytes = data.numel() / 8 * 8;
  p.scale_cap_bytes = scales.numel();
  p.pitch_const = columnwise ? 0 : contraction / 2;
  p.rows_const = columnwise ? rows : 0;
  return p;
}

// fp16 copies of both operand planes for the algorithms over copies (copies_cutlass, exact_copies): the plane views in
// `d` and the scratch (2 fp16 per packed byte of each plane's buffer) from the caching allocator (stream-ordered, so
// graph capture works). The returned tensors own the scratch.
// With a_only, only the A plane gets a copy (d.b_f16 stays null: the swapped kernels' token operand, exact_hybrid's A,
// or copies_cutlass given the weights' copy, which the caller then points d.b_f16 at). With s.swap_wgrad the caller
// passes X's columnwise plane as the A tensors and dY's as the B tensors (the setup kernel's exchanged operands).
std::pair<Tensor, Tensor> f16_copies(nvfp4_gemm::CopiesArgs& d, int kind, int E, const nvfp4_gemm::SetupArgs& s,
                                     const Tensor& a_data, const Tensor& a_scales, const Tensor& a_offs,
                                     const Tensor& b_data, const Tensor& b_scales, const Tensor& b_offs,
                                     bool a_only = false) {
  using namespace nvfp4_gemm;
  d.E = E;
  d.kind = kind;
  d.probs = s.probs;
  d.prefix = s.prefix;
  // fprop: X rowwise, W rowwise; dgrad: dY rowwise, W columnwise (rows K); wgrad: both columnwise (rows N, K; with
  // swap_wgrad K, N)
  d.a = plane_view(a_data, a_scales, a_offs, E, kind == kWgrad, s.kc, s.swap_wgrad ? s.b_rows : s.a_rows);
  d.b = plane_view(b_data, b_scales, b_offs, E, kind != kFprop, s.kc, s.swap_wgrad ? s.a_rows : s.b_rows);
  auto half = a_data.options().dtype(at::kHalf);
  Tensor a16 = at::empty({2 * d.a.cap_bytes}, half);
  Tensor b16 = at::empty({a_only ? 0 : 2 * d.b.cap_bytes}, half);
  d.a_f16 = a16.data_ptr();
  d.b_f16 = a_only ? nullptr : b16.data_ptr();
  return {a16, b16};
}

// copies_cutlass after the setup kernel: fp16 copies of the operand planes (B's only without a given b_copy, the
// weights' [E, N, K] values checked by grouped_gemm_) and CUTLASS's argument arrays come from the caching allocator.
std::string launch_copies_cutlass_path(int kind, int E, const nvfp4_gemm::SetupArgs& s, const Tensor& a_data,
                                const Tensor& a_scales, const Tensor& a_offs, const Tensor& b_data,
                                const Tensor& b_scales, const Tensor& b_offs, const Tensor* b_copy, bool f32,
                                bool accumulate, bool bias, int device, int max_ctas, cudaStream_t stream) {
  using namespace nvfp4_gemm;
  NVFP4_REFUSE_UNLESS(cutlass_built(),
                      "nvfp4_gemm: copies_cutlass was not built (no CUTLASS headers found)");
  NVFP4_REFUSE_UNLESS(E <= 65535, "nvfp4_gemm: copies_cutlass supports at most 65535 groups");
  CopiesArgs d{};
  // dgrad over the given copy reads it N-contiguous (kOutBf16T; grouped_gemm_ refuses it with fp32 output)
  const bool transposed = b_copy != nullptr && kind == kDgrad;
  // a bias (fprop / dgrad; the setup kernel's per-group rows): the bf16 instantiation with a K-major B only
  NVFP4_REFUSE_UNLESS(!bias || (!f32 && !transposed),
                      "nvfp4_gemm: copies_cutlass adds a bias to bf16 output over a K-major B only (not fp32 output, "
                      "not dgrad over the weights' copy)");
  d.epilogue = bias ? kOutBf16Bias
                    : !f32 ? (transposed ? kOutBf16T : kOutBf16) : (accumulate ? kOutF32PlusC : kOutF32);
  d.out_f32 = f32;
  d.accumulate = accumulate;
  const auto copies = f16_copies(d, kind, E, s, a_data, a_scales, a_offs, b_data, b_scales, b_offs,
                                 /*a_only=*/b_copy != nullptr);
  if (b_copy != nullptr) {
    d.b_f16 = b_copy->data_ptr();
    d.b_copy = transposed ? kCopyTransposed : kCopyGiven;
    d.b_copy_group = s.ldd * s.kc;  // N K
    d.b_copy_ld = transposed ? s.ldd : s.kc;  // K either way: dgrad's output columns, fprop's contraction
  }

  CutlassArgs c{};
  c.groups = E;
  c.device = device;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, device));
  if (max_ctas > 0 && max_ctas < c.sm_count) {  // CUTLASS's persistent grid: whole 2-CTA clusters, at least one
    c.sm_count = max_ctas < 2 ? 2 : max_ctas / 2 * 2;
    c.max_active_clusters = c.sm_count / 2;
  }
  const bool plus_c = d.epilogue == kOutF32PlusC;
  // the argument arrays (3 ints, 5 pointers, 4 strides per group), each 256-byte aligned, then CUTLASS's workspace
  c.workspace_bytes = copies_cutlass_workspace(d.epilogue, c);
  const size_t per = (static_cast<size_t>(E) * 12 + 255) / 256 * 256;
  Tensor ws = at::empty({static_cast<int64_t>(10 * per + c.workspace_bytes + 256)}, a_data.options());
  auto* next = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws.data_ptr()) + 255) / 256 * 256);
  auto take = [&]() {
    void* p = next;
    next += per;
    return p;
  };
  c.shapes = static_cast<int*>(take());
  c.ptr_a = static_cast<const void**>(take());
  c.ptr_b = static_cast<const void**>(take());
  c.ptr_c = static_cast<const void**>(take());
  c.ptr_bias = static_cast<const void**>(take());
  c.ptr_d = static_cast<void**>(take());
  c.stride_a = static_cast<int64_t*>(take());
  c.stride_b = static_cast<int64_t*>(take());
  c.stride_c = static_cast<int64_t*>(take());
  c.stride_d = static_cast<int64_t*>(take());
  if (!plus_c) {
    c.ptr_c = nullptr;
    c.stride_c = nullptr;
  }
  if (!bias) c.ptr_bias = nullptr;
  Tensor alpha = at::empty({E}, a_data.options().dtype(at::kFloat));
  c.alpha = alpha.data_ptr<float>();
  c.workspace = next;
  const int rc = launch_copies_cutlass(d, c, stream);
  NVFP4_RETURN_IF_ERROR(nvfp4::launch_status("nvfp4_gemm"));
  NVFP4_REFUSE_UNLESS(rc == 0, "nvfp4_gemm: the CUTLASS grouped GEMM refused the launch (code ", rc, ")");
  return {};
}

// Scratch for `per_group` bytes of tensor maps per group, 128-byte aligned (TMA's requirement), from the caching
// allocator on the current stream (stream-ordered, graph-safe); `holder` keeps it until the launches are enqueued.
void* map_scratch(Tensor& holder, int64_t per_group, int64_t E, const Tensor& like) {
  holder = at::empty({per_group * E + 128}, like.options());
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(holder.data_ptr()) + 127) & ~uintptr_t{127});
}

// The plan's codes, each a value of its enum (common/codes.h).
std::string check_plan(int64_t algorithm, int64_t loader, int64_t epilogue) {
  // (kSwapped256x128: the enum's last code)
  NVFP4_REFUSE_UNLESS(algorithm >= nvfp4_gemm::kFused64x256 && algorithm <= nvfp4_gemm::kSwapped256x128,
                      "nvfp4_gemm: unknown algorithm code ", algorithm);
  NVFP4_REFUSE_UNLESS(loader >= nvfp4_gemm::kLoaderCpAsync && loader <= nvfp4_gemm::kLoaderLoads,
                      "nvfp4_gemm: unknown loader code ", loader);
  NVFP4_REFUSE_UNLESS(epilogue >= nvfp4_gemm::kEpilogueStaged && epilogue <= nvfp4_gemm::kEpilogueCutlass,
                      "nvfp4_gemm: unknown epilogue code ", epilogue);
  return {};
}

// Runs the plan (algorithm, loader, epilogue; device/_dispatch.py) on the current stream: the setup kernel, then the
// algorithm's kernels. workspace: uint8 [E * sizeof(Prob) + 4 * (E + 1)] (any contents; fully rewritten by the setup
// kernel). A plan that cannot run this call is refused (before the GEMM kernel is launched; the operand copies of the
// algorithms over copies may already be enqueued, the output is untouched).
std::string grouped_gemm_(int64_t kind, int64_t E, const Tensor& a_data, const Tensor& a_scales, const Tensor& a_offs,
                          const Tensor& a_amax, const Tensor& b_data, const Tensor& b_scales, const Tensor& b_offs,
                          const Tensor& b_amax, Tensor out, const c10::optional<Tensor>& bias, bool accumulate,
                          int64_t b_rows, int64_t a_rows, int64_t kc, int64_t ldd, double rcp, int64_t rule,
                          int64_t grid_upper, Tensor workspace, int64_t algorithm, int64_t loader, int64_t epilogue,
                          int64_t max_ctas, const c10::optional<Tensor>& b_copy) {
  NVFP4_REFUSE_UNLESS(kind >= 0 && kind <= 2, "nvfp4_gemm: kind must be 0 (fprop), 1 (dgrad) or 2 (wgrad), got ", kind);
  NVFP4_REFUSE_UNLESS(E >= 1, "nvfp4_gemm: E must be >= 1");
  NVFP4_REFUSE_UNLESS(rule >= 0 && rule <= 3, "nvfp4_gemm: rule must be a scale rule code 0..3, got ", rule);
  NVFP4_REFUSE_UNLESS(max_ctas >= 0 && max_ctas < (int64_t{1} << 31), "nvfp4_gemm: max_ctas must be >= 0 (0: no cap)",
                      ", got ", max_ctas);
  NVFP4_RETURN_IF_ERROR(check_plan(algorithm, loader, epilogue));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", a_data, "a data", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", a_scales, "a scales", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", b_data, "b data", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", b_scales, "b scales", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", a_offs, "a offsets", at::kLong));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", b_offs, "b offsets", at::kLong));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", a_amax, "a amax", at::kFloat));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", b_amax, "b amax", at::kFloat));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", workspace, "workspace", at::kByte));
  NVFP4_REFUSE_UNLESS(a_offs.numel() == 6 * (E + 1) && b_offs.numel() == 6 * (E + 1),
                      "nvfp4_gemm: offsets must be [6, ", E + 1, "], got ", a_offs.numel(), " and ", b_offs.numel(),
                      " values");
  NVFP4_REFUSE_UNLESS(a_amax.numel() == E && b_amax.numel() == E, "nvfp4_gemm: amax must have ", E, " values, got ",
                      a_amax.numel(), " and ", b_amax.numel());
  NVFP4_REFUSE_UNLESS(out.is_cuda() && out.is_contiguous(), "nvfp4_gemm: out must be a contiguous CUDA tensor");
  const bool f32 = out.scalar_type() == at::kFloat;
  NVFP4_REFUSE_UNLESS(f32 || out.scalar_type() == at::kBFloat16, "nvfp4_gemm: out must be float32 or bfloat16");
  NVFP4_REFUSE_UNLESS(!accumulate || f32, "nvfp4_gemm: accumulate needs a float32 out");
  const size_t ws = E * sizeof(nvfp4_gemm::Prob) + 4 * (E + 1);
  NVFP4_REFUSE_UNLESS(static_cast<size_t>(workspace.numel()) >= ws, "nvfp4_gemm: the workspace needs ", ws,
                      " bytes, got ", workspace.numel());
  NVFP4_REFUSE_UNLESS(reinterpret_cast<uintptr_t>(workspace.data_ptr()) % 16 == 0, "nvfp4_gemm: workspace alignment");
  const float* bias_p = nullptr;
  if (bias.has_value() && bias->defined()) {
    NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", *bias, "bias", at::kFloat));
    NVFP4_REFUSE_UNLESS(bias->numel() == E * ldd, "nvfp4_gemm: bias must be [E, ", ldd, "]");
    bias_p = bias->data_ptr<float>();
  }
  const Tensor* b_copy_p = nullptr;  // the weights' fp16 values [E, N, K] (fprop / dgrad; copies_cutlass reads it)
  if (b_copy.has_value() && b_copy->defined()) {
    NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", *b_copy, "b copy", at::kHalf));
    NVFP4_REFUSE_UNLESS(kind != nvfp4_gemm::kWgrad,
                        "nvfp4_gemm: a b copy (the weights' values) serves fprop and dgrad");
    NVFP4_REFUSE_UNLESS(kind != nvfp4_gemm::kDgrad || !f32, "nvfp4_gemm: dgrad over a b copy writes bfloat16 only");
    NVFP4_REFUSE_UNLESS(b_copy->device() == out.device(), "nvfp4_gemm: the b copy must be on out's device");
    NVFP4_REFUSE_UNLESS(b_copy->numel() == E * ldd * kc, "nvfp4_gemm: the b copy must hold E N K = ", E * ldd * kc,
                        " values, got ", b_copy->numel());
    NVFP4_REFUSE_UNLESS(reinterpret_cast<uintptr_t>(b_copy->data_ptr()) % 16 == 0 && kc % 8 == 0 && ldd % 8 == 0,
                        "nvfp4_gemm: the b copy and its rows must be 16-byte aligned");
    b_copy_p = &*b_copy;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  auto stream = c10::cuda::getCurrentCUDAStream();

  auto* probs = reinterpret_cast<nvfp4_gemm::Prob*>(workspace.data_ptr());
  int* prefix = reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(workspace.data_ptr()) + E * sizeof(nvfp4_gemm::Prob));
  nvfp4_gemm::SetupArgs s{};
  s.kind = static_cast<int>(kind);
  s.E = static_cast<int>(E);
  s.a_data = cptr<uint8_t>(a_data);
  s.a_scales = cptr<uint8_t>(a_scales);
  s.a_offs = a_offs.data_ptr<int64_t>();
  s.a_amax = a_amax.data_ptr<float>();
  s.b_data = cptr<uint8_t>(b_data);
  s.b_scales = cptr<uint8_t>(b_scales);
  s.b_offs = b_offs.data_ptr<int64_t>();
  s.b_amax = b_amax.data_ptr<float>();
  s.out = out.numel() ? out.data_ptr() : nullptr;
  s.bias = bias_p;
  s.out_f32 = f32;
  s.accumulate = accumulate;
  s.b_rows = b_rows;
  s.a_rows = a_rows;
  s.kc = kc;
  s.ldd = ldd;
  s.rcp = static_cast<float>(rcp);
  s.rule = static_cast<int>(rule);
  s.probs = probs;
  s.prefix = prefix;
  const auto algo = static_cast<nvfp4_gemm::Algorithm>(algorithm);
  nvfp4_gemm::tile_of(algo, &s.tile_m, &s.tile_n);
  const bool swapped = algo == nvfp4_gemm::kSwapped64x256 || algo == nvfp4_gemm::kSwapped256x128;
  NVFP4_REFUSE_UNLESS(!swapped || kind != nvfp4_gemm::kWgrad || algo == nvfp4_gemm::kSwapped256x128,
                      "nvfp4_gemm: swapped_64x256 runs fprop and dgrad only");
  // wgrad on swapped_256x128: X's columnwise plane is the token operand (its fp16 copy), dY's the decoded one
  s.swap_wgrad = swapped && kind == nvfp4_gemm::kWgrad;
  nvfp4_gemm::launch_setup(s, stream);
  NVFP4_RETURN_IF_ERROR(nvfp4::launch_status("nvfp4_gemm"));
  if (grid_upper <= 0) return {};
  // (their cp.async loader steps each copy by 32-bit offsets of up to 96 x the contraction with 64-token tiles, 240 x
  // with 256-token tiles; wgrad's longest contraction is bounded by dY's columnwise bytes per N row, times 2)
  const int64_t swapped_kc = kind == nvfp4_gemm::kWgrad ? (a_rows > 0 ? 2 * a_data.numel() / a_rows : 0) : kc;
  NVFP4_REFUSE_UNLESS(!swapped || swapped_kc < (int64_t{1} << (algo == nvfp4_gemm::kSwapped256x128 ? 23 : 24)),
                      "nvfp4_gemm: the swapped kernels run contractions below 2^24 (swapped_256x128: 2^23) only");
  NVFP4_REFUSE_UNLESS(!swapped || loader == nvfp4_gemm::kLoaderCpAsync || kind == nvfp4_gemm::kFprop ||
                          algo == nvfp4_gemm::kSwapped256x128,
                      "nvfp4_gemm: swapped_64x256's TMA loader runs fprop only");
  const auto aligned16 = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  // exact_hybrid's B maps need packed rows of a multiple of 16 bytes and 16-byte aligned B planes, so that
  // SPEC 9.2's offsets keep every group's rows and scale tiles 16-byte aligned
  NVFP4_REFUSE_UNLESS(algo != nvfp4_gemm::kExactHybrid ||
                          (kind != nvfp4_gemm::kWgrad && kc % 32 == 0 && aligned16(b_data) && aligned16(b_scales)),
                      "nvfp4_gemm: exact_hybrid runs fprop and dgrad with a contraction % 32 == 0 and 16-byte "
                      "aligned B planes");
  if (algo == nvfp4_gemm::kCopiesCutlass) {
    NVFP4_REFUSE_UNLESS(loader == nvfp4_gemm::kLoaderTma && epilogue == nvfp4_gemm::kEpilogueCutlass,
                        "nvfp4_gemm: copies_cutlass runs CUTLASS's TMA loader and epilogue");
    return launch_copies_cutlass_path(static_cast<int>(kind), static_cast<int>(E), s, a_data, a_scales, a_offs, b_data,
                               b_scales, b_offs, b_copy_p, f32, accumulate, bias_p != nullptr, out.device().index(),
                               static_cast<int>(max_ctas), stream);
  }
  nvfp4_gemm::LaunchArgs l{};
  l.probs = probs;
  l.prefix = prefix;
  l.E = static_cast<int>(E);
  l.algorithm = algo;
  l.loader = static_cast<nvfp4_gemm::Loader>(loader);
  l.epilogue = static_cast<nvfp4_gemm::Epilogue>(epilogue);
  l.out_f32 = f32;
  // bit 0: C is read back; bit 1: the whole-line epilogue prefetches the tile's C rows into L2 at the tile's start
  // (prefetch_tile_c_lines)
  l.accumulate = accumulate ? 3 : 0;
  l.grid_upper = static_cast<int>(grid_upper);
  l.max_ctas = static_cast<int>(max_ctas);
  l.out = s.out;
  // the output as the TMA-store epilogues' maps see it: wgrad [E, a_rows, b_rows]; fprop / dgrad [T, cols]
  l.out_rows = kind == nvfp4_gemm::kWgrad ? a_rows : out.size(0);
  l.out_cols = kind == nvfp4_gemm::kWgrad ? b_rows : ldd;
  l.ldd = ldd;
  l.kind = static_cast<int>(kind);
  l.has_bias = bias_p != nullptr;
  // mode sm100: the int64 step's sums need fewer than 2^13 k64 steps (SPEC 12.7)
  NVFP4_REFUSE_UNLESS((algo != nvfp4_gemm::kSm100Simt && algo != nvfp4_gemm::kSm100Copies) || kc < (int64_t{1} << 19),
                      "nvfp4_gemm: mode sm100 runs contractions below 2^19 only");
  bool launched = false;
  if (algo == nvfp4_gemm::kExactHybrid) {
    // an fp16 copy of A only, B dequantized in the kernel
    nvfp4_gemm::CopiesArgs d{};
    const auto copies = f16_copies(d, static_cast<int>(kind), static_cast<int>(E), s, a_data, a_scales, a_offs, b_data,
                                   b_scales, b_offs, /*a_only=*/true);
    Tensor maps;  // 3 x 128 bytes per group, 128-byte aligned (gemm/exact_hybrid.cu)
    d.group_maps = map_scratch(maps, 3 * 128, E, a_data);
    launched = nvfp4_gemm::launch_exact_hybrid_path(d, probs, l, stream);
  } else if (algo == nvfp4_gemm::kExactCopies || algo == nvfp4_gemm::kSm100Copies || swapped) {
    // the kernels over fp16 copies with the setup kernel's tile list: exact_copies and sm100_copies over copies of both
    // planes, or the swapped kernels over a copy of the token plane
    nvfp4_gemm::CopiesArgs d{};
    const auto copies = s.swap_wgrad ? f16_copies(d, static_cast<int>(kind), static_cast<int>(E), s, b_data, b_scales,
                                                  b_offs, a_data, a_scales, a_offs, /*a_only=*/true)
                                     : f16_copies(d, static_cast<int>(kind), static_cast<int>(E), s, a_data, a_scales,
                                                  a_offs, b_data, b_scales, b_offs, /*a_only=*/swapped);
    if (swapped) {
      Tensor maps;  // wgrad's TMA loader: one token map (128 bytes) per group, 128-byte aligned (gemm/swapped.cu)
      if (s.swap_wgrad && loader == nvfp4_gemm::kLoaderTma) d.group_maps = map_scratch(maps, 128, E, a_data);
      launched = nvfp4_gemm::launch_swapped_path(d, probs, l, stream);
    } else {
      // the per-group tensor maps (2 x 128 bytes per group, 128-byte aligned; gemm/exact_copies.cu launch_copies_maps)
      Tensor maps;
      d.group_maps = map_scratch(maps, 256, E, a_data);
      launched = algo == nvfp4_gemm::kSm100Copies ? nvfp4_gemm::launch_sm100_copies_path(d, probs, l, stream)
                                                  : nvfp4_gemm::launch_exact_copies_path(d, probs, l, stream);
    }
  } else if (algo == nvfp4_gemm::kSm100Simt) {
    launched = nvfp4_gemm::launch_sm100(l, stream);
  } else {
    launched = nvfp4_gemm::launch_fused(l, stream);
  }
  NVFP4_RETURN_IF_ERROR(nvfp4::launch_status("nvfp4_gemm"));
  NVFP4_REFUSE_UNLESS(launched, "nvfp4_gemm: the plan (algorithm ", algorithm, ", loader ", loader, ", epilogue ",
                      epilogue, ") cannot run this call (its tensor maps do not apply to these buffers, or the driver "
                      "refused them)");
  return {};
}

// The weights' fp16 copy that grouped_gemm_ takes as b_copy: the values E2M1 x E4M3 (SPEC 12.6, exact; no S_enc) of
// a rowwise plane of W [E N, K] grouped by N rows per expert, in the plane's layout: out [E, N, K] fp16, element 2j,
// 2j + 1 from packed byte j. The plane's rows are dense (SPEC 9.2: group g's bytes at g N K / 2), so out's
// E N K values are all written when the offsets table is that of N rows per group.
std::string weight_f16_copy_(const Tensor& data, const Tensor& scales, const Tensor& offs, int64_t E, int64_t k,
                             Tensor out) {
  NVFP4_REFUSE_UNLESS(E >= 1 && k >= 16 && k % 16 == 0, "nvfp4_gemm: E must be >= 1 and K a positive multiple of 16");
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", data, "data", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", scales, "scales", at::kByte));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", offs, "offsets", at::kLong));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4_gemm", out, "out", at::kHalf));
  NVFP4_REFUSE_UNLESS(offs.numel() == 6 * (E + 1), "nvfp4_gemm: offsets must be [6, ", E + 1, "]");
  NVFP4_REFUSE_UNLESS(data.device() == out.device() && scales.device() == out.device() && offs.device() == out.device(),
                      "nvfp4_gemm: data, scales, offsets and out must be on one device");
  NVFP4_REFUSE_UNLESS(data.numel() % 8 == 0 && out.numel() == 2 * data.numel(),
                      "nvfp4_gemm: the copy takes 2 fp16 values per data byte (a multiple of 8 bytes), got ",
                      out.numel(), " for ", data.numel());
  // E groups of the same N rows of K / 2 bytes, and room for their swizzled scales (SPEC 9.2: 128 x 4 tiles per group)
  const int64_t row_bytes = k / 2, rows = data.numel() / row_bytes;
  NVFP4_REFUSE_UNLESS(data.numel() % (E * row_bytes) == 0, "nvfp4_gemm: the data must be E groups of rows of K / 2 = ",
                      row_bytes, " bytes, got ", data.numel(), " bytes");
  const int64_t n = rows / E;
  NVFP4_REFUSE_UNLESS(scales.numel() >= E * ((n + 127) / 128 * 128) * ((k / 16 + 3) / 4 * 4),
                      "nvfp4_gemm: the scales hold ", scales.numel(), " bytes, fewer than the swizzled scales of E = ",
                      E, " groups of ", n, " x ", k / 16);
  NVFP4_REFUSE_UNLESS(reinterpret_cast<uintptr_t>(data.data_ptr()) % 8 == 0 &&
                          reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0,
                      "nvfp4_gemm: data must be 8-byte and out 16-byte aligned");
  const c10::cuda::CUDAGuard guard(out.device());
  nvfp4_gemm::launch_decode_plane(plane_view(data, scales, offs, static_cast<int>(E), false, k, 0), out.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4_gemm");
}

// The output tile whose list the setup kernel builds for an algorithm (a test checks device/_dispatch.py's table).
std::tuple<int64_t, int64_t> algorithm_tile(int64_t algorithm) {
  int m = 0, n = 0;
  nvfp4_gemm::tile_of(static_cast<nvfp4_gemm::Algorithm>(algorithm), &m, &n);
  return {m, n};
}

int64_t prob_size() { return static_cast<int64_t>(sizeof(nvfp4_gemm::Prob)); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("grouped_gemm_", nvfp4::returning_errors(&grouped_gemm_),
        "NVFP4 grouped GEMM (fprop/dgrad/wgrad) on the current stream");
  m.def("weight_f16_copy_", nvfp4::returning_errors(&weight_f16_copy_),
        "the fp16 values of a rowwise weight plane [E N, K] (grouped_gemm_'s b_copy) on the current stream");
  m.def("prob_size", &prob_size);
  m.def("algorithm_tile", &algorithm_tile, "the (rows, columns) output tile of an algorithm code");
  m.def("has_cutlass", &nvfp4_gemm::cutlass_built, "whether copies_cutlass (CUTLASS's grouped GEMM) was built");
}
