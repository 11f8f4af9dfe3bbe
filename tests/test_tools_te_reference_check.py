"""tools/te_reference_check.py without a TE checkout: its comparisons against a stand-in for TE's reference built on
conformance.te_torch (torch, written from SPEC alone): a quantizer that writes -0.0 as 0x0 as TE's reference does
(SPEC 14.1) and a GEMM with SPEC 12.2's arithmetic and 14.9's quotient alpha; planted errors stay unexplained; a
path that is not a TE checkout cannot run (exit status 2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conformance import te_torch as tt  # noqa: E402
from conformance.te_reference import load_reference  # noqa: E402
from conformance.te_torch_variants import E2M1_VALUES  # noqa: E402

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
                 row_scaled_nvfp4=False, scale_error=False, dtype=None):
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

    c_before_alpha = False  # a planted bug in qgemm: C added before alpha

    def qgemm(self, qx, qw, m_params, out_dtype, sx, sw, out=None, accumulate=False, gemm_type=None, qresult_x=None,
              qresult_w=None):
        """The arithmetic of TE's reference GEMM as SPEC 12.2 and 14.9 state it, in torch: per 16-block k in order,
        y += (sx_k sw_k^T) * (qx_k qw_k^T) in fp32; alpha = (amax_x * amax_w) / (36 G G), one value per row of a
        row-scaled x; y = alpha * y, then + C, then the output cast."""
        def values(q):
            codes = torch.stack([q & 0x0F, q >> 4], dim=-1).reshape(q.shape[0], -1).to(torch.int64)
            return E2M1_VALUES[codes]

        a, b = values(qx), values(qw)
        sa, sb = (t.view(torch.float8_e4m3fn).float() for t in (sx, sw))
        y = torch.zeros(a.shape[0], b.shape[0])
        for k in range(a.shape[1] // 16):
            y = y + torch.outer(sa[:, k], sb[:, k]) * (a[:, 16 * k:16 * k + 16] @ b[:, 16 * k:16 * k + 16].T)
        wgrad = gemm_type == "wgrad"
        ax = qresult_x.global_amax_col if wgrad else qresult_x.global_amax_row
        aw = qresult_w.global_amax_col if wgrad else qresult_w.global_amax_row
        g = self.kw["global_scale_max"]
        alpha = (ax.reshape(-1, 1) * aw) / (36.0 * g * g)
        if accumulate and self.c_before_alpha:
            return (alpha * (y + out)).to(out_dtype)
        y = alpha * y
        if accumulate:
            y = y + out
        return y.to(out_dtype)



class StandInReference(check.TEReference):
    """A TEReference whose quantizer is ``quantizer`` (StandIn by default) instead of a checkout's."""

    def __init__(self, quantizer=StandIn):
        self.quantizer, self.gemm_type = quantizer, SimpleNamespace(WGRAD="wgrad")
        self.utils = SimpleNamespace(Fp4Formats=SimpleNamespace(E2M1="e2m1"))


VARIANTS = [dict(plane="row", block=(1, 16), fos=None, fast=False, g=448, row_scaled=False),
            dict(plane="col", block=(16, 16), fos="MSE", fast=False, g=256, row_scaled=False),
            dict(plane="row", block=(1, 16), fos="MAE", fast=True, g=448, row_scaled=True)]


@pytest.mark.parametrize("v", VARIANTS, ids=["plain", "col 16x16 4over6", "row-scaled 4over6"])
def test_agreeing_bytes_and_the_negative_zero_difference(v):
    rng = np.random.default_rng(3)
    for _ in range(10):
        x = check.random_input(rng, even_rows=v["plane"] == "col")
        x[x == 0] = 0.0  # (no -0.0 here)
        assert check.compare(StandInReference(), x, v) == (True, False)
        x[0, 0], x[0, 1] = 1.0, -0.0
        assert check.compare(StandInReference(), x, v) == (False, True)  # SPEC 14.1: counted apart


def test_a_planted_scale_error_is_unexplained():
    rng = np.random.default_rng(4)
    x = check.random_input(rng, even_rows=False)
    x[0, :16] = torch.linspace(1.0, 3.0, 16)  # a nonzero first block
    assert check.compare(StandInReference(lambda **kw: StandIn(scale_error=True, **kw)), x, VARIANTS[0]) == (False, False)


@pytest.mark.parametrize("v", check.gemm_variants(), ids=lambda v: f"{v['kind']} {v['out']}" + (
    " C" if v["accumulate"] else "") + (" 4over6" if v["fos"] else "") + (" row-scaled" if v["row_scaled"] else ""))
def test_gemm_mismatches_are_the_alpha_quotients(v):
    """Against SPEC 12.2's arithmetic with 14.9's quotient alpha, every GEMM agrees or is explained by that alpha."""
    rng = np.random.default_rng(6)
    for _ in range(6):
        equal, explained = check.compare_gemm(StandInReference(), rng, v)
        assert equal or explained


