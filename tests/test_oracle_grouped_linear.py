"""oracle.NVFP4Recipe, oracle.grouped_linear_forward / _backward and oracle.grouped_bias_grad (SPEC 16).

The layer is checked against a composition of group_quantize and grouped_gemm written out here from SPEC 16.1-16.3's
table, against a hand-worked case whose inputs quantize exactly (expected values from exact float64 products), and
the bias gradient against a scalar loop written from SPEC 16.4 and a case where the order changes the result.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import oracle
from oracle import NVFP4Recipe

BF16 = ml_dtypes.bfloat16
SPLITS = [7, 0, 21, 16]  # an empty expert, sizes off and on the 16-row chunks
E, N, K = len(SPLITS), 32, 48
T = sum(SPLITS)


def _data(seed: int = 0, splits=SPLITS, n: int = N, k: int = K):
    rng = np.random.default_rng(seed)
    t, e = sum(splits), len(splits)
    x = rng.standard_normal((t, k)).astype(BF16)
    w = (rng.standard_normal((e, n, k)) * 0.1).astype(BF16)
    dy = (rng.standard_normal((t, n)) * 2.0 ** rng.integers(-4, 5, (t, 1))).astype(BF16)
    bias = rng.standard_normal((e, n)).astype(np.float32)
    main_grad = rng.standard_normal((e, n, k)).astype(np.float32)
    return x, w, dy, bias, main_grad


def _composed(x, w, splits, dy, recipe, model, bias=None, main_grad=None):
    """SPEC 16.1-16.3 written out: X and dY in 1x16 blocks with the RHT on their columnwise planes, dY stochastically
    rounded with the recipe's seed and offset 0, W as [E*N, K] with splits [N]*E in the recipe's weight block; fprop,
    dgrad and wgrad as grouped GEMMs. Every tensor quantized once with both planes."""
    e, n, k = w.shape
    xq = oracle.group_quantize(x, splits, rowwise=True, columnwise=True, rht=recipe.rht_wgrad,
                               rht_signs=recipe.rht_signs, block=(1, 16), rule=recipe.rule, rounding="rn")
    wq = oracle.group_quantize(w.reshape(e * n, k), [n] * e, rowwise=True, columnwise=True, rht=False,
                               block=recipe.weight_block, rule=recipe.rule, rounding="rn")
    dyq = oracle.group_quantize(dy, splits, rowwise=True, columnwise=True, rht=recipe.rht_wgrad,
                                rht_signs=recipe.rht_signs, block=(1, 16), rule=recipe.rule,
                                rounding="sr" if recipe.sr_grad else "rn", seed=recipe.seed, offset=0)
    y = oracle.grouped_gemm(xq, wq, kind="fprop", model=model, bias=bias)
    dx = oracle.grouped_gemm(dyq, wq, kind="dgrad", model=model)
    dw = oracle.grouped_gemm(dyq, xq, kind="wgrad", model=model, accumulate=main_grad)
    return y, dx, dw, (xq, wq, dyq)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# ---------------------------------------------------------------------------------------------- the recipe


def test_recipe_defaults_are_te_nvfp4_block_scaling():
    r = NVFP4Recipe()
    assert (r.rule, r.weight_block, r.rht_wgrad, r.sr_grad, r.seed) == ("te", (16, 16), True, True, 0)
    # TE's hard-coded wgrad sign vector (transformer_engine/pytorch/tensor/nvfp4_tensor.py), bit i set where s_i = -1
    te_signs = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
    assert r.rht_signs == sum(1 << i for i, s in enumerate(te_signs) if s == -1) == 0xD7E8
    assert r.grad_rounding == "sr" and NVFP4Recipe(sr_grad=False).grad_rounding == "rn"
    assert oracle.DEFAULT_RECIPE == r and hash(oracle.DEFAULT_RECIPE) == hash(r)


def test_recipe_is_frozen_and_normalises_the_weight_block():
    r = NVFP4Recipe(weight_block="1x16", seed=np.uint64(2**64 - 1), rht_signs=np.int32(0x1234))
    assert r.weight_block == (1, 16) and r.seed == 2**64 - 1 and type(r.seed) is int and r.rht_signs == 0x1234
    assert NVFP4Recipe(weight_block=[16, 16]) == NVFP4Recipe()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seed = 1
    assert repr(NVFP4Recipe()) == ("NVFP4Recipe(rule='te', weight_block=(16, 16), rht_wgrad=True, rht_signs=0xD7E8, "
                                   "sr_grad=True, seed=0)")
    assert eval(repr(r), {"NVFP4Recipe": NVFP4Recipe}) == r


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"rule": "fp8"}, ValueError, "rule must be one of"),
    ({"rule": None}, ValueError, "rule must be one of"),
    ({"weight_block": (16, 1)}, ValueError, "block must be"),
    ({"weight_block": "32x32"}, ValueError, "block must be"),
    ({"rht_wgrad": 1}, TypeError, "rht_wgrad must be True or False"),
    ({"sr_grad": "yes"}, TypeError, "sr_grad must be True or False"),
    ({"rht_signs": 1 << 16}, ValueError, r"rht_signs must be in \[0, 0x10000\)"),
    ({"rht_signs": -1}, ValueError, "rht_signs must be in"),
    ({"rht_signs": 1.0}, TypeError, "rht_signs must be an integer"),
    ({"seed": -1}, ValueError, "seed must be in"),
    ({"seed": 2**64}, ValueError, "seed must be in"),
    ({"seed": True}, TypeError, "seed must be an integer"),
    ({"seed": "0"}, TypeError, "seed must be an integer"),
])
def test_recipe_rejects_bad_fields(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        NVFP4Recipe(**kwargs)


def test_recipe_takes_numpy_bools_as_bools():
    """A NumPy bool is a flag, as quantize's flags take it; the recipe stores Python bools."""
    r = NVFP4Recipe(rht_wgrad=np.bool_(False), sr_grad=np.bool_(True))
    assert r.rht_wgrad is False and r.sr_grad is True


