"""device/_dispatch.py's quantize plans and device/testing.py's force_plan, on the host (no GPU, no torch).

The quantize passes run the bf16 fast kernels where they can (bf16 input, the default RHT sign mask compiled in; the
quantizer writes 16x16 blocks under rule te, rounding to nearest, without the RHT only; 2.1-2.4x faster than the general
kernels on the same bytes with 1x16 blocks, 1.66-1.69x with 16x16), else the general kernels. GPU tests check both
families' bytes against the oracle (tests/test_device_quantize.py); the GEMM plans are in
tests/test_device_kernel_choice.py.
"""

from __future__ import annotations

import pytest

from device import _dispatch, testing
from device._codes import QuantizeKernel
from device._dispatch import GemmProblem, QuantizePlan, plan_gemm, plan_quantize
from oracle.rht import DEFAULT_RHT_SIGNS

FAST, GENERAL = QuantizeKernel.fast_bf16, QuantizeKernel.general


def q(dtype="bfloat16", *, rht=False, rht_signs=DEFAULT_RHT_SIGNS, block2d=False, sr=False, torchao=False,
      kernel=None):
    return plan_quantize(dtype, rht=rht, rht_signs=rht_signs, block2d=block2d, sr=sr, torchao=torchao, kernel=kernel)


def test_default_rht_signs():
    assert DEFAULT_RHT_SIGNS == 0xD7E8  # device.quantize's default rht_signs (SPEC 7)


@pytest.mark.parametrize("kw,amax,quantize", [
    (dict(), FAST, FAST),                                   # bf16, RN, 1x16
    (dict(rht=True), FAST, FAST),                           # the RHT with the default mask
    (dict(rht=True, rht_signs=0x1234), GENERAL, GENERAL),   # another mask: neither pass
    (dict(rht=False, rht_signs=0x1234), FAST, FAST),        # (the mask is unused without the RHT)
    (dict(sr=True), FAST, FAST),                            # either rounding
    (dict(block2d=True), FAST, FAST),                       # 16x16 blocks: rule te, RN, no RHT
    (dict(block2d=True, sr=True), FAST, GENERAL),           # ... not with stochastic rounding,
    (dict(block2d=True, rht=True), FAST, GENERAL),          # the RHT
    (dict(block2d=True, torchao=True), FAST, GENERAL),      # or a torchao rule
    (dict(torchao=True), FAST, FAST),
    (dict(rht=True, sr=True), FAST, FAST),
    (dict(rht=True, block2d=True, sr=True), FAST, GENERAL),
    (dict(dtype="float16"), GENERAL, GENERAL),
    (dict(dtype="float32"), GENERAL, GENERAL),
])
def test_plan_quantize_default(kw, amax, quantize):
    assert q(**kw) == QuantizePlan(amax, quantize)
    # forcing the general kernels works for every call
    assert q(**kw, kernel="general") == QuantizePlan(GENERAL, GENERAL)


@pytest.mark.parametrize("kw,why", [
    (dict(block2d=True, sr=True), "writes 16x16 blocks under rule te, rounding to nearest, without the RHT only"),
    (dict(block2d=True, rht=True), "writes 16x16 blocks under rule te"),
    (dict(block2d=True, torchao=True), "writes 16x16 blocks under rule te"),
    (dict(dtype="float16"), "read bfloat16 input, not float16"),
    (dict(dtype="float32"), "read bfloat16 input, not float32"),
    (dict(rht=True, rht_signs=0x1234), "default RHT sign mask 0xD7E8"),
])
def test_forcing_fast_bf16_where_it_cannot_run_raises(kw, why):
    with pytest.raises(ValueError, match=f"quantize='fast_bf16' cannot run this call: .*{why}"):
        q(**kw, kernel="fast_bf16")


