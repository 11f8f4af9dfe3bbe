"""GPU tests of the grouped GEMM over operands quantized under the torchao scale rules (SPEC 12.1 alpha: P_A * P_B
under "torchao", 1 under "torchao_noscale"; SPEC 12.3: a NaN block scale makes its row of A or row of B NaN).

The contracts are those of tests/test_device_gemm.py (exact mode byte-identical to ``oracle.gemm(model="sequential")``,
fast mode within ``oracle.gemm_error_bound`` and byte-identical to ``model="tensor_core"``), on the algorithms of both
modes, with operands that hold what these rules make of odd data: a NaN element (its block's scale byte is NaN), a
group of zeros (under "torchao" P = 0, so every scale of the group is 0/0 = NaN), an Inf element, and an empty group.
Under "torchao" a NaN element also makes its group's amax, P and alpha NaN (SPEC 4.1), so the whole group is NaN;
under "torchao_noscale" only its block's scale is NaN, so exactly its row of A or row of B is NaN (the premise checks
below say which). Outputs start as a finite sentinel, not NaN, so an unwritten element cannot pass as an expected NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from test_device_gemm import (  # noqa: E402
    DEV,
    FULL,
    _gg,
    _needs_cutlass,
    capture_graph,
    check_group,
    check_row_groups,
    check_wgrad_groups,
    gemm,
    gq,
    guarded,
    rand_bf16,
    rand_splits,
    to_np,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

RULES = ("torchao", "torchao_noscale")
SENTINEL = 1.5 * 2.0**100  # exact in bf16 and fp32, and no product of these operands comes near it
SPLITS = [0, 130, 1, 77, 40]  # an empty group, groups of 130 / 1 / 77 / 40 rows (zeros, Inf, NaN placed below)
STARTS = np.cumsum([0] + SPLITS)  # group g's rows: STARTS[g] .. STARTS[g + 1]
RHT_SIGNS = 0x5A3C  # a sign mask other than the default (wgrad's operands, both)
N, K = 272, 256


def sentinel_out(shape, dtype, values=None):
    """guarded() with a finite sentinel instead of NaN (or a copy of ``values``)."""
    return guarded(shape, dtype, values=torch.full(shape, SENTINEL, dtype=dtype, device=DEV)
                   if values is None else values)


def odd_tokens(cols: int, seed: int) -> torch.Tensor:
    """bf16 token rows [sum(SPLITS), cols]: group 3 gets a NaN (row 5, col 19), group 2 is all zeros, group 4 an Inf
    (row 1, col 40); the rest is rand_bf16's data with outliers and zeros."""
    x = rand_bf16((int(STARTS[-1]), cols), seed)
    x[STARTS[3] + 5, 19] = float("nan")
    x[STARTS[2]:STARTS[3]] = 0.0
    x[STARTS[4] + 1, 40] = float("inf")
    return x


def odd_weights(e: int, n: int, k: int, rule: str, seed: int):
    """E experts of [n, k] bf16 weights, both planes (16x16 blocks): expert 1 all zeros, expert 3 with a NaN at
    (row 3, col 33), expert 4 with a -Inf at (row 7, col 70)."""
    w = rand_bf16((e * n, k), seed, 0.05)
    w[n:2 * n] = 0.0
    w[3 * n + 3, 33] = float("nan")
    w[4 * n + 7, 70] = float("-inf")
    return gq(w, [n] * e, rowwise=True, columnwise=True, block=(16, 16), rule=rule)


def plan_kw(algorithm: str | None) -> dict:
    """gemm()'s keywords forcing ``algorithm`` (None: chosen by the sizes)."""
    if algorithm == "copies_cutlass":
        _needs_cutlass()
    return dict(algorithm=algorithm)


FAST = [None, "swapped_64x256", "swapped_256x128", "fused_64x256", "fused_128x256", "fused_pair_256x256",
        "copies_cutlass"]
EXACT = ["exact_fused", "exact_copies"]


def _row_cases(wgrad: bool):
    fast = [a for a in FAST if not (wgrad and a == "swapped_64x256")]
    return [("fast", a) for a in fast] + [("exact", a) for a in EXACT]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("mode,algorithm", _row_cases(False))
