"""SPEC 12.6: the Hopper tensor-core accumulation model, its agreement with H100 measurements, and SPEC 12.4's
bound for it (bf16 operands hold it, fp16 operands with subnormals do not)."""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from oracle.fp4_numpy import decode_e2m1, decode_e4m3, pack_fp4
from oracle.tensor_core import tensor_core_sum, wgmma_k16_step


def _pad(pairs):
    pairs = list(pairs)
    return [p[0] for p in pairs] + [0.0] * (16 - len(pairs)), [p[1] for p in pairs] + [0.0] * (16 - len(pairs))


def _run(steps, operands="fp16"):
    acc = np.float32(0.0)
    for pairs in steps:
        a, b = _pad(pairs)
        acc = wgmma_k16_step(acc, a, b, operands)
    return acc


_T26 = (2.0**-13, 2.0**-13)  # a product of 2^-26
_T30 = (2.0**-15, 2.0**-15)  # a product of 2^-30 (fp16 subnormal operands)

# Measured on an H100 (NVIDIA H100 80GB HBM3, torch 2.11+cu130, triton 3.6.0) with
# tools/probes/probe_wgmma_numerics.py: Triton tl.dot on fp16 operands, one wgmma k16 step per 16 values.
# (probe name, steps, fp32 bits returned by the hardware)
H100_FP16_MEASUREMENTS = [
    ("2^-24 * 2^-24 (subnormal operands)", [[(2.0**-24, 2.0**-24)]], 0x27800000),
    ("3*2^-24 * 5*2^-24", [[(3 * 2.0**-24, 5 * 2.0**-24)]], 0x29700000),
    ("2^-14*2^-14 + 2^-24*2^-24", [[(2.0**-14, 2.0**-14), (2.0**-24, 2.0**-24)]], 0x31800008),
    ("7*2^-24*2^-14 + 2^-24*2^-24", [[(7 * 2.0**-24, 2.0**-14), (2.0**-24, 2.0**-24)]], 0x2DE00800),
    ("[1, -1, 2^-25] one step", [[(1.0, 1.0), (-1.0, 1.0), (2.0**-12, 2.0**-13)]], 0x33000000),
    ("[1, -1, 2^-26] one step", [[(1.0, 1.0), (-1.0, 1.0), _T26]], 0x00000000),
    ("[1, -1, 2^-25, 2^-25] one step", [[(1.0, 1.0), (-1.0, 1.0)] + [(2.0**-12, 2.0**-13)] * 2], 0x33800000),
    ("[1, -1, 2^-26, 2^-26] one step (each addend truncated)", [[(1.0, 1.0), (-1.0, 1.0), _T26, _T26]], 0x00000000),
    ("2^-30 at 0, 1 at 8, -1 at 9", [[_T30] + [(0.0, 0.0)] * 7 + [(1.0, 1.0), (-1.0, 1.0)]], 0x00000000),
    ("step1 2^-30 | step2 1, -1 (C truncated)", [[_T30], [(1.0, 1.0), (-1.0, 1.0)]], 0x00000000),
    ("step1 1 | step2 -1, 2^-25", [[(1.0, 1.0)], [(-1.0, 1.0), (2.0**-12, 2.0**-13)]], 0x33000000),
    ("step1 1 | step2 -1, 2^-26", [[(1.0, 1.0)], [(-1.0, 1.0), _T26]], 0x00000000),
    ("step1 1 | step2 16 x -2^-25", [[(1.0, 1.0)], [(-(2.0**-12), 2.0**-13)] * 16], 0x3F7FFFF8),
    ("one step 1, 15 x -2^-25 (sum rounded toward zero)", [[(1.0, 1.0)] + [(-(2.0**-12), 2.0**-13)] * 15], 0x3F7FFFF8),
    ("step1 1 | step2 16 x -2^-26 (truncated toward zero)", [[(1.0, 1.0)], [(-(2.0**-13), 2.0**-13)] * 16], 0x3F800000),
    ("step1 -1 | step2 16 x +2^-26", [[(-1.0, 1.0)], [_T26] * 16], 0xBF800000),
    ("step1 2^-24 | step2 1", [[(2.0**-12, 2.0**-12)], [(1.0, 1.0)]], 0x3F800000),
    ("step1 3*2^-25 | step2 -1, 1", [[(3 * 2.0**-12, 2.0**-13)], [(-1.0, 1.0), (1.0, 1.0)]], 0x33C00000),
    ("step1 3*2^-26 | step2 -1, 1", [[(3 * 2.0**-13, 2.0**-13)], [(-1.0, 1.0), (1.0, 1.0)]], 0x33000000),
]


