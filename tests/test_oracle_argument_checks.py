"""Bad arguments to the oracle's public functions are refused with an error that names them, before any work; the
values each function documents as valid (edge sizes, NumPy scalars and bools, torch tensors, -0.0 and NaN amaxes)
are accepted. The expected outcomes are the docstrings' and SPEC's promises (SPEC 4.3: a negative amax raises; 6.3:
two block shapes; 7.1: a 16-bit sign mask; 9.1: splits of sizes >= 0 adding up to T; 11.1: four scale rules)."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest

import oracle
from oracle.swizzle import grouped_scale_offsets, swizzled_offset, unswizzle_scales

BF16 = ml_dtypes.bfloat16
X = np.random.default_rng(7).standard_normal((32, 64)).astype(np.float32)


def te_fields(**kw) -> dict:
    return oracle.to_te_fields(oracle.quantize(X, **kw))


# ------------------------------------------------------------------------------------------------- splits (SPEC 9.1)

@pytest.mark.parametrize("splits", [np.array([2**63 - 1, 2**63 - 1, 34]), np.array([2**62] * 4 + [32]),
                                    np.array([2**63, 2**63 + 32], np.uint64)])
def test_splits_whose_int64_sum_wraps_to_t_are_refused(splits):
    """Sizes that add up to T only modulo 2^64 are not a split of T rows (the sum is taken without wrapping)."""
    with pytest.raises(ValueError, match="splits add up to .* but x has 32 rows"):
        oracle.group_quantize(X, splits)


def test_splits_whose_int64_sum_wraps_are_refused_by_the_layer_and_bias_grad():
    x = X.astype(BF16)
    w = np.zeros((3, 16, 64), BF16)
    bad = np.array([2**63 - 1, 2**63 - 1, 34])
    with pytest.raises(ValueError, match="splits add up to"):
        oracle.grouped_linear_forward(x, w, bad)
    with pytest.raises(ValueError, match="but dy has 32 rows"):  # the tensor the function takes is named
        oracle.grouped_bias_grad(x, bad)


@pytest.mark.parametrize("total_rows, error", [(-5, ValueError), (7.9, TypeError), ("7", TypeError),
                                               (True, TypeError)])
def test_cut_splits_refuses_a_row_count_that_is_not_a_count(total_rows, error):
    with pytest.raises(error, match="total_rows"):
        oracle.cut_splits([10, 5], total_rows)


def test_cut_splits_takes_numpy_integers():
    assert oracle.cut_splits(np.array([10, 5]), np.int32(12)).tolist() == [10, 2]  # SPEC 9.4: cut at row 12


@pytest.mark.parametrize("args", [(10.7, 64, 2), ("10", 16, 2), (10, 16.0, 2), (10, 16, True), (None, 16, 2)])
def test_grouped_capacities_refuses_sizes_that_are_not_integers(args):
    with pytest.raises(TypeError, match="total_rows|cols|num_groups"):
        oracle.grouped_capacities(*args)


# ------------------------------------------------------------------------------------- flags, blocks and sign masks

@pytest.mark.parametrize("flag", ["rowwise", "columnwise", "rht"])
@pytest.mark.parametrize("value", ["no", 1, None, np.array([True])])
def test_quantize_flags_are_true_or_false(flag, value):
    """A string such as "no" is not read by its truth value (it would switch the plane or the RHT on)."""
    kw = {"columnwise": True, flag: value}
    for fn in (lambda: oracle.quantize(X.astype(BF16), **kw), lambda: oracle.group_quantize(X.astype(BF16), [32], **kw)):
        with pytest.raises(TypeError, match=f"{flag} must be True or False"):
            fn()


def test_quantize_flags_take_numpy_bools_and_store_python_bools():
    t = oracle.quantize(X.astype(BF16), columnwise=np.bool_(True), rht=np.bool_(True))
    assert t.col.rht is True and t.options["rht"] is True


@pytest.mark.parametrize("block", [(16.5, 16), (1.9, 16), (True, 16), {1: 0, 16: 0}, "1x16x1", "ax16", (1, 16, 1),
                                   16, None])
def test_block_shapes_are_never_rounded_or_parsed_loosely(block):
    """SPEC 6.3 has two block shapes; a float, a bool or a mapping is not rounded into one."""
    with pytest.raises(ValueError, match="block must be"):
        oracle.quantize(X, block=block)
    with pytest.raises(ValueError, match="block must be"):
        oracle.NVFP4Recipe(weight_block=block)


@pytest.mark.parametrize("block, want", [("16x16", (16, 16)), ("1X16", (1, 16)), ([16, 16], (16, 16)),
                                         (np.array([1, 16]), (1, 16)), ((np.int64(16), 16), (16, 16))])
def test_block_shapes_in_every_documented_spelling(block, want):
    assert oracle.quantize(X, block=block).row.block == want


@pytest.mark.parametrize("signs, error", [(1.5, TypeError), (True, TypeError), ("5", TypeError),
                                          (np.float64(3.9), TypeError), (None, TypeError), (-1, ValueError),
                                          (1 << 16, ValueError)])
def test_rht_refuses_a_sign_mask_that_is_not_a_16_bit_integer(signs, error):
    """Not an integer: TypeError (as quantize's rht_signs); an integer outside 16 bits: ValueError."""
    with pytest.raises(error, match="signs must be a 16-bit integer"):
        oracle.rht(X.astype(BF16), signs)


def test_rht_takes_a_torch_bfloat16_tensor():
    torch = pytest.importorskip("torch")
    xb = X.astype(BF16)
    t = torch.from_numpy(xb.view(np.int16).copy()).view(torch.bfloat16)
    assert np.array_equal(oracle.rht(t, 0x1234), oracle.rht(xb, 0x1234))


# ----------------------------------------------------------------------------------------- amax (SPEC 4.3, 11.2)

def test_a_bfloat16_amax_is_a_real_number():
    """An amax taken from a bf16 tensor's values (SPEC 4.3: used as the fp32 value it rounds to)."""
    a = np.abs(X).max().astype(BF16)
    got, want = oracle.quantize(X, amax=a), oracle.quantize(X, amax=float(a))
    assert got.row.amax == np.float32(float(a))
    assert np.array_equal(got.row.data, want.row.data) and np.array_equal(got.row.scales, want.row.scales)


def test_a_one_element_torch_amax_is_one_number():
    """As device.quantize: a one-element tensor (a device result's amax has shape [1]) is one number, for both planes
    or as either half of a pair; a two-element tensor is not a number, and a 1-D NumPy array stays the pair form."""
    torch = pytest.importorskip("torch")
    both = oracle.quantize(X, amax=torch.tensor([2.5]), columnwise=True)
    assert (both.row.amax, both.col.amax) == (np.float32(2.5), np.float32(2.5))
    assert oracle.quantize(X, amax=torch.tensor([[4.0]])).row.amax == np.float32(4.0)
    pair = oracle.quantize(X, amax=(torch.tensor([3.0]), 5.0), columnwise=True)
    assert (pair.row.amax, pair.col.amax) == (np.float32(3.0), np.float32(5.0))
    assert np.array_equal(both.row.data, oracle.quantize(X, amax=2.5).row.data)
    with pytest.raises(ValueError, match="amax must be a single real number"):
        oracle.quantize(X, amax=torch.tensor([2.0, 3.0]))
    with pytest.raises(ValueError, match=r"\(row_amax, col_amax\) pair"):
        oracle.quantize(X, amax=np.array([2.0], np.float32))


@pytest.mark.parametrize("amax", [([1.0, 2.0], [1.0]), (np.array([1 + 1j, 2]), [1.0, 1.0]),
                                  (np.array([True, True]), [1.0, 1.0]), (["a", "b"], [1.0, 1.0])])
def test_group_quantize_refuses_a_tuple_amax_that_is_not_one_real_number_per_group(amax):
    with pytest.raises(ValueError, match="amax's (row|col)_amaxes must hold one real number per group"):
        oracle.group_quantize(X, [10, 22], amax=amax, columnwise=True)


def test_group_quantize_names_a_tuple_of_two_numbers():
    """(1.0, 2.0) for two groups reads as a (row, col) pair of single values, which a grouped amax is not: the message
    says what a tuple means and what to pass for one value per group (it said "row_amaxes must hold one real number
    per group (2), got float64 ()"); the list form takes them."""
    with pytest.raises(ValueError, match=r"a tuple amax is \(row_amaxes, col_amaxes\), each with one value per group "
                                         r"\(2\); got two numbers: for one amax per group for both planes pass a list"):
        oracle.group_quantize(X, [10, 22], amax=(1.0, 2.0))
    assert oracle.group_quantize(X, [10, 22], amax=[1.0, 2.0]).row_amax.tolist() == [1.0, 2.0]


def test_a_plane_refuses_a_negative_amax_and_keeps_the_values_an_amax_may_take():
    p = oracle.quantize(X).row
    with pytest.raises(ValueError, match="amax must be >= 0"):
        oracle.QuantizedPlane(p.data, p.scales, -1.0, p.shape)
    for a in (-0.0, np.inf, np.nan, 0.0):
        kept = oracle.QuantizedPlane(p.data, p.scales, a, p.shape).amax
        assert kept.tobytes() == np.float32(a).tobytes()
    with pytest.raises(ValueError, match="amax must be >= 0"):
        oracle.QuantizedPlane(p.data, p.scales, np.array([1.0] * 31 + [-1.0]), p.shape, row_scaled=True)


def test_from_te_fields_refuses_a_negative_amax_naming_its_field():
    f = te_fields(columnwise=True)
    with pytest.raises(ValueError, match="amax_rowwise holds a negative value"):
        oracle.from_te_fields(**{**f, "amax_rowwise": np.array([-1.0], np.float32)})
    with pytest.raises(ValueError, match="amax_columnwise holds a negative value"):
        oracle.from_te_fields(**{**f, "amax_columnwise": np.array([-1.0], np.float32)})


def test_diagnose_refuses_a_negative_amax():
    x = X[:16, :32].copy()
    q = oracle.quantize(x)
    with pytest.raises(ValueError, match="negative value .* absolute maximum"):
        oracle.diagnose(x, q.row.data, q.row.scales, amax=-1.0)


def test_from_torchao_takes_one_amax():
    pytest.importorskip("torchao")
    ao = oracle.to_torchao(oracle.quantize(X, rule="torchao"))
    with pytest.raises(ValueError, match="amax must be one real number"):
        oracle.from_torchao(ao, amax=[1.0, 2.0])


# ------------------------------------------------------------------------------ stored planes (QuantizedPlane)

@pytest.mark.parametrize("rule", ["foo", "TE", None])
def test_a_plane_refuses_an_unknown_rule(rule):
    """SPEC 11.1 defines the factor of four rules; no other rule dequantizes (it is not read as torchao_noscale)."""
    p = oracle.quantize(X).row
    with pytest.raises(ValueError, match="rule must be one of"):
        oracle.QuantizedPlane(p.data, p.scales, p.amax, p.shape, rule=rule)


def test_dequantize_refuses_a_rule_changed_after_construction():
    p = oracle.quantize(X).row
    p.rule = "foo"
    with pytest.raises(ValueError, match="unknown scale rule 'foo'"):
        oracle.dequantize(p)


@pytest.mark.parametrize("change, error, match", [
    (dict(scales=np.zeros((32, 3), np.uint8)), ValueError, r"scales of a plane of shape \(32, 64\) must have shape "
                                                            r"\(32, 4\)"),
    (dict(data=np.zeros((32, 31), np.uint8)), ValueError, r"data .* must have shape \(32, 32\)"),
    (dict(data=np.zeros((32, 32), np.int8)), TypeError, "data must be a uint8 NumPy array"),
    (dict(scales=[[0] * 4] * 32), TypeError, "scales must be a uint8 NumPy array"),
    (dict(shape=(16, 64)), ValueError, r"data .* must have shape \(16, 32\)"),
    (dict(shape=(32, 17)), ValueError, "multiple of 16"),
    (dict(shape=(32.0, 64)), TypeError, "rows must be an integer"),
    (dict(shape=(32,)), ValueError, r"shape must be \(rows, cols\)"),
    (dict(amax=np.ones(3)), ValueError, "amax must be one real number"),
    (dict(block=(3, 3)), ValueError, "block must be"),
    (dict(rht="yes"), TypeError, "rht must be True or False"),
    (dict(four_over_six="xx"), ValueError, "four_over_six must be"),
    (dict(four_over_six="mse", rule="te_fused_rht"), ValueError, "4over6 plane has rule 'te' without RHT"),
    (dict(row_scaled=True, amax=np.ones(32), block=(16, 16)), ValueError, "row-scaled plane has 1x16 blocks"),
    (dict(valid_cols=65), ValueError, "valid_cols"),
    (dict(rht_signs=1.5), TypeError, "rht_signs must be a 16-bit integer"),
])
def test_a_plane_checks_its_fields(change, error, match):
    p = oracle.quantize(X).row
    fields = dict(data=p.data, scales=p.scales, amax=p.amax, shape=p.shape)
    fields.update(change)
    with pytest.raises(error, match=match):
        oracle.QuantizedPlane(**fields)


def test_a_plane_takes_torch_bytes_a_mode_in_any_case_and_a_path_without_a_mode():
    """CPU torch uint8 tensors are its bytes (copied to the host); "MSE" is the mode "mse" (as quantize reads it);
    the fast-math flag alone describes a stored plane whose mode is unknown (TE's tensor holds neither)."""
    torch = pytest.importorskip("torch")
    p = oracle.quantize(X).row
    t = oracle.QuantizedPlane(torch.from_numpy(p.data), torch.from_numpy(p.scales), p.amax, p.shape)
    assert np.array_equal(oracle.dequantize(t), oracle.dequantize(p))
    assert oracle.QuantizedPlane(p.data, p.scales, p.amax, p.shape, four_over_six="MSE").four_over_six == "mse"
    assert oracle.QuantizedPlane(p.data, p.scales, p.amax, p.shape, four_over_six_fast_math=True).four_over_six is None
    f = te_fields()
    f["nvfp4_use_4over6"] = True
    assert oracle.from_te_fields(**f, four_over_six="MAE").row.four_over_six == "mae"
    assert oracle.from_te_fields(**f, four_over_six_fast_math=True).row.four_over_six_fast_math


def test_a_plane_of_g_256_without_a_recorded_mode_is_a_stored_plane():
    """Dequantization reads G alone (SPEC 11.1): the 4over6 mode that chose the scales may be unknown. Hand-worked:
    codes 0x2 (1.0), scale byte 0x38 (1.0), amax 1536: (1.0 * 1536) * fp32(1/1536) = 1.0 (3 * fp32(1/3) rounds to
    1.0)."""
    q = oracle.QuantizedPlane(np.full((1, 8), 0x22, np.uint8), np.array([[0x38]], np.uint8), 1536.0, (1, 16),
                              global_scale_max=256)
    assert np.array_equal(oracle.dequantize(q), np.ones((1, 16), np.float32))


# --------------------------------------------------------------------------------------------------- interop

@pytest.mark.parametrize("change, error, match", [
    (dict(rule="foo"), ValueError, "rule must be one of"),
    (dict(rule="torchao"), ValueError, "rule must be one of"),
    (dict(block=(3, 3)), ValueError, "block must be"),
    (dict(rht="yes"), TypeError, "rht must be True or False"),
    (dict(with_gemm_swizzled_scales="no"), TypeError, "with_gemm_swizzled_scales must be True or False"),
    (dict(nvfp4_use_4over6=True, four_over_six="xx"), ValueError, "four_over_six must be"),
    (dict(four_over_six="mse"), ValueError, "pass nvfp4_use_4over6=True"),
    # G as oracle.quantize's global_scale_max takes it: the integer 448 or 256, not a float (even 448.0)
    (dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=256.7), ValueError, "nvfp4_e4m3_max must be the integer 448 or 256"),
    (dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=448.0), ValueError, "nvfp4_e4m3_max must be the integer 448 or 256"),
    (dict(nvfp4_use_4over6=True, nvfp4_e4m3_max=True), ValueError, "nvfp4_e4m3_max must be the integer 448 or 256"),
    (dict(nvfp4_use_4over6=True, rule="te_fused_rht"), ValueError, "4over6 tensor has rule 'te' without RHT"),
    (dict(row_scaled_nvfp4=True, amax_rowwise=np.ones(32, np.float32), rule="te_fused_rht"), ValueError,
     "row_scaled plane has rule 'te' without RHT"),
    (dict(row_scaled_nvfp4=True, amax_rowwise=np.ones(32, np.float32), block=(16, 16)), ValueError,
     "row-scaled plane has 1x16 blocks"),
])
def test_from_te_fields_checks_what_the_fields_do_not_record(change, error, match):
    with pytest.raises(error, match=match):
        oracle.from_te_fields(**{**te_fields(), **change})