def test_fprop(rule, mode, algorithm):
    e, t = len(SPLITS), sum(SPLITS)
    xq = gq(odd_tokens(K, 1), SPLITS, rule=rule)
    wq = odd_weights(e, N, K, rule, 2)
    bias = (torch.randn((e, N), dtype=torch.float32) * 3).to(DEV)
    out, check_tail = sentinel_out((t, N), torch.bfloat16)
    gemm(xq, wq, kind="fprop", out=out, bias=bias, mode=mode, **plan_kw(algorithm))
    check_tail("fprop")
    y = to_np(out)
    check_row_groups(y, SPLITS, xq.to_oracle().row_planes, wq.to_oracle().row_planes, mode, torch.bfloat16,
                     bias=bias.cpu().numpy(), where=f"fprop {rule}")
    _premises(y, rule, where="fprop")


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("mode,algorithm", _row_cases(False))
def test_dgrad(rule, mode, algorithm):
    e, t = len(SPLITS), sum(SPLITS)
    dyq = gq(odd_tokens(N, 3), SPLITS, rule=rule)
    wq = odd_weights(e, N, K, rule, 4)
    out, check_tail = sentinel_out((t, K), torch.float32)
    gemm(dyq, wq, kind="dgrad", out=out, mode=mode, **plan_kw(algorithm))
    check_tail("dgrad")
    y = to_np(out)
    check_row_groups(y, SPLITS, dyq.to_oracle().row_planes, wq.to_oracle().col_planes, mode, torch.float32,
                     where=f"dgrad {rule}")
    g3 = y[STARTS[3]:STARTS[4]]  # expert 3's NaN weight (row 3, col 33): W^T's row 33, output column 33
    assert np.isnan(g3[:, 33]).all() and np.isnan(g3).all() == (rule == "torchao")  # ("torchao": dY's NaN, W's amax)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("mode,algorithm", _row_cases(True))
@pytest.mark.parametrize("accumulate,rht", [(False, False), (True, True)])
def test_wgrad(rule, mode, algorithm, accumulate, rht):
    e, t = len(SPLITS), sum(SPLITS)
    n, k = 80, 48
    q = dict(rowwise=False, columnwise=True, rule=rule, rht=rht, rht_signs=RHT_SIGNS)
    dyq = gq(odd_tokens(n, 5), SPLITS, **q)
    xq = gq(rand_bf16((t, k), 6), SPLITS, **q)
    c = None
    if accumulate:
        c = (torch.randn((e, n, k), dtype=torch.float32) * 0.5).to(DEV)
        c[0, 0, :4] = -0.0
    out, check_tail = sentinel_out((e, n, k), torch.float32, values=c)
    gemm(dyq, xq, kind="wgrad", out=out, accumulate=accumulate, mode=mode, **plan_kw(algorithm))
    check_tail("wgrad")
    y = to_np(out)
    cn = None if c is None else c.cpu().numpy()
    # (the empty expert: alpha = 0 * P_B = 0, amax 0, so dW = 0; accumulating, C untouched bit for bit)
    check_wgrad_groups(y, SPLITS, dyq.to_oracle().col_planes, xq.to_oracle().col_planes, mode, torch.float32, cn=cn,
                       where=f"wgrad {rule}")
    # premise: dY's group of zeros makes all of dW_2 NaN under "torchao" (P = 0: every scale NaN) and not otherwise
    assert np.isnan(y[2]).all() == (rule == "torchao")
    # the NaN of dY's group 3 (column 19 of its columnwise plane): dW_3's row 19 is NaN, and under "torchao" all of
    # dW_3 (the group's amax is NaN)
    assert np.isnan(y[3][19]).all() and np.isnan(y[3]).all() == (rule == "torchao")


def _premises(y: np.ndarray, rule: str, where: str) -> None:
    """The fprop operands do what the test means them to: expert 1's zero weights make all of group 1's output NaN
    under "torchao" only (P = 0). The NaN token of group 3 makes its output row 5 NaN and expert 3's NaN weight (its
    row 3) makes column 3 NaN; under "torchao" all of group 3 is NaN (both amaxes NaN), under "torchao_noscale" not."""
    y = np.asarray(y, np.float32)
    assert np.isnan(y[STARTS[1]:STARTS[2]]).all() == (rule == "torchao"), f"{where}: expert 1 of zeros"
    g3 = y[STARTS[3]:STARTS[4]]
    assert np.isnan(g3[5]).all() and np.isnan(g3[:, 3]).all(), f"{where}: group 3's NaN row and column"
    assert np.isnan(g3).all() == (rule == "torchao"), f"{where}: group 3"


