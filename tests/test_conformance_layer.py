"""The grouped-linear conformance op (SPEC 16) on CPU: the reference composed group by group, the oracle's layer
(backend oracle-layer) against it, planted layer bugs that the comparison must catch, the shrinker, and the device
backend's step driven by an oracle-backed stand-in for ``device.GroupedLinear``."""

from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np
import pytest

import oracle
from conformance.backends import Backend, DeviceBackend, OracleLayerBackend
from conformance.cases import load_case, save_case
from conformance.compare import compare
from conformance.generators import LAYER_MODELS, generate
from conformance.independent import _to_torch, torch_to_numpy
from conformance.ops import bias_grad_by_chunks, layer_recipe, layer_splits, ref_grouped_linear, reference
from conformance.runner import case_space, check_case
from conformance.shrink import candidates, shrink

OP = "grouped_linear"


def _cases(seed: int, n: int, space: dict | None = None, want=lambda c: True):
    """The first ``n`` cases of ``seed`` that ``want`` accepts."""
    out = []
    for i in range(2000):
        c = generate(OP, seed, i, OP, space or {})
        if want(c):
            out.append(c)
            if len(out) == n:
                return out
    raise AssertionError(f"only {len(out)} wanted cases in 2000 draws")


def _live_groups(c) -> int:
    return int((layer_splits(c) > 0).sum())


# ---------------------------------------------------------------------------------------------------- reference


def test_bias_grad_by_chunks_spec_column():
    """SPEC 16.4's worked column: 1 (x15), 2^24, 1 (x16) gives 2^24 + 32 by chunks (one sequential pass: 2^24 + 16);
    -0.0 rows sum to +0.0; no rows give +0.0."""
    col = np.array([1.0] * 15 + [2.0**24] + [1.0] * 16, np.float32)
    dy = np.zeros((32, 3), ml_dtypes.bfloat16)
    dy[:, 0] = col.astype(ml_dtypes.bfloat16)
    dy[:, 1] = -0.0
    got = bias_grad_by_chunks(dy)
    assert got[0] == np.float32(2.0**24 + 32)
    assert got[1] == 0 and not np.signbit(got[1]) and got[2] == 0 and not np.signbit(got[2])
    empty = bias_grad_by_chunks(np.zeros((0, 4), ml_dtypes.bfloat16))
    assert empty.shape == (4,) and (empty == 0).all() and not np.signbit(empty).any()


def test_reference_shapes_dtypes_and_empty_experts():
    """y / dx over the (cut) rows, dW in the parameters' dtype (fp32 with main_grad), dbias only with a bias; an
    empty expert's dW is +0.0, or its main_grad slice bit for bit (SPEC 16.3)."""
    seen = set()
    for c in _cases(11, 40, want=lambda c: (layer_splits(c) == 0).any() and layer_splits(c).sum() > 0):
        a, o = c.arrays, c.options
        e, n, k = a["w"].shape
        r = ref_grouped_linear(c)
        rows = int(layer_splits(c).sum())
        assert r["y"].shape == (rows, n) and r["y"].dtype == ml_dtypes.bfloat16
        assert r["dx"].shape == (rows, k) and r["dx"].dtype == ml_dtypes.bfloat16
        fuse = "main_grad" in a
        pdt = np.float32 if fuse or o["params_dtype"] == "float32" else ml_dtypes.bfloat16
        assert r["dw"].shape == (e, n, k) and r["dw"].dtype == pdt
        assert ("dbias" in r) == ("bias" in a)
        for g in np.flatnonzero(layer_splits(c) == 0):
            want = a["main_grad"][g] if fuse else np.zeros((n, k), np.float32)
            assert r["dw"][g].astype(np.float32).tobytes() == want.tobytes()
            if "bias" in a:
                assert r["dbias"][g].astype(np.float32).tobytes() == np.zeros(n, np.float32).tobytes()
        seen.add(fuse)
    assert seen == {False, True}


def test_oracle_layer_agrees_with_the_composed_reference():
    """The oracle's grouped_linear_forward / _backward (group_quantize, grouped_gemm, grouped_bias_grad) equal the
    reference composed from per-group oracle.quantize / oracle.gemm on every drawn mode, rule and setting."""
    be = OracleLayerBackend()
    modes = set()
    for c in _cases(12, 60):
        status, ms, _, _, err = check_case(be, c)
        assert status == "pass", (c.key(), err, [str(m) for m in ms])
        modes.add(c.options["layer_mode"])
    assert modes == set(LAYER_MODELS)


