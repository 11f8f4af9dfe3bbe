"""What conformance/ops.py and backends.py forward: a quantize case's SR seed and offset reach the reference, the GEMM
epilogue helper applies alpha, C, bias and the output dtype, the model backends run their own models (not the exact
one), the composed backend quantizes each group with its own offset and amax, and the CPU backends owe every buffer
the docs say. Expected values are worked by hand from SPEC.md (sections cited per test) or are properties SPEC.md
states; none is taken from the code's output, except where a backend built on the oracle is compared with the
reference to show what it forwards (the composed backend's per-group offsets: the offset itself is checked against
SPEC 10.2 in tests/test_oracle_rht_sr.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conformance_cases import quantize_case

from conformance import backends as B
from conformance.cases import Case
from conformance.compare import compare
from conformance.ops import reference
from conformance.runner import RunConfig, check_case, run

# ---------------------------------------------------------------------------------------------------------------
# stochastic rounding options of a quantize case reach the reference (SPEC 10)
# ---------------------------------------------------------------------------------------------------------------

def _tie_rows(rows: int = 64) -> np.ndarray:
    """Rows [6, 0.25 x 15]. Under rule te with the amax supplied as 2688 (or computed as 6: S_enc = 448, block scale
    byte 448), S_enc / S_dec_b = 1, so the codes are E2M1(x): 6 -> 0x7; 0.25 lies halfway between 0 (code 0) and
    0.5 (code 1): RN gives 0 (tie to even, SPEC 3.1), SR gives 0 or 1 with probability 1/2 each (SPEC 10)."""
    x = np.full((rows, 16), 0.25, np.float32)
    x[:, 0] = 6.0
    return x


def _sr_quantize_case(**opts) -> Case:
    c = quantize_case(_tie_rows(), **opts)
    c.arrays["amax"] = np.array([2688.0], np.float32)
    return c


@pytest.mark.parametrize("a, b", [(dict(seed=1, offset=0), dict(seed=2, offset=0)),
                                  (dict(seed=1, offset=5), dict(seed=1, offset=6))])
def test_quantize_reference_draws_from_the_cases_seed_and_offset(a, b):
    """SPEC 10.2: the Philox key is the seed and the counter's last word the offset: another seed or offset is
    another stream, and 960 fair draws agree across two streams with probability 2^-960."""
    ya = reference(_sr_quantize_case(rounding="sr", **a))["row_data"]
    yb = reference(_sr_quantize_case(rounding="sr", **b))["row_data"]
    assert not np.array_equal(ya, yb)


# ---------------------------------------------------------------------------------------------------------------
# the gemm backends run the model they are named for (SPEC 12.2, 12.3, 12.6)
# ---------------------------------------------------------------------------------------------------------------

def _absorbing_gemm_case() -> Case:
    """M = N = 1, K = 48, rule torchao_noscale (alpha 1, block byte E4M3(b / 6), SPEC 5.5, 12.1).
    a: block 0 sixteen 1536 (scale 256, codes 6), blocks 1, 2: [0.75, 0 x 15] (scale 0.125, code 6 then 0);
    b: block 0 sixteen 768 (scale 128), blocks 1, 2 as a's.
    Block terms: 256 * 128 * (16 * 36) = 9 * 2^21 = 18874368, then 0.125^2 * 36 = 0.5625 twice.
    Exact (12.3): 18874369.125 rounded once to fp32 (ulp 2 in [2^24, 2^25)) = 18874370.
    Sequential (12.2): fp32(18874368 + 0.5625) = 18874368, twice: 18874368.
    Tensor core (12.6): step 1 sums to 18874368 exactly; steps 2, 3: E = e(C) = 24, the addend 0.5625 is truncated
    to a multiple of 2^-1 (0.5), 18874368.5 rounded toward zero: 18874368."""
    a = np.zeros((1, 48), np.float32)
    b = np.zeros((1, 48), np.float32)
    a[0, :16], b[0, :16] = 1536.0, 768.0
    a[0, 16] = a[0, 32] = b[0, 16] = b[0, 32] = 0.75
    q = {"rule": "torchao_noscale", "rounding": "rn", "seed": 0, "offset": 0}
    return Case("gemm", 0, 0, {"a": a, "b": b}, {"rule": "torchao_noscale", "out_dtype": "float32", "alpha": None,
                                                  "quant_a": q, "quant_b": dict(q), "b_block": [1, 16]}, {})


@pytest.mark.parametrize("backend", ["oracle-seq", "oracle-tc"])
def test_gemm_model_backends_do_not_run_the_exact_model(backend):
    c = _absorbing_gemm_case()
    ref = reference(c)
    assert ref["y"].dtype == np.float32 and ref["y"][0, 0] == np.float32(18874370.0)
    out = B.make_backend(backend).run("gemm", c)
    assert out["y"][0, 0] == np.float32(18874368.0)
    assert not compare(c, ref, out, "bound")  # 2 below exact, within the SPEC 12.4 bound


# ---------------------------------------------------------------------------------------------------------------
# the gemm reference applies the case's epilogue (SPEC 12.1-12.3); every gemm backend reads the same
# ops.gemm_epilogue, so only a hand-worked value catches an option it drops
# ---------------------------------------------------------------------------------------------------------------

def _sixes_case(op: str = "gemm_exact", out_dtype: str = "float32", alpha=None, **arrays) -> Case:
    """A = B = one row of sixteen 6.0 under rule torchao_noscale (SPEC 5.5: byte E4M3(6 / 6) = 1.0, codes 6; alpha
    automatic = 1, SPEC 12.1): S = 16 * 6 * 6 = 576."""
    x = np.full((1, 16), 6.0, np.float32)
    q = {"rule": "torchao_noscale", "rounding": "rn", "seed": 0, "offset": 0}
    return Case(op, 0, 0, {"a": x, "b": x.copy(), **arrays},
                {"rule": "torchao_noscale", "out_dtype": out_dtype, "alpha": alpha, "quant_a": q, "quant_b": dict(q),
                 "b_block": [1, 16]}, {})


@pytest.mark.parametrize("op", ["gemm_exact", "gemm"])
@pytest.mark.parametrize("kw, want", [
    ({}, 576.0),                                                     # alpha 1
    ({"alpha": 0.5}, 288.0),                                         # alpha * S
    ({"c": np.array([[2.0]], np.float32)}, 578.0),                   # + C
    ({"bias": np.array([1.0], np.float32)}, 577.0),                  # + bias[n]
    ({"alpha": 0.5, "c": np.array([[2.0]], np.float32), "bias": np.array([1.0], np.float32)}, 291.0),
])
def test_gemm_reference_applies_alpha_c_and_bias(op, kw, want):
    kw = dict(kw)
    c = _sixes_case(op, alpha=kw.pop("alpha", None), **kw)
    y = reference(c)["y"]
    assert y.dtype == np.float32 and y.shape == (1, 1) and y[0, 0] == np.float32(want)


def test_gemm_reference_rounds_to_the_out_dtype():
    """576 + bias 1 = 577 exactly; in bf16 (8 significant bits, ulp 4 in [512, 1024)) 577 rounds to 576."""
    y = reference(_sixes_case(out_dtype="bfloat16", bias=np.array([1.0], np.float32)))["y"]
    assert y.dtype.name == "bfloat16" and float(y[0, 0]) == 576.0


def test_oracle_grouped_fast_mode_runs_the_sequential_model():
    """The case above as a one-group fprop (X = a, W = b, bf16 holds 1536, 768 and 0.75 exactly; both operands under
    torchao_noscale, 1x16 weight blocks): oracle-grouped's grouped_gemm must be the sequential model (docs: "Fast mode
    runs the sequential model"), 18874368, against the exact reference 18874370 within the bound."""
    import ml_dtypes

    g = _absorbing_gemm_case()
    x, w = g.arrays["a"].astype(ml_dtypes.bfloat16), g.arrays["b"].astype(ml_dtypes.bfloat16)
    q = {"rule": "torchao_noscale", "rounding": "rn", "seed": 0, "offset": 0}
    c = Case("grouped_gemm", 0, 0, {"x": x, "w": w, "dy": np.zeros((1, 1), ml_dtypes.bfloat16),
                                    "splits": np.array([1], np.int64)},
             {"kind": "fprop", "out_dtype": "float32", "rht": False, "rht_signs": 0xD7E8, "quant_a": q,
              "quant_b": dict(q), "b_block": [1, 16], "algorithm": "auto", "loader": None, "epilogue": None,
              "num_sms": 0}, {})
    ref = reference(c)
    assert ref["y"][0, 0] == np.float32(18874370.0)
    out = B.make_backend("oracle-grouped").run("grouped_gemm", c)
    assert out["y"][0, 0] == np.float32(18874368.0)
    assert not compare(c, ref, out, "bound")