# ---------------------------------------------------------------------------------------------- the layer


RECIPES = [
    NVFP4Recipe(),
    NVFP4Recipe(weight_block=(1, 16), rht_wgrad=False, sr_grad=False),
    NVFP4Recipe(rht_signs=0x1234, seed=12345678901234, rule="te_fused_rht"),
    NVFP4Recipe(rule="torchao", rht_wgrad=False),
]


@pytest.mark.parametrize("recipe", RECIPES, ids=["default", "rn_1x16_no_rht", "signs_seed_fused", "torchao"])
def test_layer_equals_the_composition_sequential(recipe):
    x, w, dy, bias, mg = _data(1)
    want_y, want_dx, want_dw, _ = _composed(x, w, SPLITS, dy, recipe, "sequential", bias=bias, main_grad=mg.copy())
    y = oracle.grouped_linear_forward(x, w, SPLITS, bias=bias, recipe=recipe)
    assert type(y) is np.ndarray and y.dtype == BF16 and y.shape == (T, N)
    assert _bits(y) == _bits(want_y)
    grads = oracle.grouped_linear_backward(x, w, SPLITS, dy, with_bias=True, recipe=recipe, main_grad=mg)
    dx, dw, dbias = grads
    assert grads.recipe is recipe and grads.dx is dx and grads.dw is dw and grads.dbias is dbias
    assert dx.dtype == BF16 and dx.shape == (T, K) and _bits(dx) == _bits(want_dx)
    assert dw is mg and _bits(dw) == _bits(want_dw)
    assert dbias.dtype == np.float32 and dbias.shape == (E, N)
    assert _bits(dbias) == _bits(_bias_grad_loop(dy, SPLITS))  # SPEC 16.4, the test's scalar loop


