"""Argument checks of device/quantization.py and device/gemm.py that refuse before any CUDA call, and the quantize
plan they hand the kernels, on the host (no GPU needed). Each refusal is one the oracle makes too, or one that prevents
a silently wrong result; the GPU tests repeat them on CUDA tensors."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import oracle  # noqa: E402
from device import quantization, testing  # noqa: E402
from device._codes import QuantizeKernel, Rule  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.parametrize("amax", [3.0, np.float32(3.0), torch.tensor(3.0)])
@pytest.mark.parametrize("groups", [1, 4])
def test_grouped_amax_refuses_a_single_number(amax, groups):
    # oracle.group_quantize refuses a single value for any number of groups (SPEC 4.3: one amax per group)
    with pytest.raises(ValueError, match=r"^amax must have shape \[E\] or \[E, 2\], got \(\)$"):
        oracle.group_quantize(np.ones((groups, 16), np.float32), [1] * groups, amax=3.0)
    single = rf"^a grouped amax holds one value per group \({groups}\) .* got a single value"
    with pytest.raises(ValueError, match=single):
        quantization._amax_tensors(amax, groups, True, CPU)


def test_grouped_amax_forms_the_oracle_takes():
    # E values for both planes, or a (row, col) tuple of E values each: a (row plane, col plane) pair of contiguous
    # float32 tensors, the kernels' operands
    both = quantization._amax_tensors(torch.tensor([1.0, 2.0]), 2, True, CPU)
    assert [t.tolist() for t in both] == [[1.0, 2.0], [1.0, 2.0]]
    pair = quantization._amax_tensors((torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])), 2, True, CPU)
    assert [t.tolist() for t in pair] == [[1.0, 2.0], [3.0, 4.0]]
    # a single tensor's number stands for both planes
    assert [t.tolist() for t in quantization._amax_tensors(5.0, 1, False, CPU)] == [[5.0], [5.0]]
    # other dtypes and strided views arrive as contiguous float32
    strided = quantization._amax_tensors((torch.tensor([1.0, 9.0, 2.0], dtype=torch.float64)[::2],
                                          torch.tensor([3, 4], dtype=torch.int32)), 2, True, CPU)
    assert all(t.dtype == torch.float32 and t.is_contiguous() for t in strided)
    assert [t.tolist() for t in strided] == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("amax, groups", [
    (np.ma.masked_array([5.0, 7.0], mask=[False, True]), 1),  # a (row, col) pair as one array
    ((np.ma.masked_array(5.0, mask=True), 7.0), 1),  # one of a pair
    (np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False]), 3),  # E values
    (np.ma.masked_array(np.ones((3, 2)), mask=np.eye(3, 2, dtype=bool)), 3),  # [E, 2] pairs
])
def test_masked_amax_is_refused(amax, groups):
    """As the oracle: a masked amax would lose its mask (a masked pair value read as stored, or as 0.0)."""
    with pytest.raises(TypeError, match="masked array"):
        quantization._amax_tensors(amax, groups, groups > 1, CPU)


def test_raw_dequantize_needs_the_scale_layout():
    # raw bytes carry no layout: without swizzled= a compact / swizzled mix-up would decode wrong scales silently
    data = torch.zeros(8, dtype=torch.uint8)
    scales = torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="swizzled=True or False"):
        quantization.dequantize(data, scales=scales, amax=torch.ones(1), shape=(1, 16))
    with pytest.raises(ValueError, match="needs data, scales="):
        quantization.dequantize(data, scales=scales, shape=(1, 16), swizzled=False)


def test_raw_dequantize_refuses_host_tensors_and_numbers():
    # every buffer the kernel reads must be a CUDA tensor; the refusal names the first one that is not
    from device import _ops

    data, scales = torch.zeros(8, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="^data must be a CUDA tensor, got device cpu"):
        quantization.dequantize(data, scales=scales, amax=1.0, shape=(1, 16), swizzled=False)
    with pytest.raises(ValueError, match="^scales must be a CUDA tensor"):
        _ops.require_cuda_tensors(scales=scales, amax=torch.ones(1))
    # another type where a tensor belongs (as device.quantize's x): TypeError
    with pytest.raises(TypeError, match="^amax must be a CUDA tensor, got float"):
        _ops.require_cuda_tensors(amax=1.0)
    with pytest.raises(TypeError, match="^data must be a CUDA tensor, got ndarray"):
        quantization.dequantize(np.zeros(8, np.uint8), scales=scales, amax=1.0, shape=(1, 16), swizzled=False)
    for q in ("foo", None, np.zeros(8, np.uint8)):  # (what oracle.dequantize refuses with TypeError too)
        with pytest.raises(TypeError, match="dequantize takes a DeviceNVFP4Tensor or raw bytes"):
            quantization.dequantize(q)
    _ops.require_cuda_tensors()  # nothing to check: no error


@pytest.mark.parametrize("rule", ["torchao", "torchao_noscale"])
def test_torchao_rules_take_the_oracles_options(rule):
    # every option the oracle takes with a torchao rule, the RHT included, reaches the kernels (SPEC 15)
    oracle.quantize(np.ones((16, 32), np.float32).astype(ml_dtypes.bfloat16), columnwise=True, rht=True, rule=rule)
    x2 = torch.zeros((16, 32), dtype=torch.bfloat16)
    opts = quantization._options(x2, rowwise=True, columnwise=True, rht=True, rht_signs=0xD7E8, block=(16, 16),
                                 rule=rule, rounding="sr", seed=0, offset=0)
    assert opts["rule"] == {"torchao": 2, "torchao_noscale": 3}[rule]  # csrc/common/codes.h Rule
    assert opts["rht"] and opts["block2d"] and opts["sr"]
    # bf16 with the default RHT mask: the fast amax pass; SR and 16x16 blocks: the general quantizer
    assert (opts["amax_kernel"], opts["quantize_kernel"]) == (QuantizeKernel.fast_bf16, QuantizeKernel.general)
    with pytest.raises(ValueError, match="rule must be one of"):
        quantization._options(x2, rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=(1, 16), rule="TE",
                      rounding="rn", seed=0, offset=0)


def test_raw_dequantize_checks_the_rule():
    data = torch.zeros(8, dtype=torch.uint8)
    scales = torch.zeros(1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="rule must be one of"):
        quantization.dequantize(data, scales=scales, amax=torch.ones(1), shape=(1, 16), swizzled=False, rule="mx")


def test_gemm_rule_pairs_follow_the_oracle():
    # device.grouped_gemm accepts exactly the rule pairs whose alpha oracle.gemm_alpha defines (SPEC 12.1), and hands
    # the setup kernel the rule code of device._codes.Rule that picks that alpha (the TE pair: 0)
    from device import gemm as dgemm

    def plane(rule):
        return oracle.QuantizedPlane(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), np.float32(2.0),
                                     (1, 16), rule=rule)

    for ra in Rule.__members__:
        for rb in Rule.__members__:
            try:
                oracle.gemm_alpha(plane(ra), plane(rb))
                accepted = True
            except ValueError:
                accepted = False
            if accepted:
                assert dgemm._alpha_rule(ra, rb) == (0 if ra.startswith("te") else Rule[ra])
            else:
                with pytest.raises(ValueError, match="incompatible scale rules"):
                    dgemm._alpha_rule(ra, rb)


def _kernels(x2, **kw) -> tuple:
    """(amax kernel, quantize kernel) of the options device.quantize hands the launchers for ``x2``."""
    defaults = dict(rowwise=True, columnwise=True, rht=False, rht_signs=0xD7E8, block=(1, 16), rule="te",
                    rounding="rn", seed=0, offset=0)
    opts = quantization._options(x2, **{**defaults, **kw})
    return opts["amax_kernel"], opts["quantize_kernel"]


FAST, GENERAL = int(QuantizeKernel.fast_bf16), int(QuantizeKernel.general)


def test_quantize_plan_in_the_options():
    """device.quantize / group_quantize take the quantize plan of device._dispatch.plan_quantize (the bf16 fast kernels
    for bf16 with 1x16 blocks, with or without the RHT under the default mask, and with 16x16 blocks under rule te,
    rounding to nearest, without the RHT), or the forced one."""
    bf16 = torch.zeros((16, 32), dtype=torch.bfloat16)
    assert _kernels(bf16) == (FAST, FAST)
    assert _kernels(bf16, rht=True) == (FAST, FAST)
    assert _kernels(bf16, rht=True, rht_signs=0x1234) == (GENERAL, GENERAL)
    assert _kernels(bf16, rounding="sr") == (FAST, FAST)
    assert _kernels(bf16, block=(16, 16)) == (FAST, FAST)
    assert _kernels(bf16, block=(16, 16), rule="te_fused_rht") == (FAST, FAST)
    assert _kernels(bf16, block=(16, 16), rounding="sr") == (FAST, GENERAL)
    assert _kernels(bf16, block=(16, 16), rule="torchao") == (FAST, GENERAL)
    assert _kernels(bf16, block=(16, 16), rule="torchao_noscale") == (FAST, GENERAL)
    assert _kernels(bf16, block=(16, 16), rht=True) == (FAST, GENERAL)
    for dtype in (torch.float16, torch.float32):
        assert _kernels(torch.zeros((16, 32), dtype=dtype)) == (GENERAL, GENERAL)
    with testing.force_plan(quantize="general"):
        assert _kernels(bf16) == (GENERAL, GENERAL)
        assert _kernels(bf16, rht=True) == (GENERAL, GENERAL)
    with testing.force_plan(quantize="fast_bf16"):
        assert _kernels(bf16, rht=True) == (FAST, FAST)
    assert _kernels(bf16) == (FAST, FAST)  # the block restored the automatic choice


@pytest.mark.parametrize("dtype,kw,why", [
    (torch.bfloat16, dict(block=(16, 16), rounding="sr"), "writes 16x16 blocks under rule te, rounding to nearest"),
    (torch.bfloat16, dict(block=(16, 16), rule="torchao"), "writes 16x16 blocks under rule te"),
    (torch.bfloat16, dict(rht=True, rht_signs=0x1234), "default RHT sign mask"),
    (torch.float16, dict(), "read bfloat16 input, not float16"),
    (torch.float32, dict(), "read bfloat16 input, not float32"),
])
def test_forcing_the_fast_quantize_kernels_where_they_cannot_run_raises(dtype, kw, why):
    x2 = torch.zeros((16, 32), dtype=dtype)
    with testing.force_plan(quantize="fast_bf16"):
        with pytest.raises(ValueError, match=f"quantize='fast_bf16' cannot run this call: .*{why}"):
            _kernels(x2, **kw)


def test_forcing_the_general_kernel_on_a_4over6_call_raises():
    """force_plan raises where the forced part cannot run (device/testing.py): the general kernels have no 4over6
    pass, so the forced plan is refused rather than ignored."""
    x2 = torch.zeros((16, 32), dtype=torch.bfloat16)
    with testing.force_plan(quantize="general"):
        with pytest.raises(ValueError, match="quantize='general' cannot run a 4over6 call"):
            _kernels(x2, four_over_six="mae")


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (2**31, ValueError), (True, TypeError),
                                        (2.0, TypeError), ("4", TypeError)])
def test_set_num_sms_refuses_bad_values(bad, error):
    """Values the GEMM binding's max_ctas cannot hold (2**31 and up) are refused here, not by every later call."""
    import device

    before = device.get_num_sms()
    with pytest.raises(error, match=r"num_sms must be None or an int in \[1, 2\*\*31\)"):
        device.set_num_sms(bad)
    assert device.get_num_sms() == before