# ---------------------------------------------------------------------------------------------------------------
# the mldtypes backend dequantizes by the case's rule (docs: "the rule's factor in fp32 ... torchao (amax / 2688) * sf,
# torchao_noscale sf"; SPEC 11.1)
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, want", [("torchao", 2.0), ("torchao_noscale", 1.0)])
def test_mldtypes_dequantize_uses_the_cases_rule(rule, want):
    """One block: element 0 code 0x2 (E2M1 1.0, low nibble first), the rest 0; scale byte 0x38 (E4M3 1.0); amax
    5376. torchao: f = (5376 / 2688) * 1 = 2; torchao_noscale: f = 1. y[0, 0] = 1.0 * f, the rest 0."""
    data = np.zeros((1, 8), np.uint8)
    data[0, 0] = 0x02
    c = Case("dequantize", 0, 0, {"data": data, "scales": np.array([[0x38]], np.uint8),
                                  "amax": np.array([5376.0], np.float32)},
             {"rule": rule, "offset": 0, "swizzled": False}, {})
    want_y = np.zeros((1, 16), np.float32)
    want_y[0, 0] = want
    assert np.array_equal(reference(c)["y"], want_y)
    assert np.array_equal(B.make_backend("mldtypes").run("dequantize", c)["y"], want_y)


