"""CPU checks of device.GroupedLinear and the grouped GEMM's custom ops (no GPU needed).

Tensors on the "cuda" device are torch FakeTensors (``FakeTensorMode``: metadata only, no memory, no kernel), which a
CPU-only torch can create: argument checks that read only metadata, the fake implementations of the custom ops, and
torch.compile's tracer (dynamo) all run on them. The GPU tests (tests/test_device_grouped_linear.py) check the bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import device  # noqa: E402
from device import gemm as dgemm  # noqa: E402
from device import grouped_linear as gl  # noqa: E402
from oracle.recipe import NVFP4Recipe  # noqa: E402

BF16 = torch.bfloat16


class _Layer(gl.GroupedLinear):
    """GroupedLinear with a deterministic fill instead of uniform_ (random fills need a real CUDA generator)."""

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(0.01)


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def cuda(*shape, dtype=BF16):
    return torch.empty(shape, dtype=dtype, device="cuda")


# ------------------------------------------------------------------------------------------------------------------
# constructor
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,err,match", [
    (dict(num_gemms=0), ValueError, "num_gemms"),
    (dict(num_gemms=2.0), TypeError, "num_gemms"),  # a float is not rounded (as oracle's integer arguments)
    (dict(in_features=40), ValueError, "in_features=40 must be a multiple of 16"),
    (dict(out_features=8), ValueError, "out_features"),
    (dict(params_dtype=torch.float16), TypeError, "params_dtype"),
    (dict(device="cpu"), ValueError, "CUDA device"),
    (dict(mode="blackwell"), ValueError, "mode"),
    (dict(recipe="te"), TypeError, "NVFP4Recipe"),
    (dict(bias=1), TypeError, "bias"),
    (dict(fuse_wgrad_accumulation=None), TypeError, "fuse_wgrad_accumulation"),
    (dict(num_gemms=65536), ValueError, "65535"),
    # contraction lengths the GEMMs' 32-bit K-tile offsets cannot step (device.grouped_gemm refuses them too)
    (dict(in_features=2**28), ValueError, r"in_features=268435456: a GEMM contraction length .* below 2\*\*28"),
    (dict(out_features=2**28 + 64), ValueError, "out_features=268435520"),
])
def test_constructor_refuses_bad_arguments(kwargs, err, match):
    args = dict(num_gemms=2, in_features=32, out_features=16)
    args.update(kwargs)
    e, k, n = args.pop("num_gemms"), args.pop("in_features"), args.pop("out_features")
    with pytest.raises(err, match=match):  # raised before any parameter is allocated (no CUDA needed)
        device.GroupedLinear(e, k, n, **args)


def test_layout_and_main_grad(fake):
    layer = _Layer(3, 32, 48, fuse_wgrad_accumulation=True)
    assert tuple(layer.weight.shape) == (3, 48, 32) and layer.weight.dtype == BF16
    assert tuple(layer.bias.shape) == (3, 48)
    mg = layer.weight.main_grad
    assert mg.dtype == torch.float32 and tuple(mg.shape) == (3, 48, 32) and mg.device.type == "cuda"
    assert _Layer(2, 16, 16, bias=False).bias is None
    assert "GroupedLinear" in device.__all__ and device.GroupedLinear is gl.GroupedLinear


# ------------------------------------------------------------------------------------------------------------------
# forward arguments: errors before any launch
# ------------------------------------------------------------------------------------------------------------------

def _bad_forward_cases():
    e, k, t = 3, 32, 40
    return [
        (lambda: (cuda(t, k).float(), cuda(e, dtype=torch.int64)), TypeError, "bfloat16"),
        (lambda: (torch.empty(t, k, dtype=BF16), cuda(e, dtype=torch.int64)), ValueError, "device"),
        (lambda: (cuda(2, t, k), cuda(e, dtype=torch.int64)), ValueError, "2-D"),
        (lambda: (cuda(t, 48), cuda(e, dtype=torch.int64)), ValueError, "in_features=32"),
        (lambda: ("x", cuda(e, dtype=torch.int64)), TypeError, "torch.Tensor"),
        (lambda: (cuda(t, k), cuda(e, dtype=torch.int32)), TypeError, "int64"),
        (lambda: (cuda(t, k), torch.zeros(e, dtype=torch.int64)), ValueError, "m_splits must be on x's device"),
        (lambda: (cuda(t, k), cuda(e + 1, dtype=torch.int64)), ValueError, "num_gemms=3"),
        (lambda: (cuda(t, k), cuda(1, e, dtype=torch.int64)), ValueError, "1-D"),
        (lambda: (cuda(t, k), [10, 10]), ValueError, "num_gemms=3"),
        (lambda: (cuda(t, k), [10, 10, 10]), ValueError, "add up to 30, x has 40 rows"),
        (lambda: (cuda(t, k), [10, -1, 31]), ValueError, "ints >= 0"),
        (lambda: (cuda(t, k), [10.0, 10, 20]), TypeError, "ints >= 0"),
        (lambda: (cuda(t, k), (10, 10, 20.5)), TypeError, "ints"),
        (lambda: (cuda(t, k), "10,10,20"), TypeError, "m_splits"),
        # numpy integers are ints (past that check: the sum is what is refused); numpy bools are not
        (lambda: (cuda(t, k), [np.int64(10), np.int32(10), np.uint8(10)]), ValueError, "add up to 30, x has 40 rows"),
        (lambda: (cuda(t, k), [np.bool_(True), 10, 29]), TypeError, "ints >= 0"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_forward_cases())))
def test_forward_refuses_bad_input(fake, case):
    make, err, match = _bad_forward_cases()[case]
    layer = _Layer(3, 32, 16)
    x, splits = make()
    with pytest.raises(err, match=match):
        layer(x, splits)


def test_settings_checked_at_forward(fake):
    layer = _Layer(2, 32, 16)
    layer.mode = "fastest"
    with pytest.raises(ValueError, match="mode"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))
    layer.mode = "fast"
    layer.recipe = {"rule": "te"}
    with pytest.raises(TypeError, match="NVFP4Recipe"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))


def test_parameters_checked_at_forward(fake):
    """A weight or bias replaced after construction by one of another shape, dtype or device is refused before any
    kernel reads it (the GEMMs take their sizes from in_features / out_features)."""
    x, splits = cuda(8, 32), cuda(2, dtype=torch.int64)
    for name, value, err, match in (
        ("weight", cuda(2, 16, 16), ValueError, r"weight must be \[num_gemms, out_features, in_features\] = "
                                                r"\[2, 16, 32\], got \[2, 16, 16\]"),
        ("weight", cuda(3, 16, 32), ValueError, "weight must be"),
        ("weight", cuda(2, 16, 32, dtype=torch.float16), TypeError, "weight must be torch.bfloat16 or torch.float32"),
        ("bias", cuda(2, 32), ValueError, r"bias must be \[num_gemms, out_features\] = \[2, 16\]"),
        ("bias", cuda(2, 16, dtype=torch.float64), TypeError, "bias must be"),
    ):
        layer = _Layer(2, 32, 16)
        getattr(layer, name).data = value
        with pytest.raises(err, match=match):
            layer(x, splits)
    layer = _Layer(2, 32, 16)
    layer.bias = torch.nn.Parameter(torch.empty(2, 16, dtype=BF16, device="meta"))
    with pytest.raises(ValueError, match=r"bias must be on the weight's device \(cuda:0\), got meta"):
        layer(x, splits)


def test_main_grad_checked_before_any_launch(fake):
    layer = _Layer(2, 32, 16, fuse_wgrad_accumulation=True)
    layer.weight.main_grad = cuda(2, 16, 32)  # bf16, not fp32
    with pytest.raises(TypeError, match="main_grad must be float32, got torch.bfloat16"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))
    layer.weight.main_grad = [0.0]
    with pytest.raises(TypeError, match="main_grad must be a float32 tensor .* got list"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))
    layer.weight.main_grad = cuda(2, 32, 16, dtype=torch.float32)  # [E, K, N]: the weight's shape is [E, N, K]
    with pytest.raises(ValueError, match=r"main_grad must have shape \(2, 16, 32\)"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))
    del layer.weight.main_grad
    with pytest.raises(ValueError, match="needs weight.main_grad"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))
    layer.weight.main_grad = cuda(2, 32, 16, dtype=torch.float32).transpose(1, 2)  # [E, N, K] but not contiguous
    with pytest.raises(ValueError, match="main_grad must be contiguous"):
        layer(cuda(8, 32), cuda(2, dtype=torch.int64))


def test_packed_scales_past_2_32_bytes_refused_before_any_launch(fake, monkeypatch):
    """E = 65535, K = 16384: T = 65599 tokens make x's columnwise scales (SPEC 9.3's worst case, which the forward
    packs for the weight gradient, SPEC 9.5) 2^32 bytes, past the packing kernel's 32-bit index math; T = 65598 and a
    forward without the weight gradient are taken. Nothing is launched before the refusal."""
    layer = _Layer(65535, 16384, 16)
    splits = cuda(65535, dtype=torch.int64)
    launched = []

    def first_launch(*args, **kwargs):  # (the forward's first kernel: a quantize pass)
        launched.append(True)
        raise RuntimeError("stop")

    monkeypatch.setattr(gl, "_quantize", first_launch)
    with pytest.raises(ValueError, match="x's columnwise scales for the weight gradient take 4294967296 bytes"):
        layer(cuda(65599, 16384), splits)
    assert not launched
    for t, grad in ((65598, True), (65599, False)):
        with torch.set_grad_enabled(grad), pytest.raises(RuntimeError, match="stop"):  # (past the checks)
            layer(cuda(t, 16384), splits)


@pytest.mark.parametrize("mode,t,match", [
    ("sm100", 2**19, "mode 'sm100' runs contractions below 524288 only"),  # wgrad's contraction is T (SPEC 12.7)
    ("fast", 2**28, "sizes too large: T=268435456"),  # T below 2**28 (the GEMMs' K-tile offsets)
])
def test_token_counts_the_gemms_cannot_take(fake, mode, t, match):
    """The layer refuses T the backward GEMMs cannot run before the forward launches anything: sm100's wgrad
    contracts over T, so T = 2^19 is past SPEC 12.7's int64 model even where N and K are small."""
    layer = _Layer(2, 32, 16, mode=mode)
    with pytest.raises(ValueError, match=match):
        layer(cuda(t, 32), cuda(2, dtype=torch.int64))


