"""Every kernel choice of the device package, in one place: a problem in, a named plan out.

The extensions execute the plan they are given (``csrc/gemm/bindings.cpp``, ``csrc/quantize/bindings.cpp``) and
refuse one they cannot run; they choose nothing themselves. The plan's codes are those of ``csrc/common/codes.h``
(:mod:`device._codes`). A threshold below names the measurement behind it where there is one (``SKINNY_MAX_ROWS``,
``PAIR_MIN_ROWS``, ``WEIGHT_COPY_MIN_ROWS`` and ``WGRAD_COPIES_MIN_ROWS`` name none); docs/performance.md holds the
numbers and docs/design.md the algorithms. :func:`device.testing.force_plan` overrides any part of a plan (tests,
benchmarks); a forced part that cannot run the call raises :class:`ValueError` before anything is launched.

This module imports neither torch nor CUDA: the choices are plain functions of host-known sizes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from oracle.rht import DEFAULT_RHT_SIGNS
from oracle.swizzle import round_up

from ._codes import Algorithm, Epilogue, Loader, QuantizeKernel

__all__ = ["ALGORITHM_TILES", "FORCED", "GemmPlan", "GemmProblem", "QuantizePlan", "fused_fast_algorithm", "pad_ratio",
           "plan_gemm", "plan_quantize", "uneven_rows"]

#: The plan parts that :func:`device.testing.force_plan` forces (``algorithm``, ``loader``, ``epilogue``,
#: ``quantize``: name -> value); empty outside its blocks. Read when a call chooses its plan.
FORCED: dict[str, str] = {}

# ------------------------------------------------------------------------------------------------------------------
# quantize
# ------------------------------------------------------------------------------------------------------------------


# the kernel names as a plain tuple: torch.compile (dynamo 2.11) cannot test membership in an enum's __members__
_QUANTIZE_KERNEL_NAMES = tuple(QuantizeKernel.__members__)


class QuantizePlan(NamedTuple):
    """The kernel families of a quantize call's two passes: the amax pass (SPEC 4) and the quantizer (SPEC 5-8)."""

    amax: QuantizeKernel
    quantize: QuantizeKernel


def fast_bf16_reason(dtype: str, *, rht: bool, rht_signs: int, block2d: bool = False, sr: bool = False,
                     torchao: bool = False, quantizer: bool = True) -> str | None:
    """Why the bf16 fast kernels cannot run a pass (None: they can). They read bf16 only and compile the default RHT
    sign mask in; the quantizer writes 16x16 blocks (SPEC 6.3) under rule "te", rounding to nearest, without the RHT
    only (``torchao``: a torchao rule)."""
    if dtype != "bfloat16":
        return f"the fast kernels read bfloat16 input, not {dtype}"
    if rht and rht_signs != DEFAULT_RHT_SIGNS:
        return f"the fast kernels compile the default RHT sign mask 0x{DEFAULT_RHT_SIGNS:04X} in"
    if quantizer and block2d and (rht or sr or torchao):
        return "the fast quantizer writes 16x16 blocks under rule te, rounding to nearest, without the RHT only"
    return None


def four_over_six_reason(dtype: str, *, rht: bool, sr: bool) -> str | None:
    """Why the 4over6 quantizer cannot run a call (None: it can): it reads bf16 and rounds to nearest, without RHT
    (SPEC 5.6; the oracle refuses RHT and stochastic rounding with 4over6 too)."""
    if dtype != "bfloat16":
        return f"the 4over6 quantizer reads bfloat16 input, not {dtype}"
    if rht or sr:
        return "4over6 rounds to nearest without RHT (SPEC 5.6)"
    return None


@functools.lru_cache(maxsize=256)
def plan_quantize(dtype: str, *, rht: bool, rht_signs: int, block2d: bool, sr: bool, torchao: bool = False,
                  kernel: str | None = None, four_over_six: bool = False) -> QuantizePlan:
    """The kernels of a quantize call on ``dtype`` input (``"bfloat16"``, ``"float16"``, ``"float32"``).

    Each pass runs the bf16 fast kernels where they can (2.1-2.4x faster than the general kernels on the same bytes
    with 1x16 blocks, 1.66-1.69x with 16x16, docs/performance.md), else the general ones. ``kernel``
    (:func:`device.testing.force_plan`'s ``quantize``) forces ``"general"`` or ``"fast_bf16"`` for both passes. A
    4over6 call (``four_over_six``, SPEC 5.6) runs its quantize pass on the 4over6 kernel, the only one that selects
    between two block scales, after the fast amax pass; a forced ``"four_over_six"`` names that plan, any other forced
    kernel cannot run it."""
    if four_over_six:
        why = four_over_six_reason(dtype, rht=rht, sr=sr)
        if why:
            raise ValueError(f"4over6 cannot run this call: {why}")
        if kernel not in (None, "four_over_six"):
            raise ValueError(f"quantize={kernel!r} cannot run a 4over6 call: its quantize pass is 'four_over_six'")
        amax = fast_bf16_reason(dtype, rht=rht, rht_signs=rht_signs, quantizer=False) is None
        return QuantizePlan(QuantizeKernel.fast_bf16 if amax else QuantizeKernel.general, QuantizeKernel.four_over_six)
    if kernel == "four_over_six":
        raise ValueError("quantize='four_over_six' runs 4over6 calls only (four_over_six='mae' or 'mse')")
    if kernel is None:
        amax_fast = fast_bf16_reason(dtype, rht=rht, rht_signs=rht_signs, quantizer=False) is None
        quant_fast = fast_bf16_reason(dtype, rht=rht, rht_signs=rht_signs, block2d=block2d, sr=sr,
                                      torchao=torchao) is None
        return QuantizePlan(QuantizeKernel.fast_bf16 if amax_fast else QuantizeKernel.general,
                            QuantizeKernel.fast_bf16 if quant_fast else QuantizeKernel.general)
    if kernel not in _QUANTIZE_KERNEL_NAMES:
        raise ValueError(f"quantize kernel must be one of {list(_QUANTIZE_KERNEL_NAMES)}, got {kernel!r}")
    if kernel == "fast_bf16":
        why = fast_bf16_reason(dtype, rht=rht, rht_signs=rht_signs, block2d=block2d, sr=sr, torchao=torchao)
        if why:
            raise ValueError(f"quantize='fast_bf16' cannot run this call: {why}")
    return QuantizePlan(QuantizeKernel[kernel], QuantizeKernel[kernel])