def test_from_te_fields_names_an_empty_amax():
    with pytest.raises(ValueError, match="holds no value"):
        oracle.from_te_fields(**{**te_fields(), "amax_rowwise": np.zeros(0, np.float32)})


def test_from_te_fields_names_a_k_that_is_not_a_multiple_of_16():
    with pytest.raises(ValueError, match="K = 6 values: K must be a multiple of 16"):
        oracle.from_te_fields(rowwise_data=np.zeros((4, 3), np.uint8), rowwise_scale_inv=np.zeros((128, 4), np.uint8),
                              amax_rowwise=np.ones(1, np.float32))
    with pytest.raises(ValueError, match=r"columnwise_data must be \[K, M/2\]"):
        oracle.from_te_fields(columnwise_data=np.zeros(8, np.uint8), columnwise_scale_inv=np.zeros((128, 4), np.uint8),
                              amax_columnwise=np.ones(1, np.float32))


def test_to_te_fields_and_to_torchao_take_a_bool_layout():
    t = oracle.quantize(X)
    with pytest.raises(TypeError, match="swizzled must be True or False"):
        oracle.to_te_fields(t, swizzled="no")
    pytest.importorskip("torchao")
    with pytest.raises(TypeError, match="swizzled must be True or False"):
        oracle.to_torchao(t, swizzled="no")