@pytest.mark.parametrize("name,steps,bits", H100_FP16_MEASUREMENTS, ids=[m[0] for m in H100_FP16_MEASUREMENTS])
def test_step_model_reproduces_h100_measurements(name, steps, bits):
    got = _run(steps)
    assert int(np.array([got], np.float32).view(np.uint32)[0]) == bits, name


def test_step_rounds_a_subnormal_sum_toward_zero():
    """SPEC 12.6 step 4 below fp32's normal range: one product (1 + 2^-7) 2^-75 * 1.5 2^-75 = 0.7559 * 2^-149 (bf16
    operands, C = 0) is less than fp32's least subnormal, and rounding toward zero gives +0 (to nearest: 2^-149)."""
    a = [(1 + 2.0**-7) * 2.0**-75] + [0.0] * 15
    b = [1.5 * 2.0**-75] + [0.0] * 15
    got = wgmma_k16_step(0.0, a, b, "bf16")
    assert np.array([got], np.float32).view(np.uint32)[0] == 0


def test_step_window_of_a_subnormal_accumulator():
    """SPEC 12.6 step 2: a subnormal C counts as fp32's least normal exponent, -126. Sixteen products (1 + 2^-7)
    2^-70 * (1 + 2^-5) 2^-70 = 4257 * 2^-152 each (e = -140) and C = 2^-149: E = -126, the addends are truncated to
    multiples of 2^-151, each product to 2128 * 2^-151, so D = 16 * 2128 * 2^-151 + 2^-149 = 8513 * 2^-149 (C's own
    exponent, -149, would give E = -140, no truncation and 8515 * 2^-149)."""
    a = [(1 + 2.0**-7) * 2.0**-70] * 16
    b = [(1 + 2.0**-5) * 2.0**-70] * 16
    got = wgmma_k16_step(2.0**-149, a, b, "bf16")
    assert np.array([got], np.float32).view(np.uint32)[0] == 8513  # a subnormal's bits count units of 2^-149


def test_step_rejects_values_outside_the_format():
    with pytest.raises(ValueError, match="not a bf16"):
        wgmma_k16_step(0.0, [1.0 + 2.0**-10] + [0.0] * 15, [1.0] * 16, "bf16")
    with pytest.raises(ValueError, match="16 values"):
        wgmma_k16_step(0.0, [1.0], [1.0], "fp16")
    with pytest.raises(ValueError, match="operands"):
        wgmma_k16_step(0.0, [1.0] * 16, [1.0] * 16, "fp8")


def _heavy_planes(rng, m, n, k):
    """Heavy-tailed operands: most blocks far below the tensor amax, so many scales are tiny or subnormal E4M3."""
    def mat(rows):
        v = rng.standard_normal((rows, k)) * 10.0 ** rng.uniform(-3, 2)
        mask = rng.random((rows, k)) < 0.02
        v[mask] *= 10.0 ** rng.uniform(2, 5, size=int(mask.sum()))
        return v.astype(np.float32)
    return oracle.quantize(mat(m)).row, oracle.quantize(mat(n)).row


@pytest.mark.parametrize("operands", ["bf16", "fp16"])
def test_vectorized_model_equals_step_reference(operands):
    """tensor_core_sum (int64, vectorized) equals wgmma_k16_step (exact fractions) chained over the blocks."""
    rng = np.random.default_rng(7)
    a, b = _heavy_planes(rng, 5, 4, 96)
    got = tensor_core_sum(a, b, operands=operands)
    assert got.tobytes() == _step_reference(a, b, operands).tobytes()


