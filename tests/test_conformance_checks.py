"""What each conformance check catches: a planted wrong output (or a wrong step of the runner) per check, with the
expected location or verdict worked out from SPEC.md by hand. Each test failed against a copy of the package with
that check weakened (a padding byte skipped, NaN payloads ignored, the rht tolerance doubled, exact-domain blocks
compared within the tolerance, empty wgrad experts not checked, a group located one too early, a shrinker drifting to
another failure, merged errors dropped, a swapped amax pair in the diagnosis, the torchao backend swizzling with the
oracle's code, no -0 among the specials)."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import QUANTIZE_OPTIONS, quantize_case

from conformance.cases import Case
from conformance.compare import compare, rht_exact_domain
from conformance.generators import generate
from conformance.ops import reference


def _rht_case(x: np.ndarray) -> Case:
    return Case("rht", 0, 0, {"x": x.astype(ml_dtypes.bfloat16)}, {"rht_signs": 0}, {})


def test_swizzled_padding_bytes_are_compared():
    """SPEC 8.2: byte 511 of a 3-row plane's swizzled scales is tile 0, row 3 * 32 + 31 = 127, column 3: padding,
    which must be 0x00 (8.1)."""
    c = quantize_case(np.ones((3, 32), np.float32))
    ref = reference(c)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_scales_swizzled"][511] = 0x38
    (m,) = compare(c, ref, out)
    assert m.buffer == "row_scales_swizzled" and (m.where["row"], m.where["block"], m.where["padding"]) == (127, 3, True)


def test_a_supplied_nan_amax_keeps_its_bits():
    """SPEC 4.3: a supplied amax is used as is, payload included, so another NaN's bits are a mismatch."""
    c = quantize_case(np.ones((2, 16), np.float32))
    c.arrays["amax"] = np.array([0x7FC00001], np.uint32).view(np.float32)
    ref = reference(c)
    assert ref["row_amax"].view(np.uint32)[0] == 0x7FC00001
    out = dict(ref, row_amax=np.array([0x7FC00000], np.uint32).view(np.float32))
    assert [m.buffer for m in compare(c, ref, out)] == ["row_amax"]


def test_rht_tolerance_is_the_documented_one():
    """SPEC 14.2's tolerance on a block outside the exact domain (exponent span 20): x = [2^20, 1, 0 ...], signs +1,
    so y_0 = (2^20 + 1) / 4 rounds to bf16 2^18, whose ulp is 2^11: tol = (2^20 + 1) 2^-23 + 2^11 + 2^-133, about
    2048.1. One ulp off passes, two fail."""
    x = np.zeros((1, 16), np.float32)
    x[0, 0], x[0, 1] = 2.0**20, 1.0
    c = _rht_case(x)
    ref = reference(c)
    assert not rht_exact_domain(c.arrays["x"])[0]
    for ulps, fails in ((1, False), (2, True)):
        y = ref["y"].copy()
        y[0, 0] += ulps
        assert bool(compare(c, ref, {"y": y}, "rht")) == fails, ulps


def test_one_ulp_in_an_exact_domain_rht_block_mismatches():
    """16 ones, signs +1: y_0 = 16 / 4 = 4.0 (bf16 0x4080) exactly (SPEC 7.2); 0x4081 is a mismatch there."""
    c = _rht_case(np.ones((1, 16), np.float32))
    ref = reference(c)
    assert rht_exact_domain(c.arrays["x"])[0] and ref["y"][0, 0] == 0x4080
    y = ref["y"].copy()
    y[0, 0] = 0x4081
    (m,) = compare(c, ref, {"y": y}, "rht")
    assert m.where["exact_domain"] is True