# ------------------------------------------------------------------------------------------------------------------
# the layer's GEMM sizes are device.grouped_gemm's
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("e,t,n,k", [(1, 0, 16, 16), (3, 40, 48, 32), (8, 1000, 1408, 2048), (64, 300, 16, 4096)])
@pytest.mark.parametrize("rule", ["te", "torchao"])
def test_gemm_sizes_match_grouped_gemm(fake, e, t, n, k, rule):
    """device.grouped_linear._gemm_sizes (the layer's GEMMs on raw tensors) gives the ints device.grouped_gemm
    computes from the quantized operands (device.gemm._checked_call) for fprop, dgrad and wgrad."""
    splits = cuda(e, dtype=torch.int64)
    w_splits = cuda(e, dtype=torch.int64)
    xq = device.group_quantize(cuda(t, k), splits, rowwise=True, columnwise=True, rule=rule)
    dyq = device.group_quantize(cuda(t, n), splits, rowwise=True, columnwise=True, rule=rule)
    wq = device.group_quantize(cuda(e * n, k), w_splits, rowwise=True, columnwise=True, block=(16, 16), rule=rule)
    for kind, a, b in (("fprop", xq, wq), ("dgrad", dyq, wq), ("wgrad", dyq, xq)):
        c = dgemm._checked_call(a, b, kind, None, None, False, None, "fast")
        assert gl._gemm_sizes(dgemm._KIND_CODES[kind], e, t, n, k, rule) == c.sizes, kind