@pytest.mark.parametrize("model", ["tensor_core", "exact", "sm100"])
def test_layer_equals_the_composition_other_models(model):
    splits = [3, 0, 18]
    x, w, dy, bias, _ = _data(2, splits, n=16, k=32)
    recipe = NVFP4Recipe(seed=7)
    want_y, want_dx, want_dw, _ = _composed(x, w, splits, dy, recipe, model, bias=bias)
    assert _bits(oracle.grouped_linear_forward(x, w, splits, bias=bias, recipe=recipe, model=model)) == _bits(want_y)
    dx, dw, dbias = oracle.grouped_linear_backward(x, w, splits, dy, recipe=recipe, model=model)
    assert _bits(dx) == _bits(want_dx) and _bits(dw) == _bits(want_dw) and dbias is None


def test_operands_are_the_planes_of_spec_16_1():
    x, w, dy, _, _ = _data(3)
    recipe = NVFP4Recipe(seed=99)
    *_, (xq, wq, dyq) = _composed(x, w, SPLITS, dy, recipe, "sequential")
    ops = oracle.grouped_linear_operands(x, w, SPLITS, dy, recipe=recipe)
    assert ops.recipe is recipe
    for got, want in ((ops.x, xq), (ops.weight, wq), (ops.dy, dyq)):
        gb, wb = got.buffers(), want.buffers()
        assert gb.keys() == wb.keys() and all(_bits(gb[k]) == _bits(wb[k]) for k in wb)
    assert oracle.grouped_linear_operands(x, w, SPLITS, recipe=recipe).dy is None


def test_recipe_fields_reach_only_their_planes():
    """The forward uses rowwise planes of X and W only: the RHT and SR settings do not change Y (SPEC 16.1); the seed
    drives dY's stochastic rounding, so it changes dX and dW but not Y."""
    x, w, dy, _, _ = _data(4)
    y0 = oracle.grouped_linear_forward(x, w, SPLITS)
    for r in (NVFP4Recipe(rht_wgrad=False, sr_grad=False), NVFP4Recipe(seed=5), NVFP4Recipe(rht_signs=0)):
        assert _bits(oracle.grouped_linear_forward(x, w, SPLITS, recipe=r)) == _bits(y0)
    g0 = oracle.grouped_linear_backward(x, w, SPLITS, dy)
    g5 = oracle.grouped_linear_backward(x, w, SPLITS, dy, recipe=NVFP4Recipe(seed=5))
    assert _bits(g0.dx) != _bits(g5.dx) and _bits(g0.dw) != _bits(g5.dw)
    again = oracle.grouped_linear_backward(x, w, SPLITS, dy)
    assert _bits(again.dx) == _bits(g0.dx) and _bits(again.dw) == _bits(g0.dw)  # same seed, same bits


def test_main_grad_accumulates_in_place_and_empty_experts_keep_their_bits():
    x, w, dy, _, mg = _data(5)
    mg[1, 0, 0] = -0.0
    mg[1, 2, 3] = np.uint32(0x7FC01234).view(np.float32)  # a NaN payload
    before = mg.copy()
    _, _, want, _ = _composed(x, w, SPLITS, dy, NVFP4Recipe(), "sequential", main_grad=before.copy())
    _, dw, _ = oracle.grouped_linear_backward(x, w, SPLITS, dy, main_grad=mg)
    assert dw is mg and _bits(mg) == _bits(want)
    assert _bits(mg[1]) == _bits(before[1])  # expert 1 has no tokens: unchanged bit for bit (SPEC 16.3)
    _, fresh, _ = oracle.grouped_linear_backward(x, w, SPLITS, dy)
    assert not fresh[1].view(np.uint32).any()  # without main_grad: +0.0
    # one more step adds again
    _, _, want2, _ = _composed(x, w, SPLITS, dy, NVFP4Recipe(), "sequential", main_grad=want.copy())
    oracle.grouped_linear_backward(x, w, SPLITS, dy, main_grad=mg)
    assert _bits(mg) == _bits(want2) and _bits(mg[1]) == _bits(before[1])