# ---------------------------------------------------------------------------------------------------- planted bugs


class _Planted(Backend):
    """The reference run under a patch (a planted layer bug)."""

    name = "planted"
    ops = (OP,)

    def __init__(self, patch, options: dict | None = None):
        self.patch, self.options = patch, options or {}

    def run(self, op, case):
        with self.patch():
            return ref_grouped_linear(case.replace(options=self.options))


def _caught(be: Backend, cases) -> list[str]:
    """The buffers that mismatched over ``cases`` (every case must run)."""
    bufs = []
    for c in cases:
        out = be.run(OP, c)
        bufs += [m.buffer for m in compare(c, reference(c), out)]
    return bufs


def test_sr_offset_zero_for_every_group_is_caught(monkeypatch):
    """dY's stochastic rounding must use offset g for group g (SPEC 16.2): offset 0 everywhere changes dx / dW."""
    quantize = oracle.quantize

    @contextlib.contextmanager
    def offset_zero():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(oracle, "quantize", lambda *a, **kw: quantize(*a, **dict(kw, offset=0)))
            yield

    cases = _cases(13, 6, {"rounding": ["sr"]}, want=lambda c: _live_groups(c) >= 2 and c.arrays["x"].shape[0] > 32)
    bufs = _caught(_Planted(offset_zero), cases)
    assert {"dx", "dw"} & set(bufs), bufs


def test_bias_left_out_is_caught():
    """fprop's bias enters the epilogue (SPEC 16.3): a layer without it differs in y."""
    gemm = oracle.gemm

    @contextlib.contextmanager
    def no_bias():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(oracle, "gemm", lambda *a, **kw: gemm(*a, **dict(kw, bias=None)))
            yield

    cases = _cases(14, 4, want=lambda c: "bias" in c.arrays and layer_splits(c).sum() > 0)
    assert "y" in _caught(_Planted(no_bias), cases)


def test_one_accumulation_over_two_steps_is_caught():
    """Two steps with main_grad accumulate dW twice (SPEC 16.3): a backend that accumulates once differs in dw (where
    the drawn main_grad does not absorb dW)."""
    cases = _cases(15, 4, {"main_grad": [True], "steps": [2]}, want=lambda c: layer_splits(c).sum() > 0)
    bufs = _caught(_Planted(contextlib.nullcontext, {"steps": 1}), cases)
    assert set(bufs) == {"dw"} and len(bufs) >= 2


@pytest.mark.parametrize("mode,other", [("fast", "exact"), ("exact", "fast"), ("sm100", "exact")])
def test_another_gemm_model_is_caught(mode, other):
    """Each mode is its own model (SPEC 16.5): the outputs of another model differ on some drawn case."""
    cases = _cases(16, 12, {"layer_mode": [mode]}, want=lambda c: c.arrays["x"].shape[0] >= 16)
    assert _caught(_Planted(contextlib.nullcontext, {"layer_mode": other}), cases)


# ---------------------------------------------------------------------------------------------------- generator


def test_loose_splits_only_where_the_space_allows():
    """Device splits that need not add up to T (SPEC 9.4) are drawn for a backend that allows them, as device
    tensors; the reference then covers the cut groups' rows."""
    free = _cases(17, 300)
    assert all(c.options.get("splits_rule") is None and c.arrays["splits"].sum() == c.arrays["x"].shape[0]
               for c in free)
    loose = _cases(17, 5, {"loose_splits": True}, want=lambda c: c.options.get("splits_rule") == "cut")
    for c in loose:
        assert c.options["splits_on"] == "device"
        t, covered = c.arrays["x"].shape[0], 0
        for size in c.arrays["splits"].tolist():  # SPEC 9.4 in words: negative sizes count 0, the total cut at T
            covered = min(covered + max(size, 0), t)
        assert reference(c)["y"].shape[0] == covered