def test_fake_implementations_shapes(fake):
    e, t, n, k = 3, 40, 48, 32
    splits = cuda(e, dtype=torch.int64)
    xq = device.group_quantize(cuda(t, k), splits, rowwise=True, columnwise=True)
    wq = device.group_quantize(cuda(e * n, k), splits, rowwise=True, columnwise=True, block=(16, 16))
    dyq = device.group_quantize(cuda(t, n), splits, rowwise=True, columnwise=True)
    y = device.grouped_gemm(xq, wq, kind="fprop")
    assert (tuple(y.shape), y.dtype) == ((t, n), BF16)
    dw = device.grouped_gemm(dyq, xq, kind="wgrad")
    assert (tuple(dw.shape), dw.dtype) == ((e, n, k), torch.float32)
    db = torch.ops.nvfp4_device.bias_grad(cuda(t, n), dyq.offsets)
    assert (tuple(db.shape), db.dtype) == ((e, n), torch.float32)


def test_out_form_declares_its_mutation():
    """torch.compile and functionalization must know that the out= form writes out (main_grad accumulation)."""
    schema = torch.ops.nvfp4_device.grouped_gemm_out.default._schema
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == ["out"]
    schema = torch.ops.nvfp4_device.grouped_gemm.default._schema
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


# ------------------------------------------------------------------------------------------------------------------
# torch.compile's tracer: no graph break
# ------------------------------------------------------------------------------------------------------------------

