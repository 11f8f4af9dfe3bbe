"""Which rule made these NVFP4 bytes? ``oracle.diagnose`` quantizes the input by every rule the oracle knows
(SPEC 5, and the variants of SPEC 14.11), reads the given bytes in every layout they fit (SPEC 8, 14.10), and
reports the rules that reproduce them, or the closest one with its differing blocks and the known bug classes
that explain them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import inspect
from dataclasses import dataclass, field

import numpy as np

from .checks import host_array, is_real, is_torch
from .dequantize import block_decode_scales
from .four_over_six import ERROR_MODES, GLOBAL_SCALE_MAXES, four_over_six_scales
from .fp4_numpy import E2M1_VALUES, decode_e4m3, encode_e2m1, pack_fp4, unpack_fp4
from .planes import QuantizedPlane
from .quantize import as_2d_f32, columnwise_source, plane_block_amax, quantize
from .rht import DEFAULT_RHT_SIGNS, check_rht_signs
from .scale_rules import (
    F32_MAX,
    first_nan,
    global_encode_scale,
    te_bytes_and_multipliers,
    te_scale_values,
    tensor_amax,
    torch_decode_e4m3,
    torchao_bytes_and_multipliers,
    torchao_encode_e2m1,
    torchao_per_tensor_scale,
    torchao_scale_values,
)
from .swizzle import padded_scale_shape, padded_scale_shape_8x4, unswizzle_scales, unswizzle_scales_8x4

__all__ = ["DIAGNOSE_RULES", "LAYOUTS", "Diagnosis", "DiagnoseRule", "diagnose", "format_block"]

_ONE = np.float32(1.0)
_RCP_2688 = np.float32(_ONE / np.float32(2688.0))  # SPEC 14.11, torchao_cuda: fp32(1/2688)
_SHOWN_TRIED = 8  # candidates listed in the report (Diagnosis.tried has them all)


@dataclass(frozen=True)
class DiagnoseRule:
    """One way of making NVFP4 bytes. ``quantize``: keywords of :func:`oracle.quantize` (the oracle's own rules);
    ``variant``: a variant of SPEC 14.11 applied to the base rule ``quantize["rule"]``. ``planes``: the planes the
    rule defines."""

    name: str
    spec: str
    what: str
    quantize: dict
    variant: str | None = None
    planes: tuple = ("row", "col")


def _four_over_six_forms():
    """Every 4over6 option set TE has (SPEC 5.6): error mode x fast-math error x G, in that order, as
    ``(mode, fast, g, quantize keywords, name suffix)``."""
    for mode in ERROR_MODES:
        for fast in (False, True):
            for g in GLOBAL_SCALE_MAXES:
                kw = {"four_over_six": mode}
                if fast:
                    kw["four_over_six_fast_math"] = True
                if g != 448:
                    kw["global_scale_max"] = g
                yield mode, fast, g, kw, mode + ("_fast" if fast else "") + ("_g256" if g != 448 else "")


def _te_4over6_rules() -> tuple:
    """TE's 4over6 (SPEC 5.6) under each of its option sets, G = 448 first, then without fast math first, MAE
    before MSE (the order in which rules that agree on an input are reported)."""
    forms = sorted(_four_over_six_forms(), key=lambda f: (f[2] != 448, f[1], ERROR_MODES.index(f[0])))
    return tuple(DiagnoseRule(f"te_4over6_{suffix}", "5.6",
                              f"TE 4over6, {mode.upper()}" + (", fast-math error" if fast else "")
                              + (", global E4M3 max 256" if g != 448 else ""), {"rule": "te", **kw})
                 for mode, fast, g, kw, suffix in forms)


def _flashinfer_rules() -> tuple:
    """SPEC 14.11's flashinfer 4over6 rules: each 4over6 option set x the S_enc it was given (5.6's quotient, or
    torch's ``6G / amax``: the reciprocal form); without fast math the error is its strict per-tensor one."""
    out = []
    for mode, fast, g, kw, suffix in _four_over_six_forms():
        for reciprocal in (False, True):
            tail = "_reciprocal_global" if reciprocal else ""
            what = (f"flashinfer 4over6, {mode.upper()}, " + ("fast-math error" if fast else "p * S_dec error")
                    + (", G = 256" if g != 448 else "")
                    + (f", S_enc = (1 / A) * {6 * g} (torch's {6 * g} / amax)" if reciprocal else ""))
            out.append(DiagnoseRule(f"flashinfer_4over6_{suffix}{tail}", "14.11", what, {"rule": "te", **kw},
                                    "flashinfer_4over6" + tail, planes=("row",)))
    return tuple(out)


def _row_scaled_4over6_rules() -> tuple:
    """TE's row-scaled planes (SPEC 5.7) under each 4over6 option set (5.6)."""
    return tuple(DiagnoseRule(f"te_row_scaled_4over6_{suffix}", "5.6, 5.7",
                              f"TE row-scaled 4over6, {mode.upper()}" + (", fast-math error" if fast else "")
                              + (", G = 256" if g != 448 else ""),
                              {"rule": "te", "row_scaled": True, **kw})
                 for mode, fast, g, kw, suffix in _four_over_six_forms())


#: Every rule diagnose tries, in the order a tie (as many differing blocks and bytes) is reported. Adding a rule is
#: one line; a rule whose ``oracle.quantize`` keywords this oracle does not have is left out.
DIAGNOSE_RULES = (
    DiagnoseRule("te", "5.1-5.2", "TE's kernels (the default)", {"rule": "te"}),
    DiagnoseRule("te_fused_rht", "5.3", "TE's fused RHT cast kernels' S_enc, 5.2's block rule",
                 {"rule": "te_fused_rht"}),
    DiagnoseRule("torchao", "5.4", "torchao 0.18 with a per-tensor scale", {"rule": "torchao"}),
    DiagnoseRule("torchao_noscale", "5.5", "torchao 0.18 without a per-tensor scale", {"rule": "torchao_noscale"}),
    *_te_4over6_rules(),
    DiagnoseRule("te_row_scaled", "5.7", "TE row-scaled (one amax per plane row)", {"rule": "te", "row_scaled": True}),
    *_row_scaled_4over6_rules(),
    DiagnoseRule("te_div", "14.11", "TE's rule dividing by the decode scale", {"rule": "te"}, "division"),
    DiagnoseRule("torchao_div", "14.11", "torchao's rule dividing by the decode scale", {"rule": "torchao"},
                 "division"),
    DiagnoseRule("torchao_noscale_div", "14.11", "torchao_noscale dividing by the block scale",
                 {"rule": "torchao_noscale"}, "division"),
    DiagnoseRule("te_inverted_global", "14.11", "TE's rule given 1/S_enc for S_enc", {"rule": "te"}, "inverted"),
    DiagnoseRule("torchao_inverted_global", "14.11", "torchao given 1/P for P", {"rule": "torchao"}, "inverted"),
    DiagnoseRule("torchao_cuda", "14.11", "torchao on a CUDA tensor (P = A * fp32(1/2688))", {"rule": "torchao"},
                 "reciprocal_scale"),
    DiagnoseRule("te_reciprocal_global", "14.11", "TE's rule with S_enc = (1 / A) * 2688 (torch's 2688 / amax)",
                 {"rule": "te"}, "reciprocal_scale"),
    DiagnoseRule("te_negzero_positive", "14.11", "TE's rule, -0.0 encoded as +0 (TE's pure-torch reference, 14.1)",
                 {"rule": "te"}, "negzero_positive"),
    DiagnoseRule("te_unsigned_zero", "14.11", "TE's rule, every zero code unsigned", {"rule": "te"},
                 "unsigned_zero"),
    DiagnoseRule("torchao_unsigned_zero", "14.11", "torchao, every zero code unsigned", {"rule": "torchao"},
                 "unsigned_zero"),
    DiagnoseRule("te_nan_propagating", "14.11", "TE's rule with NaN-propagating amaxes (torch.max / torch.amax)",
                 {"rule": "te"}, "nan_propagating"),
    DiagnoseRule("torchao_nan_ignoring", "14.11", "torchao with NaN-ignoring amaxes", {"rule": "torchao"},
                 "nan_ignoring"),
    DiagnoseRule("te_fused_rht_kernels", "14.11",
                 "TE's fused RHT cast kernels: NaN-propagating block maxima, no FLT_MAX cap on the block scale, NaN "
                 "multipliers kept", {"rule": "te_fused_rht"}, "nan_blocks"),
    *_flashinfer_rules(),
)

#: scale layouts ``diagnose`` reads (SPEC 8, 14.10); "auto" tries every layout the buffer's size fits
LAYOUTS = ("auto", "compact", "padded", "swizzled", "swizzled_8x4", "torchao", "te", "flashinfer")
_READINGS = {"auto": ("compact", "padded", "swizzled"), "compact": ("compact",), "padded": ("padded",),
             "swizzled": ("swizzled",), "swizzled_8x4": ("swizzled_8x4",), "torchao": ("compact", "swizzled"),
             "te": ("padded", "swizzled"), "flashinfer": ("compact", "swizzled", "swizzled_8x4")}
#: every reading of a scale buffer, for the layout hypotheses
_ALL_READINGS = ("compact", "padded", "swizzled", "swizzled_8x4")
_READING_WORDS = {"compact": "compact row-major (SPEC 8.1)", "padded": "padded compact row-major (SPEC 8.1)",
                  "swizzled": "128x4 swizzled (SPEC 8.2)", "swizzled_8x4": "8x4 swizzled (SPEC 8.3)"}


def _rule_available(r: DiagnoseRule) -> bool:
    params = inspect.signature(quantize).parameters
    return all(k in params for k in r.quantize)


# ---------------------------------------------------------------------------------------------------------------
# the variant quantizers of SPEC 14.11
# ---------------------------------------------------------------------------------------------------------------

def _amax_rule(base: str, variant: str | None) -> str:
    """The rule whose NaN handling a plane's amax follows (SPEC 4.1; the NaN variants of 14.11 swap it)."""
    return {"nan_propagating": "torchao", "nan_ignoring": "te"}.get(variant, base)


def _scaled_source(y: np.ndarray, *, base: str, variant: str | None, block: tuple, amax) -> tuple:
    """(scaled, scale bytes, amax, scale values) of the plane source ``y`` [R, C] under rule ``base`` (5.1-5.5) or its
    SPEC 14.11 ``variant``: ``scaled`` the fp32 values the rule rounds to E2M1 (``y * m``, or ``y / d`` under
    "division"), the scale values the fp32 block scales it rounds to E4M3 (5.2's sf, 5.4's clamped bs)."""
    nan_rule = _amax_rule(base, variant)
    a = tensor_amax(y, nan_rule) if amax is None else np.float32(amax)
    # nan_blocks: the tensor amax of the base rule (NaN-ignoring), NaN-propagating block maxima (TE's fused RHT cast
    # kernels' max.NaN; the torchao rules' block maxima propagate NaN the same way)
    b = plane_block_amax(y, block=block, rule="torchao" if variant == "nan_blocks" else nan_rule)
    keep_nan = variant == "nan_blocks"
    rows, cols = y.shape
    nb = cols // 16
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if base.startswith("te"):
            s = global_encode_scale(a, base)
            if variant == "inverted":
                s = np.float32(_ONE / s)
            elif variant == "reciprocal_scale":  # SPEC 14.11: torch's 2688 / amax is (1 / amax) * 2688
                s = _reciprocal_global_scale(a, 2688)
            values = te_scale_values(b, s, keep_nan=keep_nan)
            sbytes, mult = te_bytes_and_multipliers(values, s, keep_nan=keep_nan)
            divisor = (decode_e4m3(sbytes) * np.float32(_ONE / s)).astype(np.float32)
        else:
            p = torchao_per_tensor_scale(a) if base == "torchao" else None
            if variant == "inverted" and p is not None:
                p = np.float32(_ONE / p)
            if variant == "reciprocal_scale" and p is not None:
                p = np.float32(np.float32(a) * _RCP_2688)
            values = torchao_scale_values(b, p)
            sbytes, mult = torchao_bytes_and_multipliers(values, p)
            sf = torch_decode_e4m3(sbytes)  # SPEC 3.5: torch's NaN patterns, as in the multiplier
            if p is None:
                divisor = sf
            else:  # SPEC 14.11: a NaN P keeps its own payload in d (stated, not left to NumPy's operand order)
                divisor = np.full(sf.shape, p, np.float32) if np.isnan(p) else (np.float32(p) * sf).astype(np.float32)
        y3 = y.reshape(rows, nb, 16)
        if variant == "division":
            # SPEC 14.11: x / d with d the decode scale; under te a zero d (an underflowed block) keeps 5.2's
            # multiplier. torchao's d is never 0 with a finite multiplier, so x / d runs as written there
            # (SPEC 3.5: a quotient of two NaNs keeps x's payload, a product the multiplier's; first_nan states it)
            quotient = first_nan(y3, y3 / divisor[:, :, None])
            if base.startswith("te"):
                quotient = np.where(divisor[:, :, None] == 0, mult[:, :, None] * y3, quotient)
            scaled = quotient
        else:
            scaled = first_nan(mult[:, :, None], mult[:, :, None] * y3)
        scaled = scaled.astype(np.float32).reshape(rows, cols)
    return scaled, sbytes, a, values


def _variant_plane(y: np.ndarray, *, base: str, variant: str, block: tuple, amax) -> tuple:
    """(data, scales, amax) of the plane source ``y`` [R, C] under a SPEC 14.11 variant of rule ``base``."""
    scaled, sbytes, a, _ = _scaled_source(y, base=base, variant=variant, block=block, amax=amax)
    codes = encode_e2m1(scaled) if base.startswith("te") else torchao_encode_e2m1(scaled)
    if variant == "negzero_positive":
        codes = np.where(scaled.view(np.uint32) == np.uint32(0x80000000), np.uint8(0), codes)
    elif variant == "unsigned_zero":
        codes = np.where(codes == 0x8, np.uint8(0), codes)
    return pack_fp4(codes.astype(np.uint8)), sbytes, a


def _reciprocal_global_scale(a, six_g: int) -> np.float32:
    """SPEC 14.11: S_enc as torch computes ``6G / amax`` for a tensor amax, ``fminf((1 / A) * 6G, FLT_MAX)`` (two
    roundings), with 5.1's ``A == 0 || S_enc == 0`` rule."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.fmin(np.float32(np.float32(_ONE / np.float32(a)) * np.float32(six_g)), F32_MAX)
    return np.float32(_ONE if (a == 0 or r == 0) else r)


def _flashinfer_4over6_plane(y: np.ndarray, opts: dict, block: tuple, amax, *, reciprocal: bool) -> tuple:
    """(data, scales, amax) of the plane source ``y`` [R, C] under SPEC 14.11's flashinfer 4over6: 5.6 with 1x16
    blocks and the errors in the decode-scale domain (``p * S_dec - x``; with fast math 5.6's product domain), and an
    all-zero block written as byte 0x00 with sixteen codes 0x0. ``opts``: the rule's 4over6 keywords;
    ``reciprocal``: S_enc in the reciprocal form (:func:`_reciprocal_global_scale`) instead of 5.6's quotient."""
    if tuple(block) != (1, 16):
        raise ValueError("flashinfer's 4over6 quantizes 1x16 blocks only")
    a = tensor_amax(y, "te") if amax is None else np.float32(amax)
    b = plane_block_amax(y, block=(1, 16), rule="te")
    domain = "product" if opts.get("four_over_six_fast_math") else "decode"
    g = opts.get("global_scale_max", 448)
    sbytes, mult = four_over_six_scales(y, b, amax=a, mode=opts["four_over_six"], domain=domain,
                                        global_scale_max=g, block=(1, 16),
                                        s_enc=_reciprocal_global_scale(a, 6 * g) if reciprocal else None)
    rows, cols = y.shape
    with np.errstate(invalid="ignore", over="ignore"):
        codes = encode_e2m1((mult[:, :, None] * y.reshape(rows, cols // 16, 16)).reshape(rows, cols))
    codes[np.repeat(b == 0, 16, axis=1)] = 0  # (its block max of 0 returns before the encode: no -0 code)
    return pack_fp4(codes), sbytes, a


# ---------------------------------------------------------------------------------------------------------------
# candidates: one rule on one plane with one block shape (and RHT or not)
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class _Candidate:
    rule: DiagnoseRule
    plane: str
    block: tuple
    rht: bool
    amax_source: str  # "computed", "given", or "rowwise" (X's amax on the RHT plane)
    expected: QuantizedPlane
    reading: str = ""
    diff: np.ndarray | None = None  # [R, C/16] bool: the block differs (scale byte or any code)
    padding_garbage: int = 0
    n_bytes: int = 0  # differing scale bytes plus differing data bytes: orders candidates with as many blocks apart

    @property
    def label(self) -> str:
        extra = []
        if self.block != (1, 16):
            extra.append("block 16x16")
        if self.rht:
            extra.append("rht")
        if self.amax_source == "given":
            extra.append("amax given")
        elif self.amax_source == "rowwise":
            extra.append("X's amax")
        return self.rule.name + (f" ({', '.join(extra)})" if extra else "")

    @property
    def n_diff(self) -> int:
        return int(self.diff.sum()) if self.diff is not None else -1


class _PlaneSources:
    """The matrices the planes of ``x2`` quantize (``x2`` itself, :func:`columnwise_source` with or without RHT), each
    formed once per :func:`diagnose` call; the columnwise ones are read-only (the variant rules only read them)."""

    def __init__(self, x2: np.ndarray, signs: int):
        self.x2, self.signs, self._col = x2, signs, {}

    def get(self, plane: str, rht: bool) -> np.ndarray:
        if plane == "row":
            return self.x2
        if rht not in self._col:
            y = columnwise_source(self.x2, rht, self.signs)
            y.setflags(write=False)
            self._col[rht] = y
        return self._col[rht]


def _expected(x, sources: _PlaneSources, r: DiagnoseRule, plane: str, block: tuple, rht: bool,
              amax) -> QuantizedPlane:
    """The plane rule ``r`` makes."""
    x2, signs = sources.x2, sources.signs
    if r.variant is None:
        t = quantize(x, rowwise=plane == "row", columnwise=plane == "col", rht=rht, rht_signs=signs, block=block,
                     amax=amax, **r.quantize)
        return t.row if plane == "row" else t.col
    m, k = x2.shape
    y = sources.get(plane, rht)
    if plane == "col" and not rht and amax is None:
        amax_in = None  # SPEC 4.2: the rowwise amax, which the padded X^T has too
    else:
        amax_in = amax
    fields = {}
    if r.variant.startswith("flashinfer_4over6"):
        data, scales, a = _flashinfer_4over6_plane(y, r.quantize, block, amax_in,
                                                   reciprocal=r.variant.endswith("_reciprocal_global"))
        fields = {n: r.quantize[n] for n in ("four_over_six", "four_over_six_fast_math", "global_scale_max")
                  if n in r.quantize}
    else:
        data, scales, a = _variant_plane(y, base=r.quantize["rule"], variant=r.variant, block=block, amax=amax_in)
    return QuantizedPlane(data, scales, a, y.shape, r.quantize["rule"], block, rht,
                          valid_cols=m if plane == "col" else k, rht_signs=signs if rht else None, **fields)


# ---------------------------------------------------------------------------------------------------------------
# reading the given bytes
# ---------------------------------------------------------------------------------------------------------------

def _u8(a, what: str) -> np.ndarray:
    if is_torch(a):
        import torch

        t = a.detach().cpu()
        if t.element_size() != 1:
            raise TypeError(f"{what} must hold bytes (uint8 or float8), got {t.dtype}")
        return t.contiguous().view(torch.uint8).numpy().copy()
    a = host_array(a)
    if a.dtype.itemsize != 1 or a.dtype.kind == "b":
        raise TypeError(f"{what} must hold bytes (uint8 or float8_e4m3fn), got {a.dtype}")
    return np.ascontiguousarray(a).view(np.uint8)


def _read(buf: np.ndarray, rows: int, c16: int, reading: str):
    """(compact [rows, c16], number of nonzero padding bytes) or None when the size does not fit."""
    b = buf.reshape(-1)
    if reading == "compact":
        return (b.reshape(rows, c16), 0) if b.size == rows * c16 else None
    pr, pc = (padded_scale_shape_8x4 if reading == "swizzled_8x4" else padded_scale_shape)(rows, c16)
    if b.size != pr * pc:
        return None
    if reading == "padded":
        full = b.reshape(pr, pc)
    elif reading == "swizzled_8x4":
        full = unswizzle_scales_8x4(b, pr, pc)
    else:
        full = unswizzle_scales(b, pr, pc)
    pad = full.copy()
    pad[:rows, :c16] = 0
    return full[:rows, :c16], int(np.count_nonzero(pad))


def _declared_reading(buf_shape: tuple, rows: int, c16: int, layout: str) -> str | None:
    """The layout the caller says (or the buffer's 2-D shape says) the scales are in, for the layout hypotheses."""
    if layout in _ALL_READINGS:
        return layout
    if layout == "flashinfer" and len(buf_shape) == 2 and tuple(buf_shape) == padded_scale_shape_8x4(rows, c16):
        return None  # (flashinfer returns its 8x4 buffer as [roundup(rows, 8), roundup(C, 4)]: either layout)
    if len(buf_shape) == 2 and tuple(buf_shape) == (rows, c16) != padded_scale_shape(rows, c16):
        return "compact"  # (a [rows, C] matrix that is also the padded shape may be TE's swizzled storage)
    if layout == "torchao" and len(buf_shape) == 2 and tuple(buf_shape) == (-(-rows // 128) * 32, -(-c16 // 4) * 16):
        return "swizzled"
    return None


def _block_diff(exp: QuantizedPlane, data: np.ndarray, scales: np.ndarray) -> np.ndarray:
    r, c16 = exp.scales.shape
    dd = (exp.data.reshape(r, c16, 8) != data.reshape(r, c16, 8)).any(axis=2)
    return dd | (exp.scales != scales)


def _bytes_diff(exp: QuantizedPlane, data: np.ndarray, scales: np.ndarray) -> int:
    """Differing scale bytes plus differing data bytes: among candidates with as many differing blocks, the one whose
    bytes are nearer is the closer rule (e.g. the same scales, some codes one step off)."""
    return int((exp.scales != scales).sum()) + int((exp.data.reshape(-1) != data.reshape(-1)).sum())


# ---------------------------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Diagnosis:
    """What :func:`diagnose` found. ``str()`` gives the report.

    Attributes:
        matches: labels of the rules that reproduce every byte (data, scales and zero padding).
        plane, reading: the plane the bytes were compared as (``"row"`` / ``"col"``) and the scale layout read.
        closest: label of the closest rule (fewest differing 16-blocks), when nothing matches.
        n_blocks, n_diff, first_diff: blocks of the plane, blocks that differ under the closest rule, and the first
            differing one as ``(row, block)`` of the plane.
        hypotheses: one line per known bug class that fits.
        side_by_side: the explain view of the first differing block, the closest rule's and theirs.
        tried: ``(label, differing blocks)`` of every candidate, best first.
    """

    matches: list
    plane: str
    reading: str
    closest: str | None
    n_blocks: int
    n_diff: int
    first_diff: tuple | None
    hypotheses: list
    side_by_side: list = field(default_factory=list)
    tried: list = field(default_factory=list)
    header: list = field(default_factory=list)

    def __str__(self) -> str:
        out = list(self.header)
        out.append(f"compared as the {self.plane} plane, scales read as {_READING_WORDS.get(self.reading, self.reading)}")
        if self.matches:
            out.append("reproduced exactly by: " + ", ".join(self.matches)
                       + (" (these rules agree on this input)" if len(self.matches) > 1 else ""))
        elif self.n_diff == 0:
            out.append(f"every block matches {self.closest}; the padding does not (see below)")
        else:
            pct = 100.0 * self.n_diff / max(self.n_blocks, 1)
            where = f"; first at row {self.first_diff[0]}, block {self.first_diff[1]}" if self.first_diff else ""
            out.append(f"no rule reproduces these bytes. closest: {self.closest}: {self.n_diff} of {self.n_blocks} "
                       f"blocks differ ({pct:.3g}%){where}")
        if self.hypotheses:
            out.append("hypotheses:")
            out.extend(f"  - {h}" for h in self.hypotheses)
        if self.side_by_side:
            out.append("")
            out.extend(self.side_by_side)
        if self.tried:
            shown = ", ".join(f"{n} {d}" for n, d in self.tried[:_SHOWN_TRIED])
            more = len(self.tried) - _SHOWN_TRIED
            out.append("")
            out.append(f"rules tried, fewest differing blocks first: {shown}" + (f", ... ({more} more)" if more > 0 else ""))
        return "\n".join(out)


def _fmt(v) -> str:
    return f"{float(v):.6g}"


def format_block(rows: list) -> list:
    """The explain view's rows: ``[(label, cells), ...]`` with the labels aligned and 9-wide cells."""
    w = max(len(lab) for lab, _ in rows)
    return [f"  {lab:<{w}} " + " ".join(f"{c:>9}" for c in cells) for lab, cells in rows]


def _side_by_side(src: np.ndarray, ours: QuantizedPlane, theirs: QuantizedPlane, plane: str, row: int, blk: int,
                  label: str) -> list:
    """The explain view (``python -m oracle explain``) of one block: the values quantized, then the closest rule's
    scale byte, factor (SPEC 11.1), codes and dequantized values, and theirs."""
    cols = slice(16 * blk, 16 * blk + 16)
    lines = [f"first differing block: row {row}, block {blk} of the {plane} plane ({label} vs theirs)"]
    rows = [("rht(input)" if ours.rht else "input", [_fmt(v) for v in src[row, cols]])]
    for who, p in (("ours", ours), ("theirs", theirs)):
        codes = unpack_fp4(p.data[row:row + 1], p.cols)[0, cols]
        with np.errstate(invalid="ignore", over="ignore"):
            fac = np.float32(block_decode_scales(p)[row, blk])
            deq = (E2M1_VALUES[codes] * fac).astype(np.float32)
        sb = int(p.scales[row, blk])
        lines.append(f"  {who}: scale=0x{sb:02X} ({_fmt(decode_e4m3(np.uint8(sb)))}) factor={_fmt(fac)}")
        rows.append((f"{who} code", [f"0x{c:X}" for c in codes]))
        rows.append((f"{who} dequant", [_fmt(v) for v in deq]))
    return lines + format_block(rows)


def _row_scaled(p: QuantizedPlane) -> bool:
    return bool(getattr(p, "row_scaled", False))


# ---------------------------------------------------------------------------------------------------------------
# bug-class hypotheses
# ---------------------------------------------------------------------------------------------------------------

_E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # SPEC 2.1, by magnitude index
_E2M1_MIDPOINTS = (_E2M1_MAGNITUDES[1:] + _E2M1_MAGNITUDES[:-1]) / 2


def _grid_index(grid: np.ndarray, a: np.ndarray, mode: str) -> np.ndarray:
    """The index in an ascending grid of non-negative values (E2M1's magnitudes, E4M3's bytes 0x00..0x7E: the index
    is the magnitude code or the byte) of ``a`` (finite, from 0 to the grid's largest value) rounded by a mode other
    than to nearest even."""
    if mode == "toward zero":  # the largest grid value <= a
        return np.searchsorted(grid, a, side="right") - 1
    if mode == "away from zero":  # the smallest grid value >= a
        return np.searchsorted(grid, a, side="left")
    mid = (grid[1:] + grid[:-1]) / 2
    up = np.searchsorted(mid, a, side="right")  # nearest, a tie to the larger value
    if mode == "ties away from zero":
        return up
    down = np.searchsorted(mid, a, side="left")  # nearest, a tie to the smaller value
    if mode == "ties toward zero":
        return down
    return np.where(up % 2 == 1, up, down)  # "ties to odd codes"


#: the modes tried, each with its phrase in the hypothesis
_ROUNDING_MODES = {"ties away from zero": "ties rounded away from zero", "ties toward zero": "ties rounded toward zero",
                   "ties to odd codes": "ties rounded to odd codes", "toward zero": "rounded toward zero",
                   "away from zero": "rounded away from zero"}


def _e2m1_rounding(best: _Candidate, data: np.ndarray, their_scales: np.ndarray, scaled: np.ndarray) -> str | None:
    """The E2M1 rounding-mode hypothesis: in the blocks whose scale byte matches (where some code differs), their
    codes are every one of those blocks' values rounded by one other mode than SPEC 3.1's (to nearest, ties to even)
    from the same scaled values y (``x * m``, or ``x / d`` under the division rules), signs as ours. Modes tried: ties
    away from / toward zero, ties to odd codes, toward zero, away from zero. ``scaled``: the rule's y
    (:func:`_scaled_source`). None where no mode reproduces them or where a differing value is NaN."""
    exp = best.expected
    if not best.n_diff:
        return None
    ours, theirs = exp.codes(), unpack_fp4(data.reshape(exp.data.shape), exp.cols)
    differ = ours != theirs
    same_scale = np.repeat(their_scales == exp.scales, 16, axis=1)[:, : exp.cols]
    if not differ.any() or (differ & ~same_scale).any() or ((ours ^ theirs)[differ] & 8).any():
        return None
    # the blocks with a differing code (all with matching scale bytes), every value of them that is not NaN
    blocks = np.repeat(differ.reshape(differ.shape[0], -1, 16).any(axis=2), 16, axis=1)[:, : exp.cols]
    a = np.abs(scaled.astype(np.float64))
    if np.isnan(a[differ]).any():
        return None
    look = blocks & ~np.isnan(a)
    a_in, theirs_in = np.minimum(a[look], 6.0), (theirs[look] & 7)  # (|y| >= 6 takes the largest magnitude)
    ties = np.isin(a[differ], _E2M1_MIDPOINTS)
    n = int(differ.sum())
    for mode, phrase in _ROUNDING_MODES.items():
        if np.array_equal(_grid_index(_E2M1_MAGNITUDES, a_in, mode), theirs_in):
            at_ties = "all at exact ties of y" if ties.all() else f"{int(ties.sum())} of them at exact ties of y"
            return (f"E2M1 {phrase}: the {n} differing codes ({at_ties}) and every other code of their blocks are "
                    f"{best.rule.name}'s scaled values y (x * m, or x / d under a division rule) so rounded; SPEC 3.1 "
                    "rounds to nearest, ties to even")
    return None


_E4M3_VALUES = decode_e4m3(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)  # bytes 0x00..0x7E, ascending (2.2)


def _e4m3_rounding(best: _Candidate, their_scales: np.ndarray, values: np.ndarray) -> str | None:
    """The E4M3 rounding-mode hypothesis: some scale bytes differ, and every scale byte of the plane is the rule's
    fp32 block scale (5.2's sf, 5.4's clamped bs) rounded by one other mode than SPEC 3.2's (to nearest even; the
    modes of :func:`_e2m1_rounding`). ``values``: the rule's block scales (:func:`_scaled_source`). None where no
    mode reproduces them all or where a scale value is NaN."""
    exp = best.expected
    differ = their_scales != exp.scales
    if not differ.any():
        return None
    a = np.minimum(np.abs(values.astype(np.float64)), 448.0)  # (satfinite: larger values take 448)
    if np.isnan(a).any() or values.shape != exp.scales.shape:
        return None
    n = int(differ.sum())
    for mode, phrase in _ROUNDING_MODES.items():
        if np.array_equal(_grid_index(_E4M3_VALUES, a, mode), their_scales):
            return (f"E4M3 scale {phrase}: the {n} differing scale bytes and every other are {best.rule.name}'s fp32 "
                    f"block scales so rounded; SPEC 3.2 rounds to nearest even")
    return None


def _layout_mixup(written: str, read: str) -> str:
    """The bug class of scales written in layout ``written`` and read as ``read`` (two readings of _ALL_READINGS)."""
    if written.startswith("swizzled") and read.startswith("swizzled"):
        return f"{written[9:] or '128x4'} swizzled scales read as {read[9:] or '128x4'} swizzled"
    if written.startswith("swizzled"):
        return "swizzled scales read as linear"
    if read.startswith("swizzled"):
        return "linear scales read as swizzled"
    return "linear scales read with the other padding"


def _nan_payload(best: _Candidate, base: _Candidate | None, both_codes, their_scales: np.ndarray | None,
                 source: np.ndarray) -> str | None:
    """The NaN-payload line: under a torchao rule (SPEC 3.5) a NaN product's code is index 2, 3 or 4 by the NaN's
    payload, and a product of two NaNs keeps one operand's payload (x86: the first operand's). It fits where their
    scale bytes are the rule's and every code that differs from the plain rule's (``base``, or ``best`` itself) is a
    NaN product (a NaN element, or an element of a block whose scale byte is NaN) with a NaN index on both sides;
    ``best`` may then be a variant that matches (a division keeps x's payload). ``both_codes``: :func:`_hypotheses`'
    cached (their codes, best's codes)."""
    ref = base if base is not None else best
    if ref.rule.quantize["rule"] not in ("torchao", "torchao_noscale") or ref.rule.variant is not None:
        return None
    exp = ref.expected
    if source.shape != (exp.rows, exp.cols) or their_scales is None or not np.array_equal(their_scales, exp.scales):
        return None
    theirs, best_codes = both_codes()  # (base, where given, has best's plane, block and reading: the same shape)
    ours = best_codes if ref is best else exp.codes()
    dc = theirs != ours
    if not dc.any() or (base is None and best.n_diff == 0):
        return None
    nan_scale = np.repeat((exp.scales & 0x7F) == 0x7F, 16, axis=1)[:, : exp.cols]
    nan_product = np.isnan(source) | nan_scale
    nan_index = np.isin(theirs & 0x7, (2, 3, 4)) & np.isin(ours & 0x7, (2, 3, 4))
    if not (nan_product & nan_index)[dc].all():
        return None
    n = int(dc.sum())
    both = int((dc & np.isnan(source) & nan_scale).sum())
    codes = f"{n} code{'s' if n != 1 else ''}"
    head = (f"{best.label} reproduces these bytes; they differ from {ref.label}'s only at NaN products ({codes})"
            if best is not ref else f"NaN payloads: every differing code ({codes}) is a NaN product, a NaN index on "
            "both sides")
    return (f"{head}. SPEC 3.5 encodes a NaN as index 2, 3 or 4 by its payload, and a product of two NaNs ({both} of "
            f"{n} here: a NaN element in a NaN-scale block) keeps one operand's payload, on x86 the first operand's. "
            f"The writer's products kept another payload than {ref.rule.name}'s: torch's CPU product, for one, keeps "
            "x's next to a cut of its parallel split (SPEC 3.5)")


def _hypotheses(best: _Candidate, data: np.ndarray, sbuf: np.ndarray, declared: str | None, layout: str,
                other_scales, given_amax, source: np.ndarray, inputs_amax_fits: bool,
                base: _Candidate | None = None) -> list:
    exp = best.expected
    rows, c16 = exp.scales.shape
    out = []
    direct = _read(sbuf, rows, c16, best.reading)  # their scales as read (also the one-ulp line's)
    both_codes = functools.cache(lambda: (unpack_fp4(data.reshape(exp.rows, -1), exp.cols), exp.codes()))
    payload = _nan_payload(best, base, both_codes, None if direct is None else direct[0], source)
    if payload:
        out.append(payload)
    # layout: the scales fit in a layout other than the one declared
    for reading in _ALL_READINGS:
        got = _read(sbuf, rows, c16, reading)
        if got is None or reading == best.reading:
            continue
        if np.array_equal(got[0], exp.scales) and not np.array_equal(_read(sbuf, rows, c16, best.reading)[0],
                                                                      exp.scales):
            kind = _layout_mixup(reading, best.reading)
            out.append(f"{kind}: the scale bytes are {best.label}'s in the {_READING_WORDS[reading]} layout"
                       + (f", not the {declared} layout given" if declared else ""))
    if layout not in ("auto", *_ALL_READINGS) and best.reading not in _READINGS[layout] and best.n_diff == 0:
        # a library's layout given (a single reading given has the line below), and the buffer's size fits none of
        # its readings: diagnose read it in another
        words = " or ".join(_READING_WORDS[r] for r in _READINGS[layout])
        out.append(f"scales of another layout: the {layout} layout stores them {words}, which {sbuf.size} bytes do "
                   f"not fit; they match in the {_READING_WORDS[best.reading]} layout")
    if declared and declared != best.reading and best.n_diff == 0:
        kind = _layout_mixup(best.reading, declared)
        out.append(f"{kind}: the scale bytes match in the {_READING_WORDS[best.reading]} layout, not the "
                   f"{declared} layout " + ("given" if declared == layout else
                                            f"their shape {list(sbuf.shape)} suggests"))
    # swizzled scales in a buffer of the compact size: the first rows * C bytes of the 128x4 layout (SPEC 8.2), the
    # rest of it cut off (or written past the buffer's end)
    b = sbuf.reshape(-1)
    pr, pc = padded_scale_shape(rows, c16)
    if best.n_diff and b.size == rows * c16 < pr * pc:
        swz = exp.swizzled_scales()[: b.size]
        if np.array_equal(b, swz) and not np.array_equal(b.reshape(rows, c16), exp.scales):
            out.append(f"swizzled scales cut to the compact size: the {b.size} scale bytes are the first {b.size} of "
                       f"{best.label}'s 128x4 swizzled buffer (SPEC 8.2: {pr * pc} bytes), read as compact [{rows}, "
                       f"{c16}]; the writer used the swizzled layout in a buffer sized for the compact one")
    # transposed scales
    tr = []
    if b.size == rows * c16:
        tr.append(b.reshape(c16, rows).T)
    for reading in _ALL_READINGS[1:]:
        got = _read(b, c16, rows, reading)
        if got is not None:
            tr.append(got[0].T)
    as_read = direct is not None and np.array_equal(direct[0], exp.scales)  # (a symmetric matrix reads both ways)
    if any(np.array_equal(t, exp.scales) for t in tr) and best.n_diff and not as_read:
        out.append("transposed scales: the scale bytes are the transpose of the expected [rows, K/16] matrix")
    # scales of the other plane (only where those differ from this plane's: scales that are right fit both)
    if other_scales is not None and best.n_diff and not (
            other_scales.shape == exp.scales.shape and np.array_equal(other_scales, exp.scales)):
        o_rows, o_c16 = other_scales.shape
        for reading in _ALL_READINGS:
            got = _read(b, o_rows, o_c16, reading)
            if got is not None and np.array_equal(got[0], other_scales):
                other = "columnwise" if best.plane == "row" else "rowwise"
                out.append(f"scales of the wrong plane: the scale bytes are the {other} plane's "
                           f"([{o_rows}, {o_c16}], {reading}) under {best.rule.name}")
                break
    # one ulp off in the scale (their scales as read, the transposed check's `direct`)
    got = direct
    if got is not None:
        theirs_s = got[0].astype(np.int16)
        ours_s = exp.scales.astype(np.int16)
        sd = theirs_s != ours_s
        nan_byte = ((theirs_s & 0x7F) == 0x7F) | ((ours_s & 0x7F) == 0x7F)  # 0x7E -> 0x7F is no step (SPEC 2.2)
        if sd.any() and not (sd & nan_byte).any():
            step = (theirs_s - ours_s)[sd]
            ulp = np.abs(step) == 1
            if ulp.all():
                data_only = int((best.diff & ~sd).sum())
                one_way = bool((step > 0).all() or (step < 0).all())
                out.append(f"one ulp off in the scale: all {int(sd.sum())} differing scale bytes are one E4M3 step from "
                           f"{best.rule.name}'s ({int((step > 0).sum())} up, {int((step < 0).sum())} down)"
                           + (f"; {data_only} more blocks differ in codes only" if data_only else "")
                           + ": a rounding difference in the block scale (SPEC 5.2, 14.3)"
                           + ("; every step one way with other blocks' codes off too also fits a different per-tensor "
                              "scale (amax, S_enc) or RHT sign mask" if one_way and data_only else ""))
    # rounding modes: of the scale bytes (E4M3), or, where they agree, of the codes (E2M1); from the rule's scaled
    # values and block scales, formed once (not for 4over6 or row-scaled rules: no single fp32 array of either)
    q = best.rule.quantize
    if best.n_diff and got is not None and not q.get("four_over_six") and not q.get("row_scaled"):
        with np.errstate(all="ignore"):
            scaled, _, _, values = _scaled_source(source, base=q["rule"], variant=best.rule.variant,
                                                  block=best.block, amax=exp.amax)
        for rounding in (_e4m3_rounding(best, got[0], values), _e2m1_rounding(best, data, got[0], scaled)):
            if rounding:
                out.append(rounding)
    # the RHT plane quantized with X's amax (when that candidate matches, or is strictly nearer than the plane's own)
    if inputs_amax_fits:
        out.append(f"the RHT plane quantized with X's amax ({_fmt(exp.amax)}): SPEC 4.2 takes the columnwise amax over "
                   "the RHT outputs (one amax serves both planes only without the RHT)")
    # garbage in the padding
    if best.padding_garbage:
        n = best.padding_garbage
        out.append(f"garbage in the padding: {n} padding byte{'s' if n != 1 else ''} of the {best.reading} scale "
                   f"buffer {'are' if n != 1 else 'is'} not 0x00 (SPEC 8.1-8.3)")
    if best.plane == "col" and exp.valid_cols < exp.cols and not exp.rht:
        m = exp.valid_cols
        theirs_codes, ours_codes = both_codes()
        bad_pad = int((theirs_codes[:, m:] != ours_codes[:, m:]).sum())
        bad_real = int((theirs_codes[:, :m] != ours_codes[:, :m]).sum())
        if bad_pad and not bad_real:
            out.append(f"garbage in the padding: {bad_pad} codes of the zero-padded tokens {m}..{exp.cols - 1} "
                       "(SPEC 6.2) differ; every real token matches")
    # zero codes without their sign: the scales agree, and every differing code is our 0x8 against their 0x0
    if best.n_diff and got is not None and np.array_equal(got[0], exp.scales):
        theirs_codes, ours_codes = both_codes()
        dc = theirs_codes != ours_codes
        if dc.any() and (ours_codes[dc] == 0x8).all() and (theirs_codes[dc] == 0x0).all():
            n = int(dc.sum())
            negzero = int((dc & (source == 0) & np.signbit(source)).sum())
            if negzero == n:
                out.append(f"-0.0 written as +0: every differing code ({n}) is 0x0 for an element that is -0.0, where "
                           "SPEC 3.1 keeps the sign (0x8); TE's pure-torch reference encodes -0.0 so (SPEC 14.1)")
            else:
                out.append(f"zero codes without their sign: every differing code ({n}) is 0x0 where {best.rule.name} "
                           f"writes 0x8 (negative values that round to zero: {n - negzero}; elements that are -0.0: "
                           f"{negzero}); SPEC 3.1 keeps the sign")
    # nibble order
    swapped = ((data >> 4) | (data << 4)).astype(np.uint8)
    if (best.n_diff and np.array_equal(swapped.reshape(exp.data.shape), exp.data)
            and not np.array_equal(data.reshape(exp.data.shape), exp.data)):  # (equal nibbles swap to themselves)
        out.append("nibble order: the codes are the expected ones with element 2i in the HIGH nibble (SPEC 2.3 puts "
                   "it in the low nibble)" + ("; on an RHT plane the same bytes come from a sign mask that differs in "
                                              "every odd bit (mask ^ 0xAAAA swaps each pair of outputs, SPEC 7.1)"
                                              if exp.rht else ""))
    # the per-tensor value given
    if given_amax is not None and np.size(given_amax) == 1 and not _row_scaled(exp):
        g = np.float32(np.asarray(given_amax).reshape(-1)[0])
        a = np.float32(exp.amax)
        six_g = int(6 * getattr(exp, "global_scale_max", 448))  # 6G: 2688, or 1536 for a G = 256 plane (SPEC 5.6)
        libs = (" (flashinfer's global_scale)", " (torchao's per_tensor_scale, flashinfer's is_global_scale_inversed)")
        if six_g != 2688:
            libs = ("", "")  # those libraries' values are 2688 / amax and amax / 2688
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            forms = {f"S_enc = {six_g} / amax{libs[0]}": np.float32(np.float32(six_g) / a),
                     f"1 / S_enc = amax / {six_g}{libs[1]}": np.float32(a / np.float32(six_g))}
        if g.view(np.uint32) != a.view(np.uint32):
            named = [k for k, v in forms.items() if np.isfinite(v) and abs(float(g) - float(v)) <= abs(float(v)) * 2**-22]
            if named:
                out.append(f"the amax given ({_fmt(g)}) is {named[0]} of the amax {_fmt(a)}, not the amax itself "
                           "(SPEC 14.10)")
            else:
                out.append(f"the amax given ({_fmt(g)}) is not the amax {best.rule.name} computes ({_fmt(a)})")
    return out


# ---------------------------------------------------------------------------------------------------------------
# diagnose
# ---------------------------------------------------------------------------------------------------------------

def _planes_for(data_shape: tuple, data_size: int, m: int, k: int, plane: str) -> list:
    mp = -(-m // 16) * 16
    fits = {"row": m * k // 2, "col": k * mp // 2}
    if plane != "auto":
        if plane not in fits:
            raise ValueError(f"plane must be 'auto', 'row' or 'col', got {plane!r}")
        if data_size != fits[plane]:
            raise ValueError(f"data of {data_size} bytes is not the {plane} plane of x [{m}, {k}] "
                             f"({fits[plane]} bytes)")
        return [plane]
    shapes = {"row": (m, k // 2), "col": (k, mp // 2)}
    by_shape = [p for p in ("row", "col") if len(data_shape) == 2 and tuple(data_shape) == shapes[p]]
    if len(by_shape) == 1:
        return by_shape
    by_size = [p for p in ("row", "col") if data_size == fits[p]]
    if not by_size:
        raise ValueError(f"data of {data_size} bytes is neither the rowwise plane of x [{m}, {k}] ({fits['row']} bytes) "
                         f"nor its columnwise plane [{k}, {mp}] ({fits['col']} bytes)")
    return by_size


def diagnose(x, data, scales, amax=None, layout: str = "auto", *, plane: str = "auto",
             rht_signs: int = DEFAULT_RHT_SIGNS, rules=None) -> Diagnosis:
    """Find the rule that made ``data`` / ``scales`` from ``x``.

    Args:
        x: the input (as :func:`oracle.quantize` takes it).
        data: their packed codes, uint8 (any shape with the plane's number of bytes).
        scales: their scale bytes, uint8 or float8_e4m3fn, in any layout of ``layout``.
        amax: their stored per-tensor amax (a number, or one per plane row for a row-scaled plane: M rowwise, K
            columnwise), if any. Every rule
            runs with its own computed amax, and again with this one when it differs.
        layout: "auto" (every layout the size fits: compact, padded or 128x4), "compact", "padded", "swizzled"
            (128x4), "swizzled_8x4" (SPEC 8.3), or a library's storage (SPEC 14.10): "torchao" (compact or
            128x4), "te" (padded or 128x4), "flashinfer" (linear compact, 128x4 or 8x4).
        plane: "row", "col" or "auto" (from the data's shape and size).
        rht_signs: the RHT sign mask tried for a columnwise plane of bf16 input.
        rules: a name of ``DIAGNOSE_RULES`` (``from oracle.diagnose import DIAGNOSE_RULES``), or several, to
            try (default: all this oracle has); a name may be a shell pattern (``"flashinfer_*"``,
            ``"te_4over6_m?e"``).
    Returns:
        a ``Diagnosis`` (``from oracle.diagnose import Diagnosis``; ``print()`` it).
    Raises:
        ValueError: an unknown layout or rule, a sign mask outside 16 bits, an amax that is neither one value nor one
            per row, data / scales whose sizes fit no plane of ``x``, or no rule tried that defines that plane.
        TypeError: ``x`` not an array of float32 / float16 / bfloat16 (or a masked one), data or scales not bytes,
            or ``rules`` neither a name nor names.
    """
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_rht_signs(rht_signs)
    x2, is_bf16 = as_2d_f32(x)
    m, k = x2.shape
    d = _u8(data, "data")
    sbuf = _u8(scales, "scales")
    planes = _planes_for(d.shape, d.size, m, k, plane)
    table = [r for r in DIAGNOSE_RULES if _rule_available(r)]
    if isinstance(rules, str):
        rules = (rules,)
    if rules is not None:
        try:
            rules = tuple(rules)
        except TypeError:
            raise TypeError(f"rules must be a rule name or several, got {rules!r}") from None
        if not rules:
            raise ValueError("rules names no rule: give one or more names of DIAGNOSE_RULES, or None for all")
        names = [r.name for r in DIAGNOSE_RULES]
        if not all(isinstance(n, str) for n in rules):
            raise TypeError(f"rules must be rule names (strings), got {rules!r}")
        unknown = [n for n in rules if not fnmatch.filter(names, n)]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown} (names or shell patterns); diagnose knows {sorted(names)}")
        chosen = {name for n in rules for name in fnmatch.filter(names, n)}
        table = [r for r in table if r.name in chosen]
    given = None
    if amax is not None:
        given = host_array(amax)
        if not is_real(given):
            raise ValueError(f"amax must hold real numbers, got dtype {given.dtype}")
        given = given.astype(np.float32).reshape(-1)
        if np.any(given < 0):
            raise ValueError(f"amax holds a negative value ({_fmt(given[given < 0][0])}): an amax is an absolute "
                             "maximum (SPEC 4.3), so bytes that come with a negative one were made with a sign error")
        per_row = {m if p == "row" else k for p in planes}  # (one per plane row: M rowwise, K columnwise)
        if given.size != 1 and given.size not in per_row:
            raise ValueError(f"amax holds {given.size} values; diagnose takes one per-tensor value, or one per plane "
                             f"row for a row-scaled plane ({' or '.join(map(str, sorted(per_row)))})")
    sources = _PlaneSources(x2, rht_signs)
    cands = []
    for p in planes:
        rows, cols = (m, k) if p == "row" else (k, -(-m // 16) * 16)
        c16 = cols // 16
        readings = [r for r in _READINGS[layout] if _read(sbuf, rows, c16, r) is not None]
        if not readings:  # the size fits another layout only: read it so, and name the mismatch as a hypothesis
            readings = [r for r in _READINGS["auto"] if _read(sbuf, rows, c16, r) is not None]
        if not readings:
            raise ValueError(f"scales of {sbuf.size} bytes fit no {layout} layout of the {p} plane [{rows}, {c16}] "
                             f"(compact {rows * c16} bytes, padded or 128x4 {np.prod(padded_scale_shape(rows, c16))}, "
                             f"8x4 {np.prod(padded_scale_shape_8x4(rows, c16))}: --layout swizzled_8x4 or flashinfer)")
        dp = d.reshape(rows, cols // 2)
        for r in table:
            if p not in r.planes:
                continue
            for block in ((1, 16), (16, 16)):
                for rht in ((False, True) if p == "col" and is_bf16 else (False,)):
                    amaxes = [("computed", None)]
                    if given is not None:
                        if r.quantize.get("row_scaled"):
                            if given.size == rows:  # one per plane row: M (rowwise), K (columnwise)
                                amaxes.append(("given", given))
                        elif given.size == 1:
                            amaxes.append(("given", np.float32(given[0])))
                    if p == "col" and rht and not r.quantize.get("row_scaled"):
                        # SPEC 4.2: the RHT plane's amax is of the RHT outputs; X's own amax there is a bug class
                        # (after the given one, so that a supplied amax equal to X's counts as supplied)
                        with np.errstate(invalid="ignore"):
                            x_amax = tensor_amax(x2, _amax_rule(r.quantize["rule"], r.variant))
                        amaxes.append(("rowwise", np.float32(x_amax)))
                    for src, a in amaxes:
                        try:
                            exp = _expected(x, sources, r, p, block, rht, a)
                        except (ValueError, TypeError):
                            continue  # a combination the rule does not define (e.g. 4over6 with RHT)
                        if src != "computed" and any(c.expected.amax.tobytes() == exp.amax.tobytes()
                                                  and c.rule is r and c.block == block and c.rht == rht
                                                  and c.plane == p for c in cands):
                            continue  # the given (or X's) amax is one already tried
                        for reading in readings:
                            compact, garbage = _read(sbuf, rows, c16, reading)
                            c = _Candidate(r, p, block, rht, src, exp, reading, _block_diff(exp, dp, compact), garbage,
                                           _bytes_diff(exp, dp, compact))
                            cands.append(c)
    if not cands:
        row_only = sorted(r.name for r in table if "col" not in r.planes)
        fo6 = [r for r in table if r.quantize.get("four_over_six")]
        raise ValueError(
            f"no rule tried applies to this input read as the {' or '.join(planes)} plane "
            f"({len(table)} rule(s) tried"
            + (f"; {', '.join(row_only[:4])}{', ...' if len(row_only) > 4 else ''} define the rowwise plane only"
               if row_only and "col" in planes else "")
            + ("; 4over6 is defined without the RHT only" if fo6 else "")
            + ("; flashinfer's 4over6 with 1x16 blocks only" if any(r.variant for r in fo6) else "") + ")")
    order = {id(c): i for i, c in enumerate(cands)}
    cands.sort(key=lambda c: (c.n_diff, c.padding_garbage > 0, c.n_bytes, order[id(c)]))
    best = cands[0]
    exact = [c for c in cands if c.n_diff == 0 and c.padding_garbage == 0]
    if exact:
        best = exact[0]
    matches = []
    for c in exact:
        if c.reading == best.reading and c.label not in matches:
            matches.append(c.label)
    rows, c16 = best.expected.scales.shape
    declared = _declared_reading(sbuf.shape, rows, c16, layout)
    other = None
    if best.n_diff:
        o = "col" if best.plane == "row" else "row"
        if o in best.rule.planes:
            try:
                other = _expected(x, sources, best.rule, o, best.block, best.rht and o == "col", None).scales
            except (ValueError, TypeError):
                other = None
    src = sources.get(best.plane, best.rht)
    own = [c.n_diff for c in cands if c.amax_source == "computed" and (c.rule, c.plane, c.block, c.rht)
           == (best.rule, best.plane, best.block, best.rht)]
    inputs_amax_fits = best.amax_source == "rowwise" and (best.n_diff == 0 or best.n_diff < min(own, default=-1))
    base = None  # the plain rule beside a variant that matches (its NaN-payload line)
    if best.n_diff == 0 and best.rule.variant is not None:
        base = next((c for c in cands if c.rule.variant is None and c.rule.name == best.rule.quantize["rule"]
                     and (c.plane, c.block, c.rht, c.amax_source, c.reading)
                     == (best.plane, best.block, best.rht, best.amax_source, best.reading)), None)
    hyps = _hypotheses(best, d, sbuf, declared, layout, other, given, src, inputs_amax_fits, base)
    first = None
    side = []
    if best.n_diff:
        rr, bb = np.argwhere(best.diff)[0]
        first = (int(rr), int(bb))
        compact, _ = _read(sbuf, rows, c16, best.reading)
        theirs = dataclasses.replace(best.expected, data=d.reshape(best.expected.data.shape), scales=compact.copy())
        side = _side_by_side(src, best.expected, theirs, best.plane, first[0], first[1], best.label)
        if not hyps:
            hyps = ["none of the known bug classes (padding, layout, transpose, wrong plane, one-ulp scale, E2M1 "
                    "rounding, signed zeros, nibble order, per-tensor value, NaN payloads) fits; compare the first "
                    "differing block below"]
    seen, tried = set(), []
    for c in cands:
        if c.label not in seen:
            seen.add(c.label)
            tried.append((c.label, c.n_diff))
    header = [f"input: x {list(np.shape(x))} {np.asarray(x).dtype if not hasattr(x, 'detach') else x.dtype}; "
              f"theirs: data uint8{list(d.shape)}, scales {list(sbuf.shape)} ({sbuf.size} bytes)"
              + (f", amax {', '.join(_fmt(v) for v in given[:4])}{' ...' if given.size > 4 else ''}"
                 if given is not None else "")]
    return Diagnosis(matches=matches, plane=best.plane, reading=best.reading, closest=None if matches else best.label,
                     n_blocks=rows * c16, n_diff=best.n_diff, first_diff=first, hypotheses=hyps, side_by_side=side,
                     tried=tried, header=header)