def test_set_num_sms_and_get_num_sms():
    import device

    before = device.get_num_sms()
    try:
        device.set_num_sms(7)
        assert device.get_num_sms() == 7
        device.set_num_sms(np.int64(5))  # a NumPy integer is an integer (stored as a Python int)
        assert device.get_num_sms() == 5 and type(device.get_num_sms()) is int
        device.set_num_sms(None)
        assert device.get_num_sms() is None
    finally:
        device.set_num_sms(before)


def _weights_standin(**options):
    """What gemm_over_weight_copy reads of b before any other check: its rowwise plane and its options."""
    from types import SimpleNamespace

    return SimpleNamespace(row_data=torch.zeros(8, dtype=torch.uint8),
                           options=dict(dict(block=(16, 16), rounding="rn", rht=False, four_over_six=None), **options))


@pytest.mark.parametrize("b,kind,out,err,match", [
    (_weights_standin(), "wgrad", None, ValueError, "fprop and dgrad only"),
    (None, "fprop", None, ValueError, "rowwise plane"),
    (_weights_standin(block=(1, 16)), "dgrad", None, ValueError, "16x16 blocks"),
    (_weights_standin(rounding="sr"), "dgrad", None, ValueError, "round to nearest"),
    (_weights_standin(rht=True), "dgrad", None, ValueError, "RHT"),
    (_weights_standin(four_over_six="mse"), "dgrad", None, ValueError, "4over6"),
    (_weights_standin(), "fprop", None, TypeError, "out must be a torch.Tensor"),
    (_weights_standin(block=(1, 16)), "fprop", [0.0], TypeError, "out must be a torch.Tensor"),
])
def test_gemm_over_weight_copy_refuses_before_the_copy(b, kind, out, err, match):
    """device.testing.gemm_over_weight_copy refuses a call the weights' copy cannot serve before it makes the copy
    (a dgrad B that is not the rowwise plane transposed would give other bits than grouped_gemm)."""
    with pytest.raises(err, match=match):
        testing.gemm_over_weight_copy(None, b, kind=kind, out=out)