@pytest.mark.parametrize("orig_dtype", ["foo", np.float32, "Tensor", "int8"])
def test_to_torchao_refuses_an_orig_dtype_that_is_not_a_torch_float(orig_dtype):
    pytest.importorskip("torchao")
    with pytest.raises(ValueError, match="orig_dtype must be a torch floating-point dtype"):
        oracle.to_torchao(oracle.quantize(X), orig_dtype=orig_dtype)


# ------------------------------------------------------------------------------------------------------ GEMM

def test_gemm_alpha_names_an_operand_that_is_not_a_plane():
    t = oracle.quantize(X)
    with pytest.raises(TypeError, match="a_plane must be an oracle QuantizedPlane, got NVFP4Tensor"):
        oracle.gemm_alpha(t, t.row)


def test_within_bound_refuses_outputs_of_different_shapes():
    a = oracle.quantize(X).row
    ye = oracle.gemm(a, a, model="exact", out_dtype="float32")
    bound = oracle.gemm_error_bound(a, a, out_dtype="float32")
    with pytest.raises(ValueError, match="y_impl has shape"):
        oracle.within_bound(ye[:1], ye, bound)
    with pytest.raises(ValueError, match="bound of shape"):
        oracle.within_bound(ye, ye, np.zeros((2, 32, 32)))
    assert oracle.within_bound(ye, ye, 0.0).all()  # a scalar bound broadcasts


