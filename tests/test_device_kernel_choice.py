"""The device GEMM's plan choice (device/_dispatch.py ``plan_gemm``), on the host: no GPU and no torch needed.

The expected plans are the decisions measured on the H100 on the benchmark shapes (x of torch._grouped_mm, or
TFLOP/s, in the comments; benchmarks/bench_grouped_gemm.py and tools/ab/ab_plans.py time the alternatives), not values
read off the functions. docs/design.md describes the algorithms, loaders and epilogues.
"""

from __future__ import annotations

import pytest

from device import _dispatch
from device._codes import Algorithm, Epilogue, Loader
from device._dispatch import ALGORITHM_TILES, GemmPlan, GemmProblem, fused_fast_algorithm, plan_gemm


def _ru(v: int, q: int) -> int:
    return -(-v // q) * q


def problem(kind: str, e: int, t: int, n: int, k: int, *, mode: str = "fast", out_dtype: str | None = None,
            accumulate: bool = False, bias: bool = False, b_aligned: bool = True, cutlass: bool = True,
            sized: bool = True, a_scales_aligned: bool = True, b_scales_aligned: bool = True) -> GemmProblem:
    """The GemmProblem device.grouped_gemm builds for E groups over T tokens (SPEC 12.5's N and K), with operand buffers
    as device.group_quantize allocates them (SPEC 9.3's worst-case capacities; ``sized=False``: empty buffers). The
    output dtype defaults to grouped_gemm's: bf16 for fprop / dgrad, fp32 for wgrad."""
    if out_dtype is None:
        out_dtype = "float32" if kind == "wgrad" else "bfloat16"
    a_bytes = b_bytes = b_scale_bytes = 0
    if sized:
        # SPEC 9.3: rowwise [rows, cols] data rows * cols / 2, scales 128 W(128) roundup(cols / 16, 4); columnwise
        # data cols * 16 W(16) / 2, scales roundup(cols, 128) 4 W(64); W(q) = E + max(rows - E, 0) // q
        def w(rows: int, q: int) -> int:
            return e + max(rows - e, 0) // q

        if kind == "fprop":  # a: X [T, K] rowwise; b: W [E N, K] rowwise
            a_bytes, b_bytes = t * k // 2, e * n * k // 2
            b_scale_bytes = 128 * w(e * n, 128) * _ru(k // 16, 4)
        elif kind == "dgrad":  # a: dY [T, N] rowwise; b: W [E N, K] columnwise
            a_bytes, b_bytes = t * n // 2, k * 16 * w(e * n, 16) // 2
            b_scale_bytes = _ru(k, 128) * 4 * w(e * n, 64)
        else:  # a: dY [T, N], b: X [T, K], both columnwise
            a_bytes, b_bytes = n * 16 * w(t, 16) // 2, k * 16 * w(t, 16) // 2
            b_scale_bytes = _ru(k, 128) * 4 * w(t, 64)
    return GemmProblem(kind=kind, mode=mode, groups=e, tokens=t, n=n, k=k, out_dtype=out_dtype, accumulate=accumulate,
                       bias=bias, b_data_aligned=b_aligned, a_scales_aligned=a_scales_aligned,
                       b_scales_aligned=b_scales_aligned, a_data_bytes=a_bytes, b_data_bytes=b_bytes,
                       b_scale_bytes=b_scale_bytes, cutlass=cutlass)


def plan(algorithm: str, loader: str, epilogue: str) -> GemmPlan:
    return GemmPlan(Algorithm[algorithm], Loader[loader], Epilogue[epilogue])


COPIES = plan("copies_cutlass", "tma", "cutlass")
WIDE = plan("swapped_256x128", "tma", "direct")

# (kind, E, T, N, K) of the benchmark shapes (SPEC 12.5's names: fprop Y [T, N] = X [T, K] W^T, wgrad dW [E, N, K])
E8_FPROP = ("fprop", 8, 16384, 14336, 4096)
E8_WGRAD = ("wgrad", 8, 16384, 14336, 4096)
E64_FPROP = ("fprop", 64, 16384, 1408, 2048)
E64_DGRAD = ("dgrad", 64, 16384, 1408, 2048)
E64_WGRAD = ("wgrad", 64, 16384, 1408, 2048)
E8_T512_WGRAD = ("wgrad", 8, 512, 14336, 4096)


# fp16 copies of both operands (copies_cutlass in fast mode, exact_copies in exact mode) on the benchmark shapes, and
# what runs where they do not pay.
@pytest.mark.parametrize("shape,fast,exact", [
    # 2048 rows per group, the copies pay in exact mode (0.33-0.36x -> 0.44-0.50x of grouped_mm, with TMA
    # 0.51-0.56x); fast fprop and dgrad run on swapped_256x128 (0.958x / 0.956x of grouped_mm against 0.898x / 0.853x
    # over the copies)
    (E8_FPROP, WIDE, plan("exact_copies", "tma", "staged")),
    (("dgrad", 8, 16384, 14336, 4096), WIDE, plan("exact_copies", "tma", "staged")),
    # (exact fp32 wgrad stores by TMA: 0.47-0.50x -> 0.59x on E64, the same epilogue here)
    # (fast fp32 wgrad: swapped_256x128 over exchanged operands, row 2b: 0.958x of grouped_mm against 0.870x over the
    # copies)
    (E8_WGRAD, WIDE, plan("exact_copies", "tma", "tma_store")),
    # 256 rows per group: no copies of both (exact over copies: 0.43x vs 0.49x fused; the hybrid kernel, A copied
    # only, 0.47 -> 0.50x); fast dgrad: the 2-CTA pair 0.846 against 0.767 for the 128 x 256 kernel, its bf16 output
    # by TMA boxes; fast fprop (contraction K = 2048) runs on swapped_256x128 (test_wide_swapped_decisions)
    (E64_DGRAD, plan("fused_pair_256x256", "cp_async", "tma_store"), plan("exact_hybrid", "tma", "staged")),
    (E64_FPROP, WIDE, plan("exact_hybrid", "tma", "staged")),
    # exact over copies with TMA 0.49x vs fused 0.44x, its fp32 output by TMA stores 0.47-0.50x -> 0.59x; fast: no
    # copies (0.51 / 0.59, the wgrad table below), the 128 x 256 kernel on the 256-long K loops (213-218 TFLOP/s
    # against 190-203 for the pair), its fp32 output by TMA stores 0.61 -> 0.75x
    (E64_WGRAD, plan("fused_128x256", "cp_async", "tma_store"), plan("exact_copies", "tma", "tma_store")),
    # 64 rows per group: exact mode keeps the fused kernel (fast wgrad: below)
    (E8_T512_WGRAD, plan("fused_128x256", "cp_async", "tma_store"), plan("exact_fused", "cp_async", "staged")),
])
def test_copies_choice(shape, fast, exact):
    assert plan_gemm(problem(*shape)) == fast
    assert plan_gemm(problem(*shape, mode="exact")) == exact


# Fast-mode wgrad over fp16 copies or fused: (E, T, N, K, output, accumulate, copies chosen), each the faster of the two
# in the fast-kernel A/B on the H100 (x of grouped_mm: copies / fused; bf16 rows: with the fused kernels' bf16 output by
# TMA boxes; a tie goes to the fused kernel, which needs no scratch). Where the copies lose, the fused kernel runs with
# 128 x 256 tiles (every contraction here is below 1024: the pair loses on short K loops) and its output by TMA (fp32
# without C; bf16), or staged when C is read back.
@pytest.mark.parametrize("e,t,n,k,dtype,acc,copies", [
    (64, 16384, 1408, 2048, "f32", False, False),   # 0.51 / 0.59
    (64, 16384, 1408, 2048, "bf16", False, True),   # 0.765 / 0.760; H200 0.783 / 0.772, the layer step 1.02x (large)
    (64, 8192, 1408, 2048, "bf16", False, False),   # 0.819 / 0.833
    (64, 16384, 1408, 2048, "f32", True, True),     # 0.36 / 0.25
    (64, 4096, 1408, 2048, "f32", True, True),      # 64 rows per group: 0.30 / 0.19
    (64, 4096, 1408, 2048, "bf16", False, False),   # 0.860 / 0.895 (staged bf16 epilogue: 0.86 / 0.68)
    (8, 2048, 2048, 2048, "bf16", False, False),    # 0.584 / 0.694 (N K / (N + K) = 1024)
    (32, 8192, 4096, 2048, "bf16", False, True),    # 0.823 / 0.679 (1365)
    (64, 16384, 2048, 7168, "bf16", False, True),   # 0.886 / 0.679 (1593)
    (16, 4096, 4096, 4096, "bf16", False, True),    # 0.864 / 0.670 (2048)
    (8, 512, 14336, 4096, "bf16", False, True),     # 0.942 / 0.850 (3186; staged bf16 epilogue: 0.94 / 0.64)
    (8, 1024, 14336, 4096, "f32", False, False),    # 0.47 / 0.55
    (8, 2048, 14336, 4096, "f32", False, False),    # 0.53 / 0.55 (256 tokens per group)
    (8, 4096, 14336, 4096, "f32", False, "swapped"),  # 0.66 / 0.55; swapped_256x128 0.730 against copies 0.667
    (8, 4096, 14336, 4096, "f32", True, True),      # 0.42 / 0.28
    (32, 16384, 1408, 2048, "f32", False, "swapped"),  # 0.63 / 0.60 (512 rows; swapped_256x128 not timed at E32)
    # X's copy 32 MiB: swapped_256x128 0.762 against copies 0.819 in one run, 0.707 against 0.670 in another (each
    # plan's rounds spread over 440-627 TFLOP/s: one 4096 x 4096 output, 512 tiles, under 4 waves)
    (1, 4096, 4096, 4096, "f32", False, "swapped"),
    (8, 16384, 14336, 4096, "f32", False, "swapped"),  # swapped_256x128 0.958 / 0.956 against copies 0.870 / 0.866
    (8, 8192, 14336, 4096, "f32", False, "swapped"),   # 0.896 against 0.789
    (64, 65536, 1408, 2048, "f32", False, "swapped"),  # 0.794 against 0.686 (1024 rows per group)
    (64, 32768, 1408, 2048, "f32", False, "swapped"),  # 0.694 against fused 0.646, copies 0.528 (512 rows)
    # K past row 2b's 4096: copies / swapped_256x128
    (8, 4096, 4096, 14336, "f32", False, True),     # K14336, X's copy of a group 14 MiB: 0.688 / 0.598
    (8, 8192, 4096, 14336, "f32", False, True),     # 28 MiB: 0.802 / 0.693
    (8, 16384, 4096, 14336, "f32", False, True),    # 56 MiB: 0.909 / 0.827, 0.901 / 0.817
    (8, 8192, 8192, 8192, "f32", False, True),      # K8192, 16 MiB: 0.812 / 0.830, swapped 2% faster here
    (8, 16384, 8192, 8192, "f32", False, True),     # 32 MiB: 0.915 / 0.856, 0.897 / 0.896
    # K4096 past 16 MiB: swapped_256x128 / copies up to row 2b's 64 MiB
    (8, 32768, 14336, 4096, "f32", False, "swapped"),  # 32 MiB: 1.004 / 0.898, 0.923 / 0.894
    (8, 65536, 14336, 4096, "f32", False, "swapped"),  # 64 MiB: 0.965 / 0.934
    (8, 131072, 14336, 4096, "f32", False, True),   # 128 MiB, past the bound (not measured)
    (8, 16384, 14336, 4096, "bf16", False, True),   # bf16: the copies
    (8, 16384, 14336, 4096, "f32", True, True),     # with C: the copies
    (8, 4096, 512, 4096, "bf16", False, False),     # N below 1024: not measured, the fused kernel stays
    (64, 2048, 1408, 2048, "bf16", False, False),   # 32 rows per group: not measured
])
def test_wgrad_fast_choice(e, t, n, k, dtype, acc, copies):
    p = problem("wgrad", e, t, n, k, out_dtype="float32" if dtype == "f32" else "bfloat16", accumulate=acc)
    got = plan_gemm(p)
    if copies == "swapped":  # (fp32 without C from WGRAD_SWAPPED_MIN_ROWS tokens per group)
        assert got == WIDE
    elif copies:
        assert got == COPIES
    else:
        assert got == plan("fused_128x256", "cp_async", "staged" if acc else "tma_store")
    # without CUTLASS's headers in the build the fused kernel runs where the copies would (swapped_256x128 needs no
    # CUTLASS), and forcing them raises
    no_cutlass = problem("wgrad", e, t, n, k, out_dtype=p.out_dtype, accumulate=acc, cutlass=False)
    assert plan_gemm(no_cutlass).algorithm in _dispatch.FUSED_FAST + (Algorithm.swapped_256x128,)
    if not copies or copies == "swapped":
        assert plan_gemm(no_cutlass) == got
    with pytest.raises(ValueError, match="without CUTLASS's headers"):
        plan_gemm(no_cutlass, algorithm="copies_cutlass")


# The fast algorithm for fprop / dgrad by rows per group (plans as measured; bf16 output, no bias unless said).
@pytest.mark.parametrize("shape,kw,algorithm", [
    # E8 T512 (64 rows per group): the swapped kernel, 1.85x of grouped_mm against 1.61x for the 64 x 256 fused kernel
    (("fprop", 8, 512, 14336, 4096), {}, "swapped_64x256"),
    (("dgrad", 8, 512, 14336, 4096), {}, "swapped_64x256"),  # (E8 T512 dgrad 1.84-1.87x)
    (("fprop", 8, 256, 14336, 4096), {}, "swapped_64x256"),  # E8 T256: 1.89x against 1.61x
    # E64 T16384 (256 rows per group): the 2-CTA pair, fprop 0.881 / 0.882 and dgrad 0.846 / 0.880 of grouped_mm
    # against 0.795 / 0.784 and 0.767 / 0.809 for the 128 x 256 kernel; fprop with K = 2048 runs on swapped_256x128
    # (0.973 against 0.960), with K = 1408 keeps the pair (the contraction below WIDE_SWAPPED_MIN_CONTRACTION)
    (E64_FPROP, {}, "swapped_256x128"),
    (E64_DGRAD, {}, "fused_pair_256x256"),
    (("fprop", 64, 16384, 2048, 1408), {}, "fused_pair_256x256"),
    # E8 T16384: swapped_256x128 with or without a bias (row 1b has no bias condition: the direct epilogue adds the
    # bias row to each output as it stores it; not timed with a bias)
    (E8_FPROP, dict(bias=True), "swapped_256x128"),
    (E8_FPROP, {}, "swapped_256x128"),
    # dgrad: swapped_256x128 on its checked TMA loader (0.956 of grouped_mm against 0.853 over the copies)
    (("dgrad", 8, 16384, 14336, 4096), {}, "swapped_256x128"),
])
def test_fast_fprop_dgrad_choice(shape, kw, algorithm):
    assert plan_gemm(problem(*shape, **kw)).algorithm == Algorithm[algorithm]


def test_swapped_kernel_only_below_its_contraction_limit():
    """The swapped kernel's cp.async loader steps its copies by 32-bit offsets of up to 96 x the contraction K (2 token
    rows of 32 K elements, or 4 weight pieces 64 rows x K/2 bytes apart), which pass 2^31 from K = 22.4M: at or past
    the limit the automatic choice runs the 64 x 256 fused kernel (the next fastest for few rows per group) and forcing
    the swapped kernel raises."""
    lim = _dispatch.SWAPPED_MAX_CONTRACTION[Algorithm.swapped_64x256]
    assert 96 * lim < 2**31
    # swapped_256x128's cp.async loader (4 warps): 15 token pieces 16 rows of K elements apart, 240 K
    wide = _dispatch.SWAPPED_MAX_CONTRACTION[Algorithm.swapped_256x128]
    assert 240 * wide < 2**31 <= 240 * 2 * wide
    p_wide = problem("fprop", 8, 4096, 4096, wide - 16, sized=False)
    assert plan_gemm(p_wide, algorithm="swapped_256x128", loader="cp_async").algorithm == Algorithm.swapped_256x128
    p_wide = problem("fprop", 8, 4096, 4096, wide, sized=False)
    with pytest.raises(ValueError, match="contractions below 8388608"):
        plan_gemm(p_wide, algorithm="swapped_256x128")
    for kind in ("fprop", "dgrad"):
        # E8 T512: 64 rows per group, the swapped kernel's range (fprop's contraction is K, dgrad's N)
        def p(contraction: int, kind: str = kind) -> GemmProblem:
            n, k = (4096, contraction) if kind == "fprop" else (contraction, 4096)
            return problem(kind, 8, 512, n, k, sized=False)

        assert plan_gemm(p(lim - 16)).algorithm == Algorithm.swapped_64x256
        assert plan_gemm(p(lim)).algorithm == Algorithm.fused_64x256
        assert plan_gemm(p(lim - 16), algorithm="swapped_64x256").algorithm == Algorithm.swapped_64x256
        with pytest.raises(ValueError, match="contractions below"):
            plan_gemm(p(lim), algorithm="swapped_64x256")


def test_swapped_kernel_runs_fprop_and_dgrad_only():
    p = problem("wgrad", 8, 512, 4096, 4096)  # 64 rows per group: wgrad keeps the fused kernels
    assert plan_gemm(p).algorithm != Algorithm.swapped_64x256
    with pytest.raises(ValueError, match="algorithm='swapped_64x256' cannot run this call: it runs fprop and dgrad"):
        plan_gemm(p, algorithm="swapped_64x256")


def test_swapped_256x128_wgrad_plans_and_refusals():
    """swapped_256x128 runs wgrad over exchanged operands: dY's columnwise plane is the one decoded in registers, so
    its scale tiles are copied 16 bytes at a time (a's scale buffer must be 16-byte aligned), the longest group
    contraction is the token count (below 2^23, its cp.async loader's offsets), and the TMA loader (one token map per
    group) needs a token; its epilogue is its own direct one, C included."""
    p = problem("wgrad", 8, 16384, 14336, 4096)
    assert plan_gemm(p, algorithm="swapped_256x128") == WIDE
    assert plan_gemm(p, algorithm="swapped_256x128", loader="cp_async") == plan("swapped_256x128", "cp_async",
                                                                               "direct")
    acc = problem("wgrad", 8, 16384, 14336, 4096, accumulate=True)
    assert plan_gemm(acc, algorithm="swapped_256x128") == WIDE
    assert plan_gemm(problem("wgrad", 8, 16384, 14336, 4096, b_scales_aligned=False),
                     algorithm="swapped_256x128") == WIDE  # (X's scales: the fp16 copy's decode reads any address)
    with pytest.raises(ValueError, match="algorithm='swapped_256x128' cannot run this call: .*a's scale buffer"):
        plan_gemm(problem("wgrad", 8, 16384, 14336, 4096, a_scales_aligned=False), algorithm="swapped_256x128")
    wide = _dispatch.SWAPPED_MAX_CONTRACTION[Algorithm.swapped_256x128]
    assert plan_gemm(problem("wgrad", 8, wide - 16, 1024, 1024, sized=False),
                     algorithm="swapped_256x128").algorithm == Algorithm.swapped_256x128
    with pytest.raises(ValueError, match="wgrad on fewer than 8388608 tokens only .dY's buffer holds 8388608"):
        plan_gemm(problem("wgrad", 8, wide, 1024, 1024, sized=False), algorithm="swapped_256x128")
    # dY's buffer bounds it as the binding does: SPEC 9.3's worst case holds 16 W(16) tokens per feature, W(16) = E +
    # (T - E) // 16 = 8 + 8388584 // 16 = 524294 at T = 2^23 - 16, so 8388704
    with pytest.raises(ValueError, match="dY's buffer holds 8388704"):
        plan_gemm(problem("wgrad", 8, wide - 16, 1024, 1024), algorithm="swapped_256x128")
    empty = problem("wgrad", 8, 0, 1024, 1024)
    assert plan_gemm(empty, algorithm="swapped_256x128") == plan("swapped_256x128", "cp_async", "direct")
    with pytest.raises(ValueError, match="loader='tma' cannot run this call: .*at least one token"):
        plan_gemm(empty, algorithm="swapped_256x128", loader="tma")


# Row 2b of docs/design.md's selection table (fast fp32 wgrad without C on swapped_256x128) on both sides of each
# condition, one moved at a time: (E, T, N, K, output, accumulate, a's scales aligned). The first case is on every
# boundary: 512 tokens per group, N = K = 1024... except K's bound and the copy's, taken on their own (K = 4096, and
# K ru16(T/E) 2 bytes = 2^26 exactly at K = 4096 and 8192 tokens per group).
@pytest.mark.parametrize("case,why", [
    ((8, 4096, 1024, 1024, "f32", False, True), None),
    ((8, 4088, 1024, 1024, "f32", False, True), "511 tokens per group"),
    ((8, 4096, 1008, 1024, "f32", False, True), "N below 1024"),
    ((8, 4096, 1024, 1008, "f32", False, True), "K below 1024"),
    ((8, 4096, 1024, 1024, "bf16", False, True), "bf16 output"),
    ((8, 4096, 1024, 1024, "f32", True, True), "C read back"),
    ((8, 4096, 1024, 1024, "f32", False, False), "a's scale buffer off 16-byte alignment"),
    ((8, 4096, 1024, 4096, "f32", False, True), None),
    ((8, 4096, 1024, 4112, "f32", False, True), "K past 4096"),
    ((8, 65536, 1024, 4096, "f32", False, True), None),
    ((8, 65544, 1024, 4096, "f32", False, True), "8193 tokens per group: ru16 = 8208, X's copy past 2^26 bytes"),
])
def test_wgrad_swapped_thresholds_on_both_sides(case, why):
    e, t, n, k, dtype, acc, aligned = case
    p = problem("wgrad", e, t, n, k, out_dtype="float32" if dtype == "f32" else "bfloat16", accumulate=acc,
                a_scales_aligned=aligned)
    assert (plan_gemm(p).algorithm == Algorithm.swapped_256x128) is (why is None), why

# The hybrid exact kernel: fprop / dgrad whose contraction is a multiple of 32, with 16-byte aligned B buffers (its
# TMA boxes of packed rows); every other call keeps the fused kernel (or the copies where they pay), and forcing it
# raises. Rows: (kind, contraction kc, b's data offset in bytes past 16-byte alignment, runs, why), on E64 T16384.
@pytest.mark.parametrize("kind,kc,offset,runs,why", [
    ("fprop", 2048, 0, True, None),             # E64 fprop: the shape it was measured on (0.47 -> 0.50x)
    ("dgrad", 1408, 0, True, None),             # E64 dgrad (contraction N = 1408 = 44 x 32; 0.45 -> 0.48x)
    ("fprop", 48, 0, False, "multiple of 32"),  # packed rows of 24 bytes
    ("dgrad", 144, 0, False, "multiple of 32"),
    ("wgrad", 2048, 0, False, "fprop and dgrad only"),
    ("fprop", 2048, 8, False, "16-byte aligned"),  # b's data 8 bytes into its storage
])
def test_hybrid_eligibility(kind, kc, offset, runs, why):
    # fprop's contraction is K, dgrad's N; wgrad: dW [1408, 2048] (its contraction is the tokens)
    n, k = {"fprop": (1408, kc), "dgrad": (kc, 2048), "wgrad": (1408, kc)}[kind]
    p = problem(kind, 64, 16384, n, k, mode="exact", b_aligned=offset % 16 == 0)
    assert (plan_gemm(p).algorithm == Algorithm.exact_hybrid) is runs
    if why is None:
        assert plan_gemm(p, algorithm="exact_hybrid") == plan("exact_hybrid", "tma", "staged")
    else:
        with pytest.raises(ValueError, match=why):
            plan_gemm(p, algorithm="exact_hybrid")
        if kind != "wgrad":  # (wgrad's 256 rows per group with N, K >= 1024: over copies)
            assert plan_gemm(p).algorithm == Algorithm.exact_fused


def test_fused_algorithm_by_size_when_forced_off_the_others():
    """The fused fast algorithms by rows per group and contraction (wgrad: dW's N rows and the tokens per group), as
    the automatic choice takes them where neither the swapped kernel nor the copies run: 64 x 256 tiles up to 96 rows
    (decode-like MoE; fprop / dgrad with so few rows run the swapped kernel), the 2-CTA pair from 256 rows with a
    contraction of at least 1024 (on E64 wgrad's 256-long K loops the 128 x 256 kernel is faster), 128 x 256
    otherwise."""
    cases = [
        (("fprop", 4, 388, 272, 64), "fused_128x256"),   # 97 rows per group
        (("fprop", 2, 1024, 272, 1088), "fused_pair_256x256"),  # 512 rows (whole 256-row tiles), K = 1088
        (("fprop", 2, 769, 272, 1008), "fused_128x256"),  # contraction below 1024
        (("fprop", 2, 511, 272, 4096), "fused_128x256"),  # 255 rows per group
        (("wgrad", 4, 4096, 96, 512), "fused_64x256"),     # dW's 96 rows
        (("wgrad", 4, 4096, 97, 512), "fused_128x256"),
        (("wgrad", 4, 4096, 256, 512), "fused_pair_256x256"),  # 1024 tokens per group
        (("wgrad", 4, 4092, 256, 512), "fused_128x256"),  # 1023
    ]
    for shape, want in cases:
        # fprop with a bias: no copies; more than 96 rows per group: not the swapped kernel
        p = problem(*shape, bias=shape[0] == "fprop")
        assert plan_gemm(p).algorithm == Algorithm[want], shape
        # the same kernel by the sizes alone (bench_grouped_gemm's "fused" column forces it)
        assert fused_fast_algorithm(problem(*shape)) == Algorithm[want], shape


# Scale buffers that are not 16-byte aligned (a DeviceGroupedNVFP4Tensor whose scales are a view into a larger
# buffer): the fused kernels (and the swapped kernel, for b's) copy scale tiles 16 bytes at a time, so the plan takes
# the copies, which read any address; fast mode without CUTLASS then takes the swapped kernel where only a's buffer is
# off (fprop / dgrad), else has no algorithm and raises. Rows: the plans with aligned buffers (fast, exact), which scale
# buffer is off, the plans then.
@pytest.mark.parametrize("shape,aligned,misaligned,plans", [
    (E64_DGRAD, ("fused_pair_256x256", "exact_hybrid"), "a", ("copies_cutlass", "exact_hybrid")),  # hybrid decodes a
    (E64_DGRAD, ("fused_pair_256x256", "exact_hybrid"), "b", ("copies_cutlass", "exact_copies")),  # (its b maps)
    # swapped_256x128 reads a through its fp16 copy, b's scale tiles by TMA
    (E64_FPROP, ("swapped_256x128", "exact_hybrid"), "a", ("swapped_256x128", "exact_hybrid")),
    (E64_FPROP, ("swapped_256x128", "exact_hybrid"), "b", ("copies_cutlass", "exact_copies")),
    (E64_WGRAD, ("fused_128x256", "exact_copies"), "a", ("copies_cutlass", "exact_copies")),
    # the swapped kernel decodes a (the tokens) and copies b's scale tiles
    (("fprop", 8, 512, 14336, 4096), ("swapped_64x256", "exact_hybrid"), "a", ("swapped_64x256", "exact_hybrid")),
    (("fprop", 8, 512, 14336, 4096), ("swapped_64x256", "exact_hybrid"), "b", ("copies_cutlass", "exact_copies")),
    # 97 rows per group, K = 48 (no hybrid kernel): the fused kernels in both modes
    (("fprop", 4, 388, 272, 48), ("fused_128x256", "exact_fused"), "a", ("copies_cutlass", "exact_copies")),
    (("fprop", 4, 388, 272, 48), ("fused_128x256", "exact_fused"), "b", ("copies_cutlass", "exact_copies")),
])
def test_scale_buffers_not_16_byte_aligned(shape, aligned, misaligned, plans):
    kw = dict(a_scales_aligned=misaligned != "a", b_scales_aligned=misaligned != "b")
    for mode, before, after in zip(("fast", "exact"), aligned, plans, strict=True):
        assert plan_gemm(problem(*shape, mode=mode)).algorithm == Algorithm[before]
        assert plan_gemm(problem(*shape, mode=mode, **kw)).algorithm == Algorithm[after]
    for algorithm in ("fused_64x256", "fused_128x256", "fused_pair_256x256"):
        with pytest.raises(ValueError, match=f"algorithm='{algorithm}' cannot run this call: .*16-byte aligned"):
            plan_gemm(problem(*shape, **kw), algorithm=algorithm)
    with pytest.raises(ValueError, match="algorithm='exact_fused' cannot run this call: .*16-byte aligned"):
        plan_gemm(problem(*shape, mode="exact", **kw), algorithm="exact_fused")
    if plans[0] not in ("swapped_64x256", "swapped_256x128"):
        if misaligned == "a" and shape[0] != "wgrad":  # the swapped kernel copies only b's scale tiles
            assert plan_gemm(problem(*shape, cutlass=False, **kw)).algorithm == Algorithm.swapped_64x256
        else:
            with pytest.raises(ValueError, match="no fast-mode algorithm can run this call: .*built without CUTLASS"):
                plan_gemm(problem(*shape, cutlass=False, **kw))
    assert plan_gemm(problem(*shape, mode="sm100", **kw)).algorithm == Algorithm.sm100_copies


# ------------------------------------------------------------------------------------------------------------------
# loaders
# ------------------------------------------------------------------------------------------------------------------

def test_swapped_loader_defaults_and_refusals():
    """The swapped kernels load through TMA boxes (E8 T512 fprop 1.86x -> 1.96x of grouped_mm) where their maps apply:
    a contraction that is a multiple of 32, 16-byte aligned b buffers and planes of at least one row. dgrad: W's
    columnwise groups after a group that disagrees with N need not start on a whole row of one tensor map, so
    swapped_64x256's dgrad takes the cp.async loader, and swapped_256x128's TMA loader checks each tile's group (the
    misplaced ones by cp.async). Forcing TMA where it cannot run raises."""
    fprop = problem("fprop", 8, 512, 14336, 4096)
    assert plan_gemm(fprop) == plan("swapped_64x256", "tma", "direct")
    assert plan_gemm(fprop, loader="cp_async") == plan("swapped_64x256", "cp_async", "direct")
    refusals = [
        (problem("dgrad", 8, 512, 14336, 4096), "swapped_64x256's dgrad weight groups need not start on a whole row"),
        (problem("dgrad", 8, 512, 4096, 14336), "swapped_64x256's dgrad weight groups need not start on a whole row"),
        (problem("fprop", 8, 512, 14336, 4112), "multiple of 32, got 4112"),
        (problem("fprop", 8, 512, 14336, 4096, b_aligned=False), "16-byte aligned"),
        (problem("fprop", 8, 512, 14336, 4096, sized=False), "between one row and 2\\^31 rows"),
    ]
    for p, why in refusals:
        assert plan_gemm(p) == plan("swapped_64x256", "cp_async", "direct"), p
        with pytest.raises(ValueError, match=f"loader='tma' cannot run this call: .*{why}"):
            plan_gemm(p, loader="tma")
    # swapped_256x128's dgrad: TMA by default, under the same conditions as fprop
    dgrad = problem("dgrad", 8, 16384, 14336, 4096)
    assert plan_gemm(dgrad, algorithm="swapped_256x128") == WIDE
    assert plan_gemm(dgrad, algorithm="swapped_256x128", loader="cp_async") == plan("swapped_256x128", "cp_async",
                                                                                   "direct")
    for p, why in [(problem("dgrad", 8, 16384, 4112, 4096), "multiple of 32, got 4112"),
                   (problem("dgrad", 8, 16384, 14336, 4096, b_aligned=False), "16-byte aligned")]:
        assert plan_gemm(p, algorithm="swapped_256x128") == plan("swapped_256x128", "cp_async", "direct"), p
        with pytest.raises(ValueError, match=f"loader='tma' cannot run this call: .*{why}"):
            plan_gemm(p, algorithm="swapped_256x128", loader="tma")


@pytest.mark.parametrize("algorithm,mode,loaders", [
    ("fused_64x256", "fast", ["cp_async"]),
    ("fused_128x256", "fast", ["cp_async"]),
    ("fused_pair_256x256", "fast", ["cp_async"]),
    ("copies_cutlass", "fast", ["tma"]),
    ("exact_fused", "exact", ["cp_async"]),
    ("exact_copies", "exact", ["tma", "cp_async"]),  # default first: TMA (E8 exact 0.45-0.48x -> 0.51-0.56x)
    ("exact_hybrid", "exact", ["tma"]),
])
def test_loaders_of_each_algorithm(algorithm, mode, loaders):
    p = problem("fprop", 4, 4096, 1024, 1024, mode=mode)
    assert plan_gemm(p, algorithm=algorithm).loader == Loader[loaders[0]]
    for name in Loader.__members__:
        if name in loaders:
            assert plan_gemm(p, algorithm=algorithm, loader=name).loader == Loader[name]
        else:
            with pytest.raises(ValueError, match=f"loader='{name}' cannot run this call: {algorithm} has the loader"):
                plan_gemm(p, algorithm=algorithm, loader=name)


# ------------------------------------------------------------------------------------------------------------------
# epilogues
# ------------------------------------------------------------------------------------------------------------------

def test_fp32_tma_store_only_for_wgrad_without_c_or_bias():
    """fp32 output leaves by TMA stores only for wgrad without C (accumulate) and without bias, in fused_128x256 (E64
    wgrad 0.61 -> 0.75x of grouped_mm) and exact_copies (0.47-0.50 -> 0.59x); everywhere else the staged epilogue
    (whole 128-byte lines) runs, and forcing the TMA store raises."""
    wgrad = problem("wgrad", 64, 16384, 1408, 2048)
    for algorithm, mode in (("fused_128x256", "fast"), ("exact_copies", "exact")):
        p = problem("wgrad", 64, 16384, 1408, 2048, mode=mode)
        assert plan_gemm(p, algorithm=algorithm).epilogue == Epilogue.tma_store
        assert plan_gemm(p, algorithm=algorithm, epilogue="staged").epilogue == Epilogue.staged
        acc = problem("wgrad", 64, 16384, 1408, 2048, mode=mode, accumulate=True)
        assert plan_gemm(acc, algorithm=algorithm).epilogue == Epilogue.staged
        with pytest.raises(ValueError, match="epilogue='tma_store' cannot run this call: .*without C and bias only"):
            plan_gemm(acc, algorithm=algorithm, epilogue="tma_store")
        fprop = problem("fprop", 4, 4096, 1024, 1024, mode=mode, out_dtype="float32")
        assert plan_gemm(fprop, algorithm=algorithm).epilogue == Epilogue.staged
        with pytest.raises(ValueError, match="without C and bias only"):
            plan_gemm(fprop, algorithm=algorithm, epilogue="tma_store")
        bias = problem("fprop", 4, 4096, 1024, 1024, mode=mode, out_dtype="float32", bias=True)
        with pytest.raises(ValueError, match="without C and bias only"):
            plan_gemm(bias, algorithm=algorithm, epilogue="tma_store")
    for algorithm, mode in (("fused_64x256", "fast"), ("fused_pair_256x256", "fast"), ("exact_fused", "exact"),
                            ("exact_hybrid", "exact")):
        p = problem("fprop" if algorithm == "exact_hybrid" else "wgrad", 64, 16384, 1408, 2048, mode=mode,
                    out_dtype="float32")
        assert plan_gemm(p, algorithm=algorithm).epilogue == Epilogue.staged
        with pytest.raises(ValueError, match="the fp32 TMA store runs in fused_128x256 and exact_copies only"):
            plan_gemm(p, algorithm=algorithm, epilogue="tma_store")
    assert plan_gemm(wgrad).epilogue == Epilogue.tma_store


@pytest.mark.parametrize("algorithm", ["fused_64x256", "fused_128x256", "fused_pair_256x256"])
def test_bf16_tma_store_only_with_whole_16_byte_rows(algorithm):
    """bf16 output leaves the fused fast kernels by TMA boxes (E64 fprop 0.88 -> 0.92x of grouped_mm in the pair, E64
    wgrad-bf16 0.64 -> 0.76x in the 128 x 256 kernel) when the output's rows are a multiple of 16 bytes (columns % 8
    == 0) and its map has fewer than 2^31 rows; otherwise through the staged epilogue (36 columns), and forcing the TMA
    store there raises. The other algorithms have no bf16 TMA store."""
    for shape in (("fprop", 5, 1200, 40, 96), ("dgrad", 5, 1200, 208, 144), ("wgrad", 4, 242, 304, 144)):
        p = problem(*shape, out_dtype="bfloat16")
        assert plan_gemm(p, algorithm=algorithm).epilogue == Epilogue.tma_store, shape
        assert plan_gemm(p, algorithm=algorithm, epilogue="staged").epilogue == Epilogue.staged, shape
    odd = problem("fprop", 3, 753, 36, 96)
    assert plan_gemm(odd, algorithm=algorithm).epilogue == Epilogue.staged
    with pytest.raises(ValueError, match="epilogue='tma_store' cannot run this call: .*got 36 bf16 columns"):
        plan_gemm(odd, algorithm=algorithm, epilogue="tma_store")
    huge = problem("fprop", 1, 2**31, 64, 64, sized=False)  # 2^31 output rows: past a map's 32-bit coordinates
    assert plan_gemm(huge, algorithm=algorithm).epilogue == Epilogue.staged
    with pytest.raises(ValueError, match="2\\^31 rows or more"):
        plan_gemm(huge, algorithm=algorithm, epilogue="tma_store")
    for other, mode in (("exact_fused", "exact"), ("exact_copies", "exact"), ("exact_hybrid", "exact")):
        p = problem("fprop", 5, 1200, 40, 96, mode=mode)
        assert plan_gemm(p, algorithm=other).epilogue == Epilogue.staged
        with pytest.raises(ValueError, match="the bf16 TMA store runs in the fused fast kernels only"):
            plan_gemm(p, algorithm=other, epilogue="tma_store")


def test_own_epilogues_of_swapped_and_copies():
    """The swapped kernels and both sm100 algorithms store their fragments directly, copies_cutlass through CUTLASS's
    epilogue: their only epilogues. The fused fast kernels and exact_copies have staged and tma_store, exact_fused and
    exact_hybrid staged alone (no TMA store applies to them), never direct or cutlass."""
    fast, exact, sm100 = (problem("fprop", 8, 512, 4096, 4096, mode=m) for m in ("fast", "exact", "sm100"))
    own = {"swapped_64x256": (fast, "direct"), "swapped_256x128": (fast, "direct"), "copies_cutlass": (fast, "cutlass"),
           "sm100_simt": (sm100, "direct"), "sm100_copies": (sm100, "direct")}
    for algorithm, (p, epilogue) in own.items():
        assert plan_gemm(p, algorithm=algorithm).epilogue == Epilogue[epilogue]
        for name in {"direct", "cutlass", "staged", "tma_store"} - {epilogue}:
            with pytest.raises(ValueError, match=f"{algorithm} has the {epilogue} epilogue only"):
                plan_gemm(p, algorithm=algorithm, epilogue=name)
    staged = {"fused_64x256": (fast, "staged and tma_store epilogues"),
              "fused_128x256": (fast, "staged and tma_store epilogues"),
              "fused_pair_256x256": (fast, "staged and tma_store epilogues"),
              "exact_copies": (exact, "staged and tma_store epilogues"), "exact_fused": (exact, "staged epilogue"),
              "exact_hybrid": (exact, "staged epilogue")}
    for algorithm, (p, has) in staged.items():
        assert plan_gemm(p, algorithm=algorithm, epilogue="staged").epilogue == Epilogue.staged
        for name in ("direct", "cutlass"):
            with pytest.raises(ValueError, match=f"{algorithm} has the {has} only"):
                plan_gemm(p, algorithm=algorithm, epilogue=name)


# ------------------------------------------------------------------------------------------------------------------
# refusals of forced algorithms; names
# ------------------------------------------------------------------------------------------------------------------

def test_copies_cutlass_refusals():
    p = problem("fprop", 2, 64, 36, 64)  # bf16 rows of 36 columns: 72 bytes, not 16-byte aligned
    with pytest.raises(ValueError, match="algorithm='copies_cutlass' cannot run this call: its output rows must be "
                                         "16-byte aligned \\(36 columns of bfloat16\\)"):
        plan_gemm(p, algorithm="copies_cutlass")
    plan_gemm(problem("fprop", 2, 64, 36, 64, out_dtype="float32"), algorithm="copies_cutlass")  # 144 bytes
    plan_gemm(problem("fprop", 2, 64, 32, 64, bias=True), algorithm="copies_cutlass")  # (the bf16 bias epilogue)
    for p in (problem("fprop", 2, 64, 32, 64, bias=True, out_dtype="float32"),
              problem("dgrad", 2, 64, 32, 64, bias=True)._replace(b_copy=True)):
        with pytest.raises(ValueError, match="its bias epilogue writes bf16 output over a K-major B"):
            plan_gemm(p, algorithm="copies_cutlass")
    with pytest.raises(ValueError, match="at most 65535 groups"):
        plan_gemm(problem("fprop", 65536, 65536, 32, 64), algorithm="copies_cutlass")


def test_mode_of_a_forced_algorithm():
    fast, exact = problem("fprop", 2, 64, 32, 64), problem("fprop", 2, 64, 32, 64, mode="exact")
    for a in _dispatch.FAST:
        with pytest.raises(ValueError, match=f"{a.name} is a fast-mode algorithm, the call is mode='exact'"):
            plan_gemm(exact, algorithm=a.name)
    for a in _dispatch.EXACT:
        with pytest.raises(ValueError, match=f"{a.name} is an? exact-mode algorithm, the call is mode='fast'"):
            plan_gemm(fast, algorithm=a.name)
    for part in ("algorithm", "loader", "epilogue"):
        with pytest.raises(ValueError, match=f"{part} must be one of"):
            plan_gemm(fast, **{part: "pair"})


def test_plan_names_are_the_codes():
    """The plan vocabulary (force_plan's names, docs/design.md's) is the Python names of csrc/common/codes.h's enums,
    the algorithms split into the three modes, each with its output tile; plans carry the enums themselves."""
    assert list(Algorithm.__members__) == ["fused_64x256", "fused_128x256", "fused_pair_256x256", "swapped_64x256",
                                           "copies_cutlass", "exact_fused", "exact_copies", "exact_hybrid",
                                           "sm100_simt", "sm100_copies", "swapped_256x128"]
    assert list(Loader.__members__) == ["cp_async", "tma", "loads"]
    assert list(Epilogue.__members__) == ["staged", "tma_store", "direct", "cutlass"]
    assert set(_dispatch.FAST) | set(_dispatch.EXACT) | set(_dispatch.SM100) == set(Algorithm)
    assert not set(_dispatch.FAST) & set(_dispatch.EXACT) and not (set(_dispatch.FAST) | set(_dispatch.EXACT)) & set(
        _dispatch.SM100)
    assert set(ALGORITHM_TILES) == set(Algorithm)
    for a in Algorithm:  # the tile is in the name of the fused fast algorithms and of the swapped ones
        if a.name.startswith(("fused", "swapped")):
            assert a.name.endswith("_{}x{}".format(*ALGORITHM_TILES[a]))
    got = plan_gemm(problem(*E64_DGRAD))
    assert type(got.algorithm) is Algorithm and type(got.loader) is Loader and type(got.epilogue) is Epilogue
    assert got.tile == (256, 256)
    assert str(got) == "fused_pair_256x256 (loader cp_async, epilogue tma_store)"
    assert plan_gemm(problem(*E64_FPROP)).tile == (256, 128)
    for a in Algorithm:  # a forced algorithm is that enum, whatever the sizes
        mode = "fast" if a in _dispatch.FAST else ("exact" if a in _dispatch.EXACT else "sm100")
        p = problem("fprop", 4, 4096, 1024, 1024, mode=mode)
        assert plan_gemm(p, algorithm=a.name).algorithm is a


def test_sm100_plans():
    """Mode sm100 runs sm100_copies (TMA loads of the fp16 copies, direct SPEC 12.7 stores) unless sm100_simt is
    forced (its own loads and stores); neither takes another mode's loader or epilogue."""
    for kind in ("fprop", "dgrad", "wgrad"):
        p = problem(kind, 8, 4096, 1024, 512, mode="sm100")
        got = plan_gemm(p)
        assert (got.algorithm, got.loader, got.epilogue) == (Algorithm.sm100_copies, Loader.tma, Epilogue.direct)
        assert got.tile == (128, 128)
        simt = plan_gemm(p, algorithm="sm100_simt")
        assert (simt.algorithm, simt.loader, simt.epilogue) == (Algorithm.sm100_simt, Loader.loads, Epilogue.direct)
        with pytest.raises(ValueError, match="sm100_copies has the loader"):
            plan_gemm(p, algorithm="sm100_copies", loader="cp_async")
        with pytest.raises(ValueError, match="sm100_copies has the direct epilogue only"):
            plan_gemm(p, algorithm="sm100_copies", epilogue="staged")


# The decisions measured on the H200 by tools/ab/crossovers.py (both sides of each rule timed in one process, median of
# 3 rounds; docs/performance.md, "Kernel choice"): (mode, kind, E, T, N, K, output, accumulate) -> the faster
# algorithm, with the time ratio B/A of the rule's two plans. Cases where the two measurements disagree across GPUs or
# the rounds' spread exceeds the margin are not listed (docs/performance.md names them). Where fprop runs on
# swapped_256x128 (the selection table's row 1b, test_wide_swapped_decisions), the rule measured here decides the plan
# below that row: the one fprop takes where swapped_256x128 cannot run (a contraction that is not a multiple of 32,
# b's buffers off 16-byte alignment); where fp32 wgrad does (row 2b, test_wgrad_fast_choice), the plan it takes where
# swapped_256x128 cannot (a's scale buffer off 16-byte alignment).
@pytest.mark.parametrize("mode,kind,e,t,n,k,dtype,acc,faster", [
    ("fast", "fprop", 8, 512, 14336, 4096, "bf16", False, "swapped_64x256"),        # fused_64x256 / swapped 1.158
    ("fast", "fprop", 8, 768, 14336, 4096, "bf16", False, "swapped_64x256"),        # 1.162 (96 rows per group)
    ("fast", "fprop", 8, 1024, 14336, 4096, "bf16", False, "fused_128x256"),        # 0.920 (128 rows)
    ("fast", "dgrad", 8, 768, 14336, 4096, "bf16", False, "swapped_64x256"),        # 1.104
    ("fast", "dgrad", 8, 1024, 14336, 4096, "bf16", False, "fused_128x256"),        # 0.796
    ("fast", "fprop", 16, 2048, 4096, 4096, "bf16", False, "fused_128x256"),        # pair / 128x256 0.603 (128 rows)
    ("fast", "fprop", 16, 4096, 4096, 4096, "bf16", False, "fused_pair_256x256"),   # 1.132 (256 rows)
    ("fast", "fprop", 16, 8192, 4096, 512, "bf16", False, "fused_128x256"),         # 0.928 (contraction 512)
    ("fast", "fprop", 16, 8192, 4096, 1024, "bf16", False, "fused_pair_256x256"),   # 1.121 (contraction 1024)
    ("fast", "fprop", 8, 4096, 14336, 4096, "bf16", False, "fused_pair_256x256"),   # copies / pair 0.943 (512 rows)
    ("fast", "fprop", 8, 8192, 14336, 4096, "bf16", False, "copies_cutlass"),       # 1.160 (1024 rows)
    ("fast", "wgrad", 8, 4096, 14336, 4096, "f32", False, "copies_cutlass"),        # 1.332 (512 rows)
    ("fast", "wgrad", 64, 2048, 1408, 2048, "f32", True, "copies_cutlass"),         # 1.379 (accumulate, 32 rows)
    ("fast", "wgrad", 32, 8192, 1024, 2048, "bf16", False, "fused_128x256"),        # 0.766 (N K / (N + K) = 683)
    ("fast", "wgrad", 32, 8192, 4096, 2048, "bf16", False, "copies_cutlass"),       # 1.181 (1365)
    ("fast", "wgrad", 64, 32768, 1408, 2048, "bf16", False, "copies_cutlass"),     # 1.116 (834, 512 rows)
    ("exact", "wgrad", 64, 8192, 1408, 2048, "f32", False, "exact_copies"),         # exact_fused / copies 1.339
    ("exact", "fprop", 8, 4096, 14336, 4096, "bf16", False, "exact_copies"),        # hybrid / copies 1.119 (512)
    ("exact", "fprop", 8, 16384, 14336, 4096, "bf16", False, "exact_copies"),       # 1.344
])
def test_h200_crossover_decisions(mode, kind, e, t, n, k, dtype, acc, faster):
    p = problem(kind, e, t, n, k, mode=mode, out_dtype="float32" if dtype == "f32" else "bfloat16", accumulate=acc)
    got = plan_gemm(p).algorithm
    if got == Algorithm.swapped_256x128:
        pays = _dispatch._wgrad_copies_pay(p) if kind == "wgrad" else _dispatch._copies_pay(p)
        got = Algorithm.copies_cutlass if pays else fused_fast_algorithm(p)
    assert got == Algorithm[faster]


# With the weights' fp16 copy given (GroupedLinear's cache_f16_weights): copies_cutlass reading it against the planned
# algorithm without it, as multiples of torch._grouped_mm (tools/ab/ab_plans.py gemm --plans "auto; algorithm=
# copies_cutlass weights=f16", H200, one run): 256 rows per group copies, 128 rows the fused kernel; wgrad and fp32
# dgrad never read the copy.
@pytest.mark.parametrize("kind,e,t,n,k,dtype,faster", [
    ("fprop", 64, 16384, 1408, 2048, "bf16", "copies_cutlass"),       # 0.795 against fused_pair 0.752 (256 rows)
    ("dgrad", 64, 16384, 1408, 2048, "bf16", "copies_cutlass"),       # 0.831 against 0.788
    ("fprop", 64, 8192, 1408, 2048, "bf16", "fused_128x256"),         # 0.649 against 0.987 (128 rows)
    ("fprop", 8, 16384, 14336, 4096, "bf16", "copies_cutlass"),       # skewed: 1.077 against copies 0.954
    ("dgrad", 8, 16384, 14336, 4096, "bf16", "copies_cutlass"),       # skewed: 1.025 against 0.907
    # (output columns below COPIES_MIN_REUSE: the copy is not read; row 1b has no bound on N, not timed at N = 512)
    ("fprop", 64, 16384, 512, 2048, "bf16", "swapped_256x128"),
    ("wgrad", 64, 8192, 1408, 2048, "bf16", "fused_128x256"),         # (wgrad reads no weights)
    ("dgrad", 64, 16384, 1408, 2048, "f32", "fused_pair_256x256"),    # (the N-contiguous copy: bf16 output only)
])
def test_weight_copy_decisions(kind, e, t, n, k, dtype, faster):
    p = problem(kind, e, t, n, k, out_dtype="float32" if dtype == "f32" else "bfloat16")._replace(b_copy=True)
    assert plan_gemm(p).algorithm == Algorithm[faster]
    assert plan_gemm(p._replace(b_copy=False)).algorithm != Algorithm.copies_cutlass


def test_bf16_tma_store_writes_no_c():
    """The fused kernels' bf16 TMA store has no C (the C++ map encoder refuses an accumulating call); grouped_gemm
    accumulates into fp32 only, so the planner refuses the pairing itself rather than rely on that."""
    p = problem("wgrad", 8, 4096, 1024, 1024, out_dtype="bfloat16", accumulate=True, cutlass=False)
    assert "writes no C" in _dispatch.epilogue_unavailable(Algorithm.fused_128x256, Epilogue.tma_store, p)
    assert plan_gemm(p).epilogue != Epilogue.tma_store
    assert plan_gemm(problem("wgrad", 8, 4096, 1024, 1024, out_dtype="bfloat16", cutlass=False)).epilogue == (
        Epilogue.tma_store)


@pytest.mark.parametrize("kind,e,t,n,k,why", [
    ("fprop", 4, 4096, 1024, 1024, "T/E, contraction and output columns >= 1024: each exactly 1024"),
    ("wgrad", 8, 4096, 1024, 1024, "plain bf16 wgrad from 512 rows per group: exactly 512"),
    ("wgrad", 32, 8192, 2048, 2048, "T/E >= 256, N K / (N + K) >= 800 and T N K >= 2^35: 256, 1024, 2^35"),
    ("wgrad", 8, 1024, 2400, 2400, "T/E >= 64 and N K / (N + K) >= 1200: 128 rows and exactly 1200"),
])
def test_selection_thresholds_include_their_boundary(kind, e, t, n, k, why):
    """docs/design.md's selection table at the equality point of each threshold it states as "at least" / ">=" (bf16
    output): the boundary itself takes the copies."""
    assert plan_gemm(problem(kind, e, t, n, k, out_dtype="bfloat16")).algorithm == Algorithm.copies_cutlass, why


# Each "at least" threshold of docs/design.md's selection table on both sides, one condition moved at a time: the first
# case sits on the boundary (the copies run), the second one step below it (16 for a dimension) with every other
# condition unchanged. (mode, kind, E, T, N, K, output, accumulate, b_copy); rows = T / E.
@pytest.mark.parametrize("at,below,why", [
    (("fast", "fprop", 4, 4096, 1024, 1024, "bf16", False, False),
     ("fast", "fprop", 4, 4092, 1024, 1024, "bf16", False, False), "fprop copies: 1024 rows per group"),
    (("fast", "fprop", 4, 4096, 1024, 1024, "bf16", False, False),
     ("fast", "fprop", 4, 4096, 1024, 1008, "bf16", False, False), "fprop copies: contraction K >= 1024"),
    (("fast", "fprop", 4, 4096, 1024, 1024, "bf16", False, False),
     ("fast", "fprop", 4, 4096, 1008, 1024, "bf16", False, False), "fprop copies: output columns N >= 1024"),
    (("fast", "dgrad", 4, 4096, 1024, 1024, "bf16", False, False),
     ("fast", "dgrad", 4, 4096, 1008, 1024, "bf16", False, False), "dgrad copies: contraction N >= 1024"),
    # (fp32 wgrad with K = 4112, past WGRAD_SWAPPED_MAX_K, so row 2b does not take the boundary case)
    (("fast", "wgrad", 8, 4096, 1024, 4112, "f32", False, False),
     ("fast", "wgrad", 8, 4088, 1024, 4112, "f32", False, False), "fp32 wgrad copies: 512 rows per group"),
    (("fast", "wgrad", 8, 4096, 1024, 1024, "bf16", False, False),
     ("fast", "wgrad", 8, 4096, 1024, 1008, "bf16", False, False), "wgrad copies: N and K >= 1024"),
    (("fast", "wgrad", 64, 2048, 1024, 1024, "f32", True, False),
     ("fast", "wgrad", 64, 1984, 1024, 1024, "f32", True, False), "accumulating wgrad copies: 32 rows per group"),
    (("fast", "wgrad", 8, 512, 2400, 2400, "bf16", False, False),
     ("fast", "wgrad", 8, 504, 2400, 2400, "bf16", False, False), "bf16 wgrad copies, reuse 1200: 64 rows"),
    (("fast", "wgrad", 8, 1024, 2400, 2400, "bf16", False, False),
     ("fast", "wgrad", 8, 1024, 2384, 2384, "bf16", False, False), "bf16 wgrad copies: N K / (N + K) >= 1200"),
    (("fast", "wgrad", 33, 8448, 2048, 2048, "bf16", False, False),
     ("fast", "wgrad", 33, 8415, 2048, 2048, "bf16", False, False), "large bf16 wgrad: 256 rows per group"),
    (("fast", "wgrad", 32, 8192, 2048, 2048, "bf16", False, False),
     ("fast", "wgrad", 31, 7936, 2048, 2048, "bf16", False, False), "large bf16 wgrad: T N K >= 2^35"),
    (("fast", "wgrad", 64, 16384, 1600, 1600, "bf16", False, False),
     ("fast", "wgrad", 64, 16384, 1584, 1584, "bf16", False, False), "large bf16 wgrad: N K / (N + K) >= 800"),
    (("fast", "fprop", 64, 16384, 1024, 2048, "bf16", False, True),
     ("fast", "fprop", 64, 16320, 1024, 2048, "bf16", False, True), "over the weights' copy: 256 rows per group"),
    (("fast", "fprop", 64, 16384, 1024, 1024, "bf16", False, True),
     ("fast", "fprop", 64, 16384, 1008, 1024, "bf16", False, True), "over the weights' copy: N >= 1024"),
    (("fast", "fprop", 64, 16384, 1024, 1024, "bf16", False, True),
     ("fast", "fprop", 64, 16384, 1024, 1008, "bf16", False, True), "over the weights' copy: K >= 1024"),
    (("exact", "fprop", 8, 4096, 1024, 1024, "bf16", False, False),
     ("exact", "fprop", 8, 4088, 1024, 1024, "bf16", False, False), "exact copies: 512 rows per group"),
    (("exact", "fprop", 8, 4096, 1024, 1024, "bf16", False, False),
     ("exact", "fprop", 8, 4096, 1024, 1008, "bf16", False, False), "exact copies: contraction >= 1024"),
    (("exact", "fprop", 8, 4096, 1024, 1024, "bf16", False, False),
     ("exact", "fprop", 8, 4096, 1008, 1024, "bf16", False, False), "exact copies: output columns >= 1024"),
    (("exact", "wgrad", 8, 1024, 1024, 1024, "f32", False, False),
     ("exact", "wgrad", 8, 1016, 1024, 1024, "f32", False, False), "exact wgrad copies: 128 rows per group"),
    (("exact", "wgrad", 8, 1024, 1024, 1024, "f32", False, False),
     ("exact", "wgrad", 8, 1024, 1008, 1024, "f32", False, False), "exact wgrad copies: N >= 1024"),
])
def test_selection_thresholds_on_both_sides(at, below, why):
    """The boundary case runs over fp16 copies (copies_cutlass, or exact_copies in exact mode); one step below, the
    copies do not run (a threshold moved by one step, or a condition dropped, fails here)."""
    def algorithm(mode, kind, e, t, n, k, dtype, acc, b_copy):
        pb = problem(kind, e, t, n, k, mode=mode, out_dtype="float32" if dtype == "f32" else "bfloat16",
                     accumulate=acc)
        return plan_gemm(pb._replace(b_copy=b_copy)).algorithm

    copies = Algorithm.exact_copies if at[0] == "exact" else Algorithm.copies_cutlass
    assert algorithm(*at) == copies, why
    assert algorithm(*below) != copies, why


def test_swapped_contraction_limit_is_2_to_the_24():
    """swapped_64x256 (fprop / dgrad, <= 96 rows per group) runs below a contraction of 2^24 and not from it
    (docs/design.md 4.3): the number, not the constant read back."""
    assert plan_gemm(problem("fprop", 8, 512, 4096, 2**24 - 16)).algorithm == Algorithm.swapped_64x256
    assert plan_gemm(problem("fprop", 8, 512, 4096, 2**24)).algorithm != Algorithm.swapped_64x256


def test_wgrad_tma_map_counts_every_experts_rows():
    """The bf16 TMA store's map holds wgrad's E N output rows (dW [E, N, K]), which must stay below 2^31: E = 2^15
    experts of N = 2^16 rows is 2^31, so a forced fused kernel stores through its staged epilogue instead."""
    p = problem("wgrad", 2**15, 2**15 * 16, 2**16, 1024, out_dtype="bfloat16", sized=False)
    assert plan_gemm(p, algorithm="fused_128x256").epilogue == Epilogue.staged


# swapped_256x128 for fprop and dgrad (H100, tools/ab/ab_plans.py gemm --plans "auto; algorithm=swapped_256x128", one
# run each, x of torch._grouped_mm: swapped_256x128 / the plan without its rule; "plan / swapped": the other plan's time
# over swapped_256x128's, tools/ab/crossovers.py --only wide_swapped_dgrad): from 256 rows per group with a contraction
# (K for fprop, N for dgrad) of at least 2048 and its TMA loader. Below the bounds the other plans stay.
@pytest.mark.parametrize("kind,e,t,n,k,faster", [
    ("fprop", 8, 2048, 14336, 4096, "swapped_256x128"),       # 1.169 / 0.909 (fused pair; 256 rows)
    ("fprop", 8, 4096, 14336, 4096, "swapped_256x128"),       # 0.987 / 0.747 (fused pair)
    ("fprop", 8, 8192, 14336, 4096, "swapped_256x128"),       # 0.968 / 0.778 (copies)
    ("fprop", 8, 16384, 14336, 4096, "swapped_256x128"),      # 0.958 / 0.898 (copies)
    ("fprop", 16, 16384, 14336, 4096, "swapped_256x128"),     # 0.977 / 0.787 (copies)
    ("fprop", 8, 16384, 4096, 14336, "swapped_256x128"),      # 0.952 / 0.847 (copies; K = 14336)
    ("fprop", 8, 16384, 2048, 2048, "swapped_256x128"),       # 0.793 / 0.763 (copies)
    ("fprop", 64, 16384, 1408, 2048, "swapped_256x128"),      # 0.973 / 0.960 (fused pair)
    ("fprop", 64, 32768, 1408, 2048, "swapped_256x128"),      # 0.857 / 0.769 (fused pair)
    ("fprop", 32, 16384, 1408, 2048, "swapped_256x128"),      # 0.795 / 0.783 (fused pair)
    ("fprop", 128, 16384, 1408, 2048, "fused_128x256"),       # 1.035 / 1.339 (128 rows)
    ("fprop", 64, 16384, 2048, 1408, "fused_pair_256x256"),   # 0.94-1.02 / 1.005 (K = 1408)
    ("dgrad", 64, 16384, 1408, 2048, "fused_pair_256x256"),   # 0.911 / 0.941 (N = 1408)
    ("dgrad", 64, 16384, 2048, 2048, "swapped_256x128"),      # plan / swapped 1.030 (fused pair; N = 2048)
    ("dgrad", 8, 1024, 14336, 4096, "fused_128x256"),         # plan / swapped 0.801 (128 rows)
    ("dgrad", 8, 2048, 14336, 4096, "swapped_256x128"),       # plan / swapped 1.287 (fused pair)
    ("dgrad", 8, 4096, 14336, 4096, "swapped_256x128"),       # 0.979 / 0.753 (fused pair)
    ("dgrad", 8, 8192, 14336, 4096, "swapped_256x128"),       # plan / swapped 1.305 (copies)
    ("dgrad", 8, 16384, 14336, 4096, "swapped_256x128"),      # 0.956 / 0.853 (copies)
])
def test_wide_swapped_decisions(kind, e, t, n, k, faster):
    assert plan_gemm(problem(kind, e, t, n, k)).algorithm == Algorithm[faster]


@pytest.mark.parametrize("at,below,why", [
    (("fprop", 8, 2048, 4096, 4096), ("fprop", 8, 2040, 4096, 4096), "256 rows per group"),
    (("fprop", 8, 2048, 4096, 2048), ("fprop", 8, 2048, 4096, 2016), "a contraction of at least 2048"),
    (("fprop", 8, 2048, 4096, 4096), ("fprop", 8, 2048, 4096, 4112), "its TMA loader: K a multiple of 32"),
    (("dgrad", 8, 2048, 4096, 4096), ("dgrad", 8, 2040, 4096, 4096), "dgrad: 256 rows per group"),
    (("dgrad", 8, 2048, 2048, 4096), ("dgrad", 8, 2048, 2016, 4096), "dgrad: a contraction N of at least 2048"),
    (("dgrad", 8, 2048, 4096, 4096), ("dgrad", 8, 2048, 4112, 4096), "dgrad: its TMA loader, N a multiple of 32"),
    # the kernel's contraction limit (its cp.async loader's 32-bit offsets), also on the automatic path
    (("fprop", 1, 256, 256, 2**23 - 32), ("fprop", 1, 256, 256, 2**23), "a contraction below 2^23"),
])
def test_wide_swapped_bounds_on_both_sides(at, below, why):
    """docs/design.md's selection table: swapped_256x128 at each bound, another plan one step past it."""
    assert plan_gemm(problem(*at)) == WIDE, why
    assert plan_gemm(problem(*below)).algorithm != Algorithm.swapped_256x128, why
    # the given weight copy, where copies_cutlass reads it, and b's buffers off 16-byte alignment take it out too; a
    # copy that copies_cutlass cannot read (an extension built without CUTLASS) does not
    if at[3] >= 1024:  # (the copy is read from COPIES_MIN_REUSE output columns)
        assert plan_gemm(problem(*at)._replace(b_copy=True)).algorithm == Algorithm.copies_cutlass
        assert plan_gemm(problem(*at, cutlass=False)._replace(b_copy=True)) == WIDE
    assert plan_gemm(problem(*at, b_aligned=False)).algorithm != Algorithm.swapped_256x128


def test_pad_ratio_by_hand():
    """pad_ratio: the rows of 256-row tiles over those of 128-row tiles, worked by hand; uneven_rows from
    WIDE_SWAPPED_MIN_PAD_RATIO = 1.04 on."""
    assert _dispatch.pad_ratio([256] * 64) == 1.0
    assert _dispatch.pad_ratio([384]) == 512 / 384
    assert _dispatch.pad_ratio([300, 0, 212, 512]) == (512 + 0 + 256 + 512) / (384 + 0 + 256 + 512)
    assert _dispatch.pad_ratio([129]) == 1.0 and _dispatch.pad_ratio([0, 0]) == 1.0
    # at the bound: 12 whole tiles and one group of 128 rows, 3328 / 3200 = 1.04; with 24 whole tiles 6400 / 6272
    assert _dispatch.uneven_rows([256] * 12 + [128]) and not _dispatch.uneven_rows([256] * 24 + [128])


@pytest.mark.parametrize("kind, e, t, n, k, balanced, with_copy", [
    # E64 dgrad (a contraction N = 1408) and fprop (K = 1408): the pair when balanced; over the weights' fp16 copy
    # where it is given (row 2 before row 1b)
    ("dgrad", 64, 16384, 1408, 2048, "fused_pair_256x256", "copies_cutlass"),
    ("fprop", 64, 16384, 2048, 1408, "fused_pair_256x256", "copies_cutlass"),
    # 1024 rows per group: over the copies of both operands when balanced
    ("dgrad", 64, 65536, 1408, 2048, "copies_cutlass", "copies_cutlass"),
    # a contraction of PAIR_MIN_CONTRACTION; 256 output columns, too few for a copy to be read
    ("dgrad", 2, 1024, 1024, 256, "fused_pair_256x256", "swapped_256x128"),
])
def test_uneven_rows_take_swapped_256x128_below_its_contraction_bound(kind, e, t, n, k, balanced, with_copy):
    """docs/design.md section 6, row 1b: with a contraction from 1024 to 2047, fprop / dgrad run swapped_256x128
    where the groups fill 256-row tiles unevenly (H100, x torch._grouped_mm, swapped_256x128 / the plan by the sizes
    alone, dgrad K2048 N1408 on ragged8 splits: E64 T16384 0.889 / 0.792 (fused_pair_256x256), T65536 0.786 / 0.743
    (copies_cutlass); fprop K1408 N2048 0.930 / 0.826) and keep their plan where the groups fill them (balanced 256
    rows: 0.930 / 0.990). wgrad, whose rows are dW's, is not affected."""
    p = problem(kind, e, t, n, k)
    assert plan_gemm(p).algorithm == Algorithm[balanced]  # balanced: whole 256-row tiles
    assert plan_gemm(p._replace(uneven_rows=False)) == plan_gemm(p)
    assert plan_gemm(p._replace(uneven_rows=True)) == WIDE
    assert plan_gemm(p._replace(uneven_rows=True, b_copy=True)).algorithm == Algorithm[with_copy]
    # below 256 rows per group the rule does not apply
    few = problem(kind, e, e * 255, n, k)._replace(uneven_rows=True)
    assert plan_gemm(few).algorithm != Algorithm.swapped_256x128
    wgrad = problem("wgrad", e, t, n, k)
    assert plan_gemm(wgrad._replace(uneven_rows=True)) == plan_gemm(wgrad)


def test_uneven_rows_need_a_contraction_of_1024():
    """Below PAIR_MIN_CONTRACTION (a contraction N of 1008) uneven groups keep the plan by the sizes."""
    p = problem("dgrad", 2, 1024, 1008, 256)._replace(uneven_rows=True)
    assert plan_gemm(p).algorithm == Algorithm.fused_128x256


def test_unknown_sizes_count_as_balanced_ones():
    """Without host sizes, the plan takes balanced groups of T // E rows below 1024 rows per group: 320 and 384 rows
    fill 256-row tiles unevenly (H100, dgrad E64 K2048 N1408, x torch._grouped_mm: swapped_256x128 0.825 / 0.841
    against fused_pair_256x256 0.735 / 0.770, two runs), 256 and 512 rows fill them. From 1024 rows the copies stay
    (1100 rows: their plan without the rule; swapped_256x128 was not timed against it on balanced groups)."""
    for t in (20480, 24576):
        assert plan_gemm(problem("dgrad", 64, t, 1408, 2048)) == WIDE, t
    for t in (16384, 32768):
        assert plan_gemm(problem("dgrad", 64, t, 1408, 2048)).algorithm == Algorithm.fused_pair_256x256, t
    assert plan_gemm(problem("dgrad", 16, 17600, 1408, 2048)).algorithm == Algorithm.copies_cutlass
