"""conformance.diagnosis: a failing quantize case's record carries what oracle.diagnose says of the backend's bytes
(CPU). The reference bytes come from conformance.te_torch (torch, written from the SPEC); the planted bugs are
hand-made edits of them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import quantize_case

pytest.importorskip("torch")
from conformance import te_torch as tt  # noqa: E402
from conformance.cases import Case  # noqa: E402
from conformance.diagnosis import failure_hypotheses, group_quantize_hypotheses, quantize_hypotheses  # noqa: E402
from conformance.ops import reference  # noqa: E402
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


def test_the_closest_rule_with_other_settings_is_named_as_such():
    """The same backend with one more fault (a flipped data byte): no rule reproduces the bytes, and the closest line
    (te, 1x16 blocks: one block differs) says that the case asked for 16x16 blocks, so that it is not read as a
    one-block bug of the case's own call."""
    x = _x(seed=8)
    ref = _bufs(x, block=(16, 16))
    out = _bufs(x)
    out["row_data"] = out["row_data"].copy()
    out["row_data"][0, 0] ^= 0x11
    lines = quantize_hypotheses(_case(x, block=[16, 16]), out, ref)
    assert lines[0].startswith("row plane: closest te, 1 of "), lines
    assert lines[0].endswith("(the case's own settings are te, 16x16 blocks)"), lines