@pytest.mark.parametrize("bad", [["1.0"], [True], np.array([None]), [1 + 2j]], ids=["str", "bool", "object", "complex"])
@pytest.mark.parametrize("arg", [0, 1, 2])
def test_within_bound_refuses_values_that_are_not_real_numbers(bad, arg):
    """A string, bool, object or complex array is not an output or a bound: TypeError, not a float conversion (an
    object array of None would otherwise pass wherever the exact value is NaN)."""
    args = [[1.0], [1.0], [0.0]]
    args[arg] = bad
    with pytest.raises(TypeError, match="must hold real numbers"):
        oracle.within_bound(*args)


def test_to_torchao_checks_plane_for_a_bare_plane_too():
    pytest.importorskip("torchao")
    p = oracle.quantize(X).row
    with pytest.raises(ValueError, match="plane must be 'row' or 'col', got 'bogus'"):
        oracle.to_torchao(p, plane="bogus")


def test_gemm_takes_a_torch_bfloat16_bias_as_its_numpy_twin():
    torch = pytest.importorskip("torch")
    a = oracle.quantize(X).row
    b16 = (np.arange(32) - 16).astype(BF16)
    tb = torch.from_numpy(b16.view(np.int16).copy()).view(torch.bfloat16)
    assert np.array_equal(oracle.gemm(a, a, bias=tb), oracle.gemm(a, a, bias=b16))