@pytest.mark.parametrize("kw,err,match", [
    (dict(swizzled="False"), TypeError, "swizzled must be True or False"),
    (dict(swizzled=1), TypeError, "swizzled must be True or False"),
    (dict(shape=16), TypeError, r"shape must be two ints \(rows, cols\)"),
    (dict(shape=(1, 16, 1)), TypeError, "shape must be two ints"),
    (dict(shape=(1.9, 16)), TypeError, "shape must be two ints"),
    (dict(shape=(True, 16)), TypeError, "shape must be two ints"),
    (dict(plane="col"), ValueError, "raw bytes are one plane already"),
])
def test_raw_dequantize_refuses_malformed_arguments(kw, err, match):
    """Raw dequantize's layout, shape and plane arguments are checked before anything else (no silent truncation of
    a float shape, no string read as a truth value)."""
    data, scales = torch.zeros(8, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)
    args = dict(dict(scales=scales, amax=torch.ones(1), shape=(1, 16), swizzled=False), **kw)
    plane = args.pop("plane", "row")
    with pytest.raises(err, match=match):
        quantization.dequantize(data, plane, **args)


@pytest.mark.parametrize("amax,err,match", [
    (lambda: torch.ones(3, device="cuda"), ValueError, r"one value .* got shape \[3\]"),
    (lambda: torch.ones(1, dtype=torch.int64, device="cuda"), TypeError, "must be float32 .* got torch.int64"),
    (lambda: torch.ones(1, dtype=torch.bfloat16, device="cuda"), TypeError, "got torch.bfloat16"),
])
def test_raw_dequantize_takes_one_float32_amax(amax, err, match):
    """amax is the plane's one float32 value: a longer tensor (only its first value was read) or another dtype
    (converted silently) is refused; CUDA tensors are FakeTensors here (metadata only)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        data = torch.zeros(8, dtype=torch.uint8, device="cuda")
        scales = torch.zeros(1, dtype=torch.uint8, device="cuda")
        with pytest.raises(err, match=match):
            quantization.dequantize(data, scales=scales, amax=amax(), shape=(1, 16), swizzled=False)


def test_sm100_contraction_limit_is_the_oracles():
    """Mode sm100 refuses exactly the contraction lengths oracle.gemm(model="sm100") refuses (SPEC 12.7: 2^13 k64
    steps or more), whatever the multiple of 16 below 2^19."""
    from device.gemm import _sm100_contraction_too_long

    for k in (524160, 524208, 524224, 524240, 524272, 524288):
        x = np.zeros((1, k), np.float32)
        x[0, :16] = 1.0
        plane = oracle.quantize(x).row
        try:
            oracle.gemm(plane, plane, model="sm100")
            oracle_refuses = False
        except ValueError:
            oracle_refuses = True
        assert _sm100_contraction_too_long(k) == oracle_refuses, k
    assert not _sm100_contraction_too_long(524224) and _sm100_contraction_too_long(524240)


def _gemm_op_args(t=64, n=32, k=128, e=2):
    """The 8 operand tensors of a grouped fprop ([T, K] tokens, E experts of [N, K] weights) on the host, sized as
    the worst-case buffers, and the op's sizes (device.gemm.gemm_sizes); the values do not matter here."""
    from device.gemm import gemm_sizes

    def plane(rows):
        return (torch.zeros(rows * k // 2, dtype=torch.uint8), torch.zeros(4096, dtype=torch.uint8),
                torch.ones(e, dtype=torch.float32), torch.zeros((6, e + 1), dtype=torch.int64))

    return (*plane(t), *plane(e * n)), gemm_sizes("fprop", e, t, n, k, int(Rule.te))


@pytest.mark.parametrize("case", ["misaligned", "short", "overlap", "shape"])
def test_gemm_ops_check_out_at_the_launch(case):
    """torch.ops.nvfp4_device.grouped_gemm_out, which torch.compile's graph calls with real tensors after tracing
    grouped_gemm on fake ones (no addresses then): the launch itself refuses an out the kernels would misuse, before
    any kernel or extension call (it used to check only dtype and contiguity, in the binding)."""
    from device import _ops
    from device._codes import GemmKind

    ops, sizes = _gemm_op_args()
    big = torch.zeros(64 * 32 + 8, dtype=torch.bfloat16)
    out, match = {
        "misaligned": (big[1:1 + 64 * 32].view(64, 32), "16-byte aligned"),
        "short": (torch.zeros((1, 32), dtype=torch.bfloat16), "shape"),
        "shape": (torch.zeros((32, 64), dtype=torch.bfloat16), "shape"),
        "overlap": (ops[0][: 64 * 32 * 2].view(torch.bfloat16).view(64, 32), "shares memory with a's data"),
    }[case]
    with pytest.raises(ValueError, match=match):
        torch.ops.nvfp4_device.grouped_gemm_out(*ops, out, None, False, int(GemmKind.fprop), "fast", sizes, "", "", "",
                                                0)
    with pytest.raises(ValueError, match=match):
        _ops.launch_grouped_gemm(int(GemmKind.fprop), "fast", *ops, out, None, False, sizes, "", "", "", 0)


@pytest.mark.parametrize("case", ["8-byte aligned", "inside an amax's last value"])
def test_gemm_out_checks_at_their_edges(case):
    """check_gemm_out at the edges of its two address rules: an out 8 bytes past a 16-byte boundary is refused (the
    epilogues store 16-byte words), and so is an out whose first byte lies inside the second fp32 value of a's amax
    (bytes 4-7 of it: an overlap counts each operand's bytes, not its elements)."""
    from device import _ops
    from device._codes import GemmKind

    ops, sizes = _gemm_op_args()
    if case == "8-byte aligned":
        big = torch.zeros(64 * 32 + 8, dtype=torch.bfloat16)
        assert big.data_ptr() % 16 == 0
        out, match = big[4:4 + 64 * 32].view(64, 32), "16-byte aligned"
    else:
        pool = torch.zeros(8 + 64 * 16, dtype=torch.float32)
        assert pool.data_ptr() % 16 == 0
        ops = list(ops)
        ops[2] = pool[3:5]  # a's amax: bytes 12-19 of the pool
        out, match = pool[4:4 + 64 * 16].view(torch.bfloat16).view(64, 32), "shares memory with a's amax"  # byte 16
    with pytest.raises(ValueError, match=match):
        _ops.check_gemm_out(int(GemmKind.fprop), out, sizes, 2, dict(zip(("a's data", "a's scales", "a's amax"),
                                                                         ops[:3], strict=True)))


def test_out_variant_buffers_need_their_dtype():
    """The out-variant launchers write raw pointers: a buffer of another dtype (fp16 where the call writes fp32) is
    refused, not written past its end."""
    from device import _ops

    with pytest.raises(ValueError, match="buffer 'amax' must be a contiguous torch.float32 tensor"):
        _ops._check_buffers({"amax": torch.zeros(2, dtype=torch.float16)}, {"amax": ((2,), torch.float32)}, CPU)


def test_buffer_sizes_and_alpha_follow_the_spec():
    """quantize_buffers against SPEC 8.2 (a swizzled plane is whole 128 x 4 tiles: 512 bytes for one row of one
    block) and SPEC 6.2 (X^T of one row is padded to 16 rows: [16, 8] data bytes for 16 columns); alpha_factor against
    SPEC 12.1 for mixed G (a 4over6 operand of G = 256 against one of 448)."""
    from device import _ops

    assert _ops.quantize_buffers(1, 16, rowwise=True, columnwise=False, swizzled=True, device=CPU)[
        "row_scales"].numel() == 512
    assert tuple(_ops.quantize_buffers(1, 16, rowwise=False, columnwise=True, swizzled=False, device=CPU)[
        "col_data"].shape) == (16, 8)
    assert _ops.alpha_factor(448, 256) == float(np.float32(1) / np.float32(36 * 448 * 256))
    assert _ops.alpha_factor(256, 448) == _ops.alpha_factor(448, 256) != _ops.alpha_factor(448, 448)


_GROUPED_SHAPE = r"^a grouped amax has shape \[E\] or \[E, 2\] \(\(row, col\) pairs\), got "


@pytest.mark.parametrize("amax, groups, match", [
    (np.ones((1, 4), np.float32), 4, _GROUPED_SHAPE + r"\[1, 4\]$"),
    (torch.ones(2, 2), 4, r"^amax must have 4 value\(s\) per plane, got 2$"),
    (torch.ones(4, 3), 4, _GROUPED_SHAPE + r"\[4, 3\]$"),
    (np.ones((2, 2, 1)), 2, _GROUPED_SHAPE + r"\[2, 2, 1\]$")])
def test_grouped_amax_shapes_the_oracle_refuses(amax, groups, match):
    """A grouped amax is [E] or [E, 2] (row, col) pairs (or a tuple of two): other shapes used to be flattened into
    E values (a [1, 4] for 4 groups, a [2, 2] for 4 groups)."""
    host = amax if isinstance(amax, np.ndarray) else amax.numpy()
    with pytest.raises(ValueError, match="amax must have"):
        oracle.group_quantize(np.ones((groups, 16), np.float32), [1] * groups, amax=host)
    with pytest.raises(ValueError, match=match):
        quantization._amax_tensors(amax, groups, True, CPU)


@pytest.mark.parametrize("pairs", [torch.tensor([[1.0, 3.0], [2.0, 4.0]]), [[1.0, 3.0], [2.0, 4.0]],
                                   np.array([[1.0, 3.0], [2.0, 4.0]], np.float64)])
def test_grouped_amax_pairs_array(pairs, monkeypatch):
    """[E, 2] (row, col) pairs, the oracle's form (it used to be refused as 4 values per plane)."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # (host values: a CPU-only torch)
    got = quantization._amax_tensors(pairs, 2, True, CPU)
    assert [t.tolist() for t in got] == [[1.0, 2.0], [3.0, 4.0]]
    assert all(t.dtype == torch.float32 and t.is_contiguous() for t in got)


@pytest.mark.parametrize("flag", ["rowwise", "columnwise", "rht", "swizzled"])
@pytest.mark.parametrize("value", ["False", 1, None])
def test_quantize_flags_are_bools(flag, value, monkeypatch):
    """A string "False" used to be read as True (group_quantize(swizzled="False") wrote swizzled scales); the checks
    come before any CUDA call, so host tensors show them."""
    from device import group_quantize, quantize

    x = torch.zeros((16, 32), dtype=torch.bfloat16)
    monkeypatch.setattr(quantization, "_check_x", lambda t: t)  # (a host x: the flags are checked before any launch)
    kw = {"columnwise": True, flag: value}
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        quantization._check_flags(**{flag: value})
    for call in (lambda: quantize(x, **kw), lambda: group_quantize(x, torch.tensor([16]), **kw)):
        with pytest.raises(TypeError, match=f"{flag} must be True or False"):
            call()


# ------------------------------------------------------------------------------------------------------------------
# refusals on FakeTensors ("cuda" tensors with metadata only: the checks that read no address run on a CPU-only torch)
# ------------------------------------------------------------------------------------------------------------------

def _fake_cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="cuda")


@pytest.fixture
def fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def _fake_operands(e=2, t=64, n=32, k=64):
    """Grouped operands of device.group_quantize on FakeTensors: X [T, K] and dY [T, N] (both planes), W [E N, K]
    (both planes, 16x16 blocks), E experts."""
    import device

    sp = _fake_cuda(e, dtype=torch.int64)
    both = dict(rowwise=True, columnwise=True)
    return (device.group_quantize(_fake_cuda(t, k), sp, **both),
            device.group_quantize(_fake_cuda(e * n, k), sp, block=(16, 16), **both),
            device.group_quantize(_fake_cuda(t, n), sp, **both))


def _refusal(what: str | None):
    """(call, error type, message) of each refusal of device.quantize / group_quantize / grouped_gemm that reads
    metadata only, on FakeTensors so that a CPU run holds them (``what=None``: the whole table). Each is one the oracle
    makes too (SPEC 6.2, 7.3, 9.1, 10.2, 12.5) or one that keeps a kernel from writing out of bounds or reading the
    wrong rows; the first part repeats the GPU tests test_device_quantize.py::test_argument_errors and
    test_device_gemm.py::test_bad_inputs."""
    import device

    bf, i64, f32 = torch.bfloat16, torch.int64, torch.float32
    good, sp1 = _fake_cuda(32, 32), _fake_cuda(1, dtype=i64)
    xq, wq, dyq = _fake_operands()
    sp = _fake_cuda(2, dtype=i64)
    x_row_only = device.group_quantize(_fake_cuda(64, 64), sp)
    table = {
        "a host tensor": (lambda: device.quantize(torch.zeros((32, 32), dtype=bf)), ValueError, "CUDA"),
        "int32 input": (lambda: device.quantize(_fake_cuda(32, 32, dtype=torch.int32)), TypeError,
                        "bfloat16, float16 or float32"),
        "a strided input": (lambda: device.quantize(torch.empty_strided((32, 32), (64, 2), dtype=bf, device="cuda")),
                            ValueError, "contiguous"),
        "K = 24": (lambda: device.quantize(_fake_cuda(32, 24)), ValueError, "multiple of 16"),
        "K = 0": (lambda: device.quantize(_fake_cuda(32, 0)), ValueError, "positive multiple of 16"),
        "fp16 with the RHT": (lambda: device.quantize(_fake_cuda(32, 32, dtype=torch.float16), columnwise=True,
                                                      rht=True), TypeError, "bfloat16"),
        "host splits": (lambda: device.group_quantize(good, torch.tensor([32])), ValueError, "same device"),
        "int32 splits": (lambda: device.group_quantize(good, _fake_cuda(1, dtype=torch.int32)), TypeError, "int64"),
        "a seed tensor": (lambda: device.quantize(good, rounding="sr", seed=_fake_cuda(dtype=i64)), TypeError, "seed"),
        "an offset tensor": (lambda: device.quantize(good, rounding="sr", offset=_fake_cuda(dtype=i64)), TypeError,
                             "offset"),
        "a sign-mask tensor": (lambda: device.quantize(good, columnwise=True, rht=True,
                                                       rht_signs=_fake_cuda(dtype=i64)), TypeError, "rht_signs"),
        "a host amax tensor": (lambda: device.quantize(good, amax=torch.tensor(1.0)), ValueError, "x's device"),
        "a host grouped amax": (lambda: device.group_quantize(good, sp1, amax=torch.ones(1)), ValueError,
                                "x's device"),
        "a negative amax": (lambda: device.quantize(good, columnwise=True, amax=-1.0), ValueError, ">= 0"),
        "a negative amax pair": (lambda: device.quantize(good, columnwise=True, amax=(0.5, -2.0)), ValueError,
                                 ">= 0"),
        "a negative grouped amax": (lambda: device.group_quantize(good, sp1, amax=[-3.0]), ValueError, ">= 0"),
        # (as the oracle's is_real: a string is not parsed, a bool or a complex value is not a number)
        "a string amax": (lambda: device.quantize(good, amax=np.array(["1.5", "2.5"])), ValueError, "real numbers"),
        "a str amax": (lambda: device.quantize(good, amax="1.0"), ValueError, "real numbers"),
        "a bool amax": (lambda: device.quantize(good, amax=True), ValueError, "real numbers"),
        "a complex number amax": (lambda: device.quantize(good, amax=1 + 2j), ValueError, "real numbers"),
        "an object amax": (lambda: device.quantize(good, amax=object()), ValueError, "real numbers"),
        "a string amax array": (lambda: device.quantize(good, amax=(np.array("1.5"), 2.0)), ValueError,
                                "real numbers"),
        "a bool grouped amax": (lambda: device.group_quantize(good, sp1, amax=[True]), ValueError, "real numbers"),
        "a bool amax tensor": (lambda: device.quantize(good, amax=_fake_cuda(1, dtype=torch.bool)), ValueError,
                               "real numbers"),
        "a complex amax": (lambda: device.quantize(good, amax=np.array(3 + 1j)), ValueError, "real numbers"),
        "a list of amax tensors": (lambda: device.group_quantize(_fake_cuda(64, 64), sp, amax=[
            _fake_cuda(dtype=f32), _fake_cuda(dtype=f32)]), TypeError, "list of tensors"),
        "a grouped result as TE fields": (lambda: oracle.to_te_fields(xq), TypeError, "grouped result"),
        "swizzle of a NumPy array": (lambda: device.swizzle_scales(np.zeros((4, 4), np.uint8)), TypeError,
                                     "torch.Tensor"),
        # (as oracle.swizzle.swizzle_scales: TypeError for the dtype, ValueError for the rank)
        "swizzle of int32 scales": (lambda: device.swizzle_scales(_fake_cuda(4, 4, dtype=torch.int32)), TypeError,
                                    "must be uint8"),
        "swizzle of 1-D scales": (lambda: device.swizzle_scales(_fake_cuda(16, dtype=torch.uint8)), ValueError,
                                  "must be 2-D"),
        # grouped_gemm
        "mismatched K": (lambda: device.grouped_gemm(xq, device.group_quantize(_fake_cuda(64, 128), sp)), ValueError,
                         "mismatched K"),
        "an unknown kind": (lambda: device.grouped_gemm(xq, wq, kind="forward"), ValueError, "kind must be one of"),
        "a kind in a list": (lambda: device.grouped_gemm(xq, wq, kind=["fprop"]), ValueError, "kind must be one of"),
        "a rule in an array": (lambda: device.quantize(good, rule=np.array(["te"])), ValueError, "rule must be"),
        "an unknown mode": (lambda: device.grouped_gemm(xq, wq, mode="turbo"), ValueError, "mode must be"),
        "out of another shape": (lambda: device.grouped_gemm(xq, wq, out=_fake_cuda(64, 48)), ValueError,
                                 r"out must have shape \(64, 32\), got \(64, 48\)"),
        "an fp16 out": (lambda: device.grouped_gemm(xq, wq, out=_fake_cuda(64, 32, dtype=torch.float16)), TypeError,
                        "out must have dtype bfloat16 or float32"),
        "accumulate without out": (lambda: device.grouped_gemm(dyq, xq, kind="wgrad", accumulate=True), ValueError,
                                   "accumulate=True needs out="),
        "a wgrad bias": (lambda: device.grouped_gemm(dyq, xq, kind="wgrad", bias=_fake_cuda(2, 64, dtype=f32)),
                         ValueError, "bias is not supported for wgrad"),
        "an fprop bias of N + 1": (lambda: device.grouped_gemm(xq, wq, bias=_fake_cuda(2, 33, dtype=f32)), ValueError,
                                   r"bias must have shape \(2, 32\)"),
        "wgrad without the columnwise plane": (lambda: device.grouped_gemm(dyq, x_row_only, kind="wgrad"), ValueError,
                                               "columnwise"),
        "other group counts": (lambda: device.grouped_gemm(xq, device.group_quantize(
            _fake_cuda(96, 64), _fake_cuda(3, dtype=i64))), ValueError, "group counts"),
        "a plain tensor operand": (lambda: device.grouped_gemm(xq.row_data, wq), TypeError,
                                   "DeviceGroupedNVFP4Tensor"),
        # split_sizes (the plan's host hint): E ints >= 0 adding up to a's T = 64 tokens
        "split sizes in a tensor": (lambda: device.grouped_gemm(xq, wq, split_sizes=_fake_cuda(2, dtype=i64)),
                                    TypeError, "split_sizes must be a list of ints"),
        "split sizes of floats": (lambda: device.grouped_gemm(xq, wq, split_sizes=[32.0, 32.0]), TypeError,
                                  "must hold ints, got 32.0 at index 0"),
        "a bool split size": (lambda: device.grouped_gemm(xq, wq, split_sizes=[True, 63]), TypeError,
                              "must hold ints, got True at index 0"),
        "split sizes of another count": (lambda: device.grouped_gemm(xq, wq, split_sizes=[64]), ValueError,
                                         "has 1 sizes, the operands have E=2"),
        "a negative split size": (lambda: device.grouped_gemm(xq, wq, split_sizes=[65, -1]), ValueError,
                                  ">= 0, got -1 at index 1"),
        "split sizes that do not add up": (lambda: device.grouped_gemm(xq, wq, split_sizes=[32, 31]), ValueError,
                                           "add up to 63, a has T=64"),
        "dgrad of mismatched sizes": (lambda: device.grouped_gemm(xq, wq, kind="dgrad"), ValueError,
                                      "mismatched contraction"),
        "accumulate into bf16": (lambda: device.grouped_gemm(dyq, xq, kind="wgrad", accumulate=True,
                                                             out=_fake_cuda(2, 32, 64)), ValueError, "float32"),
        "an out_dtype name the GEMM does not write": (lambda: device.grouped_gemm(xq, wq, out_dtype="float16"),
                                                     ValueError, "out_dtype must be torch.bfloat16 or torch.float32"),
        "an out_dtype the GEMM does not write": (lambda: device.grouped_gemm(xq, wq, out_dtype=torch.float16),
                                                ValueError, "out_dtype must be"),
        "an out_dtype that is no dtype": (lambda: device.grouped_gemm(xq, wq, out_dtype=1), ValueError,
                                          "out_dtype must be"),
        "accumulate in fprop": (lambda: device.grouped_gemm(xq, wq, accumulate=True, out=_fake_cuda(64, 32, dtype=f32)),
                                ValueError, "is for wgrad"),
        "accumulate as a tensor": (lambda: device.grouped_gemm(dyq, xq, kind="wgrad",
                                                               accumulate=_fake_cuda(2, 32, 64, dtype=f32)),
                                   TypeError, "accumulate"),
        "rht without the columnwise plane": (lambda: device.quantize(good, rht=True), ValueError,
                                             "applies to the columnwise plane"),
        "sign mask past 16 bits": (lambda: device.quantize(good, columnwise=True, rht=True, rht_signs=1 << 16),
                                   ValueError, "16-bit mask"),
        "SR offset past the 32-bit counter": (lambda: device.quantize(good, rounding="sr", offset=2**32), ValueError,
                                              r"offset must be in \[0, 2\*\*32\)"),
        "no groups": (lambda: device.group_quantize(good, _fake_cuda(0, dtype=i64)), ValueError, "non-empty"),
        "one amax too many": (lambda: device.group_quantize(good, sp, amax=_fake_cuda(3, dtype=f32)), ValueError,
                              r"2 value\(s\) per plane, got 3"),
        # grouped_gemm (SPEC 12.5): W holds E N rows; wgrad's operands share the tokens; dgrad's bias is [E, K]
        "weights not E x N rows": (lambda: device.grouped_gemm(xq, device.group_quantize(_fake_cuda(65, 64), sp)),
                                   ValueError, "65 rows, not a multiple of E=2"),
        "wgrad over different tokens": (
            lambda: device.grouped_gemm(dyq, device.group_quantize(_fake_cuda(80, 64), sp, columnwise=True),
                                        kind="wgrad"), ValueError, "64 tokens and b .X. has 80"),
        "dgrad bias of N columns": (lambda: device.grouped_gemm(dyq, wq, kind="dgrad", bias=_fake_cuda(2, 32, dtype=f32)),
                                    ValueError, r"bias must have shape \(2, 64\), got \(2, 32\)"),
        "out of another dtype than out_dtype": (
            lambda: device.grouped_gemm(xq, wq, out=_fake_cuda(64, 32), out_dtype=torch.float32), ValueError,
            "out has dtype torch.bfloat16 but out_dtype is torch.float32"),
        "an out that requires grad": (
            lambda: device.grouped_gemm(dyq, xq, kind="wgrad", accumulate=True,
                                        out=_fake_cuda(2, 32, 64, dtype=f32).requires_grad_()),
            RuntimeError, "out= does not support automatic differentiation"),
        "an offsets table of another shape": (
            lambda: device.grouped_gemm(dataclasses.replace(xq, offsets=_fake_cuda(6, 2, dtype=i64)), wq),
            ValueError, r"int64 \[6, 3\] table"),
        "a contraction of 2**28": (
            lambda: device.grouped_gemm(device.group_quantize(_fake_cuda(64, 2**28), sp),
                                        device.group_quantize(_fake_cuda(64, 2**28), sp)),
            ValueError, "contraction length 268435456 too long"),
        "a dimension past 2**31 - 256": (
            lambda: device.grouped_gemm(device.group_quantize(_fake_cuda(2**31 - 128, 16), sp),
                                        device.group_quantize(_fake_cuda(64, 16), sp)),
            ValueError, "sizes too large"),
    }
    return table if what is None else table[what]


_REFUSALS = [
    "a host tensor",
    "int32 input",
    "a strided input",
    "K = 24",
    "K = 0",
    "fp16 with the RHT",
    "host splits",
    "int32 splits",
    "a seed tensor",
    "an offset tensor",
    "a sign-mask tensor",
    "a host amax tensor",
    "a host grouped amax",
    "a negative amax",
    "a negative amax pair",
    "a negative grouped amax",
    "a string amax",
    "a str amax",
    "a bool amax",
    "a complex number amax",
    "an object amax",
    "a string amax array",
    "a bool grouped amax",
    "a bool amax tensor",
    "a complex amax",
    "a list of amax tensors",
    "a grouped result as TE fields",
    "swizzle of a NumPy array",
    "swizzle of int32 scales",
    "swizzle of 1-D scales",
    "mismatched K",
    "an unknown kind",
    "a kind in a list",
    "a rule in an array",
    "an unknown mode",
    "out of another shape",
    "an fp16 out",
    "accumulate without out",
    "a wgrad bias",
    "an fprop bias of N + 1",
    "wgrad without the columnwise plane",
    "other group counts",
    "a plain tensor operand",
    "dgrad of mismatched sizes",
    "accumulate into bf16",
    "an out_dtype name the GEMM does not write",
    "an out_dtype the GEMM does not write",
    "an out_dtype that is no dtype",
    "accumulate in fprop",
    "accumulate as a tensor",
    "rht without the columnwise plane",
    "sign mask past 16 bits",
    "SR offset past the 32-bit counter",
    "no groups",
    "one amax too many",
    "weights not E x N rows",
    "wgrad over different tokens",
    "dgrad bias of N columns",
    "out of another dtype than out_dtype",
    "an out that requires grad",
    "an offsets table of another shape",
    "a contraction of 2**28",
    "a dimension past 2**31 - 256",
    "split sizes in a tensor",
    "split sizes of floats",
    "a bool split size",
    "split sizes of another count",
    "a negative split size",
    "split sizes that do not add up",
]


def test_every_refusal_is_a_test_case(fake):
    """The parametrized names are the table's keys (a refusal added to the table without its name would go
    untested)."""
    assert sorted(_refusal(None)) == sorted(_REFUSALS)


@pytest.mark.parametrize("what", _REFUSALS)
def test_refusals_on_device_tensors(fake, what):
    call, err, match = _refusal(what)
    with pytest.raises(err, match=match):
        call()


def test_out_that_requires_grad_is_taken_under_no_grad(fake):
    """torch's out= rule: autograd does not record the GEMM's write, so an out that requires grad is refused while
    grad mode is on (the refusal table), and taken under torch.no_grad(), where torch allows in-place writes to such
    tensors too (an optimizer's update)."""
    import device

    xq, wq, dyq = _fake_operands()
    out = _fake_cuda(2, 32, 64, dtype=torch.float32).requires_grad_()
    with torch.no_grad():
        assert device.grouped_gemm(dyq, xq, kind="wgrad", accumulate=True, out=out) is out


def test_accumulate_none_is_false(fake):
    """accumulate=None, oracle.grouped_gemm's default, is taken as False (the call writes out, adds nothing)."""
    import device

    xq, wq, dyq = _fake_operands()
    out = _fake_cuda(2, 32, 64, dtype=torch.float32)
    assert device.grouped_gemm(dyq, xq, kind="wgrad", accumulate=None, out=out) is out
    with pytest.raises(ValueError, match="is for wgrad"):  # (accumulate=True would be refused here)
        device.grouped_gemm(xq, wq, accumulate=True, out=_fake_cuda(64, 32, dtype=torch.float32))
    assert device.grouped_gemm(xq, wq, accumulate=None).shape == (64, 32)


def test_the_quantize_ops_take_both_amaxes_or_neither():
    """torch.ops.nvfp4_device's quantize ops take the row and col amax as two optional tensors: one without the other
    is refused (the launchers' amax_in is both or none)."""
    from device import _ops

    assert _ops._supplied_pair(None, None) is None
    for pair in ((torch.ones(1), None), (None, torch.ones(1))):
        with pytest.raises(ValueError, match="supply both amaxes"):
            _ops._supplied_pair(*pair)


def test_raw_dequantize_reads_exact_buffers(fake):
    """The dequantize kernel reads compact scales at r * C + c: a padded compact buffer (a grouped result's with
    swizzled=False, SPEC 9.2: [roundup(m, 128), roundup(C, 4)]) or compact scales of another shape would be read at
    the wrong bytes, so only the plane's exact byte counts pass (checked on FakeTensors: sizes only)."""
    from device import _ops

    rows, cols = 20, 48
    data, amax = _fake_cuda(rows * cols // 2, dtype=torch.uint8), _fake_cuda(1, dtype=torch.float32)
    with pytest.raises(ValueError, match="padded compact scales"):
        _ops.check_dequantize_args(data, _fake_cuda(128 * 4, dtype=torch.uint8), amax, rows, cols, False)
    with pytest.raises(ValueError, match=r"are \[20, 3\], got \[3, 20\]"):
        _ops.check_dequantize_args(data, _fake_cuda(3, 20, dtype=torch.uint8), amax, rows, cols, False)
    with pytest.raises(ValueError, match="data holds 488 bytes"):
        _ops.check_dequantize_args(_fake_cuda(488, dtype=torch.uint8), _fake_cuda(20, 3, dtype=torch.uint8), amax,
                                   rows, cols, False)
    with pytest.raises(ValueError, match="swizzled scales .* have 512"):
        _ops.check_dequantize_args(data, _fake_cuda(1024, dtype=torch.uint8), amax, rows, cols, True)


def test_gemm_over_weight_copy_checks_the_plane_its_copy_reads(fake):
    """dgrad's call reads b's columnwise plane, the weights' copy its rowwise one: a rowwise plane that is too short
    is refused before the copy is made (the copy's kernel would read past it)."""
    xq, wq, dyq = _fake_operands()
    short = dataclasses.replace(wq, row_data=_fake_cuda(100, dtype=torch.uint8))
    with pytest.raises(ValueError, match="row data holds 100 elements"):
        testing.gemm_over_weight_copy(dyq, short, kind="dgrad", out=_fake_cuda(64, 64))


@pytest.mark.parametrize("amax, want", [(np.array([1.0, 2.0], np.float32), [[1.0], [2.0]]),
                                        ([np.float32(3.0), 4], [[3.0], [4.0]]), (np.float64(5.0), [[5.0], [5.0]]),
                                        (ml_dtypes.bfloat16(2.0), [[2.0], [2.0]])])
def test_single_amax_forms_the_oracle_takes(amax, want):
    """oracle.quantize's forms (quantize.py _split_amax): a number for both planes, or a (row, col) pair as a tuple,
    list or 1-D array of two numbers."""
    oracle.quantize(np.ones((2, 16), np.float32), columnwise=True, amax=amax)
    assert [t.tolist() for t in quantization._amax_tensors(amax, 1, False, CPU)] == want


_PAIR_ITEM = r"^each of the \(row_amax, col_amax\) pair is one number \(or a one-element tensor on x's device\), got "


@pytest.mark.parametrize("amax, match", [
    (np.array([1.0]), r"^amax pair must be \(row_amax, col_amax\)$"),
    ([[1.0], [2.0]], _PAIR_ITEM + r"\[\[1\.0\], \[2\.0\]\]$"),
    (np.ones((1, 2)), r"^amax must be a number, a one-element tensor or a \(row_amax, col_amax\) pair, got array"),
    ((np.ones(1), 2.0), _PAIR_ITEM + r"\(array\(\[1\.\]\), 2\.0\)$")])
def test_single_amax_forms_the_oracle_refuses(amax, match):
    with pytest.raises(ValueError, match="amax must be"):
        oracle.quantize(np.ones((2, 16), np.float32), columnwise=True, amax=amax)
    with pytest.raises(ValueError, match=match):
        quantization._amax_tensors(amax, 1, False, CPU)


def test_raw_dequantize_takes_the_torch_views_bytes(fake, monkeypatch):
    """torch_views() gives the codes as float4_e2m1fn_x2 and the scales as float8_e4m3fn: the same bytes, which raw
    dequantize reads as uint8 (it refused them as 'must be uint8')."""
    from device import _ops

    seen = {}

    def record(data, scales, amax, rows, cols, swizzled, rule=0, global_scale_max=448):
        seen.update(data=data.dtype, scales=scales.dtype)
        return data.new_empty((rows, cols), dtype=torch.float32)

    monkeypatch.setattr(_ops, "dequantize_op", record)
    data = _fake_cuda(20 * 24, dtype=torch.float4_e2m1fn_x2)
    scales = _fake_cuda(20, 3, dtype=torch.float8_e4m3fn)
    y = quantization.dequantize(data, scales=scales, amax=_fake_cuda(1, dtype=torch.float32), shape=(20, 48),
                                swizzled=False)
    assert tuple(y.shape) == (20, 48) and seen == {"data": torch.uint8, "scales": torch.uint8}


# ------------------------------------------------------------------------------------------------------------------
# the GPU's architecture: the kernels are sm_90a only
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("capability, name", [((10, 0), "NVIDIA B200"), ((8, 0), "NVIDIA A100-SXM4-80GB"),
                                              ((9, 1), "a future sm_91 part")])
def test_a_gpu_other_than_sm_90_is_refused_by_name(capability, name, monkeypatch):
    """A CUDA tensor on another architecture is refused before any launch (which would fail with CUDA's "no kernel
    image is available"); the message names the device, its architecture and what the kernels run on."""
    from types import SimpleNamespace

    from device import _ops

    monkeypatch.setattr(_ops, "_hopper_devices", set())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: name)
    on_gpu_3 = SimpleNamespace(device=torch.device("cuda", 3))  # (a CPU-only torch makes no CUDA tensor)
    sm = f"sm_{capability[0]}{capability[1]}"
    with pytest.raises(RuntimeError, match=f"^x is on cuda:3, an {sm} GPU \\({name}\\); .* Hopper GPUs"):
        _ops.require_hopper(on_gpu_3, "x")
    assert not _ops._hopper_devices


def test_an_sm_90_gpu_is_taken_and_remembered(monkeypatch):
    from types import SimpleNamespace

    from device import _ops

    asked = []
    monkeypatch.setattr(_ops, "_hopper_devices", set())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (9, 0))
    for _ in range(3):
        _ops.require_hopper(SimpleNamespace(device=torch.device("cuda", 1)), "x")
    assert asked == [1] and _ops._hopper_devices == {1}