def _explain(fn, *args):
    torch._dynamo.reset()
    try:
        return torch._dynamo.explain(fn)(*args)
    finally:
        torch._dynamo.reset()


def test_dynamo_traces_group_quantize_and_grouped_gemm(fake):
    e, t, n, k = 4, 100, 32, 64
    splits, w_splits = cuda(e, dtype=torch.int64), cuda(e, dtype=torch.int64)

    def step(x, s, w, ws, dy):
        xq = device.group_quantize(x, s, rowwise=True, columnwise=True, rht=True)
        wq = device.group_quantize(w, ws, rowwise=True, columnwise=True, block=(16, 16))
        dyq = device.group_quantize(dy, s, rowwise=True, columnwise=True, rht=True, rounding="sr", seed=7)
        y = device.grouped_gemm(xq, wq, kind="fprop")
        dx = device.grouped_gemm(dyq, wq, kind="dgrad", mode="exact")
        dw = device.grouped_gemm(dyq, xq, kind="wgrad")
        return y, dx, dw

    ex = _explain(step, cuda(t, k), splits, cuda(e * n, k), w_splits, cuda(t, n))
    assert ex.graph_break_count == 0, [str(r.reason) for r in ex.break_reasons]
    assert ex.graph_count == 1


@pytest.mark.parametrize("bias", [True, False])
def test_dynamo_traces_the_layer_forward(fake, bias):
    """The inference forward (autograd off; the autograd path needs a real CUDA device: the GPU test)."""
    layer = _Layer(4, 64, 32, bias=bias, recipe=NVFP4Recipe(rule="te", sr_grad=False))
    with torch.no_grad():
        ex = _explain(layer, cuda(100, 64), cuda(4, dtype=torch.int64))
    assert ex.graph_break_count == 0, [str(r.reason) for r in ex.break_reasons]
    assert ex.graph_count == 1


def test_torch_views_reinterpret_without_copy():
    """Results view their codes as torch.float4_e2m1fn_x2 and their scales as torch.float8_e4m3fn (same bytes)."""
    from device._results import DeviceGroupedNVFP4Tensor, DeviceNVFP4Tensor

    data = torch.tensor([0x21, 0xF7], dtype=torch.uint8)  # codes (1, 2) and (7, 15): 0.5, 1.0 / 6.0, -6.0
    scales = torch.tensor([0x38], dtype=torch.uint8)  # E4M3 0x38 = 1.0
    q = DeviceNVFP4Tensor((1, 4), row_data=data, row_scales=scales)
    d, s = q.torch_views("row")
    assert d.dtype == torch.float4_e2m1fn_x2 and s.dtype == torch.float8_e4m3fn
    assert d.data_ptr() == data.data_ptr() and s.data_ptr() == scales.data_ptr()
    assert float(s.float()[0]) == 1.0
    with pytest.raises(ValueError, match="col plane was not requested"):
        q.torch_views("col")
    g = DeviceGroupedNVFP4Tensor((1, 4), None, None, None, data, scales, None, None, None)
    assert g.torch_views("col")[0].dtype == torch.float4_e2m1fn_x2
    with pytest.raises(ValueError, match="plane"):
        g.torch_views("both")


# ------------------------------------------------------------------------------------------------------------------
# eager calls skip the ops' dispatch, and launch what the ops launch
# ------------------------------------------------------------------------------------------------------------------

