"""GPU tests whose buffers run past 32-bit offsets (opt-in: ``NVFP4_LARGE=1``; about 40 GB of GPU memory).

Real MoE layers pass those sizes: DeepSeek-V3's 256 experts of 4096 x 7168 weights are 7.5e9 elements, a packed
FP4 plane of 3.8e9 bytes, and their fp32 weight gradient 30 GB. Here W stacks E = 72 experts of N x K = 8192 x 8192:
4.8e9 bf16 elements (past 2^32), a packed plane of 2.4e9 bytes (expert 64 starts at byte 2^31), and wgrad writes
72 x 8192 x 8192 fp32 (19 GB, past 2^32 bytes).

Expected bytes come from the NumPy oracle on the host slices of the experts (or rows) checked: the first, those on
each side of element 2^31 and of byte 2^31, and the last. Group g of a grouped call equals the oracle on group g
alone (SPEC 9.1, 12.5), so a wrapped offset shows as different bytes there. Outputs start as NaN (or as a checked
previous result) and are checked whole for unwritten elements, with a sentinel past their end.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from test_device_gemm import check_group, gemm, guarded, rows_of, to_np  # noqa: E402
from test_device_quantize import assert_bytes, assert_f32_bits  # noqa: E402

import oracle  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not os.environ.get("NVFP4_LARGE"), reason="opt-in (NVFP4_LARGE=1): ~40 GB of GPU memory"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

E, N, K = 72, 8192, 8192
TOK = 16                                   # tokens per expert in the GEMM calls
CHECK = [0, 31, 32, 63, 64, 71]            # experts: first, around element 2^31, around byte 2^31, last
EDGE = np.r_[0:256, N - 256:N]             # rows of a plane checked against the oracle (N == K here)
# 128-aligned row ranges of the stacked W checked in the single-tensor quantize: the first rows, around element
# 2^31 (row 2^18) and element 2^32 (byte 2^31 of a packed plane, row 2^19), and the last rows
ROW_RANGES = [(0, 256), (2**18 - 128, 2**18 + 128), (2**19 - 128, 2**19 + 128), (E * N - 256, E * N)]
DEV = "cuda"


@pytest.fixture(scope="module")
def big():
    free, _ = torch.cuda.mem_get_info()
    if free < 48e9:
        pytest.skip(f"needs ~48 GB of free GPU memory, {free / 1e9:.1f} GB free")
    gen = torch.Generator(device=DEV).manual_seed(20261123)
    w = torch.randn((E * N, K), device=DEV, dtype=torch.bfloat16, generator=gen)
    # powers of two per row (exact in bf16), so that blocks and experts get different scales and amaxes
    w.mul_(torch.exp2((torch.arange(E * N, device=DEV) % 9 - 6).to(torch.bfloat16)).unsqueeze(1))
    import device

    splits = torch.full((E,), N, dtype=torch.int64, device=DEV)
    wq = device.group_quantize(w, splits, rowwise=True, columnwise=True, block=(16, 16))
    torch.cuda.synchronize()
    return dict(w=w, wq=wq, host={g: to_np(w[g * N:(g + 1) * N]) for g in CHECK}, planes={})


def weight_plane(big, g: int, which: str):
    key = (g, which)
    if key not in big["planes"]:
        big["planes"][key] = big["wq"].group_plane(g, which)
    return big["planes"][key]


def test_group_quantize_past_32_bit_offsets(big):
    wq = big["wq"]
    offs = wq.offsets.cpu().numpy()
    g = np.arange(E + 1, dtype=np.int64)
    # SPEC 9.2 by hand: every expert has N rows, so the offsets are multiples of the per-expert sizes
    want = np.stack([g * N, g * (N // 128), g * (N * K // 2), g * (N * K // 16), g * (K * N // 2), g * (K * N // 16)])
    assert np.array_equal(offs, want), "offsets table"
    assert offs[2, 64] == 2**31 and offs[4, E] > 2**31
    # every expert's amax against torch's NaN-free max |w| (no RHT: both planes share it)
    ref = big["w"].view(E, N * K).abs().amax(dim=1).float().cpu().numpy()
    assert_f32_bits("row amax", wq.row_amax, ref)
    assert_f32_bits("col amax", wq.col_amax, ref)
    for e in CHECK:
        q = oracle.quantize(big["host"][e], rowwise=True, columnwise=True, block=(16, 16))
        for name, want_plane in (("row", q.row), ("col", q.col)):
            got = weight_plane(big, e, name)
            assert_bytes(f"g={e} {name} data", got.data, want_plane.data)
            assert_bytes(f"g={e} {name} scales", got.scales, want_plane.scales)
            sidx = 3 if name == "row" else 5
            raw = getattr(wq, f"{name}_scales")[int(offs[sidx, e]):int(offs[sidx, e + 1])]
            assert_bytes(f"g={e} {name} swizzled scales (padding included)", raw, want_plane.swizzled_scales())


def test_quantize_single_tensor_past_32_bit_offsets(big):
    import device

    w = big["w"]
    m = E * N
    row_amax = float(w.abs().amax().float())
    # computed amax: the amax pass over all 4.8e9 elements
    q0 = device.quantize(w, rowwise=True, columnwise=False)
    assert_f32_bits("computed row amax", q0.row_amax, [row_amax])
    del q0
    # supplied amaxes (row, RHT col), so that 128-row slices can be checked against the oracle on those rows
    amax = (row_amax, 37.5)
    q = device.quantize(w, rowwise=True, columnwise=True, rht=True, amax=amax)
    rs = q.row_scales.view(m // 128, K // 64, 512)   # SPEC 8.2: 512-byte tiles, row tile major
    cs = q.col_scales.view(K // 128, m // 64, 512)
    for r0, r1 in ROW_RANGES:
        want = oracle.quantize(to_np(w[r0:r1]), rowwise=True, columnwise=True, rht=True, amax=amax)
        where = f"rows [{r0}, {r1})"
        assert_bytes(f"{where} row data", q.row_data[r0:r1], want.row.data)
        assert_bytes(f"{where} row scales (swizzled)", rs[r0 // 128:r1 // 128], want.row.swizzled_scales())
        assert_bytes(f"{where} col data", q.col_data[:, r0 // 2:r1 // 2], want.col.data)
        assert_bytes(f"{where} col scales (swizzled)", cs[:, r0 // 64:r1 // 64], want.col.swizzled_scales())
    del q


def check_groups(cases: dict, mode, out_dtype, where):
    """cases: expert -> (device values to compare, oracle a plane, oracle b plane, accumulated C or None), each checked
    by test_device_gemm's contract (exact: oracle sequential bits; fast: the SPEC 12.4 bound and tensor_core bits)."""
    for e, (got, a, b, acc) in cases.items():
        check_group(got, a, b, mode, out_dtype, acc=acc, where=f"{where} g={e}")