def test_grouped_gemm_checks_the_rules_when_no_group_has_tokens():
    """A wgrad whose groups are all empty runs no per-group GEMM, but operands without an alpha (SPEC 12.1: torchao
    against te) or one with the RHT and one without are refused all the same, as when the groups have tokens (and as
    device.grouped_gemm refuses them)."""
    for t in (0, 16):
        c = np.zeros((2, 16, 64), np.float32)
        dyq = oracle.group_quantize(np.ones((t, 16), BF16), [t, 0], columnwise=True)
        for opts, match in ((dict(rule="torchao"), "incompatible scale rules"), (dict(rht=True), "RHT")):
            xq = oracle.group_quantize(np.ones((t, 64), BF16), [t, 0], columnwise=True, **opts)
            with pytest.raises(ValueError, match=match):
                oracle.grouped_gemm(dyq, xq, kind="wgrad", accumulate=c)


def test_grouped_gemm_checks_the_model_and_out_dtype_when_no_group_has_tokens():
    xq = oracle.group_quantize(np.zeros((0, 64), BF16), [0, 0], columnwise=True)
    dyq = oracle.group_quantize(np.zeros((0, 16), BF16), [0, 0], columnwise=True)
    with pytest.raises(ValueError, match="model must be"):
        oracle.grouped_gemm(dyq, xq, kind="wgrad", model="bad", accumulate=np.zeros((2, 16, 64), np.float32))
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        oracle.grouped_gemm(dyq, xq, kind="wgrad", out_dtype="")
    assert oracle.grouped_gemm(dyq, xq, kind="wgrad").shape == (2, 16, 64)


def test_grouped_linear_backward_names_a_main_grad_that_is_not_float32():
    torch = pytest.importorskip("torch")
    x, w = X.astype(BF16), np.zeros((2, 16, 64), BF16)
    dy = np.zeros((32, 16), BF16)
    with pytest.raises(TypeError, match="main_grad must be float32, got dtype torch.bfloat16"):
        oracle.grouped_linear_backward(x, w, [16, 16], dy, main_grad=torch.zeros(2, 16, 64, dtype=torch.bfloat16))