def test_an_empty_wgrad_expert_is_checked():
    """SPEC 12.5: an empty expert's dW without C is an empty sum, 0; a 1 there is a mismatch of that group."""
    found = None
    for i in range(400):
        c = generate("grouped_gemm", 5, i, "grouped_gemm", {"kind": ["wgrad"], "groups_agree": [True]})
        if (c.arrays["splits"] == 0).any() and "c" not in c.arrays:
            found = c
            break
    assert found is not None
    ref = reference(found)
    g = int(np.flatnonzero(found.arrays["splits"] == 0)[0])
    assert not np.asarray(ref["y"][g], np.float32).any()
    y = ref["y"].copy()
    y[g, 0, 0] = 1.0
    (m,) = compare(found, ref, {"y": y}, "bound", {})
    assert m.where["group"] == g


def test_first_byte_of_a_group_is_located_in_that_group():
    """SPEC 9.2: with splits [10, 0, 10] and K = 32, group 2's data starts at byte (10 + 0) * 16 = 160."""
    c = Case("group_quantize", 0, 0, {"x": np.ones((20, 32), np.float32), "splits": np.array([10, 0, 10])},
             dict(QUANTIZE_OPTIONS), {})
    ref = reference(c)
    out = {k: v.copy() for k, v in ref.items()}
    out["row_data"][160] ^= 0x01
    (m,) = compare(c, ref, out)
    assert (m.where["group"], m.where["row"]) == (2, 0)


def test_shrinker_does_not_drift_to_another_failure():
    """Smaller cases that fail only in another buffer are not the same failure: the shrinker keeps the original."""
    from conformance.shrink import shrink

    c = quantize_case(np.ones((8, 32), np.float32))

    def fails(k):
        return frozenset({"row_data"}) if k.arrays["x"].shape == (8, 32) else frozenset({"row_amax"})

    small, _ = shrink(c, fails, deadline=time.monotonic() + 10)
    assert small.arrays["x"].shape == (8, 32)


def test_merge_counts_errors_of_every_shard():
    """A shard that raised keeps its error in the merge (exit code 1), whatever the other shard did."""
    from conformance.report import Stats, merge_reports

    docs = []
    for i, status in enumerate(["pass", "error"]):
        st = Stats()
        st.add(dict(backend="b", op="e2m1", index=i, status=status, seconds=0.1, tags={}))
        config = dict(seed=0, shard=[i, 2], max_cases=None, ops=None, backends_used=["b"])
        docs.append((f"r{i}", st.to_json(config, int(status != "pass"))))
    _, doc, _ = merge_reports(docs)
    assert doc["totals"]["errors"] == 1 and doc["exit_code"] == 1


def test_diagnosis_uses_each_planes_supplied_amax():
    """A supplied (row, col) pair: the columnwise plane is diagnosed with the col value; one flipped nibble then
    leaves one differing block of 32 (ones, 16 x 32: X^T has 32 rows of one block each)."""
    from conformance.diagnosis import failure_hypotheses

    c = quantize_case(np.ones((16, 32), np.float32), columnwise=True)
    c.arrays["amax"] = np.array([1.0, 4.0], np.float32)
    ref = reference(c)
    out = {k: v.copy() for k, v in ref.items()}
    out["col_data"][0, 0] ^= 0x01
    assert failure_hypotheses(c, out, ref)[0] == "col plane: closest te (amax given), 1 of 32 blocks differ"


@pytest.mark.torch
def test_torchao_backend_swizzle_is_torchaos_own(monkeypatch):
    """The torchao backend's swizzled scales come from torchao's to_blocked, never the oracle's swizzle (which the
    reference uses: sharing it would hide a swizzle bug). Both give the same bytes on valid scales, so torchao's is
    made recognisable here: to_blocked patched to return its bytes XOR 0xFF, which the backend must pass on."""
    import torch

    from conformance import independent as ind

    _, utils = ind.import_torchao()
    to_blocked = utils.to_blocked
    calls = []

    def marked(t):
        calls.append(1)
        return to_blocked(t) ^ 0xFF

    x = np.random.default_rng(0).standard_normal((200, 80)).astype(np.float32)
    monkeypatch.setattr(utils, "to_blocked", marked)
    out = ind.torchao_quantize(x, rule="torchao", rowwise=True, columnwise=False)
    want = to_blocked(torch.from_numpy(out["row_scales"])).reshape(-1).numpy() ^ 0xFF
    assert calls and np.array_equal(out["row_scales_swizzled"], want)