def test_eager_grouped_gemm_launches_what_the_ops_launch(fake, monkeypatch):
    """device._ops.grouped_gemm_new / grouped_gemm_into (the eager path of device.grouped_gemm and of the layer) call
    launch_grouped_gemm with the arguments the custom ops' own implementations pass it, and go through the ops on
    fake tensors or while torch.compile traces."""
    from device import _ops

    calls = []
    monkeypatch.setattr(_ops, "launch_grouped_gemm", lambda *args: calls.append(args))
    e, t, n, k = 3, 40, 48, 32
    splits = cuda(e, dtype=torch.int64)
    xq = device.group_quantize(cuda(t, k), splits, rowwise=True)
    wq = device.group_quantize(cuda(e * n, k), splits, rowwise=True, block=(16, 16))
    operands = (xq.row_data, xq.row_scales, xq.row_amax, xq.offsets, wq.row_data, wq.row_scales, wq.row_amax,
                wq.offsets)
    sizes = gl._gemm_sizes(dgemm._KIND_CODES["fprop"], e, t, n, k, "te")
    plan = ("", "", "", 0)
    bias = cuda(e, n, dtype=torch.float32)
    out = cuda(t, n)

    assert _ops._traced(xq.offsets)  # fake tensors: through the op (its fake implementation launches nothing)
    _ops.grouped_gemm_new(*operands, bias, 0, "fast", [t, n], BF16, sizes, *plan)
    _ops.grouped_gemm_into(*operands, out, bias, False, 0, "fast", sizes, *plan)
    assert calls == []

    monkeypatch.setattr(_ops, "_traced", lambda _t: False)  # an eager call
    y = _ops.grouped_gemm_new(*operands, bias, 0, "exact", [t, n], BF16, sizes, *plan)
    _ops.grouped_gemm_into(*operands, out, bias, True, 0, "sm100", sizes, *plan)
    _ops.grouped_gemm_op._init_fn(*operands, bias, 0, "exact", [t, n], BF16, sizes, *plan)  # the ops' bodies
    _ops.grouped_gemm_out_op._init_fn(*operands, out, bias, True, 0, "sm100", sizes, *plan)
    assert len(calls) == 4
    (new, into, op_new, op_into) = calls
    for a, b in ((new, op_new), (into, op_into)):
        assert len(a) == len(b) == (19 if a is new else 18)  # the functional form passes b_copy (None) last
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            if i == 10 and a is new:  # the output each allocated: same shape, dtype and device
                assert (u.shape, u.dtype, u.device) == (v.shape, v.dtype, v.device) == ((t, n), BF16, out.device)
            elif isinstance(u, torch.Tensor):
                assert u is v, i
            else:
                assert u == v, i
    assert new[10] is y and into[10] is out and into[12] is True and new[12] is False and new[18] is None


def test_dynamo_traces_grouped_gemm_into_out(fake):
    """grouped_gemm(out=..., accumulate=True) (main_grad += dW) traces without a graph break: the checks that read
    out's address (alignment, overlap with an operand) are skipped on fake tensors and while dynamo traces (a fake
    data_ptr() is 0, which would also look like an overlap)."""
    e, t, n, k = 4, 100, 32, 64
    splits = cuda(e, dtype=torch.int64)

    def wgrad_into(x, s, dy, mg):
        xq = device.group_quantize(x, s, columnwise=True, rowwise=False, rht=True)
        dyq = device.group_quantize(dy, s, columnwise=True, rowwise=False, rht=True, rounding="sr", seed=3)
        device.grouped_gemm(dyq, xq, kind="wgrad", out=mg, accumulate=True)
        return mg

    ex = _explain(wgrad_into, cuda(t, k), splits, cuda(t, n), cuda(e, n, k, dtype=torch.float32))
    assert ex.graph_break_count == 0, [str(r.reason) for r in ex.break_reasons]
    assert ex.graph_count == 1


# ------------------------------------------------------------------------------------------------------------------
# the weight-plane cache and is_first_microbatch
# ------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def weight_quantizations(monkeypatch):
    """The list of weight quantizations the layer runs (device.grouped_linear._quantize called with the layer's
    weight splits), one entry (columnwise requested) per call; X's quantizations are not counted."""
    calls = []
    real = gl._quantize

    def counting(t, splits, **kwargs):
        if getattr(splits, "_is_weight_splits", False):
            calls.append(kwargs["columnwise"])
        return real(t, splits, **kwargs)

    monkeypatch.setattr(gl, "_quantize", counting)
    return calls


