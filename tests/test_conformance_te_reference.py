"""The ``te-reference:PATH`` backend (TE's own reference quantizer from a TE source checkout) and what it rests on:
SPEC 14.1's difference undone by hand-worked bytes, the backend's plumbing through the runner on a stand-in TE tree
built on conformance.te_torch (torch, written from SPEC alone; it stores its fields as TE's reference does), and the
generator honouring the space it declares (no supplied amax, no NaN). With ``NVFP4_TE_SOURCE`` naming a TE checkout,
a run against TE's real reference too."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conformance_cases import generated_cases  # noqa: E402

from conformance import backends as B  # noqa: E402
from conformance.runner import RunConfig, run  # noqa: E402
from conformance.te_reference import signed_zero_codes  # noqa: E402

pytestmark = pytest.mark.torch


def test_signed_zero_codes_rowwise_by_hand():
    """Row of 16: elements 0, 2, 3 negative; TE's codes 0, 0, 0x9, 0 there (bytes 0x00, 0x09): 0x8 for the 0x0 of a
    negative element (0 and 3), element 1 (positive) and 2 (0x9) untouched."""
    neg = np.zeros((1, 16), bool)
    neg[0, [0, 2, 3]] = True
    data = np.zeros((1, 8), np.uint8)
    data[0, 1] = 0x09
    out = signed_zero_codes(neg, {"row_data": data, "row_amax": np.ones(1, np.float32)})
    assert out["row_data"].tolist() == [[0x08, 0x89, 0, 0, 0, 0, 0, 0]]
    assert out["row_amax"].tolist() == [1.0] and data[0, :2].tolist() == [0x00, 0x09]  # (the input is not changed)


def test_signed_zero_codes_columnwise_by_hand():
    """X [2, 16]: x[1, 0] and x[0, 1] negative. Plane row k holds tokens t = 0, 1 in byte 0 (low, high nibble), then
    zero padding (SPEC 6.2): row 0 byte 0 0x00 -> 0x80 (token 1), row 1 0x00 -> 0x08 (token 0); the padding bytes
    stay as TE's (0x00 here, 0x30 in row 2's byte 5, past the tokens)."""
    neg = np.zeros((2, 16), bool)
    neg[1, 0] = neg[0, 1] = True
    data = np.zeros((16, 8), np.uint8)
    data[2, 5] = 0x30
    out = signed_zero_codes(neg, {"col_data": data})["col_data"]
    want = np.zeros((16, 8), np.uint8)
    want[0, 0], want[1, 0], want[2, 5] = 0x80, 0x08, 0x30
    assert out.tolist() == want.tolist()


# A TE source tree whose reference_nvfp4.py is a stand-in on conformance.te_torch: TE's keywords, TE's fields
# (rowwise scales of 16x16 blocks kept to a multiple of 16 rows, here filled with 0xEE; columnwise codes [K, M // 2];
# amaxes as tensors) and TE's 14.1 (the code of a -0.0 element is 0x0). NIBBLE_SWAP plants a fault.
_STAND_IN = '''
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import torch

from conformance import te_torch as tt

NIBBLE_SWAP = False
RHT_SIGNS = 0xD7E8  # TE's hard-coded sign vector as a SPEC 7.1 mask


class NVFP4QuantizerRef:
    def __init__(self, *, dtype, rowwise=True, columnwise=True, quant_tile_shape=(1, 16), row_scaled_nvfp4=False,
                 nvfp4_use_4over6=False, nvfp4_e4m3_max=448, nvfp4_4over6_err_mode="MAE",
                 nvfp4_4over6_err_use_fast_math=False, with_rht=False, with_random_sign_mask=True, **unused):
        if row_scaled_nvfp4 and not rowwise:
            raise ValueError("row scaling needs the rowwise plane")
        assert with_random_sign_mask
        self.kw = dict(rowwise=rowwise, columnwise=columnwise, block=tuple(quant_tile_shape),
                       four_over_six=nvfp4_4over6_err_mode.lower() if nvfp4_use_4over6 else None,
                       four_over_six_fast_math=nvfp4_4over6_err_use_fast_math, global_scale_max=nvfp4_e4m3_max,
                       row_scaled=row_scaled_nvfp4)
        if with_rht:
            self.kw.update(rht=True, rht_signs=RHT_SIGNS)

    def quantize(self, x):
        xn = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if x.dtype == torch.bfloat16 else x.numpy()
        o = tt.quantize(xn, **self.kw)
        negzero = (np.asarray(xn, np.float32) == 0) & np.signbit(np.asarray(xn, np.float32))
        m = xn.shape[0]
        r = SimpleNamespace()

        def te_codes(data, nz):
            lo, hi = data & 0x0F, data >> 4
            lo = np.where(nz[:, 0::2], 0, lo)
            hi = np.where(nz[:, 1::2], 0, hi)
            return (hi | (lo << 4) if NIBBLE_SWAP else lo | (hi << 4)).astype(np.uint8)

        if self.kw["rowwise"]:
            r.data = torch.from_numpy(te_codes(o["row_data"], negzero))
            scale = o["row_scales"]
            if self.kw["block"] == (16, 16):
                pad = np.full((-(-m // 16) * 16 - m, scale.shape[1]), 0xEE, np.uint8)
                scale = np.concatenate([scale, pad])
            r.scale = torch.from_numpy(np.ascontiguousarray(scale))
            r.global_amax_row = torch.from_numpy(np.asarray(o["row_amax"], np.float32))
        if self.kw["columnwise"]:
            nz = np.zeros((xn.shape[1], 2 * o["col_data"].shape[1]), bool)
            if not self.kw.get("rht"):  # (the RHT'd values of plain blocks are never -0.0, SPEC 7.4)
                nz[:, :m] = negzero.T
            r.data_t = torch.from_numpy(np.ascontiguousarray(te_codes(o["col_data"], nz)[:, : m // 2]))
            r.scale_t = torch.from_numpy(o["col_scales"])
            r.global_amax_col = torch.from_numpy(np.asarray(o["col_amax"], np.float32))
        return r
'''


@pytest.fixture
def stand_in_te(tmp_path):
    """The stand-in TE tree; its modules leave sys.modules after the test."""
    d = tmp_path / "te" / "transformer_engine" / "pytorch" / "custom_recipes"
    d.mkdir(parents=True)
    (d / "reference_utils.py").write_text("class Fp4Formats:\n    E2M1 = 'e2m1'\n")
    (d / "reference_nvfp4.py").write_text(_STAND_IN)
    yield tmp_path / "te"
    for mod in [m for m in sys.modules if m == "transformer_engine" or m.startswith("transformer_engine.")]:
        del sys.modules[mod]


def _has_negative_zero(x: np.ndarray) -> bool:
    return bool(((x == 0) & np.signbit(x)).any())


def _run(tmp_path, spec: str, cases: int):
    cfg = RunConfig(backends=[spec], ops=["quantize"], max_cases=cases, seed=0, artifacts=str(tmp_path / "art"),
                    progress=False, shrink_time=0.1, workers=1)
    return run(cfg, stdout=io.StringIO(), stderr=io.StringIO())


def test_the_backend_through_the_runner_on_the_stand_in(tmp_path, stand_in_te):
    """80 cases of the backend's space: byte for byte with the oracle (4over6, row scaling, both block shapes, odd
    and even M, -0.0 elements among them), the columnwise codes compared only where M is even."""
    spec = f"te-reference:{stand_in_te}"
    code, stats = _run(tmp_path, spec, 80)
    assert (code, stats.cases, len(stats.failures)) == (0, 80, 0), stats.failures[:2]
    space = B.make_backend(spec).space("quantize")
    cases = generated_cases("quantize", 80, **space)
    drawn = {(c.options["columnwise"], c.arrays["x"].shape[0] % 2, tuple(c.options["block"]),
              bool(c.options.get("four_over_six")), bool(c.options.get("row_scaled")), c.options["rht"]) for c in cases}
    assert {(True, 1), (True, 0)} <= {d[:2] for d in drawn}
    assert {(1, 16), (16, 16)} <= {d[2] for d in drawn} and {True, False} <= {d[3] for d in drawn}
    assert any(d[4] for d in drawn) and any(d[5] for d in drawn)
    assert any(_has_negative_zero(c.arrays["x"]) for c in cases), "no case holds a -0.0 element"


def test_a_planted_fault_in_the_reference_is_reported(tmp_path, stand_in_te, monkeypatch):
    """The stand-in with the nibbles of every byte swapped: mismatches among the first 20 cases."""
    path = stand_in_te / "transformer_engine" / "pytorch" / "custom_recipes" / "reference_nvfp4.py"
    path.write_text(_STAND_IN.replace("NIBBLE_SWAP = False", "NIBBLE_SWAP = True"))
    code, stats = _run(tmp_path, f"te-reference:{stand_in_te}", 20)
    assert code == 1 and len(stats.failures) >= 3
    assert {f.get("status") for f in stats.failures} == {"mismatch"}


def test_a_planted_rht_sign_mask_is_reported(tmp_path, stand_in_te):
    """The stand-in's RHT with another sign mask than TE's (0x1234 for 0xD7E8): mismatches, on RHT cases only."""
    path = stand_in_te / "transformer_engine" / "pytorch" / "custom_recipes" / "reference_nvfp4.py"
    path.write_text(_STAND_IN.replace("RHT_SIGNS = 0xD7E8", "RHT_SIGNS = 0x1234"))
    code, stats = _run(tmp_path, f"te-reference:{stand_in_te}", 40)
    assert code == 1 and stats.failures
    assert {f.get("status") for f in stats.failures} == {"mismatch"}
    cases = {c.index: c for c in generated_cases("quantize", 40, **B.make_backend("te-reference:x").space("quantize"))}
    assert all(cases[f["index"]].options["rht"] for f in stats.failures)


def test_rht_negative_by_hand():
    """One column of 16 tokens: x_0 = +-1 and 15 values 2^-10 (a plain block). Every output sum is s_0 H[j][0] x_0
    (= x_0 with the default mask, s_0 = +1) plus at most 15 * 2^-10 in magnitude: all positive for x_0 = 1, all
    negative for x_0 = -1."""
    from conformance.te_reference import rht_negative

    x = np.full((16, 1), 2.0**-10)
    x[0, 0] = 1.0
    assert rht_negative(x, 0xD7E8).tolist() == [[False] * 16]
    x[0, 0] = -1.0
    assert rht_negative(x, 0xD7E8).tolist() == [[True] * 16]


def test_plain_rht_blocks_are_plain():
    """The RHT cases drawn for the backend's space hold SPEC 7.4's plain blocks only (every columnwise 16-block:
    nonzero, finite, biased exponents 27..249 spanning at most 12) and M a positive multiple of 16."""
    space = B.make_backend("te-reference:x").space("quantize")
    cases = [c for c in generated_cases("quantize", 200, **space) if c.options["rht"]]
    assert len(cases) >= 20
    for c in cases:
        v = np.asarray(c.arrays["x"], np.float32)
        assert v.shape[0] % 16 == 0 and v.shape[0] > 0
        e = ((v.view(np.uint32) >> 23) & 0xFF).reshape(-1, 16, v.shape[1])
        assert (v != 0).all() and np.isfinite(v).all()
        assert e.min() >= 27 and e.max() <= 249 and (e.max(axis=1) - e.min(axis=1)).max() <= 12, c.key()


def test_the_expected_buffers():
    """Compact scales only; no columnwise codes for an odd M."""
    b = B.make_backend("te-reference:/nowhere")
    keys = {"row_data", "row_scales", "row_scales_swizzled", "row_amax", "col_data", "col_scales",
            "col_scales_swizzled", "col_amax"}
    odd, even = (generated_cases("quantize", 1)[0] for _ in range(2))
    odd.arrays["x"], even.arrays["x"] = np.zeros((3, 16), np.float32), np.zeros((4, 16), np.float32)
    assert b.expected_outputs("quantize", even, keys) == keys - {"row_scales_swizzled", "col_scales_swizzled"}
    assert b.expected_outputs("quantize", odd, keys) == keys - {"row_scales_swizzled", "col_scales_swizzled",
                                                               "col_data"}


def test_a_path_without_a_checkout_is_unavailable(tmp_path):
    """Its op is skipped with the reason (no case runs: exit 2)."""
    b = B.make_backend(f"te-reference:{tmp_path}")
    assert "not found: the path must be a TransformerEngine source checkout" in b.available()
    code, stats = _run(tmp_path, f"te-reference:{tmp_path}", 5)
    assert code == 2 and stats.cases == 0


def test_the_generator_keeps_to_the_space():
    """A space that takes no supplied amax gets none on 4over6 cases (the special amax of 0 / Inf / NaN was drawn
    regardless), and one without specials gets no NaN on row-scaled cases (row_nan was drawn regardless)."""
    fo6 = generated_cases("quantize", 150, rule=["te"], rounding=["rn"], rht=[False], amax=["computed"],
                          four_over_six=["mae", "mse"])
    assert all(c.options.get("four_over_six") for c in fo6)
    assert not [c.index for c in fo6 if "amax" in c.arrays or "col_amax" in c.arrays]
    rs = generated_cases("quantize", 150, rule=["te"], rounding=["rn"], rht=[False], block=[[1, 16]],
                         row_scaled=[True], specials=False)
    assert all(c.options.get("row_scaled") for c in rs)
    assert not [c.index for c in rs if np.isnan(c.arrays["x"].astype(np.float32)).any()]


@pytest.mark.skipif(not os.environ.get("NVFP4_TE_SOURCE"), reason="NVFP4_TE_SOURCE names no TE source checkout")
def test_te_reference_itself(tmp_path):
    """TE's own reference (the checkout at NVFP4_TE_SOURCE) against the oracle: 200 cases, byte for byte."""
    te = Path(os.environ["NVFP4_TE_SOURCE"])
    code, stats = _run(tmp_path, f"te-reference:{te}", 200)
    assert (code, stats.cases, len(stats.failures)) == (0, 200, 0), stats.failures[:2]