def test_cases_save_and_load(tmp_path):
    """A case's options (the u64 seed, is_first_microbatch's None entries) survive the .npz and replay the same
    reference."""
    for c in _cases(18, 3, {"steps": [2], "main_grad": [True]}):
        path = save_case(tmp_path / f"{c.index}.npz", c, backend="oracle-layer")
        d = load_case(path)[0]
        assert d.options == c.options
        r0, r1 = reference(c), reference(d)
        assert all(r0[k].tobytes() == r1[k].tobytes() for k in r0)


# ---------------------------------------------------------------------------------------------------- shrinker


def test_every_shrink_candidate_is_a_valid_case(monkeypatch):
    """Each candidate keeps x / dy rows and w / bias / main_grad shapes consistent and means what it says: a correct
    layer (the oracle-backed stand-in for the device) passes it, fp32 parameters made bf16 with their bias included."""
    torch = pytest.importorskip("torch")
    be = _stand_in_device(torch, monkeypatch)
    space = case_space(be, OP)
    cases = _cases(19, 2, space, want=lambda c: "bias" in c.arrays and "main_grad" in c.arrays
                   and _live_groups(c) >= 2 and c.arrays["x"].shape[0] <= 150)
    cases += _cases(19, 1, space, want=lambda c: "bias" in c.arrays and c.options["params_dtype"] == "float32")
    cases += _cases(19, 1, space, want=lambda c: c.options.get("splits_rule") == "cut" and layer_splits(c).sum() > 0)
    for c in cases:
        n = 0
        for cand in candidates(c):
            status, ms, _, _, err = check_case(be, cand)
            assert status == "pass", (c.key(), cand.options, err, [str(m) for m in ms])
            n += 1
        assert n > 5


def test_a_planted_dx_bug_shrinks_to_one_small_group():
    """A backend that flips a bit of dx past row 20 shrinks to one group, 16 columns each way, plain settings."""

    class FlipDx(OracleLayerBackend):
        def run(self, op, case):
            out = super().run(op, case)
            if out["dx"].shape[0] > 20:
                d = out["dx"].view(np.uint16).copy()
                d[20, 0] ^= 1
                out["dx"] = d.view(ml_dtypes.bfloat16)
            return out

    be = FlipDx()
    c = _cases(3, 1, want=lambda c: c.arrays["x"].shape[0] > 100 and _live_groups(c) >= 2)[0]

    def fails(cand):
        ms = compare(cand, reference(cand), be.run(OP, cand))
        return frozenset(m.buffer for m in ms) or None

    import time

    small, _ = shrink(c, fails, deadline=time.monotonic() + 120)
    a, o = small.arrays, small.options
    assert a["w"].shape == (1, 16, 16) and 20 < a["x"].shape[0] <= 32 and "main_grad" not in a and "bias" not in a
    assert o["steps"] == 1 and not o["delay_wgrad_compute"] and o["splits_on"] == "host"


def test_a_failure_that_needs_loose_splits_still_shrinks_its_other_sizes():
    """A bug seen only with loose device splits keeps them (the host-cut candidate passes), but K, N and zeroed
    blocks still shrink."""

    class FlipOnCut(OracleLayerBackend):
        def run(self, op, case):
            out = ref_grouped_linear(case)  # (the stand-in for a layer: the reference's own bytes)
            ok = np.flatnonzero(~np.isnan(out["y"].astype(np.float32)))  # (a NaN's payload is not compared)
            if case.options.get("splits_rule") == "cut" and ok.size:
                y = out["y"].view(np.uint16).copy()
                y.flat[ok[0]] ^= 1
                out["y"] = y.view(ml_dtypes.bfloat16)
            return out

    be = FlipOnCut()
    c = _cases(22, 1, {"loose_splits": True}, want=lambda c: c.options.get("splits_rule") == "cut"
               and layer_splits(c).sum() > 0 and c.arrays["w"].shape[1] >= 64 and c.arrays["w"].shape[2] >= 64)[0]

    def fails(cand):
        ms = compare(cand, reference(cand), be.run(OP, cand))
        return frozenset(m.buffer for m in ms) or None

    import time

    assert fails(c)
    small, _ = shrink(c, fails, deadline=time.monotonic() + 60)
    assert small.options.get("splits_rule") == "cut"
    assert small.arrays["w"].shape[1:] == (16, 16), small.arrays["w"].shape


