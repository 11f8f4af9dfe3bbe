"""The ``mmasim`` conformance backend and the ``mma`` generator (docs/conformance.md): the oracle's step models
(SPEC 12.6, 12.7) against mmasim case by case, a clean skip without mmasim, and failing cases that shrink and replay."""

from __future__ import annotations

import time

import numpy as np
import pytest

from conformance import backends as B
from conformance import independent as ind
from conformance.backends import MmasimBackend, register_backend
from conformance.cases import case_size, load_case, save_case
from conformance.cli import replay
from conformance.compare import compare
from conformance.generators import MMA_CODES, MMA_SCALES, generate
from conformance.ops import OPS, reference
from conformance.runner import RunConfig, run
from conformance.shrink import shrink


def _cfg(tmp_path, **kw) -> RunConfig:
    base = dict(budget=30.0, seed=0, progress=False, artifacts=str(tmp_path / "art"), workers=1, shrink_time=20.0)
    base.update(kw)
    return RunConfig(**base)


def _needs_mmasim():
    if MmasimBackend().available() is not None:
        pytest.skip("mmasim is not installed")


def test_mmasim_is_a_cpu_default_backend_with_the_mma_ops():
    assert "mmasim" in B.CPU_DEFAULT and B.make_backend("mmasim").ops == ("mma_sm100", "mma_tc")
    assert OPS["mma_sm100"].generator == OPS["mma_tc"].generator == "mma"


def test_the_generator_draws_every_code_and_scale_kind_and_specials():
    codes, scales, tags = set(), set(), set()
    nan = signed = odd_k = 0
    for i in range(300):
        c = generate("mma_sm100", 4, i, "mma", OPS["mma_sm100"].space)
        a = c.arrays
        assert a["a_data"].shape[1] * 2 == a["b_data"].shape[1] * 2 == 16 * a["a_scales"].shape[1]
        codes.add(c.tags["codes"])
        scales.add(c.tags["scales"])
        tags.add(c.tags["alpha"])
        s = np.concatenate([a["a_scales"].ravel(), a["b_scales"].ravel()])
        nan += bool(((s & 0x7F) == 0x7F).any())
        signed += bool((s & 0x80).any() and not ((s & 0x7F) == 0x7F).all())
        odd_k += a["a_scales"].shape[1] % 4 != 0
    assert codes == set(MMA_CODES) and scales == set(MMA_SCALES)
    assert {"auto", "negative", "zero", "tiny", "huge"} <= tags
    assert nan > 10 and signed > 10 and odd_k > 50


def _codes(data: np.ndarray) -> np.ndarray:
    return np.stack((data & 0x0F, data >> 4), axis=-1).reshape(data.shape[0], -1)


def test_cancel_groups_cases_hold_exactly_cancelling_group_pairs():
    """A ``cancel_groups`` case has 16-groups g1, g2 with A's codes negated, B's codes and both scales equal: their
    values cancel exactly in every output."""
    seen = 0
    for i in range(300):
        c = generate("mma_sm100", 6, i, "mma", OPS["mma_sm100"].space)
        a = c.arrays
        nb = a["a_scales"].shape[1]
        if c.tags["codes"] != "cancel_groups" or nb < 2:
            continue
        ca, cb = _codes(a["a_data"]), _codes(a["b_data"])
        blk = lambda x, g: x[:, 16 * g:16 * g + 16]  # noqa: E731
        pairs = [(g1, g2) for g1 in range(nb) for g2 in range(nb) if g1 != g2
                 and np.array_equal(blk(ca, g2), blk(ca, g1) ^ 8) and np.array_equal(blk(cb, g2), blk(cb, g1))
                 and np.array_equal(a["a_scales"][:, g2] & 0x7F, a["a_scales"][:, g1] & 0x7F)
                 and np.array_equal(a["b_scales"][:, g2] & 0x7F, a["b_scales"][:, g1] & 0x7F)]
        seen += bool(pairs)
    assert seen >= 20


def test_self_conformance_mmasim_small(tmp_path):
    _needs_mmasim()
    code, stats = run(_cfg(tmp_path, backends=["mmasim"], max_cases=8))
    assert code == 0, [f.get("mismatch_text") for f in stats.failures]
    assert {op for (_, op) in stats.tasks} == {"mma_sm100", "mma_tc"}


def test_without_mmasim_the_backend_is_unavailable_and_its_ops_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(ind, "import_mmasim", lambda: None)
    reason = MmasimBackend().available()
    assert reason is not None and "mmasim" in reason
    code, stats = run(_cfg(tmp_path, backends=["mmasim"], max_cases=2))
    assert code == 2  # no case ran
    assert {(s["backend"], s["op"]) for s in stats.skipped} == {("mmasim", "mma_sm100"), ("mmasim", "mma_tc")}


class _UnfusedBias(MmasimBackend):
    """mmasim with a planted bug in its epilogue: a bias is added after rounding alpha * acc (12.2's order, not the
    fused multiply-add of SPEC 12.7)."""

    name = "test-mmasim-unfused-bias"

    def run(self, op, case):
        out = super().run(op, case)
        if op == "mma_sm100" and "bias" in case.arrays and "c" not in case.arrays:
            alpha = case.options["alpha"]
            alpha = np.float32(np.float32(1.0) * np.float32(1.0 / 7225344.0)) if alpha is None else np.float32(alpha)
            bias = case.arrays["bias"].astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                y = ((alpha * out["acc"]).astype(np.float32) + bias[None, :]).astype(np.float32)
            out["y"] = y.astype(out["y"].dtype)
        return out


register_backend(_UnfusedBias.name, _UnfusedBias)


def test_a_wrong_epilogue_is_caught_shrunk_saved_and_replayed(tmp_path, capsys):
    _needs_mmasim()
    be = _UnfusedBias()
    found = None
    for i in range(400):
        c = generate("mma_sm100", 9, i, "mma", OPS["mma_sm100"].space)
        if "bias" in c.arrays and "c" not in c.arrays and compare(c, reference(c), be.run("mma_sm100", c), "bytes"):
            found = c
            break
    assert found is not None

    def fails(cand):
        ms = compare(cand, reference(cand), be.run("mma_sm100", cand), "bytes")
        return frozenset(m.buffer for m in ms) or None

    small, tried = shrink(found, fails, deadline=time.monotonic() + 60)
    assert tried > 1 and case_size(small) < case_size(found) and fails(small) == {"y"}
    path = save_case(tmp_path / "case.npz", small, backend=be.name, ref=reference(small),
                     extra=dict(backend_spec=be.name))
    back, _, _, _ = load_case(path)
    assert np.array_equal(back.arrays["a_scales"], small.arrays["a_scales"])
    assert replay(str(path)) == 1
    assert replay(str(path), backend="mmasim") == 0
    capsys.readouterr()