# ------------------------------------------------------------------------------------------------------------------
# grouped GEMM
# ------------------------------------------------------------------------------------------------------------------

#: Output tile (rows x columns; a 2-CTA cluster's tile for the pair) of each algorithm, as csrc/gemm/setup.cu's
#: tile_of builds the tile list (a GPU test checks the two agree).
ALGORITHM_TILES = {
    Algorithm.fused_64x256: (64, 256),
    Algorithm.fused_128x256: (128, 256),
    Algorithm.fused_pair_256x256: (256, 256),
    Algorithm.swapped_64x256: (64, 256),
    Algorithm.copies_cutlass: (128, 256),  # (CUTLASS's own tiles; the setup kernel's list is not walked)
    Algorithm.exact_fused: (128, 128),
    Algorithm.exact_copies: (128, 128),
    Algorithm.exact_hybrid: (128, 128),
    Algorithm.sm100_simt: (64, 64),
    Algorithm.sm100_copies: (128, 128),
    Algorithm.swapped_256x128: (256, 128),
}
FAST = (Algorithm.fused_64x256, Algorithm.fused_128x256, Algorithm.fused_pair_256x256, Algorithm.swapped_64x256,
        Algorithm.swapped_256x128, Algorithm.copies_cutlass)
SWAPPED = (Algorithm.swapped_64x256, Algorithm.swapped_256x128)
EXACT = (Algorithm.exact_fused, Algorithm.exact_copies, Algorithm.exact_hybrid)
SM100 = (Algorithm.sm100_copies, Algorithm.sm100_simt)
FUSED_FAST = (Algorithm.fused_64x256, Algorithm.fused_128x256, Algorithm.fused_pair_256x256)
#: the TMA-store epilogue: fp32 (wgrad) in these, bf16 in FUSED_FAST
TMA_STORE_F32 = (Algorithm.fused_128x256, Algorithm.exact_copies)