# ---------------------------------------------------------------------------------------------------- device backend


class _OracleLayer:
    """``device.GroupedLinear``'s interface on CPU tensors, computed by the oracle's layer (SPEC 16): device splits
    cut as SPEC 9.4 says, weight.grad / main_grad / a deferred wgrad as the device layer handles them. Records each
    forward's (splits type, is_first_microbatch, x.requires_grad)."""

    def __init__(self, torch):
        self.torch = torch
        self.calls: list = []  # (splits type, is_first_microbatch, x.requires_grad, weight_plane_reuse) per forward
        self.built: list = []  # the constructor's arguments per layer
        outer = self

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, b, layer, splits):
                s = oracle.cut_splits(np.asarray(splits.cpu() if hasattr(splits, "cpu") else splits, np.int64),
                                      x.shape[0])
                rows = int(s.sum())
                xo, wo = outer.host(x[:rows]), outer.host(w.to(torch.bfloat16))
                bias = None if b is None else b.detach().float().numpy()
                y = oracle.grouped_linear_forward(xo, wo, s, bias=bias, recipe=layer.recipe, model=layer.model)
                out = torch.zeros((x.shape[0], w.shape[1]), dtype=torch.bfloat16)
                out[:rows] = outer.tensor(y)
                ctx.state = (xo, wo, s, b is not None, layer)
                return out

            @staticmethod
            def backward(ctx, dy):
                xo, wo, s, with_bias, layer = ctx.state
                dyo = outer.host(dy[: int(s.sum())])

                def grads(main_grad):
                    return oracle.grouped_linear_backward(xo, wo, s, dyo, with_bias=with_bias, recipe=layer.recipe,
                                                          model=layer.model, main_grad=main_grad)

                mg = layer.weight.main_grad.numpy() if layer.fuse else None  # (shares the tensor's memory)
                dx, dw, db = grads(None if layer.delay_wgrad_compute else mg)
                dw_t = None
                if layer.delay_wgrad_compute:
                    layer.pending.append(lambda: grads(mg).dw)
                elif not layer.fuse:
                    dw_t = torch.from_numpy(np.asarray(dw)).to(layer.weight.dtype)
                pdt = layer.weight.dtype
                pad = torch.zeros((dy.shape[0], xo.shape[1]), dtype=torch.bfloat16)
                pad[: dx.shape[0]] = outer.tensor(dx)
                return pad, dw_t, None if db is None else torch.from_numpy(db).to(pdt), None, None

        class GroupedLinear(torch.nn.Module):
            def __init__(self, e, k, n, *, bias, device, params_dtype, recipe, mode, fuse_wgrad_accumulation,
                         delay_wgrad_compute, cache_f16_weights):
                super().__init__()
                outer.built.append(dict(e=e, k=k, n=n, bias=bias, params_dtype=params_dtype, recipe=recipe, mode=mode,
                                        fuse=fuse_wgrad_accumulation, delay=delay_wgrad_compute,
                                        cache_f16=cache_f16_weights))
                self.weight_plane_reuse = True
                self.recipe, self.model = recipe, LAYER_MODELS[mode]
                self.weight = torch.nn.Parameter(torch.zeros((e, n, k), dtype=params_dtype))
                self.bias = torch.nn.Parameter(torch.zeros((e, n), dtype=params_dtype)) if bias else None
                self.fuse, self.delay_wgrad_compute, self.pending = fuse_wgrad_accumulation, delay_wgrad_compute, []
                if self.fuse:
                    self.weight.main_grad = torch.zeros((e, n, k), dtype=torch.float32)

            def forward(self, x, m_splits, *, is_first_microbatch=None):
                outer.calls.append((type(m_splits).__name__, is_first_microbatch, x.requires_grad,
                                    self.weight_plane_reuse))
                return Fn.apply(x, self.weight, self.bias, self, m_splits)

            def backward_dw(self):
                dw = self.pending.pop(0)()
                if not self.fuse:
                    self.weight.grad = torch.from_numpy(np.asarray(dw)).to(self.weight.dtype)

        self.GroupedLinear = GroupedLinear

    @staticmethod
    def host(t) -> np.ndarray:
        return torch_to_numpy(t)

    @staticmethod
    def tensor(a: np.ndarray):
        return _to_torch(a)


