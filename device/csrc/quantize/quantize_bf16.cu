// Instantiations of the amax and quantize kernels for __nv_bfloat16 input (the only dtype with RHT, SPEC 7).
#include "quantize/general.cuh"
#include "quantize/fast_bf16.cuh"
#include "quantize/launch.h"
#include "common/pdl.cuh"
#include "common/per_device.h"

namespace nvfp4 {

// The grouped fast pass after the setup kernel: its first wave (the CTAs resident beside the setup kernel, occupancy x
// SMs, cached per device and kernel) finds its tiles from the splits and waits for the setup kernel only before its
// atomics (amax_fast_bf16). With more than kSplitScanMaxGroups groups, or no splits, `splits` is cleared and
// every CTA waits at its start and reads the records.
template <bool kRHT, bool kNanProp>
static AmaxArgs with_split_scan(AmaxArgs a) {
  if (a.splits == nullptr || a.E > kSplitScanMaxGroups) {
    a.splits = nullptr;
    return a;
  }
  static PerDevice<int64_t> wave;
  int dev = 0;
  cudaGetDevice(&dev);
  int64_t ctas = wave.get(dev);
  if (ctas == 0) {
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, amax_fast_bf16<kRHT, kNanProp>, 256, 0);
    ctas = (int64_t)sms * per_sm;
    wave.set(dev, ctas);
  }
  a.late_wait_ctas = ctas;
  return a;
}

void launch_amax_bf16(const AmaxArgs& a_in, bool rht, int64_t row_tiles, cudaStream_t s, bool after_setup,
                      QuantizeKernel kernel) {
  AmaxArgs a = a_in;
  a.splits = nullptr;  // only the fast passes after the setup kernel take it (with_split_scan)
  const int64_t grid = row_tiles * amax_k_tiles<__nv_bfloat16>(a.K);
  if (grid == 0) return;
  if (kernel == kQuantizeGeneral) {
    if (a.nan_propagating) {  // the torchao rules (SPEC 4.1)
      if (rht) amax_kernel<__nv_bfloat16, true, true><<<(unsigned)grid, 128, 0, s>>>(a);
      else amax_kernel<__nv_bfloat16, false, true><<<(unsigned)grid, 128, 0, s>>>(a);
    } else {
      if (rht) amax_kernel<__nv_bfloat16, true><<<(unsigned)grid, 128, 0, s>>>(a);
      else amax_kernel<__nv_bfloat16, false><<<(unsigned)grid, 128, 0, s>>>(a);
    }
  } else if (a.nan_propagating) {  // the fast pass, NaN-propagating (with the RHT: no last-stage shortcut)
    auto kernel = rht ? amax_fast_bf16<true, true> : amax_fast_bf16<false, true>;
    if (after_setup)
      launch_chained(kernel, dim3((unsigned)grid), 256, 0, s,
                     rht ? with_split_scan<true, true>(a_in) : with_split_scan<false, true>(a_in));
    else if (a.after_zero) launch_chained(kernel, dim3((unsigned)grid), 256, 0, s, a);
    else kernel<<<(unsigned)grid, 256, 0, s>>>(a);
  } else {  // the fast pass (fast_bf16.cuh)
    auto kernel = rht ? amax_fast_bf16<true> : amax_fast_bf16<false>;
    if (after_setup)  // waits for the setup kernel in-kernel
      launch_chained(kernel, dim3((unsigned)grid), 256, 0, s,
                     rht ? with_split_scan<true, false>(a_in) : with_split_scan<false, false>(a_in));
    else if (a.after_zero) launch_chained(kernel, dim3((unsigned)grid), 256, 0, s, a);  // waits for launch_init_amax
    else kernel<<<(unsigned)grid, 256, 0, s>>>(a);
  }
}

// The fast quantizer's instantiation for the RHT, the rule family and the rounding (SPEC 3.4 under a.sr); 16x16
// blocks have one (rule te, round to nearest, no RHT: check_kernel refuses the others).
using FastQuantizer = void (*)(QuantArgs);
static FastQuantizer fast_quantizer(bool rht, bool torchao, bool sr, bool block2d) {
  constexpr FastQuantizer kernels[2][2][2] = {  // [rht][torchao][sr]
      {{quantize_fast_bf16<false, false, false>, quantize_fast_bf16<false, false, true>},
       {quantize_fast_bf16<false, true, false>, quantize_fast_bf16<false, true, true>}},
      {{quantize_fast_bf16<true, false, false>, quantize_fast_bf16<true, false, true>},
       {quantize_fast_bf16<true, true, false>, quantize_fast_bf16<true, true, true>}}};
  return block2d ? quantize_fast_bf16<false, false, false, true> : kernels[rht][torchao][sr];
}

// 4 CTAs per SM of quantize_fast_bf16 need 4 x 41 KB of static shared memory: ask for the largest carveout, once
// per device (PerDevice).
static void prefer_max_shared_fast() {
  static PerDevice<bool> done;
  int dev = 0;
  cudaGetDevice(&dev);
  if (done.get(dev)) return;
  for (int i = 0; i < 9; ++i)  // bits of i: rht, torchao, sr; i = 8: the 16x16 instantiation
    cudaFuncSetAttribute(fast_quantizer(i & 1, i & 2, i & 4, i == 8), cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
  done.set(dev, true);
}

void launch_quantize_bf16(const QuantArgs& a, bool rht, int64_t row_tiles, cudaStream_t s, bool after_amax,
                          QuantizeKernel kernel) {
  const int64_t grid = row_tiles * quant_k_tiles<__nv_bfloat16>(a.K);
  if (grid == 0) return;
  if (kernel == kQuantizeFastBf16) {
    const FastQuantizer quantizer = fast_quantizer(rht, is_torchao_rule(a.rule), a.sr != 0, a.block2d != 0);
    prefer_max_shared_fast();
    if (after_amax) launch_chained(quantizer, dim3((unsigned)grid), 256, 0, s, a);  // overlaps the amaxes' writer
    else quantizer<<<(unsigned)grid, 256, 0, s>>>(a);
  } else if (is_torchao_rule(a.rule)) {  // SPEC 5.4 / 5.5
    if (rht) quantize_kernel<__nv_bfloat16, true, true><<<(unsigned)grid, 256, 0, s>>>(a);
    else quantize_kernel<__nv_bfloat16, false, true><<<(unsigned)grid, 256, 0, s>>>(a);
  } else if (rht) quantize_kernel<__nv_bfloat16, true><<<(unsigned)grid, 256, 0, s>>>(a);
  else quantize_kernel<__nv_bfloat16, false><<<(unsigned)grid, 256, 0, s>>>(a);
}

}  // namespace nvfp4