def _cache_layer(**kwargs) -> _Layer:
    layer = _Layer(2, 32, 16, **kwargs)
    layer._weight_splits._is_weight_splits = True  # (marks the weight's splits for weight_quantizations)
    return layer


def _infer(layer, **kwargs):
    with torch.no_grad():  # (the autograd path launches kernels: GPU tests)
        return layer(cuda(40, 32), cuda(2, dtype=torch.int64), **kwargs)


def test_weight_planes_default_follow_the_version_counter(fake, weight_quantizations):
    layer = _cache_layer()
    _infer(layer)
    _infer(layer)
    assert len(weight_quantizations) == 1  # reused: same version and address
    with torch.no_grad():
        layer.weight.mul_(2.0)  # an in-place update through the parameter bumps its version
    _infer(layer)
    assert len(weight_quantizations) == 2
    layer.weight.data.mul_(0.5)  # through .data (as .data.copy_): no version bump, the check cannot see it
    _infer(layer)
    assert len(weight_quantizations) == 2  # (the documented limit: stale planes)
    _infer(layer, is_first_microbatch=True)
    assert len(weight_quantizations) == 3


def test_is_first_microbatch_true_quantizes_and_false_reuses(fake, weight_quantizations):
    layer = _cache_layer()
    _infer(layer, is_first_microbatch=False)  # nothing cached yet: quantized
    assert len(weight_quantizations) == 1
    _infer(layer, is_first_microbatch=True)
    _infer(layer, is_first_microbatch=True)
    assert len(weight_quantizations) == 3  # True always quantizes
    with torch.no_grad():
        layer.weight.add_(1.0)  # version bumped, but False does not look
    _infer(layer, is_first_microbatch=False)
    _infer(layer, is_first_microbatch=False)
    assert len(weight_quantizations) == 3
    _infer(layer)  # None: the version changed since the planes were quantized
    assert len(weight_quantizations) == 4
    layer.invalidate_weight_planes()
    _infer(layer, is_first_microbatch=False)
    assert len(weight_quantizations) == 5
    layer.recipe = NVFP4Recipe(weight_block=(1, 16))  # another recipe weight field: the cache does not serve it
    _infer(layer, is_first_microbatch=False)
    assert len(weight_quantizations) == 6
    _infer(layer, is_first_microbatch=False)
    assert len(weight_quantizations) == 6


def test_is_first_microbatch_false_quantizes_a_missing_columnwise_plane(fake, weight_quantizations):
    """A cache entry from a forward without x.requires_grad has no columnwise plane (dgrad's operand)."""
    layer = _cache_layer()
    _infer(layer, is_first_microbatch=True)
    assert weight_quantizations == [False]
    planes, copy = layer._weight_planes(True, False)
    assert weight_quantizations == [False, True] and planes.col_data.numel() > 0 and copy is None
    assert layer._weight_planes(True, False)[0] is planes and layer._weight_planes(False, False)[0] is planes
    assert len(weight_quantizations) == 2


def test_weight_plane_reuse_off_quantizes_every_forward(fake, weight_quantizations):
    layer = _cache_layer()
    layer.weight_plane_reuse = False
    for first in (None, False, False, True):
        _infer(layer, is_first_microbatch=first)
    assert len(weight_quantizations) == 4


@pytest.mark.parametrize("value", [1, 0, "yes", torch.tensor(True)])
def test_is_first_microbatch_must_be_none_or_bool(fake, value):
    with pytest.raises(TypeError, match="is_first_microbatch"):
        _infer(_cache_layer(), is_first_microbatch=value)


@pytest.mark.parametrize("kwargs", [dict(fuse_wgrad_accumulation=True), dict(delay_wgrad_compute=True)])
def test_python_state_options_refused_under_compile(fake, monkeypatch, kwargs):
    """fuse_wgrad_accumulation / delay_wgrad_compute update Python state in the backward: a traced forward raises."""
    layer = _cache_layer(**kwargs)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with pytest.raises(RuntimeError, match="not supported under torch.compile"):
        layer(cuda(40, 32), cuda(2, dtype=torch.int64))


