"""tools/te_reference_check.py without a TE checkout: its comparison against a stand-in for TE's reference quantizer
built on conformance.te_torch (torch, written from SPEC alone), which writes -0.0 as 0x0 as TE's reference does
(SPEC 14.1); and its refusal of a path that is not a TE checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conformance import te_torch as tt  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("te_reference_check", ROOT / "tools" / "te_reference_check.py")
check = importlib.util.module_from_spec(_spec)
sys.modules["te_reference_check"] = check
_spec.loader.exec_module(check)


class StandIn:
    """The quantizer part of TE's NVFP4QuantizerRef, from conformance.te_torch: ``quantize(x)`` gives TE's fields
    (``data`` / ``scale`` / ``global_amax_row``, or ``data_t`` [K, M/2] / ``scale_t`` / ``global_amax_col``), with
    the code of every -0.0 element 0x0. ``scale_error``: one scale byte off by one (a planted bug)."""

    def __init__(self, *, rowwise, columnwise, quant_tile_shape=(1, 16), nvfp4_use_4over6=False,
                 nvfp4_4over6_err_mode="MAE", nvfp4_4over6_err_use_fast_math=False, nvfp4_e4m3_max=448,
                 row_scaled_nvfp4=False, scale_error=False):
        self.kw = dict(rowwise=rowwise, columnwise=columnwise, block=quant_tile_shape,
                       four_over_six=nvfp4_4over6_err_mode.lower() if nvfp4_use_4over6 else None,
                       four_over_six_fast_math=nvfp4_4over6_err_use_fast_math,
                       global_scale_max=nvfp4_e4m3_max, row_scaled=row_scaled_nvfp4)
        self.scale_error = scale_error

    def quantize(self, x):
        xn = check.host(x)
        o = tt.quantize(xn, **self.kw)
        plane = "col" if self.kw["columnwise"] else "row"
        data, scales = o[f"{plane}_data"].copy(), o[f"{plane}_scales"].copy()
        src = np.asarray(xn, np.float32)
        negzero = (src == 0) & np.signbit(src)
        if plane == "col":
            negzero = negzero.T
            data = data[:, : src.shape[0] // 2]
            negzero = negzero[:, : 2 * data.shape[1]]
        lo, hi = data & 0x0F, data >> 4
        lo = np.where(negzero[:, 0::2], 0, lo)
        hi = np.where(negzero[:, 1::2], 0, hi)
        data = (lo | (hi << 4)).astype(np.uint8)
        if self.scale_error:
            scales.flat[0] ^= np.uint8(1)
        amax = torch.from_numpy(np.asarray(o[f"{plane}_amax"], np.float32))
        if plane == "col":
            return SimpleNamespace(data_t=torch.from_numpy(data), scale_t=torch.from_numpy(scales), global_amax_col=amax)
        return SimpleNamespace(data=torch.from_numpy(data), scale=torch.from_numpy(scales), global_amax_row=amax)


VARIANTS = [dict(plane="row", block=(1, 16), fos=None, fast=False, g=448, row_scaled=False),
            dict(plane="col", block=(16, 16), fos="MSE", fast=False, g=256, row_scaled=False),
            dict(plane="row", block=(1, 16), fos="MAE", fast=True, g=448, row_scaled=True)]


@pytest.mark.parametrize("v", VARIANTS, ids=["plain", "col 16x16 4over6", "row-scaled 4over6"])
def test_agreeing_bytes_and_the_negative_zero_difference(v):
    rng = np.random.default_rng(3)
    for _ in range(10):
        x = check.random_input(rng, even_rows=v["plane"] == "col")
        x[x == 0] = 0.0  # (no -0.0 here)
        assert check.compare(StandIn, x, v) == (True, False)
        x[0, 0], x[0, 1] = 1.0, -0.0
        assert check.compare(StandIn, x, v) == (False, True)  # SPEC 14.1: counted apart


def test_a_planted_scale_error_is_unexplained():
    rng = np.random.default_rng(4)
    x = check.random_input(rng, even_rows=False)
    x[0, :16] = torch.linspace(1.0, 3.0, 16)  # a nonzero first block
    assert check.compare(lambda **kw: StandIn(scale_error=True, **kw), x, VARIANTS[0]) == (False, False)


def test_a_path_without_the_reference_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not found: --te must be a TransformerEngine source checkout"):
        check.load_reference(tmp_path, tmp_path / "work")