def test_no_tokens_at_all():
    _, w, _, bias, mg = _data(6)
    x, dy = np.zeros((0, K), BF16), np.zeros((0, N), BF16)
    zeros = [0] * E
    y = oracle.grouped_linear_forward(x, w, zeros, bias=bias)
    assert y.shape == (0, N) and y.dtype == BF16
    dx, dw, dbias = oracle.grouped_linear_backward(x, w, zeros, dy, with_bias=True)
    assert dx.shape == (0, K) and not dw.view(np.uint32).any() and not dbias.view(np.uint32).any()
    before = mg.copy()
    oracle.grouped_linear_backward(x, w, zeros, dy, main_grad=mg)
    assert _bits(mg) == _bits(before)


def test_torch_cpu_tensors_give_the_same_bytes():
    torch = pytest.importorskip("torch")
    x, w, dy, bias, mg = _data(7)

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)

    recipe = NVFP4Recipe(seed=3)
    assert _bits(oracle.grouped_linear_forward(t(x), t(w), torch.tensor(SPLITS), bias=torch.from_numpy(bias),
                                               recipe=recipe)) == _bits(
        oracle.grouped_linear_forward(x, w, SPLITS, bias=bias, recipe=recipe))
    mg_t = torch.from_numpy(mg.copy())
    got = oracle.grouped_linear_backward(t(x), t(w), torch.tensor(SPLITS), t(dy), with_bias=True, recipe=recipe,
                                         main_grad=mg_t)
    want = oracle.grouped_linear_backward(x, w, SPLITS, dy, with_bias=True, recipe=recipe, main_grad=mg)
    assert got.dw is mg_t and _bits(mg_t.numpy()) == _bits(mg)
    assert _bits(got.dx) == _bits(want.dx) and _bits(got.dbias) == _bits(want.dbias)


# ---------------------------------------------------------------------------------------------- a hand-worked case


def _hand_case():
    """E = 3, splits [2, 0, 1], K = N = 16. Every nonzero is a power of two, every 16-block (rowwise, the 16x16 weight
    tiles, and the columnwise blocks after the RHT) holds magnitudes b, b/2 or b/4 with b and each group's amax
    powers of two, and each column of X and dY has at most one nonzero within a group (so the RHT of a column block
    is one value over 4 with signs): every scaled value is exactly 6, 3 or 1.5 (SPEC 5.2), stochastic rounding of an
    exact grid value is that value (3.4), and every product below is exact."""
    x = np.zeros((3, 16), np.float64)
    x[0, 0], x[0, 3], x[1, 1], x[1, 2], x[2, 5] = 2, -1, 4, 1, 0.5
    w = np.zeros((3, 16, 16), np.float64)
    w[0, 0, 0], w[0, 1, 1], w[0, 0, 2], w[0, 2, 3] = 1, -0.5, 0.25, 1
    w[1, 3, 3] = 8  # the empty expert's weight: quantized, never multiplied
    w[2, 4, 5], w[2, 0, 5] = 2, -1
    dy = np.zeros((3, 16), np.float64)
    dy[0, 0], dy[0, 2], dy[1, 1], dy[2, 4], dy[2, 0] = 1, -0.5, 2, 4, -1
    bias = np.zeros((3, 16), np.float32)
    bias[0, 0], bias[2, 4] = 0.5, -3
    return x, w, dy, bias


@pytest.mark.parametrize("model", ["sequential", "tensor_core", "exact", "sm100"])
@pytest.mark.parametrize("recipe", [NVFP4Recipe(), NVFP4Recipe(rht_wgrad=False, sr_grad=False, seed=1)],
                         ids=["default", "rn_no_rht"])