def test_alpha_is_the_spec_rule():
    """SPEC 12.1 on the device, with no NaN or zero group: fprop of one expert (amaxes 668 and 5.84375) where the TE
    rule's alpha, (A * B) * fp32(1/7225344), is one ulp away from torchao's (A / 2688) * (B / 2688) (checked below);
    exact mode is the oracle's sequential model bit for bit, so the device must use the rule's own alpha."""
    for rule in RULES:
        x = rand_bf16((64, 64), 7, 7.3)
        w = rand_bf16((48, 64), 8, 0.07)
        xq, wq = gq(x, [64], rule=rule), gq(w, [48], rule=rule)
        a, b = float(xq.row_amax.cpu()[0]), float(wq.row_amax.cpu()[0])
        te_alpha = np.float32(np.float32(a) * np.float32(b)) * np.float32(1 / 7225344)
        want = np.float32(1) if rule == "torchao_noscale" else np.float32(a / np.float32(2688)) * np.float32(
            b / np.float32(2688))
        assert te_alpha != want  # premise: the TE formula would give another alpha on these amaxes
        out = _gg()(xq, wq, kind="fprop", mode="exact", out_dtype=torch.float32)
        check_group(to_np(out), xq.to_oracle().row_planes[0], wq.to_oracle().row_planes[0], "exact", torch.float32,
                    where=f"alpha {rule}")


def test_mixed_rules_refused():
    import device

    x = rand_bf16((32, 32), 9)
    s = torch.tensor([32], device=DEV)
    te = device.group_quantize(x, s)
    ao = device.group_quantize(x, s, rule="torchao")
    ns = device.group_quantize(x, s, rule="torchao_noscale")
    for a, b in ((ao, te), (te, ao), (ao, ns), (ns, te)):
        with pytest.raises(ValueError, match="incompatible scale rules"):
            _gg()(a, b, kind="fprop")


@pytest.mark.parametrize("kind", ["fprop", "wgrad"])
def test_cuda_graph_replay(kind):
    """Capture quantize (rule "torchao") + grouped GEMM once, replay with new data and new splits, each replay against
    the oracle; every third replay zeroes a group (P = 0: NaN scales, alpha 0) and puts a NaN into another (NaN amax,
    NaN alpha), so the captured setup kernel's per-group alphas follow the data."""
    import device

    gg = _gg()
    e, t, n, k = 4, 256, 64, 128
    replays = 100 if FULL else 12
    x_buf = torch.zeros((t, k), dtype=torch.bfloat16, device=DEV)
    dy_buf = torch.zeros((t, n), dtype=torch.bfloat16, device=DEV)
    splits_buf = torch.tensor([t // e] * e, dtype=torch.int64, device=DEV)
    wq = gq(rand_bf16((e * n, k), 11, 0.05), [n] * e, block=(16, 16), rule="torchao")
    out = torch.empty((t, n) if kind == "fprop" else (e, n, k), dtype=torch.float32, device=DEV)
    q = dict(rule="torchao")

    def step():
        if kind == "fprop":
            xq = device.group_quantize(x_buf, splits_buf, rowwise=True, **q)
            gg(xq, wq, kind="fprop", out=out, mode="exact")
            return xq, None
        dyq = device.group_quantize(dy_buf, splits_buf, rowwise=False, columnwise=True, **q)
        xq = device.group_quantize(x_buf, splits_buf, rowwise=False, columnwise=True, **q)
        gg(dyq, xq, kind="wgrad", out=out, mode="fast")
        return xq, dyq

    graph, (xq, dyq) = capture_graph(step)
    for it in range(replays):
        splits = rand_splits(e, t, 300 + it)
        x, dy = rand_bf16((t, k), 3000 + it), rand_bf16((t, n), 4000 + it)
        if it % 3 == 0:
            splits = [60, 0, 100, 96]
            x[60 + 100:] = 0.0  # group 3 of x all zeros
            dy[60 + 100:] = 0.0
            x[7, 5] = float("nan")  # a NaN in group 0
            dy[7, 5] = float("nan")
        splits_buf.copy_(torch.tensor(splits, dtype=torch.int64))
        x_buf.copy_(x)
        dy_buf.copy_(dy)
        out.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        y = to_np(out)
        xo = xq.to_oracle()
        if kind == "fprop":
            check_row_groups(y, splits, xo.row_planes, wq.to_oracle().row_planes, "exact", torch.float32,
                             where=f"replay {it}")
        else:
            check_wgrad_groups(y, splits, dyq.to_oracle().col_planes, xo.col_planes, "fast", torch.float32,
                               where=f"replay {it}")
        if it % 3 == 0:  # premise: the zero group and the NaN group are all NaN
            rows = (slice(0, 60), slice(160, 256)) if kind == "fprop" else (0, 3)
            assert all(np.isnan(y[r]).all() for r in rows), f"replay {it}: NaN groups"