# ------------------------------------------------------------------------------------------------------------------
# the weights' fp16 copy (cache_f16_weights): when a forward makes it, and when the cache lets it go
# ------------------------------------------------------------------------------------------------------------------

class _Cutlass:
    """Stands in for the GEMM extension's has_cutlass (the CPU build has no extension)."""

    @staticmethod
    def has_cutlass() -> bool:
        return True


# Whether a forward's fprop or dgrad reads the copy: their plans over copies (256 tokens per expert from which
# copies_cutlass with the copy is faster, device/_dispatch.py; N, K >= 1024), fprop with or without a bias (CUTLASS's
# bf16 bias epilogue), dgrad only with 16x16 weight blocks and when x needs a gradient
@pytest.mark.parametrize("e,t,n,k,bias,block,need_dx,reads", [
    (64, 16384, 1408, 2048, False, (16, 16), True, True),    # E64: fprop and dgrad
    (64, 16384, 1408, 2048, True, (16, 16), False, True),    # a bias and no dgrad: fprop reads it
    (64, 16384, 1408, 2048, True, (16, 16), True, True),     # a bias: both
    (64, 16384, 1408, 2048, True, (1, 16), True, True),      # a bias and 1x16 blocks: fprop
    (64, 8192, 1408, 2048, False, (16, 16), True, False),    # 128 tokens per expert: the fused kernels
    (8, 512, 14336, 4096, False, (16, 16), True, False),     # 64 tokens per expert: swapped_64x256
    (8, 16384, 14336, 4096, False, (1, 16), False, True),    # fprop alone
    (64, 16384, 512, 2048, False, (16, 16), True, False),    # N below 1024
])
def test_weight_copy_read_follows_the_plans(fake, monkeypatch, e, t, n, k, bias, block, need_dx, reads):
    monkeypatch.setattr(gl._ops, "load_gemm_extension", lambda: _Cutlass)
    layer = _Layer(e, k, n, bias=bias, recipe=NVFP4Recipe(weight_block=block))
    assert layer._weight_copy_read(t, need_dx) is reads
    for setting in (dict(cache_f16_weights=False), dict(mode="exact"), dict(weight_plane_reuse=False)):
        off = _Layer(e, k, n, bias=bias, recipe=NVFP4Recipe(weight_block=block))
        for name, value in setting.items():
            setattr(off, name, value)
        assert off._weight_copy_read(t, need_dx) is False, setting


def test_cached_weight_copy_goes_only_where_it_is_read(fake):
    """A cache entry's copy goes to a forward that reads it; turning cache_f16_weights off, or another mode, drops
    it from the cache at the next forward."""
    layer = _cache_layer()
    _infer(layer)
    planes = layer._weight_cache[2]
    sentinel = cuda(2, 16, 32, dtype=torch.float16)
    layer._weight_cache = layer._weight_cache[:3] + (sentinel,)
    got = layer._weight_planes(False, None, want_copy=True)
    assert got[0] is planes and got[1] is sentinel
    got = layer._weight_planes(False, None)  # (a forward whose GEMMs do not read it)
    assert got[0] is planes and got[1] is None and layer._weight_cache[3] is sentinel
    for name, value in (("cache_f16_weights", False), ("mode", "exact")):
        layer._weight_cache = layer._weight_cache[:3] + (sentinel,)
        setattr(layer, name, value)
        got = layer._weight_planes(False, None)
        assert got[0] is planes and got[1] is None and layer._weight_cache[3] is None, name
        setattr(layer, name, {"cache_f16_weights": True, "mode": "fast"}[name])


def test_without_a_gpu_the_layer_says_so():
    """Outside FakeTensorMode on a machine without CUDA (this one's CPU torch, or a GPU torch without a device), the
    constructor's first CUDA allocation fails: a RuntimeError naming the layer's need (torch's bare AssertionError
    "Torch not compiled with CUDA enabled" leaked before)."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the allocation succeeds")
    with pytest.raises(RuntimeError, match="GroupedLinear needs a CUDA device"):
        device.GroupedLinear(2, 32, 32)