# --- thresholds (where a measurement is named: the crossover of an A/B on the benchmark shapes; docs/performance.md,
# "Kernel choice") ---
#: fused_64x256 up to this many output rows per group: no tensor work on padding rows of 128-row tiles
SKINNY_MAX_ROWS = 96
#: fused_pair_256x256 from this many output rows per group ...
PAIR_MIN_ROWS = 256
#: ... with a contraction of at least this length (shorter K loops: the 128 x 256 kernel stays faster, E64 wgrad)
PAIR_MIN_CONTRACTION = 1024
#: swapped_64x256 for fprop / dgrad with at most this many rows per group on average (E8 T512 1.98x of grouped_mm
#: against 1.62x for fused_64x256)
SWAPPED_MAX_ROWS = 96
#: swapped_256x128 runs fprop and dgrad from this many rows per group, with a contraction of at least
#: WIDE_SWAPPED_MIN_CONTRACTION, where its TMA loader runs and no weight copy is read (H100, x torch._grouped_mm,
#: swapped_256x128 / the plan without this rule: fprop E8 K4096 N14336 at T2048 1.169 / 0.909 (fused pair), T4096
#: 0.987 / 0.747, T8192 0.968 / 0.778, T16384 0.958 / 0.898 (copies); E8 T16384 K14336 N4096 0.952 / 0.847; E64 K2048
#: N1408 at T16384 0.973 / 0.960 and T32768 0.857 / 0.769; below it, E128 T16384 (128 rows) 1.035 / 1.339. dgrad on
#: the checked TMA loader (_swapped_tma_reason): E8 K4096 N14336 at T4096 0.979 / 0.753, T16384 0.956 / 0.853; the
#: plan's time over swapped_256x128's at T2048 1.287, T8192 1.305, E64 T16384 K2048 N2048 1.030; below it, T1024
#: (128 rows) 0.801)
WIDE_SWAPPED_MIN_ROWS = 256
#: ... (E64 T16384 K1408 N2048: 0.94-1.02 over two rounds against 1.005)
WIDE_SWAPPED_MIN_CONTRACTION = 2048
#: ... or from PAIR_MIN_CONTRACTION where 256-row tiles cover the groups' rows with at least this many times the rows
#: of its 128-token tiles (pad_ratio; H100, x torch._grouped_mm, swapped_256x128 / the plan without this rule, dgrad
#: K2048 N1408 on ragged8 splits: E64 T16384 (ratio 1.28) 0.889 / 0.792 (fused_pair_256x256), T32768 (1.09) 0.840 /
#: 0.775, T65536 (1.06) 0.786 / 0.743 (copies_cutlass), E16 T24576 (1.045) 0.790 / 0.756; balanced 384 rows (1.33)
#: 0.841 / 0.770; fprop K1408 N2048 E64 ragged8 0.930 / 0.826; below it E32 T49152 (1.033) 0.780 / 0.776, E32
#: T65536 (1.028) 0.759 / 0.811, E16 T32768 (1.023) 0.778 / 0.788, balanced 256 rows (1.0) 0.930 / 0.990)
WIDE_SWAPPED_MIN_PAD_RATIO = 1.04
#: the swapped kernels run contractions below this length only (a correctness bound, not a tuning: their cp.async
#: loader steps each copy by 32-bit offsets of up to 96 x the contraction with 64-token tiles, below 2^31 up to 22.3M,
#: and 240 x with 256-token tiles, up to 8.9M)
SWAPPED_MAX_CONTRACTION = {Algorithm.swapped_64x256: 2**24, Algorithm.swapped_256x128: 2**23}
#: fp16 copies of both operands pay when every element is reused by at least this many output rows and columns
#: (H200: copies_cutlass 1.16x faster than fused_pair_256x256 at 1024 rows per group, 0.94x at 512; E8 K4096 N14336)
COPIES_MIN_REUSE = 1024
#: with the weights' fp16 copy given (GemmProblem.b_copy; only the token operand is decoded), fprop / dgrad run over
#: copies from this many rows per group (contraction and output columns >= COPIES_MIN_REUSE)
WEIGHT_COPY_MIN_ROWS = 256
#: exact-mode fprop / dgrad runs over copies from this many rows per group (every dimension >= COPIES_MIN_REUSE)
#: (H200: exact_copies 1.12x faster than exact_hybrid at 512 rows; E8 K4096 N14336 fprop)
EXACT_COPIES_MIN_ROWS = 512
#: exact-mode wgrad runs over copies from this many rows per group (N and K >= COPIES_MIN_REUSE)
#: (H200: exact_copies 1.34x faster than exact_fused at 128 rows; E64 N1408 K2048)
EXACT_WGRAD_COPIES_MIN_ROWS = 128
#: fast wgrad runs over copies (CUTLASS) from this many rows per group when it accumulates into C ...
#: (H200: 1.38x faster than fused_128x256 at 32 rows; E64 N1408 K2048)
WGRAD_COPIES_MIN_ROWS_ACC = 32
#: ... from this many with bf16 output ...
WGRAD_COPIES_MIN_ROWS = 64
#: ... from this many with plain fp32 output (CUTLASS's fp32 epilogue loses to the fused kernel's on short K loops;
#: H200: 1.33x faster at 512 rows, 1.035x at 256 rows of E8 N14336 K4096, where the H100 measured the fused kernel
#: faster at 256 rows of E64 N1408 K2048)
WGRAD_COPIES_MIN_ROWS_F32 = 512
#: ... and with plain bf16 output below WGRAD_COPIES_MIN_ROWS_F32 rows only where N K / (N + K), dW's outputs per
#: decoded element and token, reaches this (H100: the fused kernel ties or wins up to 1024 on E8 T2048, copies win from
#: 1365; H200: copies 1.09x faster at 1024 on E32 T8192, 0.77x at 683; at 834, E64 N1408 K2048, 0.99x at 256 rows
#: and 1.12x at 512) ...
WGRAD_COPIES_MIN_REUSE_BF16 = 1200
#: ... or where it reaches WGRAD_COPIES_MIN_REUSE_BF16_LARGE in a large GEMM: from WGRAD_COPIES_MIN_ROWS_LARGE rows per
#: group and WGRAD_COPIES_MIN_WORK multiply-adds (T N K), which amortize the copies' fixed launches (H200, E64 T16384
#: N1408 K2048, 834 at 256 rows, 4.7e10: the GroupedLinear step 1.443 / 1.461x the BF16 step with copies against
#: 1.483 / 1.484x with the fused wgrad, two pairs in one run; the GEMM alone 1.01-1.04x of the fused kernel's speed.
#: Smaller ones stay fused: E64 T8192, 128 rows, fused 1.07x faster; E32 T8192 N1024 K2048, 683, 1.7e10, 1.08x;
#: E8 T2048 N2048 K2048, 1024, 8.6e9, 1.09x)
WGRAD_COPIES_MIN_REUSE_BF16_LARGE = 800
WGRAD_COPIES_MIN_ROWS_LARGE = 256
WGRAD_COPIES_MIN_WORK = 2**35
#: fast wgrad with plain fp32 output runs on swapped_256x128 (operands exchanged: X's columnwise plane through its fp16
#: copy, dY's rows decoded in registers) from this many tokens per group, with N and K >= COPIES_MIN_REUSE and its TMA
#: loader (H100, x grouped_mm: E8 K4096 N14336 0.730 against copies_cutlass 0.667 at 512 rows; E64 K2048 N1408 0.694
#: against fused_128x256 0.646 at 512, 0.590 against 0.777 at 256) ...
WGRAD_SWAPPED_MIN_ROWS = 512
#: ... with K, dW's columns, at most this many: copies_cutlass decodes dY's plane once into a copy that its GEMM then
#: reads, a pass whose cost per multiply-add falls as 1 / K, where swapped_256x128 decodes dY's rows in registers once
#: per 256 dW columns, a cost per multiply-add that K does not change (H100, x grouped_mm, swapped / copies_cutlass:
#: E8 K4096 N14336 0.956 / 0.866 at 2048 tokens per group, 1.004 / 0.898 at 4096, 0.965 / 0.934 at 8192; K8192 N8192
#: 0.830 / 0.812 at 1024, 0.896 / 0.897 at 2048, and 0.856 / 0.915 in another run; K14336 N4096 0.598 / 0.688 at
#: 512, 0.817 / 0.901 at 2048) ...
WGRAD_SWAPPED_MAX_K = 4096
#: ... and one group's rows of X's fp16 copy (K x ru16(T/E) x 2 bytes) within this many bytes, the largest measured
#: to gain (E8 K4096 N14336, 64 MiB: the 0.965 / 0.934 above, where the gain has fallen: 0.090 over one of the
#: kernel's 16 MiB bands, 0.106 over two, 0.031 over four, each band reading dY's plane again)
WGRAD_SWAPPED_MAX_COPY_BYTES = 2**26
#: CUTLASS's grouped GEMM takes at most this many groups
CUTLASS_MAX_GROUPS = 65535