# ---------------------------------------------------------------------------------------------------------------
# the composed backend's per-group calls (docs: group g = oracle.quantize(x_g, offset=offset + g, amax=amax_g))
# ---------------------------------------------------------------------------------------------------------------

def test_composed_group_quantize_uses_each_groups_offset_and_amax():
    """Two groups of 64 tie rows, SR: group 1 draws from counter word offset + 1 (SPEC 10.2), so a composed backend
    that reused offset would differ in about half of group 1's 960 ties. Supplied amaxes 2688 and 5376 (SPEC 4.3):
    S_enc 1 and 0.5, block scale bytes E4M3(1.0) = 0x38 and E4M3(0.5) = 0x30 (codes E2M1(x) in both groups)."""
    x = np.concatenate([_tie_rows(), _tie_rows()])
    c = quantize_case(x, "group_quantize", rounding="sr", seed=1, offset=5)
    c.arrays["splits"] = np.array([64, 64], np.int64)
    c.arrays["amax"] = np.array([[2688.0, 5376.0]], np.float32)
    ref = reference(c)
    assert ref["row_amax"].tolist() == [2688.0, 5376.0]
    assert set(np.unique(ref["row_scales_compact"][ref["row_scales_compact"] != 0])) == {0x38, 0x30}
    out = B.make_backend("composed").run("group_quantize", c)
    assert not compare(c, ref, out)
    assert np.array_equal(out["row_data"], ref["row_data"])


# ---------------------------------------------------------------------------------------------------------------
# which buffers a CPU backend must return (docs: "A backend must return every buffer the reference has for the case,
# unless its expected_outputs narrows the set ... composed has no tile table")
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", [pytest.param("torch-te", marks=pytest.mark.torch), "composed"])
def test_cpu_group_quantize_backends_owe_every_buffer_but_the_tile_table(backend):
    c = quantize_case(np.ones((20, 32), np.float32), "group_quantize", columnwise=True)
    c.arrays["splits"] = np.array([4, 16], np.int64)
    ref = reference(c)
    want = set(ref) - {"row_tile_offsets"}
    assert {"row_amax", "col_amax", "row_data_tail", "row_scales_tail", "col_data_tail", "col_scales_tail",
            "row_scales_compact", "col_scales"} <= want
    b = B.make_backend(backend)
    assert b.expected_outputs("group_quantize", c, ref.keys()) == want
    assert not compare(c, {k: ref[k] for k in want}, b.run("group_quantize", c))


def test_torch_te_quantize_owes_every_buffer():
    c = quantize_case(np.ones((3, 32), np.float32), columnwise=True)
    ref = reference(c)
    assert B.make_backend("torch-te").expected_outputs("quantize", c, ref.keys()) == set(ref)


# ---------------------------------------------------------------------------------------------------------------
# the composed backend reads a supplied (row, col) amax pair per group the right way round (SPEC 4.3, 9)
# ---------------------------------------------------------------------------------------------------------------