def test_grouped_bias_grad_of_zero_columns():
    assert oracle.grouped_bias_grad(np.zeros((40, 0), BF16), [10, 0, 30]).shape == (3, 0)


# ----------------------------------------------------------------------------------------- layouts (SPEC 8, 9)

@pytest.mark.parametrize("splits, cols, error", [([1.5, 2.7], 64, TypeError), ([3], -16, ValueError),
                                                 ([3], 16.9, TypeError), ([[3, 4]], 16, ValueError),
                                                 ([], 16, ValueError), ([3, -1], 16, ValueError)])
def test_grouped_scale_offsets_refuses_sizes_that_are_not_sizes(splits, cols, error):
    with pytest.raises(error):
        grouped_scale_offsets(splits, cols)


@pytest.mark.parametrize("r, c, pc, match", [(0, 12, 12, "columns"), (-1, 0, 12, "rows >= 0"), (0, 0, 10, "multiple of 4"),
                                             (np.array([0.5]), 0, 12, "r must be integers")])
def test_swizzled_offset_refuses_positions_outside_the_padded_matrix(r, c, pc, match):
    with pytest.raises((ValueError, TypeError), match=match):
        swizzled_offset(r, c, pc)


def test_unswizzle_scales_names_sizes_that_are_not_integers():
    buf = np.zeros(512, np.uint8)
    with pytest.raises(TypeError, match="rows must be an integer"):
        unswizzle_scales(buf, 40.0, 4)
    with pytest.raises(TypeError, match="cols must be an integer"):
        unswizzle_scales(buf, 40, "4")


# --------------------------------------------------------------------------------------------------- diagnose

def test_diagnose_takes_rules_from_any_iterable():
    x = X[:16, :32].copy()
    q = oracle.quantize(x)
    gen = oracle.diagnose(x, q.row.data, q.row.scales, rules=(r for r in ["te", "torchao"]))
    tup = oracle.diagnose(x, q.row.data, q.row.scales, rules=("te", "torchao"))
    assert gen.matches == tup.matches and "te" in gen.matches
    with pytest.raises(TypeError, match="rules must be a rule name or several"):
        oracle.diagnose(x, q.row.data, q.row.scales, rules=5)


# ------------------------------------------------------------------------------------------------ codecs (SPEC 2.3)

def test_fp4_packing_names_a_scalar_and_a_count_that_is_not_an_integer():
    from oracle.fp4_numpy import pack_fp4, unpack_fp4

    with pytest.raises(ValueError, match="at least one dimension"):
        unpack_fp4(np.uint8(3), 2)
    with pytest.raises(ValueError, match="at least one dimension"):
        pack_fp4(np.uint8(3))
    with pytest.raises(TypeError, match="n must be an integer"):
        unpack_fp4(np.zeros(3, np.uint8), 6.0)
    assert unpack_fp4(np.array([0x21, 0x03], np.uint8), np.int64(3)).tolist() == [1, 2, 3]  # SPEC 2.3: low nibble first


# ------------------------------------------------------------------------------------------------- named choices

def test_named_choices_are_strings():
    """A one-element array or a list is not a rule, rounding, model or kind (NumPy's elementwise == let an array pass
    the membership test, and a list failed later as unhashable)."""
    with pytest.raises(ValueError, match="rule must be one of"):
        oracle.quantize(X, rule=np.array(["te"]))
    with pytest.raises(ValueError, match="rounding must be"):
        oracle.quantize(X, rounding=np.array(["rn"]))
    a = oracle.quantize(X).row
    g = oracle.group_quantize(X, [16, 16])
    for bad in (["exact"], np.array(["exact"])):
        with pytest.raises(ValueError, match="model must be"):
            oracle.gemm(a, a, model=bad)
    for bad in (["fprop"], np.array(["fprop"])):
        with pytest.raises(ValueError, match="kind must be one of"):
            oracle.grouped_gemm(g, g, kind=bad)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        oracle.gemm(a, a, out_dtype=np.array(["float32"]))
    with pytest.raises(ValueError, match="rule must be one of"):
        oracle.QuantizedPlane(a.data, a.scales, a.amax, a.shape, rule=np.array(["torchao"]))



def test_spellings_that_stay_accepted():
    """A block string with spaces, a tuple amax of [E, 1] columns (E values each), empty swizzle positions."""
    assert oracle.quantize(X, block=" 16x16 ").row.block == (16, 16)
    t = oracle.group_quantize(X, [10, 22], amax=(np.ones((2, 1)), np.full((2, 1), 2.0)), columnwise=True)
    assert t.row_amax.tolist() == [1.0, 1.0] and t.col_amax.tolist() == [2.0, 2.0]
    assert swizzled_offset([], [], 4).shape == (0,)