def _stand_in_device(torch, monkeypatch) -> DeviceBackend:
    """A DeviceBackend whose ``device`` module is the oracle-backed stand-in (:class:`_OracleLayer`)."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    be = DeviceBackend.__new__(DeviceBackend)  # (its __init__ wants a GPU)
    be.dev, be._mod, be.name = "cpu", _OracleLayer(torch), "device:cpu"
    return be


def test_device_backend_runs_the_cases_step(monkeypatch):
    """The device backend's step (parameters and main_grad set, gradients cleared per step, backward_dw where the
    wgrad is deferred, outputs over the groups' rows) conforms with the oracle's layer standing in for the device,
    over drawn cases that cover every setting; the layer is built with the case's settings, each forward gets the
    case's splits type, is_first_microbatch, x.requires_grad and weight-plane cache setting, and a case without x's
    gradient expects no dx."""
    torch = pytest.importorskip("torch")
    be = _stand_in_device(torch, monkeypatch)
    space = case_space(be, OP)
    seen = set()
    short = _cases(20, 1, space, want=lambda c: c.options.get("splits_rule") == "cut"
                   and 0 < layer_splits(c).sum() < c.arrays["x"].shape[0])  # rows of y / dx past the groups
    for c in _cases(20, 40, space) + short:
        o = c.options
        be._mod.calls.clear()
        be._mod.built.clear()
        status, ms, ref, out, err = check_case(be, c)
        assert status == "pass", (c.key(), o, err, [str(m) for m in ms])
        e, n, k = c.arrays["w"].shape
        pdt = torch.bfloat16 if o["params_dtype"] == "bfloat16" else torch.float32
        assert be._mod.built == [dict(e=e, k=k, n=n, bias="bias" in c.arrays, params_dtype=pdt,
                                      recipe=layer_recipe(c), mode=o["layer_mode"], fuse=o["fuse_wgrad_accumulation"],
                                      delay=o["delay_wgrad_compute"], cache_f16=o["cache_f16_weights"])]
        want_type = "Tensor" if o["splits_on"] == "device" else "list"
        assert be._mod.calls == [(want_type, f, bool(o["x_requires_grad"]), bool(o["weight_plane_reuse"]))
                                 for f in o["is_first_microbatch"]]
        assert ("dx" in out) == bool(o["x_requires_grad"])
        seen |= {("steps", o["steps"]), ("delay", o["delay_wgrad_compute"]), ("fuse", o["fuse_wgrad_accumulation"]),
                 ("cut", o.get("splits_rule") == "cut"), ("x_grad", o["x_requires_grad"]),
                 ("fp32", o["params_dtype"] == "float32"), ("reuse", o["weight_plane_reuse"]),
                 ("cache_f16", o["cache_f16_weights"])}
    keys = ("delay", "fuse", "x_grad", "fp32", "reuse", "cache_f16", "cut")
    assert {(k, v) for k in keys for v in (False, True)} <= seen, seen
    assert ("steps", 2) in seen


@pytest.mark.cuda
def test_device_layer_conforms_on_drawn_steps():
    """On a GPU: device.GroupedLinear conforms with the reference on drawn steps of every mode and setting (loose
    device splits included), and a planted difference in its output is a mismatch."""
    be = DeviceBackend("cuda:0")
    assert be.available() is None, be.available()
    assert OP in be.ops
    space = case_space(be, OP)
    seen = set()
    for c in _cases(21, 48, space):
        status, ms, ref, out, err = check_case(be, c)
        assert status == "pass", (c.key(), c.options, err, [str(m) for m in ms])
        seen |= {c.options["layer_mode"], c.options.get("splits_rule", "exact")}
        ok = np.flatnonzero(~np.isnan(out["y"].astype(np.float32)))
        if ok.size:  # (a NaN's payload is not compared)
            y = out["y"].view(np.uint16).copy()
            y.flat[ok[0]] ^= 0x10
            assert [m.buffer for m in compare(c, ref, dict(out, y=y.view(ml_dtypes.bfloat16)))] == ["y"]
    assert set(LAYER_MODELS) | {"cut"} <= seen, seen