@pytest.fixture
def refusing_gpu_check(monkeypatch):
    """A function that replaces device._ops.require_hopper by a check that refuses every tensor with "not sm_90: <its
    name>" (the real one skips fake tensors and needs a GPU for real ones), then asserts that each call of a dict
    raises the refusal of the tensor its key names."""
    from device import _ops

    def refuse(t, name):
        raise RuntimeError(f"not sm_90: {name}")

    def each_refused(calls: dict) -> None:
        monkeypatch.setattr(_ops, "require_hopper", refuse)
        for name, call in calls.items():  # (a trailing space keeps two calls that name the same tensor apart)
            with pytest.raises(RuntimeError, match=f"^not sm_90: {name.strip()}$"):
                call()

    return each_refused


def test_every_entry_point_checks_the_gpu(fake, refusing_gpu_check):
    """quantize, group_quantize, swizzle_scales, dequantize, grouped_gemm and the GroupedLinear forward each ask
    require_hopper about their CUDA operands before anything else reads them (on FakeTensors the check itself is
    skipped: no GPU need be present while torch.compile traces, so it is replaced here by one that refuses)."""
    import device

    class Layer(device.GroupedLinear):  # (uniform_ needs a real CUDA generator)
        def reset_parameters(self) -> None:
            with torch.no_grad():
                self.weight.fill_(0.01)

    xq, wq, _ = _fake_operands()  # (made before the check refuses)
    layer = Layer(2, 32, 16)
    u8 = torch.uint8
    calls = {
        "x": lambda: device.quantize(_fake_cuda(32, 32)),
        "x ": lambda: device.group_quantize(_fake_cuda(32, 32), _fake_cuda(2, dtype=torch.int64)),
        "compact scales": lambda: device.swizzle_scales(_fake_cuda(32, 2, dtype=u8)),
        "data": lambda: device.dequantize(_fake_cuda(256, dtype=u8), scales=_fake_cuda(32, 1, dtype=u8),
                                          amax=_fake_cuda(1, dtype=torch.float32), shape=(32, 16), swizzled=False),
        "a": lambda: device.grouped_gemm(xq, wq),
        "the layer's weight": lambda: layer(_fake_cuda(8, 32), _fake_cuda(2, dtype=torch.int64)),
    }
    refusing_gpu_check(calls)