def test_composed_group_quantize_gives_each_plane_its_own_supplied_amax():
    """Two groups of sixteen rows of 6.0, both planes, amax supplied as [2, E] = (row amaxes, col amaxes):
    rows [2688, 5376], cols [10752, 1344]. SPEC 4.3 / 5.1: S_enc = 448 * 6 / amax = 1, 0.5 (row) and 0.25, 2 (col);
    every block's amax is 6, so its scale byte is E4M3(6 / 6 * S_enc): row 0x38, 0x30, col 0x28, 0x40, and every
    code is E2M1(6 * S_enc / s) = E2M1(6) = 0x7 (bytes 0x77). A backend that hands group g the col amax for its
    row plane (or the reverse) writes the other group's scale bytes and amaxes."""
    x = np.full((32, 16), 6.0, np.float32)
    c = quantize_case(x, "group_quantize", columnwise=True)
    c.arrays["splits"] = np.array([16, 16], np.int64)
    c.arrays["amax"] = np.array([[2688.0, 5376.0], [10752.0, 1344.0]], np.float32)
    want_amax = {"row": [2688.0, 5376.0], "col": [10752.0, 1344.0]}
    want_bytes = {"row": [0x38, 0x30], "col": [0x28, 0x40]}
    ref = reference(c)
    out = B.make_backend("composed").run("group_quantize", c)
    for got in (ref, out):
        for p in ("row", "col"):
            assert got[f"{p}_amax"].tolist() == want_amax[p]
            assert np.all(got[f"{p}_data"] == 0x77)
            offs = ref[f"{p}_scale_offsets"]
            for g in range(2):
                region = got[f"{p}_scales"][offs[g]:offs[g + 1]]
                assert set(np.unique(region[region != 0]).tolist()) == {want_bytes[p][g]}
                assert np.count_nonzero(region) == 16  # 16 rows (row plane) or 16 columns (col plane), 1 block each
    assert not compare(c, {k: ref[k] for k in set(ref) - {"row_tile_offsets"}}, out)


# ---------------------------------------------------------------------------------------------------------------
# the torchao backend owes both planes of a quantize result (docs: torchao quantize "every buffer, bytes")
# ---------------------------------------------------------------------------------------------------------------

class _TorchaoWithoutColumnwise(B.TorchaoBackend):
    """torchao's output contract (expected_outputs, space) around a quantize that never returns the columnwise
    plane (the oracle's rowwise buffers only): needs no torchao."""

    name = "test-torchao-nocol"

    def available(self):
        return None

    def run(self, op, case):
        return {k: v for k, v in reference(case).items() if not k.startswith("col_")}


def test_torchao_quantize_owes_both_planes_and_layout_only_the_swizzle():
    """A torchao-rule quantize case asking for both planes: torchao must return every reference buffer, the
    columnwise data and compact scales included, so a torchao that drops the columnwise plane is reported missing
    col_data, col_scales, col_scales_swizzled and col_amax; for the layout op only the swizzle is owed."""
    c = quantize_case(np.ones((16, 32), np.float32), rule="torchao", columnwise=True)
    ref = reference(c)
    assert {"row_data", "row_scales", "col_data", "col_scales", "col_scales_swizzled", "col_amax"} <= set(ref)
    b = _TorchaoWithoutColumnwise()
    assert b.expected_outputs("quantize", c, ref.keys()) == set(ref)
    status, ms, *_ = check_case(b, c)
    assert status == "mismatch"
    assert {m.buffer for m in ms} == {"col_data", "col_scales", "col_scales_swizzled", "col_amax"}
    assert all(m.count == -1 for m in ms)
    assert b.expected_outputs("layout", c, ["swizzled", "roundtrip", "capacities"]) == {"swizzled"}


# ---------------------------------------------------------------------------------------------------------------
# the mldtypes backend takes part in the dequantize op (docs' backend table: mldtypes e2m1, e4m3, bf16, dequantize)
# ---------------------------------------------------------------------------------------------------------------

def test_mldtypes_runs_the_dequantize_op(tmp_path):
    """A run of the dequantize op with the mldtypes backend alone runs its cases (ml_dtypes' decoders against
    oracle.dequantize, SPEC 11) and they conform; the backend names the three casts and dequantize as its ops."""
    assert set(B.make_backend("mldtypes").ops) == {"e2m1", "e4m3", "bf16", "dequantize"}
    cfg = RunConfig(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1,
                    backends=["mldtypes"], ops=["dequantize"], max_cases=4)
    code, stats = run(cfg)
    assert code == 0, [f.get("mismatch_text") for f in stats.failures]
    assert sorted(stats.tasks[("mldtypes", "dequantize")].indices) == [0, 1, 2, 3]