@pytest.mark.parametrize("kw, plane, words", [
    (dict(rule="te", block=(1, 16), rht=True), "row", "te, 1x16 blocks"),  # the RHT is the columnwise plane's
    (dict(rule="te", block=(1, 16), rht=True), "col", "te, 1x16 blocks, RHT"),
    (dict(rule="torchao_noscale", block=(16, 16), rht=False), "col", "torchao_noscale, 16x16 blocks"),
    (dict(rule="te", four_over_six="mse", global_scale_max=256, block=(1, 16)), "row", "te_4over6_mse_g256, 1x16 blocks"),
    (dict(rule="te", four_over_six="mae", four_over_six_fast_math=True, block=(16, 16)), "row",
     "te_4over6_mae_fast, 16x16 blocks"),
    (dict(rule="te", four_over_six="mse", four_over_six_fast_math=True, global_scale_max=256, block=(1, 16)), "col",
     "te_4over6_mse_fast_g256, 1x16 blocks"),
    # a combination no rule names (no oracle call takes it): its keywords
    (dict(rule="torchao", four_over_six="mae", block=(1, 16)), "row", "torchao four_over_six=mae, 1x16 blocks"),
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


# SPEC 5.1 / 5.2 by hand for 16-blocks of ones under rule te with amax a: S_enc = 2688 / a; sf = 1 * (S_enc * fp32(1/6))
# rounds to 448 / a in fp32: amax 1 gives 448 (E4M3 0x7E), amax 4 gives 112 = 1.75 * 2^6 (E4M3 0x6E); then
# m = 1 / (decode(byte) * S_dec) = 6 and every element encodes as 6 (E2M1 0x7, a byte 0x77).
SCALE_AMAX_1, SCALE_AMAX_4, CODES_OF_ONES = 0x7E, 0x6E, 0x77


def _ones_plane(rows: int, cols: int, scale: int) -> dict:
    return {"row_data": np.full((rows, cols // 2), CODES_OF_ONES, np.uint8),
            "row_scales": np.full((rows, cols // 16), scale, np.uint8)}


def test_a_plane_made_with_the_backends_own_stored_amax_is_read_with_that_amax():
    """No supplied amax; the backend stored amax 4 for a tensor of ones (whose amax is 1) and quantized with it: its
    bytes are rule te's for the amax it stored (scales 0x6E), which diagnose is given, so the line says they are
    reproduced exactly with the amax given rather than counting differing blocks."""
    c = quantize_case(np.ones((16, 32), np.float32))
    ref = {**_ones_plane(16, 32, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    out = {**_ones_plane(16, 32, SCALE_AMAX_4), "row_amax": np.array([4.0], np.float32)}
    lines = quantize_hypotheses(c, out, ref)
    assert lines and lines[0].startswith("row plane: reproduced exactly by te (amax given)"), lines
    assert "not by the case's own settings" not in lines[0], lines


def test_a_negative_stored_amax_is_named_and_the_bytes_are_read_without_it():
    """The backend stored -1 for a tensor of ones but wrote rule te's bytes of amax 1: the first line names the sign
    error, the next reads the bytes (reproduced by te with its computed amax)."""
    c = quantize_case(np.ones((16, 32), np.float32))
    ref = {**_ones_plane(16, 32, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    out = {**_ones_plane(16, 32, SCALE_AMAX_1), "row_amax": np.array([-1.0], np.float32)}
    out["row_scales"][0, 0] = SCALE_AMAX_4  # (one block off, so that the plane differs from the reference)
    lines = quantize_hypotheses(c, out, ref)
    assert lines[0].startswith("row plane: the stored amax -1.0 is negative"), lines
    assert lines[1].startswith("row plane: closest te"), lines


def test_a_stored_amax_of_zero_is_no_sign_error():
    """An all-zero tensor's amax is 0 (SPEC 13): a plane with one flipped code and amax 0 (+0.0, and -0.0, which
    compares equal to 0) is diagnosed without a sign-error line."""
    c = quantize_case(np.zeros((16, 32), np.float32))
    ref = {"row_data": np.zeros((16, 16), np.uint8), "row_scales": np.zeros((16, 2), np.uint8),
           "row_amax": np.zeros(1, np.float32)}
    for amax in (0.0, -0.0):
        out = {**ref, "row_data": ref["row_data"].copy(), "row_amax": np.array([amax], np.float32)}
        out["row_data"][0, 0] = 0x01
        lines = quantize_hypotheses(c, out, ref)
        assert lines and not any("negative" in line for line in lines), lines


def test_failure_hypotheses_turn_any_exception_into_a_line():
    """Reference buffers without the grouped offsets (a KeyError inside): one 'not diagnosed' line naming it."""
    x = _x(32, 32, seed=10)
    case = _case(x)
    case.op = "group_quantize"
    case.arrays["splits"] = np.array([16, 16], np.int64)
    assert failure_hypotheses(case, {}, {}) == ["not diagnosed (KeyError: 'row_offsets')"]


@pytest.mark.parametrize("case_block", [[16, 16], [1, 16]])
def test_bytes_of_the_cases_own_blocks_with_another_amax_carry_no_settings_note(case_block):
    """Supplied amax 4, but the backend quantized the ones with their own amax 1 (scales 0x7E): 1x16 and 16x16
    blocks give the same bytes here, so the rules that reproduce them include one with the case's own block shape
    and no "not by the case's own settings" note is added (only the amax is wrong, which the hypotheses say)."""
    c = quantize_case(np.ones((16, 32), np.float32), block=case_block)
    c.arrays["amax"] = np.array([4.0], np.float32)
    ref = {**_ones_plane(16, 32, SCALE_AMAX_4), "row_amax": np.array([4.0], np.float32)}
    out = {**_ones_plane(16, 32, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    lines = quantize_hypotheses(c, out, ref)
    want = "te (block 16x16)" if case_block == [16, 16] else "te"
    assert lines and lines[0].startswith("row plane: reproduced exactly by "), lines
    assert want in lines[0].removeprefix("row plane: reproduced exactly by ").split(", "), lines
    assert "not by the case's own settings" not in lines[0], lines
    assert any("the amax given (4) is not the amax te computes (1)" in line for line in lines), lines


def test_rht_bytes_of_the_cases_settings_with_another_amax_carry_no_settings_note():
    """A columnwise RHT case (bf16 input) with a supplied amax that the backend ignored: its column plane is rule
    te's RHT plane with the plane's own amax (built by conformance.te_torch, the torch transcription of SPEC 4-8),
    reproduced by "te (rht)", whose settings are the case's (te, 1x16 blocks, RHT): no settings note."""
    pytest.importorskip("torch")
    from conformance import te_torch as tt

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((32, 64)) * 2).astype(ml_dtypes.bfloat16)
    c = quantize_case(x, rowwise=False, columnwise=True, rht=True)
    theirs = tt.quantize(x, rowwise=False, columnwise=True, rht=True)
    given = np.float32(4 * float(np.asarray(theirs["col_amax"]).reshape(-1)[0]))
    c.arrays["amax"] = np.array([given], np.float32)
    ref = tt.quantize(x, rowwise=False, columnwise=True, rht=True, amax=given)
    out = {k: np.asarray(v) for k, v in theirs.items()}
    assert not np.array_equal(out["col_scales"], np.asarray(ref["col_scales"]))
    lines = quantize_hypotheses(c, out, {k: np.asarray(v) for k, v in ref.items()})
    assert lines and lines[0].startswith("col plane: reproduced exactly by "), lines
    assert "te (rht)" in lines[0].removeprefix("col plane: reproduced exactly by ").split(", "), lines
    assert "not by the case's own settings" not in lines[0], lines


def test_one_flipped_code_bit_in_a_one_block_case_is_the_documented_single_line():
    """docs/conformance.md's example: one code bit flipped in a one-block case (16 ones: codes 0x7, scale 0x7E) gives
    exactly the line "row plane: closest te, 1 of 1 blocks differ" (no "none of the known bug classes" line)."""
    c = quantize_case(np.ones((1, 16), np.float32))
    ref = {**_ones_plane(1, 16, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"][0, 0] ^= 0x01
    assert quantize_hypotheses(c, out, ref) == ["row plane: closest te, 1 of 1 blocks differ"]


def test_row_scaled_cases_are_not_diagnosed():
    """A row-scaled case (SPEC 5.7, one amax per row) gets no diagnosis lines, even with a wrong plane."""
    c = quantize_case(np.ones((4, 32), np.float32), row_scaled=True)
    ref = {**_ones_plane(4, 32, SCALE_AMAX_1), "row_amax": np.ones(4, np.float32)}
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"][0, 0] ^= 0x01
    assert quantize_hypotheses(c, out, ref) == []
    assert failure_hypotheses(c, out, ref) == []


def test_a_plane_without_its_scales_buffer_is_left_to_compare():
    """A backend that returned a plane's data but not its scales: no diagnosis line (the missing buffer is compare's
    mismatch), not a "not diagnosed" line."""
    c = quantize_case(np.ones((16, 32), np.float32))
    ref = {**_ones_plane(16, 32, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    out = {"row_data": ref["row_data"].copy(), "row_amax": ref["row_amax"].copy()}
    out["row_data"][0, 0] ^= 0x01
    assert quantize_hypotheses(c, out, ref) == []


def test_padded_scales_in_place_of_compact_ones_are_named_as_a_layout_mix_up():
    """quantize's scales are compared as compact [rows, cols/16] (SPEC 8.1): a 3-row plane's scales returned padded
    to [128, 4] are read as a layout mix-up (the padded row-major layout, not the compact one)."""
    c = quantize_case(np.ones((3, 32), np.float32))
    ref = {**_ones_plane(3, 32, SCALE_AMAX_1), "row_amax": np.array([1.0], np.float32)}
    out = dict(ref)
    out["row_scales"] = np.zeros((128, 4), np.uint8)
    out["row_scales"][:3, :2] = SCALE_AMAX_1
    lines = quantize_hypotheses(c, out, ref)
    assert any("padded compact row-major (SPEC 8.1) layout, not the compact layout given" in line
               for line in lines), lines


def _group_case(splits, amax=None) -> Case:
    c = quantize_case(np.ones((int(sum(splits)), 32), np.float32), op="group_quantize")
    c.arrays["splits"] = np.array(splits, np.int64)
    if amax is not None:
        c.arrays["amax"] = np.array(amax, np.float32)
    return c


def _with_group_scale(ref: dict, g: int, scale: int) -> dict:
    """ref's buffers with group g's (non-padding) row-plane scale bytes set to ``scale`` (SPEC 9.2 offsets)."""
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    so = ref["row_scale_offsets"]
    seg = out["row_scales"][so[g]:so[g + 1]]
    seg[seg != 0] = scale
    return out


def test_a_groups_supplied_amax_is_that_groups():
    """Supplied amax [1, 4] for two groups of 16 rows of ones; the backend quantized group 1 with the amax 1 of its
    ones (scales 0x7E instead of 0x6E): group 1 is read with its own supplied amax 4, so the line names the
    amax given (4) as not the amax te computes (1)."""
    c = _group_case([16, 16], amax=[[1.0, 4.0]])
    ref = reference(c)
    so = ref["row_scale_offsets"]
    assert set(np.unique(ref["row_scales"][so[1]:so[2]])) == {0, SCALE_AMAX_4}
    out = _with_group_scale(ref, 1, SCALE_AMAX_1)
    lines = group_quantize_hypotheses(c, out, ref)
    assert lines and all(line.startswith("group 1, row plane: ") for line in lines), lines
    assert any("the amax given (4) is not the amax te computes (1)" in line for line in lines), lines


def test_a_groups_stored_amax_is_read_from_that_groups_entry():
    """No supplied amax; the backend stored amax [1, 4] and quantized group 1's ones with 4 (scales 0x6E): group 1's
    bytes are reproduced exactly by te with its stored amax (4), not read with group 0's (1)."""
    c = _group_case([16, 16])
    ref = reference(c)
    out = _with_group_scale(ref, 1, SCALE_AMAX_4)
    out["row_amax"] = np.array([1.0, 4.0], np.float32)
    lines = group_quantize_hypotheses(c, out, ref)
    assert lines and lines[0].startswith("group 1, row plane: reproduced exactly by te (amax given)"), lines


def test_the_group_cap_counts_only_groups_with_differing_bytes():
    """Four groups, only group 3 wrong: it is still diagnosed (the cap of three is on differing groups, and the right
    groups before it do not use it up)."""
    c = _group_case([16, 16, 16, 16])
    ref = reference(c)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["row_scales"][ref["row_scale_offsets"][3]] += 1
    lines = group_quantize_hypotheses(c, out, ref)
    assert lines and lines[0] == "group 3, row plane: closest te, 1 of 32 blocks differ", lines


def test_the_size_limit_of_diagnosis_is_two_to_the_twenty_elements():
    """Cases of at most 2^20 input elements are diagnosed (here nothing differs: no lines); a case of one more row
    of 1024 elements gets the single "not diagnosed" line."""
    x = np.zeros((1024, 1024), np.float32)
    c = quantize_case(x)
    bufs = {"row_data": np.zeros((1024, 512), np.uint8), "row_scales": np.zeros((1024, 64), np.uint8)}
    assert failure_hypotheses(c, bufs, bufs) == []
    big = quantize_case(np.zeros((1025, 1024), np.float32))
    assert failure_hypotheses(big, bufs, bufs) == [
        "not diagnosed: 1049600 elements (diagnose reads cases of at most 1048576)"]


def test_a_groups_column_plane_is_read_with_the_column_amax_of_a_supplied_pair():
    """Supplied (row, col) amax pair [[1, 1], [4, 4]] for two groups of ones; one flipped nibble in group 0's column
    plane: it is read with the column amax 4 (the plane's bytes are te's for it), so one block of 32 differs
    (X^T of 16 x 32 ones: 32 rows of one 16-block each)."""
    c = _group_case([16, 16], amax=[[1.0, 1.0], [4.0, 4.0]])
    c.options["columnwise"] = True
    ref = reference(c)
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["col_data"][ref["col_data_offsets"][0]] ^= 0x01
    lines = group_quantize_hypotheses(c, out, ref)
    assert lines and lines[0] == "group 0, col plane: closest te (amax given), 1 of 32 blocks differ", lines


def test_compact_scales_in_a_groups_swizzled_segment_are_named_as_a_layout_mix_up():
    """group_quantize's scales are swizzled (SPEC 8.2): a group of 128 rows x 64 columns whose segment holds its
    compact row-major scales instead (same 512 bytes; built from the swizzled ones by the SPEC 8.2 byte formula of
    conformance.independent) is read in the swizzled layout, and the line names the layout mix-up."""
    from conformance.independent import compact_by_formula

    x = np.repeat(np.arange(1, 129, dtype=np.float32)[:, None], 64, axis=1)
    c = quantize_case(x, op="group_quantize")
    c.arrays["splits"] = np.array([128], np.int64)
    ref = reference(c)
    so = ref["row_scale_offsets"]
    out = {k: np.array(v, copy=True) for k, v in ref.items()}
    out["row_scales"][so[0]:so[1]] = compact_by_formula(ref["row_scales"][so[0]:so[1]], 128, 4).reshape(-1)
    lines = group_quantize_hypotheses(c, out, ref)
    assert lines and not lines[0].startswith("group 0, row plane: reproduced exactly"), lines
    assert any("compact row-major (SPEC 8.1) layout, not the swizzled layout given" in line for line in lines), lines
