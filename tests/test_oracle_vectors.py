"""Golden test vectors (oracle.vectors, ``python -m oracle vectors``): the files hold what the oracle computes from
the stored inputs and options, in the documented raw format, and the hand-worked ties of SPEC 3.1. Code that is not
the oracle's (scalar SPEC transcriptions, fractions, torch-te, torchao, MMA-Sim, the SPEC 8.2 formula) agrees with
every stored output."""

from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest
from spec_scalar import assert_te_plane, sr_random_byte_source, te_amax, te_sr_plane, tile_maxima

import oracle
from oracle.cli import main
from oracle.fp4_numpy import unpack_fp4
from oracle.swizzle import swizzle_scales
from oracle.vectors import read_case, write_vectors


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("vectors")
    return out, write_vectors(out)


def _rerun(meta, ins):
    """The op of a case run again from its stored inputs and options only (what a C++ test would do)."""
    o = meta["options"]
    if meta["op"] == "quantize":
        t = oracle.quantize(ins["x"], **{k: tuple(v) if isinstance(v, list) else v for k, v in o.items()})
        return {f"{p}_{f}": v for p, pl in (("row", t.row), ("col", t.col)) if pl is not None
                for f, v in (("data", pl.data), ("scales", pl.scales), ("scales_swizzled", pl.swizzled_scales()),
                             ("amax", np.float32(pl.amax)))}
    if meta["op"] == "group_quantize":
        t = oracle.group_quantize(ins["x"], ins["splits"],
                                  **{k: tuple(v) if isinstance(v, list) else v for k, v in o.items()})
        return {k: getattr(t, k) for k in ("row_offsets", "row_data", "row_scales", "row_scales_compact", "row_amax",
                                           "row_data_offsets", "row_scale_offsets", "col_data", "col_scales",
                                           "col_scales_compact", "col_amax", "col_data_offsets", "col_scale_offsets")}
    if meta["op"] == "gemm":
        k = ins["a_data"].shape[1] * 2
        pa = oracle.QuantizedPlane(ins["a_data"], ins["a_scales"], ins["a_amax"][0], (ins["a_data"].shape[0], k),
                                   block=tuple(o["a"]["block"]))
        pb = oracle.QuantizedPlane(ins["b_data"], ins["b_scales"], ins["b_amax"][0], (ins["b_data"].shape[0], k),
                                   block=tuple(o["b"]["block"]))
        out = {"alpha": oracle.gemm_alpha(pa, pb)}
        for model in ("sequential", "tensor_core", "sm100", "exact"):
            for od in ("bfloat16", "float32"):
                out[f"y_{model}_{od}"] = oracle.gemm(pa, pb, model=model, out_dtype=od, bias=ins["bias"])
        return out
    if meta["op"] == "grouped_gemm":  # rebuild each group's planes from the flat buffers and offsets (SPEC 9.2)
        from oracle.swizzle import unswizzle_scales

        def planes(p, rows_per_group, block):
            k = 2 * ins[f"{p}_data"].size // max(1, int(sum(rows_per_group)))
            out = []
            for g, r in enumerate(rows_per_group):
                d = ins[f"{p}_data"][ins[f"{p}_data_offsets"][g]:ins[f"{p}_data_offsets"][g + 1]].reshape(r, k // 2)
                sw = ins[f"{p}_scales"][ins[f"{p}_scale_offsets"][g]:ins[f"{p}_scale_offsets"][g + 1]]
                sc = unswizzle_scales(sw, r, k // 16)
                out.append(oracle.QuantizedPlane(d, sc, ins[f"{p}_amax"][g], (r, k), block=block))
            return out

        e = ins["splits"].size
        pa = planes("a", ins["splits"].tolist(), (1, 16))
        pb = planes("b", [o["N"]] * e, (16, 16))
        return {f"y_{m}_bfloat16": np.concatenate([oracle.gemm(pa[g], pb[g], model=m) for g in range(e)])
                for m in ("sequential", "tensor_core", "sm100")}
    assert meta["op"] == "swizzle_scales"
    return {"swizzled": swizzle_scales(ins["compact"])}


def test_every_case_is_reproduced_from_its_files(vectors):
    out, names = vectors
    assert len(names) == 16 and len({json.loads((out / n / "case.json").read_text())["op"] for n in names}) == 5
    for name in names:
        meta, ins, outs = read_case(out / name)
        want = _rerun(meta, ins)
        assert set(outs) == set(want), name
        for key, v in want.items():
            got = outs[key]
            v = np.asarray(v).reshape(got.shape)
            assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), (name, key)


def test_raw_files_are_headerless_little_endian_c_order(vectors):
    out, names = vectors
    meta = json.loads((out / names[0] / "case.json").read_text())
    e = meta["inputs"]["x"]
    raw = (out / names[0] / e["file"]).read_bytes()
    assert e["dtype"] == "bfloat16" and len(raw) == 2 * int(np.prod(e["shape"]))
    _, ins, outs = read_case(out / names[0])
    assert raw == ins["x"].view(np.uint16).astype("<u2").tobytes()
    amax = (out / names[0] / "row_amax.bin").read_bytes()
    assert len(amax) == 4 and amax == np.asarray(outs["row_amax"], "<f4").tobytes()
    assert ins["x"].dtype == ml_dtypes.bfloat16


def test_ties_vector_matches_spec_3_1_by_hand(vectors):
    """Case quantize_ties: amax 2688 gives S_enc = 1 (SPEC 5.1), a block amax of 6 the decode scale 1.0 (E4M3 0x38),
    so the midpoints 0.25 ... 5 reach the E2M1 rounding as they are and go to the even index (SPEC 3.1)."""
    out, names = vectors
    _, ins, outs = _case(vectors, "quantize_ties")
    codes = unpack_fp4(outs["row_data"], 32)
    # 6, +-0.25, +-0.75, +-1.25, +-1.75, +-2.5, +-3.5, +-5, 0: index 7, 0, 2, 2, 4, 4, 6, 6; sign bit 8 kept
    assert codes[1, :16].tolist() == [7, 0, 2, 2, 4, 4, 6, 6, 8, 10, 10, 12, 12, 14, 14, 0]
    assert outs["row_scales"][1].tolist() == [0x38, 0x38]
    assert outs["row_scales"][0, 0] == 0x7E  # 2688 / 6 = 448, E4M3's largest
    assert outs["row_amax"].view(np.uint32)[0] == 0x45280000  # 2688.0


def test_cli_writes_the_set(tmp_path, capsys):
    assert main(["vectors", str(tmp_path / "v"), "--seed", "3"]) == 0
    index = json.loads((tmp_path / "v" / "index.json").read_text())
    assert [c["op"] for c in index["cases"]].count("quantize") == 12 and "wrote 16 cases" in capsys.readouterr().out
    assert (index["byte_order"], index["array_order"]) == ("little", "C")
    meta = json.loads((tmp_path / "v" / index["cases"][0]["folder"] / "case.json").read_text())
    assert meta["seed"] == 3 and meta["options"]["rht"] is True and meta["options"]["rounding"] == "rn"


def test_rewrite_removes_stale_arrays(tmp_path):
    """Writing into a folder that holds an older set leaves only the arrays the case files name."""
    names = write_vectors(tmp_path)
    (tmp_path / names[0] / "old_array.bin").write_bytes(b"\0" * 8)
    assert write_vectors(tmp_path) == names
    for name in names:
        meta = json.loads((tmp_path / name / "case.json").read_text())
        named = {e["file"] for part in ("inputs", "outputs") for e in meta[part].values()}
        assert {f.name for f in (tmp_path / name).glob("*.bin")} == named


def _case(vectors, name):
    """The stored case whose directory is named ``NN_<name>``."""
    out, names = vectors
    (found,) = [n for n in names if n.split("_", 1)[1] == name]
    return read_case(out / found)


def _check_te_plane_by_scalar_spec(data, scales, amax, x_rows: np.ndarray, where: str) -> None:
    """A stored TE-rule plane (1x16 blocks) against the scalar transcription of SPEC 5.1 / 5.2 with an amax computed
    here (SPEC 4.1, NaN-ignoring)."""
    want_amax = te_amax(x_rows)
    assert np.float32(amax).tobytes() == want_amax.tobytes(), where
    assert_te_plane(data, scales, x_rows, want_amax, where=where)


def _alpha_te(a_amax, b_amax) -> np.float32:
    """SPEC 12.1 under the TE rules, formed here: (A_a * A_b) * fp32(1 / 2688^2)."""
    return np.float32(np.float32(np.float32(a_amax) * np.float32(b_amax)) * np.float32(1.0 / 7225344.0))


@pytest.mark.torch  # (conformance.te_torch needs torch)
def test_vectors_agree_with_independent_implementations(vectors):
    """Eleven of the sixteen cases checked against code that is not the oracle's (the ties case also has a hand test):
    the TE quantize cases (specials and infinities, both planes; one fp16 row; the ties) by the scalar SPEC
    transcription, the 4over6 and row-scaled cases by conformance.te_torch (torch, written from SPEC alone), the swizzle
    by the SPEC 8.2 byte formula, and the GEMM's exact model by fractions.Fraction with SPEC 12.1's alpha formed
    here."""
    from conformance import te_torch

    for name in ("quantize_4over6_mse", "quantize_4over6_mae_16x16_fast_g256", "quantize_row_scaled_4over6",
                 "quantize_4over6_fast_math_choices", "quantize_4over6_16x16_tree_order"):
        meta, ins, outs = _case(vectors, name)
        o = meta["options"]
        kw = {k: o[k] for k in ("rowwise", "columnwise", "block", "four_over_six", "four_over_six_fast_math",
                                "global_scale_max", "row_scaled")}
        want = te_torch.quantize(ins["x"], **kw)
        assert sorted(want) == sorted(outs), name
        for key, got in outs.items():
            assert np.asarray(got).tobytes() == np.asarray(want[key]).astype(got.dtype).tobytes(), (name, key)

    from conformance.independent import fraction_gemm, swizzle_by_formula

    for name in ("quantize_specials_17x48", "quantize_inf_16x32"):
        _, ins, outs = _case(vectors, name)
        x = ins["x"].astype(np.float32)
        m, k = x.shape
        _check_te_plane_by_scalar_spec(outs["row_data"], outs["row_scales"], outs["row_amax"], x, f"{name} row")
        xt = np.zeros((k, -(-m // 16) * 16), np.float32)  # X^T, zero-padded to a multiple of 16 columns (SPEC 6.2)
        xt[:, :m] = x.T
        _check_te_plane_by_scalar_spec(outs["col_data"], outs["col_scales"], outs["col_amax"], xt, f"{name} col")
        for p in ("row", "col"):
            assert (outs[f"{p}_scales_swizzled"].reshape(-1).tobytes()
                    == swizzle_by_formula(outs[f"{p}_scales"]).tobytes())

    for name in ("quantize_one_row_f16", "quantize_ties"):  # every row of the ties case, and both scale layouts
        _, ins, outs = _case(vectors, name)
        _check_te_plane_by_scalar_spec(outs["row_data"], outs["row_scales"], outs["row_amax"],
                                       ins["x"].astype(np.float32), name)
        assert outs["row_scales_swizzled"].reshape(-1).tobytes() == swizzle_by_formula(outs["row_scales"]).tobytes()

    _, ins, outs = _case(vectors, "swizzle_130x7")
    assert outs["swizzled"].reshape(-1).tobytes() == swizzle_by_formula(ins["compact"]).tobytes()

    _, ins, outs = _case(vectors, "gemm_17x24x256")
    k = 2 * ins["a_data"].shape[1]
    pa = oracle.QuantizedPlane(ins["a_data"], ins["a_scales"], ins["a_amax"][0], (ins["a_data"].shape[0], k))
    pb = oracle.QuantizedPlane(ins["b_data"], ins["b_scales"], ins["b_amax"][0], (ins["b_data"].shape[0], k),
                               block=(16, 16))
    alpha = _alpha_te(ins["a_amax"][0], ins["b_amax"][0])
    assert np.float32(outs["alpha"]).tobytes() == alpha.tobytes()
    for od in ("float32", "bfloat16"):
        want = fraction_gemm(pa, pb, alpha=alpha, bias=ins["bias"], c=None, out_dtype=od)
        got = outs[f"y_exact_{od}"]
        assert np.asarray(got).tobytes() == np.asarray(want).astype(got.dtype).tobytes(), od


def _decoded(data: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E2M1 values [R, K] and E4M3 scale values [R, K/16] of a plane, decoded by ml_dtypes (SPEC 2.1-2.3)."""
    r = data.shape[0]
    nib = np.stack((data & 0x0F, data >> 4), axis=-1).reshape(r, -1)
    return nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64), scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def _sequential_by_hand(a_data, a_scales, b_data, b_scales) -> np.ndarray:
    """SPEC 12.2's accumulator: acc = +0; per 16-block k in K order acc = fp32(acc + (sfA_k * sfB_k) * dot16_k), every
    block term exact (dot16 in float64: sums of 16 products of E2M1 values, multiples of 1/4 below 2^12)."""
    qa, sa = _decoded(a_data, a_scales)
    qb, sb = _decoded(b_data, b_scales)
    acc = np.zeros((qa.shape[0], qb.shape[0]), np.float32)
    for k in range(sa.shape[1]):
        dot16 = (qa[:, 16 * k : 16 * k + 16] @ qb[:, 16 * k : 16 * k + 16].T).astype(np.float32)
        sf = (sa[:, k][:, None] * sb[:, k][None, :]).astype(np.float32)
        acc = (acc + (sf * dot16).astype(np.float32)).astype(np.float32)
    return acc


def _epilogue_12_2(acc: np.ndarray, alpha, bias, out_dtype: str) -> np.ndarray:
    """SPEC 12.2's epilogue without C: y = fp32(alpha * acc), then fp32(y + bias[n]), then the cast (bf16: RNE)."""
    y = (np.float32(alpha) * acc).astype(np.float32)
    if bias is not None:
        y = (y + bias.astype(np.float32)[None, :]).astype(np.float32)
    return y.astype(ml_dtypes.bfloat16) if out_dtype == "bfloat16" else y


def _group_planes(meta, ins):
    """The grouped GEMM case's per-group operands (a codes, a scales, b codes, b scales, alpha) of its non-empty
    groups, cut from the flat buffers by their offsets (SPEC 9.2) and unswizzled by the SPEC 8.2 formula."""
    from conformance.independent import compact_by_formula

    splits, n = ins["splits"].tolist(), meta["options"]["N"]
    k = 2 * ins["a_data"].size // sum(splits)
    out = []
    for g, m in enumerate(splits):
        if m == 0:
            continue
        ops = []
        for p, r in (("a", m), ("b", n)):
            d = ins[f"{p}_data"][ins[f"{p}_data_offsets"][g]:ins[f"{p}_data_offsets"][g + 1]].reshape(r, k // 2)
            sw = ins[f"{p}_scales"][ins[f"{p}_scale_offsets"][g]:ins[f"{p}_scale_offsets"][g + 1]]
            ops += [d, compact_by_formula(sw, r, k // 16)]
        out.append((*ops, _alpha_te(ins["a_amax"][g], ins["b_amax"][g])))
    return out


@pytest.mark.torch  # (the mmasim reference's operands go through torch)
def test_gemm_vectors_agree_with_mmasim_and_the_scalar_spec(vectors):
    """Every model's output of the GEMM case and of each group of the grouped GEMM case, but the exact model's (checked
    by fractions above), against code that is not the oracle's: sm100 (SPEC 12.7) by MMA-Sim's tcgen05 block-scale
    model chained over K (conformance.independent.mmasim_tcgen05_nvf4) and the epilogue written out element by element
    (sm100_epilogue_by_hand); tensor_core (12.6) by MMA-Sim's Hopper wgmma k16 chain with bf16 operands
    (mmasim_wgmma); sequential (12.2) by the loop above; the last two with SPEC 12.2's epilogue formed here."""
    from conformance.independent import mmasim_tcgen05_nvf4, mmasim_wgmma, sm100_epilogue_by_hand

    def outputs(ad, asc, bd, bsc, alpha, bias, od):
        return {
            "sm100": sm100_epilogue_by_hand(mmasim_tcgen05_nvf4(ad, asc, bd, bsc), alpha, c=None, bias=bias,
                                            out_dtype=od),
            "tensor_core": _epilogue_12_2(mmasim_wgmma(ad, asc, bd, bsc, "bf16"), alpha, bias, od),
            "sequential": _epilogue_12_2(_sequential_by_hand(ad, asc, bd, bsc), alpha, bias, od),
        }

    _, ins, outs = _case(vectors, "gemm_17x24x256")
    alpha = _alpha_te(ins["a_amax"][0], ins["b_amax"][0])
    for od in ("float32", "bfloat16"):
        want = outputs(ins["a_data"], ins["a_scales"], ins["b_data"], ins["b_scales"], alpha, ins["bias"], od)
        for model, w in want.items():
            got = outs[f"y_{model}_{od}"]
            assert np.asarray(got).tobytes() == np.asarray(w).astype(got.dtype).tobytes(), (model, od)

    meta, ins, outs = _case(vectors, "grouped_gemm_fprop")
    per_group = [outputs(*ops, None, "bfloat16") for ops in _group_planes(meta, ins)]
    for model in ("sm100", "tensor_core", "sequential"):
        got = outs[f"y_{model}_bfloat16"]
        want = np.concatenate([w[model] for w in per_group])
        assert got.shape == (int(ins["splits"].sum()), meta["options"]["N"])
        assert np.asarray(got).tobytes() == np.asarray(want).astype(got.dtype).tobytes(), model


@pytest.mark.torch
def test_quantize_vectors_agree_with_torch_implementations(vectors):
    """The TE cases with the RHT (one tensor, and the grouped MoE case: every flat buffer and offset) against the
    torch-te transcription of SPEC 4-9 (conformance.te_torch, no oracle code), and the torchao case against torchao's
    own quantizer (conformance.independent.torchao_quantize; scales swizzled by torchao's to_blocked)."""
    from conformance import te_torch
    from conformance.independent import torchao_quantize

    for name in ("quantize_te_wgrad", "quantize_torchao"):
        meta, ins, outs = _case(vectors, name)
        o = meta["options"]
        if o["rule"] == "torchao":
            want = torchao_quantize(ins["x"], rule="torchao", rowwise=True, columnwise=True)
        else:
            want = te_torch.quantize(ins["x"], rowwise=True, columnwise=True, rht=o["rht"], rht_signs=o["rht_signs"])
        assert set(outs) <= set(want), name
        for key in outs:
            got, w = np.asarray(outs[key]).reshape(-1), np.asarray(want[key]).reshape(-1)
            assert got.tobytes() == w.tobytes(), (name, key)

    meta, ins, outs = _case(vectors, "group_quantize_moe")
    o = meta["options"]
    want = te_torch.group_quantize(ins["x"], ins["splits"], rowwise=True, columnwise=True, rht=o["rht"],
                                   rht_signs=o["rht_signs"])
    for key, got in outs.items():  # the flat buffers up to their last offset, the offsets and the amaxes
        assert np.asarray(got).reshape(-1).tobytes() == np.asarray(want[key]).reshape(-1).tobytes(), key


def test_16x16_sr_vector_agrees_with_the_scalar_spec(vectors):
    """The 16x16 stochastic-rounding case, both planes (X and its zero-padded X^T, SPEC 6.2, 6.3), against the scalar
    transcription: tile maxima, RN scale bytes, multipliers and SPEC 3.4 with the Philox bytes of SPEC 10.2 (plane 0
    and 1, the case's seed and offset; the Philox function is checked against Random123's known answers in
    test_oracle_rht_sr.py); the swizzled scales by the SPEC 8.2 formula."""
    from conformance.independent import swizzle_by_formula
    from oracle.philox import philox4x32

    meta, ins, outs = _case(vectors, "quantize_16x16_sr")
    o = meta["options"]
    x = ins["x"].astype(np.float32)
    xt = np.zeros((x.shape[1], -(-x.shape[0] // 16) * 16), np.float32)
    xt[:, : x.shape[0]] = x.T
    amax = te_amax(x)  # SPEC 4.2: without the RHT the rowwise amax serves both planes
    for plane, (p, rows) in enumerate((("row", x), ("col", xt))):
        source = sr_random_byte_source(philox4x32, o["seed"], plane, o["offset"])
        codes, scales = te_sr_plane(rows, amax, source, block_max=tile_maxima(rows))
        assert np.float32(outs[f"{p}_amax"]).tobytes() == amax.tobytes(), p
        assert np.array_equal(unpack_fp4(outs[f"{p}_data"], rows.shape[1]), codes), p
        assert np.asarray(outs[f"{p}_scales"]).tolist() == scales, p
        assert outs[f"{p}_scales_swizzled"].reshape(-1).tobytes() == swizzle_by_formula(outs[f"{p}_scales"]).tobytes()


def test_special_cases_cover_both_amax_paths(vectors):
    """The specials case has a finite amax set by its outlier beside NaN, -0 and subnormals (an Inf would make every
    amax +Inf and S_enc 1); the infinities case has amax +Inf (SPEC 4.1: NaN ignored, +-Inf gives +Inf)."""
    _, ins, outs = _case(vectors, "quantize_specials_17x48")
    x = ins["x"].astype(np.float32)
    assert np.isnan(x).any() and not np.isinf(x).any() and (np.signbit(x) & (x == 0)).any()
    assert (np.abs(x[np.isfinite(x) & (x != 0)]) < 2.0**-126).any()
    assert outs["row_amax"][0] == np.nanmax(np.abs(x)) == np.float32(ml_dtypes.bfloat16(3.0e4))
    _, ins, outs = _case(vectors, "quantize_inf_16x32")
    x = ins["x"].astype(np.float32)
    assert np.isposinf(x).any() and np.isneginf(x).any() and np.isnan(x).any()
    assert np.isposinf(outs["row_amax"][0]) and np.isposinf(outs["col_amax"][0])


def test_gemm_vectors_tell_the_models_apart(vectors):
    """Every pair of GEMM models gives different bytes somewhere in the default set (both output dtypes; the grouped
    case's bf16), so a kernel that follows the wrong model fails against these files."""
    import itertools

    _, _, outs = _case(vectors, "gemm_17x24x256")
    for od, bits in (("float32", np.uint32), ("bfloat16", np.uint16)):
        for m1, m2 in itertools.combinations(("sequential", "tensor_core", "sm100", "exact"), 2):
            assert (outs[f"y_{m1}_{od}"].view(bits) != outs[f"y_{m2}_{od}"].view(bits)).any(), (m1, m2, od)
    _, _, outs = _case(vectors, "grouped_gemm_fprop")
    for m1, m2 in itertools.combinations(("sequential", "tensor_core", "sm100"), 2):
        assert (outs[f"y_{m1}_bfloat16"].view(np.uint16) != outs[f"y_{m2}_bfloat16"].view(np.uint16)).any(), (m1, m2)


def test_scale_arrays_name_their_layout(vectors):
    """Each scale array's entry says its layout, and its size is that layout's (SPEC 8.1, 8.2, 9.2)."""
    out, names = vectors
    seen = set()
    for name in names:
        meta, ins, outs = read_case(out / name)
        for part, arrays in (("inputs", ins), ("outputs", outs)):
            for key, e in meta[part].items():
                if "scales" not in key and key not in ("compact", "swizzled"):
                    continue
                layout = e["layout"]
                seen.add(layout)
                a = arrays[key]
                if layout == "compact":
                    assert a.ndim == 2, (name, key)
                elif layout == "swizzled":
                    assert a.size % 512 == 0, (name, key)
                else:  # grouped (SPEC 9.2): the last scale offset is the buffer's size
                    offsets_key = key.replace("_compact", "").replace("scales", "scale_offsets")
                    assert a.size == {**ins, **outs}[offsets_key][-1], (name, key)
    assert seen == {"compact", "swizzled", "grouped_swizzled", "grouped_padded_compact"}


def _group_scale_dims(meta, ins, outs, key):
    """(per-group scale offsets, per-group compact scale shapes) of a grouped scale array (SPEC 9.2, 6.1, 6.2)."""
    splits = [int(m) for m in ins["splits"]]
    if meta["op"] == "group_quantize":
        k = ins["x"].shape[1]
        plane = key.split("_")[0]
        dims = [(m, k // 16) for m in splits] if plane == "row" else [(k, -(-m // 16)) for m in splits]
        return outs[f"{plane}_scale_offsets"], dims
    k = 2 * ins["a_data"].size // sum(splits)  # grouped GEMM: a is [T, K / 2] packed
    rows = splits if key[0] == "a" else [meta["options"]["N"]] * len(splits)
    return ins[f"{key[0]}_scale_offsets"], [(m, k // 16) for m in rows]


def test_grouped_scale_arrays_hold_the_layout_they_name(vectors):
    """Group by group, a grouped_padded_compact array is SPEC 8.1's [roundup(m, 128), roundup(C, 4)] matrix, zero
    outside [:m, :C], and a grouped_swizzled one is zero at every padding byte of SPEC 8.2's formula
    (conformance.independent's transcription); both copies of one plane hold the same compact scales. (Both layouts
    have the same size.)"""
    from conformance.independent import compact_by_formula, padded_compact_by_hand, swizzle_by_formula

    out, names = vectors
    checked, pairs = set(), 0
    for name in names:
        meta, ins, outs = read_case(out / name)
        compact_of: dict[str, list] = {}
        for part, arrays in (("inputs", ins), ("outputs", outs)):
            for key, e in meta[part].items():
                if e.get("layout") not in ("grouped_swizzled", "grouped_padded_compact"):
                    continue
                flat = arrays[key].reshape(-1)
                offsets, dims = _group_scale_dims(meta, ins, outs, key)
                per_group = []
                for g, (m, c) in enumerate(dims):
                    seg = flat[offsets[g]:offsets[g + 1]]
                    rp, cp = -(-m // 128) * 128, -(-c // 4) * 4
                    assert seg.size == rp * cp, (name, key, g)
                    if e["layout"] == "grouped_padded_compact":
                        compact = seg.reshape(rp, cp)[:m, :c]
                        assert np.array_equal(seg, padded_compact_by_hand(compact)), (name, key, g, "SPEC 8.1 padding")
                    else:
                        compact = compact_by_formula(seg, m, c)
                        assert np.array_equal(seg, swizzle_by_formula(compact)), (name, key, g, "SPEC 8.2 padding")
                    per_group.append(compact)
                    checked.add(e["layout"])
                compact_of.setdefault(key.replace("_compact", ""), []).append(per_group)
        for key, copies in compact_of.items():
            if len(copies) == 2:  # the same plane's swizzled and padded compact copies
                pairs += 1
                for a, b in zip(*copies, strict=True):
                    assert np.array_equal(a, b), (name, key)
    assert checked == {"grouped_swizzled", "grouped_padded_compact"} and pairs > 0


def _constant_over_16_row_bands(s: np.ndarray) -> bool:
    return all((s[t:t + 16] == s[t]).all() for t in range(0, s.shape[0], 16))


def test_gemm_weights_are_16x16_blocks_and_the_options_say_so(vectors):
    """The GEMM cases' weights (b) use 16x16 blocks (SPEC 6.3: one scale byte per tile, repeated over its 16 rows),
    their options record block [16, 16], and a bias input is recorded as bias: true. (a's 1x16 scales are not constant
    over 16-row bands, so the band check can fail.)"""
    meta, ins, _ = _case(vectors, "gemm_17x24x256")
    assert meta["options"]["b"]["block"] == [16, 16]
    assert _constant_over_16_row_bands(ins["b_scales"]) and not _constant_over_16_row_bands(ins["a_scales"])
    assert ins["bias"].shape == (24,) and meta["options"]["gemm"]["bias"] is True
    meta, ins, _ = _case(vectors, "grouped_gemm_fprop")
    assert meta["options"]["b"]["block"] == [16, 16]
    from conformance.independent import compact_by_formula

    n, c = meta["options"]["N"], 2 * ins["a_data"].size // int(ins["splits"].sum()) // 16
    for g in range(ins["splits"].size):
        seg = ins["b_scales"][ins["b_scale_offsets"][g]:ins["b_scale_offsets"][g + 1]]
        assert _constant_over_16_row_bands(compact_by_formula(seg, n, c)), g


def test_index_folders_and_spec_citations_agree(vectors):
    """index.json lists the folders in the order a sorted directory listing gives (``NN_<case>``, NN two digits),
    with each case's op and SPEC sections as its case.json has them; the torchao-rule case cites SPEC 5.4 (the
    section that defines rule "torchao"); the swizzle case's compact input is [130, 7] and its output SPEC 8.1's
    padded [256, 8] in bytes."""
    out, names = vectors
    index = json.loads((out / "index.json").read_text())
    assert [c["folder"] for c in index["cases"]] == names
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == names
    assert all(re.fullmatch(rf"{i:02d}_[a-z0-9_]+", n) for i, n in enumerate(names)), names
    torchao_cases = 0
    for row in index["cases"]:
        meta = json.loads((out / row["folder"] / "case.json").read_text())
        assert (row["op"], row["spec"]) == (meta["op"], meta["spec"]), row
        if meta["op"] == "quantize" and meta["options"].get("rule") == "torchao":
            torchao_cases += 1
            assert "5.4" in {s.strip() for s in meta["spec"].split(",")}, meta["spec"]
    assert torchao_cases == 1
    _, ins, outs = _case(vectors, "swizzle_130x7")
    assert ins["compact"].shape == (130, 7) and outs["swizzled"].size == 256 * 8


def test_cli_vectors_default_seed_is_zero(tmp_path):
    """``python -m oracle vectors OUT`` without --seed writes seed 0 (its help's and write_vectors' default) into
    every case.json."""
    assert main(["vectors", str(tmp_path / "v")]) == 0
    seeds = {json.loads((p / "case.json").read_text())["seed"] for p in (tmp_path / "v").iterdir() if p.is_dir()}
    assert seeds == {0}


def test_the_fast_math_case_tells_the_two_errors_apart(vectors):
    """SPEC 5.6's fast-math error chooses the other candidate than the input-domain error in 8 of the case's blocks:
    a kernel that ignores the flag, or measures the error in the input domain, fails this case."""
    meta, ins, outs = _case(vectors, "quantize_4over6_fast_math_choices")
    assert meta["options"]["four_over_six_fast_math"] is True and meta["options"]["four_over_six"] == "mae"
    other = oracle.quantize(ins["x"], four_over_six="mae").row  # the input-domain error
    assert np.count_nonzero(other.scales != outs["row_scales"]) == 8
    assert float(outs["row_amax"][0]) == 4.375 and other.amax == np.float32(4.375)


def _tile_sums_in_order(order):
    """A stand-in for oracle.four_over_six.tile_error_sum ([R, C/16] row errors -> each 16x16 tile's sum on its
    rows) that adds a tile's 16 row errors in another order than SPEC 5.6's tree."""
    def tile_sums(err: np.ndarray) -> np.ndarray:
        rows, nb = err.shape
        padded = np.zeros((-(-rows // 16) * 16, nb), np.float32)
        padded[:rows] = err
        tiles = padded.reshape(-1, 16, nb)
        sums = np.array([[order(tiles[t, :, j]) for j in range(nb)] for t in range(len(tiles))], np.float32)
        return np.repeat(sums, 16, axis=0)[:rows]
    return tile_sums


def _sum_rows_from_zero(e):
    s = np.float32(0.0)
    for v in e:
        s = np.float32(s + v)
    return s


def _sum_adjacent_first(e):
    t = np.asarray(e, np.float32)
    while t.size > 1:
        t = (t[0::2] + t[1::2]).astype(np.float32)
    return t[0]


@pytest.mark.parametrize("order", [_sum_rows_from_zero, lambda e: _sum_rows_from_zero(e[::-1]), _sum_adjacent_first,
                                   lambda e: np.sum(e, dtype=np.float64)],
                         ids=["rows in order", "rows in reverse", "adjacent rows first", "float64"])
def test_the_tree_order_case_tells_the_tile_sum_orders_apart(vectors, monkeypatch, order):
    """SPEC 5.6 sums a 16x16 tile's row errors as a tree (offsets 8, 4, 2, 1). The case's input quantized with another
    order chooses the other candidate in exactly one tile of each plane (X's tile (0, 0) for the rowwise plane, the
    columnwise plane's tile of rows 16-31), so a kernel that sums in that order fails the case."""
    import oracle.four_over_six

    meta, ins, outs = _case(vectors, "quantize_4over6_16x16_tree_order")
    o = meta["options"]
    assert o["block"] == [16, 16] and o["four_over_six"] == "mse" and o["columnwise"] is True
    monkeypatch.setattr(oracle.four_over_six, "tile_error_sum", _tile_sums_in_order(order))
    other = oracle.quantize(ins["x"], columnwise=True, block=(16, 16), four_over_six="mse")
    for plane, tile_rows in (("row", slice(0, 16)), ("col", slice(16, 32))):
        differ = getattr(other, plane).scales != outs[f"{plane}_scales"]
        assert differ[tile_rows, 0].all() and np.count_nonzero(differ) == 16, plane


def test_index_defines_every_layout_a_case_names(vectors):
    out, names = vectors
    conventions = json.loads((out / "index.json").read_text())["conventions"]
    used = {e["layout"] for n in names for part in ("inputs", "outputs")
            for e in json.loads((out / n / "case.json").read_text())[part].values() if "layout" in e}
    assert used == {"compact", "swizzled", "grouped_swizzled", "grouped_padded_compact"}
    assert all(f"layout {u}" in conventions for u in used) and "dtype bfloat16" in conventions


def test_the_grouped_gemm_case_states_k_and_the_weight_splits(vectors):
    meta, ins, _ = _case(vectors, "grouped_gemm_fprop")
    o = meta["options"]
    assert o["b_splits"] == [o["N"]] * ins["splits"].size
    assert ins["a_data"].size * 2 == o["K"] * int(ins["splits"].sum())  # packed: two codes per byte