def test_plan_quantize_four_over_six():
    """A 4over6 call (SPEC 5.6): the fast amax pass, then the 4over6 quantizer, with either block shape; refused with
    the RHT, stochastic rounding or another input than bf16 (as the oracle refuses the first two)."""
    plan = QuantizePlan(FAST, QuantizeKernel.four_over_six)
    for block2d in (False, True):
        assert plan_quantize("bfloat16", rht=False, rht_signs=DEFAULT_RHT_SIGNS, block2d=block2d, sr=False,
                             four_over_six=True) == plan
    for kw, why in ((dict(sr=True), "rounds to nearest"), (dict(rht=True), "without RHT"),
                    (dict(dtype="float16"), "reads bfloat16 input")):
        args = dict(dict(dtype="bfloat16", rht=False, sr=False), **kw)
        with pytest.raises(ValueError, match=f"4over6 cannot run this call: .*{why}"):
            plan_quantize(args.pop("dtype"), rht_signs=DEFAULT_RHT_SIGNS, block2d=False, four_over_six=True, **args)


def test_forcing_fast_bf16_where_it_runs():
    for kw in (dict(), dict(rht=True), dict(sr=True), dict(rht=True, sr=True), dict(block2d=True)):
        assert q(**kw, kernel="fast_bf16") == QuantizePlan(FAST, FAST)
    with pytest.raises(ValueError, match="quantize kernel must be one of"):
        q(kernel="fast")


# ------------------------------------------------------------------------------------------------------------------
# device.testing.force_plan
# ------------------------------------------------------------------------------------------------------------------

E64_FPROP = GemmProblem(kind="fprop", mode="fast", groups=64, tokens=16384, n=1408, k=2048, out_dtype="bfloat16")


def _forced_plan(p: GemmProblem):
    """The plan a grouped_gemm call on ``p`` takes under the forced parts now in force (device/gemm.py's reading)."""
    f = _dispatch.FORCED
    return plan_gemm(p, algorithm=f.get("algorithm"), loader=f.get("loader"), epilogue=f.get("epilogue"))


def test_force_plan_sets_and_restores():
    assert _dispatch.FORCED == {}
    auto = _forced_plan(E64_FPROP)
    with testing.force_plan(algorithm="fused_128x256", epilogue="staged"):
        assert _dispatch.FORCED == {"algorithm": "fused_128x256", "epilogue": "staged"}
        got = _forced_plan(E64_FPROP)
        assert (got.algorithm.name, got.loader.name, got.epilogue.name) == ("fused_128x256", "cp_async", "staged")
        with testing.force_plan(epilogue="tma_store", quantize="general"):  # an inner block replaces what it names
            assert _dispatch.FORCED == {"algorithm": "fused_128x256", "epilogue": "tma_store", "quantize": "general"}
        assert _dispatch.FORCED == {"algorithm": "fused_128x256", "epilogue": "staged"}
    assert _dispatch.FORCED == {}
    assert _forced_plan(E64_FPROP) == auto


def test_force_plan_restores_after_an_exception():
    with pytest.raises(RuntimeError, match="inside"):
        with testing.force_plan(algorithm="swapped_64x256", loader="cp_async"):
            raise RuntimeError("inside")
    assert _dispatch.FORCED == {}
    with testing.force_plan(quantize="fast_bf16"):
        with pytest.raises(ValueError, match="cannot run this call"):
            with testing.force_plan(algorithm="swapped_64x256"):
                _forced_plan(GemmProblem(kind="wgrad", mode="fast", groups=8, tokens=512, n=64, k=64,
                                         out_dtype="float32"))
        assert _dispatch.FORCED == {"quantize": "fast_bf16"}
    assert _dispatch.FORCED == {}


@pytest.mark.parametrize("part,value", [("algorithm", "pair"), ("algorithm", "large"), ("loader", "TMA"),
                                        ("epilogue", "lines"), ("quantize", "fast")])
def test_force_plan_checks_names_on_entry(part, value):
    with pytest.raises(ValueError, match=f"{part} must be one of"):
        with testing.force_plan(**{part: value}):
            pytest.fail("entered a block with an unknown name")
    assert _dispatch.FORCED == {}