def _configs(cutlass: bool, fast: list, exact: list):
    """(mode, forced algorithm) pairs to run (None: chosen by the sizes); without CUTLASS in the build, copies_cutlass
    is left out with a warning in pytest's summary, not silently."""
    out = [("fast", a) for a in fast] + [("exact", a) for a in exact]
    kept = [(m, a) for m, a in out if cutlass or a != "copies_cutlass"]
    if len(kept) < len(out):
        warnings.warn(f"copies_cutlass not built (no CUTLASS): {len(out) - len(kept)} configurations not checked",
                      stacklevel=2)
    return kept


def _has_cutlass() -> bool:
    from device._build import load_gemm_extension

    return bool(load_gemm_extension().has_cutlass())


def _tokens(cols: int, seed: int, **kw):
    import device

    gen = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn((E * TOK, cols), device=DEV, dtype=torch.bfloat16, generator=gen)
    return device.group_quantize(x, torch.full((E,), TOK, dtype=torch.int64, device=DEV), **kw)


def run_over_weights(big, kind: str, fast: list, exact: list):
    """fprop (tokens x K against W's rowwise planes) or dgrad (tokens x N against W's columnwise planes) through the
    given algorithms; the checked experts' outputs at the EDGE columns against the oracle."""
    contraction, cols, plane = (K, N, "row") if kind == "fprop" else (N, K, "col")
    tq = _tokens(contraction, 1 if kind == "fprop" else 2, rowwise=True)
    a_planes = {e: tq.group_plane(e, "row") for e in CHECK}
    for mode, algorithm in _configs(_has_cutlass(), fast, exact):
        out, check_tail = guarded((E * TOK, cols), torch.bfloat16)
        gemm(tq, big["wq"], kind=kind, out=out, mode=mode, algorithm=algorithm)
        where = f"{kind} {mode} {algorithm or 'chosen by the sizes'}"
        check_tail(where)
        assert not bool(torch.isnan(out).any()), f"{where}: unwritten outputs"
        yn = to_np(out)
        check_groups({e: (yn[e * TOK:(e + 1) * TOK][:, EDGE], a_planes[e], rows_of(weight_plane(big, e, plane), EDGE),
                          None) for e in CHECK}, mode, torch.bfloat16, where)
        del out