@pytest.mark.torch
@pytest.mark.parametrize(("rule", "nan_bits"), [("torchao", 0x7FF0), ("torchao_noscale", 0x7FC0)])
def test_torchao_backend_bytes_do_not_depend_on_torchs_thread_count(rule, nan_bits):
    """SPEC 3.5: torch's CPU product of two NaNs keeps the multiplier's payload, except next to a cut of torch's
    parallel split, whose place depends on the thread count (at 2 threads, 6 of the 168,592 products of a [257, 656]
    tensor keep x's payload). The torchao backend runs torchao on one intra-op thread, so its bytes are the SPEC's
    whatever the caller set. A NaN block straddling the 2-thread cut (row 128, block 20), quantized with the caller at
    2 and 3 threads, gives the oracle's bytes, and the caller's thread count is restored. The block's payload differs
    from its multiplier's in 3.5's index: under "torchao" the multiplier carries P's canonical 0x7FC00000 (index 3)
    and x holds 0x7FF00000 (index 4); under "torchao_noscale" the NaN byte's 0x7FF00000 against x's 0x7FC00000."""
    import torch

    import oracle
    from conformance import independent as ind

    x = np.random.default_rng(1).standard_normal((257, 656)).astype(ml_dtypes.bfloat16)
    x.reshape(-1).view(np.uint16)[84288:84304] = nan_bits  # every product of the block is NaN x NaN
    want = oracle.quantize(x, rule=rule)
    before = torch.get_num_threads()
    try:
        for threads in (2, 3):
            torch.set_num_threads(threads)
            out = ind.torchao_quantize(x, rule=rule, rowwise=True, columnwise=False)
            assert torch.get_num_threads() == threads
            assert np.array_equal(out["row_data"], want.row.data), threads
            assert np.array_equal(out["row_scales"], want.row.scales), threads
    finally:
        torch.set_num_threads(before)


@pytest.mark.torch
def test_torchao_backend_drops_nan_inputs_where_torch_keeps_xs_payload():
    """SPEC 3.5 models torch's x86 AVX2 / AVX512 kernels, whose NaN x NaN product keeps the multiplier's payload;
    torch's DEFAULT kernels (ATEN_CPU_CAPABILITY=default: CPUs without AVX2, aarch64) keep x's for most products.
    The torchao backend probes it and, where torch keeps x's, leaves NaN inputs out of its quantize space: a Python
    with the DEFAULT kernels gets specials=False; an AVX2 / AVX512 torch keeps NaN inputs."""
    import os
    import subprocess
    import sys

    from conformance import independent as ind
    from conformance.backends import make_backend

    script = ("from conformance import independent as ind\n"
              "from conformance.backends import make_backend\n"
              "print(ind.torch_nan_products_keep_the_multiplier(), make_backend('torchao').space('quantize')"
              ".get('specials'))\n")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"], r.stdout
    import torch

    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        assert ind.torch_nan_products_keep_the_multiplier()
        assert "specials" not in make_backend("torchao").space("quantize")


def test_generated_specials_include_negative_zero():
    """Quantize cases of normal values with specials hold -0 (normal values are never exactly 0, so the -0 comes from
    the specials)."""
    seen = 0
    for i in range(400):
        c = generate("quantize", 0, i, "quantize")
        if c.tags["values"] == "normal" and c.tags["specials"] != "none":
            x = c.arrays["x"].astype(np.float32)
            seen += bool(((x == 0) & np.signbit(x)).any())
    assert seen >= 5
