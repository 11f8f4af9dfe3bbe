"""GPU tests of the NVFP4 grouped GEMM (device/gemm.py, SPEC 12) against the NumPy oracle.

* ``mode="exact"`` must be byte-identical to ``oracle.gemm(model="sequential")`` on each group's planes.
* ``mode="fast"`` must satisfy ``oracle.within_bound(y, oracle.gemm(model="exact"), oracle.gemm_error_bound(...))``
  for EVERY element (no global tolerance), and be byte-identical to ``oracle.gemm(model="tensor_core")`` (SPEC 12.6).
Operands come from ``device.group_quantize``; the oracle side uses their ``.to_oracle()`` planes. Output buffers
are poisoned (NaN) so unwritten rows fail. Every test is marked ``cuda`` and skipped without a GPU.
``NVFP4_FULL=1`` runs 100 CUDA-graph replays instead of 12.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

import oracle  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FULL = bool(os.environ.get("NVFP4_FULL"))
DEV = "cuda"


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------

def _device():
    import device

    return device


def _gg():
    from device.gemm import grouped_gemm

    return grouped_gemm


@contextlib.contextmanager
def capped(num_sms):
    """``device.set_num_sms(num_sms)`` within the block (None: the cap as it is), the previous cap restored after it,
    also when the block raises."""
    if num_sms is None:
        yield
        return
    dev = _device()
    before = dev.get_num_sms()
    dev.set_num_sms(num_sms)
    try:
        yield
    finally:
        dev.set_num_sms(before)


def gemm(a, b, *, algorithm=None, loader=None, epilogue=None, num_sms=None, **kw):
    """``device.grouped_gemm(a, b, **kw)`` with the named parts of its plan forced (``device.testing.force_plan``;
    None: chosen by the sizes) and its persistent grid capped at ``num_sms`` CTAs (``device.set_num_sms``)."""
    from device.testing import force_plan

    with force_plan(algorithm=algorithm, loader=loader, epilogue=epilogue), capped(num_sms):
        return _gg()(a, b, **kw)


def sentinel_out(shape, dtype=torch.float32):
    """An output buffer holding 7.0 everywhere, for calls that would otherwise allocate theirs: a freshly allocated
    output may be the block of an earlier call that held the same correct result, so a call that writes nothing
    could pass."""
    return torch.full(shape, 7.0, dtype=dtype, device=DEV)


def rand_bf16(shape, seed, scale=1.0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32) * scale
    # a few outliers and exact zeros, so blocks get different scales
    if x.numel():
        flat = x.view(-1)
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 97),), generator=g)
        flat[idx] *= 40.0
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 89),), generator=g)
        flat[idx] = 0.0
    return x.to(torch.bfloat16).to(DEV)


def gq(x, splits, *, rowwise=True, columnwise=False, block=(1, 16), **opts):
    """device.group_quantize of ``x`` with host ``splits``; ``opts``: its other keywords (rule, rht, rht_signs, ...)."""
    s = torch.tensor(list(splits), dtype=torch.int64, device=DEV)
    return _device().group_quantize(x, s, rowwise=rowwise, columnwise=columnwise, block=block, **opts)


def _needs_cutlass():
    """Skip when the GEMM extension was built without CUTLASS's headers (the nvidia-cutlass wheel is missing)."""
    from device._build import load_gemm_extension

    if not load_gemm_extension().has_cutlass():
        pytest.skip("copies_cutlass is not built (nvidia-cutlass not installed)")


def weights(e, n, k, seed):
    w = rand_bf16((e * n, k), seed, 0.05)
    return gq(w, [n] * e, rowwise=True, columnwise=True, block=(16, 16))


GUARD = 256  # elements of sentinel past every output tensor: a write past the end fails the test


def guarded(shape, dtype, values=None):
    """A contiguous, 16-byte aligned output tensor (NaN, or a copy of ``values``) that is the head of a larger buffer,
    and a check that the tail (GUARD elements, a sentinel value) is still untouched after the call."""
    n = int(np.prod(shape))
    buf = torch.full((n + GUARD,), float("nan"), dtype=dtype, device=DEV)
    buf[n:] = 12288.0  # 3 * 2^12: exact in bf16 and fp32
    out = buf[:n].view(shape)
    if values is not None:
        out.copy_(values)

    def check_tail(where=""):
        tail = buf[n:].float().cpu()
        assert bool((tail == 12288.0).all()), f"{where}: written past the end of out"

    return out, check_tail


def to_np(y: torch.Tensor) -> np.ndarray:
    y = y.detach().cpu()
    if y.dtype == torch.bfloat16:
        return y.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return y.numpy()


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a.view(np.uint32)


def _assert_same_bits(y, ref, od, where, what):
    ref = ref.astype(ml_dtypes.bfloat16) if od == "bfloat16" else ref.astype(np.float32)
    nan = np.isnan(np.asarray(y, np.float32)) & np.isnan(np.asarray(ref, np.float32))  # NaN payloads are free
    bad = (bits(y) != bits(ref)) & ~nan
    if bad.any():
        idx = np.argwhere(bad)[:5]
        raise AssertionError(f"{where}: {what} at {bad.sum()} elements, "
                             f"e.g. {[(tuple(i), float(y[tuple(i)]), float(ref[tuple(i)])) for i in idx]}")


def check_group(y, a_plane, b_plane, mode, out_dtype, bias=None, acc=None, where=""):
    """y: numpy result of one group; compares against the oracle per the mode's contract."""
    od = "float32" if out_dtype == torch.float32 else "bfloat16"
    kw = dict(out_dtype=od, bias=bias, accumulate=acc)
    if mode == "exact":
        ref = oracle.gemm(a_plane, b_plane, model="sequential", **kw)
        _assert_same_bits(y, ref, od, where, "exact mode differs from oracle sequential")
    elif mode == "sm100":
        ref = oracle.gemm(a_plane, b_plane, model="sm100", **kw)
        _assert_same_bits(y, ref, od, where, "sm100 mode differs from oracle sm100 (SPEC 12.7)")
    else:
        ye = oracle.gemm(a_plane, b_plane, model="exact", **kw)
        bnd = oracle.gemm_error_bound(a_plane, b_plane, **kw)
        ok = oracle.within_bound(y, ye, bnd)
        if not ok.all():
            idx = np.argwhere(~ok)[:5]
            raise AssertionError(f"{where}: fast mode outside the SPEC 12.4 bound at {(~ok).sum()} elements, e.g. "
                                 f"{[(tuple(i), float(y[tuple(i)]), float(ye[tuple(i)]), bnd[tuple(i)]) for i in idx]}")
        # SPEC 12.6: the fast mode is the Hopper tensor-core model bit for bit
        ref = oracle.gemm(a_plane, b_plane, model="tensor_core", **kw)
        _assert_same_bits(y, ref, od, where, "fast mode differs from oracle tensor_core")


def check_row_groups(yn, splits, a_planes, b_planes, mode, out_dtype, bias=None, where=""):
    """check_group on every non-empty group of a fprop / dgrad result, whose groups are stacked along the rows:
    group g's rows against a_planes[g], b_planes[g] (and bias[g] when a bias is given)."""
    r0 = 0
    for g, m in enumerate(splits):
        if m:
            check_group(yn[r0:r0 + m], a_planes[g], b_planes[g], mode, out_dtype,
                        bias=None if bias is None else bias[g], where=f"{where} g={g}")
        r0 += m


def run_fprop(splits, n, k, mode, out_dtype, with_bias, seed=0, **plan):
    """fprop of random tokens against random weights into a guarded output, each group against the oracle; ``plan``:
    gemm()'s algorithm / loader / epilogue / num_sms."""
    e = len(splits)
    t = int(sum(splits))
    x = rand_bf16((t, k), seed + 1)
    xq = gq(x, splits, rowwise=True)
    wq = weights(e, n, k, seed + 2)
    bias = (torch.randn((e, n), dtype=torch.float32) * 3).to(DEV) if with_bias else None
    out, check_tail = guarded((t, n), out_dtype)
    y = gemm(xq, wq, kind="fprop", out=out, out_dtype=out_dtype, bias=bias, mode=mode, **plan)
    assert y is out
    check_tail("fprop")
    yn = to_np(y)
    xo, wo = xq.to_oracle(), wq.to_oracle()
    bn = None if bias is None else bias.cpu().numpy()
    check_row_groups(yn, splits, xo.row_planes, wo.row_planes, mode, out_dtype, bias=bn, where="fprop")


def run_dgrad(splits, n, k, mode, out_dtype, with_bias=False, seed=0, **plan):
    e = len(splits)
    t = int(sum(splits))
    dy = rand_bf16((t, n), seed + 3)
    dyq = gq(dy, splits, rowwise=True)
    wq = weights(e, n, k, seed + 4)
    bias = (torch.randn((e, k), dtype=torch.float32)).to(torch.bfloat16).to(DEV) if with_bias else None
    out, check_tail = guarded((t, k), out_dtype)
    gemm(dyq, wq, kind="dgrad", out=out, bias=bias, mode=mode, **plan)
    check_tail("dgrad")
    yn = to_np(out)
    dyo, wo = dyq.to_oracle(), wq.to_oracle()
    bn = None if bias is None else bias.float().cpu().numpy()
    check_row_groups(yn, splits, dyo.row_planes, wo.col_planes, mode, out_dtype, bias=bn, where="dgrad")


def run_wgrad(splits, n, k, mode, out_dtype, accumulate, seed=0, **plan):
    e = len(splits)
    t = int(sum(splits))
    dy = rand_bf16((t, n), seed + 5)
    x = rand_bf16((t, k), seed + 6)
    dyq = gq(dy, splits, rowwise=False, columnwise=True)
    xq = gq(x, splits, rowwise=False, columnwise=True)
    if accumulate:
        c = (torch.randn((e, n, k), dtype=torch.float32) * 0.5).to(DEV)
        c[0, 0, :4] = -0.0
        out, check_tail = guarded((e, n, k), out_dtype, values=c)
    else:
        c = None
        out, check_tail = guarded((e, n, k), out_dtype)
    gemm(dyq, xq, kind="wgrad", out=out, out_dtype=out_dtype, accumulate=accumulate, mode=mode, **plan)
    check_tail("wgrad")
    yn = to_np(out)
    cn = None if c is None else c.cpu().numpy()
    dyo, xo = dyq.to_oracle(), xq.to_oracle()
    check_wgrad_groups(yn, splits, dyo.col_planes, xo.col_planes, mode, out_dtype, cn=cn, where="wgrad")


def check_wgrad_groups(y, splits, dy_planes, x_planes, mode, out_dtype, cn=None, where=""):
    """A wgrad result [E, N, K] group by group: an empty expert's dW is 0, or with C (``cn``, accumulating) C left
    untouched bit for bit (SPEC 12.5); every other group is check_group of its two columnwise planes (and C)."""
    for g, m in enumerate(splits):
        if m == 0:
            if cn is not None:
                assert np.array_equal(bits(y[g]), bits(cn[g])), f"{where} g={g}: empty expert changed C"
            else:
                assert not bits(y[g]).any(), f"{where} g={g}: empty expert not +0 (SPEC 12.2: alpha * +0)"
            continue
        check_group(y[g], dy_planes[g], x_planes[g], mode, out_dtype, acc=None if cn is None else cn[g],
                    where=f"{where} g={g}")


def planned(kind, splits, n, k, out_dtype, *, mode="fast", bias=False, accumulate=False, **forced):
    """The plan (device._dispatch.plan_gemm) of a call on these sizes with the ``forced`` parts (algorithm, loader,
    epilogue): a test's premise that it runs the path it means to. (The buffers' sizes are not known here: the loader
    of swapped_64x256, which depends on them, is not meant.)"""
    from device import _dispatch
    from device._build import load_gemm_extension

    problem = _dispatch.GemmProblem(
        kind=kind, mode=mode, groups=len(splits), tokens=int(sum(splits)), n=n, k=k,
        out_dtype="float32" if out_dtype == torch.float32 else "bfloat16", accumulate=accumulate, bias=bias,
        cutlass=bool(load_gemm_extension().has_cutlass()))
    return _dispatch.plan_gemm(problem, **forced)