def test_fprop_over_weights_past_32_bit_offsets(big):
    run_over_weights(big, "fprop", [None, "swapped_64x256", "fused_64x256", "fused_128x256", "fused_pair_256x256",
                                    "copies_cutlass"], [None, "exact_fused", "exact_copies"])


def test_dgrad_over_weights_past_32_bit_offsets(big):
    run_over_weights(big, "dgrad", [None, "fused_128x256", "copies_cutlass"], [None, "exact_copies"])


def test_wgrad_output_past_32_bit_offsets(big):
    from device.gemm import grouped_gemm

    dyq = _tokens(N, 3, rowwise=False, columnwise=True, rht=True)
    xq = _tokens(K, 4, rowwise=False, columnwise=True, rht=True)
    a = {e: rows_of(dyq.group_plane(e, "col"), EDGE) for e in CHECK}
    b = {e: rows_of(xq.group_plane(e, "col"), EDGE) for e in CHECK}
    idx = torch.from_numpy(EDGE).to(DEV)
    out, check_tail = guarded((E, N, K), torch.float32)   # 19.3 GB of fp32, NaN
    prev = None  # the previous call's checked blocks: the C of an accumulating call
    for mode, accumulate in (("exact", False), ("fast", True), ("fast", False), ("exact", True)):
        where = f"wgrad {mode} accumulate={accumulate}"
        grouped_gemm(dyq, xq, kind="wgrad", out=out, mode=mode, accumulate=accumulate)
        check_tail(where)
        assert not bool(torch.isnan(out).any()), f"{where}: unwritten outputs"
        # the checked 512 x 512 block of each expert's dW, on the host
        got = {e: out[e].index_select(0, idx).index_select(1, idx).cpu().numpy() for e in CHECK}
        check_groups({e: (got[e], a[e], b[e], prev[e] if accumulate else None) for e in CHECK}, mode, torch.float32,
                     where)
        prev = got


@pytest.mark.parametrize("rows,cols,swizzled", [(1, 2**31 + 64, False), (128, 2**24 + 16, False),
                                                (128, 2**24 + 16, True)])
def test_dequantize_past_2_31_elements(rows, cols, swizzled):
    """The dequantize binding takes planes of 2^31 elements and more (its kernel indexes in 64-bit): a 1-row plane of
    2^31 + 64 columns and a 128-row one (compact and swizzled scales) whose last row ends past element 2^31. Every
    output element is written (the output starts as NaN; no scale byte is NaN), a sentinel past the end stays, and
    the first and last 256 blocks of the first and last row equal the oracle on those blocks' bytes (blocks are
    independent, SPEC 11.1)."""
    import device
    from device._build import load_extension

    gen = torch.Generator(device=DEV).manual_seed(rows)
    data = torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8, device=DEV, generator=gen)
    scales = torch.randint(0, 255, (rows, cols // 16), dtype=torch.uint8, device=DEV, generator=gen)
    scales[scales == 0x7F] = 0x7E  # no NaN scale byte: a NaN output then means an unwritten one
    amax = torch.tensor([1234.5], dtype=torch.float32, device=DEV)
    sc = device.swizzle_scales(scales) if swizzled else scales
    n = rows * cols
    buf = torch.full((n + 16,), float("nan"), dtype=torch.float32, device=DEV)
    out = buf[:n].view(rows, cols)
    err = load_extension().dequantize_(data, sc, amax, rows, cols, swizzled, 0, 448, out)
    assert err == "", err
    torch.cuda.synchronize()
    assert not torch.isnan(out).any().item(), "unwritten output elements"
    assert torch.isnan(buf[n:]).all().item(), "written past the end"
    nb = cols // 16
    for r in (0, rows - 1):
        for b0 in (0, nb - 256):
            d = data[r : r + 1, b0 * 8 : (b0 + 256) * 8].cpu().numpy()
            s = scales[r : r + 1, b0 : b0 + 256].cpu().numpy()
            want = oracle.dequantize(oracle.QuantizedPlane(d, s, np.float32(1234.5), (1, 4096)))
            got = out[r : r + 1, b0 * 16 : (b0 + 256) * 16].cpu().numpy()
            assert_bytes(f"row {r} blocks {b0}..", got.view(np.uint32), want.view(np.uint32))
    del buf, data, scales, sc
    torch.cuda.empty_cache()