def test_every_launcher_checks_the_gpu_first(refusing_gpu_check, monkeypatch):
    """The launchers and op bodies of device/_ops.py (what torch.ops.nvfp4_device runs, also inside a compiled graph,
    where the public functions' checks were skipped while tracing) ask require_hopper before they load an extension
    (launch_grouped_gemm after its host checks of out): with a check that refuses, each raises its refusal, not an
    error of its other arguments or of loading an extension."""
    from device import _ops

    def no_build(*args, **kwargs):
        raise AssertionError("an extension was loaded before the architecture check")

    monkeypatch.setattr(_ops, "load_extension", no_build)
    monkeypatch.setattr(_ops, "load_gemm_extension", no_build)
    u8, i64 = torch.uint8, torch.int64
    x, offsets = torch.zeros((32, 32), dtype=torch.bfloat16), torch.zeros((6, 3), dtype=i64)
    gemm_ops, gemm_sizes = _gemm_op_args()
    plan = dict(rowwise=True, columnwise=False, rht=False, rht_signs=0, block2d=False, rule=0, sr=False, seed_lo=0,
                seed_hi=0, offset=0, swizzled=True, amax_kernel=0, quantize_kernel=0)
    calls = {
        "x": lambda: _ops.launch_quantize(x, {}, None, **plan),
        "x ": lambda: _ops.launch_group_quantize(x, torch.tensor([16, 16]), {}, None, **plan),
        "compact scales": lambda: torch.ops.nvfp4_device.swizzle_scales(torch.zeros((32, 2), dtype=u8)),
        "the weights' row data": lambda: _ops.weight_f16_copy(torch.zeros(256, dtype=u8), torch.zeros(512, dtype=u8),
                                                              offsets, 2, 16, 16),
        "a": lambda: _ops.launch_grouped_gemm(0, "fast", *gemm_ops, torch.zeros((64, 32), dtype=torch.bfloat16), None,
                                              False, gemm_sizes, "", "", "", 0),
        "dy": lambda: torch.ops.nvfp4_device.bias_grad(x, offsets),
        "scales": lambda: torch.ops.nvfp4_device.pack_col_scales(torch.zeros(512, dtype=u8), offsets, 32, 32),
        "packed": lambda: torch.ops.nvfp4_device.unpack_col_scales(torch.zeros(64, dtype=u8), offsets, 32, 32),
    }
    refusing_gpu_check(calls)
    # the dequantize op checks its arguments first (check_dequantize_args: a host tensor is refused as such), and the
    # CUDA ones through require_cuda_tensors, which asks require_hopper of each
    with pytest.raises(ValueError, match="^data must be a CUDA tensor"):
        torch.ops.nvfp4_device.dequantize(torch.zeros(8, dtype=u8), torch.zeros((1, 1), dtype=u8), torch.ones(1), 1,
                                          16, False)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), pytest.raises(RuntimeError, match="^not sm_90: data$"):
        _ops.check_dequantize_args(_fake_cuda(8, dtype=u8), _fake_cuda(1, 1, dtype=u8),
                                   _fake_cuda(1, dtype=torch.float32), 1, 16, False)


def test_split_sizes_take_numpy_ints():
    """grouped_gemm's split_sizes (the plan's host hint) take Python and NumPy ints alike, summed as Python ints (no
    int64 wrap-around); [300, 0, 212, 512] fills 256-row tiles unevenly (1280 / 1152 rows), [256, 512] evenly."""
    from device.gemm import _uneven_rows

    assert _uneven_rows([np.int64(300), np.int32(0), 212, np.uint16(512)], 4, 1024) is True
    assert _uneven_rows((256, np.int64(512)), 2, 768) is False
    assert _uneven_rows(None, 2, 768) is None
    with pytest.raises(ValueError, match="add up to"):
        _uneven_rows([np.int64(2**62), np.int64(2**62), np.int64(2**62), np.int64(2**62)], 4, 0)