def test_hand_worked_layer(model, recipe):
    x, w, dy, bias = _hand_case()
    splits = [2, 0, 1]
    rows = {0: slice(0, 2), 2: slice(2, 3)}
    y = oracle.grouped_linear_forward(x.astype(BF16), w.astype(BF16), splits, bias=bias, recipe=recipe, model=model)
    mg = np.full((3, 16, 16), 0.25, np.float32)
    mg[1] = -0.0
    dx, dw, dbias = oracle.grouped_linear_backward(x.astype(BF16), w.astype(BF16), splits, dy.astype(BF16),
                                                   with_bias=True, recipe=recipe, model=model, main_grad=mg)
    # a few entries by hand: Y[0, 0] = 2 * 1 + 0.5; Y[0, 2] = -1 * 1; Y[1, 0] = 1 * 0.25 + 0.5; Y[1, 1] = 4 * -0.5;
    # Y[2, 4] = 0.5 * 2 - 3; dX[2, 5] = 4 * 2 + (-1) * (-1); dW[0][1, 1] = 2 * 4 (+ 0.25); dbias[2, 0] = -1
    assert [float(y[0, 0]), float(y[0, 2]), float(y[1, 0]), float(y[1, 1]), float(y[2, 4])] == [2.5, -1, 0.75, -2, -2]
    assert float(dx[2, 5]) == 9 and float(dw[0, 1, 1]) == 8.25 and float(dbias[2, 0]) == -1
    # all of it: exact float64 products of the (exactly representable) inputs, group by group
    want_y = np.zeros((3, 16))
    want_dx = np.zeros((3, 16))
    want_dw = np.full((3, 16, 16), 0.25)
    want_db = np.zeros((3, 16))
    for g, r in rows.items():
        want_y[r] = x[r] @ w[g].T + bias[g]
        want_dx[r] = dy[r] @ w[g]
        want_dw[g] += dy[r].T @ x[r]
        want_db[g] = dy[r].sum(axis=0)
    assert _bits(y) == _bits(want_y.astype(BF16))
    assert _bits(dx) == _bits(want_dx.astype(BF16))
    assert _bits(dw[[0, 2]]) == _bits(want_dw[[0, 2]].astype(np.float32))
    assert _bits(dw[1]) == _bits(np.full((16, 16), -0.0, np.float32))  # the empty expert's -0.0 kept
    assert _bits(dbias) == _bits(want_db.astype(np.float32))


# ---------------------------------------------------------------------------------------------- the bias gradient


def _bias_grad_loop(dy: np.ndarray, splits) -> np.ndarray:
    """SPEC 16.4 one scalar at a time: chunks of 16 rows from each group's first row, each summed from +0.0 in row
    order, then the chunk sums from +0.0 in chunk order, every add one fp32 rounding."""
    d = dy.astype(np.float32)
    out = np.zeros((len(splits), d.shape[1]), np.float32)
    start = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for g, m in enumerate(splits):
            for n in range(d.shape[1]):
                total = np.float32(0.0)
                for c0 in range(start, start + m, 16):
                    chunk = np.float32(0.0)
                    for r in range(c0, min(c0 + 16, start + m)):
                        chunk = np.float32(chunk + d[r, n])
                    total = np.float32(total + chunk)
                out[g, n] = total
            start += m
    return out


def test_bias_grad_equals_the_scalar_loop():
    splits = [0, 1, 15, 16, 17, 40, 0, 33]
    rng = np.random.default_rng(8)
    t = sum(splits)
    # magnitudes over 2^-10 .. 2^20, so that fp32 sums round and the order shows
    dy = (rng.standard_normal((t, 8)) * 2.0 ** rng.integers(-10, 21, (t, 8))).astype(BF16)
    dy[20, 3] = np.inf
    dy[21, 3] = -np.inf  # Inf - Inf: a NaN sum in group 3 (rows 16-31)
    dy[40, 5] = np.nan  # group 4 (rows 32-48)
    dy[0, 1] = -0.0  # group 1 is row 0 alone: -0.0 sums to +0.0
    got = oracle.grouped_bias_grad(dy, splits)
    assert got.dtype == np.float32 and got.shape == (len(splits), 8)
    assert _bits(got) == _bits(_bias_grad_loop(dy, splits))
    assert np.isnan(got[3, 3]) and np.isnan(got[4, 5]) and got[1, 1].view(np.uint32) == 0
    assert not got[[0, 6]].view(np.uint32).any()  # empty groups: +0.0


