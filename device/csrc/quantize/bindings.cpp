// PyTorch bindings: thin out-variant wrappers that check arguments and launch on the current stream.
// The Python package (device/_ops.py) wraps these in torch.library custom ops that allocate the outputs.
#include <algorithm>
#include <string>

#include <torch/extension.h>

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "quantize/launch.h"
#include "layer/bias_grad.h"
#include "layer/packed_scales.h"
#include "common/refusal.h"  // refusals are returned messages, formatted without iostreams

namespace {

using at::Tensor;
using c10::optional;

// -1: not a dtype the quantizer reads
int dtype_code(const Tensor& x) {
  switch (x.scalar_type()) {
    case at::kBFloat16: return nvfp4::kBF16;
    case at::kHalf: return nvfp4::kF16;
    case at::kFloat: return nvfp4::kF32;
    default: return -1;
  }
}

// The kernel family of a pass (device/_dispatch.py plan_quantize): the bf16 fast kernels read bf16 and compile the
// default RHT sign mask in; the fast quantizer writes 16x16 blocks under rule te, rounding to nearest, without the RHT
// only (the amax pass passes block2d false: its maxima are per plane).
std::string check_kernel(const Tensor& x, int64_t kernel, bool rht, int64_t rht_signs, bool block2d, bool sr = false,
                         int64_t rule = nvfp4::kRuleTE) {
  NVFP4_REFUSE_UNLESS(kernel == nvfp4::kQuantizeGeneral || kernel == nvfp4::kQuantizeFastBf16,
                      "nvfp4: unknown quantize kernel code ", kernel);
  if (kernel == nvfp4::kQuantizeFastBf16) {
    NVFP4_REFUSE_UNLESS(dtype_code(x) == nvfp4::kBF16, "nvfp4: the fast kernels read bfloat16 input only");
    NVFP4_REFUSE_UNLESS(!rht || rht_signs == nvfp4::kDefaultRhtSigns,
                        "nvfp4: the fast kernels run the RHT with the default sign mask only");
    NVFP4_REFUSE_UNLESS(!block2d || (!rht && !sr && !nvfp4::is_torchao_rule(rule)),
                        "nvfp4: the fast quantizer writes 16x16 blocks under rule te, rounding to nearest, without "
                        "the RHT only");
  }
  return {};
}

// An optional buffer, when given, is a contiguous CUDA tensor on `dev` (the torch.ops entry points are public:
// every pointer handed to a kernel is checked here, not only in the Python wrappers).
std::string check_on(const optional<Tensor>& t, const c10::Device& dev, const char* what) {
  if (!t.has_value() || !t->defined()) return {};
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", *t, what));
  NVFP4_REFUSE_UNLESS(t->device() == dev, "nvfp4: ", what, " must be on ", dev, ", got ", t->device());
  return {};
}

template <typename P>
P* ptr_or_null(const optional<Tensor>& t) {
  return t.has_value() && t->defined() ? reinterpret_cast<P*>(t->data_ptr()) : nullptr;
}

// The quantizer's input (amax_ and quantize_): a contiguous 16-byte aligned 2-D CUDA tensor, K % 16 == 0, a dtype the
// kernels read, bf16 when the RHT is on.
std::string check_x(const Tensor& x, bool rht) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", x, "x"));
  NVFP4_REFUSE_UNLESS(x.dim() == 2 && x.size(1) % 16 == 0, "nvfp4: x must be 2-D with K % 16 == 0");
  NVFP4_REFUSE_UNLESS(x.data_ptr() == nullptr || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
                      "nvfp4: x must be 16-byte aligned");
  NVFP4_REFUSE_UNLESS(dtype_code(x) >= 0, "nvfp4: x must be bfloat16, float16 or float32, got ", x.scalar_type());
  NVFP4_REFUSE_UNLESS(!rht || dtype_code(x) == nvfp4::kBF16, "nvfp4: rht needs bf16");
  return {};
}

// The optional row-tile records of a grouped call (quantize/layout.cuh, TileRecord): int32 [R, 4] on `dev` with R at
// least the worst-case row-tile count `tiles` (0: a single tensor, where the records are not used).
std::string check_tile_recs(const optional<Tensor>& recs, c10::Device dev, int64_t tiles) {
  if (!recs.has_value() || !recs->defined()) return {};
  NVFP4_RETURN_IF_ERROR(check_on(recs, dev, "tile_recs"));
  NVFP4_REFUSE_UNLESS(recs->scalar_type() == at::kInt && recs->is_contiguous() && recs->numel() >= 4 * tiles,
                      "nvfp4: tile_recs must be a contiguous int32 tensor of at least 4 x ", tiles, " elements");
  return {};
}