def test_a_planted_gemm_order_is_unexplained():
    """C added before alpha (not SPEC 12.2's order) leaves mismatches that TE's alpha does not explain."""
    class CFirst(StandIn):
        c_before_alpha = True

    rng = np.random.default_rng(7)
    v = dict(check.gemm_variants()[2])  # fprop, fp32 out, with C
    assert v["accumulate"]
    results = [check.compare_gemm(StandInReference(CFirst), rng, v) for _ in range(12)]
    assert any(r == (False, False) for r in results), results


def test_a_path_without_the_reference_cannot_run(tmp_path, capsys, monkeypatch):
    with pytest.raises(check.CannotRun, match="not found: the path must be a TransformerEngine source checkout"):
        load_reference(tmp_path, tmp_path / "work")
    monkeypatch.setattr(sys, "argv", ["te_reference_check.py", "--te", str(tmp_path)])
    assert check.main() == 2 and "cannot run" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _forget_loaded_trees():
    """The modules a test loads from a TE tree leave sys.modules with it."""
    yield
    for mod in [m for m in sys.modules if m == "transformer_engine" or m.startswith("transformer_engine.")]:
        del sys.modules[mod]


def _fake_te(root: Path, reference: str) -> Path:
    """A TE source tree whose custom_recipes hold ``reference`` as reference_nvfp4.py and a reference_utils.py with
    the one name the tool reads (Fp4Formats.E2M1)."""
    d = root / "transformer_engine" / "pytorch" / "custom_recipes"
    d.mkdir(parents=True)
    (d / "reference_utils.py").write_text("class Fp4Formats:\n    E2M1 = 'e2m1'\n")
    (d / "reference_nvfp4.py").write_text(reference)
    return root


_NARROW_CONSTRUCTOR = """
class NVFP4QuantizerRef:
    def __init__(self, *, dtype, rowwise, columnwise):
        pass
"""
_NO_FIELDS = """
class NVFP4QuantizerRef:
    def __init__(self, **kw):
        pass

    def quantize(self, x):
        return object()
"""
_MISSING_IMPORT = "import transformer_engine.pytorch.not_a_stand_in\n"


@pytest.mark.parametrize("reference, words", [
    (_NARROW_CONSTRUCTOR, "NVFP4QuantizerRef constructor"),  # a keyword this TE does not take
    (_NO_FIELDS, "NVFP4QuantizerRef.quantize"),  # a result without the fields read
    (_MISSING_IMPORT, "does not load beside the stand-ins"),  # an import the stand-ins do not give
])
def test_a_reference_that_takes_or_gives_other_things_cannot_run(tmp_path, capsys, monkeypatch, reference, words):
    """Exit status 2 (cannot run), not 1 (an unexplained mismatch), for a TE whose reference differs in its API."""
    te = _fake_te(tmp_path / "te", reference)
    monkeypatch.setattr(sys, "argv", ["te_reference_check.py", "--te", str(te), "--cases", "1"])
    assert check.main() == 2
    err = capsys.readouterr().err
    assert "cannot run" in err and words in err, err


_ZEROS_THEN_REFUSES = """
import torch


class _Result:
    pass


class NVFP4QuantizerRef:
    def __init__(self, *, dtype, rowwise, columnwise, **options):
        self.columnwise = columnwise

    def quantize(self, x):
        if self.columnwise:
            raise TypeError("no columnwise plane here")
        r, (m, k) = _Result(), x.shape
        r.data, r.scale = torch.zeros(m, k // 2, dtype=torch.uint8), torch.zeros(m, k // 16, dtype=torch.uint8)
        r.global_amax_row = torch.zeros(1)
        return r
"""


def test_unexplained_mismatches_before_a_refusal_decide_the_status(tmp_path, capsys, monkeypatch):
    """A reference whose rowwise bytes are wrong (all zero) and whose columnwise call raises: the rowwise mismatches
    already counted make the exit status 1 (not 2), and the report says where the comparison stopped."""
    te = _fake_te(tmp_path / "te", _ZEROS_THEN_REFUSES)
    monkeypatch.setattr(sys, "argv", ["te_reference_check.py", "--te", str(te), "--cases", "2"])
    assert check.main() == 1
    out = capsys.readouterr().out
    assert "the comparison stopped after" in out and "no columnwise plane here" in out, out


def test_a_second_checkout_is_loaded_afresh(tmp_path):
    """load_reference of another TE tree in the same process gives that tree's classes (no module of the first
    answers for it) and leaves sys.path as it was."""
    path_before = list(sys.path)
    one = load_reference(_fake_te(tmp_path / "one", _NARROW_CONSTRUCTOR), tmp_path / "w1")[0]
    two = load_reference(_fake_te(tmp_path / "two", _NO_FIELDS), tmp_path / "w2")[0]
    assert one is not two and hasattr(two, "quantize") and not hasattr(one, "quantize")
    assert sys.path == path_before


def test_cases_must_be_positive(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["te_reference_check.py", "--te", ".", "--cases", "0"])
    with pytest.raises(SystemExit) as e:
        check.main()
    assert e.value.code == 2 and "must be at least 1" in capsys.readouterr().err
