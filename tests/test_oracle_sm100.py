"""SPEC 12.7: the Blackwell block-scaled MMA model (``oracle.gemm(model="sm100")``) on hand-worked vectors, its scalar
and vectorized forms against each other, the CUTLASS epilogue, and agreement with mmasim (MMA-Sim's instruction
models, an independent implementation) on random and adversarial operands; SPEC 12.6's tensor-core model against
mmasim's Hopper wgmma model too."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import oracle
from conformance import independent as ind
from conformance.generators import generate
from conformance.ops import OPS, mma_planes, reference
from oracle.fp4_numpy import pack_fp4
from oracle.planes import QuantizedPlane
from oracle.sm100 import _fma_f32, mxf4nvf4_k64_step, sm100_epilogue, sm100_sum
from oracle.tensor_core import tensor_core_sum

# E2M1 codes (SPEC 2.1) and E4M3 scale bytes (SPEC 2.2) used by the vectors
HALF, ONE, THREE_HALVES, TWO, FOUR, SIX = 0x1, 0x2, 0x3, 0x4, 0x6, 0x7
NEG = 0x8
S448, S256, S1, S2M4, S2M9 = 0x7E, 0x78, 0x38, 0x18, 0x01  # 448, 2^8, 1, 2^-4, 2^-9 (subnormal)


def _bits(x) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def _plane(codes, scales) -> QuantizedPlane:
    codes = np.asarray(codes, np.uint8)
    return QuantizedPlane(pack_fp4(codes), np.asarray(scales, np.uint8), np.float32(1.0), codes.shape)


def _steps(*groups_per_step):
    """One row of codes and scale bytes from k64 steps, each a list of up to four groups ``(a_pairs, sa, sb)`` where
    ``a_pairs`` lists ``(code_a, code_b)`` at the group's first positions; returns the A and B planes [1, K]."""
    ca, cb, sa, sb = [], [], [], []
    for step in groups_per_step:
        step = list(step) + [([], 0x00, 0x00)] * (4 - len(step))
        for pairs, s_a, s_b in step:
            pairs = list(pairs) + [(0, 0)] * (16 - len(pairs))
            ca += [p[0] for p in pairs]
            cb += [p[1] for p in pairs]
            sa.append(s_a)
            sb.append(s_b)
    return _plane([ca], [sa]), _plane([cb], [sb])


