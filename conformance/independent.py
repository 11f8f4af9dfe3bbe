"""Implementations the oracle is checked against (CPU self-conformance).

Libraries we did not write: ml_dtypes (E2M1, E4M3, bf16 casts), torch (bf16 cast, a float64 matmul RHT),
torchao 0.18 (``nvfp4_quantize`` and its ``to_blocked`` scale swizzle), Python's ``fractions`` (exact GEMM) and
mmasim 2.1.1 (MMA-Sim's instruction models of Blackwell's tcgen05.mma and Hopper's wgmma).
Layout code here (swizzle scatter, offsets, capacities) is written from SPEC 8.2 / 9.2 / 9.3 independently of
``oracle/swizzle.py`` (a scatter by the published byte formula instead of a reshape/transpose).
torch, torchao and mmasim are imported lazily: they are optional extras. The torchao backend converts between
torchao's tensor and the oracle's planes through ``oracle.interop`` (the swizzled layout itself is checked by
``torchao_swizzle``), and ``fraction_gemm`` reads the oracle planes' codes through their ``codes()``.
"""

from __future__ import annotations

import contextlib
import functools
from fractions import Fraction

import ml_dtypes
import numpy as np

from oracle.interop import torchao_nvfp4_module

__all__ = [
    "mld_e2m1", "mld_e4m3", "mld_bf16", "mld_dequantize", "torch_bf16", "torch_rht", "torchao_quantize", "torchao_swizzle",
    "swizzle_by_formula", "compact_by_formula", "offsets_by_table", "capacities_by_formula", "fraction_gemm", "round_fraction",
    "import_torch", "import_torchao", "one_torch_thread", "torch_nan_products_keep_the_multiplier", "import_mmasim",
    "mmasim_tcgen05_nvf4", "mmasim_wgmma", "sm100_epilogue_by_hand", "torch_to_numpy",
]


# ---------------------------------------------------------------------------------------------------------------
# optional imports
# ---------------------------------------------------------------------------------------------------------------

def import_torch():
    """``torch`` or None (optional extra)."""
    try:
        import torch
    except Exception:  # noqa: BLE001
        return None
    return torch


def import_torchao():
    """``torchao.prototype.mx_formats`` modules ``(nvfp4_tensor, utils)`` or None; silences its import chatter."""
    try:
        nvfp4_tensor = torchao_nvfp4_module()  # (imports the package quietly; utils then loads without a word)
        from torchao.prototype.mx_formats import utils
    except Exception:  # noqa: BLE001
        return None
    return nvfp4_tensor, utils


# ---------------------------------------------------------------------------------------------------------------
# codecs
# ---------------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def one_torch_thread():
    """torch on one intra-op thread inside the block, the caller's count restored after it. torchao's CPU products of
    two NaNs keep the multiplier's payload, except next to a cut of torch's parallel split, whose place depends on the
    thread count (SPEC 3.5); one thread has no cut, so torchao's bytes do not depend on the caller's setting."""
    torch = import_torch()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def torch_nan_products_keep_the_multiplier() -> bool:
    """Whether this torch forms torchao's NaN products as SPEC 3.5 models them: ``x * mult[..., None]`` (torchao's
    ``data_hp * reciprocal_scale.unsqueeze(-1)``) of two NaNs keeps the multiplier's payload, on one intra-op thread.
    True for torch's x86 AVX2 / AVX512 kernels; its DEFAULT kernels (CPUs without AVX2, aarch64) keep x's."""
    torch = import_torch()
    x = torch.full((4, 8, 16), 0x7FC00000, dtype=torch.int32).view(torch.float32)
    mult = torch.full((4, 8), 0x7FF00000, dtype=torch.int32).view(torch.float32)
    with one_torch_thread():
        product = (x * mult.unsqueeze(-1)).view(torch.int32)
    return bool((product == 0x7FF00000).all())


def _finite_domain(x: np.ndarray) -> np.ndarray:
    return x[~np.isnan(x)]


def mld_e2m1(x: np.ndarray) -> np.ndarray:
    """E2M1 codes by ml_dtypes ``float4_e2m1fn`` after clipping to +-6 (NaN inputs dropped)."""
    v = np.clip(_finite_domain(x), np.float32(-6), np.float32(6))
    return v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x0F