def test_bias_grad_order_matters():
    """SPEC 16.4's example: 1 (x15), 2^24, 1 (x16) in one column. Chunk 0: 15 + 2^24 is a tie between 2^24 + 14 and
    2^24 + 16 and goes to the even 2^24 + 16; chunk 1: 16; total 2^24 + 32. One sequential pass instead stays at
    2^24 + 16 (each 2^24 + 17 is a tie that rounds back to 2^24 + 16)."""
    col = np.array([1.0] * 15 + [2.0**24] + [1.0] * 16)
    dy = np.zeros((32, 16), np.float64)
    dy[:, 0] = col
    got = oracle.grouped_bias_grad(dy.astype(BF16), [32])
    assert got[0, 0] == np.float32(2**24 + 32)
    naive = np.float32(0.0)
    for v in col:
        naive = np.float32(naive + np.float32(v))
    assert naive == np.float32(2**24 + 16) != got[0, 0]
    # the same rows split over two groups [16, 16]: each group one chunk
    two = oracle.grouped_bias_grad(dy.astype(BF16), [16, 16])
    assert two[0, 0] == np.float32(2**24 + 16) and two[1, 0] == 16


@pytest.mark.parametrize("dy, splits, exc, match", [
    (np.zeros((4, 16), np.float64), [4], TypeError, "dy must be bfloat16, float16 or float32"),
    (np.zeros(16, BF16), [16], ValueError, "2-D"),
    (np.zeros((4, 16), BF16), [3], ValueError, "add up to 3"),
    (np.zeros((4, 16), BF16), [5, -1], ValueError, ">= 0"),
    (np.zeros((4, 16), BF16), [4.0], TypeError, "integers"),
    ([[0.0] * 16], [1], TypeError, "NumPy array"),
])
def test_bias_grad_rejects_bad_input(dy, splits, exc, match):
    with pytest.raises(exc, match=match):
        oracle.grouped_bias_grad(dy, splits)


# ---------------------------------------------------------------------------------------------- bad input


def _bad_cases():
    x, w, dy, bias, mg = _data(9)
    ro = mg.copy()
    ro.flags.writeable = False
    s = list(SPLITS)
    return [
        ("x float32", dict(x=x.astype(np.float32)), TypeError, "x must be bfloat16"),
        ("x 1-D", dict(x=x[0]), ValueError, r"x must be 2-D \[T, K\]"),
        ("x list", dict(x=x.tolist()), TypeError, "x must be a NumPy array"),
        ("weight float16", dict(weight=w.astype(np.float16)), TypeError, "weight must be bfloat16"),
        ("weight 2-D", dict(weight=w[0]), ValueError, r"weight must be 3-D \[E, N, K\]"),
        ("no experts", dict(weight=w[:0], splits=[]), ValueError, "at least one expert"),
        ("K mismatch", dict(x=x[:, :32]), ValueError, "x has K=32 columns"),
        ("K not /16", dict(x=np.zeros((T, 40), BF16), weight=np.zeros((E, N, 40), BF16)), ValueError,
         "K=40 must be a positive multiple of 16"),
        ("N not /16, forward", dict(weight=w[:, :24], bias=bias[:, :24]), ValueError,
         "N=24 must be a positive multiple of 16"),
        ("N not /16, backward", dict(weight=w[:, :24], dy=dy[:, :24], main_grad=mg[:, :24]), ValueError,
         "N=24 must be a positive multiple of 16"),
        ("splits short", dict(splits=s[:-1]), ValueError, r"one size per expert \(E=4\)"),
        ("splits 2-D", dict(splits=[s]), ValueError, "one size per expert"),
        ("splits negative", dict(splits=[8, -1, 21, 16]), ValueError, ">= 0"),
        ("splits sum", dict(splits=[7, 1, 21, 16]), ValueError, "add up to 45 but x has 44 rows"),
        ("splits offsets", dict(splits=np.cumsum(s)), ValueError, "add up to"),
        ("splits float", dict(splits=np.asarray(s, np.float64)), TypeError, "integers"),
        ("bias shape", dict(bias=bias[0]), ValueError, r"bias must be \[E, N\]"),
        ("bias rows", dict(bias=np.concatenate([bias, bias[:1]])), ValueError, r"bias must be \[E, N\]"),
        ("bias float16", dict(bias=bias.astype(np.float16)), TypeError, "bias must be float32 or bfloat16"),
        ("model", dict(model="fast"), ValueError, "model must be one of"),
        ("recipe", dict(recipe={"rule": "te"}), TypeError, "recipe must be an oracle.NVFP4Recipe"),
        ("dy shape", dict(dy=dy[1:]), ValueError, r"dy must be \[T, N\]"),
        ("dy float32", dict(dy=dy.astype(np.float32)), TypeError, "dy must be bfloat16"),
        ("main_grad dtype", dict(main_grad=mg.astype(np.float64)), TypeError, "main_grad must be float32"),
        ("main_grad shape", dict(main_grad=mg[:, :, :16]), ValueError, r"main_grad must be \[E, N, K\]"),
        ("main_grad read-only", dict(main_grad=ro), ValueError, "writeable"),
        ("with_bias", dict(with_bias=1), TypeError, "with_bias must be True or False"),
    ]


