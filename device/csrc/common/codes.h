// The integer codes that the Python side hands to the extensions. This file is their one definition: device/_codes.py
// reads the enums below from it, so each enumerator stands on a line of its own as
//     kName = <value>,  // "<python name>": what it is
// and the Python side knows the enumerator by the quoted name.
#pragma once

namespace nvfp4 {

// The scale rules (SPEC 5): which S_enc, block scale and amax semantics a plane is quantized under.
enum Rule : int {
  kRuleTE = 0,              // "te": SPEC 5.1, 5.2, TransformerEngine's rule
  kRuleTEFusedRHT = 1,      // "te_fused_rht": SPEC 5.3, TE's fused-RHT kernel (the columnwise amax from the RHT)
  kRuleTorchao = 2,         // "torchao": SPEC 5.4, torchao's per-tensor scale P = amax / 2688
  kRuleTorchaoNoScale = 3,  // "torchao_noscale": SPEC 5.5, torchao without a per-tensor scale
};

// The layout of a plane's scale bytes (SPEC 8).
enum ScaleLayout : int {
  kCompact = 0,        // "compact": row-major [rows, K / 16] (single tensors)
  kPaddedCompact = 1,  // "padded_compact": the compact form with its padding (SPEC 8.1; the grouped buffers', 9.2)
  kSwizzled = 2,       // "swizzled": cuBLAS's 128 x 4 tiles, zero padded (SPEC 8.2)
};

// The kernel family that runs an amax or quantize pass (device/_dispatch.py plan_quantize chooses it).
enum QuantizeKernel : int {
  kQuantizeGeneral = 0,  // "general": quantize/general.cuh, every dtype and option
  kQuantizeFastBf16 = 1,  // "fast_bf16": quantize/fast_bf16.cuh, bf16, default RHT signs (quantize: RN, 1x16 too)
  kQuantizeFourOverSix = 2,  // "four_over_six": quantize/four_over_six.cuh, the 4over6 quantizer (SPEC 5.6; bf16)
};

}  // namespace nvfp4

namespace nvfp4_gemm {

// The three GEMMs of a linear layer (SPEC 12.5).
enum Kind : int {
  kFprop = 0,  // "fprop": Y_g = X_g W_g^T
  kDgrad = 1,  // "dgrad": dX_g = dY_g W_g
  kWgrad = 2,  // "wgrad": dW_g = dY_g^T X_g
};

// The grouped GEMM's algorithms (device/_dispatch.py chooses one per call; gemm/README.md says what each does). A new
// last code moves gemm/bindings.cpp check_plan's bound.
enum Algorithm : int {
  kFused64x256 = 0,       // "fused_64x256": fast, operands decoded in the K loop, 64 x 256 tiles
  kFused128x256 = 1,      // "fused_128x256": fast, the same kernel with 128 x 256 tiles
  kFusedPair256x256 = 2,  // "fused_pair_256x256": fast, 2-CTA clusters sharing the B decode, 256 x 256 cluster tiles
  kSwapped64x256 = 3,     // "swapped_64x256": fast, weights as wgmma's register operand, tokens from an fp16 copy
  kCopiesCutlass = 4,     // "copies_cutlass": fast, fp16 copies of both planes, then CUTLASS's grouped GEMM
  kExactFused = 5,        // "exact_fused": exact, operands decoded in the K loop, 128 x 128 tiles
  kExactCopies = 6,       // "exact_copies": exact, over fp16 copies of both planes
  kExactHybrid = 7,       // "exact_hybrid": exact, an fp16 copy of A, B decoded in the K loop
  kSm100Simt = 8,         // "sm100_simt": mode sm100, SPEC 12.7's k64 steps in integer arithmetic, 64 x 64 tiles
  kSm100Copies = 9,       // "sm100_copies": mode sm100 on the tensor cores, over fp16 copies of both planes
  kSwapped256x128 = 10,   // "swapped_256x128": swapped_64x256's kernel with 256 tokens x 128 weight rows per tile
};

// How an algorithm's operand tiles reach shared memory.
enum Loader : int {
  kLoaderCpAsync = 0,  // "cp_async": per-thread cp.async copies (any alignment)
  kLoaderTma = 1,      // "tma": TMA boxes issued by one thread (16-byte aligned rows)
  kLoaderLoads = 2,    // "loads": ordinary per-thread loads, decoded into shared memory (sm100_simt; any alignment)
};

// How an algorithm's output tiles reach global memory.
enum Epilogue : int {
  kEpilogueStaged = 0,    // "staged": through a shared-memory buffer per warp (fp32 whole lines, bf16 bulk copies)
  kEpilogueTmaStore = 1,  // "tma_store": TMA store boxes through a tensor map of the output
  kEpilogueDirect = 2,    // "direct": register fragments stored straight to global memory (swapped_64x256)
  kEpilogueCutlass = 3,   // "cutlass": CUTLASS's epilogue (copies_cutlass)
};

}  // namespace nvfp4_gemm