// Per-group amaxes, when given: float32 with at least `groups` values on `dev` (group_setup_, amax_, quantize_).
std::string check_amax(const optional<Tensor>& a, const c10::Device& dev, int64_t groups) {
  NVFP4_RETURN_IF_ERROR(check_on(a, dev, "amax"));
  NVFP4_REFUSE_UNLESS(!a.has_value() || !a->defined() || (a->scalar_type() == at::kFloat && a->numel() >= groups),
                      "nvfp4: an amax must be float32 with at least ", groups, " values");
  return {};
}

// Supplied amaxes (SPEC 4.3), when given: contiguous float32 with exactly `groups` values on `dev` (supplied_amax_,
// group_setup_); the kernels read value g of group g.
std::string check_supplied_amax(const optional<Tensor>& a, const c10::Device& dev, int64_t groups) {
  NVFP4_RETURN_IF_ERROR(check_on(a, dev, "supplied amax"));
  NVFP4_REFUSE_UNLESS(!a.has_value() || !a->defined() ||
                          (a->scalar_type() == at::kFloat && a->is_contiguous() && a->numel() == groups),
                      "nvfp4: a supplied amax must be contiguous float32 with ", groups, " value(s)");
  return {};
}

// The grid arguments of amax_ / quantize_: a grouped call's offset table (int64 [6, E+1] on x's device, E >= 1) and
// a row-tile count that covers every tile (row_tiles_needed); per-group amaxes of at least E (single tensor: 1)
// float32 values on that device.
std::string check_grid(const Tensor& x, const optional<Tensor>& offs, int64_t E, int64_t row_tiles,
                       const Tensor& row_amax, const optional<Tensor>& col_amax) {
  const bool grouped = offs.has_value() && offs->defined();
  NVFP4_RETURN_IF_ERROR(check_on(offs, x.device(), "offsets"));
  NVFP4_REFUSE_UNLESS(!grouped || (E >= 1 && offs->scalar_type() == at::kLong && offs->numel() == 6 * (E + 1)),
                      "nvfp4: offsets must be int64 with 6 x (E + 1) values and E >= 1, got E = ", E);
  const int64_t need = nvfp4::row_tiles_needed(x.size(0), E, grouped);
  NVFP4_REFUSE_UNLESS(row_tiles >= need, "nvfp4: row_tiles must be at least ", need, ", got ", row_tiles);
  const int64_t groups = grouped ? E : 1;
  NVFP4_RETURN_IF_ERROR(check_amax(row_amax, x.device(), groups));
  NVFP4_RETURN_IF_ERROR(check_amax(col_amax, x.device(), groups));
  return {};
}

// SPEC 4: per-tensor (offs absent) or per-group amax; the columnwise one only when `columnwise`. Per tensor,
// row_amax / col_amax (either plane's, asked for or not) are zeroed here first (a one-CTA kernel the bf16 fast pass
// overlaps, launch_init_amax); per group they must be zero on entry (group_setup_ zeroes them). after_setup: the
// previous launch on the stream is group_setup_ for `offs`. nan_propagating: the torchao rules' amax (SPEC 4.1).
std::string amax_(const Tensor& x, const optional<Tensor>& offs, int64_t E, int64_t row_tiles, Tensor row_amax,
                  const optional<Tensor>& col_amax, bool columnwise, bool rht, int64_t rht_signs, bool after_setup,
                  bool nan_propagating, const optional<Tensor>& tile_recs, const optional<Tensor>& splits,
                  int64_t kernel) {
  NVFP4_RETURN_IF_ERROR(check_x(x, rht));
  NVFP4_RETURN_IF_ERROR(check_kernel(x, kernel, rht, rht_signs, false));
  NVFP4_RETURN_IF_ERROR(check_grid(x, offs, E, row_tiles, row_amax, col_amax));
  NVFP4_RETURN_IF_ERROR(check_tile_recs(tile_recs, x.device(), offs.has_value() ? row_tiles : 0));
  NVFP4_RETURN_IF_ERROR(check_on(splits, x.device(), "splits"));
  NVFP4_REFUSE_UNLESS(!splits.has_value() || !splits->defined() ||
                          (offs.has_value() && splits->scalar_type() == at::kLong && splits->is_contiguous() &&
                           splits->numel() == E),
                      "nvfp4: splits must be a contiguous int64 tensor of E values, with the offsets of a grouped "
                      "call");
  const c10::cuda::CUDAGuard guard(x.device());
  nvfp4::AmaxArgs a{x.data_ptr(), x.size(0), x.size(1), ptr_or_null<const int64_t>(offs), (int)E,
                    row_amax.data_ptr<float>(), columnwise ? ptr_or_null<float>(col_amax) : nullptr,
                    (uint32_t)rht_signs, nan_propagating ? 1 : 0};
  a.tile_recs = ptr_or_null<const int4>(tile_recs);
  a.splits = ptr_or_null<const int64_t>(splits);
  auto s = c10::cuda::getCurrentCUDAStream();
  if (a.offs == nullptr) {
    nvfp4::launch_init_amax(a.row_amax, ptr_or_null<float>(col_amax), nullptr, nullptr, s);
    a.after_zero = 1;  // (the bf16 fast pass starts with a programmatic dependency on the zeroing; the others after it)
  }
  switch (dtype_code(x)) {
    case nvfp4::kBF16:
      nvfp4::launch_amax_bf16(a, rht, row_tiles, s, after_setup, static_cast<nvfp4::QuantizeKernel>(kernel));
      break;
    case nvfp4::kF16: nvfp4::launch_amax_f16(a, row_tiles, s); break;
    default: nvfp4::launch_amax_f32(a, row_tiles, s); break;
  }
  return nvfp4::launch_status("nvfp4");
}