def test_a_bfloat16_array_reloaded_from_np_save_gets_a_hint():
    """np.save writes ml_dtypes.bfloat16 as the raw type |V2, which np.load returns: quantize and rht refuse it (it is
    not a float dtype) and say how to read it back."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.ones((16, 16), ml_dtypes.bfloat16))
    buf.seek(0)
    y = np.load(buf)
    assert y.dtype.str == "|V2"
    for call in (lambda: oracle.quantize(y), lambda: oracle.rht(y)):
        with pytest.raises(TypeError, match=r"saved with np.save loads as \|V2: read it with "
                                            r"x.view\(np.uint16\).view\(ml_dtypes.bfloat16\)"):
            call()
    assert np.array_equal(oracle.quantize(y.view(np.uint16).view(ml_dtypes.bfloat16)).row.data,
                          oracle.quantize(np.ones((16, 16), ml_dtypes.bfloat16)).row.data)


def test_torch_tensors_numpy_cannot_hold_are_named():
    """A meta tensor (no values) is a ValueError and a torch dtype without a NumPy form a TypeError that names it
    (torch's own "Cannot copy out of meta tensor" NotImplementedError and "Got unsupported ScalarType" leaked
    through); a float8_e4m3fn tensor reads as ml_dtypes' float8 (then refused by quantize as a dtype it does not
    take)."""
    torch = pytest.importorskip("torch")
    from oracle.checks import from_torch

    with pytest.raises(ValueError, match="a meta tensor holds no values"):
        oracle.quantize(torch.zeros(16, 16, device="meta"))
    with pytest.raises(TypeError, match="a torch torch.float8_e5m2 tensor has no NumPy form"):
        oracle.quantize(torch.zeros(16, 16, dtype=torch.float8_e5m2))
    f8 = torch.tensor([0.5, -448.0]).to(torch.float8_e4m3fn)
    got = from_torch(f8)
    assert got.dtype == ml_dtypes.float8_e4m3fn and got.view(np.uint8).tolist() == [0x30, 0xFE]
    with pytest.raises(TypeError, match="got dtype float8_e4m3fn"):
        oracle.quantize(torch.zeros(16, 16, dtype=torch.float8_e4m3fn))


def test_is_real_takes_every_real_dtype():
    """checks.is_real: NumPy integers (signed and unsigned) and floats, ml_dtypes' bfloat16 and float8 types; not
    bool, complex, strings or objects."""
    from oracle.checks import is_real

    for dt in (np.int8, np.uint8, np.uint32, np.int64, np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
               ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        assert is_real(np.zeros(1, dt)), dt
    for dt in (np.bool_, np.complex64, np.str_, object):
        assert not is_real(np.zeros(1, dt)), dt


def test_a_torch_parameter_is_a_tensor():
    """A torch.nn.Parameter (module torch.nn.parameter) is read as the tensor it is: the layer gives the bytes of the
    same values as NumPy arrays."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((20, 32)).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((2, 16, 32)) * 0.1).astype(ml_dtypes.bfloat16)
    tw = torch.nn.Parameter(torch.from_numpy(w.view(np.int16)).view(torch.bfloat16), requires_grad=False)
    want = oracle.grouped_linear_forward(x, w, [12, 8])
    got = oracle.grouped_linear_forward(x, tw, [12, 8])
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# ------------------------------------------------------------------------------------ results, codecs and helpers

def test_an_nvfp4_tensor_holds_planes_that_fit_its_shape():
    """NVFP4Tensor: planes are QuantizedPlanes or None; the row plane is X [M, K], the col plane X^T
    [K, roundup(M, 16)] (SPEC 6.2) with M valid columns. A rowwise plane given as the columnwise one (which
    to_te_fields would write as columnwise_data, the plane of a [64, 32] X) is refused."""
    t = oracle.quantize(X, columnwise=True)
    assert oracle.NVFP4Tensor(t.row, t.col, (32, 64)) == t  # (a correct pair is accepted)
    x20 = X[:20]
    t20 = oracle.quantize(x20, columnwise=True)
    assert t20.col.shape == (64, 32) and oracle.NVFP4Tensor(None, t20.col, (20, 64)).col is t20.col
    with pytest.raises(TypeError, match="row must be a QuantizedPlane or None, got str"):
        oracle.NVFP4Tensor("abc", None, (32, 64))
    with pytest.raises(TypeError, match="col must be a QuantizedPlane or None, got ndarray"):
        oracle.NVFP4Tensor(None, np.zeros((64, 16), np.uint8), (32, 64))
    with pytest.raises(ValueError, match=r"the col plane of shape \(32, 64\) is not the plane of X\^T"):
        oracle.NVFP4Tensor(None, t.row, (32, 64))
    with pytest.raises(ValueError, match=r"the row plane of shape \(32, 64\) is not the plane of X \[M, K\]"):
        oracle.NVFP4Tensor(t.row, None, (5, 5))
    with pytest.raises(ValueError, match="the col plane holds 20 valid columns, shape's M is 32"):
        oracle.NVFP4Tensor(None, t20.col, (32, 64))
    with pytest.raises(ValueError, match=r"shape must be \(M, K\)"):
        oracle.NVFP4Tensor(t.row, None, 32)
    with pytest.raises(TypeError, match="shape's M must be an integer"):
        oracle.NVFP4Tensor(t.row, None, (32.0, 64))
    with pytest.raises(TypeError, match="as_torch must be True or False"):
        oracle.to_te_fields(t, as_torch="no")


