"""conformance.diagnosis: a failing quantize case's record carries what oracle.diagnose says of the backend's bytes
(CPU). The reference bytes come from conformance.te_torch (torch, written from the SPEC); the planted bugs are
hand-made edits of them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch")
from conformance import te_torch as tt  # noqa: E402
from conformance.cases import Case  # noqa: E402
from conformance.diagnosis import failure_hypotheses, group_quantize_hypotheses, quantize_hypotheses  # noqa: E402
from oracle.rht import DEFAULT_RHT_SIGNS  # noqa: E402


def _case(x, **over) -> Case:
    o = dict(rowwise=True, columnwise=True, rht=False, rht_signs=DEFAULT_RHT_SIGNS, block=[1, 16], rule="te",
             rounding="rn", seed=0, offset=0)
    o.update(over)
    return Case(op="quantize", seed=0, index=0, arrays={"x": x}, options=o, tags={})


def _x(m=48, k=64, seed=4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)) * 3 * np.exp2(rng.integers(-3, 4, (m, 1)))).astype(ml_dtypes.bfloat16)


def _bufs(x, **kw) -> dict:
    o = tt.quantize(x, columnwise=True, **kw)
    return {k: np.asarray(v) for k, v in o.items() if k in ("row_data", "row_scales", "row_amax", "col_data",
                                                            "col_scales", "col_amax")}


def test_a_one_ulp_scale_in_one_plane_is_named_for_that_plane_only():
    x = _x()
    ref = _bufs(x)
    out = {k: v.copy() for k, v in ref.items()}
    out["col_scales"][2, 1] += 1
    lines = quantize_hypotheses(_case(x), out, ref)
    assert lines and all(line.startswith("col plane: ") for line in lines), lines
    assert lines[0] == f"col plane: closest te, 1 of {ref['col_scales'].size} blocks differ", lines
    assert any("one ulp off in the scale" in line for line in lines), lines


def test_bytes_of_another_rule_are_named_by_that_rule():
    # torchao 0.18's own quantizer (SPEC 5.4) on a case whose rule is "te": its rowwise bytes are torchao's
    import torch

    from conformance.independent import import_torchao

    mods = import_torchao()
    if mods is None:
        pytest.skip("torchao is not installed")
    nv = mods[0]
    x = _x(200, 64, seed=11)
    ref = _bufs(x)
    xt = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    t = nv.NVFP4Tensor.to_nvfp4(xt, per_tensor_scale=nv.per_tensor_amax_to_scale(xt.abs().max().float()))
    out = {"row_data": t.qdata.numpy(), "row_scales": t.scale.view(torch.uint8).numpy().reshape(-1, 4)}
    assert not (np.array_equal(out["row_data"], ref["row_data"])  # the rules differ on this input
                and np.array_equal(out["row_scales"], ref["row_scales"]))
    lines = quantize_hypotheses(_case(x, columnwise=False), out, ref)
    # (torchao_cuda and torchao_nan_ignoring agree with torchao on this input: a finite amax whose P the two forms
    # give alike)
    assert len(lines) == 1 and lines[0].startswith("row plane: reproduced exactly by torchao"), lines
    matched, _, note = lines[0].partition(", not by ")
    assert "te" not in matched.replace("torchao", ""), lines
    assert note == "the case's own settings (te, 1x16 blocks)", lines


def test_correct_bytes_of_an_option_the_backend_ignored_are_not_read_as_right():
    """A backend that ignores the case's 16x16 blocks writes rule te's 1x16 bytes: the line names te and says that
    the case's own settings (te, 16x16 blocks) do not reproduce them (the bare "reproduced exactly by te" read as if
    the bytes were right)."""
    x = _x(seed=8)
    ref = _bufs(x, block=(16, 16))
    out = _bufs(x)  # the 1x16 bytes
    lines = quantize_hypotheses(_case(x, block=[16, 16]), out, ref)
    assert lines and all(line.startswith(("row plane: reproduced exactly by te", "col plane: reproduced exactly by te"))
                         for line in lines), lines
    assert all(line.endswith(", not by the case's own settings (te, 16x16 blocks)") for line in lines), lines


@pytest.mark.parametrize("kw, plane, words", [
    (dict(rule="te", block=(1, 16), rht=True), "row", "te, 1x16 blocks"),  # the RHT is the columnwise plane's
    (dict(rule="te", block=(1, 16), rht=True), "col", "te, 1x16 blocks, RHT"),
    (dict(rule="torchao_noscale", block=(16, 16), rht=False), "col", "torchao_noscale, 16x16 blocks"),
    (dict(rule="te", four_over_six="mse", global_scale_max=256, block=(1, 16)), "row", "te_4over6_mse_g256, 1x16 blocks"),
    (dict(rule="te", four_over_six="mae", four_over_six_fast_math=True, block=(16, 16)), "row",
     "te_4over6_mae_fast, 16x16 blocks"),
    (dict(rule="te", four_over_six="mse", four_over_six_fast_math=True, global_scale_max=256, block=(1, 16)), "col",
     "te four_over_six=mse four_over_six_fast_math=True global_scale_max=256, 1x16 blocks"),  # no rule names it
])
def test_case_settings_in_words(kw, plane, words):
    from conformance.diagnosis import _setting_words, case_setting

    assert _setting_words(case_setting(kw, plane)) == words


def test_bytes_of_a_variant_of_the_cases_rule_carry_no_note():
    """TE's fused RHT cast kernels' bytes of a NaN input for a te_fused_rht case: diagnose names the SPEC 14.11
    variant te_fused_rht_kernels, whose base rule is the case's, so the line adds no "not by the case's own
    settings" (that note is for bytes of another call). The expected bytes: te_torch's, the NaN block's by hand
    (0x7F and sixteen codes 0x7)."""
    x = _x(seed=9).astype(np.float32)
    x[4, 20] = np.nan  # block (4, 1)
    ref = _bufs(x, rule="te_fused_rht")
    out = {k: v.copy() for k, v in ref.items()}
    out["row_scales"][4, 1] = 0x7F
    out["row_data"][4, 8:16] = 0x77
    lines = quantize_hypotheses(_case(x, rule="te_fused_rht", columnwise=False), out, ref)
    assert lines == ["row plane: reproduced exactly by te_fused_rht_kernels"], lines


def test_nothing_for_planes_that_match_or_cases_diagnose_does_not_model():
    x = _x(seed=6)
    ref = _bufs(x)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_amax"] = out["row_amax"] * 2  # the planes' bytes are right: no plane line
    assert quantize_hypotheses(_case(x), out, ref) == []
    out = {k: v.copy() for k, v in ref.items()}
    out["row_scales"][0, 0] += 1
    assert quantize_hypotheses(_case(x, rounding="sr", seed=3), out, ref) == []  # stochastic rounding
    assert quantize_hypotheses(Case(op="e2m1", seed=0, index=0, arrays={}, options={}, tags={}), out, ref) == []


def test_a_grouped_case_is_diagnosed_group_by_group():
    from conformance.ops import reference

    x = _x(100, 64, seed=7)
    case = _case(x)
    case.op = "group_quantize"
    case.arrays["splits"] = np.array([40, 0, 60], np.int64)
    ref = reference(case)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    so = ref["row_scale_offsets"]
    out["row_scales"][so[2]] += 1  # group 2, row 0, block 0: byte 0 of its swizzled tile (SPEC 8.2)
    lines = group_quantize_hypotheses(case, out, ref)
    assert lines and all(line.startswith("group 2, row plane: ") for line in lines), lines
    assert lines[0] == "group 2, row plane: closest te, 1 of 240 blocks differ", lines  # 60 rows x 4 blocks
    assert any("one ulp off in the scale" in line for line in lines), lines
    assert failure_hypotheses(case, out, ref) == lines
    assert group_quantize_hypotheses(case, ref, ref) == []  # nothing differs


def test_grouped_column_planes_and_the_group_cap():
    # both planes wrong in all four groups: the first three groups are read, each with both planes (SPEC 9.2's column
    # offsets too), the fourth is not
    from conformance.ops import reference

    x = _x(64, 32, seed=8)
    case = _case(x)
    case.op = "group_quantize"
    case.arrays["splits"] = np.array([16, 16, 16, 16], np.int64)
    ref = reference(case)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    for p in ("row", "col"):
        for g in range(4):
            out[f"{p}_scales"][ref[f"{p}_scale_offsets"][g]] += 1  # row 0, block 0 of each group's swizzled tile
    lines = group_quantize_hypotheses(case, out, ref)
    heads = [line for line in lines if " blocks differ" in line]
    assert [h.split(":")[0] for h in heads] == [f"group {g}, {p} plane" for g in range(3) for p in ("row", "col")], lines


def test_failure_hypotheses_never_raise():
    # a 0-d amax where the reference has one per group, and a data buffer of the wrong length: lines, no exception
    from conformance.ops import reference

    x = _x(32, 32, seed=9)
    case = _case(x)
    case.op = "group_quantize"
    case.arrays["splits"] = np.array([16, 16], np.int64)
    ref = reference(case)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["row_amax"] = np.float32(3.0)
    out["row_scales"][ref["row_scale_offsets"][1]] += 1
    lines = failure_hypotheses(case, out, ref)
    assert lines and lines[0].startswith("group 1, row plane: closest"), lines
    out["row_data"] = out["row_data"][:5]
    assert isinstance(failure_hypotheses(case, out, ref), list)
    single = _case(x)
    bad = {"row_data": np.zeros(7, np.uint8), "row_scales": np.zeros(3, np.uint8)}
    lines = failure_hypotheses(single, bad, _bufs(x))
    assert lines and "not diagnosed" in lines[0], lines
