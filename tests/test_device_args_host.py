"""Argument checks of device/_api.py that refuse before any CUDA call, on the host (no GPU needed). Each refusal is
one the oracle makes too, or one that prevents a silently wrong result; the GPU tests repeat them on CUDA tensors."""
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import oracle  # noqa: E402
from device import _api  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.parametrize("amax", [3.0, np.float32(3.0), torch.tensor(3.0)])
@pytest.mark.parametrize("groups", [1, 4])
def test_grouped_amax_refuses_a_single_number(amax, groups):
    # oracle.group_quantize refuses a single value for any number of groups (SPEC 4.3: one amax per group)
    with pytest.raises(ValueError, match="shape"):
        oracle.group_quantize(np.ones((groups, 16), np.float32), [1] * groups, amax=3.0)
    with pytest.raises(ValueError, match="single value"):
        _api._amax_tensor(amax, groups, True, CPU)


def test_grouped_amax_forms_the_oracle_takes():
    # E values for both planes, or a (row, col) tuple of E values each: [2, E] rows (row plane, col plane)
    both = _api._amax_tensor(torch.tensor([1.0, 2.0]), 2, True, CPU)
    assert both.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    pair = _api._amax_tensor((torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])), 2, True, CPU)
    assert pair.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    # a single tensor's number stands for both planes
    assert _api._amax_tensor(5.0, 1, False, CPU).tolist() == [[5.0], [5.0]]


def test_raw_dequantize_needs_the_scale_layout():
    # raw bytes carry no layout: without swizzled= a compact / swizzled mix-up would decode wrong scales silently
    data = torch.zeros(8, dtype=torch.uint8)
    scales = torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="swizzled=True or False"):
        _api.dequantize(data, scales=scales, amax=torch.ones(1), shape=(1, 16))
    with pytest.raises(ValueError, match="needs data, scales="):
        _api.dequantize(data, scales=scales, shape=(1, 16), swizzled=False)



def test_raw_dequantize_refuses_host_tensors_and_numbers():
    # every buffer the kernel reads must be a CUDA tensor; the refusal names the first one that is not
    from device import _ops

    data, scales = torch.zeros(8, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="^data must be a CUDA tensor"):
        _api.dequantize(data, scales=scales, amax=1.0, shape=(1, 16), swizzled=False)
    with pytest.raises(ValueError, match="^scales must be a CUDA tensor"):
        _ops.require_cuda_tensors(scales=scales, amax=torch.ones(1))
    with pytest.raises(ValueError, match="^amax must be a CUDA tensor"):  # a number where a tensor belongs
        _ops.require_cuda_tensors(amax=1.0)
    _ops.require_cuda_tensors()  # nothing to check: no error


@pytest.mark.parametrize("rule", ["torchao", "torchao_noscale"])
def test_torchao_rules_take_the_oracles_options(rule):
    # every option the oracle takes with a torchao rule, the RHT included, reaches the kernels (SPEC 15)
    oracle.quantize(np.ones((16, 32), np.float32).astype(ml_dtypes.bfloat16), columnwise=True, rht=True, rule=rule)
    x2 = torch.zeros((16, 32), dtype=torch.bfloat16)
    opts = _api._options(x2, rowwise=True, columnwise=True, rht=True, rht_signs=0xD7E8, block=(16, 16), rule=rule,
                         rounding="sr", seed=0, offset=0)
    assert opts["rule"] == {"torchao": 2, "torchao_noscale": 3}[rule]  # nvfp4_launch.h Rule
    assert opts["rht"] and opts["block2d"] and opts["sr"]
    with pytest.raises(ValueError, match="rule must be one of"):
        _api._options(x2, rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=(1, 16), rule="TE",
                      rounding="rn", seed=0, offset=0)


def test_raw_dequantize_checks_the_rule():
    data = torch.zeros(8, dtype=torch.uint8)
    scales = torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="rule must be one of"):
        _api.dequantize(data, scales=scales, amax=torch.ones(1), shape=(1, 16), swizzled=False, rule="mx")


def test_gemm_rule_pairs_follow_the_oracle():
    # device.grouped_gemm accepts exactly the rule pairs whose alpha oracle.gemm_alpha defines (SPEC 12.1), and hands
    # the setup kernel the rule code of device._api._RULES that picks that alpha (the TE pair: 0)
    from device import gemm as dgemm

    def plane(rule):
        return oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), np.float32(2.0),
                                     (1, 16), rule=rule)

    for ra in _api._RULES:
        for rb in _api._RULES:
            try:
                oracle.gemm_alpha(plane(ra), plane(rb))
                accepted = True
            except ValueError:
                accepted = False
            if accepted:
                assert dgemm._alpha_rule(ra, rb) == (0 if ra.startswith("te") else _api._RULES[ra])
            else:
                with pytest.raises(ValueError, match="incompatible scale rules"):
                    dgemm._alpha_rule(ra, rb)