def mld_e4m3(x: np.ndarray) -> np.ndarray:
    """E4M3 bytes by ml_dtypes ``float8_e4m3fn`` after clipping to +-448 (NaN inputs dropped)."""
    v = np.clip(_finite_domain(x), np.float32(-448), np.float32(448))
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def mld_bf16(x: np.ndarray) -> np.ndarray:
    """bf16 bits by ml_dtypes (NaN inputs dropped)."""
    return _finite_domain(x).astype(ml_dtypes.bfloat16).view(np.uint16)


def mld_dequantize(data: np.ndarray, scales: np.ndarray, amax: np.float32, rule: str = "te",
                   global_scale_max: int = 448) -> np.ndarray:
    """SPEC 11.1 with ml_dtypes' decoders: data u8 [R, C/2] (low nibble first), compact scales u8 [R, C/16] ->
    float32 [R, C] = E2M1 * f, every product in float32, with f = (E4M3 * amax) * fp32(1/(6G)) (TE rules; G =
    ``global_scale_max``, 448 or 256: fp32(1/2688) or fp32(1/1536)), (amax / 2688) * E4M3 (torchao's
    ``get_hp_scales``) or E4M3 (torchao_noscale)."""
    r, c = data.shape[0], 2 * data.shape[1]
    nib = np.stack((data & 0x0F, data >> 4), axis=-1).reshape(r, c).astype(np.uint8)
    q = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    sf = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if rule in ("te", "te_fused_rht"):
            f = (sf * np.float32(amax)).astype(np.float32) * np.float32(1.0 / (6.0 * int(global_scale_max)))
        elif rule == "torchao":
            f = (np.float32(amax) / np.float32(2688.0)) * sf
        elif rule == "torchao_noscale":
            f = sf
        else:
            raise ValueError(f"unknown rule {rule!r}")
        return (q.reshape(r, c // 16, 16) * f.astype(np.float32)[:, :, None]).reshape(r, c)


def _to_torch(a: np.ndarray):
    torch = import_torch()
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16).astype(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def torch_to_numpy(t) -> np.ndarray:
    """A torch tensor (any device) as a host NumPy array of the same dtype and bits (bfloat16 as
    ml_dtypes.bfloat16)."""
    torch = import_torch()
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _bf16_bits(t) -> np.ndarray:
    torch = import_torch()
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def torch_bf16(x: np.ndarray) -> np.ndarray:
    """bf16 bits by ``torch.Tensor.to(torch.bfloat16)`` (NaN inputs dropped)."""
    torch = import_torch()
    return _bf16_bits(_to_torch(_finite_domain(x).copy()).to(torch.bfloat16))


def torch_rht(x_bf16: np.ndarray, signs: int) -> np.ndarray:
    """``(x * s) @ H16 / 4`` in float64 by torch, then ``.to(torch.bfloat16)``: bf16 bits [n, 16] (SPEC 7.1).

    H16 is built by Kronecker powers of [[1, 1], [1, -1]] (Sylvester), s from the mask's bits.
    """
    torch = import_torch()
    h2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    h = h2
    for _ in range(3):
        h = torch.kron(h, h2)
    s = torch.tensor([-1.0 if (signs >> i) & 1 else 1.0 for i in range(16)], dtype=torch.float64)
    xt = _to_torch(x_bf16).to(torch.float64).reshape(-1, 16)
    y = (xt * s) @ h / 4
    return _bf16_bits(y.to(torch.bfloat16)).reshape(x_bf16.shape)


# ---------------------------------------------------------------------------------------------------------------
# torchao
# ---------------------------------------------------------------------------------------------------------------

def torchao_dequantize(data: np.ndarray, scales: np.ndarray, amax: np.float32, rule: str) -> np.ndarray:
    """torchao 0.18 ``NVFP4Tensor.dequantize(torch.float32)`` of a stored plane: data u8 [R, C/2] (torchao's packing),
    compact scales u8 [R, C/16] as float8_e4m3fn, ``per_tensor_scale = per_tensor_amax_to_scale(amax)`` under rule
    "torchao", none under "torchao_noscale". The tensor is built by ``oracle.interop.to_torchao``, which only places
    the bytes in torchao's fields; the per-tensor scale and every value come from torchao, run on one intra-op thread
    (:func:`one_torch_thread`)."""
    import torch

    from oracle.interop import to_torchao
    from oracle.planes import QuantizedPlane

    plane = QuantizedPlane(np.ascontiguousarray(data), np.ascontiguousarray(scales), np.float32(amax),
                           (data.shape[0], 2 * data.shape[1]), rule)
    with one_torch_thread():
        return to_torchao(plane, orig_dtype=torch.float32).dequantize(torch.float32).numpy().copy()


def torchao_quantize(x: np.ndarray, *, rule: str, rowwise: bool, columnwise: bool) -> dict:
    """torchao 0.18 ``NVFP4Tensor.to_nvfp4`` (``nvfp4_quantize``) on X (rowwise plane) and on the zero-padded X^T
    (columnwise, SPEC 6.2), its tensor's fields read by ``oracle.interop.from_torchao``.

    ``rule="torchao"``: ``per_tensor_scale = per_tensor_amax_to_scale(torch.max(torch.abs(x)))``;
    ``"torchao_noscale"``: no per-tensor scale. Scales are also swizzled by torchao's ``to_blocked``. torchao runs on
    one intra-op thread (:func:`one_torch_thread`). Returns canonical quantize outputs (SPEC-independent).
    """
    from oracle.interop import from_torchao

    torch = import_torch()
    nv, _ = import_torchao()
    xt = _to_torch(x)
    if xt.dtype == torch.float16:
        raise TypeError("torchao's nvfp4_quantize takes bfloat16 or float32")
    amax = torch.max(torch.abs(xt)).float() if xt.numel() else torch.zeros((), dtype=torch.float32)  # in x's dtype
    if torch.isnan(amax):
        # SPEC 4.1: torch.max's NaN payload on fp32 depends on the tensor size and thread count (0xFFFFFFFF or
        # 0x7FC00000; bf16 always gives 0x7FC00000), so the per-tensor amax uses the SPEC's canonical NaN;
        # everything downstream of it is still torchao's own computation.
        amax = torch.tensor(float("nan"), dtype=torch.float32)
    pts = nv.per_tensor_amax_to_scale(amax) if rule == "torchao" else None
    out = {}

    def plane(src, prefix):
        # torchao's own quantizer (NVFP4Tensor.to_nvfp4 runs nvfp4_quantize); oracle.interop reads its fields
        t = nv.NVFP4Tensor.to_nvfp4(src.contiguous(), block_size=16, per_tensor_scale=pts)
        p = from_torchao(t, amax=amax.numpy() if rule == "torchao" else None).row
        out[f"{prefix}_data"] = p.data
        out[f"{prefix}_scales"] = p.scales
        out[f"{prefix}_scales_swizzled"] = torchao_swizzle(p.scales)
        out[f"{prefix}_amax"] = amax.reshape(1).numpy().astype(np.float32).copy()

    with one_torch_thread():
        if rowwise:
            plane(xt, "row")
        if columnwise:
            m, k = xt.shape
            mp = (m + 15) // 16 * 16
            padded = torch.zeros((k, mp), dtype=xt.dtype)
            padded[:, :m] = xt.t()
            plane(padded, "col")
    return out


def torchao_swizzle(compact: np.ndarray) -> np.ndarray:
    """torchao's ``to_blocked`` (cuBLAS 128x4 block-scaled layout) on uint8 compact scales, flattened."""
    torch = import_torch()
    _, utils = import_torchao()
    if compact.size == 0:
        return np.zeros(0, np.uint8)
    return utils.to_blocked(torch.from_numpy(compact.copy())).reshape(-1).numpy().copy()


# ---------------------------------------------------------------------------------------------------------------
# layout, written from the SPEC tables
# ---------------------------------------------------------------------------------------------------------------

def _ru(n: int, m: int) -> int:
    return -(-n // m) * m


def _swizzled_index(rows: int, cols: int) -> np.ndarray:
    """int64 [rows, cols]: the SPEC 8.2 byte of compact scale (r, c) in the swizzled buffer."""
    cp = _ru(cols, 4)
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    return ((r // 128 * (cp // 4) + c // 4) * 32 + r % 32) * 16 + (r % 128) // 32 * 4 + c % 4


def swizzle_by_formula(compact: np.ndarray) -> np.ndarray:
    """Scatter each compact scale (r, c) to its SPEC 8.2 byte; the padding stays 0x00."""
    rows, cols = compact.shape
    out = np.zeros(_ru(rows, 128) * _ru(cols, 4), np.uint8)
    out[_swizzled_index(rows, cols).reshape(-1)] = compact.reshape(-1)
    return out


def compact_by_formula(swizzled: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The compact [rows, cols] scales of one swizzled buffer, gathered from their SPEC 8.2 bytes."""
    return swizzled.reshape(-1)[_swizzled_index(rows, cols)]


def swizzle_8x4_by_formula(compact: np.ndarray) -> np.ndarray:
    """Scatter each compact scale (r, c) to its SPEC 8.3 byte, (r / 8 * (Cp / 4) + c / 4) * 32 + (r % 8) * 4 + c % 4;
    the padding stays 0x00."""
    rows, cols = compact.shape
    cp = _ru(cols, 4)
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    out = np.zeros(_ru(rows, 8) * cp, np.uint8)
    out[((r // 8 * (cp // 4) + c // 4) * 32 + r % 8 * 4 + c % 4).reshape(-1)] = compact.reshape(-1)
    return out


def padded_compact_by_hand(compact: np.ndarray) -> np.ndarray:
    """Compact scales zero-padded to [roundup(rows,128), roundup(C,4)], row-major (SPEC 8.1)."""
    rows, cols = compact.shape
    out = np.zeros((_ru(rows, 128), _ru(cols, 4)), np.uint8)
    out[:rows, :cols] = compact
    return out.reshape(-1)


def offsets_by_table(splits, k: int) -> dict:
    """The SPEC 9.2 offsets with Python integers: per group sizes, then a prefix sum with a leading 0."""
    sizes = {"row_offsets": [], "row_data": [], "row_scale": [], "col_data": [], "col_scale": []}
    for m in (int(s) for s in splits):
        sizes["row_offsets"].append(m)
        sizes["row_data"].append(m * k // 2)
        sizes["row_scale"].append(_ru(m, 128) * _ru(k // 16, 4))
        sizes["col_data"].append(k * _ru(m, 16) // 2)
        sizes["col_scale"].append(_ru(k, 128) * _ru(-(-m // 16), 4))
    out = {}
    for name, v in sizes.items():
        acc, pref = 0, [0]
        for s in v:
            acc += s
            pref.append(acc)
        out[name] = np.array(pref, np.int64)
    return out


def capacities_by_formula(t: int, k: int, e: int) -> np.ndarray:
    """SPEC 9.3 worst-case buffer sizes [row_data, row_scale, col_data, col_scale], each unit count taken as the
    largest over the splits with n non-empty groups of 1, ..., 1, T - n + 1 rows (n = 1 .. min(E, T)), and at
    least E, not from SPEC's closed form."""
    n = np.arange(1, min(e, t) + 1, dtype=np.int64)

    def units(q: int) -> int:
        return max(e, int(((n - 1) + -(-(t - n + 1) // q)).max()) if n.size else 0)

    return np.array([t * k // 2, 128 * units(128) * _ru(k // 16, 4), k * 16 * units(16) // 2,
                     _ru(k, 128) * 4 * units(64)], np.int64)


# ---------------------------------------------------------------------------------------------------------------
# exact GEMM with fractions
# ---------------------------------------------------------------------------------------------------------------

_E2M1 = [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(3, 2), Fraction(2), Fraction(3), Fraction(4), Fraction(6)]
_FMT = {"float32": (24, -126, 127), "bfloat16": (8, -126, 127)}


def _e2m1_frac(code: int) -> Fraction:
    v = _E2M1[code & 7]
    return -v if code & 8 else v


def _e4m3_frac(byte: int) -> Fraction:
    e, m = (byte >> 3) & 0xF, byte & 7
    if e == 0xF and m == 7:
        raise ValueError("NaN scale")
    v = Fraction(m, 512) if e == 0 else Fraction(8 + m, 8) * Fraction(2) ** (e - 7)
    return -v if byte & 0x80 else v


def round_fraction(v: Fraction, fmt: str) -> float:
    """Round an exact rational to ``fmt`` ("float32" / "bfloat16"): RNE, gradual underflow, overflow to Inf.

    Returns a Python float holding the rounded value (exact in float64). Zero is returned as +0.0.
    """
    p, emin, emax = _FMT[fmt]
    if v == 0:
        return 0.0
    neg, a = v < 0, abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2**e <= a < 2**(e+2)
    if Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = max(e, emin) - (p - 1)  # quantum exponent
    n = a / Fraction(2) ** q
    r = n.numerator // n.denominator
    rem = n - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2 == 1):
        r += 1
    res = Fraction(r) * Fraction(2) ** q
    if res >= Fraction(2) ** (emax + 1):
        out = float("inf")
    else:
        out = float(res)
    return -out if neg else out


def fraction_gemm(a_plane, b_plane, *, alpha, bias, c, out_dtype: str) -> np.ndarray:
    """Exact ``alpha * (A . B^T) + C + bias`` of two oracle planes with ``fractions.Fraction``, rounded once.

    The planes' codes (unpacked by the plane's own ``codes()``, the oracle's SPEC 2.3 nibble order, which
    ``mld_dequantize`` and the torchao backend check) and scale bytes are decoded here from the format definitions
    (SPEC 2.1, 2.2).
    Returns float32 or ml_dtypes.bfloat16 [M, N].
    """
    def deq(p):
        codes = p.codes()
        rows = []
        for r in range(p.rows):
            if any((int(s) & 0x7F) == 0x7F for s in p.scales[r]):
                rows.append(None)  # a NaN scale: NaN * anything (even 0) is NaN in the row's every output
                continue
            rows.append([_e2m1_frac(int(codes[r, i])) * _e4m3_frac(int(p.scales[r, i // 16])) for i in range(p.cols)])
        return rows

    da, db = deq(a_plane), deq(b_plane)
    al = Fraction(float(alpha))
    m, n = a_plane.rows, b_plane.rows
    out = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            if da[i] is None or db[j] is None:
                out[i, j] = np.nan
                continue
            s = sum((x * y for x, y in zip(da[i], db[j], strict=True) if x and y), Fraction(0))
            v = al * s
            if c is not None:
                v += Fraction(float(c[i, j]))
            if bias is not None:
                v += Fraction(float(bias[j]))
            out[i, j] = round_fraction(v, out_dtype)
    return out.astype(ml_dtypes.bfloat16) if out_dtype == "bfloat16" else out


# ---------------------------------------------------------------------------------------------------------------
# mmasim: MMA-Sim's instruction models (Xie et al., arXiv:2511.10909)
# ---------------------------------------------------------------------------------------------------------------

#: the instructions whose models the backend runs (mmasim's shape-and-type strings; the models take any M and N)
TCGEN05_NVF4 = "m128n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3"
WGMMA_FORMS = {"bf16": "m64n8k16.f32.bf16.bf16", "fp16": "m64n8k16.f32.f16.f16"}


def import_mmasim():
    """``(TCGen05MMABlockScale, WGMMA)`` from ``mmasim.nv_ptx``, or None (optional extra)."""
    try:
        from mmasim.nv_ptx import WGMMA, TCGen05MMABlockScale
    except Exception:  # noqa: BLE001
        return None
    return TCGen05MMABlockScale, WGMMA


def mmasim_tcgen05_nvf4(a_data: np.ndarray, a_scales: np.ndarray, b_data: np.ndarray,
                        b_scales: np.ndarray) -> np.ndarray:
    """fp32 [M, N]: A . B^T as a chain of mmasim's ``tcgen05.mma kind::mxf4nvf4.block16`` (k64) instruction model,
    one call per 64 K positions in K order, each call's D the next one's C, from C = +0.

    Inputs: codes u8 [R, K/2] (element 2i in the low nibble, SPEC 2.3) and scale bytes u8 [R, K/16]. K is padded to
    a multiple of 64 with zero bytes (zero codes, zero scales: what a TMA zero-fill delivers). mmasim unpacks the high
    nibble of a byte first, so the nibbles are swapped for it; scale bytes go in as ``float8_e4m3fn`` (the model reads
    them as UE4M3 itself). mmasim's ``__call__(A, B, C, alpha, beta)`` takes A [M, K/2], B [K/2, N], C [M, N] and the
    scales of A [M, K/16] and of B [K/16, N]."""
    import torch

    tcgen05, _ = import_mmasim()
    op = tcgen05("Blackwell", TCGEN05_NVF4)
    m, n, k = a_data.shape[0], b_data.shape[0], 2 * a_data.shape[1]
    kp = -(-k // 64) * 64

    def pad(d, s):
        dp = np.zeros((d.shape[0], kp // 2), np.uint8)
        dp[:, : d.shape[1]] = d
        sp = np.zeros((s.shape[0], kp // 16), np.uint8)
        sp[:, : s.shape[1]] = s
        return torch.from_numpy(((dp & 0x0F) << 4) | (dp >> 4)), torch.from_numpy(sp).view(torch.float8_e4m3fn)

    a, sa = pad(a_data, a_scales)
    b, sb = pad(b_data, b_scales)
    c = torch.zeros((m, n), dtype=torch.float32)
    for j in range(kp // 64):
        c = op(a[:, 32 * j : 32 * j + 32], b[:, 32 * j : 32 * j + 32].T, c, sa[:, 4 * j : 4 * j + 4],
               sb[:, 4 * j : 4 * j + 4].T)
    return c.numpy().astype(np.float32)


def mmasim_wgmma(a_data: np.ndarray, a_scales: np.ndarray, b_data: np.ndarray, b_scales: np.ndarray,
                 operands: str) -> np.ndarray:
    """fp32 [M, N]: A . B^T as a chain of mmasim's Hopper ``wgmma ... k16`` instruction model (fp32 accumulator,
    ``operands`` "bf16" or "fp16"), one call per 16-block in K order from C = +0, with every dequantized element
    ``v = E2M1 * E4M3`` (decoded by ml_dtypes, the scale's sign included) presented as ``v * 2^-14`` in that format
    (exact, checked) and the sum scaled back by 2^28 (exact: a nonzero sum is a normal fp32 number)."""
    import torch

    _, wgmma = import_mmasim()
    op = wgmma("Hopper", WGMMA_FORMS[operands])
    dtype = torch.bfloat16 if operands == "bf16" else torch.float16

    def present(d, s):
        r, k = d.shape[0], 2 * d.shape[1]
        nib = np.stack((d & 0x0F, d >> 4), axis=-1).reshape(r, k).astype(np.uint8)
        q = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
        sf = s.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        with np.errstate(invalid="ignore"):
            v = (q.reshape(r, k // 16, 16) * sf[:, :, None]).reshape(r, k) * np.float32(2.0**-14)
        t = torch.from_numpy(v).to(dtype)
        back = t.to(torch.float32).numpy()
        if not np.array_equal(back, v, equal_nan=True):
            raise ValueError(f"an operand is not exactly representable in {operands}")
        return t

    a, b = present(a_data, a_scales), present(b_data, b_scales)
    c = torch.zeros((a.shape[0], b.shape[0]), dtype=torch.float32)
    for j in range(a.shape[1] // 16):
        c = op(a[:, 16 * j : 16 * j + 16], b[:, 16 * j : 16 * j + 16].T, c)
    return (c.numpy() * np.float32(2.0**28)).astype(np.float32)


def sm100_epilogue_by_hand(acc: np.ndarray, alpha, *, c, bias, out_dtype: str) -> np.ndarray:
    """SPEC 12.7's epilogue from its text, element by element: ``z = alpha * acc`` in fp32, or with a bias the exact
    ``alpha * acc + bias`` (fractions) rounded once to fp32 (an exact zero: -0 only when both parts are -0, as IEEE's
    fused multiply-add; non-finite parts by IEEE arithmetic); then ``C + z`` with C, ``0 + z`` without C or bias, else
    z; then the cast to ``out_dtype`` (RNE)."""
    f = np.float32
    al = f(alpha)
    m, n = acc.shape
    y = np.zeros((m, n), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(m):
            for j in range(n):
                x = f(acc[i, j])
                if bias is None:
                    z = f(al * x)
                else:
                    bj = f(bias[j])
                    if np.isfinite(al) and np.isfinite(x) and np.isfinite(bj):
                        exact = Fraction(float(al)) * Fraction(float(x)) + Fraction(float(bj))
                        if exact == 0:
                            prod_neg = bool(np.signbit(al)) != bool(np.signbit(x))
                            both_neg_zero = al * x == 0 and prod_neg and bj == 0 and np.signbit(bj)
                            z = f(-0.0) if both_neg_zero else f(0.0)
                        else:
                            z = f(round_fraction(exact, "float32"))
                    else:
                        z = f(float(al) * float(x) + float(bj))
                if c is not None:
                    z = f(f(c[i, j]) + z)
                elif bias is None:
                    z = f(z + f(0.0))
                y[i, j] = z
    return y.astype(ml_dtypes.bfloat16) if out_dtype == "bfloat16" else y