@pytest.mark.parametrize("case", _bad_cases(), ids=lambda c: c[0])
def test_bad_input_raises_before_any_work(case, monkeypatch):
    _, change, exc, match = case
    x, w, dy, bias, mg = _data(9)
    args = dict(x=x, weight=w, splits=SPLITS, dy=dy, bias=bias, main_grad=mg, with_bias=True,
                recipe=NVFP4Recipe(), model="sequential")
    args.update(change)

    def no_work(*a, **k):
        raise AssertionError("quantized or multiplied before the arguments were checked")

    monkeypatch.setattr("oracle.grouped_linear.group_quantize", no_work)
    monkeypatch.setattr("oracle.grouped_linear.grouped_gemm", no_work)
    layer = (args["x"], args["weight"], args["splits"])
    backward_only = {"dy", "main_grad", "with_bias"}
    directions = 0  # the calls this case checks (forward: no backward-only argument changed; backward: no bias)
    if not backward_only & change.keys():
        directions += 1
        with pytest.raises(exc, match=match):
            oracle.grouped_linear_forward(*layer, bias=args["bias"], recipe=args["recipe"], model=args["model"])
    if "bias" not in change:
        directions += 1
        with pytest.raises(exc, match=match):
            oracle.grouped_linear_backward(*layer, args["dy"], with_bias=args["with_bias"], recipe=args["recipe"],
                                           model=args["model"], main_grad=args["main_grad"])
    assert directions, "the case checks neither the forward nor the backward call"


# ---- the bias gradient's order and conversion (SPEC 16.4), the layer's size checks ----------------------------------

def test_bias_grad_spec_16_4_vector():
    """SPEC 16.4's own example: the 32 rows 1 (x15), 2^24, 1 (x16) of one column give 2^24 + 32 (chunks of 16)."""
    dy = np.zeros((32, 16), np.float32)
    dy[:, 0] = [1.0] * 15 + [2.0**24] + [1.0] * 16
    out = oracle.grouped_bias_grad(dy.astype(BF16), [32])
    assert out.dtype == np.float32 and out[0, 0] == np.float32(2**24 + 32)


def test_bias_grad_one_column_is_sequential():
    """Within a chunk the sum is sequential (SPEC 16.4): 2^24 then 15 ones stays 2^24 (each 2^24 + 1 ties back to the
    even 2^24); a pairwise sum would give 2^24 + 14. One column, where NumPy's own sum is pairwise."""
    dy = np.array([[2.0**24]] + [[1.0]] * 15, np.float32)
    assert oracle.grouped_bias_grad(dy, [16])[0, 0] == np.float32(2**24)