def _step_reference(a, b, operands):
    """tensor_core_sum's result by wgmma_k16_step (exact fractions, SPEC 12.6 as stated), chained over the blocks."""
    va, vb = (decode_e2m1(p.codes()).astype(np.float64) * np.repeat(decode_e4m3(p.scales), 16, axis=1) for p in (a, b))
    out = np.zeros((a.rows, b.rows), np.float32)
    for i in range(a.rows):
        for j in range(b.rows):
            acc = np.float32(0.0)
            for blk in range(a.cols // 16):
                sl = slice(16 * blk, 16 * blk + 16)
                acc = wgmma_k16_step(acc, va[i, sl] * 2.0**-14, vb[j, sl] * 2.0**-14, operands)
            out[i, j] = np.float32(acc * np.float32(2.0**28))
    return out


def _block_scaled_planes(rng, m, n, nblk):
    """Operands whose 16-blocks differ in magnitude by up to 2^+-20 (so the accumulator often outweighs a block, and
    its products lose bits, or a block outweighs the accumulator, which is then truncated), with blocks of B that
    repeat an earlier block negated (partial sums cancel to 0 or near it), zeros, and rows quantized with SR."""
    def mat(rows, pair):
        v = rng.standard_normal((rows, 16 * nblk)) * np.repeat(2.0 ** rng.integers(-20, 21, (rows, nblk)), 16, axis=1)
        v[rng.random(v.shape) < 0.2] = 0.0
        if pair is not None:  # B: some blocks are minus an earlier block of A's row 0
            for blk in range(1, nblk):
                if rng.random() < 0.4:
                    v[:, 16 * blk:16 * blk + 16] = -pair[0, 16 * (blk - 1):16 * blk]
        return v.astype(np.float32)
    va = mat(m, None)
    a = oracle.quantize(va, rounding="sr", seed=int(rng.integers(1 << 30))).row
    b = oracle.quantize(mat(n, va), block=(16, 16)).row
    return a, b


@pytest.mark.parametrize("operands", ["bf16", "fp16"])
@pytest.mark.parametrize("seed", range(3))
def test_vectorized_model_equals_step_reference_when_addends_lose_bits(operands, seed):
    """The vectorized model takes the blocks' plain dot products where no product can lose a bit and sums truncated
    products elsewhere; both branches, and the accumulator truncated by a dominating block, against the step
    reference on operands built to reach them (_block_scaled_planes) and on the heavy-tailed ones."""
    rng = np.random.default_rng(500 + seed)
    for a, b in (_block_scaled_planes(rng, 4, 5, 7), _heavy_planes(rng, 3, 4, 128)):
        got = tensor_core_sum(a, b, operands=operands)
        assert got.tobytes() == _step_reference(a, b, operands).tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_bf16_model_within_bound(seed):
    """SPEC 12.6 claim: with bf16 operands every step meets 12.4 (ii), so the model meets the bound."""
    rng = np.random.default_rng(300 + seed)
    a, b = _heavy_planes(rng, 24, 20, 256)
    for out in ("float32", "bfloat16"):
        yt = oracle.gemm(a, b, model="tensor_core", out_dtype=out)
        ye = oracle.gemm(a, b, model="exact", out_dtype=out)
        assert oracle.within_bound(yt, ye, oracle.gemm_error_bound(a, b, out_dtype=out)).all()


def _two_block_case():
    """Hand-built K = 32 case of SPEC 12.6's fp16 failure. Block 0: one product 1.5*(5*2^-9) x 1*2^-8 = 15*2^-18.
    Block 1: 1*2^-9 x 6*448 = 5.25, whose A operand 2^-9 * 2^-14 = 2^-23 is an fp16 subnormal, so fp16 step 2
    aligns at exponent -14 + -3 (presented) and truncates the accumulator at 2^-14 (true scale): 15*2^-18 -> 0."""
    codes_a = np.zeros((1, 32), np.uint8)
    codes_b = np.zeros((1, 32), np.uint8)
    codes_a[0, 0], codes_b[0, 0] = 0x3, 0x2  # 1.5 and 1.0
    codes_a[0, 16], codes_b[0, 16] = 0x2, 0x7  # 1.0 and 6.0
    a = oracle.QuantizedPlane(pack_fp4(codes_a), np.array([[0x05, 0x01]], np.uint8), np.float32(1.0), (1, 32))
    b = oracle.QuantizedPlane(pack_fp4(codes_b), np.array([[0x02, 0x7E]], np.uint8), np.float32(1.0), (1, 32))
    return a, b


def test_fp16_subnormal_operand_breaks_the_bound_and_bf16_does_not():
    a, b = _two_block_case()
    exact = 5.25 + 15 * 2.0**-18
    assert float(tensor_core_sum(a, b, operands="bf16")[0, 0]) == exact  # every addend kept, sum fits fp32
    assert float(tensor_core_sum(a, b, operands="fp16")[0, 0]) == 5.25  # block 0 truncated away
    ye = oracle.gemm(a, b, alpha=1.0, model="exact", out_dtype="float32")
    bound = oracle.gemm_error_bound(a, b, alpha=1.0, out_dtype="float32")
    y16 = tensor_core_sum(a, b, operands="fp16")
    assert ye[0, 0] == np.float32(exact)
    assert not oracle.within_bound(y16, ye, bound).all()
    assert oracle.within_bound(oracle.gemm(a, b, alpha=1.0, model="tensor_core", out_dtype="float32"), ye, bound).all()


def test_tensor_core_model_epilogue_matches_sequential_epilogue():
    """model="tensor_core" only swaps the accumulator of SPEC 12.2: alpha, C and bias as there."""
    rng = np.random.default_rng(5)
    a, b = _heavy_planes(rng, 6, 5, 64)
    c = rng.standard_normal((6, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    acc = tensor_core_sum(a, b)
    al = oracle.gemm_alpha(a, b)
    want = (((al * acc).astype(np.float32) + c).astype(np.float32) + bias[None, :]).astype(np.float32)
    got = oracle.gemm(a, b, model="tensor_core", out_dtype="float32", accumulate=c, bias=bias)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_tensor_core_sum_errors():
    a, b = _two_block_case()
    with pytest.raises(ValueError, match="operands"):
        tensor_core_sum(a, b, operands="fp8")
    with pytest.raises(ValueError, match="model"):
        oracle.gemm(a, b, model="wgmma")


def _f32_bits(x) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def test_step_subnormal_c_counts_at_exponent_minus_126():
    """SPEC 12.6 step 2: a subnormal C counts with exponent -126. C = 2^-140 and four products 2^-75 * 2^-76 = 2^-151
    (bf16 normals): E = -126, grid 2^-151, every product kept: D = 2^-140 + 2^-149, bits 513 (with E = -125 the grid
    2^-150 would drop them: bits 512)."""
    a, b = _pad([(2.0**-75, 2.0**-76)] * 4)
    assert _f32_bits(wgmma_k16_step(2.0**-140, a, b, "bf16")) == 513


def test_step_rounds_a_subnormal_sum_toward_zero_on_the_fp32_grid():
    """SPEC 12.6 step 4: the product 1.75 * 2^-75 * 2^-74 = 1.75 * 2^-149 with C = 0 rounds toward zero on fp32's grid
    2^-149: bits 1 (a 2^-150 grid would keep 1.5 * 2^-149, which fp32 then rounds to 2^-148: bits 2)."""
    a, b = _pad([(1.75 * 2.0**-75, 2.0**-74)])
    assert _f32_bits(wgmma_k16_step(0.0, a, b, "bf16")) == 1


def test_accumulator_truncated_when_e_rises():
    """SPEC 12.6 step 3 on C, over three k16 blocks of lane-0 products: (4 * 256) (4 * 128) = 2^19; then
    (0.5 * 2^-2) (0.5 * 1) = 2^-4 (E = 19, grid 2^-6: kept, acc = 2^19 + 2^-4, 24 bits); then (-6 * 448) (6 * 448)
    = -7225344, E = 22, grid 2^-3: C is cut to 2^19 and D = -6701056 exactly (an uncut C would give -6701055.9375,
    -6701055.5 after the step's rounding toward zero)."""
    codes_a = [0x6] + [0] * 15 + [0x1] + [0] * 15 + [0xF] + [0] * 15
    codes_b = [0x6] + [0] * 15 + [0x1] + [0] * 15 + [0x7] + [0] * 15
    a = oracle.QuantizedPlane(pack_fp4(np.array([codes_a], np.uint8)), np.array([[0x78, 0x28, 0x7E]], np.uint8),
                              np.float32(1), (1, 48))
    b = oracle.QuantizedPlane(pack_fp4(np.array([codes_b], np.uint8)), np.array([[0x70, 0x38, 0x7E]], np.uint8),
                              np.float32(1), (1, 48))
    assert tensor_core_sum(a, b)[0, 0] == np.float32(-6701056.0)
    assert oracle.gemm(a, b, alpha=np.float32(1), model="tensor_core", out_dtype="float32")[0, 0] == -6701056.0