def test_device_specs_name_cuda_or_cuda_n_only():
    for bad in ("device:cuda0", "device:cpu", "device:cuda:x"):
        with pytest.raises(B.BackendSpecError, match="unknown device"):
            B.make_backend(bad)


def test_options_reach_a_device_function_that_takes_kwargs():
    """_call hands every keyword to a function with **kwargs (a plugin's quantize) and only the accepted ones to
    others; _layout_kw names the scale layout as device.quantize's `swizzled` for such a function."""
    assert B._call(lambda x, **kw: kw, 1, rht=True, seed=3) == {"rht": True, "seed": 3}
    assert B._call(lambda x, rht=False: rht, 1, rht=True, seed=3) is True
    assert B._layout_kw(lambda x, **kw: 0, False) == {"swizzled": False}
    assert B._layout_kw(lambda x, layout="compact": 0, True) == {"layout": "swizzled"}


def test_composed_group_quantize_on_row_scaled_cases():
    """composed (each group quantized alone, then assembled) on row-scaled group_quantize cases with at least two
    groups, with and without supplied per-row amaxes: every buffer equals the reference's."""
    from conformance_cases import generated_cases

    b, seen = B.ComposedBackend(), set()
    for c in generated_cases("group_quantize", 60, seed=3, max_elems=1 << 12, rule=["te"], rounding=["rn"],
                             rht=[False], block=[[1, 16]], row_scaled=[True]):
        if c.arrays["splits"].size < 2 or c.options.get("splits_rule", "exact") != "exact":
            continue
        status, ms, *_ = check_case(b, c)
        assert status == "pass", (c.index, ms[:1])
        seen.add(("amax" in c.arrays or "col_amax" in c.arrays, c.options["columnwise"]))
    assert {(True, True), (False, True), (True, False)} <= seen, seen


def test_fractions_forms_the_automatic_alpha_itself():
    """gemm_exact cases with alpha=None (SPEC 12.1's alpha from the planes) and fp32 output, both rule families: the
    fractions backend's bytes (its alpha written from the formula, _alpha_by_hand) are the reference's."""
    from conformance.generators import generate
    from conformance.ops import OPS

    b, ran = B.FractionsBackend(), Counter()
    for rule in ("te", "torchao"):
        space = {**OPS["gemm_exact"].space, "rule": [rule], "out_dtype": ["float32"], "specials": False}
        for i in range(40):
            c = generate("gemm_exact", 5, i, OPS["gemm_exact"].generator, space)
            if c.options.get("alpha") is not None:
                continue
            status, ms, *_ = check_case(b, c)
            assert status == "pass", (rule, i, ms[:1])
            ran[rule] += 1
    assert ran["te"] >= 3 and ran["torchao"] >= 3, ran


def test_wgrad_reference_reads_each_groups_own_x_rows():
    """A wgrad case whose groups disagree (SPEC 12.5): dY's splits [2, 0, 0, 0, 10, 0, 5, 0], X's [2, 0, 0, 4, 10, 0, 1,
    0]. Group 4 agrees (10 tokens each) and sits after X's extra 4 rows in group 3, so its dW is dY rows 2-11 against
    X rows 6-15, each quantized alone (SPEC 9.1: a group is quantized as its own tensor) with the case's operand
    options, multiplied by SPEC 12.2's sequential model; the disagreeing groups 3 and 6 are NaN."""
    import oracle
    from conformance.generators import generate
    from conformance.ops import OPS

    op = OPS["grouped_gemm_exact"]
    c = generate("grouped_gemm_exact", 17, 1, op.generator, {**op.space, "kind": ["wgrad"], "groups_agree": [False]})
    a, o = c.arrays, c.options
    assert a["splits"].tolist() == [2, 0, 0, 0, 10, 0, 5, 0] and o["b_splits"] == [2, 0, 0, 4, 10, 0, 1, 0]
    assert not o["rht"] and "c" not in a  # (the case as the docstring reads it)
    y = reference(c)["y"]

    def col_plane(t, q):
        return oracle.quantize(t, rowwise=False, columnwise=True, rule=q["rule"], rounding=q["rounding"],
                               seed=q["seed"], offset=q["offset"] + 4).col

    want = oracle.gemm(col_plane(a["dy"][2:12], o["quant_a"]), col_plane(a["x"][6:16], o["quant_b"]),
                       model="sequential", out_dtype=o["out_dtype"])
    assert y[4].tobytes() == np.asarray(want).tobytes()
    assert np.isnan(y[3]).all() and np.isnan(y[6]).all()
