"""oracle.grouped_gemm (SPEC 12.5): per group exactly oracle.gemm on that group's planes, in the device's output
layout; empty experts; wgrad's C untouched bit for bit; disagreeing groups raise (the device writes NaN there)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import oracle
from conformance.generators import generate
from conformance.ops import reference

BF16 = ml_dtypes.bfloat16
SPLITS = [5, 0, 37, 16, 0]


def _operands(kind, n=48, k=64, seed=0):
    rng = np.random.default_rng(seed)
    t = sum(SPLITS)
    e = len(SPLITS)
    x = rng.standard_normal((t, k)).astype(BF16)
    dy = rng.standard_normal((t, n)).astype(BF16)
    w = (rng.standard_normal((e * n, k)) * 0.1).astype(BF16)
    wq = oracle.group_quantize(w, [n] * e, columnwise=True, block=(16, 16))
    if kind == "fprop":
        return oracle.group_quantize(x, SPLITS), wq
    if kind == "dgrad":
        return oracle.group_quantize(dy, SPLITS), wq
    return (oracle.group_quantize(dy, SPLITS, columnwise=True, rht=True),
            oracle.group_quantize(x, SPLITS, rowwise=False, columnwise=True, rht=True))


@pytest.mark.parametrize("model", ["sequential", "tensor_core"])
def test_fprop_and_dgrad_are_per_group_gemms_in_row_order(model):
    rng = np.random.default_rng(1)
    offs = np.concatenate([[0], np.cumsum(SPLITS)])
    for kind, cols in (("fprop", 48), ("dgrad", 64)):
        a, b = _operands(kind)
        bias = rng.standard_normal((len(SPLITS), cols)).astype(np.float32)
        y = oracle.grouped_gemm(a, b, kind=kind, model=model, bias=bias)
        assert y.dtype == BF16 and y.shape == (sum(SPLITS), cols)
        for g in range(len(SPLITS)):
            wp = b.row_planes[g] if kind == "fprop" else b.col_planes[g]
            want = oracle.gemm(a.row_planes[g], wp, model=model, bias=bias[g])
            assert y[offs[g]:offs[g + 1]].tobytes() == np.asarray(want).tobytes(), (kind, g)


def test_wgrad_stacks_groups_and_keeps_c_of_empty_experts():
    a, b = _operands("wgrad")
    e = len(SPLITS)
    c = np.random.default_rng(2).standard_normal((e, 48, 64)).astype(np.float32)
    c[1, 0, 0] = -0.0  # an empty expert's C: returned bit for bit (SPEC 12.5), not +0 + -0 = +0
    y = oracle.grouped_gemm(a, b, kind="wgrad", accumulate=c)
    assert y.dtype == np.float32 and y.shape == (e, 48, 64)
    for g in range(e):
        if SPLITS[g] == 0:
            assert y[g].tobytes() == c[g].tobytes()
        else:
            want = oracle.gemm(a.col_planes[g], b.col_planes[g], out_dtype="float32", accumulate=c[g])
            assert y[g].tobytes() == want.tobytes()
    y0 = oracle.grouped_gemm(a, b, kind="wgrad")
    assert not y0[1].view(np.uint32).any() and not y0[4].view(np.uint32).any()  # no C: alpha * +0 = +0 (SPEC 12.2)


def test_equals_the_conformance_reference_on_fuzz_cases():
    """The conformance runner's device reference (conformance/ops.py, its own per-group assembly) on agreeing cases,
    operands under the TE rule and under rule "torchao" (SPEC 12.1's alpha of each)."""
    compared, rules = set(), set()
    for i in range(12):
        c = generate("grouped_gemm_exact", 41, i, "grouped_gemm", {"groups_agree": [True], "operand_quant": ["default"]})
        o, arr = c.options, c.arrays
        if "c" in arr:
            continue
        splits = arr["splits"]
        e = splits.size
        n = arr["w"].shape[0] // e
        # (operand_rules: both operands under the TE rule or both under one torchao rule, SPEC 12.1)
        rule = o["quant_a"]["rule"]
        assert o["quant_b"]["rule"] == rule
        rules.add(rule)
        rht = dict(rht=bool(o["rht"]), rht_signs=int(o["rht_signs"]), rule=rule)
        if o["kind"] == "fprop":
            a = oracle.group_quantize(arr["x"], splits, rule=rule)
            b = oracle.group_quantize(arr["w"], [n] * e, block=(16, 16), rule=rule)
        elif o["kind"] == "dgrad":
            a = oracle.group_quantize(arr["dy"], splits, columnwise=True, **rht)
            b = oracle.group_quantize(arr["w"], [n] * e, columnwise=True, block=(16, 16), rule=rule)
        else:
            a = oracle.group_quantize(arr["dy"], splits, columnwise=True, **rht)
            b = oracle.group_quantize(arr["x"], splits, rowwise=False, columnwise=True, **rht)
        y = oracle.grouped_gemm(a, b, kind=o["kind"], out_dtype=o["out_dtype"], bias=arr.get("bias"))
        ref = np.asarray(reference(c)["y"])
        assert np.asarray(y).astype(np.float32).tobytes() == ref.astype(np.float32).tobytes(), i
        compared.add(o["kind"])
    assert compared == {"fprop", "dgrad", "wgrad"} and rules == {"te", "torchao"}


def test_disagreeing_groups_and_bad_calls_raise():
    a, b = _operands("fprop")
    w = oracle.group_quantize(np.zeros((5 * 48, 64), np.float32), [56, 40, 48, 48, 48])
    with pytest.raises(ValueError, match="group 0 has 56 rows, not N=48"):
        oracle.grouped_gemm(a, w, kind="fprop")
    dy, x = _operands("wgrad")
    x2 = oracle.group_quantize(np.zeros((58, 64), np.float32), [5, 1, 36, 16, 0], rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match="disagree"):
        oracle.grouped_gemm(dy, x2, kind="wgrad")
    with pytest.raises(ValueError, match="kind"):
        oracle.grouped_gemm(a, b, kind="xgrad")
    with pytest.raises(TypeError, match="GroupedNVFP4Tensor"):
        oracle.grouped_gemm(a.row_planes[0], b)
    with pytest.raises(ValueError, match="columnwise plane"):
        oracle.grouped_gemm(a, oracle.group_quantize(np.zeros((240, 64), np.float32), [48] * 5), kind="dgrad")
    with pytest.raises(ValueError, match="no bias"):
        oracle.grouped_gemm(dy, x, kind="wgrad", bias=np.zeros((5, 48), np.float32))
    with pytest.raises(ValueError, match="wgrad only"):
        oracle.grouped_gemm(a, b, kind="fprop", accumulate=np.zeros((5, 48, 64), np.float32))
    # SPEC 12.5: accumulating means fp32 output, also when every group is empty (no per-group gemm checks it then)
    c = np.zeros((5, 48, 64), np.float32)
    with pytest.raises(ValueError, match="accumulate needs out_dtype='float32'"):
        oracle.grouped_gemm(dy, x, kind="wgrad", out_dtype="bfloat16", accumulate=c)
    # C's dtype and shape are checked as oracle.gemm checks one group's: TypeError / ValueError
    with pytest.raises(TypeError, match="accumulate must be float32, got float64"):
        oracle.grouped_gemm(dy, x, kind="wgrad", accumulate=c.astype(np.float64))
    with pytest.raises(ValueError, match=r"accumulate must have shape \[E, N, K\] = \(5, 48, 64\), got \(5, 64, 48\)"):
        oracle.grouped_gemm(dy, x, kind="wgrad", accumulate=np.zeros((5, 64, 48), np.float32))
    empty_dy, empty_x = (oracle.group_quantize(np.zeros((0, w), np.float32), [0] * 5, rowwise=False, columnwise=True)
                         for w in (48, 64))
    assert np.array_equal(oracle.grouped_gemm(empty_dy, empty_x, kind="wgrad", accumulate=c), c)
    for bad in ("bfloat16", "float16"):
        with pytest.raises(ValueError, match="out_dtype"):
            oracle.grouped_gemm(empty_dy, empty_x, kind="wgrad", out_dtype=bad, accumulate=c)
    with pytest.raises(ValueError, match="bias must be"):
        oracle.grouped_gemm(a, b, kind="fprop", bias=np.zeros((5, 64), np.float32))
    # one group too many is refused, not cut to E (bias [E, N], C [E, N, K])
    with pytest.raises(ValueError, match=r"bias must be \[E, 48\], got \(6, 48\)"):
        oracle.grouped_gemm(a, b, kind="fprop", bias=np.zeros((6, 48), np.float32))
    with pytest.raises(ValueError, match=r"accumulate must have shape \[E, N, K\] = \(5, 48, 64\), got \(6, 48, 64\)"):
        oracle.grouped_gemm(dy, x, kind="wgrad", accumulate=np.zeros((6, 48, 64), np.float32))
    # every group empty: C's dtype and out_dtype are still checked (no per-group gemm checks them)
    with pytest.raises(TypeError, match="accumulate must be float32, got float64"):
        oracle.grouped_gemm(empty_dy, empty_x, kind="wgrad", accumulate=c.astype(np.float64))
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        oracle.grouped_gemm(empty_dy, empty_x, kind="wgrad", out_dtype=np.dtype("float32"))


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_error_bound_covers_both_fp32_models_and_catches_an_error(kind):
    """grouped_gemm_error_bound (SPEC 12.4 per group): the sequential and tensor-core models lie within it of the
    exact model in every group; one element moved past it in one group does not; it is oracle.gemm_error_bound per
    group, and 0 where wgrad returns an empty expert's C."""
    a, b = _operands(kind)
    kw = dict(out_dtype="float32")
    if kind == "wgrad":
        kw["accumulate"] = np.random.default_rng(3).standard_normal((len(SPLITS), 48, 64)).astype(np.float32)
    exact = oracle.grouped_gemm(a, b, kind=kind, model="exact", **kw)
    bound = oracle.grouped_gemm_error_bound(a, b, kind=kind, **kw)
    assert bound.shape == exact.shape and bound.dtype == np.float64
    for model in ("sequential", "tensor_core"):
        assert oracle.within_bound(oracle.grouped_gemm(a, b, kind=kind, model=model, **kw), exact, bound).all()
    bad = np.asarray(exact, np.float32).copy()
    idx = (2, 0, 0) if kind == "wgrad" else (5, 0)  # group 2 (37 rows from row 5)
    bad[idx] += np.float32(4 * bound[idx] + 1e-3)
    assert oracle.within_bound(bad, exact, bound).sum() == bound.size - 1
    if kind == "wgrad":
        assert not bound[1].any() and not bound[4].any()  # empty experts: C returned exactly
        want = oracle.gemm_error_bound(a.col_planes[2], b.col_planes[2], accumulate=kw["accumulate"][2],
                                       out_dtype="float32")
        assert np.array_equal(bound[2], want)
    else:
        wp = b.row_planes[2] if kind == "fprop" else b.col_planes[2]
        assert np.array_equal(bound[5:42], oracle.gemm_error_bound(a.row_planes[2], wp, out_dtype="float32"))


@pytest.mark.parametrize("model", ["tensor_core", "sm100"])
def test_grouped_gemm_runs_the_model_asked_for(model):
    """Each group is gemm(model=...) of its planes: heavy-tailed operands with K = 512 and fp32 output, on which the
    model differs from the sequential one (checked first), so a grouped call that dropped the model would fail."""
    rng = np.random.default_rng(0)
    x = rng.standard_t(1, (40, 512)).astype(np.float32)
    w = rng.standard_t(1, (3 * 32, 512)).astype(np.float32)
    xq, wq = oracle.group_quantize(x, [7, 0, 33]), oracle.group_quantize(w, [32] * 3, block=(16, 16))
    per_group = {m: np.concatenate([np.asarray(oracle.gemm(xq.row_planes[g], wq.row_planes[g], model=m,
                                                           out_dtype="float32")) for g in (0, 2)])
                 for m in (model, "sequential")}
    assert (per_group[model].view(np.uint32) != per_group["sequential"].view(np.uint32)).any()
    y = np.asarray(oracle.grouped_gemm(xq, wq, kind="fprop", model=model, out_dtype="float32"))
    assert y.view(np.uint32).tobytes() == per_group[model].view(np.uint32).tobytes()


def test_error_bound_of_all_empty_wgrad_experts_is_float64():
    """grouped_gemm_error_bound returns float64 (its docstring), also when every expert is empty (zeros)."""
    dy = oracle.group_quantize(np.zeros((0, 16), np.float32), [0, 0], columnwise=True)
    x = oracle.group_quantize(np.zeros((0, 32), np.float32), [0, 0], columnwise=True)
    c = np.full((2, 16, 32), -0.0, np.float32)
    b = oracle.grouped_gemm_error_bound(dy, x, kind="wgrad", accumulate=c)
    assert b.dtype == np.float64 and np.all(b == 0)


def test_an_empty_wgrad_group_with_a_negative_zero_alpha():
    """SPEC 12.5: an empty wgrad group without C writes alpha * 0. A supplied dY amax of -0.0 (allowed, 4.3) gives
    alpha = -0.0 (12.1: products and quotients of -0.0 with positive values), so -0 in every element under the
    sequential, tensor-core and exact models, and +0 under sm100, whose epilogue adds +0 (12.7: RN(+0 + -0) = +0)."""
    rng = np.random.default_rng(0)
    splits = [16, 0]
    dy = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    dyq = oracle.group_quantize(dy, splits, rowwise=False, columnwise=True, amax=np.array([1.0, -0.0], np.float32))
    xq = oracle.group_quantize(x, splits, rowwise=False, columnwise=True, amax=np.array([1.0, 1.0], np.float32))
    for model, negative in (("sequential", True), ("tensor_core", True), ("exact", True), ("sm100", False)):
        dw = oracle.grouped_gemm(dyq, xq, kind="wgrad", model=model)[1]
        assert dw.shape == (16, 32) and (dw == 0).all() and (np.signbit(dw) == negative).all(), model