def _chain(pa: QuantizedPlane, pb: QuantizedPlane) -> np.float32:
    """The scalar step of SPEC 12.7 chained over K (one row of each plane), K padded to a multiple of 64."""
    k = pa.cols
    kp = -(-k // 64) * 64
    ca = np.zeros(kp, np.int64)
    cb = np.zeros(kp, np.int64)
    ca[:k], cb[:k] = pa.codes()[0], pb.codes()[0]
    sa = np.zeros(kp // 16, np.int64)
    sb = np.zeros(kp // 16, np.int64)
    sa[: k // 16], sb[: k // 16] = pa.scales[0], pb.scales[0]
    acc = np.float32(0.0)
    for j in range(kp // 64):
        acc = mxf4nvf4_k64_step(acc, ca[64 * j:64 * j + 64], cb[64 * j:64 * j + 64], sa[4 * j:4 * j + 4],
                                sb[4 * j:4 * j + 4])
    return acc


def _both(pa, pb) -> int:
    """The result bits of the vectorized model, checked equal to the scalar chain."""
    v = sm100_sum(pa, pb)[0, 0]
    s = _chain(pa, pb)
    assert _bits(v) == _bits(s) or (np.isnan(v) and np.isnan(s))
    return _bits(v)


# ---------------------------------------------------------------------------------------------------------------
# hand-worked vectors of one step and of chains (SPEC 12.7)
# ---------------------------------------------------------------------------------------------------------------

def test_window_is_35_bits_below_the_largest_exponent():
    # step 1: 16 x 6 * 6 with scales 448, 448: C = 576 * 448^2 = 441 * 2^18 (exact), e(C) = 26
    # step 2: its negation (E_g = 8 + 8 = 16) and 0.5 * 1.5 with scales 2^-4, 2^-4: 3 * 2^-10 (E_g = -8).
    # E = 26, so every addend is cut to a multiple of 2^(26 - 35) = 2^-9: 3 * 2^-10 -> 2^-9; the sum is 2^-9.
    big = [(SIX, SIX)] * 16
    pa, pb = _steps([(big, S448, S448)],
                    [([(SIX | NEG, SIX)] * 16, S448, S448), ([(HALF, THREE_HALVES)], S2M4, S2M4)])
    assert _both(pa, pb) == _bits(2.0**-9)  # (a window of 34 bits gives 0, of 36 bits 3 * 2^-10, exact too)


def test_a_group_whose_products_cancel_sets_the_window_a_zero_group_does_not():
    tiny = ([(HALF, HALF)], S2M9, S2M9)  # 0.25 * 2^-9 * 2^-9 = 2^-20 (E_g = -6 - 6 = -12)
    cancel = ([(ONE, ONE), (ONE, ONE | NEG)], S448, S448)  # products 1, -1: P = 0 but E_g = 16
    pa, pb = _steps([cancel, tiny])
    assert _both(pa, pb) == 0x00000000  # E = 16: 2^-20 cut at 2^-19
    zero_codes = ([], S448, S448)  # no nonzero product: a zero group (E = -139)
    pa, pb = _steps([zero_codes, tiny])
    assert _both(pa, pb) == _bits(2.0**-20)
    zero_scale = ([(ONE, ONE)] * 16, 0x00, S448)  # a zero scale: a zero group too
    pa, pb = _steps([zero_scale, tiny])
    assert _both(pa, pb) == _bits(2.0**-20)


def test_a_negative_addend_truncated_to_zero_gives_plus_zero():
    cancel = ([(ONE, ONE), (ONE, ONE | NEG)], S448, S448)
    pa, pb = _steps([cancel, ([(HALF, HALF | NEG)], S2M9, S2M9)])  # -2^-20 cut to -0: the result is +0
    assert _both(pa, pb) == 0x00000000


def test_the_sum_is_rounded_toward_zero():
    # step 1: 16 x 4 * 4 with scales 2^8, 2^8: 2^24; step 2: 1.5 * 2 with scales 1, 1: 3. 2^24 + 3 needs 25 bits:
    # toward zero 2^24 + 2 (round to nearest would give 2^24 + 4); negated, -(2^24 + 2).
    for sign in (0, NEG):
        pa, pb = _steps([([(FOUR | sign, FOUR)] * 16, S256, S256)], [([(THREE_HALVES | sign, TWO)], S1, S1)])
        want = 2.0**24 + 2
        assert _both(pa, pb) == _bits(-want if sign else want)


def test_scales_are_unsigned_and_nan_bytes_poison_the_row():
    pa, pb = _steps([([(ONE, ONE)], S1 | 0x80, S1)])  # UE4M3: the sign bit is ignored
    assert _both(pa, pb) == _bits(1.0)
    for nan in (0x7F, 0xFF):  # a NaN scale, even on a zero group, makes the step (and the rest) NaN
        pa, pb = _steps([([(ONE, ONE)], S1, S1), ([], nan, S1)], [([(ONE, ONE)], S1, S1)])
        assert math.isnan(sm100_sum(pa, pb)[0, 0]) and math.isnan(_chain(pa, pb))


def test_tiny_and_huge_scale_products():
    # 6 * 6 with scales 448 and 2^-9 (subnormal): 36 * 0.875 = 31.5; 0.5 * 0.5 with 2^-9 and 2^-8 (subnormals): 2^-19.
    # E = e(448) + e(2^-9) = 8 - 6 = 2: the window reaches 2^-33, nothing is cut; 31.5 + 2^-19 has 24 bits
    pa, pb = _steps([([(SIX, SIX)], S448, S2M9), ([(HALF, HALF)], S2M9, 0x02)])
    assert _both(pa, pb) == _bits(31.5 + 2.0**-19)
    # with 2^-20 instead the sum needs 25 bits: rounded toward zero, 31.5
    pa, pb = _steps([([(SIX, SIX)], S448, S2M9), ([(HALF, HALF)], S2M9, S2M9)])
    assert _both(pa, pb) == _bits(31.5)


def test_k_that_is_not_a_multiple_of_64_is_padded_with_zero_groups():
    rng = np.random.default_rng(3)
    for k in (16, 48, 80, 208):
        ca, cb = rng.integers(0, 16, (3, k)), rng.integers(0, 16, (2, k))
        sa, sb = rng.integers(0, 0x7F, (3, k // 16)), rng.integers(0, 0x7F, (2, k // 16))
        extra = -(-k // 64) * 64 - k
        short = sm100_sum(_plane(ca, sa), _plane(cb, sb))
        padded = sm100_sum(_plane(np.pad(ca, ((0, 0), (0, extra))), np.pad(sa, ((0, 0), (0, extra // 16)))),
                           _plane(np.pad(cb, ((0, 0), (0, extra))), np.pad(sb, ((0, 0), (0, extra // 16)))))
        assert np.array_equal(short.view(np.uint32), padded.view(np.uint32))


def test_vectorized_model_equals_the_scalar_steps_on_random_planes():
    rng = np.random.default_rng(7)
    for _ in range(60):
        k = 16 * int(rng.integers(1, 13))
        ca, cb = rng.integers(0, 16, (1, k)), rng.integers(0, 16, (1, k))
        mode = rng.integers(3)
        hi = 0x100 if mode == 0 else 0x7F
        sa, sb = rng.integers(0, hi, (1, k // 16)), rng.integers(0, hi, (1, k // 16))
        if mode == 2 and k >= 32:  # cancelling group pairs with huge scales
            ca[0, 16:32], cb[0, 16:32], sa[0, 1], sb[0, 1], sa[0, 0], sb[0, 0] = ca[0, :16] ^ 8, cb[0, :16], 0x7E, 0x7E, 0x7E, 0x7E
        _both(_plane(ca, sa), _plane(cb, sb))


def test_the_accumulator_stays_a_normal_multiple_of_2_to_the_minus_20():
    rng = np.random.default_rng(11)
    ca, cb = rng.integers(0, 16, (8, 512)), rng.integers(0, 16, (8, 512))
    sa, sb = rng.integers(0, 0x7F, (8, 32)), rng.integers(0, 0x7F, (8, 32))
    acc = sm100_sum(_plane(ca, sa), _plane(cb, sb)).astype(np.float64)
    assert np.all(np.ldexp(acc, 20) == np.round(np.ldexp(acc, 20)))
    assert not np.any(np.signbit(acc) & (acc == 0))


def test_k_of_8192_steps_or_more_raises():
    codes = np.zeros((1, 64 * (1 << 13)), np.uint8)
    p = _plane(codes, np.zeros((1, 4 << 13), np.uint8))
    with pytest.raises(ValueError, match="too large"):
        sm100_sum(p, p)


# ---------------------------------------------------------------------------------------------------------------
# the epilogue (SPEC 12.7)
# ---------------------------------------------------------------------------------------------------------------

def _fma_exact(a, b, c) -> float:
    v = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    return ind.round_fraction(v, "float32") if v != 0 else 0.0


def test_fma_is_one_rounding():
    rng = np.random.default_rng(5)
    f = np.float32
    a = (rng.standard_normal(4000) * np.exp2(rng.integers(-60, 60, 4000))).astype(np.float32)
    b = (rng.standard_normal(4000) * np.exp2(rng.integers(-60, 60, 4000))).astype(np.float32)
    c = (-(a.astype(np.float64) * b) * (1 + rng.choice([0, 2.0**-24, -(2.0**-25), 2.0**-30], 4000))).astype(np.float32)
    c[::7] = rng.standard_normal(c[::7].size).astype(np.float32) * f(2.0**-140)  # subnormal addends and results
    got = _fma_f32(a, b, c)
    want = np.array([_fma_exact(x, y, z) for x, y, z in zip(a, b, c, strict=True)], np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # an exact tie: (1 + 2^-12)^2 - 2^-11 = 1 + 2^-24, halfway between 1 and 1 + 2^-23: to even, 1
    assert _bits(_fma_f32(f(1 + 2.0**-12), f(1 + 2.0**-12), f(-(2.0**-11)))) == _bits(f(1.0))
    # a sum just below the midpoint 1 + 3 * 2^-24 whose float64 rounding is that midpoint (a float64 sum then a
    # cast would round twice, to 1 + 2^-22): one rounding gives 1 + 2^-23
    a, b, c = (np.uint32(v).view(np.float32) for v in (0x33800048, 0x3F7FFF70, 0x3F800001))
    assert _fma_exact(a, b, c) == 1 + 2.0**-23 and _bits(f(float(a) * float(b) + float(c))) == 0x3F800002
    assert _bits(_fma_f32(a, b, c)) == 0x3F800001
    # signed zeros as IEEE's fusedMultiplyAdd: -0 only from -0 + -0
    assert _bits(_fma_f32(f(-1), f(0), f(-0.0))) == 0x80000000
    assert _bits(_fma_f32(f(-1), f(0), f(0.0))) == 0x00000000
    assert _bits(_fma_f32(f(2), f(3), f(-6))) == 0x00000000
    assert np.isnan(_fma_f32(f(np.inf), f(0), f(1))) and _fma_f32(f(np.inf), f(2), f(1)) == np.inf


def test_the_fused_bias_is_rounded_once():
    # acc = 2^22 + 1 (one step: 16 x 2 * 2 with scales 2^8, 2^8 and 1 * 1 with scales 1, 1), alpha = 1 + 2^-23,
    # bias = -2^22: alpha * acc + bias = 1.5 + 2^-23 exactly (fp32); 12.2 rounds alpha * acc to 2^22 + 1.5 first: 1.5
    pa, pb = _steps([([(TWO, TWO)] * 16, S256, S256), ([(ONE, ONE)], S1, S1)])
    assert sm100_sum(pa, pb)[0, 0] == 2.0**22 + 1
    alpha, bias = np.float32(1 + 2.0**-23), np.array([-(2.0**22)], np.float32)
    y = oracle.gemm(pa, pb, model="sm100", alpha=alpha, bias=bias, out_dtype="float32")
    seq = oracle.gemm(pa, pb, model="sequential", alpha=alpha, bias=bias, out_dtype="float32")
    assert _bits(y[0, 0]) == _bits(1.5 + 2.0**-23) and _bits(seq[0, 0]) == _bits(1.5)


def test_overwrite_turns_minus_zero_into_plus_zero_accumulate_keeps_c():
    f = np.float32
    pa, pb = _steps([([], S1, S1)])  # acc = +0
    y = oracle.gemm(pa, pb, model="sm100", alpha=f(-1.0), out_dtype="float32")
    seq = oracle.gemm(pa, pb, model="sequential", alpha=f(-1.0), out_dtype="float32")
    assert _bits(y[0, 0]) == 0x00000000 and _bits(seq[0, 0]) == 0x80000000
    pa, pb = _steps([([(HALF, HALF | NEG)], S2M9, S2M9)])  # acc = -2^-20; alpha * acc underflows to -0
    y = oracle.gemm(pa, pb, model="sm100", alpha=f(2.0**-140), out_dtype="float32")
    assert _bits(y[0, 0]) == 0x00000000
    c = np.array([[-0.0]], np.float32)  # beta = 1: -0 + -0 stays -0, as in 12.2
    pa, pb = _steps([([], S1, S1)])
    y = oracle.gemm(pa, pb, model="sm100", alpha=f(-1.0), accumulate=c, out_dtype="float32")
    assert _bits(y[0, 0]) == 0x80000000
    # a bias without C: RN(alpha * acc + bias) in one step keeps -0 (-1 * +0 + -0), no "+0 + z" there
    y = oracle.gemm(pa, pb, model="sm100", alpha=f(-1.0), bias=np.array([-0.0], np.float32), out_dtype="float32")
    assert _bits(y[0, 0]) == 0x80000000
    # with a bias and C: RN(C + RN(alpha * acc + bias))
    acc = np.array([[3.0]], np.float32)
    y = sm100_epilogue(acc, f(1 + 2.0**-23), c=np.array([[2.0**30]], np.float32), bias=np.array([-3.0], np.float32))
    assert _bits(y[0, 0]) == _bits(f(2.0**30))  # (3 * 2^-23 vanishes in C's rounding, after the fused step)
    # C = 1 tells the orders apart: the fused step gives exactly 3 * 2^-23 and C + z = 1 + 3 * 2^-23 is exact;
    # 12.2's order rounds alpha * acc = 3 + 3 * 2^-23 (1.5 ulps of 3, a tie) to 3 + 2^-21, so 1 + 2^-21 after C, bias
    y = sm100_epilogue(acc, f(1 + 2.0**-23), c=np.array([[1.0]], np.float32), bias=np.array([-3.0], np.float32))
    assert _bits(y[0, 0]) == _bits(f(1 + 3 * 2.0**-23))
    y = sm100_epilogue(acc, f(1 + 2.0**-23), bias=np.array([-3.0], np.float32))
    assert _bits(y[0, 0]) == _bits(f(3 * 2.0**-23))


def test_model_name_is_checked_and_grouped_gemm_takes_sm100():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 64)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((3 * 32, 64)).astype(ml_dtypes.bfloat16)
    xq = oracle.group_quantize(x, [7, 0, 33])
    wq = oracle.group_quantize(w, [32, 32, 32], block=(16, 16))
    bias = rng.standard_normal((3, 32)).astype(np.float32)
    y = oracle.grouped_gemm(xq, wq, kind="fprop", model="sm100", bias=bias)
    want = np.concatenate([oracle.gemm(xq.row_planes[g], wq.row_planes[g], model="sm100", bias=bias[g])
                           for g in range(3)])
    assert np.array_equal(np.asarray(y).view(np.uint16), want.view(np.uint16))
    with pytest.raises(ValueError, match="sm100"):
        oracle.gemm(xq.row_planes[0], wq.row_planes[0], model="blackwell")


def test_sm100_differs_from_sequential_on_heavy_tailed_operands_and_meets_the_bound():
    rng = np.random.default_rng(0)
    a = rng.standard_t(1, (32, 2048)).astype(np.float32)  # Cauchy: 16-blocks of very different scales
    b = rng.standard_t(1, (24, 2048)).astype(np.float32)
    pa, pb = oracle.quantize(a).row, oracle.quantize(b).row
    for out_dtype in ("float32", "bfloat16"):
        y = oracle.gemm(pa, pb, model="sm100", out_dtype=out_dtype)
        seq = oracle.gemm(pa, pb, model="sequential", out_dtype=out_dtype)
        if out_dtype == "float32":  # truncation in k64 steps is not 12.2's fp32 rounding per 16-block
            assert (y != seq).mean() > 0.1
        exact = oracle.gemm(pa, pb, model="exact", out_dtype=out_dtype)
        bound = oracle.gemm_error_bound(pa, pb, out_dtype=out_dtype)
        assert oracle.within_bound(y, exact, bound).all()  # SPEC 12.7's claim


# ---------------------------------------------------------------------------------------------------------------
# mmasim (MMA-Sim's instruction models): an independent implementation of the same steps
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mmasim():
    pytest.importorskip("torch")
    pytest.importorskip("mmasim")
    return ind.import_mmasim()


def _mmasim_unpadded(pa: QuantizedPlane, pb: QuantizedPlane):
    """mmasim's tcgen05 model over the whole K in one ``dpa`` call (its own k64 loop; a K that is not a multiple of
    64 ends with a shorter step there, no padding)."""
    import torch

    tcgen05, _ = ind.import_mmasim()
    op = tcgen05("Blackwell", ind.TCGEN05_NVF4)
    m, n = pa.rows, pb.rows
    swap = lambda d: torch.from_numpy(((d & 0x0F) << 4) | (d >> 4))  # noqa: E731  (mmasim: high nibble first)
    a = swap(pa.data)[:, None, :].expand(m, n, -1)
    b = swap(pb.data)[None, :, :].expand(m, n, -1)
    sa = torch.from_numpy(pa.scales).view(torch.float8_e4m3fn)[:, None, :].expand(m, n, -1)
    sb = torch.from_numpy(pb.scales).view(torch.float8_e4m3fn)[None, :, :].expand(m, n, -1)
    return op.dpa(a, b, torch.zeros((m, n), dtype=torch.float32), sa, sb).numpy()


def _same(x, y) -> bool:
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    return bool(np.all((x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))))


def test_hand_vectors_agree_with_mmasim(mmasim):
    big = [(SIX, SIX)] * 16
    cancel = ([(ONE, ONE), (ONE, ONE | NEG)], S448, S448)
    vectors = [
        _steps([(big, S448, S448)], [([(SIX | NEG, SIX)] * 16, S448, S448), ([(HALF, THREE_HALVES)], S2M4, S2M4)]),
        _steps([cancel, ([(HALF, HALF)], S2M9, S2M9)]),
        _steps([([], S448, S448), ([(HALF, HALF)], S2M9, S2M9)]),
        _steps([cancel, ([(HALF, HALF | NEG)], S2M9, S2M9)]),
        _steps([([(FOUR | NEG, FOUR)] * 16, S256, S256)], [([(THREE_HALVES | NEG, TWO)], S1, S1)]),
        _steps([([(ONE, ONE)], S1 | 0x80, S1)]),
        _steps([([(ONE, ONE)], S1, S1), ([], 0xFF, S1)]),
    ]
    for pa, pb in vectors:
        ours = sm100_sum(pa, pb)
        assert _same(ours, ind.mmasim_tcgen05_nvf4(pa.data, pa.scales, pb.data, pb.scales))
        assert _same(ours, _mmasim_unpadded(pa, pb))


def test_sm100_agrees_with_mmasim_on_random_planes_without_padding(mmasim):
    rng = np.random.default_rng(17)
    for i in range(40):
        m, n, k = int(rng.integers(1, 6)), int(rng.integers(1, 6)), 16 * int(rng.integers(1, 20))
        hi = 0x100 if i % 2 else 0x7F
        pa = _plane(rng.integers(0, 16, (m, k)), rng.integers(0, hi, (m, k // 16)))
        pb = _plane(rng.integers(0, 16, (n, k)), rng.integers(0, hi, (n, k // 16)))
        assert _same(sm100_sum(pa, pb), _mmasim_unpadded(pa, pb)), i


def test_sm100_agrees_with_mmasim_on_quantized_operands(mmasim):
    rng = np.random.default_rng(23)
    for kind in ("normal", "heavy"):
        a = rng.standard_normal((16, 256)).astype(np.float32)
        b = rng.standard_normal((8, 256)).astype(np.float32)
        if kind == "heavy":
            a = (rng.standard_t(1.5, a.shape) * np.exp(rng.uniform(-6, 6, (16, 1)))).astype(np.float32)
            b = (rng.standard_t(1.5, b.shape) * np.exp(rng.uniform(-6, 6, (8, 1)))).astype(np.float32)
        pa, pb = oracle.quantize(a).row, oracle.quantize(b, block=(16, 16)).row
        assert _same(sm100_sum(pa, pb), ind.mmasim_tcgen05_nvf4(pa.data, pa.scales, pb.data, pb.scales))


@pytest.mark.parametrize("op", ["mma_sm100", "mma_tc"])
def test_models_agree_with_mmasim_on_adversarial_cases(mmasim, op):
    """The conformance generator's adversarial planes (exponent spread, cancellation, zero groups, tiny and huge scale
    products, NaN and signed scale bytes) through the mmasim backend: accumulators and the sm100 epilogue."""
    from conformance.backends import make_backend
    from conformance.compare import compare

    be = make_backend("mmasim")
    seen = set()
    for i in range(40 if op == "mma_sm100" else 20):
        c = generate(op, 19, i, OPS[op].generator, OPS[op].space)
        seen.add(c.tags["codes"])
        ms = compare(c, reference(c), be.run(op, c), OPS[op].mode)
        assert not ms, (i, c.tags, [str(x) for x in ms])
    assert len(seen) >= 4


def test_tensor_core_agrees_with_mmasim_wgmma_in_both_operand_formats(mmasim):
    rng = np.random.default_rng(29)
    for i in range(12):
        m, n, k = int(rng.integers(1, 6)), int(rng.integers(1, 6)), 16 * int(rng.integers(1, 9))
        pa = _plane(rng.integers(0, 16, (m, k)), rng.integers(0, 0x100, (m, k // 16)))
        pb = _plane(rng.integers(0, 16, (n, k)), rng.integers(0, 0x100, (n, k // 16)))
        for operands in ("bf16", "fp16"):
            got = ind.mmasim_wgmma(pa.data, pa.scales, pb.data, pb.scales, operands)
            assert _same(tensor_core_sum(pa, pb, operands=operands), got), (i, operands)


def test_the_mmasim_backend_catches_a_wrong_window(mmasim, monkeypatch):
    """A model with a window of 34 or 36 bits is caught on the adversarial cases (the comparison is sharp)."""
    import oracle.sm100 as sm100
    from conformance.backends import make_backend
    from conformance.compare import compare

    be = make_backend("mmasim")
    cases = [generate("mma_sm100", 5, i, "mma", OPS["mma_sm100"].space) for i in range(60)]
    outs = [be.run("mma_sm100", c) for c in cases]
    for window in (34, 36):
        monkeypatch.setattr(sm100, "WINDOW", window)
        assert any(compare(c, reference(c), o, "bytes") for c, o in zip(cases, outs, strict=True)), window


def test_mma_planes_hold_the_case_bytes():
    c = generate("mma_sm100", 1, 3, "mma", OPS["mma_sm100"].space)
    pa, pb = mma_planes(c)
    assert pa.data is c.arrays["a_data"] and pb.scales is c.arrays["b_scales"] and pa.cols == 2 * pa.data.shape[1]


# ---------------------------------------------------------------------------------------------------------------
# one step with a given C, and the epilogue next to a midpoint (SPEC 12.7)

STEP_VECTORS = {
    # four zero groups (E_g = -139) and C = 2^-115 (1 + 2^-23): E = E_C = -115, grid 2^-150: D = C bit for bit
    "zero_groups_keep_a_tiny_c": (np.float32(2.0**-115 * (1 + 2.0**-23)), [0] * 64, [0] * 64, [S1] * 4, [S1] * 4,
                                  np.float32(2.0**-115 * (1 + 2.0**-23))),
    # group 0 = 1 * 1 + 1 * (-1) = 0 (cancelling products: not a zero group) with both scales 2^-9 (subnormal, e = -6):
    # E_0 = -12 > E_C = -40 for C = 2^-40 + 2^-48: grid 2^-47, D = 2^-40 (e = -7 would give grid 2^-48 and D = C)
    "subnormal_scales_at_exponent_minus_6": (np.float32(2.0**-40 + 2.0**-48), [ONE, ONE] + [0] * 62,
                                             [ONE, ONE | NEG] + [0] * 62, [S2M9, S1, S1, S1], [S2M9, S1, S1, S1],
                                             np.float32(2.0**-40)),
    # sA = 448, sB = 0 with 16 products 1 * 1: a zero group (E = -139); C = 2^-20 + 2^-40: E = -20, grid 2^-55,
    # D = C (counting the group at exponent 8 - 6 = 2 would give grid 2^-33 and D = 2^-20)
    "one_zero_scale_is_a_zero_group": (np.float32(2.0**-20 + 2.0**-40), [ONE] * 16 + [0] * 48, [ONE] * 16 + [0] * 48,
                                       [S448, S1, S1, S1], [0x00, S1, S1, S1], np.float32(2.0**-20 + 2.0**-40)),
}


@pytest.mark.parametrize("name", list(STEP_VECTORS))
def test_step_with_a_given_c_hand_worked(name):
    c, ca, cb, sa, sb, want = STEP_VECTORS[name]
    assert _bits(mxf4nvf4_k64_step(c, ca, cb, sa, sb)) == _bits(want)


@pytest.mark.parametrize("name", list(STEP_VECTORS))
def test_step_with_a_given_c_agrees_with_mmasim(mmasim, name):
    import torch

    c, ca, cb, sa, sb, want = STEP_VECTORS[name]
    op = mmasim[0]("Blackwell", ind.TCGEN05_NVF4)

    def packed(codes):  # SPEC 2.3's bytes, nibbles swapped for mmasim (high nibble first)
        d = pack_fp4(np.array([codes], np.uint8))
        return torch.from_numpy(((d & 0x0F) << 4) | (d >> 4))

    def scales(v):
        return torch.from_numpy(np.array([v], np.uint8)).view(torch.float8_e4m3fn)

    d = op(packed(ca), packed(cb).T, torch.tensor([[float(c)]], dtype=torch.float32), scales(sa), scales(sb).T)
    assert _bits(d.numpy()[0, 0]) == _bits(want)


def _lane0(blocks) -> QuantizedPlane:
    """A 1-row plane of 16-blocks given as (lane-0 code, scale byte), the other lanes zero."""
    return _plane([[c for code, _ in blocks for c in [code] + [0] * 15]], [[sc for _, sc in blocks]])


@pytest.mark.parametrize("case", ["inexact_low_part", "odd_estimate_next_to_a_midpoint"])
def test_fused_bias_is_one_rounding_next_to_a_midpoint(case):
    """SPEC 12.7's epilogue with a bias and no C: y = RN(alpha * acc + bias), one rounding.
    inexact_low_part: acc = 1 + 2^-12 (1 * 1 + (1 * 2^-6) (1 * 2^-6)), alpha = 1 + 2^-12: alpha * acc = 1 + 2^-11 +
      2^-24, an fp32 midpoint, and the bias 2^-80 lifts v above it: y = 1 + 2^-11 + 2^-23.
    odd_estimate_next_to_a_midpoint: acc = 1.5 * 2 = 3, alpha = 1 + 2^-23: 3 + 1.5 * 2^-22 is the midpoint between
      3 + 2^-22 and 3 + 2^-21, and the bias -(2^-51 - 2^-75) puts v below it: y = 3 + 2^-22.
    Both checked against an exact rounding of the fraction."""
    if case == "inexact_low_part":
        a = b = _lane0([(ONE, S1), (ONE, 0x08)])  # 0x08: 2^-6
        alpha, bias, acc, want = 1 + 2.0**-12, 2.0**-80, 1 + 2.0**-12, 1 + 2.0**-11 + 2.0**-23
    else:
        a, b = _lane0([(THREE_HALVES, S1)]), _lane0([(TWO, S1)])
        alpha, bias, acc, want = 1 + 2.0**-23, -(2.0**-51 - 2.0**-75), 3.0, 3 + 2.0**-22
    assert float(np.float32(alpha)) == alpha and float(np.float32(bias)) == bias
    assert ind.round_fraction(Fraction(alpha) * Fraction(acc) + Fraction(bias), "float32") == want
    y = oracle.gemm(a, b, alpha=np.float32(alpha), model="sm100", out_dtype="float32",
                    bias=np.array([bias], np.float32))
    assert y[0, 0] == np.float32(want)


def test_accumulating_epilogue_rounds_alpha_times_acc_first():
    """SPEC 12.7's epilogue with C and no bias: z = RN(alpha * acc), then y = RN(C + z). acc = 3, alpha = 1 + 2^-23:
    3 + 1.5 * 2^-22 ties to 3 + 2^-21 (even); C = -3 gives y = 2^-21 (one fused rounding would give 3 * 2^-23)."""
    y = oracle.gemm(_lane0([(THREE_HALVES, S1)]), _lane0([(TWO, S1)]), alpha=np.float32(1 + 2.0**-23), model="sm100",
                    out_dtype="float32", accumulate=np.array([[-3.0]], np.float32))
    assert y[0, 0] == np.float32(2.0**-21)


@pytest.mark.parametrize("bias, want_negative", [(0.0, False), (-0.0, True)])
def test_sm100_epilogue_zero_sum_of_a_negative_zero_product_and_a_zero_bias(bias, want_negative):
    """SPEC 12.7 with a bias, fused: alpha * acc + bias with alpha * acc = -0: IEEE gives -0 only when the bias is
    also -0 (-0 + +0 = +0)."""
    acc = np.array([[-0.0]], np.float32)
    y = ind.sm100_epilogue_by_hand(acc, np.float32(1.0), c=None, bias=np.array([bias], np.float32),
                                   out_dtype="float32")
    assert y[0, 0] == 0 and bool(np.signbit(y[0, 0])) == want_negative
    z = oracle.sm100.sm100_epilogue(acc, np.float32(1.0), bias=np.array([bias], np.float32))
    assert z[0, 0] == 0 and bool(np.signbit(z[0, 0])) == want_negative