class GemmProblem(NamedTuple):
    """What the choice of a grouped GEMM's plan depends on; every field is host-known (no group size is).

    ``n`` / ``k`` follow SPEC 12.5's names: fprop ``Y [T, N] = X [T, K] W^T``, dgrad ``dX [T, K] = dY [T, N] W``,
    wgrad ``dW [E, N, K] = dY^T X``. ``b_data_aligned``: b's data buffer is 16-byte aligned.
    ``a_scales_aligned`` / ``b_scales_aligned``: that operand's scale buffer is 16-byte aligned (the fused kernels
    copy scale tiles 16 bytes at a time, and so does the swapped kernel for b's; the decode and sm100_copies read
    any address); :attr:`b_aligned`: both of b's buffers are.
    ``a_data_bytes`` / ``b_data_bytes`` / ``b_scale_bytes``: the sizes of the operand planes' buffers (TMA maps
    over them need at least one row). ``cutlass``: the extension was built with CUTLASS's headers. ``b_copy``: the
    caller gives the weights' fp16 values (fprop, or dgrad with bf16 output), which copies_cutlass reads instead of
    decoding b's plane. ``uneven_rows``: the caller knows the group sizes on the host and they fill 256-row tiles
    unevenly (:func:`uneven_rows`); None: not known, taken from balanced groups of ``tokens // groups`` rows."""

    kind: str
    mode: str
    groups: int
    tokens: int
    n: int
    k: int
    out_dtype: str
    accumulate: bool = False
    bias: bool = False
    b_data_aligned: bool = True
    a_scales_aligned: bool = True
    b_scales_aligned: bool = True
    a_data_bytes: int = 0
    b_data_bytes: int = 0
    b_scale_bytes: int = 0
    cutlass: bool = True
    b_copy: bool = False
    uneven_rows: bool | None = None

    @property
    def b_aligned(self) -> bool:
        """b's data and scale buffers are both 16-byte aligned (TMA boxes over them)."""
        return self.b_data_aligned and self.b_scales_aligned

    @property
    def rows_per_group(self) -> int:
        """Output rows per group on average: tokens for fprop / dgrad, dW's N rows for wgrad."""
        return self.n if self.kind == "wgrad" else self.tokens // self.groups

    @property
    def contraction(self) -> int:
        """The contraction length per group (on average for wgrad, whose K loop runs over the group's tokens)."""
        return {"fprop": self.k, "dgrad": self.n, "wgrad": self.tokens // self.groups}[self.kind]

    @property
    def cols(self) -> int:
        """Output columns: N for fprop, K for dgrad and wgrad."""
        return self.n if self.kind == "fprop" else self.k


class GemmPlan(NamedTuple):
    """A grouped GEMM's named plan: the algorithm, how its operand tiles are loaded, how its output is stored."""

    algorithm: Algorithm
    loader: Loader
    epilogue: Epilogue

    @property
    def tile(self) -> tuple[int, int]:
        """The output tile of the algorithm (rows x columns)."""
        return ALGORITHM_TILES[self.algorithm]

    def __str__(self) -> str:
        return f"{self.algorithm.name} (loader {self.loader.name}, epilogue {self.epilogue.name})"


def _copies_pay(p: GemmProblem) -> bool:
    """Whether fp16 copies of both operand planes pay: every operand element is reused by at least COPIES_MIN_REUSE
    output rows (rows per group) and columns (fprop / dgrad: contraction and output columns; wgrad: N and K)."""
    dims = (p.n, p.k) if p.kind == "wgrad" else (p.contraction, p.cols)
    return p.tokens // p.groups >= COPIES_MIN_REUSE and min(dims) >= COPIES_MIN_REUSE


def pad_ratio(splits: Sequence[int]) -> float:
    """The rows of 256-row tiles over the rows of 128-row tiles that cover groups of these sizes (1.0 without rows):
    sum(ceil(m / 256) 256) / sum(ceil(m / 128) 128)."""
    sizes = [int(m) for m in splits]
    rows_128 = sum(-(-m // 128) for m in sizes) * 128
    return sum(-(-m // 256) for m in sizes) * 256 / rows_128 if rows_128 else 1.0


def uneven_rows(splits: Sequence[int]) -> bool:
    """Whether groups of these sizes fill 256-row tiles unevenly: a pad_ratio of WIDE_SWAPPED_MIN_PAD_RATIO or more
    (GemmProblem.uneven_rows)."""
    return pad_ratio(splits) >= WIDE_SWAPPED_MIN_PAD_RATIO


def _uneven(p: GemmProblem) -> bool:
    """p's uneven_rows, or where the caller did not know the group sizes, that of balanced groups (T // E rows each,
    the last one the rest) below COPIES_MIN_REUSE rows per group. From there the plan without the rule is
    copies_cutlass, which was timed against swapped_256x128 on router-like splits (given by their sizes), not on
    balanced ones."""
    if p.uneven_rows is not None:
        return p.uneven_rows
    rows = p.tokens // p.groups
    return rows < COPIES_MIN_REUSE and uneven_rows([rows] * (p.groups - 1) + [p.tokens - rows * (p.groups - 1)])


def _wide_swapped_pays(p: GemmProblem) -> bool:
    """Whether fprop or dgrad runs on swapped_256x128 (unless copies_cutlass reads a given weight copy:
    _auto_algorithm): from WIDE_SWAPPED_MIN_ROWS rows per group, with its TMA loader, and a contraction of
    WIDE_SWAPPED_MIN_CONTRACTION, or of PAIR_MIN_CONTRACTION where the groups fill 256-row tiles unevenly."""
    return (p.kind != "wgrad" and p.tokens // p.groups >= WIDE_SWAPPED_MIN_ROWS
            and (p.contraction >= WIDE_SWAPPED_MIN_CONTRACTION
                 or (p.contraction >= PAIR_MIN_CONTRACTION and _uneven(p)))
            and _wide_swapped_runs_tma(p))


def _wgrad_swapped_pays(p: GemmProblem) -> bool:
    """Whether fast wgrad runs on swapped_256x128 over exchanged operands: plain fp32 output (no C), from
    WGRAD_SWAPPED_MIN_ROWS tokens per group, N and K >= COPIES_MIN_REUSE, K <= WGRAD_SWAPPED_MAX_K, one group's rows
    of X's fp16 copy within WGRAD_SWAPPED_MAX_COPY_BYTES, with its TMA loader."""
    rows = p.tokens // p.groups
    return (p.kind == "wgrad" and p.out_dtype == "float32" and not p.accumulate
            and rows >= WGRAD_SWAPPED_MIN_ROWS and min(p.n, p.k) >= COPIES_MIN_REUSE
            and p.k <= WGRAD_SWAPPED_MAX_K and p.k * round_up(rows, 16) * 2 <= WGRAD_SWAPPED_MAX_COPY_BYTES
            and _wide_swapped_runs_tma(p))


def _wide_swapped_runs_tma(p: GemmProblem) -> bool:
    """Whether swapped_256x128 can run the call on its TMA loader (the only loader its rows 1b and 2b take)."""
    return (algorithm_unavailable(Algorithm.swapped_256x128, p) is None
            and _swapped_tma_reason(Algorithm.swapped_256x128, p) is None)


def weight_copy_fits(kind: str, mode: str, out_dtype: str) -> bool:
    """Whether a call can read the weights' fp16 copy at all: fast-mode fprop, or dgrad with bf16 output (dgrad reads
    the copy N-contiguous through a bf16-only CUTLASS instantiation)."""
    return mode == "fast" and (kind == "fprop" or (kind == "dgrad" and out_dtype == "bfloat16"))


def _weight_copy_pays(p: GemmProblem) -> bool:
    """Whether fprop / dgrad run over the given weight copy (GemmProblem.b_copy): only the token operand is decoded,
    a pass that every output column reuses, so from fewer rows per group than with both copies."""
    return (p.b_copy and weight_copy_fits(p.kind, p.mode, p.out_dtype)
            and p.tokens // p.groups >= WEIGHT_COPY_MIN_ROWS and min(p.contraction, p.cols) >= COPIES_MIN_REUSE)


def weight_copy_read(kind: str, groups: int, tokens: int, n: int, k: int, *, bias: bool, cutlass: bool) -> bool:
    """Whether a fast fprop / dgrad with bf16 output, given the weights' fp16 copy, would read it: its plan by the
    sizes is copies_cutlass (GroupedLinear makes the copy only then)."""
    p = GemmProblem(kind=kind, mode="fast", groups=groups, tokens=tokens, n=n, k=k, out_dtype="bfloat16", bias=bias,
                    cutlass=cutlass, b_copy=True)
    return weight_copy_fits(kind, "fast", "bfloat16") and _auto_algorithm(p) == Algorithm.copies_cutlass


def _wgrad_copies_pay(p: GemmProblem) -> bool:
    """Whether fast wgrad runs over fp16 copies of both columnwise planes: the copies cost one pass over the two
    activation planes, which every one of dW's N x K outputs reuses, so they pay from few rows per group when N and K
    are large."""
    n, k, rows = p.n, p.k, p.tokens // p.groups
    if min(n, k) < COPIES_MIN_REUSE:
        return False
    f32 = p.out_dtype == "float32"
    if not f32 and not p.accumulate and rows < WGRAD_COPIES_MIN_ROWS_F32:
        large = rows >= WGRAD_COPIES_MIN_ROWS_LARGE and p.tokens * n * k >= WGRAD_COPIES_MIN_WORK
        if n * k < (WGRAD_COPIES_MIN_REUSE_BF16_LARGE if large else WGRAD_COPIES_MIN_REUSE_BF16) * (n + k):
            return False
    if p.accumulate:
        return rows >= WGRAD_COPIES_MIN_ROWS_ACC
    return rows >= (WGRAD_COPIES_MIN_ROWS_F32 if f32 else WGRAD_COPIES_MIN_ROWS)


def _exact_copies_pay(p: GemmProblem) -> bool:
    """Whether exact mode runs over fp16 copies of both planes: fprop / dgrad from EXACT_COPIES_MIN_ROWS rows per
    group, wgrad from EXACT_WGRAD_COPIES_MIN_ROWS (its operand elements are reused by the N and K output dimensions),
    with every reusing dimension at least COPIES_MIN_REUSE (the exact kernels' K loop is slower than the fast
    kernels', so the copies pay earlier than in fast mode)."""
    rows = p.tokens // p.groups
    if p.kind == "wgrad":
        return rows >= EXACT_WGRAD_COPIES_MIN_ROWS and min(p.n, p.k) >= COPIES_MIN_REUSE
    return rows >= EXACT_COPIES_MIN_ROWS and min(p.contraction, p.cols) >= COPIES_MIN_REUSE


def fused_fast_algorithm(p: GemmProblem) -> Algorithm:
    """The fused fast kernel for these sizes (the fast plan where neither the swapped kernel nor the copies run):
    2-CTA pairs for large groups with long K loops, 64-row tiles for few rows per group, 128 x 256 otherwise."""
    rows, contraction = p.rows_per_group, p.contraction
    if rows >= PAIR_MIN_ROWS and contraction >= PAIR_MIN_CONTRACTION:
        return Algorithm.fused_pair_256x256
    if rows <= SKINNY_MAX_ROWS:
        return Algorithm.fused_64x256
    return Algorithm.fused_128x256


def algorithm_unavailable(a: Algorithm, p: GemmProblem) -> str | None:
    """Why algorithm ``a`` cannot run problem ``p`` (None: it can)."""
    mode = "fast" if a in FAST else ("exact" if a in EXACT else "sm100")
    if mode != p.mode:
        return f"{a.name} is {'an' if mode == 'exact' else 'a'} {mode}-mode algorithm, the call is mode={p.mode!r}"
    if a in FUSED_FAST or a == Algorithm.exact_fused:
        if not (p.a_scales_aligned and p.b_scales_aligned):
            return "it copies the scale tiles 16 bytes at a time: both scale buffers must be 16-byte aligned"
    if a in SWAPPED:
        if p.kind == "wgrad":  # (swapped_256x128 over exchanged operands: dY's plane is the one decoded in registers)
            if a == Algorithm.swapped_64x256:
                return "it runs fprop and dgrad only"
            if not p.a_scales_aligned:
                return "it copies a's scale tiles 16 bytes at a time: a's scale buffer must be 16-byte aligned"
            # (the longest group contraction dY's buffer can hold: its bytes per N row, times 2, as the binding bounds
            # it)
            longest = max(p.tokens, 2 * p.a_data_bytes // p.n if p.n else 0)
            if longest >= SWAPPED_MAX_CONTRACTION[a]:
                return (f"it runs wgrad on fewer than {SWAPPED_MAX_CONTRACTION[a]} tokens only (dY's buffer holds "
                        f"{longest} per feature)")
            return None
        if not p.b_scales_aligned:
            return "it copies b's scale tiles 16 bytes at a time: b's scale buffer must be 16-byte aligned"
        if p.contraction >= SWAPPED_MAX_CONTRACTION[a]:
            return f"it runs contractions below {SWAPPED_MAX_CONTRACTION[a]} only, got {p.contraction}"
    if a == Algorithm.copies_cutlass:
        if not p.cutlass:
            return "the extension was built without CUTLASS's headers (install nvidia-cutlass, then rebuild)"
        if p.bias and (p.out_dtype != "bfloat16" or (p.kind == "dgrad" and p.b_copy)):
            return "its bias epilogue writes bf16 output over a K-major B (not dgrad over the weights' copy)"
        if p.cols % (8 if p.out_dtype == "bfloat16" else 4):
            return f"its output rows must be 16-byte aligned ({p.cols} columns of {p.out_dtype})"
        if p.groups > CUTLASS_MAX_GROUPS:
            return f"it supports at most {CUTLASS_MAX_GROUPS} groups, got {p.groups}"
    if a == Algorithm.exact_hybrid:
        if p.kind == "wgrad":
            return "it runs fprop and dgrad only (wgrad's columnwise B rows have a pitch per group)"
        if p.contraction % 32:
            return f"it needs a contraction that is a multiple of 32, got {p.contraction}"
        if not p.b_aligned:
            return "it needs b's data and scale buffers 16-byte aligned"
    return None


def _auto_algorithm(p: GemmProblem) -> Algorithm:
    if p.mode == "sm100":
        return Algorithm.sm100_copies
    if p.mode == "exact":
        if _exact_copies_pay(p):
            return Algorithm.exact_copies
        if algorithm_unavailable(Algorithm.exact_hybrid, p) is None:
            return Algorithm.exact_hybrid
        if algorithm_unavailable(Algorithm.exact_fused, p) is None:
            return Algorithm.exact_fused
        return Algorithm.exact_copies  # (scale buffers not 16-byte aligned: the copies read any address)
    if (p.kind != "wgrad" and p.tokens // p.groups <= SWAPPED_MAX_ROWS
            and algorithm_unavailable(Algorithm.swapped_64x256, p) is None):
        return Algorithm.swapped_64x256
    copies = algorithm_unavailable(Algorithm.copies_cutlass, p)
    weight_copy_read = copies is None and _weight_copy_pays(p)
    if not weight_copy_read and (_wide_swapped_pays(p) or _wgrad_swapped_pays(p)):
        return Algorithm.swapped_256x128
    if weight_copy_read or (copies is None and (_wgrad_copies_pay(p) if p.kind == "wgrad" else _copies_pay(p))):
        return Algorithm.copies_cutlass
    fused = fused_fast_algorithm(p)
    why = algorithm_unavailable(fused, p)
    if why is None:
        return fused
    if copies is None:  # (scale buffers not 16-byte aligned: the copies read any address)
        return Algorithm.copies_cutlass
    # (only a's scale buffer off 16-byte alignment and the copies unavailable: swapped_64x256 reads a's plane
    # through its fp16 copy and only b's scale tiles by cp.async, so it runs any row count, slower past 96 rows)
    swapped = algorithm_unavailable(Algorithm.swapped_64x256, p) if p.kind != "wgrad" else "it runs fprop / dgrad"
    if swapped is None:
        return Algorithm.swapped_64x256
    raise ValueError(f"no fast-mode algorithm can run this call: {fused.name}: {why}; copies_cutlass: {copies}; "
                     f"swapped_64x256: {swapped}")


def _swapped_tma_reason(a: Algorithm, p: GemmProblem) -> str | None:
    """Why swapped kernel ``a``'s TMA loader cannot run (None: it can). Its boxes are whole 16-byte rows of the token
    copy and the weight plane through one map each. dgrad's weight groups after a group that disagrees with N (SPEC
    12.5) need not start on a whole row of that map: swapped_256x128 checks each tile's group and copies such a
    group's weight rows by cp.async; swapped_64x256 runs dgrad on its cp.async loader (where every group agrees, the
    one map measured no faster there: H200, E8 T512 dgrad 1.489x of grouped_mm against 1.527x)."""
    if p.kind == "wgrad":  # (one token map per group, built on the device; the weight rows by cp.async)
        if not p.a_scales_aligned:
            return "it needs a's scale buffer 16-byte aligned"
        return None if p.tokens > 0 else "its tensor maps need at least one token"
    pitch = p.contraction // 2  # packed bytes per weight row
    if p.kind == "dgrad" and a == Algorithm.swapped_64x256:
        return ("swapped_64x256's dgrad weight groups need not start on a whole row of one tensor map (its cp.async "
                "loader reads them)")
    if p.contraction % 32:
        return f"it needs a contraction that is a multiple of 32, got {p.contraction}"
    if not p.b_aligned:
        return "it needs b's data and scale buffers 16-byte aligned"
    rows = (p.a_data_bytes // 8 * 8 // pitch, p.b_data_bytes // 8 * 8 // pitch, p.b_scale_bytes // 128 // 4)
    if min(rows) < 1 or max(rows) >= 2**31:
        return "its tensor maps need between one row and 2^31 rows of each plane"
    return None


def loader_unavailable(a: Algorithm, loader: Loader, p: GemmProblem) -> str | None:
    """Why ``a`` cannot load its operands with ``loader`` (None: it can)."""
    if a in SWAPPED:
        return _swapped_tma_reason(a, p) if loader == Loader.tma else None
    has = {Algorithm.exact_copies: (Loader.tma, Loader.cp_async), Algorithm.exact_hybrid: (Loader.tma,),
           Algorithm.copies_cutlass: (Loader.tma,), Algorithm.sm100_simt: (Loader.loads,),
           Algorithm.sm100_copies: (Loader.tma,)}.get(a, (Loader.cp_async,))
    return None if loader in has else f"{a.name} has the loader(s) {[x.name for x in has]} only"


def epilogue_unavailable(a: Algorithm, epilogue: Epilogue, p: GemmProblem) -> str | None:
    """Why ``a`` cannot store its output with ``epilogue`` (None: it can). The TMA store writes boxes through a
    tensor map of the output: fp32 wgrad without C and bias (fused_128x256, exact_copies; row pitch K a multiple of 4)
    and bf16 output (the fused fast kernels; row pitch a multiple of 8, fewer than 2^31 map rows)."""
    own = {Algorithm.swapped_64x256: Epilogue.direct, Algorithm.swapped_256x128: Epilogue.direct,
           Algorithm.copies_cutlass: Epilogue.cutlass,
           Algorithm.sm100_simt: Epilogue.direct, Algorithm.sm100_copies: Epilogue.direct}
    if a in own:
        return None if epilogue == own[a] else f"{a.name} has the {own[a].name} epilogue only"
    if epilogue == Epilogue.staged:
        return None
    if epilogue != Epilogue.tma_store:
        if a in FUSED_FAST or a in TMA_STORE_F32:
            return f"{a.name} has the staged and tma_store epilogues only"
        return f"{a.name} has the staged epilogue only"  # (exact_fused, exact_hybrid: no TMA store applies)
    if p.out_dtype == "float32":
        if a not in TMA_STORE_F32:
            return "the fp32 TMA store runs in fused_128x256 and exact_copies only"
        if p.kind != "wgrad" or p.accumulate or p.bias:
            return "the fp32 TMA store writes wgrad's output without C and bias only"
        if p.k % 4:
            return f"it needs a row pitch of a multiple of 16 bytes, got {p.k} fp32 columns"
        return None
    if a not in FUSED_FAST:
        return "the bf16 TMA store runs in the fused fast kernels only"
    if p.accumulate:  # (device.grouped_gemm accumulates into fp32 only; the C++ map encoder refuses a C here too)
        return "the bf16 TMA store writes no C"
    map_rows = p.groups * p.n if p.kind == "wgrad" else p.tokens
    if p.cols % 8:
        return f"it needs a row pitch of a multiple of 16 bytes, got {p.cols} bf16 columns"
    if map_rows >= 2**31:
        return "its map of the output has 2^31 rows or more"
    return None


def _forced(part: str, name: str, codes, unavailable):
    """The member of ``codes`` named ``name``, which ``unavailable(member)`` must find no reason against; raises
    ValueError naming the plan ``part`` otherwise."""
    if name not in codes.__members__:
        raise ValueError(f"{part} must be one of {list(codes.__members__)}, got {name!r}")
    why = unavailable(codes[name])
    if why:
        raise ValueError(f"{part}={name!r} cannot run this call: {why}")
    return codes[name]


def plan_gemm(p: GemmProblem, *, algorithm: str | None = None, loader: str | None = None,
              epilogue: str | None = None) -> GemmPlan:
    """The plan of a grouped GEMM: chosen by the sizes (the rules above), or with parts forced by name
    (:func:`device.testing.force_plan`); a forced part that cannot run ``p`` raises :class:`ValueError`.

    Loader and epilogue, unless forced: TMA where the algorithm has it and the call allows it, else cp.async; the TMA
    store where it applies, else the algorithm's staged (or only) epilogue. Plans are cached per problem (a training
    step asks for the same few again and again; the choice costs ~20 us of Python, the cached one ~1 us)."""
    return _plan_gemm(p, algorithm, loader, epilogue)


@functools.lru_cache(maxsize=4096)
def _plan_gemm(p: GemmProblem, algorithm: str | None, loader: str | None, epilogue: str | None) -> GemmPlan:
    a = _auto_algorithm(p) if algorithm is None else _forced("algorithm", algorithm, Algorithm,
                                                            lambda x: algorithm_unavailable(x, p))
    if loader is None:
        ld = next(x for x in (Loader.tma, Loader.cp_async, Loader.loads) if loader_unavailable(a, x, p) is None)
    else:
        ld = _forced("loader", loader, Loader, lambda x: loader_unavailable(a, x, p))
    if epilogue is None:
        ep = next(e for e in (Epilogue.tma_store, Epilogue.staged, Epilogue.direct, Epilogue.cutlass)
                  if epilogue_unavailable(a, e, p) is None)
    else:
        ep = _forced("epilogue", epilogue, Epilogue, lambda x: epilogue_unavailable(a, x, p))
    return GemmPlan(a, ld, ep)