def rand_splits(e, t, seed, zeros=True):
    rng = np.random.default_rng(seed)
    w = rng.random(e) ** 2
    if zeros and e > 2:
        w[rng.choice(e, size=max(1, e // 4), replace=False)] = 0
    s = np.floor(w / w.sum() * t).astype(np.int64)
    s[np.argmax(w)] += t - s.sum()
    return [int(v) for v in s]


# ------------------------------------------------------------------------------------------------------------
# shapes: (splits, N, K); K or N not multiples of 32/128, zeros, one giant expert, E in {1, 4, 8, 64}
# ------------------------------------------------------------------------------------------------------------

CASES = {
    "e1": ([200], 144, 160),
    "e4_zeros": ([0, 130, 1, 77], 272, 256),
    "e8_rand": (rand_splits(8, 700, 1), 128, 512),
    "e64": (rand_splits(64, 1000, 2), 48, 64),
    "giant": ([0, 1500, 0, 3], 96, 384),
}


@pytest.mark.parametrize("mode", ["exact", "fast", "sm100"])
@pytest.mark.parametrize("case", list(CASES))
def test_fprop(case, mode):
    splits, n, k = CASES[case]
    out_dtype = torch.float32 if case in ("e4_zeros", "e64") else torch.bfloat16
    run_fprop(splits, n, k, mode, out_dtype, with_bias=case in ("e1", "e4_zeros", "giant"))


@pytest.mark.parametrize("mode", ["exact", "fast", "sm100"])
@pytest.mark.parametrize("case", ["e1", "e4_zeros", "e8_rand", "e64", "giant"])
def test_dgrad(case, mode):
    splits, n, k = CASES[case]
    out_dtype = torch.float32 if case == "e8_rand" else torch.bfloat16
    run_dgrad(splits, n, k, mode, out_dtype, with_bias=case == "e4_zeros")


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("mode", ["exact", "fast", "sm100"])
@pytest.mark.parametrize("case", ["e1", "e4_zeros", "e8_rand", "e64", "giant"])
def test_wgrad(case, mode, accumulate):
    splits, n, k = CASES[case]
    run_wgrad(splits, n, k, mode, torch.float32, accumulate)


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_wgrad_bf16_out(mode):
    run_wgrad([5, 0, 40, 19], 64, 96, mode, torch.bfloat16, accumulate=False)


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_larger_fprop(mode):
    # several 128 x 128 tiles, K with a partial last K tile (K % 128 = 64), 16-byte loads (K % 32 = 0)
    run_fprop([300, 0, 517, 211], 384, 1088, mode, torch.bfloat16, with_bias=True, seed=7)


# <= 96 rows per group on average: the fused kernel with 64 x 256 tiles (fused_64x256, the fused kernel for these sizes;
# the automatic choice runs swapped_64x256 there, which test_swapped_kernel covers on the same cases). Groups
# longer than one 64-row tile (a 202-row group: 4 tiles, one of them in the second 128-row scale tile), N not a
# multiple of 256, K with a partial last K tile, both copy widths (K/2 % 16 == 0 and == 8), bias, fp32 output.
SKINNY_CASES = {
    "e8_bias": (rand_splits(8, 400, 5), 400, 160, torch.bfloat16, True),
    "e4_long_group_f32": ([0, 200, 1, 5], 144, 208, torch.float32, True),
    "e4_tiles_f32": ([0, 70, 9, 64], 272, 64, torch.float32, False),
    "e64": (rand_splits(64, 2000, 6), 128, 96, torch.bfloat16, False),
}


@pytest.mark.parametrize("case", list(SKINNY_CASES))
def test_fprop_few_rows_per_group(case):
    splits, n, k, od, with_bias = SKINNY_CASES[case]
    assert sum(splits) // len(splits) <= 96  # fused_64x256's range (device/_dispatch.py SKINNY_MAX_ROWS)
    run_fprop(splits, n, k, "fast", od, with_bias=with_bias, seed=21, algorithm="fused_64x256")


@pytest.mark.parametrize("case", ["e8_bias", "e4_long_group_f32"])
def test_dgrad_few_rows_per_group(case):
    splits, n, k, od, with_bias = SKINNY_CASES[case]
    assert sum(splits) // len(splits) <= 96
    run_dgrad(splits, k, n, "fast", od, with_bias=with_bias, seed=22, algorithm="fused_64x256")


# The 2-CTA cluster kernel (fused_pair_256x256: 256 x 256 cluster tiles; each CTA dequantizes half of the B tile and
# bulk-copies it into the other CTA's shared memory), chosen by size for >= 256 rows per group with contraction >= 1024
# and forced here on small problems: groups whose last cluster tile leaves the second CTA partly or wholly past the
# group (700 = 2 x 256 + 188, 129, 300), N not a multiple of 256 (the second CTA's B half partly or wholly past N), K
# tails, both copy widths, an odd number of K tiles, bias, fp32 output.
PAIR_CASES = {
    "e4_tails_bias": ([0, 700, 129, 300], 400, 208, torch.bfloat16, True),
    "e2_odd_kt_f32": ([769, 255], 272, 1088, torch.float32, False),
    "e8_one_giant": ([0, 0, 2000, 0, 0, 0, 48, 0], 128, 96, torch.bfloat16, True),
}


@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_fprop_pair_cluster(case):
    splits, n, k, od, with_bias = PAIR_CASES[case]
    forced = None if case == "e2_odd_kt_f32" else "fused_pair_256x256"
    if forced is None:  # that one is chosen by size: 512 rows per group on average (whole 256-row tiles if balanced),
        # K = 1088
        assert planned("fprop", splits, n, k, od, bias=with_bias).algorithm.name == "fused_pair_256x256"
    run_fprop(splits, n, k, "fast", od, with_bias=with_bias, seed=31, algorithm=forced)


@pytest.mark.parametrize("case", ["e4_tails_bias", "e8_one_giant"])
def test_dgrad_pair_cluster(case):
    splits, n, k, od, with_bias = PAIR_CASES[case]
    run_dgrad(splits, k, n, "fast", od, with_bias=with_bias, seed=32, algorithm="fused_pair_256x256")


# The fused fast kernels' bf16 output (fused_pair_256x256, fused_128x256, fused_64x256) leaves through TMA-store boxes
# (epilogue "tma_store", store_tile_tma_bf16: 16 rows x 64 columns of a 2D map of the output's rows, which clips
# columns past cols: fprop / dgrad [T, cols], wgrad the E planes [N, K] as E N rows) where the map applies (cols a
# multiple of 8, a 16-byte aligned output; the default there), and through the staged bulk copies (epilogue "staged",
# forced here) or when it does not. Edges: groups whose rows end inside a warp's 16 rows (that warp copies its rows from
# the box buffer itself: a box would write into the next group's rows), empty groups and experts, wgrad planes whose
# last row tile has warps past N (208 and 80 rows), a last column tile of 144 / 8 / 16 / 48 columns (boxes cut by the
# map), bias, dgrad, 40 columns (a whole box past cols), 36 columns (fprop: no map, so forcing the TMA store raises and
# the default is the staged epilogue; wgrad's N and K are multiples of 16, so its map always applies to an aligned
# output, and no warp's rows cross a plane's end), capped grids (8 CTAs on wgrad [0, 37, 200, 5] x [304, 144]: half
# tiles in fused_128x256 and fused_64x256, see test_capped_grid_and_half_tiles); guarded outputs, against the oracle
# bit for bit.
@pytest.mark.parametrize("epilogue", ["tma_store", "staged"])
@pytest.mark.parametrize("algorithm", ["fused_pair_256x256", "fused_128x256", "fused_64x256"])
def test_bf16_epilogues(algorithm, epilogue):
    bf16 = torch.bfloat16
    kw = dict(algorithm=algorithm, epilogue=epilogue)
    run_fprop([0, 700, 129, 300, 17], 400, 208, "fast", bf16, with_bias=True, seed=121, **kw)
    run_fprop([33, 0, 300, 1], 264, 64, "fast", bf16, with_bias=False, seed=122, num_sms=4, **kw)
    run_dgrad([0, 700, 129, 300, 17], 208, 144, "fast", bf16, with_bias=True, seed=123, **kw)
    run_fprop([500, 3, 250], 40, 96, "fast", bf16, with_bias=True, seed=124, num_sms=2, **kw)
    if epilogue == "tma_store":
        with pytest.raises(ValueError, match="epilogue='tma_store' cannot run this call: .*got 36 bf16 columns"):
            run_fprop([500, 3, 250], 36, 96, "fast", bf16, with_bias=True, seed=125, **kw)
        assert planned("fprop", [500, 3, 250], 36, 96, bf16, bias=True, algorithm=algorithm).epilogue.name == "staged"
        run_fprop([500, 3, 250], 36, 96, "fast", bf16, with_bias=True, seed=125, algorithm=algorithm)
    else:
        run_fprop([500, 3, 250], 36, 96, "fast", bf16, with_bias=True, seed=125, **kw)
    run_wgrad([0, 37, 200, 5], 208, 272, "fast", bf16, False, seed=126, **kw)
    run_wgrad([0, 37, 200, 5], 304, 144, "fast", bf16, False, seed=127, num_sms=8, **kw)
    run_wgrad([64, 0, 100], 80, 48, "fast", bf16, False, seed=128, num_sms=3, **kw)


@pytest.mark.parametrize("accumulate", [False, True])
def test_wgrad_pair_cluster(accumulate):
    # 304 output rows: the second cluster tile's second CTA has no rows; an empty expert
    run_wgrad([0, 37, 200, 5], 304, 144, "fast", torch.float32, accumulate, algorithm="fused_pair_256x256")


# Every fast kernel on shapes outside its automatic range (same bits as oracle.gemm(model="tensor_core") with each).
@pytest.mark.parametrize("algorithm", ["fused_64x256", "fused_128x256", "fused_pair_256x256"])
def test_forced_fast_kernels(algorithm):
    splits, n, k = CASES["e4_zeros"]
    run_fprop(splits, n, k, "fast", torch.float32, with_bias=True, seed=41, algorithm=algorithm)
    splits, n, k = CASES["giant"]
    run_dgrad(splits, n, k, "fast", torch.bfloat16, seed=42, algorithm=algorithm)
    splits, n, k = CASES["e8_rand"]
    run_wgrad(splits, n, k, "fast", torch.float32, accumulate=True, seed=43, algorithm=algorithm)


# The swapped fast kernel (swapped_64x256, csrc/gemm/swapped.cuh: weights as wgmma's register operand, the token rows
# from an fp16 copy in the even / odd code order), forced: the same bits as oracle.gemm(model="tensor_core"). Covers
# the fused_64x256 cases (groups of several 64-row token tiles, N not a multiple of 256 or of 128, K tails, bias,
# fp32), every CASES shape (empty groups, a giant expert, 64 groups), K % 32 = 16 (8-byte weight copies), odd N
# (fprop's weight rows per group), 16x16 weight blocks, and dgrad (W's columnwise plane as the register operand); bf16
# output rows of odd length too. Loaders as chosen: fprop through TMA boxes where the contraction is a multiple of 32,
# dgrad always with cp.async.
SWAPPED_CASES = dict(SKINNY_CASES, **{f"c_{k}": (*v, torch.bfloat16, True) for k, v in CASES.items()},
                     k48_odd_n=([5, 0, 64, 65, 3], 131, 48, torch.float32, True),
                     k48_odd_n_bf16=([5, 0, 64, 65, 3], 131, 48, torch.bfloat16, True))


def _run_swapped(case, loader=None, algorithm="swapped_64x256"):
    splits, n, k, od, with_bias = (SWAPPED_CASES | WIDE_CASES)[case]
    kw = dict(algorithm=algorithm, loader=loader)
    run_fprop(splits, n, k, "fast", od, with_bias=with_bias, seed=101, **kw)
    if n % 16 == 0:  # dgrad quantizes W [E*k, n] rowwise too, which needs n % 16 == 0
        run_dgrad(splits, k, n, "fast", od, with_bias=with_bias, seed=102, **kw)


@pytest.mark.parametrize("case", list(SWAPPED_CASES))
def test_swapped_kernel(case):
    _run_swapped(case)


@pytest.mark.parametrize("case", ["e8_bias", "c_e8_rand", "c_e64", "c_giant"])
def test_swapped_kernel_cp_async_loader(case):
    """loader="cp_async" forces the cp.async loader with its 16-byte copies on shapes where fprop takes the TMA
    loader (contraction % 32 == 0): the same oracle checks as test_swapped_kernel. Shapes with a contraction of 16 mod
    32 (k48_odd_n, most dgrad cases above) take the cp.async loader's 8-byte copies anyway."""
    splits, n, k, od, with_bias = SWAPPED_CASES[case]
    assert k % 32 == 0  # the premise: fprop's loader would be TMA here
    _run_swapped(case, loader="cp_async")


def test_swapped_dgrad_groups_off_a_whole_row():
    """SPEC 12.5 on swapped_64x256's dgrad: it reads W's columnwise plane (K rows of N / 2 bytes per group), so after
    weight groups that disagree with N the next groups need not start on a whole row of N / 2 bytes. Their weights
    must still be read from their own first byte (agreeing groups are unaffected) (_dgrad_after_disagreeing_groups).
    Its dgrad runs the cp.async loader (one tensor map over the whole plane would read those groups' rows shifted),
    so forcing the TMA loader raises."""
    # contraction 96 (% 32 == 0: the cp.async loader's 16-byte copies); 80 and 1408 output columns (W's columnwise
    # rows: one and several 256-row tiles)
    kw = dict(algorithm="swapped_64x256", loader="cp_async")
    _dgrad_after_disagreeing_groups(96, 80, "fast", torch.float32, **kw)
    _dgrad_after_disagreeing_groups(96, 1408, "fast", torch.bfloat16, num_sms=5, **kw)
    # contraction 32: a weight row of 16 bytes
    run_dgrad([30, 0, 50, 20], 32, 80, "fast", torch.float32, with_bias=True, seed=106, **kw)
    with pytest.raises(ValueError, match="loader='tma' cannot run this call: swapped_64x256's dgrad weight groups"):
        run_dgrad([30, 0, 50, 20], 32, 80, "fast", torch.float32, seed=106, algorithm="swapped_64x256", loader="tma")


def test_swapped_kernel_capped_grid_and_auto():
    """Capped grids (every CTA walks several tiles): 30 tiles on 3 CTAs (whole rounds) and on 7 and 8 CTAs (a last
    round of 2 tiles run as 4 half tiles, and one of 6 whole tiles); the automatic choice for few rows per group;
    wgrad refused."""
    for num_sms in (3, 7, 8):
        run_fprop([64, 0, 200], 1408, 160, "fast", torch.bfloat16, with_bias=True, seed=103,
                  algorithm="swapped_64x256", num_sms=num_sms)
    run_dgrad([64, 0, 200], 96, 1408, "fast", torch.float32, with_bias=True, seed=104, algorithm="swapped_64x256",
              num_sms=7)
    splits = rand_splits(8, 512, 7)
    assert planned("fprop", splits, 520, 128, torch.bfloat16).algorithm.name == "swapped_64x256"
    run_fprop(splits, 520, 128, "fast", torch.bfloat16, with_bias=False, seed=105)  # auto
    with pytest.raises(ValueError, match="algorithm='swapped_64x256' cannot run this call: it runs fprop and dgrad"):
        run_wgrad([0, 37, 200, 5], 304, 144, "fast", torch.float32, accumulate=False, algorithm="swapped_64x256")


# swapped_256x128: the swapped kernel with 256 token rows (wgmma m64n256k16) x 128 weight rows (one scale tile, no half
# tiles) per tile. SWAPPED_CASES plus groups of several 256-row token tiles with partial ones, weight rows past one
# 128-row tile, and K tails.
# (N = 208 and 144: multiples of 16, so _run_swapped runs dgrad too, and not of 128, so the last weight tile is partial)
WIDE_CASES = {"w_tiles": ([300, 0, 517, 256, 1], 208, 96, torch.bfloat16, True),
              "w_tiles_f32_k48": ([300, 0, 517, 256, 1], 144, 48, torch.float32, True),
              "w_e8": (rand_splits(8, 4000, 9), 384, 320, torch.bfloat16, False)}


@pytest.mark.parametrize("case", list(SWAPPED_CASES) + list(WIDE_CASES))
def test_swapped_wide_kernel(case):
    _run_swapped(case, algorithm="swapped_256x128")


@pytest.mark.parametrize("case", ["e8_bias", "c_giant", "w_tiles", "w_e8"])
def test_swapped_wide_kernel_cp_async_loader(case):
    """The cp.async loader (4 warps: 16 token pieces per thread and step) where fprop and dgrad would take TMA boxes."""
    assert (SWAPPED_CASES | WIDE_CASES)[case][2] % 32 == 0
    _run_swapped(case, loader="cp_async", algorithm="swapped_256x128")


def test_swapped_wide_kernel_dgrad_off_a_whole_row_and_capped_grids():
    """swapped_256x128's dgrad after weight groups that disagree with N (test_swapped_dgrad_groups_off_a_whole_row) on
    both loaders: TMA (its default, test_swapped_loader_defaults_and_refusals; each tile's group is checked, and a
    group off a whole row of the weight map has its weight rows copied by the loader warp's cp.async pieces: groups
    2-3, and group 3 beside group 0's boxes in one launch) and cp.async; and capped grids: 3 and 7 CTAs walking 10
    tiles."""
    # mixed layouts: group 0 on a whole row, group 3 off it (both in one launch); group 1 off a whole row and group 3
    # on one again (the N - 24 group's padding cancels the N + 8 group's), one CTA walking both in that order
    mixed = dict(deltas=(0, 8, -8, 0), splits=(300, 30, 0, 517), off_rows=(3,))
    back = dict(deltas=(8, 0, -24, 0, 16), splits=(30, 300, 20, 517, 10), off_rows=(1,))
    for loader in ("tma", "cp_async"):
        kw = dict(algorithm="swapped_256x128", loader=loader)
        _dgrad_after_disagreeing_groups(96, 80, "fast", torch.float32, **kw)
        _dgrad_after_disagreeing_groups(96, 1408, "fast", torch.bfloat16, num_sms=5, **kw)
        _dgrad_after_disagreeing_groups(96, 208, "fast", torch.bfloat16, num_sms=3, **mixed, **kw)
        _dgrad_after_disagreeing_groups(224, 80, "fast", torch.float32, **mixed, **kw)
        _dgrad_after_disagreeing_groups(96, 80, "fast", torch.float32, num_sms=1, **back, **kw)
    for num_sms in (3, 7):
        run_fprop([300, 0, 600], 256, 160, "fast", torch.bfloat16, with_bias=True, seed=107,
                  algorithm="swapped_256x128", num_sms=num_sms)
    run_dgrad([300, 0, 600], 96, 256, "fast", torch.float32, with_bias=True, seed=108, algorithm="swapped_256x128",
              num_sms=7)


# wgrad on swapped_256x128 over exchanged operands (X's columnwise plane is the token operand, read through its fp16
# copy; dY's rows are decoded in registers, 128 per tile): empty experts, token counts of 16 mod 32 (weight rows of 8
# mod 16 bytes: the loader's 8-byte cp.async pieces), dW rows N past one 128-row tile with a partial last one, dW
# columns K past one 256-row token tile with a partial last one; fp32 with and without C and bf16; both loaders (TMA:
# one token map per group, built on the device); a capped grid.
WIDE_WGRAD_CASES = {"e4": ([0, 37, 200, 5], 208, 272),
                    "e3_k48": ([64, 0, 100], 80, 48),
                    "e8": (rand_splits(8, 4000, 9), 384, 320),
                    "e2_long": ([1000, 1016], 144, 512)}


@pytest.mark.parametrize("loader", ["tma", "cp_async"])
@pytest.mark.parametrize("case", list(WIDE_WGRAD_CASES))
def test_swapped_wide_kernel_wgrad(case, loader):
    splits, n, k = WIDE_WGRAD_CASES[case]
    kw = dict(algorithm="swapped_256x128", loader=loader)
    plan = planned("wgrad", splits, n, k, torch.float32, **kw)
    assert (plan.algorithm.name, plan.loader.name, plan.epilogue.name) == ("swapped_256x128", loader, "direct")
    run_wgrad(splits, n, k, "fast", torch.float32, False, seed=131, **kw)
    run_wgrad(splits, n, k, "fast", torch.float32, True, seed=132, **kw)
    run_wgrad(splits, n, k, "fast", torch.bfloat16, False, seed=133, num_sms=3, **kw)


@pytest.mark.parametrize("loader", ["tma", "cp_async"])
def test_swapped_wide_kernel_wgrad_beside_disagreeing_groups(loader):
    """SPEC 12.5 on wgrad over swapped_256x128: groups 0 and 2 of dY and X disagree on their token counts (NaN, no
    map built, nothing read), groups 1 and 3 agree and have tokens (their maps and rows come right after the
    disagreeing groups' bytes); with and without C, on a capped grid too."""
    n, k = 144, 272
    dy_splits, x_splits = [30, 64, 50, 40], [50, 64, 30, 40]
    t = sum(dy_splits)
    dyc = gq(rand_bf16((t, n), 21), dy_splits, rowwise=False, columnwise=True)
    xc = gq(rand_bf16((t, k), 22), x_splits, rowwise=False, columnwise=True)
    dyo, xo = dyc.to_oracle(), xc.to_oracle()
    for accumulate, num_sms in ((False, None), (True, 3)):
        c = torch.randn((4, n, k), dtype=torch.float32).to(DEV)
        out, check_tail = guarded((4, n, k), torch.float32, values=c if accumulate else torch.full_like(c, 7.0))
        gemm(dyc, xc, kind="wgrad", out=out, accumulate=accumulate, mode="fast", algorithm="swapped_256x128",
             loader=loader, num_sms=num_sms)
        check_tail("wgrad")
        y, cn = to_np(out), c.cpu().numpy()
        _all_nan(y[0], f"group 0 (accumulate={accumulate})")
        _all_nan(y[2], f"group 2 (accumulate={accumulate})")
        for g in (1, 3):
            check_group(y[g], dyo.col_planes[g], xo.col_planes[g], "fast", torch.float32,
                        acc=cn[g] if accumulate else None, where=f"g={g} accumulate={accumulate}")


def rows_of(plane, rows: np.ndarray):
    """The oracle plane of some rows of ``plane`` (rows are independent in a K-major plane; 16-row aligned runs
    keep 16x16 blocks whole)."""
    import dataclasses

    return dataclasses.replace(plane, data=plane.data[rows], scales=plane.scales[rows], shape=(rows.size, plane.cols))


@pytest.mark.parametrize("loader", ["tma", "cp_async"])
def test_swapped_wide_kernel_wgrad_in_bands(loader):
    """wgrad on swapped_256x128 walks a group's tiles in bands of token tiles (gemm/setup.cu's band_m: one band's rows
    of X's fp16 copy within 16 MiB; swapped.cuh's group_tile). K = 768 is 3 token tiles and N = 256 two weight tiles;
    16384 tokens per group make bands of 2 token tiles (8 MiB each: bands 2 + 1), 32768 bands of 1 (1 + 1 + 1). The
    dW rows at both weight tiles' edges against the oracle, over every column (so every token tile of every band), and
    without C every element written (the output starts as NaN)."""
    n, k = 256, 768
    rows = np.array([0, 127, 128, 255])
    # (band_m = 16 MiB // (256 ru16(m_g) 2 bytes), at most 3: 16384 and 16368 tokens 2, 32768 tokens 1)
    for splits, bands, accumulate, num_sms in (([16384, 16368], [2, 2], False, None), ([32768], [1], True, 5)):
        e, t = len(splits), sum(splits)
        dyc = gq(rand_bf16((t, n), 41), splits, rowwise=False, columnwise=True)
        xc = gq(rand_bf16((t, k), 42), splits, rowwise=False, columnwise=True)
        c = torch.randn((e, n, k), dtype=torch.float32).to(DEV)
        out, check_tail = guarded((e, n, k), torch.float32, values=c if accumulate else None)
        gemm(dyc, xc, kind="wgrad", out=out, accumulate=accumulate, mode="fast", algorithm="swapped_256x128",
             loader=loader, num_sms=num_sms)
        check_tail("wgrad in bands")
        y, cn = to_np(out), c.cpu().numpy()
        # the bands the setup kernel chose: Prob::band_m (gemm/problem.h; byte 80 of each group's Prob)
        from device._build import load_gemm_extension

        size = int(load_gemm_extension().prob_size())
        ws = torch.zeros(e * size + 4 * (e + 1), dtype=torch.uint8, device=DEV)
        assert _raw_gemm("wgrad", dyc, xc, torch.empty_like(out), algorithm="swapped_256x128", loader=loader,
                         epilogue="direct", ws=ws) == ""
        band_m = ws[:e * size].view(e, size)[:, 80:84].contiguous().view(torch.int32).flatten().tolist()
        assert band_m == bands, band_m
        assert np.isfinite(y).all(), f"splits {splits}: {int((~np.isfinite(y)).sum())} elements not written"
        dyo, xo = dyc.to_oracle(), xc.to_oracle()
        for g in range(e):
            check_group(y[g][rows], rows_of(dyo.col_planes[g], rows), xo.col_planes[g], "fast", torch.float32,
                        acc=cn[g][rows] if accumulate else None, where=f"splits {splits} g={g}")


def _nan_scale_padding(a, contraction):
    """Grouped result ``a`` (rowwise, swizzled scales) with every padding byte of its groups' scale tiles (rows past
    the group's rows, block columns past contraction / 16; SPEC 8.2 writes them 0x00) set to 0x7F, an E4M3 NaN: a
    kernel that scales a padding block or row into the products it keeps turns them into NaN."""
    import dataclasses

    from oracle.swizzle import swizzle_scales

    scales = a.row_scales.clone()
    offs = a.offsets[3].cpu().numpy()
    for g, m in enumerate(np.diff(a.offsets[0].cpu().numpy())):
        if m == 0:
            continue
        valid = swizzle_scales(np.ones((int(m), contraction // 16), np.uint8))  # 1: a scale, 0: padding
        pad = torch.from_numpy(np.flatnonzero(valid == 0) + int(offs[g])).to(DEV)
        scales[pad] = 0x7F
    return dataclasses.replace(a, row_scales=scales)


def test_swapped_wide_kernel_token_padding_and_offsets():
    """swapped_256x128 on its TMA loader with NaN bytes in every padding byte of the token scales (rows past a group's
    rows, blocks past K) and contractions whose last K step holds 2 of its 4 blocks (480 and 224): no padding value
    reaches a kept product, fprop and dgrad give the oracle's bits, with the token buffers 16-byte aligned and with
    their data 8 bytes or their scales 4 bytes off that alignment."""
    splits, n, k = [300, 0, 517, 256, 27], 224, 480
    e, t = len(splits), sum(splits)
    wq = weights(e, n, k, 211)
    wo = wq.to_oracle()
    for kind, cols, contraction, b_planes in (("fprop", n, k, wo.row_planes), ("dgrad", k, n, wo.col_planes)):
        a = gq(rand_bf16((t, contraction), 212 if kind == "fprop" else 213), splits)
        a_planes = a.to_oracle().row_planes
        a = _nan_scale_padding(a, contraction)
        for field, shift in ((None, 0), ("row_data", 8), ("row_scales", 4)):
            aa = _moved(a, field, shift) if field else a
            out = sentinel_out((t, cols))
            gemm(aa, wq, kind=kind, out=out, mode="fast", algorithm="swapped_256x128", loader="tma")
            where = f"{kind}, tokens' {field or 'buffers'} {shift} bytes off 16-byte alignment"
            check_row_groups(to_np(out), splits, a_planes, b_planes, "fast", torch.float32, where=where)


def test_auto_fprop_takes_swapped_256x128_from_256_rows():
    """docs/design.md section 6, row 1b, on real operands: fprop with 256 rows per group on average and a contraction
    of 2048 runs swapped_256x128 with its TMA loader by the sizes alone, and matches the oracle (bf16 output with a
    bias, fp32 without); at 255 rows per group it does not."""
    import device

    k, n = 2048, 144
    for splits, wide in (([300, 0, 212, 512], True), ([300, 0, 212, 508], False)):
        xq, wq = gq(rand_bf16((sum(splits), k), 201), splits, rowwise=True), weights(len(splits), n, k, 202)
        plan = device.grouped_gemm_plan(xq, wq, kind="fprop")
        assert (plan.algorithm.name, plan.loader.name) == (("swapped_256x128", "tma") if wide else
                                                           ("fused_128x256", "cp_async")), (splits, plan)
        if wide:  # the plans of the two runs below
            for od, bias in ((torch.bfloat16, torch.zeros((4, n), device=DEV)), (torch.float32, None)):
                plan = device.grouped_gemm_plan(xq, wq, kind="fprop", out_dtype=od, bias=bias)
                assert (plan.algorithm.name, plan.loader.name) == ("swapped_256x128", "tma"), (od, plan)
    for od, with_bias in ((torch.bfloat16, True), (torch.float32, False)):
        run_fprop([300, 0, 212, 512], n, k, "fast", od, with_bias=with_bias, seed=203)


def test_auto_takes_swapped_256x128_on_uneven_rows():
    """docs/design.md section 6, row 1b below its contraction bound, on real operands: dgrad with a contraction
    N = 1088 over groups that fill 256-row tiles unevenly (pad_ratio 1280 / 1152) runs swapped_256x128 on its TMA
    loader when the call is given their sizes (split_sizes), and fused_pair_256x256 without them (256 rows per group
    on average, counted as balanced groups); both match the oracle."""
    import device

    splits, n, k = [300, 0, 212, 512], 1088, 256
    dyq, wq = gq(rand_bf16((sum(splits), n), 211), splits), weights(len(splits), n, k, 212)
    assert device.grouped_gemm_plan(dyq, wq, kind="dgrad").algorithm.name == "fused_pair_256x256"
    plan = device.grouped_gemm_plan(dyq, wq, kind="dgrad", split_sizes=splits)
    assert (plan.algorithm.name, plan.loader.name) == ("swapped_256x128", "tma"), plan
    for sizes in (None, splits):
        run_dgrad(splits, n, k, "fast", torch.bfloat16, seed=210, split_sizes=sizes)


# Programmatic dependent launch (csrc/common/pdl.cuh; always on): a call's kernels are chained, each placed on the GPU
# while its predecessor still runs and waiting in-kernel for its results. Three calls enqueued back to back with
# different splits (no synchronisation in between) must each match the oracle: a kernel that read its problem list,
# tensor maps or fp16 copies before its predecessor finished would see the other call's groups. Every chain (setup ->
# GEMM; setup -> decode -> retarget [-> maps] -> GEMM; setup -> decodes -> CUTLASS).
PDL_CHAINS = {  # name: kind, mode, forced algorithm
    "fused_128x256": ("fprop", "fast", "fused_128x256"),
    "fused_pair_256x256": ("dgrad", "fast", "fused_pair_256x256"),
    "swapped_64x256": ("fprop", "fast", "swapped_64x256"),
    "swapped_64x256_dgrad": ("dgrad", "fast", "swapped_64x256"),
    "swapped_256x128": ("fprop", "fast", "swapped_256x128"),
    "copies_cutlass": ("dgrad", "fast", "copies_cutlass"),
    "exact_fused": ("fprop", "exact", "exact_fused"),
    "exact_copies": ("fprop", "exact", "exact_copies"),
    "exact_hybrid": ("dgrad", "exact", "exact_hybrid"),
}


@pytest.mark.parametrize("chain", list(PDL_CHAINS))
def test_back_to_back_calls(chain):
    kind, mode, algorithm = PDL_CHAINS[chain]
    if algorithm == "copies_cutlass":
        _needs_cutlass()
    n, k = 256, 512
    wq = weights(4, n, k, seed=201)
    cols = n if kind == "fprop" else k  # output columns
    split_sets = [[100, 0, 300, 61], [0, 257, 3, 200], [64, 64, 64, 64]]
    acts = [gq(rand_bf16((sum(s), k if kind == "fprop" else n), 202 + i), s) for i, s in enumerate(split_sets)]
    torch.cuda.synchronize()
    outs = [gemm(a, wq, kind=kind, mode=mode, algorithm=algorithm) for a in acts]  # enqueued back to back
    wo = wq.to_oracle()
    for splits, a, y in zip(split_sets, acts, outs, strict=True):
        assert tuple(y.shape) == (sum(splits), cols)
        b_planes = wo.row_planes if kind == "fprop" else wo.col_planes
        check_row_groups(to_np(y), splits, a.to_oracle().row_planes, b_planes, mode, torch.bfloat16,
                         where=f"{chain}, the call on splits {splits}")


# copies_cutlass (fp16 copies of both planes + CUTLASS's grouped GEMM), forced on every case shape: the same bits as
# oracle.gemm(model="tensor_core"). Covers empty groups (M = 0 for CUTLASS, and in wgrad K = 0: the zero-step epilogue,
# accumulating or not), unaligned group sizes (columnwise pitches roundup(m_g,16)), one giant expert, 64 groups, RHT'd
# wgrad operands, both output dtypes (wgrad's too) and the bias epilogue (bf16 output; fp32 and bf16 bias).
@pytest.mark.parametrize("case", list(CASES))
def test_copies_cutlass(case):
    _needs_cutlass()
    splits, n, k = CASES[case]
    od = torch.float32 if case in ("e4_zeros", "e64") else torch.bfloat16
    kw = dict(algorithm="copies_cutlass")
    run_fprop(splits, n, k, "fast", od, with_bias=od == torch.bfloat16, seed=81, **kw)
    run_dgrad(splits, n, k, "fast", torch.bfloat16, with_bias=True, seed=82, **kw)
    run_wgrad(splits, n, k, "fast", torch.float32, accumulate=case != "e1", seed=83, **kw)
    run_wgrad(splits, n, k, "fast", torch.float32, accumulate=False, seed=84, num_sms=5, **kw)
    run_wgrad(splits, n, k, "fast", torch.bfloat16, accumulate=False, seed=85, **kw)


def plane_values_f16(p, rows, cols) -> np.ndarray:
    """An oracle plane's exact values E2M1 x E4M3 as fp16 [rows, cols], decoded by ml_dtypes (codes low nibble first,
    compact scale bytes; SPEC 2.3, 8.1, 12.6)."""
    codes = np.stack([p.data & 0xF, p.data >> 4], axis=-1).reshape(rows, cols).view(ml_dtypes.float4_e2m1fn)
    scales = np.repeat(p.scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32), 16, axis=1)[:, :cols]
    return (codes.astype(np.float32) * scales).astype(np.float16)


def weight_values_f16(wq, e, n, k) -> np.ndarray:
    """The weights' exact values as fp16 [E, N, K], from the oracle's rowwise planes (plane_values_f16)."""
    return np.stack([plane_values_f16(p, n, k) for p in wq.to_oracle().row_planes])


def test_weight_f16_copy_values():
    """device._ops.weight_f16_copy: every weight's value E2M1 x E4M3 in fp16 (ml_dtypes' decode of the oracle's
    planes), an expert with a NaN and one with an Inf element and an all-zero expert included; with 16x16 blocks the
    same values as the columnwise plane's, transposed (SPEC 6.3)."""
    from device import _ops

    e, n, k = 3, 48, 96
    w = rand_bf16((e * n, k), 7, 0.05)
    w[2 * n + 5, 17] = float("nan")
    w[40, 3] = float("inf")
    w[n:2 * n] = 0.0
    wq = gq(w, [n] * e, rowwise=True, columnwise=True, block=(16, 16))
    copy = _ops.weight_f16_copy(wq.row_data, wq.row_scales, wq.offsets, e, n, k)
    got = copy.cpu().numpy()
    want = weight_values_f16(wq, e, n, k)
    assert got.shape == (e, n, k) and got.dtype == np.float16
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    for g, p in enumerate(wq.to_oracle().col_planes):  # [K, N] codes and scales of the same tiles
        col = plane_values_f16(p, k, n).T
        assert np.array_equal(np.isnan(col), nan[g])
        assert np.array_equal(col.view(np.uint16)[~nan[g]], want[g].view(np.uint16)[~nan[g]])
    with pytest.raises(RuntimeError, match="2 fp16 values per data byte"):
        _ops.weight_f16_copy(wq.row_data, wq.row_scales, wq.offsets, e, n - 16, k)


# copies_cutlass over the weights' fp16 copy (only the token plane decoded; dgrad reads the copy N-contiguous through
# the RowMajor-B instantiation): the same bits as oracle.gemm(model="tensor_core") on every case shape, empty groups
# and unaligned splits included, fprop with bf16 output with a bias; another algorithm forced with the copy ignores
# it.
@pytest.mark.parametrize("case", list(CASES))
def test_copies_cutlass_over_the_weight_copy(case):
    from device.testing import force_plan, gemm_over_weight_copy

    _needs_cutlass()
    splits, n, k = CASES[case]
    e, t = len(splits), int(sum(splits))
    wq = weights(e, n, k, 71)
    xq = gq(rand_bf16((t, k), 72), splits)
    dyq = gq(rand_bf16((t, n), 73), splits)
    for kind, aq, cols, od in (("fprop", xq, n, torch.float32 if case == "e64" else torch.bfloat16),
                               ("dgrad", dyq, k, torch.bfloat16)):
        bias = (torch.randn((e, n)) * 3).to(DEV) if kind == "fprop" and od == torch.bfloat16 else None
        for algorithm in ("copies_cutlass", "fused_128x256"):
            out, check_tail = guarded((t, cols), od)
            with force_plan(algorithm=algorithm):
                gemm_over_weight_copy(aq, wq, kind=kind, out=out, bias=bias)()
            check_tail(kind)
            ao, wo = aq.to_oracle(), wq.to_oracle()
            check_row_groups(to_np(out), splits, ao.row_planes, wo.row_planes if kind == "fprop" else wo.col_planes,
                             "fast", od, bias=None if bias is None else bias.cpu().numpy(),
                             where=f"{kind} {algorithm} over the weight copy")


def test_copies_cutlass_refusals():
    """Forcing copies_cutlass where it cannot run raises before any launch."""
    e, n, k = 2, 36, 64  # bf16 rows of 36 columns: 72 bytes, not 16-byte aligned
    _needs_cutlass()
    xq = gq(rand_bf16((64, k), 3), [30, 34])
    wq = weights(e, n, k, 5)
    with pytest.raises(ValueError, match="algorithm='copies_cutlass' cannot run this call: .*16-byte aligned"):
        gemm(xq, wq, kind="fprop", algorithm="copies_cutlass")
    wq = weights(e, 32, k, 5)
    with pytest.raises(ValueError, match="its bias epilogue writes bf16 output"):
        gemm(xq, wq, kind="fprop", algorithm="copies_cutlass", bias=torch.zeros((e, 32), device=DEV),
             out_dtype=torch.float32)
    with pytest.raises(ValueError, match="copies_cutlass is a fast-mode algorithm, the call is mode='exact'"):
        gemm(xq, wq, kind="fprop", algorithm="copies_cutlass", mode="exact")


# Exact mode over fp16 copies of both planes (exact_copies, csrc/gemm/exact_copies.cuh), forced on every case shape:
# the same bits as oracle.gemm(model="sequential"). Covers empty groups (no tiles; in wgrad with accumulate none,
# without it the zero-step tiles), unaligned group sizes (columnwise copies with pitch roundup(m_g, 16), K tails inside
# a 64-element K step), one giant expert, 64 groups, bias (fprop, dgrad), both output dtypes and a capped grid.
@pytest.mark.parametrize("case", list(CASES))
def test_exact_copies(case):
    splits, n, k = CASES[case]
    od = torch.float32 if case in ("e4_zeros", "e64") else torch.bfloat16
    kw = dict(algorithm="exact_copies")
    run_fprop(splits, n, k, "exact", od, with_bias=True, seed=91, **kw)
    run_dgrad(splits, n, k, "exact", torch.bfloat16, with_bias=case != "e1", seed=92, **kw)
    run_wgrad(splits, n, k, "exact", torch.float32, accumulate=case != "e1", seed=93, **kw)
    run_wgrad(splits, n, k, "exact", torch.float32, accumulate=False, seed=94, num_sms=5, **kw)


# More groups than the kernel over copies keeps in its shared-memory prefix table (kMaxCachedGroups = 512): its
# tile lookups then search the table in global memory. 600 groups, many empty, with a capped grid so that each CTA
# walks many tiles (the lookup runs one tile ahead).
def test_exact_copies_past_cached_groups():
    splits = rand_splits(600, 3000, 5)
    assert len(splits) > 512 and 0 in splits
    kw = dict(algorithm="exact_copies")
    run_fprop(splits, 32, 64, "exact", torch.bfloat16, with_bias=True, seed=98, num_sms=7, **kw)
    run_wgrad(splits, 32, 48, "exact", torch.float32, accumulate=True, seed=99, num_sms=7, **kw)


def _splits_empty_at_chunk_edges(e: int, seed: int) -> list[int]:
    """rand_splits with groups 0, 31-33, 63-65, 127-129 and 255-257 (where < e - 1) empty as well: runs of equal
    prefix entries on both sides of find_group_warp's 32-entry chunk boundaries."""
    splits = [int(v) for v in rand_splits(e, 40 * e, seed)]
    for g in (0, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257):
        if g < e - 1:
            splits[-1] += splits[g]
            splits[g] = 0
    return splits


# The MMA warps of the fast kernels over packed operands and of the hybrid exact kernel find each output tile's group
# with a warp-wide count over prefix[1..E-1] (find_group_warp in csrc/gemm/tile_list.cuh: 8 chunks of 32 entries, so
# E <= 257; more groups take the binary search). Group counts on each side of every chunk boundary and of that limit,
# with empty groups at the boundaries, and a capped grid (each CTA walks many tiles), against the oracle.
@pytest.mark.parametrize("e", [31, 34, 129, 130, 257, 258])
def test_warp_group_search(e):
    splits = _splits_empty_at_chunk_edges(e, 40 + e)
    assert splits[0] == 0 and splits[-1] > 0
    for algorithm in ("swapped_64x256", "fused_64x256", "fused_128x256", "fused_pair_256x256"):
        run_fprop(splits, 32, 64, "fast", torch.bfloat16, with_bias=True, seed=e, algorithm=algorithm, num_sms=7)
    run_dgrad(splits, 64, 32, "fast", torch.float32, seed=e + 1, algorithm="swapped_64x256", num_sms=5)
    run_wgrad(splits, 32, 48, "fast", torch.float32, accumulate=True, seed=e + 2, algorithm="fused_128x256",
              num_sms=7)
    # bf16 wgrad through the 128 x 256 kernel (both of its bf16 instantiations: the staged epilogue and the TMA
    # store), many short tiles per CTA
    for epilogue in ("staged", "tma_store"):
        run_wgrad(splits, 32, 48, "fast", torch.bfloat16, accumulate=False, seed=e + 5, algorithm="fused_128x256",
                  epilogue=epilogue, num_sms=7)
    run_fprop(splits, 32, 64, "exact", torch.float32, with_bias=True, seed=e + 3, algorithm="exact_hybrid",
              num_sms=7)
    run_dgrad(splits, 64, 32, "exact", torch.bfloat16, seed=e + 4, algorithm="exact_hybrid", num_sms=5)


def _dgrad_after_disagreeing_groups(n: int, k: int, mode: str, out_dtype, *, deltas=(8, -8, 0, 0),
                                    splits=(30, 0, 50, 200), off_rows=(2, 3), **plan) -> None:
    """dgrad whose weight group g holds N + deltas[g] rows: a group with a nonzero delta disagrees with N (SPEC 12.5:
    written as NaN, checked on an output that starts at zero wherever the group has tokens) and shifts the columnwise
    plane of the groups after it by K roundup(N + delta, 16) / 2 - K N / 2 bytes, so that a group in ``off_rows``
    starts off a whole row of N / 2 bytes (one tensor map over the whole plane could not address it) and every other
    agreeing group on one (both asserted); every agreeing group is checked against the oracle. Default: groups 0 and
    1 (N + 8, N - 8 rows) disagree, groups 2 and 3 are off a whole row. ``plan``: gemm()'s algorithm / loader /
    epilogue / num_sms."""
    w_rows = [n + d for d in deltas]
    dyq = gq(rand_bf16((sum(splits), n), 13), list(splits), rowwise=True)
    wq_bad = gq(rand_bf16((sum(w_rows), k), 12, 0.05), w_rows, rowwise=True, columnwise=True, block=(16, 16))
    offsets = [int(v) for v in wq_bad.col_data_offsets.cpu()]
    for g, d in enumerate(deltas):  # the premise: which agreeing groups start on a whole row
        if d == 0:
            assert (offsets[g] % (n // 2) != 0) == (g in off_rows), (g, offsets[g], n)
    zeros = torch.zeros((sum(splits), k), dtype=out_dtype, device=DEV)
    out, check_tail = guarded((sum(splits), k), out_dtype, values=zeros)
    gemm(dyq, wq_bad, kind="dgrad", out=out, mode=mode, **plan)
    check_tail("dgrad")
    y, dyo, wo = to_np(out), dyq.to_oracle(), wq_bad.to_oracle()
    rows = np.cumsum([0, *splits])
    for g, d in enumerate(deltas):
        yg = y[rows[g]:rows[g + 1]]
        if d:
            _all_nan(yg, f"dgrad group {g} (W group of {w_rows[g]} rows)")
        else:
            check_group(yg, dyo.row_planes[g], wo.col_planes[g], mode, out_dtype, where=f"dgrad g={g}")


@pytest.mark.parametrize("loader", ["tma", "cp_async"])
def test_exact_copies_loaders(loader):
    """The exact kernel over fp16 copies loads its stages with TMA boxes through two tensor maps per group, built on the
    device from the group sizes (loader "tma", the default), or with cp.async (loader "cp_async"). Both against the
    oracle's sequential model on shapes with K tails, unaligned groups (wgrad: a row pitch of roundup(m_g, 16) per
    group) and capped grids, and on a dgrad whose weight groups 0 and 1 disagree with N (SPEC 12.5: NaN, no maps), so
    that the columnwise plane of groups 2-3 starts K (2N + 16) / 2 bytes in, not on a whole row of N / 2 bytes (a
    single map over the whole copy could not address it)."""
    assert planned("fprop", [0, 130, 1, 77], 272, 256, torch.bfloat16, mode="exact",
                   algorithm="exact_copies").loader.name == "tma"  # the default
    kw = dict(algorithm="exact_copies", loader=loader)
    for case in ("e4_zeros", "giant", "e64"):
        splits, n, k = CASES[case]
        run_fprop(splits, n, k, "exact", torch.bfloat16, with_bias=True, seed=95, **kw)
        run_dgrad(splits, n, k, "exact", torch.float32, with_bias=False, seed=96, num_sms=3, **kw)
        run_wgrad(splits, n, k, "exact", torch.float32, accumulate=True, seed=97, **kw)
    _dgrad_after_disagreeing_groups(48, 160, "exact", torch.float32, **kw)


def test_exact_fused_edges():
    """The fused exact kernel (exact_fused, csrc/gemm/fused.cuh; its converters copy the raw stages, packed A and B rows
    and their scale tiles, with cp.async, its only loader) against the oracle's sequential model: K tails inside a K
    step (K = 96 and 48; K = 32: packed rows of 16 bytes; K = 160: test_capped_grid_and_half_tiles), groups and N
    that are not multiples of 128 rows, empty groups, 64 groups, capped grids, and a dgrad whose groups 2-3 start
    off a whole row after groups that disagree with N (_dgrad_after_disagreeing_groups)."""
    kw = dict(algorithm="exact_fused")
    for case in ("e4_zeros", "e64", "giant", "e8_rand"):
        splits, n, k = CASES[case]
        run_fprop(splits, n, k, "exact", torch.bfloat16, with_bias=True, seed=101, **kw)
        run_dgrad(splits, n, k, "exact", torch.float32, with_bias=False, seed=102, num_sms=3, **kw)
    run_fprop([0, 70, 129, 5, 300], 200, 96, "exact", torch.float32, with_bias=False, seed=103, num_sms=2, **kw)
    run_dgrad([0, 70, 129, 5, 300], 96, 192, "exact", torch.bfloat16, with_bias=True, seed=104, **kw)
    # contraction 32: a packed row of 16 bytes
    run_fprop([0, 70, 129, 5], 40, 32, "exact", torch.float32, with_bias=True, seed=105, **kw)
    run_dgrad([0, 70, 129, 5], 32, 48, "exact", torch.bfloat16, with_bias=False, seed=106, **kw)
    _dgrad_after_disagreeing_groups(96, 160, "exact", torch.float32, **kw)
    with pytest.raises(ValueError, match="loader='tma' cannot run this call: exact_fused has the loader"):
        run_fprop([0, 70, 129, 5], 40, 32, "exact", torch.float32, with_bias=True, seed=105, loader="tma", **kw)


# The hybrid exact kernel (exact_hybrid, csrc/gemm/exact_hybrid.cu): A from an fp16 copy (TMA), B's packed K tiles and
# scale tiles by TMA, dequantized into the stages by the loader warpgroup; the same bits as oracle.gemm(model=
# "sequential"). Every case shape whose contraction is a multiple of 32 (fprop: K, dgrad: N), bias, both outputs,
# capped grids, K tails inside a K step (K = 96, 160: part of the last box lies past K; K = 32: packed rows narrower
# than a box), group sizes and N that are not multiples of 128 (box rows past the group zero-filled), empty groups, and
# a dgrad whose groups 2-3 start off a whole row after groups that disagree with N (those get no maps).
@pytest.mark.parametrize("case", list(CASES))
def test_exact_hybrid_kernel(case):
    splits, n, k = CASES[case]
    kw = dict(algorithm="exact_hybrid")
    ran = 0
    if k % 32 == 0:
        run_fprop(splits, n, k, "exact", torch.bfloat16, with_bias=True, seed=111, **kw)
        run_fprop(splits, n, k, "exact", torch.float32, with_bias=False, seed=112, num_sms=3, **kw)
        ran += 1
    if n % 32 == 0:
        run_dgrad(splits, n, k, "exact", torch.float32, with_bias=case != "e1", seed=113, **kw)
        run_dgrad(splits, n, k, "exact", torch.bfloat16, with_bias=False, seed=114, num_sms=5, **kw)
        ran += 1
    assert ran > 0, "every case shape runs at least one kind"


def test_exact_hybrid_kernel_edges():
    """The hybrid kernel on K tails, narrow packed rows, odd group sizes and disagreeing weight groups (see above)."""
    kw = dict(algorithm="exact_hybrid")
    run_fprop([0, 70, 129, 5, 300], 200, 96, "exact", torch.float32, with_bias=False, seed=115, num_sms=2, **kw)
    run_dgrad([0, 70, 129, 5, 300], 96, 192, "exact", torch.bfloat16, with_bias=True, seed=116, **kw)
    run_fprop([0, 70, 129, 5], 40, 32, "exact", torch.float32, with_bias=True, seed=117, **kw)
    run_dgrad([3, 0, 250], 32, 48, "exact", torch.bfloat16, with_bias=False, seed=118, **kw)
    run_fprop([1], 8, 160, "exact", torch.bfloat16, with_bias=True, seed=119, **kw)
    _dgrad_after_disagreeing_groups(96, 160, "exact", torch.float32, **kw)


def test_exact_hybrid_refusals():
    """Forcing the hybrid kernel where it cannot run raises before any launch: wgrad, a contraction not a multiple of
    32 (fprop K = 48; dgrad N = 48), b's buffers not 16-byte aligned, fast mode."""
    import dataclasses

    xq = gq(rand_bf16((64, 48), 3), [30, 34])
    wq = weights(2, 32, 48, 5)
    hybrid = dict(mode="exact", algorithm="exact_hybrid")
    with pytest.raises(ValueError, match="algorithm='exact_hybrid' cannot run this call: .*multiple of 32, got 48"):
        gemm(xq, wq, kind="fprop", **hybrid)
    dyq = gq(rand_bf16((64, 48), 4), [30, 34])
    wq2 = weights(2, 48, 64, 6)
    with pytest.raises(ValueError, match="multiple of 32, got 48"):
        gemm(dyq, wq2, kind="dgrad", **hybrid)
    dyc = gq(rand_bf16((64, 32), 7), [30, 34], rowwise=False, columnwise=True)
    xc = gq(rand_bf16((64, 64), 8), [30, 34], rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match="fprop and dgrad only"):
        gemm(dyc, xc, kind="wgrad", **hybrid)
    # b's data 8 bytes into a copy of its buffer (the plane's bytes unchanged): the automatic choice takes the fused
    # exact kernel, whose result is checked, and forcing the hybrid one raises
    xq64 = gq(rand_bf16((64, 64), 9), [30, 34])
    wq64 = weights(2, 32, 64, 10)
    buf = torch.zeros(wq64.row_data.numel() + 8, dtype=torch.uint8, device=DEV)
    buf[8:] = wq64.row_data
    shifted = dataclasses.replace(wq64, row_data=buf[8:])
    assert shifted.row_data.data_ptr() % 16 == 8
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm(xq64, shifted, kind="fprop", **hybrid)
    import device

    plan = device.grouped_gemm_plan(xq64, shifted, kind="fprop", mode="exact", out_dtype=torch.float32)
    assert plan.algorithm.name == "exact_fused", plan  # the premise
    y = to_np(gemm(xq64, shifted, kind="fprop", mode="exact", out_dtype=torch.float32))
    check_row_groups(y, [30, 34], xq64.to_oracle().row_planes, wq64.to_oracle().row_planes, "exact", torch.float32,
                     where="fprop, b unaligned")
    with pytest.raises(ValueError, match="exact_hybrid is an? exact-mode algorithm, the call is mode='fast'"):
        gemm(xq, wq, kind="fprop", mode="fast", algorithm="exact_hybrid")


def _moved(t, field, shift):
    """``t`` with buffer ``field`` (e.g. "row_scales") copied ``shift`` bytes into a larger buffer: the same bytes at
    an address ``shift`` past 16-byte alignment."""
    import dataclasses

    src = getattr(t, field)
    buf = torch.zeros(src.numel() + 16, dtype=torch.uint8, device=DEV)
    off = (16 - buf.data_ptr() % 16) % 16 + shift
    buf[off:off + src.numel()] = src
    moved = dataclasses.replace(t, **{field: buf[off:off + src.numel()]})
    assert getattr(moved, field).data_ptr() % 16 == shift
    return moved


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_scale_buffers_off_16_byte_alignment(mode):
    """Scale buffers 4 and 1 bytes past 16-byte alignment (views into larger buffers, the planes' bytes unchanged):
    the plan leaves the kernels that copy scale tiles 16 bytes at a time (tests/test_device_kernel_choice.py), and the
    result is the oracle's, fprop and dgrad; codes not 8-byte aligned are refused before any launch."""
    if mode == "fast":
        _needs_cutlass()
    splits, n, k = [130, 0, 70], 144, 320
    e = len(splits)
    x, dy = rand_bf16((sum(splits), k), 31), rand_bf16((sum(splits), n), 33)
    wq = weights(e, n, k, 32)
    wo = wq.to_oracle()
    for shift in (4, 1):
        for kind, a, b_field, b_planes in (("fprop", gq(x, splits), "row_scales", wo.row_planes),
                                           ("dgrad", gq(dy, splits), "col_scales", wo.col_planes)):
            for which in ("a", "b"):
                aa = _moved(a, "row_scales", shift) if which == "a" else a
                bb = _moved(wq, b_field, shift) if which == "b" else wq
                y = gemm(aa, bb, kind=kind, mode=mode, out=sentinel_out((sum(splits), n if kind == "fprop" else k)))
                check_row_groups(to_np(y), splits, a.to_oracle().row_planes, b_planes, mode, torch.float32,
                                 where=f"{kind}, {which}'s scales {shift} bytes off")
    for shift in (4, 1):
        with pytest.raises(ValueError, match="a's row data must be 8-byte aligned"):
            gemm(_moved(gq(x, splits), "row_data", shift), wq, kind="fprop", mode=mode)
        with pytest.raises(ValueError, match="b's col data must be 8-byte aligned"):
            gemm(gq(dy, splits), _moved(wq, "col_data", shift), kind="dgrad", mode=mode)


def test_algorithms_refused_in_the_other_mode():
    """The fast-mode algorithms run mode="fast" calls and the exact-mode ones mode="exact" calls: forcing one on the
    other mode raises before any launch; an unknown name raises on entering force_plan."""
    xq = gq(rand_bf16((64, 64), 3), [30, 34])
    wq = weights(2, 32, 64, 5)
    with pytest.raises(ValueError, match="exact_copies is an? exact-mode algorithm, the call is mode='fast'"):
        gemm(xq, wq, kind="fprop", mode="fast", algorithm="exact_copies")
    with pytest.raises(ValueError, match="fused_128x256 is a fast-mode algorithm, the call is mode='exact'"):
        gemm(xq, wq, kind="fprop", mode="exact", algorithm="fused_128x256")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        gemm(xq, wq, kind="fprop", mode="exact", algorithm="pair")


# fprop's output has N = the weight rows per group columns, which need not be a multiple of 16 (any split of the
# weights is allowed): odd N (single-element stores, the last column of a row checked against N; the old pair stores
# were misaligned there), N % 16 = 8 (pair stores, a partial last 16-column group), N < 16. Every mode and fused fast
# algorithm; the guarded output catches a write past the last row.
@pytest.mark.parametrize("mode_algorithm", ["exact", "fast-auto", "fast-fused_64x256", "fast-fused_128x256",
                                            "fast-fused_pair_256x256"])
@pytest.mark.parametrize("n", [17, 24, 40, 7])
def test_fprop_n_not_multiple_of_16(n, mode_algorithm):
    mode, _, algorithm = mode_algorithm.partition("-")
    algorithm = None if algorithm in ("", "auto") else algorithm
    run_fprop([0, 70, 261, 5], n, 96, mode, torch.float32, with_bias=True, seed=51, algorithm=algorithm)
    run_fprop([33, 0, 300, 1], n, 160, mode, torch.bfloat16, with_bias=n % 2 == 1, seed=52, algorithm=algorithm)


FUSED_FAST = ("fused_64x256", "fused_128x256", "fused_pair_256x256")


def _epilogue_test_mode(algorithm: str) -> tuple[str, dict]:
    """(mode, gemm() plan keywords) of an epilogue test's algorithm: a fast one ("auto" = by the sizes), "exact_fused"
    (the fused exact-mode kernel, 128-column tiles, same epilogues) or "exact_copies" (the exact kernel over fp16
    operand copies, same tiles and epilogues)."""
    mode = "exact" if algorithm.startswith("exact") else "fast"
    return mode, dict(algorithm=None if algorithm == "auto" else algorithm)


# bf16 output goes through the staged epilogue (epilogue "staged", store_tile_staged: rows written to shared
# memory, then bulk-copied to global memory 256 bytes of a row per pass) when N is a multiple of 8, and through the
# direct stores otherwise, in the same kernel. Its edges: a last column tile of 8 columns (a 16-byte copy per row), one
# of 144 columns (a full first pass and a 16-column second one), N = 8, warps whose rows all lie past a small group (5
# rows), bias, wgrad with bf16 output (a group's rows start g * N * K elements into out), and N = 36 for the direct
# fallback. The fused fast algorithms take the TMA store by default where it applies (test_bf16_epilogues), so they
# run every call twice: with the plan as chosen and with the staged epilogue forced; the exact algorithms' bf16
# output has this epilogue only. "auto" runs the calls on the plans the sizes choose, which for these small groups
# are swapped_64x256's direct stores (fprop, dgrad) and fused_64x256's TMA store (wgrad): not this epilogue.
@pytest.mark.parametrize("algorithm", ["auto", *FUSED_FAST, "exact_fused", "exact_copies"])
def test_bf16_staged_epilogue(algorithm):
    mode, kw = _epilogue_test_mode(algorithm)
    for epilogue in (None, "staged") if algorithm in FUSED_FAST else (None,):
        run_fprop([0, 70, 129, 5], 264, 96, mode, torch.bfloat16, with_bias=True, seed=61, epilogue=epilogue, **kw)
        run_fprop([3, 0, 40, 17], 8, 64, mode, torch.bfloat16, with_bias=True, seed=62, epilogue=epilogue, **kw)
        run_dgrad([0, 70, 129, 5], 96, 144, mode, torch.bfloat16, with_bias=True, seed=63, epilogue=epilogue, **kw)
        run_wgrad([37, 0, 200, 5], 80, 48, mode, torch.bfloat16, accumulate=False, seed=64, epilogue=epilogue, **kw)
        run_fprop([0, 70, 129, 5], 36, 96, mode, torch.bfloat16, with_bias=True, seed=65, epilogue=epilogue, **kw)


# fp32 output goes through the whole-line epilogue (epilogue "staged", store_tile_lines: 32 columns of a warp's 16
# rows written to shared memory and read back so that each store is 4 whole 128-byte rows, C and bias read the same way)
# when N is a multiple of 4, and through the direct stores otherwise, in the same kernel. Its edges: a last column tile
# of 8 columns, N = 36 (9 pieces of 4 columns per row), N = 8 with a 5-row group (warps whose rows all lie past M),
# bias, wgrad with and without accumulate (C read back on whole lines; without C, fused_128x256 and exact_copies take
# the TMA store by default, test_wgrad_tma_epilogue), dgrad, and N = 18 for the direct fallback. "auto" runs the calls
# on the plans the sizes choose: swapped_64x256's direct stores for fprop and dgrad, this epilogue for wgrad only.
@pytest.mark.parametrize("algorithm", ["auto", *FUSED_FAST, "exact_fused", "exact_copies"])
def test_fp32_lines_epilogue(algorithm):
    mode, kw = _epilogue_test_mode(algorithm)
    run_fprop([0, 70, 129, 5], 264, 96, mode, torch.float32, with_bias=True, seed=71, **kw)
    run_fprop([3, 0, 40, 17], 36, 64, mode, torch.float32, with_bias=True, seed=72, **kw)
    run_fprop([5, 0, 1, 2], 8, 64, mode, torch.float32, with_bias=True, seed=73, **kw)
    run_dgrad([0, 70, 129, 5], 96, 144, mode, torch.float32, with_bias=True, seed=74, **kw)
    for accumulate in (False, True):
        run_wgrad([37, 0, 200, 5], 80, 48, mode, torch.float32, accumulate=accumulate, seed=75,
                  **kw)
    if algorithm in ("fused_128x256", "exact_copies"):  # wgrad without C through the lines too
        run_wgrad([37, 0, 200, 5], 80, 48, mode, torch.float32, accumulate=False, seed=75, epilogue="staged", **kw)
    run_fprop([0, 70, 129, 5], 18, 96, mode, torch.float32, with_bias=True, seed=76, **kw)


# device.set_num_sms caps the persistent grid, so every CTA walks several tiles; when the last round's tiles fill at
# most half of the CTAs, the one-CTA fast kernels run them as half tiles (128 columns each, TileWalk in
# csrc/gemm/tile_list.cuh). Tile counts here (fused_64x256 / fused_128x256): fprop [64, 0, 200] x N = 1408 has 30 / 18
# tiles of which the last N tile holds 128 columns; wgrad [0, 37, 200, 5] x [304, 144] has 20 / 12 tiles (15 / 9 with
# accumulate: the empty expert has none) of 144 columns. So the caps give: whole rounds only (1, 3), a last round of
# whole tiles (fused_64x256 fprop 8, fused_128x256 fprop 7, ...), and half tiles (fused_64x256 fprop 7 and
# fused_128x256 fprop 8, whose second halves of the last N tile are empty; wgrad, whose second halves hold 16 columns).
# The cluster kernel runs num_sms // 2 clusters (at least one), the exact ones num_sms CTAs, all on whole tiles.
@pytest.mark.parametrize("num_sms", [1, 3, 7, 8])
@pytest.mark.parametrize("algorithm", [*FUSED_FAST, "exact_fused", "exact_copies"])
def test_capped_grid_and_half_tiles(algorithm, num_sms):
    mode, kw = _epilogue_test_mode(algorithm)
    run_fprop([64, 0, 200], 1408, 160, mode, torch.bfloat16, with_bias=True, seed=81, **kw, num_sms=num_sms)
    run_dgrad([64, 0, 200], 96, 1408, mode, torch.float32, with_bias=True, seed=82, **kw, num_sms=num_sms)
    for accumulate in (False, True):
        run_wgrad([0, 37, 200, 5], 304, 144, mode, torch.float32, accumulate=accumulate, seed=83,
                  **kw, num_sms=num_sms)


def test_set_num_sms_is_restored():
    """The cap of capped() (device.set_num_sms) holds within the block only, also when the call raises."""
    dev = _device()
    before = dev.get_num_sms()
    xq, wq = gq(rand_bf16((64, 64), 3), [30, 34]), weights(2, 32, 64, 5)
    with pytest.raises(ValueError, match="cannot run this call"):
        gemm(xq, wq, kind="fprop", mode="exact", algorithm="copies_cutlass", num_sms=3)
    assert dev.get_num_sms() == before
    with capped(5):
        assert dev.get_num_sms() == 5
    assert dev.get_num_sms() == before


# wgrad's fp32 output from fused_128x256 leaves through TMA stores (epilogue "tma_store", store_tile_tma: boxes of
# 16 rows x 32 columns of an [E, N, K] tensor map, which clips rows past N and columns past K) when no C is read back
# (the host refuses an unaligned out, so the map always applies there). Edges: N = 80 and K = 48 (warps whose rows all
# lie past N, a chunk cut at column 48, six chunks past K) with an empty expert (+0 written); two row tiles, the last of
# 16 rows, and a second column tile of 48 columns; a single group; K = 80 (a row pitch of 320 bytes) with an empty last
# expert. Every call writes into a guarded buffer (nothing past the end), against the oracle bit for bit.
# exact_copies (the exact kernel over fp16 copies) stores the same way (128 x 128 tiles: 4 chunks per warp). With C
# (accumulate) the TMA store cannot run: forcing it raises.
@pytest.mark.parametrize("algorithm", ["fused_128x256", "exact_copies"])
def test_wgrad_tma_epilogue(algorithm):
    mode, kw = _epilogue_test_mode(algorithm)
    kw["epilogue"] = "tma_store"
    assert planned("wgrad", [37, 0, 200, 5], 80, 48, torch.float32, mode=mode,
                   algorithm=algorithm).epilogue.name == "tma_store"  # the default
    run_wgrad([37, 0, 200, 5], 80, 48, mode, torch.float32, accumulate=False, seed=91, **kw)
    run_wgrad([300, 17], 272, 304, mode, torch.float32, accumulate=False, seed=92, **kw)
    run_wgrad([33], 144, 32, mode, torch.float32, accumulate=False, seed=93, **kw)
    run_wgrad([19, 40, 0], 64, 80, mode, torch.float32, accumulate=False, seed=94, **kw)
    with pytest.raises(ValueError, match="epilogue='tma_store' cannot run this call: .*without C and bias only"):
        run_wgrad([19, 40, 0], 64, 80, mode, torch.float32, accumulate=True, seed=94, **kw)


def test_mostly_empty_experts():
    run_fprop([0, 0, 33, 0], 64, 64, "exact", torch.bfloat16, with_bias=False)
    run_wgrad([0, 0, 33, 0], 64, 64, "fast", torch.float32, accumulate=True)
    run_wgrad([0, 0, 33, 0], 64, 64, "sm100", torch.float32, accumulate=True)


def spread_bf16(shape, seed, binades, zeros=0.0):
    """Normal values whose 16-blocks are scaled by 2^u, u uniform in [-binades, binades] per block (0: all blocks
    alike), with a fraction ``zeros`` of exact zeros."""
    r = np.random.default_rng(seed)
    v = r.standard_normal(shape) * np.exp2(r.integers(-binades, binades + 1, size=(shape[0], shape[1] // 16)).repeat(
        16, 1))
    v[r.random(shape) < zeros] = 0.0
    return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16).to(DEV)


def run_sm100_layer(x, dy, w, splits, *, num_sms=None, algorithm=None, odd_scales=False, seed=7):
    """fprop (bf16, bias), dgrad (fp32) and accumulating wgrad of mode sm100 on these tokens, gradients and weights,
    each group against oracle.gemm(model="sm100"). odd_scales: sign bits set on a sixth of the nonzero scale bytes of
    x's and dy's planes and one NaN scale byte in each (SPEC 12.7: the sign is ignored, NaN makes the step NaN)."""
    rng = np.random.default_rng(seed)
    e, n = len(splits), dy.shape[1]
    xq = gq(x, splits, rowwise=True, columnwise=True)
    dyq = gq(dy, splits, rowwise=True, columnwise=True)
    wq = gq(w, [n] * e, rowwise=True, columnwise=True, block=(16, 16))
    if odd_scales:
        g = torch.Generator(device="cpu").manual_seed(seed)
        for q in (xq, dyq):
            for sc in (q.row_scales, q.col_scales):
                flip = (torch.rand(sc.shape, generator=g) < 1 / 6).to(DEV) & (sc != 0)
                sc[flip] |= 0x80
                sc[int(torch.nonzero(sc).flatten()[len(torch.nonzero(sc)) // 2])] = 0x7F
    bias = torch.from_numpy(rng.standard_normal((e, n)).astype(np.float32)).to(DEV)
    plan = dict(mode="sm100", num_sms=num_sms, algorithm=algorithm)
    xo, wo, dyo = xq.to_oracle(), wq.to_oracle(), dyq.to_oracle()
    t = sum(splits)
    # (outputs holding 7.0: test_sm100_copies_paths runs this twice with the same results)
    y = gemm(xq, wq, kind="fprop", bias=bias, out=sentinel_out((t, n), torch.bfloat16), **plan)
    check_row_groups(to_np(y), splits, xo.row_planes, wo.row_planes, "sm100", torch.bfloat16, bias=bias.cpu().numpy(),
                     where=f"sm100 fprop ({algorithm})")
    dx = gemm(dyq, wq, kind="dgrad", out=sentinel_out((t, x.shape[1])), **plan)
    check_row_groups(to_np(dx), splits, dyo.row_planes, wo.col_planes, "sm100", torch.float32,
                     where=f"sm100 dgrad ({algorithm})")
    c = torch.from_numpy(rng.standard_normal((e, n, x.shape[1])).astype(np.float32)).to(DEV)
    cn = c.cpu().numpy()
    gemm(dyq, xq, kind="wgrad", out=c, accumulate=True, **plan)
    check_wgrad_groups(to_np(c), splits, dyo.col_planes, xo.col_planes, "sm100", torch.float32, cn=cn,
                       where=f"sm100 wgrad ({algorithm})")


@pytest.mark.parametrize("algorithm", ["sm100_copies", "sm100_simt"])
@pytest.mark.parametrize("num_sms", [None, 1])
def test_sm100_heavy_tailed_and_capped(num_sms, algorithm):
    """Mode sm100 (SPEC 12.7) where its window truncation decides bits: tokens and weights with block amaxes spread over
    many binades (so a step's groups have scale products far apart, and zero codes beside large ones), K not a
    multiple of 64 (a padded last step), fprop with bias, dgrad and accumulating wgrad; a grid of one CTA walks every
    tile."""
    splits, n, k = [37, 0, 130, 5], 80, 208
    t, e = sum(splits), len(splits)
    x, dy, w = spread_bf16((t, k), 1, 12, 0.3), spread_bf16((t, n), 2, 12, 0.3), spread_bf16((e * n, k), 3, 12, 0.3)
    run_sm100_layer(x, dy, w, splits, num_sms=num_sms, algorithm=algorithm)


# sm100_copies' ways through a step (gemm/sm100_copies.cu): block exponents alike (one chain of four: every fprop step
# by a NumPy count of these operands), one binade apart (chained: about half one chain of four, half two chains of two),
# spread over a few binades (per-group partials) and over many (the per-output test, then the exact step); and scale
# bytes with the sign bit or NaN (the exact step). The warp's test passes on the first two. Several 128 x 128 tiles, a
# padded last K step.
SM100_PATHS = {"alike": (0, 0.0, False), "one_binade": (1, 0.0, False), "few_binades": (3, 0.05, False),
               "many_binades": (14, 0.3, False), "odd_scales": (1, 0.0, True)}


@pytest.mark.parametrize("path", list(SM100_PATHS))
def test_sm100_copies_paths(path):
    binades, zeros, odd = SM100_PATHS[path]
    splits, n, k = [300, 0, 37, 140], 208, 336
    t, e = sum(splits), len(splits)
    x, dy = spread_bf16((t, k), 11, binades, zeros), spread_bf16((t, n), 12, binades, zeros)
    w = spread_bf16((e * n, k), 13, binades, zeros)
    for algorithm in ("sm100_copies", "sm100_simt"):
        run_sm100_layer(x, dy, w, splits, algorithm=algorithm, odd_scales=odd)


def test_sm100_unaligned_scale_buffers():
    """sm100_copies bulk-copies each step's scale tiles where both scale buffers are 16-byte aligned and loads the
    scale words from global memory otherwise: the tokens' scales 4 and 1 bytes into a copy of their buffer (the
    plane's bytes unchanged) give the oracle's bits too, fprop and dgrad."""
    import dataclasses

    splits, n, k = [130, 0, 70], 144, 320
    e = len(splits)
    x, dy = spread_bf16((sum(splits), k), 21, 3, 0.05), spread_bf16((sum(splits), n), 23, 3, 0.05)
    wq = gq(spread_bf16((e * n, k), 22, 3, 0.05), [n] * e, rowwise=True, columnwise=True, block=(16, 16))
    wo = wq.to_oracle()
    for shift in (4, 1):
        for kind, a, b_planes in (("fprop", gq(x, splits), wo.row_planes), ("dgrad", gq(dy, splits), wo.col_planes)):
            buf = torch.zeros(a.row_scales.numel() + shift, dtype=torch.uint8, device=DEV)
            buf[shift:] = a.row_scales
            moved = dataclasses.replace(a, row_scales=buf[shift:])
            assert moved.row_scales.data_ptr() % 16 == shift
            out = sentinel_out((sum(splits), n if kind == "fprop" else k))
            y = gemm(moved, wq, kind=kind, mode="sm100", out=out, algorithm="sm100_copies")
            check_row_groups(to_np(y), splits, a.to_oracle().row_planes, b_planes, "sm100", torch.float32,
                             where=f"{kind}, scales {shift} bytes off")


def test_sm100_refusals():
    """Mode sm100's algorithms (sm100_copies, sm100_simt) belong to no other mode, and it runs contractions below 2^19
    only (its int64 model)."""
    xq = gq(rand_bf16((32, 64), 1), [32], rowwise=True)
    wq = weights(1, 16, 64, 2)
    for algorithm in ("sm100_simt", "sm100_copies"):
        with pytest.raises(ValueError, match="sm100-mode algorithm"):
            gemm(xq, wq, kind="fprop", mode="exact", algorithm=algorithm)
    with pytest.raises(ValueError, match="exact-mode algorithm"):
        gemm(xq, wq, kind="fprop", mode="sm100", algorithm="exact_fused")
    big = gq(torch.zeros((2**19, 16), dtype=torch.bfloat16, device=DEV), [2**19], rowwise=False, columnwise=True)
    for algorithm in (None, "sm100_simt"):
        with pytest.raises(ValueError, match="below 524288"):
            gemm(big, big, kind="wgrad", mode="sm100", algorithm=algorithm)


# ------------------------------------------------------------------------------------------------------------
# CUDA graph: capture once (quantize + GEMM), replay with new data and new splits
# ------------------------------------------------------------------------------------------------------------

def capture_graph(step):
    """Run ``step`` twice on a side stream (warm-up: extension loads, allocator pools), then capture one call of it
    in a CUDA graph; returns (graph, what the captured call returned)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        res = step()
    return graph, res


# (E, T, N, K, algorithm forced in fast mode, in exact fprop, in exact wgrad; None: chosen by the sizes)
GRAPH_SHAPES = {
    # few rows per group: by size, fprop the swapped kernel (its token copy from the graph's pool), wgrad fused_64x256
    "small": (4, 256, 64, 128, None, "exact_fused", "exact_fused"),
    "fused_pair": (2, 640, 288, 128, "fused_pair_256x256", "exact_fused", "exact_fused"),
    # the algorithms over copies (their scratch from the graph's pool)
    "copies": (3, 384, 96, 128, "copies_cutlass", "exact_copies", "exact_copies"),
    # exact fprop: exact_hybrid (A's copy and its maps from the graph's pool)
    "hybrid": (4, 256, 64, 128, None, "exact_hybrid", "exact_fused"),
}


def _graph_replay_cases() -> list:
    """(kind, mode, sizes, algorithm) once per distinct call: a shape whose sizes and algorithm repeat an earlier
    shape's for some kind and mode (e.g. "hybrid" outside exact fprop) adds nothing there. Mode sm100's plan
    (sm100_copies: fp16 copies and maps from the graph's pool) runs once per kind."""
    cases, seen = [], set()
    for shape, (e, t, n, k, fast, exact_fprop, exact_wgrad) in GRAPH_SHAPES.items():
        for kind in ("fprop", "wgrad"):
            for mode in ("exact", "fast"):
                algorithm = fast if mode == "fast" else exact_fprop if kind == "fprop" else exact_wgrad
                key = (kind, mode, e, t, n, k, algorithm)
                if key not in seen:
                    seen.add(key)
                    cases.append(pytest.param(kind, mode, (e, t, n, k), algorithm, id=f"{kind}-{mode}-{shape}"))
    cases += [pytest.param(kind, "sm100", (4, 256, 64, 128), None, id=f"{kind}-sm100") for kind in ("fprop", "wgrad")]
    return cases


@pytest.mark.parametrize(("kind", "mode", "sizes", "algorithm"), _graph_replay_cases())
def test_cuda_graph_replay(kind, mode, sizes, algorithm):
    dev = _device()
    e, t, n, k = sizes
    replays = 100 if FULL else 12
    x_buf = torch.zeros((t, k), dtype=torch.bfloat16, device=DEV)
    dy_buf = torch.zeros((t, n), dtype=torch.bfloat16, device=DEV)
    splits_buf = torch.tensor([t // e] * e, dtype=torch.int64, device=DEV)
    wq = weights(e, n, k, 11)
    out_dtype = torch.bfloat16 if kind == "fprop" else torch.float32
    out_shape = (t, n) if kind == "fprop" else (e, n, k)
    out = torch.empty(out_shape, dtype=out_dtype, device=DEV)
    if (mode, sizes, algorithm) == ("fast", GRAPH_SHAPES["small"][:4], None):  # GRAPH_SHAPES' premise
        want = {"fprop": "swapped_64x256", "wgrad": "fused_64x256"}[kind]
        assert planned(kind, [t // e] * e, n, k, out_dtype).algorithm.name == want

    def step():
        if kind == "fprop":
            xq = dev.group_quantize(x_buf, splits_buf, rowwise=True)
            gemm(xq, wq, kind="fprop", out=out, mode=mode, algorithm=algorithm)
            return xq, None
        dyq = dev.group_quantize(dy_buf, splits_buf, rowwise=False, columnwise=True)
        xq = dev.group_quantize(x_buf, splits_buf, rowwise=False, columnwise=True)
        gemm(dyq, xq, kind="wgrad", out=out, mode=mode, algorithm=algorithm)
        return xq, dyq

    graph, res = capture_graph(step)
    for it in range(replays):
        splits = rand_splits(e, t, 100 + it)
        if it % 3 == 0:
            splits = ([0, t] if it % 2 else [t - 17, 17]) + [0] * (e - 2)
        splits_buf.copy_(torch.tensor(splits, dtype=torch.int64))
        x_buf.copy_(rand_bf16((t, k), 1000 + it))
        dy_buf.copy_(rand_bf16((t, n), 2000 + it))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        yn = to_np(out)
        xq, dyq = res
        assert xq.splits.cpu().tolist() == splits
        xo, wo = xq.to_oracle(), wq.to_oracle()
        if kind == "fprop":
            check_row_groups(yn, splits, xo.row_planes, wo.row_planes, mode, out_dtype, where=f"replay {it}")
        else:
            check_wgrad_groups(yn, splits, dyq.to_oracle().col_planes, xo.col_planes, mode, out_dtype,
                               where=f"replay {it}")


# ------------------------------------------------------------------------------------------------------------
# bad input: clear Python errors before any launch
# ------------------------------------------------------------------------------------------------------------

def _all_nan(y: np.ndarray, where: str) -> None:
    assert np.isnan(np.asarray(y, np.float32)).all(), f"{where}: not every element is NaN"


@pytest.mark.parametrize("mode,algorithm,num_sms", [("exact", None, None), ("fast", None, None),
                                                     ("fast", "fused_64x256", 3), ("fast", "fused_128x256", None),
                                                     ("fast", "fused_pair_256x256", None),
                                                     ("fast", "fused_pair_256x256", 2), ("exact", None, 1),
                                                     ("fast", "copies_cutlass", None), ("exact", "exact_copies", None),
                                                     ("exact", "exact_copies", 2), ("fast", "swapped_256x128", None),
                                                     ("fast", "swapped_256x128", 2)])
def test_disagreeing_operand_groups_are_nan(mode, algorithm, num_sms):
    """SPEC 12.5: a group whose operands disagree on its size (sizes live on the device, so this cannot raise) reads
    nothing of that group and is written as NaN; the agreeing groups are unaffected. fprop / dgrad: W quantized with
    unequal splits (one group longer, one shorter than N: reading N rows of either would cross into the next group
    or past the buffer); wgrad: dY and X quantized with different splits of the same T. Under compute-sanitizer
    memcheck this also shows that nothing outside the operands is read. Every fast algorithm (their K-step-free tiles
    only occurred in wgrad before; None: fprop / dgrad by size run swapped_64x256, exact fprop exact_hybrid), the exact
    ones, and capped grids, where a CTA walks agreeing and disagreeing tiles in turn."""

    def gg(*args, **kw):
        return gemm(*args, algorithm=algorithm, num_sms=num_sms, **kw)

    n, k = 48, 64
    splits = [30, 0, 50]
    t = sum(splits)
    if algorithm is None:  # the premise of the None cases
        want = "exact_hybrid" if mode == "exact" else "swapped_64x256"
        assert planned("fprop", splits, n, k, torch.bfloat16, mode=mode).algorithm.name == want
        assert mode == "exact" or planned("dgrad", splits, n, k, torch.float32, bias=True).algorithm.name == want
    x = rand_bf16((t, k), 11)
    xq = gq(x, splits, rowwise=True)
    w = rand_bf16((3 * n, k), 12, 0.05)
    wq_bad = gq(w, [n + 16, n - 16, n], rowwise=True, columnwise=True, block=(16, 16))  # groups 0, 1 disagree
    wo, xo = wq_bad.to_oracle(), xq.to_oracle()
    # (outputs start at zero, so that the NaN checks below can fail)
    out, check_tail = guarded((t, n), torch.bfloat16, values=torch.zeros((t, n), dtype=torch.bfloat16, device=DEV))
    gg(xq, wq_bad, kind="fprop", out=out, mode=mode)
    check_tail("fprop")
    y = to_np(out)
    _all_nan(y[:30], "fprop group 0 (W group of N + 16 rows)")
    check_group(y[30:], xo.row_planes[2], wo.row_planes[2], mode, torch.bfloat16, where="fprop g=2")

    dy = rand_bf16((t, n), 13)
    dyq = gq(dy, splits, rowwise=True)
    out, check_tail = guarded((t, k), torch.float32, values=torch.zeros((t, k), device=DEV))
    with_bias = algorithm != "copies_cutlass"  # (copies_cutlass's bias epilogue writes bf16 output only)
    gg(dyq, wq_bad, kind="dgrad", out=out, mode=mode, bias=torch.ones((3, k), device=DEV) if with_bias else None)
    check_tail("dgrad")
    y = to_np(out)
    _all_nan(y[:30], "dgrad group 0")
    check_group(y[30:], dyq.to_oracle().row_planes[2], wo.col_planes[2], mode, torch.float32,
                bias=np.ones(k, np.float32) if with_bias else None, where="dgrad g=2")

    dyc = gq(dy, splits, rowwise=False, columnwise=True)
    xc_bad = gq(x, [50, 0, 30], rowwise=False, columnwise=True)  # groups 0 and 2 disagree, group 1 is empty in both
    for accumulate in (False, True):
        c = torch.randn((3, n, k), dtype=torch.float32).to(DEV)
        c[1, 0, :4] = -0.0
        # (without accumulate the output starts at 7: the NaN checks and the empty group's +0 can both fail)
        out, check_tail = guarded((3, n, k), torch.float32, values=c if accumulate else torch.full_like(c, 7.0))
        gg(dyc, xc_bad, kind="wgrad", out=out, accumulate=accumulate, mode=mode)
        check_tail("wgrad")
        y, cn = to_np(out), c.cpu().numpy()
        _all_nan(y[0], f"wgrad group 0 (accumulate={accumulate})")
        _all_nan(y[2], f"wgrad group 2 (accumulate={accumulate})")
        if accumulate:
            assert np.array_equal(bits(y[1]), bits(cn[1])), "wgrad: the agreeing empty group changed C"
        else:
            assert np.all(bits(y[1]) == 0), "wgrad: the agreeing empty group is not +0"


def test_binding_refusals_are_messages():
    """The GEMM binding's own checks (bypassing device/gemm.py) refuse with a returned message, in a child process:
    a crash there (e.g. a message formatted with iostreams in a module with a static libstdc++,
    csrc/common/refusal.h) must fail this test, not take the test worker down."""
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..")
    tool = os.path.join(root, "tools", "sanitizer", "check_binding_errors.py")
    run = subprocess.run([sys.executable, tool, "gemm"], capture_output=True, text=True, timeout=600, cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert run.stdout.count("refused: nvfp4_gemm:") == 6, run.stdout
    assert "got 5 and 5 values" in run.stdout, run.stdout  # numbers formatted into the message


def test_out_writes_are_seen_by_autograd():
    """An eager out= call bumps out's version counter, as the out= op's declared mutation does when traced: a tensor
    autograd saved and the GEMM then overwrote fails the backward instead of giving a wrong gradient. An out that
    requires grad is refused while grad mode is on and taken under torch.no_grad() (torch's out= rule), with the
    same bits as into a plain tensor."""
    gg = _gg()
    splits, n, k = [30, 10], 32, 64
    dyq = gq(rand_bf16((40, n), 4), splits, rowwise=False, columnwise=True)
    xq = gq(rand_bf16((40, k), 1), splits, rowwise=False, columnwise=True)
    c = torch.ones((2, n, k), dtype=torch.float32, device=DEV)
    leaf = c.clone().requires_grad_()
    saved = leaf * 1.0
    loss = (saved * saved).sum()  # saves `saved` for the backward
    v = saved._version
    with torch.no_grad():
        gg(dyq, xq, kind="wgrad", out=saved, accumulate=True)
    assert saved._version > v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    with pytest.raises(RuntimeError, match="out= does not support automatic differentiation"):
        gg(dyq, xq, kind="wgrad", out=leaf, accumulate=True)
    with torch.no_grad():
        gg(dyq, xq, kind="wgrad", out=leaf, accumulate=True)
    gg(dyq, xq, kind="wgrad", out=c, accumulate=True)
    assert torch.equal(leaf.detach(), c)
    # (both came from the same GEMM: the values themselves against the oracle)
    check_wgrad_groups(to_np(c), splits, dyq.to_oracle().col_planes, xq.to_oracle().col_planes, "fast", torch.float32,
                       cn=np.ones((2, n, k), np.float32), where="wgrad into out=")


def test_bad_inputs():
    gg = _gg()
    e, n, k = 2, 32, 64
    xq = gq(rand_bf16((40, k), 1), [30, 10], rowwise=True, columnwise=True)
    wq = weights(e, n, k, 2)
    w_badk = weights(e, n, 2 * k, 3)
    dyq = gq(rand_bf16((40, n), 4), [30, 10], rowwise=True, columnwise=True)
    x_row_only = gq(rand_bf16((40, k), 1), [30, 10], rowwise=True)
    with pytest.raises(ValueError, match="mismatched K"):
        gg(xq, w_badk, kind="fprop")
    with pytest.raises(ValueError, match="kind"):
        gg(xq, wq, kind="forward")
    with pytest.raises(ValueError, match="mode"):
        gg(xq, wq, mode="turbo")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        gemm(xq, wq, algorithm="huge")
    for gone in (dict(fast_kernel="large"), dict(exact_kernel="fused"), dict(max_ctas=4)):  # force_plan, set_num_sms
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            gg(xq, wq, **gone)
    before = _device().get_num_sms()
    for bad, err in ((0, ValueError), (-3, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(err, match="num_sms"):
            _device().set_num_sms(bad)
        assert _device().get_num_sms() == before
    with pytest.raises(ValueError, match="shape"):
        gg(xq, wq, kind="fprop", out=torch.empty((40, n + 16), dtype=torch.bfloat16, device=DEV))
    with pytest.raises(TypeError, match="dtype"):
        gg(xq, wq, kind="fprop", out=torch.empty((40, n), dtype=torch.float16, device=DEV))
    with pytest.raises(ValueError, match="accumulate"):
        gg(dyq, xq, kind="wgrad", accumulate=True)
    with pytest.raises(ValueError, match="bias"):
        gg(dyq, xq, kind="wgrad", bias=torch.zeros((e, k), device=DEV))
    with pytest.raises(ValueError, match="bias"):
        gg(xq, wq, kind="fprop", bias=torch.zeros((e, n + 1), device=DEV))
    with pytest.raises(ValueError, match="columnwise"):
        gg(dyq, x_row_only, kind="wgrad")
    with pytest.raises(ValueError, match="group counts"):
        gg(xq, weights(3, n, k, 5), kind="fprop")
    with pytest.raises(TypeError, match="DeviceGroupedNVFP4Tensor"):
        gg(xq.row_data, wq)
    with pytest.raises(ValueError, match="dgrad"):
        gg(xq, wq, kind="dgrad")  # a has K=64 columns but W has N=32 rows per group
    with pytest.raises(ValueError, match="float32"):  # (two arguments in conflict, as the oracle's check)
        gg(dyq, xq, kind="wgrad", accumulate=True, out=torch.empty((e, n, k), dtype=torch.bfloat16, device=DEV))
    with pytest.raises(ValueError, match="wgrad"):  # as oracle.grouped_gemm: accumulate is wgrad's main_grad
        gg(xq, wq, kind="fprop", accumulate=True, out=torch.empty((40, n), dtype=torch.float32, device=DEV))
    with pytest.raises(TypeError, match="accumulate"):  # the oracle's C array, not the device's flag
        gg(dyq, xq, kind="wgrad", accumulate=torch.zeros((e, n, k), device=DEV))
    # a DeviceGroupedNVFP4Tensor changed by hand: its buffers are checked against what the kernels read
    import dataclasses

    # out overlapping an operand's bytes (the kernels would overwrite what other CTAs still read): here the last 8
    # bytes of out are an operand's two amaxes
    big = torch.zeros(e * n * k * 4, dtype=torch.uint8, device=DEV)
    nb = 40 * n * 2
    with pytest.raises(ValueError, match="shares memory"):
        gg(xq, dataclasses.replace(wq, row_amax=big[nb - 8:nb].view(torch.float32)), kind="fprop",
           out=big[:nb].view(torch.bfloat16).view(40, n))
    with pytest.raises(ValueError, match="shares memory"):
        gg(dataclasses.replace(dyq, col_amax=big[-8:].view(torch.float32)), xq, kind="wgrad",
           out=big.view(torch.float32).view(e, n, k))

    with pytest.raises(ValueError, match="needs"):
        gg(dataclasses.replace(xq, shape=(40, 2 * k)), w_badk, kind="fprop")
    with pytest.raises(ValueError, match="amax"):
        gg(xq, dataclasses.replace(wq, row_amax=wq.row_amax.cpu()), kind="fprop")
    with pytest.raises(ValueError, match="must be on"):
        cpu_out = torch.empty((40, n), dtype=torch.bfloat16)
        gg(xq, wq, kind="fprop", out=cpu_out)
    with pytest.raises(ValueError, match="fused_pair_256x256 is a fast-mode algorithm, the call is mode='exact'"):
        gemm(xq, wq, mode="exact", algorithm="fused_pair_256x256")
    w_rht = _device().group_quantize(rand_bf16((e * n, k), 6), torch.tensor([n] * e, device=DEV), rowwise=True,
                                     columnwise=True, rht=True)
    with pytest.raises(ValueError, match="rht"):
        gg(dyq, w_rht, kind="dgrad")
    dy_rht = _device().group_quantize(rand_bf16((40, n), 4), torch.tensor([30, 10], device=DEV), rowwise=False,
                                      columnwise=True, rht=True)
    with pytest.raises(ValueError, match="rht"):
        gg(dy_rht, xq, kind="wgrad")
    x_rht_other = _device().group_quantize(rand_bf16((40, k), 1), torch.tensor([30, 10], device=DEV),
                                           rowwise=False, columnwise=True, rht=True, rht_signs=0x1234)
    with pytest.raises(ValueError, match="sign masks"):
        gg(dy_rht, x_rht_other, kind="wgrad")


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_matches_oracle_grouped_gemm(kind):
    """device.grouped_gemm against oracle.grouped_gemm on the operands' .to_oracle() (SPEC 12.5): exact mode byte for
    byte against model="sequential", fast mode against model="tensor_core" (SPEC 12.6); empty and unaligned groups."""
    splits, n, k = [0, 37, 5, 0, 130], 48, 96
    t = sum(splits)
    if kind == "wgrad":
        a = gq(rand_bf16((t, n), 71), splits, rowwise=False, columnwise=True)
        b = gq(rand_bf16((t, k), 72), splits, rowwise=False, columnwise=True)
    else:
        a = gq(rand_bf16((t, n if kind == "dgrad" else k), 73), splits)
        b = weights(len(splits), n, k, 74)
    ao, bo = a.to_oracle(), b.to_oracle()
    for mode, model in (("exact", "sequential"), ("fast", "tensor_core")):
        y = to_np(_gg()(a, b, kind=kind, mode=mode))
        want = np.asarray(oracle.grouped_gemm(ao, bo, kind=kind, model=model))
        assert y.dtype == want.dtype and y.shape == want.shape and y.tobytes() == want.tobytes(), (kind, mode)


def test_algorithm_tiles_agree_with_the_extension():
    """device/_dispatch.py's ALGORITHM_TILES is the tile whose list the setup kernel builds for each algorithm
    (csrc/gemm/setup.cu tile_of, through the binding's algorithm_tile)."""
    from device._build import load_gemm_extension
    from device._codes import Algorithm
    from device._dispatch import ALGORITHM_TILES

    ext = load_gemm_extension()
    assert set(ALGORITHM_TILES) == set(Algorithm)
    for a in Algorithm:
        assert tuple(ext.algorithm_tile(int(a))) == ALGORITHM_TILES[a], a.name


def _raw_gemm(kind, a, b, out, *, algorithm, loader, epilogue, bias=None, num_sms=0, b_copy=None, ws=None):
    """The GEMM binding called directly (csrc/gemm/bindings.cpp grouped_gemm_), with the arguments device/gemm.py
    builds for a call on these operands but the plan given here (names of device._codes' enums, or raw codes): what
    the binding does with a plan that Python would refuse. Returns the binding's message ("" when it ran). ``ws``: the
    workspace to use (uint8, E prob_size() + 4 (E + 1) bytes; the setup kernel's Prob per group, then the tile prefix
    sum), so that a test can read what the setup kernel wrote."""
    from device import gemm as dgemm
    from device._build import load_gemm_extension
    from device._codes import Algorithm, Epilogue, GemmKind, Loader

    ext = load_gemm_extension()
    e = int(a.splits.numel())
    (t_a, k_a), (t_b, k_b) = a.shape, b.shape
    if kind == "wgrad":
        planes = ("col", "col")
        b_rows, a_rows, kc, cols = k_b, k_a, 0, k_b
        grid_upper = e * -(-k_a // 128) * -(-k_b // 128)
    else:
        planes = ("row", "row" if kind == "fprop" else "col")
        n_w = t_b // e
        b_rows, a_rows, kc, cols = (n_w, 0, k_a, n_w) if kind == "fprop" else (k_b, 0, n_w, k_b)
        grid_upper = (t_a // 128 + e) * -(-cols // 128)
    (ad, as_, aa), (bd, bs, ba) = (dgemm._plane(x, p, name, kind) for x, p, name in ((a, planes[0], "a"),
                                                                                     (b, planes[1], "b")))
    if ws is None:
        ws = torch.empty(e * int(ext.prob_size()) + 4 * (e + 1), dtype=torch.uint8, device=DEV)
    return ext.grouped_gemm_(int(GemmKind[kind]), e, ad, as_, a.offsets, aa, bd, bs, b.offsets, ba, out, bias, False,
                             int(b_rows), int(a_rows), int(kc), int(cols), dgemm._RCP_7225344, 0, int(grid_upper), ws,
                             *(int(enum[v]) if isinstance(v, str) else int(v)
                               for enum, v in ((Algorithm, algorithm), (Loader, loader), (Epilogue, epilogue))),
                             num_sms, b_copy)


def test_binding_refuses_plans_it_cannot_run():
    """The extension runs the plan it is given and refuses one it cannot run, with a returned message, before the GEMM
    kernel is launched (the output untouched): the checks device/_dispatch.py makes, made again in C++ (a plan forced
    past Python, e.g. by a stale plan table, must not become a wrong launch)."""
    splits, n, k = [30, 0, 50, 20], 48, 64
    t = sum(splits)
    xq = gq(rand_bf16((t, k), 1), splits)
    wq = weights(len(splits), n, k, 2)
    dyq = gq(rand_bf16((t, n), 3), splits)
    dyc = gq(rand_bf16((t, n), 4), splits, rowwise=False, columnwise=True)
    xc = gq(rand_bf16((t, k), 5), splits, rowwise=False, columnwise=True)

    def refused(kind, a, b, out, want, **plan):
        out.fill_(float("nan"))
        err = _raw_gemm(kind, a, b, out, **plan)
        torch.cuda.synchronize()
        assert want in err, (plan, err)
        assert bool(torch.isnan(out).all()), f"{plan}: the output was written"

    y = torch.empty((t, n), dtype=torch.bfloat16, device=DEV)
    dx = torch.empty((t, k), dtype=torch.float32, device=DEV)
    dw = torch.empty((len(splits), n, k), dtype=torch.float32, device=DEV)
    refused("wgrad", dyc, xc, dw, "swapped_64x256 runs fprop and dgrad only", algorithm="swapped_64x256",
            loader="cp_async", epilogue="direct")
    refused("dgrad", dyq, wq, dx, "swapped_64x256's TMA loader runs fprop only", algorithm="swapped_64x256",
            loader="tma", epilogue="direct")
    refused("wgrad", dyc, xc, dw, "exact_hybrid runs fprop and dgrad", algorithm="exact_hybrid", loader="tma",
            epilogue="staged")
    refused("fprop", xq, wq, y, "unknown algorithm code 11", algorithm=11, loader="cp_async", epilogue="staged")
    # sm100_copies loads by TMA and stores directly, nothing else
    refused("fprop", xq, wq, y, "cannot run this call", algorithm="sm100_copies", loader="cp_async", epilogue="direct")
    refused("fprop", xq, wq, y, "cannot run this call", algorithm="sm100_copies", loader="tma", epilogue="staged")
    refused("fprop", xq, wq, y, "unknown loader code 3", algorithm="fused_128x256", loader=3, epilogue="staged")
    refused("fprop", xq, wq, y, "unknown epilogue code 4", algorithm="fused_128x256", loader="cp_async", epilogue=4)
    # the TMA store of an output whose map does not apply: fprop's fp32 output (wgrad's map only)
    y32 = torch.empty((t, n), dtype=torch.float32, device=DEV)
    refused("fprop", xq, wq, y32, "cannot run this call", algorithm="fused_128x256", loader="cp_async",
            epilogue="tma_store")
    # the weights' fp16 copy (copies_cutlass' b_copy): fp16 [E, N, K] only, fprop and bf16 dgrad only
    from device import _ops

    copy = _ops.weight_f16_copy(wq.row_data, wq.row_scales, wq.offsets, len(splits), n, k)
    cutlass = dict(algorithm="copies_cutlass", loader="tma", epilogue="cutlass")
    refused("fprop", xq, wq, y, "b copy has dtype", b_copy=copy.float(), **cutlass)
    refused("fprop", xq, wq, y, "must hold E N K = 12288 values, got 1000", b_copy=copy.view(-1)[:1000], **cutlass)
    refused("dgrad", dyq, wq, dx, "dgrad over a b copy writes bfloat16 only", b_copy=copy, **cutlass)
    refused("wgrad", dyc, xc, dw, "a b copy (the weights' values) serves fprop and dgrad", b_copy=copy, **cutlass)
    # copies_cutlass's bias epilogue: bf16 output over a K-major B only
    dx16 = torch.empty((t, k), dtype=torch.bfloat16, device=DEV)
    want = "copies_cutlass adds a bias to bf16 output over a K-major B only"
    refused("fprop", xq, wq, y32, want, bias=torch.zeros((len(splits), n), device=DEV), **cutlass)
    refused("dgrad", dyq, wq, dx16, want, bias=torch.zeros((len(splits), k), device=DEV), b_copy=copy, **cutlass)
    # and a plan that can run these operands runs, with the oracle's bits
    out = torch.full((t, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    assert _raw_gemm("fprop", xq, wq, out, algorithm="fused_128x256", loader="cp_async", epilogue="staged") == ""
    check_row_groups(to_np(out), splits, xq.to_oracle().row_planes, wq.to_oracle().row_planes, "fast",
                     torch.bfloat16, where="raw binding, fused_128x256")