def test_bias_grad_converts_bf16_exactly():
    """dY's bfloat16 values enter dbias exactly (SPEC 16.4): 2^20 and 2^-30, which float16 would make Inf and 0."""
    x = np.ones((16, 16), BF16)
    w = np.ones((1, 16, 16), BF16)
    dy = np.zeros((16, 16), BF16)
    dy[0, 0] = BF16(2.0**20)
    dy[1, 1] = BF16(2.0**-30)
    _, _, db = oracle.grouped_linear_backward(x, w, [16], dy, with_bias=True)
    assert db[0, 0] == np.float32(2.0**20) and db[0, 1] == np.float32(2.0**-30)


def test_layer_refuses_zero_k_and_n():
    """K and N must be positive multiples of 16 (grouped_linear_forward's docstring): 0 is refused, not a layer of
    zeros."""
    with pytest.raises(ValueError, match="K=0 must be a positive multiple of 16"):
        oracle.grouped_linear_forward(np.zeros((4, 0), BF16), np.zeros((2, 16, 0), BF16), [1, 3])
    with pytest.raises(ValueError, match="N=0 must be a positive multiple of 16"):
        oracle.grouped_linear_forward(np.ones((4, 16), BF16), np.zeros((2, 0, 16), BF16), [1, 3])


def test_forward_takes_its_model():
    """E = 1, one token, K = N = 16: x[0, 0] = 2^-30 and W[0, 0, 0] = 1 quantize exactly (each block's amax maps to
    E2M1's 6 with the scale byte 448), bias[0, 0] = 1 + 2^-8. The exact model (SPEC 12.3) rounds 1 + 2^-8 + ~2^-30
    once: above bf16's tie between 1 and 1 + 2^-7, so 1 + 2^-7. The sequential model (12.2) adds the bias in fp32,
    where 2^-30 is lost below 1's ulp, and rounds the tie 1 + 2^-8 to even: 1."""
    x = np.zeros((1, 16), BF16)
    x[0, 0] = 2.0**-30
    w = np.zeros((1, 16, 16), BF16)
    w[0, 0, 0] = 1.0
    bias = np.zeros((1, 16), np.float32)
    bias[0, 0] = 1.0 + 2.0**-8
    y = {m: oracle.grouped_linear_forward(x, w, [1], bias=bias, model=m)[0, 0] for m in ("exact", "sequential")}
    assert float(y["exact"]) == 1.0 + 2.0**-7 and float(y["sequential"]) == 1.0


def test_operands_check_dy():
    x, w, dy, _, _ = _data(4)
    with pytest.raises(ValueError, match=r"dy must be \[T, N\]"):
        oracle.grouped_linear_operands(x, w, SPLITS, np.zeros((T, N + 32), BF16))
    with pytest.raises(TypeError, match="dy must be bfloat16"):
        oracle.grouped_linear_operands(x, w, SPLITS, dy.astype(np.float32))


def test_grads_pickle_and_copy():
    """GroupedLinearGrads is a tuple with a recipe: pickle and copy keep both (dx, dw, dbias bytes and the recipe)."""
    import copy
    import pickle

    x, w, dy, _, _ = _data(5)
    g = oracle.grouped_linear_backward(x, w, SPLITS, dy, with_bias=True, recipe=NVFP4Recipe(seed=7))
    for h in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g), copy.copy(g)):
        assert type(h) is type(g) and h.recipe == g.recipe
        assert all(_bits(a) == _bits(b) for a, b in zip(h, g, strict=True))


def test_main_grad_on_another_device_is_refused():
    """A main_grad tensor that is not on the CPU: ValueError naming its device (the oracle updates host memory)."""
    torch = pytest.importorskip("torch")
    x, w, dy, _, _ = _data(6)
    with pytest.raises(ValueError, match="NumPy array or a CPU tensor, got a tensor on meta"):
        oracle.grouped_linear_backward(x, w, SPLITS, dy, main_grad=torch.zeros((E, N, K), device="meta"))


def test_recipe_repr_shows_the_sign_mask_as_four_hex_digits():
    assert "rht_signs=0x0012" in repr(NVFP4Recipe(rht_signs=0x12))