def test_within_bound_names_a_bound_that_does_not_broadcast():
    y = np.zeros((32, 48), np.float32)
    with pytest.raises(ValueError, match=r"bound of shape \(3, 48\) does not fit the output's \(32, 48\)"):
        oracle.within_bound(y, y, np.zeros((3, 48)))
    with pytest.raises(ValueError, match=r"bound of shape \(2, 32, 48\) does not fit"):
        oracle.within_bound(y, y, np.zeros((2, 32, 48)))  # (broadcasts, but to a larger shape)
    assert oracle.within_bound(y, y, np.zeros(48)).all()


def test_e2m1_codecs_check_codes_and_take_torch_bfloat16():
    """decode_e2m1: a uint8 array's low nibbles (its high ones ignored, as documented); other integer dtypes must
    hold codes 0..15 (SPEC 2.1). encode_e2m1 takes a torch bfloat16 tensor as the values it holds."""
    from oracle import fp4_numpy

    assert fp4_numpy.decode_e2m1(np.array([0x9F, 0x07], np.uint8)).tolist() == [-6.0, 6.0]
    assert fp4_numpy.decode_e2m1(np.array([15, 1], np.int64)).tolist() == [-6.0, 0.5]
    for bad in (np.array([-1]), np.array([16]), np.array([3, 300], np.uint16)):
        with pytest.raises(ValueError, match="E2M1 codes are 0..15"):
            fp4_numpy.decode_e2m1(bad)
    torch = pytest.importorskip("torch")
    v = [0.5, -6.0, 2.5, 0.2]
    want = fp4_numpy.encode_e2m1(np.array(v, np.float32))
    assert fp4_numpy.encode_e2m1(torch.tensor(v, dtype=torch.bfloat16)).tolist() == want.tolist() == [1, 15, 4, 0]


def test_round_up_and_grouped_offsets_refuse_what_is_not_a_size():
    from oracle.swizzle import round_up

    assert round_up(5, 4) == 8 and round_up(np.array([0, 1, 16]), 16).tolist() == [0, 16, 16]
    with pytest.raises(ValueError, match="m must be >= 1"):
        round_up(5, 0)
    with pytest.raises(ValueError, match="m must be >= 1"):
        round_up(5, -4)
    with pytest.raises(TypeError, match="n must be an integer"):
        round_up(5.5, 4)
    with pytest.raises(TypeError, match="n must be an integer or an integer array"):
        round_up(np.array([1.5]), 4)
    with pytest.raises(TypeError, match="splits must be integer group sizes"):
        grouped_scale_offsets([True, 5], 16)
    with pytest.raises(ValueError, match="splits must be >= 0 and below 2"):
        grouped_scale_offsets(np.array([2**63], np.uint64), 16)


def test_public_annotations_resolve_without_torch():
    """typing.get_type_hints (what help(), IDEs and documentation tools read) resolves the annotations of every public
    oracle function, and of the public methods of its classes, in a process where torch cannot be imported: a name
    that exists only for type checkers (torch.Tensor, a TYPE_CHECKING alias) fails here."""
    code = """
import sys, typing
sys.modules["torch"] = None  # importing torch raises ImportError in this process
import oracle
failed = []
for name in oracle.__all__:
    obj = getattr(oracle, name)
    if isinstance(obj, type):
        members = [getattr(obj, k) for k, v in vars(obj).items()
                   if k in ("__new__", "__init__") or (not k.startswith("_") and callable(v))]
    else:
        members = [obj] if callable(obj) else []
    for m in members:
        try:
            typing.get_type_hints(m)
        except Exception as e:  # (every failure is reported)
            failed.append(f"{name}.{getattr(m, '__name__', m)}: {e!r}")
print(len(failed), failed)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("0 "), r.stdout