// SPEC 4.3: a single tensor's supplied amaxes into its amax buffers (row_amax[0], col_amax[0]), a negative value as
// its magnitude: one CTA, which lets a quantize_ launched next with after_amax start at once.
std::string supplied_amax_(const Tensor& row_supplied, const Tensor& col_supplied, Tensor row_amax,
                           Tensor col_amax) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", row_amax, "row_amax"));
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", col_amax, "col_amax"));
  const c10::Device dev = row_amax.device();
  NVFP4_RETURN_IF_ERROR(check_amax(row_amax, dev, 1));
  NVFP4_RETURN_IF_ERROR(check_amax(col_amax, dev, 1));
  NVFP4_RETURN_IF_ERROR(check_supplied_amax(row_supplied, dev, 1));
  NVFP4_RETURN_IF_ERROR(check_supplied_amax(col_supplied, dev, 1));
  const c10::cuda::CUDAGuard guard(dev);
  nvfp4::launch_init_amax(row_amax.data_ptr<float>(), col_amax.data_ptr<float>(), row_supplied.data_ptr<float>(),
                          col_supplied.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

int64_t round_up_to(int64_t v, int64_t q) { return (v + q - 1) / q * q; }

// Bytes of one plane's scales (SPEC 8): [rows, C] compact, or roundup(rows, 128) * roundup(C, 4) swizzled or
// padded compact (quantize_'s outputs, swizzle_'s out, dequantize_'s input).
int64_t scale_bytes(int64_t rows, int64_t C, bool padded) {
  return padded ? round_up_to(rows, 128) * round_up_to(C, 4) : rows * C;
}

// The bytes quantize_ writes into each output buffer it is given, so that a short buffer is refused rather than
// written past its end (the Python allocators, device/_ops.py, use the same sizes). Single tensor (SPEC 6, 8):
// rowwise data M K / 2; columnwise data K Mp / 2 (Mp = roundup(M, 16)); scales [rows, C] compact, or
// roundup(rows, 128) roundup(C, 4) swizzled or padded (rows = M, C = K / 16 rowwise; rows = K, C = Mp / 16
// columnwise). Grouped: the worst-case capacities of SPEC 9.3, with swizzled or padded compact scales (9.2).
std::string check_outputs(const Tensor& x, bool grouped, int64_t E, int64_t layout, const optional<Tensor>& row_data,
                          const optional<Tensor>& row_scales, const optional<Tensor>& col_data,
                          const optional<Tensor>& col_scales) {
  NVFP4_REFUSE_UNLESS(layout == nvfp4::kSwizzled || layout == nvfp4::kPaddedCompact ||
                          (!grouped && layout == nvfp4::kCompact),
                      "nvfp4: scale layout ", layout,
                      " is not one of this call's (grouped: 1 or 2; single: 0, 1 or 2)");
  NVFP4_REFUSE_UNLESS(row_data.has_value() == row_scales.has_value() && col_data.has_value() == col_scales.has_value(),
                      "nvfp4: a plane needs both its data and its scale buffer");
  const int64_t M = x.size(0), K = x.size(1), Mp = round_up_to(M, 16);
  const bool padded = layout != nvfp4::kCompact;
  int64_t need[4];
  if (grouped) {
    need[0] = M * K / 2;
    // SPEC 9.3: W(q) = E + max(M - E, 0) / q units of q rows
    const int64_t extra = std::max<int64_t>(M - E, 0);
    need[1] = 128 * (E + extra / 128) * round_up_to(K / 16, 4);
    need[2] = K * 16 * (E + extra / 16) / 2;
    need[3] = round_up_to(K, 128) * 4 * (E + extra / 64);
  } else {
    need[0] = M * K / 2;
    need[1] = scale_bytes(M, K / 16, padded);
    need[2] = K * Mp / 2;
    need[3] = scale_bytes(K, Mp / 16, padded);
  }
  const optional<Tensor>* bufs[4] = {&row_data, &row_scales, &col_data, &col_scales};
  const char* names[4] = {"row_data", "row_scales", "col_data", "col_scales"};
  for (int i = 0; i < 4; ++i) {
    const optional<Tensor>& b = *bufs[i];
    if (!b.has_value() || !b->defined()) continue;
    NVFP4_REFUSE_UNLESS(b->scalar_type() == at::kByte && b->is_contiguous(), "nvfp4: ", names[i],
                        " must be a contiguous uint8 tensor");
    NVFP4_REFUSE_UNLESS(b->numel() >= need[i], "nvfp4: ", names[i], " holds ", b->numel(),
                        " bytes, the call writes ", need[i]);
  }
  return {};
}

// The checks and QuantArgs fields that quantize_ and quantize_4over6_ share: X's grid (offsets, row tiles, amaxes),
// the tile records, the output buffers (device, dtype, sizes), and the planes' pointers, layout and block shape.
std::string plane_args(const Tensor& x, const optional<Tensor>& offs, int64_t E, int64_t row_tiles,
                       const Tensor& row_amax, const Tensor& col_amax, const optional<Tensor>& row_data,
                       const optional<Tensor>& row_scales, const optional<Tensor>& col_data,
                       const optional<Tensor>& col_scales, int64_t layout, bool block2d,
                       const optional<Tensor>& tile_recs, nvfp4::QuantArgs& a) {
  NVFP4_RETURN_IF_ERROR(check_grid(x, offs, E, row_tiles, row_amax, col_amax));
  NVFP4_RETURN_IF_ERROR(check_tile_recs(tile_recs, x.device(), offs.has_value() ? row_tiles : 0));
  for (const auto* b : {&row_data, &row_scales, &col_data, &col_scales})
    NVFP4_RETURN_IF_ERROR(check_on(*b, x.device(), "an output buffer"));
  NVFP4_RETURN_IF_ERROR(check_outputs(x, offs.has_value() && offs->defined(), E, layout, row_data, row_scales,
                                      col_data, col_scales));
  a = nvfp4::QuantArgs{};
  a.x = x.data_ptr();
  a.M = x.size(0);
  a.K = x.size(1);
  a.offs = ptr_or_null<const int64_t>(offs);
  a.E = (int)E;
  a.row_amax = row_amax.data_ptr<float>();
  a.col_amax = col_amax.data_ptr<float>();
  a.row_data = ptr_or_null<uint8_t>(row_data);
  a.row_scales = ptr_or_null<uint8_t>(row_scales);
  a.col_data = ptr_or_null<uint8_t>(col_data);
  a.col_scales = ptr_or_null<uint8_t>(col_scales);
  a.layout = (int)layout;
  a.block2d = block2d ? 1 : 0;
  a.tile_recs = ptr_or_null<const int4>(tile_recs);
  return {};
}

// SPEC 5-8, 10: the fused quantizer writing into preallocated buffers.
std::string quantize_(const Tensor& x, const optional<Tensor>& offs, int64_t E, int64_t row_tiles,
                      const Tensor& row_amax, const Tensor& col_amax, const optional<Tensor>& row_data,
                      const optional<Tensor>& row_scales, const optional<Tensor>& col_data,
                      const optional<Tensor>& col_scales, int64_t layout, bool block2d, bool sr, int64_t rule, bool rht,
                      int64_t rht_signs, int64_t seed_lo, int64_t seed_hi, int64_t offset, bool after_amax,
                      const optional<Tensor>& tile_recs, int64_t kernel) {
  NVFP4_RETURN_IF_ERROR(check_x(x, rht));
  NVFP4_RETURN_IF_ERROR(check_kernel(x, kernel, rht, rht_signs, block2d, sr, rule));
  nvfp4::QuantArgs a;
  NVFP4_RETURN_IF_ERROR(plane_args(x, offs, E, row_tiles, row_amax, col_amax, row_data, row_scales, col_data,
                                   col_scales, layout, block2d, tile_recs, a));
  NVFP4_REFUSE_UNLESS(rule >= nvfp4::kRuleTE && rule <= nvfp4::kRuleTorchaoNoScale, "nvfp4: unknown scale rule ",
                      rule);
  const c10::cuda::CUDAGuard guard(x.device());
  a.sr = sr ? 1 : 0;
  a.rule = (int)rule;
  a.rht_signs = (uint32_t)rht_signs;
  a.seed_lo = (uint32_t)seed_lo;
  a.seed_hi = (uint32_t)seed_hi;
  a.offset = (uint32_t)offset;
  auto s = c10::cuda::getCurrentCUDAStream();
  switch (dtype_code(x)) {
    case nvfp4::kBF16:
      nvfp4::launch_quantize_bf16(a, rht, row_tiles, s, after_amax, static_cast<nvfp4::QuantizeKernel>(kernel));
      break;
    case nvfp4::kF16: nvfp4::launch_quantize_f16(a, row_tiles, s); break;
    default: nvfp4::launch_quantize_f32(a, row_tiles, s); break;
  }
  return nvfp4::launch_status("nvfp4");
}

// SPEC 5.6: the 4over6 quantizer writing into preallocated buffers (bf16, rule "te", round to nearest, no RHT; the
// buffers and grid of quantize_). error: 1 MAE, 2 MSE (FourOverSixError); fast_math: the product-domain error;
// global_scale_max: G, 448 or 256.
std::string quantize_4over6_(const Tensor& x, const optional<Tensor>& offs, int64_t E, int64_t row_tiles,
                             const Tensor& row_amax, const Tensor& col_amax, const optional<Tensor>& row_data,
                             const optional<Tensor>& row_scales, const optional<Tensor>& col_data,
                             const optional<Tensor>& col_scales, int64_t layout, bool block2d, int64_t error,
                             bool fast_math, int64_t global_scale_max, bool after_amax,
                             const optional<Tensor>& tile_recs) {
  NVFP4_RETURN_IF_ERROR(check_x(x, false));
  NVFP4_REFUSE_UNLESS(dtype_code(x) == nvfp4::kBF16, "nvfp4: the 4over6 quantizer reads bfloat16 input only, got ",
                      x.scalar_type());
  NVFP4_REFUSE_UNLESS(error == nvfp4::kFo6Mae || error == nvfp4::kFo6Mse, "nvfp4: unknown 4over6 error code ", error,
                      " (1: mae, 2: mse)");
  NVFP4_REFUSE_UNLESS(global_scale_max == 448 || global_scale_max == 256, "nvfp4: global_scale_max must be 448 or 256, "
                      "got ", global_scale_max);
  nvfp4::QuantArgs a;
  NVFP4_RETURN_IF_ERROR(plane_args(x, offs, E, row_tiles, row_amax, col_amax, row_data, row_scales, col_data,
                                   col_scales, layout, block2d, tile_recs, a));
  const c10::cuda::CUDAGuard guard(x.device());
  a.rule = nvfp4::kRuleTE;
  a.global_scale_max = (int)global_scale_max;
  nvfp4::launch_quantize_4over6_bf16(a, (int)error, fast_math, row_tiles, c10::cuda::getCurrentCUDAStream(),
                                     after_amax);
  return nvfp4::launch_status("nvfp4");
}

// SPEC 9, one launch: device offsets [6, E+1] from device splits (running total capped at T, SPEC 9.4), the
// per-group amaxes (those given: zeroed for the amax pass, or set from row_supplied / col_supplied as SPEC 4.3 uses
// them), and zero bytes past the last group of the worst-case sized buffers given.
std::string group_setup_(const Tensor& splits, int64_t T, int64_t K, Tensor offs, const optional<Tensor>& row_amax,
                         const optional<Tensor>& col_amax, const optional<Tensor>& row_supplied,
                         const optional<Tensor>& col_supplied, const optional<Tensor>& row_data,
                         const optional<Tensor>& row_scales, const optional<Tensor>& col_data,
                         const optional<Tensor>& col_scales, const optional<Tensor>& tile_recs) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", splits, "splits"));
  // (the setup kernel writes one record per row tile: at most row_tiles_needed of them)
  NVFP4_RETURN_IF_ERROR(check_tile_recs(tile_recs, splits.device(), nvfp4::row_tiles_needed(T, splits.numel(), true)));
  NVFP4_REFUSE_UNLESS(splits.scalar_type() == at::kLong, "nvfp4: splits must be int64");
  NVFP4_REFUSE_UNLESS(T >= 0 && K >= 0 && K % 16 == 0, "nvfp4: need T >= 0 and K a multiple of 16");
  NVFP4_REFUSE_UNLESS(offs.is_cuda() && offs.scalar_type() == at::kLong && offs.numel() == 6 * (splits.numel() + 1),
                      "nvfp4: offsets must be a CUDA int64 tensor of 6 x (E + 1) elements");
  const c10::Device dev = splits.device();
  NVFP4_RETURN_IF_ERROR(check_on(offs, dev, "offsets"));
  NVFP4_RETURN_IF_ERROR(check_amax(row_amax, dev, splits.numel()));
  NVFP4_RETURN_IF_ERROR(check_amax(col_amax, dev, splits.numel()));
  NVFP4_RETURN_IF_ERROR(check_supplied_amax(row_supplied, dev, splits.numel()));
  NVFP4_RETURN_IF_ERROR(check_supplied_amax(col_supplied, dev, splits.numel()));
  NVFP4_REFUSE_UNLESS((!row_supplied.has_value() || row_amax.has_value()) &&
                          (!col_supplied.has_value() || col_amax.has_value()),
                      "nvfp4: a supplied amax needs the amax buffer it is written into");
  NVFP4_RETURN_IF_ERROR(check_on(row_data, dev, "row_data"));
  NVFP4_RETURN_IF_ERROR(check_on(row_scales, dev, "row_scales"));
  NVFP4_RETURN_IF_ERROR(check_on(col_data, dev, "col_data"));
  NVFP4_RETURN_IF_ERROR(check_on(col_scales, dev, "col_scales"));
  const c10::cuda::CUDAGuard guard(dev);
  uint8_t* bufs[nvfp4::kTailBufs] = {ptr_or_null<uint8_t>(row_data), ptr_or_null<uint8_t>(row_scales),
                                     ptr_or_null<uint8_t>(col_data), ptr_or_null<uint8_t>(col_scales)};
  const int64_t caps[nvfp4::kTailBufs] = {bufs[0] ? row_data->numel() : 0, bufs[1] ? row_scales->numel() : 0,
                                          bufs[2] ? col_data->numel() : 0, bufs[3] ? col_scales->numel() : 0};
  const int rows[nvfp4::kTailBufs] = {2, 3, 4, 5};  // kOffRowData, kOffRowScale, kOffColData, kOffColScale
  nvfp4::launch_group_setup(splits.data_ptr<int64_t>(), (int)splits.numel(), T, K, offs.data_ptr<int64_t>(),
                            ptr_or_null<float>(row_amax), ptr_or_null<float>(col_amax),
                            ptr_or_null<const float>(row_supplied), ptr_or_null<const float>(col_supplied), bufs,
                            caps, rows,
                            ptr_or_null<int4>(tile_recs), c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

// SPEC 8.2: compact [rows, C] uint8 -> swizzled, zero-padded buffer of roundup(rows,128)*roundup(C,4) bytes.
std::string swizzle_(const Tensor& compact, Tensor out) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", compact, "compact scales"));
  NVFP4_REFUSE_UNLESS(compact.scalar_type() == at::kByte && compact.dim() == 2,
                      "nvfp4: compact scales must be 2-D uint8");
  NVFP4_RETURN_IF_ERROR(check_on(out, compact.device(), "out"));
  const int64_t need = scale_bytes(compact.size(0), compact.size(1), true);
  NVFP4_REFUSE_UNLESS(out.scalar_type() == at::kByte && out.numel() >= need, "nvfp4: the swizzled out needs ", need,
                      " uint8 bytes");
  const c10::cuda::CUDAGuard guard(compact.device());
  nvfp4::launch_swizzle(compact.data_ptr<uint8_t>(), compact.size(0), compact.size(1), out.data_ptr<uint8_t>(),
                        c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

// SPEC 11: dequantize one plane to float32 [rows, cols]; global_scale_max is the plane's G (SPEC 5.6: 448, or 256
// for a 4over6 plane), read by the TE rules' factor fp32(1/(6G)) (SPEC 11.1).
std::string dequantize_(const Tensor& data, const Tensor& scales, const Tensor& amax, int64_t rows, int64_t cols,
                        bool swizzled, int64_t rule, int64_t global_scale_max, Tensor out) {
  NVFP4_REFUSE_UNLESS(rule >= nvfp4::kRuleTE && rule <= nvfp4::kRuleTorchaoNoScale, "nvfp4: unknown scale rule ",
                      rule);
  NVFP4_REFUSE_UNLESS(global_scale_max == 448 || global_scale_max == 256, "nvfp4: global_scale_max must be 448 or 256, "
                      "got ", global_scale_max);
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", data, "data"));
  const c10::Device dev = data.device();
  NVFP4_RETURN_IF_ERROR(check_on(scales, dev, "scales"));
  NVFP4_RETURN_IF_ERROR(check_on(amax, dev, "amax"));
  NVFP4_RETURN_IF_ERROR(check_on(out, dev, "out"));
  NVFP4_REFUSE_UNLESS(data.scalar_type() == at::kByte && scales.scalar_type() == at::kByte,
                      "nvfp4: data and scales must be uint8");
  NVFP4_REFUSE_UNLESS(amax.scalar_type() == at::kFloat && amax.numel() >= 1,
                      "nvfp4: amax must be float32 with one value");
  // (the kernel's indices are 64-bit: any plane whose rows * cols fits well inside int64 is fine)
  NVFP4_REFUSE_UNLESS(rows >= 0 && cols >= 0 && cols % 16 == 0 && (cols == 0 || rows <= (1LL << 62) / cols),
                      "nvfp4: dequantize needs rows, cols >= 0, cols a multiple of 16 and rows * cols < 2^62");
  const int64_t c = cols / 16;
  const int64_t need_scales = scale_bytes(rows, c, swizzled);
  NVFP4_REFUSE_UNLESS(data.numel() >= rows * cols / 2, "nvfp4: data holds ", data.numel(), " bytes, the plane needs ",
                      rows * cols / 2);
  NVFP4_REFUSE_UNLESS(scales.numel() >= need_scales, "nvfp4: scales hold ", scales.numel(), " bytes, the plane needs ",
                      need_scales);
  NVFP4_REFUSE_UNLESS(out.scalar_type() == at::kFloat && out.numel() == rows * cols,
                      "nvfp4: out must be float32 [rows, cols]");
  NVFP4_REFUSE_UNLESS(data.numel() == 0 || reinterpret_cast<uintptr_t>(data.data_ptr()) % 8 == 0,
                      "nvfp4: data must be 8-byte aligned");
  const c10::cuda::CUDAGuard guard(dev);
  nvfp4::launch_dequantize(data.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(), amax.data_ptr<float>(), rows, cols,
                           swizzled, (int)rule, (int)global_scale_max, out.data_ptr<float>(),
                           c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

// The grouped linear layer's bias gradient (layer/bias_grad.cu, SPEC 16.4): out [E, N] fp32 from dy [T, N] bf16 and
// a grouped offsets table offsets [6, E+1] of dY's groups (row 0: the groups' first rows, SPEC 9.4's cut applied).
// The layer passes X's table from the forward, equal to dY's by construction (same splits, same T). The kernel
// clamps every group's bounds to [0, T], so no table makes it read outside dy.
std::string bias_grad_(const Tensor& dy, const Tensor& offsets, int64_t E, Tensor out) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", dy, "dy", at::kBFloat16));
  const c10::Device dev = dy.device();
  NVFP4_RETURN_IF_ERROR(check_on(offsets, dev, "offsets"));
  NVFP4_RETURN_IF_ERROR(check_on(out, dev, "out"));
  NVFP4_REFUSE_UNLESS(E >= 1 && E <= 65535, "nvfp4: bias_grad supports 1 to 65535 groups, got ", E);
  NVFP4_REFUSE_UNLESS(dy.dim() == 2 && dy.size(1) % 4 == 0, "nvfp4: dy must be 2-D [T, N] with N % 4 == 0");
  const int64_t N = dy.size(1);
  NVFP4_REFUSE_UNLESS(offsets.scalar_type() == at::kLong && offsets.numel() >= E + 1,
                      "nvfp4: offsets must be int64 with at least E + 1 values");
  NVFP4_REFUSE_UNLESS(out.scalar_type() == at::kFloat && out.numel() == E * N, "nvfp4: out must be float32 [E, N]");
  NVFP4_REFUSE_UNLESS(dy.numel() == 0 || reinterpret_cast<uintptr_t>(dy.data_ptr()) % 8 == 0,
                      "nvfp4: dy must be 8-byte aligned");
  NVFP4_REFUSE_UNLESS(out.numel() == 0 || reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0,
                      "nvfp4: out must be 16-byte aligned");
  if (out.numel() == 0) return {};
  const c10::cuda::CUDAGuard guard(dev);
  nvfp4_layer::launch_bias_grad(dy.numel() ? dy.data_ptr() : nullptr, offsets.data_ptr<int64_t>(),
                                static_cast<int>(E), dy.size(0), N, out.data_ptr<float>(),
                                c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

// SPEC 9.5: the packed columnwise scales of a grouped call of E groups over K columns, from / to its swizzled
// columnwise scales (SPEC 9.2), by the columnwise rows of its offsets table [6, E+1] (read on the device). The
// destination is written whole; both buffers' sizes bound every read (layer/packed_scales.cu).
std::string check_packed_scales(const Tensor& packed, const Tensor& swizzled, const Tensor& offsets, int64_t E,
                                int64_t K) {
  NVFP4_RETURN_IF_ERROR(nvfp4::check_cuda_tensor("nvfp4", swizzled, "swizzled scales", at::kByte));
  const c10::Device dev = swizzled.device();
  NVFP4_RETURN_IF_ERROR(check_on(packed, dev, "packed scales"));
  NVFP4_RETURN_IF_ERROR(check_on(offsets, dev, "offsets"));
  NVFP4_REFUSE_UNLESS(packed.scalar_type() == at::kByte, "nvfp4: packed scales must be uint8");
  NVFP4_REFUSE_UNLESS(E >= 1 && E < (int64_t{1} << 30), "nvfp4: need 1 <= E < 2^30 groups, got ", E);
  NVFP4_REFUSE_UNLESS(K >= 16 && K % 16 == 0 && K < (int64_t{1} << 31),
                      "nvfp4: K must be a positive multiple of 16 below 2^31, got ", K);
  NVFP4_REFUSE_UNLESS(offsets.scalar_type() == at::kLong && offsets.dim() == 2 && offsets.size(0) == 6 &&
                          offsets.size(1) == E + 1,
                      "nvfp4: offsets must be the int64 [6, E+1] table of a grouped call");
  NVFP4_REFUSE_UNLESS(swizzled.numel() % 512 == 0, "nvfp4: swizzled scales hold whole 512-byte tiles, got ",
                      swizzled.numel(), " bytes");
  // (the kernels load or store the swizzled scales, and pack stores the packed ones, as 32-bit words)
  NVFP4_REFUSE_UNLESS(swizzled.data_ptr() == nullptr || reinterpret_cast<uintptr_t>(swizzled.data_ptr()) % 4 == 0,
                      "nvfp4: swizzled scales must be 4-byte aligned");
  NVFP4_REFUSE_UNLESS(packed.numel() % 4 == 0 &&
                          (packed.data_ptr() == nullptr || reinterpret_cast<uintptr_t>(packed.data_ptr()) % 4 == 0),
                      "nvfp4: packed scales must be 4-byte aligned and a multiple of 4 bytes, got ", packed.numel(),
                      " bytes");
  // (the kernels' index math inside a group runs in 32 bits, layer/packed_scales.cu)
  NVFP4_REFUSE_UNLESS(swizzled.numel() < (int64_t{1} << 32) && packed.numel() < (int64_t{1} << 32),
                      "nvfp4: packed and swizzled scales of 2^32 bytes or more are not supported");
  return {};
}

std::string pack_col_scales_(const Tensor& swizzled, const Tensor& offsets, int64_t E, int64_t K, Tensor packed) {
  NVFP4_RETURN_IF_ERROR(check_packed_scales(packed, swizzled, offsets, E, K));
  const c10::cuda::CUDAGuard guard(swizzled.device());
  nvfp4_layer::launch_pack_col_scales(swizzled.data_ptr<uint8_t>(), swizzled.numel(), offsets.data_ptr<int64_t>(),
                                      static_cast<int>(E), K, packed.data_ptr<uint8_t>(), packed.numel(),
                                      c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

std::string unpack_col_scales_(const Tensor& packed, const Tensor& offsets, int64_t E, int64_t K, Tensor swizzled) {
  NVFP4_RETURN_IF_ERROR(check_packed_scales(packed, swizzled, offsets, E, K));
  const c10::cuda::CUDAGuard guard(swizzled.device());
  nvfp4_layer::launch_unpack_col_scales(packed.data_ptr<uint8_t>(), packed.numel(), offsets.data_ptr<int64_t>(),
                                        static_cast<int>(E), K, swizzled.data_ptr<uint8_t>(), swizzled.numel(),
                                        c10::cuda::getCurrentCUDAStream());
  return nvfp4::launch_status("nvfp4");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("amax_", nvfp4::returning_errors(&amax_), "per-tensor / per-group amax (SPEC 4)");
  m.def("quantize_", nvfp4::returning_errors(&quantize_),
        "fused NVFP4 quantizer into preallocated buffers (SPEC 5-8, 10)");
  m.def("quantize_4over6_", nvfp4::returning_errors(&quantize_4over6_),
        "4over6 NVFP4 quantizer into preallocated buffers (SPEC 5.6)");
  m.def("supplied_amax_", nvfp4::returning_errors(&supplied_amax_),
        "a single tensor's supplied amaxes into its amax buffers (SPEC 4.3)");
  m.def("group_setup_", nvfp4::returning_errors(&group_setup_),
        "device offsets, zeroed or supplied amaxes and tail fill of a grouped call (SPEC 9, 4.3)");
  m.def("swizzle_", nvfp4::returning_errors(&swizzle_), "compact -> swizzled scales (SPEC 8.2)");
  m.def("dequantize_", nvfp4::returning_errors(&dequantize_), "NVFP4 plane -> float32 (SPEC 11)");
  m.def("bias_grad_", nvfp4::returning_errors(&bias_grad_),
        "grouped linear layer's bias gradient, per-group column sums of dY in SPEC 16.4's order");
  m.def("pack_col_scales_", nvfp4::returning_errors(&pack_col_scales_),
        "swizzled grouped columnwise scales -> packed (SPEC 9.5)");
  m.def("unpack_col_scales_", nvfp4::returning_errors(&unpack_col_scales_),
        "packed grouped columnwise scales -> swizzled (SPEC 9.5)");
}
