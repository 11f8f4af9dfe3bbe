"""Seeded case generators: case ``index`` of ``seed`` for an op is rebuilt from ``(op, seed, index)`` and the
backend's option space.

Every generator draws from ``numpy.random.Generator(PCG64(SeedSequence([seed, crc32(op), index])))``.
``space`` restricts the option values a backend supports (``{"rule": ["torchao"], "dtype": [...]}``) and
may set size limits (``max_elems``, ``min_rows``); a restricted draw picks among the allowed values.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import oracle
from oracle.rht import DEFAULT_RHT_SIGNS

from .cases import PLAIN_QUANT, Case, norm_option

#: The keys a backend's ``space()`` may set (``conformance.runner.case_space`` refuses others, so that a typo cannot
#: silently leave a restriction out). Option lists: ``planes`` ("row", "col", "both"), ``rule``, ``rht``,
#: ``rht_signs`` ("default", "random"), ``rounding``, ``block``, ``swizzled``, ``dtype``, ``amax`` (how an amax is
#: supplied: "computed", "one", "pair"; dequantize: the amax's kind), ``scales`` (dequantize), ``out_dtype``,
#: ``kind`` (GEMM kind); quantize and group_quantize: ``quantize_kernel`` (the kernels a backend can be made to run,
#: "auto" and "general"; drawn only where the backend's space names them); flags and limits: ``specials`` (NaN / Inf
#: / -0 sprinkled in), ``max_elems``, ``min_rows``, ``max_rows``, ``max_k``, ``small``, ``loose_splits`` (SPEC 9.4
#: device splits); GEMM and grouped GEMM: ``bias_dtype`` ("float32", "bfloat16"), the operands' quantization:
#: ``operand_quant`` ("default", "varied"), ``operand_rule`` ("te", "te_fused_rht"), ``operand_rounding`` ("rn",
#: "sr"), ``b_block`` ([16, 16], [1, 16]); grouped GEMM: ``groups_agree``, ``contraction`` ("normal", "long"),
#: ``operand_rules`` ("te", "torchao", "torchao_noscale": both operands' rule family, SPEC 12.1), and the device
#: plan: ``algorithm`` ("auto" and the names of FAST_ALGORITHMS / EXACT_ALGORITHMS), ``loader`` (None, "cp_async",
#: "tma"), ``epilogue`` (None, "staged", "tma_store"), ``num_sms`` (0 = one CTA per SM, 1, 2, 3, 5, 8); set by the
#: op registry: ``format``, ``mode``. TE's variants of rule "te" (quantize and group_quantize, SPEC 5.6, 5.7; drawn
#: only where rule "te", round to nearest and no RHT were drawn): ``four_over_six`` (None, "mae", "mse"),
#: ``four_over_six_fast_math``, ``global_scale_max`` (448, 256), ``four_over_six_dtype`` (the input dtypes 4over6 is
#: drawn on), ``row_scaled`` (False, True: 1x16 blocks, either plane); dequantize: ``global_scale_max`` (rule
#: "te" planes). The grouped linear layer (SPEC 16): ``layer_mode`` ("fast", "exact", "sm100"), ``params_dtype``
#: ("bfloat16", "float32"), ``main_grad`` (False, True: fused wgrad accumulation), ``steps`` (1, 2), and for its
#: recipe ``rule``, ``b_block`` (the weights' block), ``rht`` (on the wgrad operands), ``rht_signs``, ``rounding``
#: (of dY) and ``loose_splits``. ``rht_plain``: a quantize case with the RHT gets an x whose columnwise 16-blocks are
#: all SPEC 7.4's plain blocks, M a positive multiple of 16 (a backend that forms the RHT by a matrix product).
SPACE_KEYS = frozenset({
    "planes", "rule", "rht", "rht_signs", "rounding", "block", "swizzled", "dtype", "amax", "scales", "out_dtype",
    "kind", "quantize_kernel", "specials", "max_elems", "min_rows", "max_rows", "max_k", "small", "loose_splits",
    "format", "mode", "groups_agree", "bias_dtype", "contraction",
    "operand_quant", "operand_rule", "operand_rounding", "b_block", "operand_rules",
    "algorithm", "loader", "epilogue", "num_sms",
    "four_over_six", "four_over_six_fast_math", "global_scale_max", "four_over_six_dtype", "row_scaled",
    "layer_mode", "params_dtype", "main_grad", "steps", "rht_plain",
})

__all__ = ["EXACT_ALGORITHMS", "FAST_ALGORITHMS", "GENERATORS", "LAYER_MODELS", "MMA_CODES", "MMA_SCALES", "SPACE_KEYS",
           "GemmShape", "algorithm_runs", "case_rng", "draw_rht_signs", "epilogues_of", "fit_plan", "gen_k", "gen_rows",
           "gen_splits", "gen_values", "generate", "loaders_of", "plain_rht_blocks", "to_dtype"]

EDGE_ROWS = (0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)
EDGE_K = (16, 32, 48, 64, 80, 128, 144, 256, 512, 1024, 2048)
E2M1_TIES = np.array([0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0])
DTYPE_MAX = {"float32": 3.4028234e38, "bfloat16": 3.3895314e38, "float16": 65504.0}
DTYPE_TINY = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-14}
VALUE_KINDS = ("normal", "heavy", "constant", "zeros", "subnormal", "near_max", "ties", "integers", "mixed")
DEFAULT_MAX_ELEMS = 1 << 18


def case_rng(seed: int, op: str, index: int) -> np.random.Generator:
    """The generator of case ``index`` of ``seed`` for ``op`` (independent of every other case)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), zlib.crc32(op.encode()), int(index)])))


def pick(rng: np.random.Generator, space: dict, name: str, choices, p=None):
    """Draw one of ``choices`` (weights ``p``), restricted to ``space[name]`` when the backend restricts it."""
    choices = list(choices)
    if name in space:
        allowed = [c for c in choices if norm_option(c) in [norm_option(a) for a in space[name]]]
        if not allowed:
            allowed = list(space[name])
        idx = [choices.index(c) for c in allowed if c in choices]
        if p is not None and len(idx) == len(allowed):
            w = np.array([p[i] for i in idx], float)
            if w.sum() > 0:  # (choices of weight 0 that the backend allows are drawn uniformly)
                return allowed[int(rng.choice(len(allowed), p=w / w.sum()))]
        return allowed[int(rng.integers(len(allowed)))]
    if p is not None:
        w = np.asarray(p, float)
        return choices[int(rng.choice(len(choices), p=w / w.sum()))]
    return choices[int(rng.integers(len(choices)))]


def gen_rows(rng: np.random.Generator, max_rows: int = 5000, min_rows: int = 0) -> int:
    """Row count in [min_rows, max_rows], biased to 0, 1 and the 16/64/128 edges."""
    u = rng.random()
    if u < 0.06 and min_rows == 0:
        return 0
    if u < 0.55:
        edge = [r for r in EDGE_ROWS if min_rows <= r <= max_rows]
        if edge:
            return int(edge[rng.integers(len(edge))])
    return int(np.clip(np.exp(rng.uniform(0, np.log(max_rows + 1))), max(min_rows, 1), max_rows))


def gen_k(rng: np.random.Generator, max_k: int = 2048) -> int:
    """A contraction / row length: a multiple of 16 in [16, max_k], biased to small and power-of-two sizes."""
    if rng.random() < 0.5:
        edge = [k for k in EDGE_K if k <= max_k]
        return int(edge[rng.integers(len(edge))])
    return int(16 * rng.integers(1, max_k // 16 + 1))


def gen_splits(rng: np.random.Generator, total: int, groups: int) -> tuple[np.ndarray, str]:
    """Group sizes (int64, sum ``total``) and the split kind: random, zeros, giant, aligned, unaligned."""
    kind = str(rng.choice(["random", "zeros", "giant", "aligned", "unaligned"], p=[0.35, 0.2, 0.15, 0.15, 0.15]))
    e = groups
    if total == 0:
        return np.zeros(e, np.int64), "all_zero"
    if kind == "aligned" and total < 128:  # (no 128-row group fits: the tag says what was drawn)
        kind = "random"
    if kind == "giant":
        s = np.zeros(e, np.int64)
        s[rng.integers(e)] = total
    elif kind == "aligned":  # every group but the last a multiple of 128 rows, so every group starts on one
        blocks = rng.multinomial(total // 128, np.ones(e) / e).astype(np.int64) * 128
        blocks[-1] += total - int(blocks.sum())
        s = blocks
    elif kind == "unaligned":
        s = rng.choice([1, 15, 17, 63, 65, 127, 129], size=e).astype(np.int64)
        while s.sum() > total:
            s[rng.integers(e)] //= 2
        s[rng.integers(e)] += total - int(s.sum())
    else:
        w = rng.dirichlet(np.full(e, 0.7))
        if kind == "zeros":
            w[rng.random(e) < 0.4] = 0
            if w.sum() == 0:
                w[rng.integers(e)] = 1
            w = w / w.sum()
        s = rng.multinomial(total, w).astype(np.int64)
    return s.astype(np.int64), kind


def _loosen_splits(rng: np.random.Generator, s: np.ndarray, total: int) -> tuple[np.ndarray, str]:
    """Splits that do not add up to T, as users get them wrong (SPEC 9.4): cumulative offsets passed as sizes,
    negative entries, a total above or below T, or any int64 values (uninitialised memory: sums that overflow)."""
    kind = str(rng.choice(["offsets", "negative", "over", "under", "garbage"]))
    s = s.copy()
    if kind == "garbage":
        s = rng.integers(-2**63, 2**63 - 1, size=s.size, dtype=np.int64, endpoint=True)
    elif kind == "offsets":
        s = np.cumsum(s)
    elif kind == "negative":
        s[rng.integers(s.size)] = -int(rng.integers(1, 300))
    elif kind == "over":
        s[rng.integers(s.size)] += int(rng.integers(1, 300))
    else:
        s[int(np.argmax(s))] //= 2
    return s.astype(np.int64), f"loose_{kind}"


def to_dtype(v: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values -> ``dtype`` ("float32", "float16", "bfloat16"), rounding through float32."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = v.astype(np.float32)
        if dtype == "float32":
            return f
        if dtype == "float16":
            return f.astype(np.float16)
        return f.astype(ml_dtypes.bfloat16)


def draw_rht_signs(rng: np.random.Generator, space: dict, p: tuple[float, float]) -> tuple[int, str]:
    """An RHT sign mask (SPEC 7.2) and its kind: the default 0xD7E8 ("default") or a random 16-bit mask ("random"),
    with probabilities ``p``; space key ``rht_signs`` restricts the kind. The random mask is drawn either way, so the
    draws after it do not depend on the kind."""
    mask = int(rng.integers(0, 1 << 16))
    kind = pick(rng, space, "rht_signs", ["default", "random"], list(p))
    return (DEFAULT_RHT_SIGNS if kind == "default" else mask), kind


def _ties(rng, m: int, k: int, dtype: str) -> np.ndarray:
    """Blocks whose scaled values land exactly on E2M1 rounding ties (SPEC 3.1).

    Every 16x16 tile has +-12 on its diagonal (so every row block, column block and tile has amax 12) and one
    element of the tensor is 2688: with 2^j scaling, S_enc = 2^-j, the block scale decodes to 2 and the
    multiplier is 2^-j / 2, so 0.5, 1.5, 2.5, 3.5, 5, 7, 10 times 2^j land on 0.25, 0.75, ..., 5.
    """
    j = int(rng.integers(-10, 4)) if dtype == "float16" else int(rng.integers(-30, 30))
    pool = np.concatenate([E2M1_TIES, [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]])
    v = rng.choice(pool, size=(m, k)) * rng.choice([-1.0, 1.0], size=(m, k))
    r = np.arange(m)[:, None] % 16
    c = np.arange(k)[None, :] % 16
    v = np.where(r == c, 12.0 * rng.choice([-1.0, 1.0], size=(m, k)), v)
    if m and rng.random() < 0.8:
        v[rng.integers(m), rng.integers(k)] = 2688.0
    return v * 2.0**j


def gen_values(rng: np.random.Generator, m: int, k: int, dtype: str, kind: str | None = None,
               specials: bool = True) -> tuple[np.ndarray, str]:
    """An ``[m, k]`` float64 matrix of one value kind (see VALUE_KINDS), optionally sprinkled with NaN/Inf/-0.

    Returns ``(values, kind)``; values are meant to be converted with :func:`to_dtype`.
    """
    if kind is None:
        kind = str(rng.choice(VALUE_KINDS, p=[0.22, 0.12, 0.08, 0.05, 0.08, 0.08, 0.17, 0.08, 0.12]))
    big, tiny = DTYPE_MAX[dtype], DTYPE_TINY[dtype]
    shape = (m, k)
    if kind == "normal":
        v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4)
    elif kind == "heavy":
        v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 2)
        mask = rng.random(shape) < 0.01
        v[mask] *= 10.0 ** rng.uniform(2, 5, size=int(mask.sum()))
    elif kind == "constant":
        nb = -(-k // 16)  # (k need not be a multiple of 16: fprop's dy of N columns)
        c = rng.standard_normal((m, nb)) * 10.0 ** rng.uniform(-3, 3)
        v = np.repeat(c, 16, axis=1)[:, :k]
    elif kind == "zeros":
        v = np.zeros(shape) * rng.choice([1.0, -1.0], size=shape)
    elif kind == "subnormal":
        v = rng.uniform(-1, 1, shape) * tiny * rng.choice([1.0, 2.0**-3, 2.0**-7], size=shape)
    elif kind == "near_max":
        v = rng.uniform(0.5, 1.0, shape) * big * rng.choice([-1.0, 1.0], size=shape)
        v[rng.random(shape) < 0.5] *= 2.0**-100 if dtype != "float16" else 2.0**-10
    elif kind == "ties":
        v = _ties(rng, m, k, dtype)
    elif kind == "integers":
        v = rng.integers(-12, 13, size=shape).astype(float) * 2.0 ** int(rng.integers(-4, 5))
    else:  # mixed: a different kind per row (the rows of one kind drawn together, then put in their places)
        v = np.zeros(shape)
        sub = [x for x in VALUE_KINDS if x != "mixed"]
        row_kinds = rng.choice(len(sub), size=m)
        for i, sub_kind in enumerate(sub):
            rows = np.flatnonzero(row_kinds == i)
            if rows.size:
                v[rows] = gen_values(rng, rows.size, k, dtype, sub_kind, specials=False)[0]
    if specials and v.size and rng.random() < 0.2:
        rate = 10.0 ** rng.uniform(-3.5, -1.5)
        mask = rng.random(shape) < rate
        mask.flat[rng.integers(v.size)] = True
        v[mask] = rng.choice([np.nan, np.inf, -np.inf, -0.0], size=int(mask.sum()))
        if rng.random() < 0.25:  # a whole block of NaN beside finite ones (SPEC 5.2 / 6.3: its b folds from +0)
            _nan_block(rng, v)
    return v, kind


def _nan_block(rng: np.random.Generator, v: np.ndarray) -> None:
    """Set one whole block of ``v`` to NaN, on the 16-grid: a rowwise 16-block (one row, 16 columns), a columnwise
    16-block (16 rows of one column) or a 16x16 tile, clipped at the edges."""
    m, k = v.shape
    r0, c0 = 16 * int(rng.integers(-(-m // 16))), 16 * int(rng.integers(-(-k // 16)))
    shape = int(rng.integers(3))
    if shape == 0:
        v[r0 + int(rng.integers(min(16, m - r0))), c0:c0 + 16] = np.nan
    elif shape == 1:
        v[r0:r0 + 16, c0 + int(rng.integers(min(16, k - c0)))] = np.nan
    else:
        v[r0:r0 + 16, c0:c0 + 16] = np.nan


# ---------------------------------------------------------------------------------------------------------------
# per-op generators
# ---------------------------------------------------------------------------------------------------------------

#: model widths past gen_k's range (drawn rarely, with as many rows as the element budget allows)
WIDE_K = (4096, 5120, 11328)


def _size(rng, space, max_rows=5000, max_k=2048, min_rows=0) -> tuple[int, int]:
    max_elems = int(space.get("max_elems", DEFAULT_MAX_ELEMS))
    m = gen_rows(rng, min(max_rows, int(space.get("max_rows", max_rows))), int(space.get("min_rows", min_rows)))
    wide = [w for w in WIDE_K if w <= int(space.get("max_k", WIDE_K[-1])) and w <= max_elems]
    if wide and rng.random() < 0.03:
        k = int(rng.choice(wide))
        return min(m, max_elems // k), k
    k = gen_k(rng, min(max_k, int(space.get("max_k", max_k))))
    while m * k > max_elems and k > 16:
        k = max(16, (k // 2) // 16 * 16)
    if m * k > max_elems:
        m = max_elems // k
    return m, k


def _quant_options(rng, space, dtype: str) -> dict:
    planes = pick(rng, space, "planes", ["row", "col", "both"], [0.4, 0.2, 0.4])
    rule = pick(rng, space, "rule", ["te", "te_fused_rht", "torchao", "torchao_noscale"], [0.45, 0.2, 0.2, 0.15])
    col = planes in ("col", "both")
    rht = bool(pick(rng, space, "rht", [False, True], [0.5, 0.5])) if (col and dtype == "bfloat16") else False
    rounding = pick(rng, space, "rounding", ["rn", "sr"], [0.7, 0.3])
    return dict(
        rowwise=planes in ("row", "both"),
        columnwise=col,
        rht=rht,
        rht_signs=draw_rht_signs(rng, space, (0.7, 0.3))[0],
        block=list(pick(rng, space, "block", [(1, 16), (16, 16)], [0.75, 0.25])),
        rule=rule,
        rounding=rounding,
        seed=int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2)) if rounding == "sr" else 0,
        offset=int(rng.choice([0, int(rng.integers(0, 2**32)), 2**32 - 1])) if rounding == "sr" else 0,
        swizzled=bool(pick(rng, space, "swizzled", [True, False])),
    )


def _amax_supply(rng, space, x64: np.ndarray, groups: int | None):
    """Occasionally a caller-supplied amax (SPEC 4.3): one value per plane or a (row, col) pair."""
    mode = pick(rng, space, "amax", ["computed", "one", "pair"], [0.85, 0.1, 0.05])
    if mode == "computed":
        return None, mode
    n = 1 if groups is None else groups
    with np.errstate(invalid="ignore"):
        base = np.nanmax(np.abs(x64)) if x64.size and not np.all(np.isnan(x64)) else 1.0
    with np.errstate(over="ignore"):  # a huge base may overflow fp32 to +Inf: a valid supplied amax (SPEC 4.3)
        vals = (base * rng.choice([1.0, 2.0, 0.5, 1.0 + 2.0**-20], size=(2, n))).astype(np.float32)
    if rng.random() < 0.1:
        vals.flat[rng.integers(vals.size)] = rng.choice([0.0, np.inf, np.nan])
    return (vals[:1] if mode == "one" else vals).reshape(-1 if groups is None else (1 if mode == "one" else 2, n)), mode


def _has_specials(v: np.ndarray) -> str:
    """Tag: which non-finite values the input holds ("nan", "inf", "nan+inf" or "none")."""
    kinds = [n for n, f in (("nan", np.isnan), ("inf", np.isinf)) if v.size and f(v).any()]
    return "+".join(kinds) or "none"


def _tags_quant(o: dict, dtype: str, kind: str, m: int) -> dict:
    planes = "both" if o["rowwise"] and o["columnwise"] else ("row" if o["rowwise"] else "col")
    return dict(dtype=dtype, values=kind, rule=o["rule"], rounding=o["rounding"], planes=planes,
                rht=str(o["rht"]), block="x".join(map(str, o["block"])), layout="swz" if o["swizzled"] else "compact",
                rows="edge" if m in EDGE_ROWS else "random")




def _te_variants(rng, space, dtype: str, o: dict) -> dict:
    """TE's variants of rule "te" for a quantize case with options ``o`` (SPEC 5.6, 5.7): the options among
    TE_VARIANT_DEFAULTS that are not plain. Drawn from the case's child stream (``rng.spawn``), so the case's own
    stream, and with it every case drawn before these options existed, is unchanged; the draws are always made, in a
    fixed order, and applied where the case's other options allow them: 4over6 where rule "te", round to nearest and
    no RHT were drawn (and the dtype is in the space's ``four_over_six_dtype``), row scaling there too with 1x16
    blocks (either plane, or both). 4over6 in 40% of those cases (MAE and MSE alike), its product-domain error in 30%
    of them and G = 256 in 40%; row scaling in 40% (with 4over6 or without)."""
    extra = rng.spawn(1)[0]
    fo6 = pick(extra, space, "four_over_six", [None, "mae", "mse"], [0.6, 0.2, 0.2])
    fast = bool(pick(extra, space, "four_over_six_fast_math", [False, True], [0.7, 0.3]))
    g = int(pick(extra, space, "global_scale_max", [448, 256], [0.6, 0.4]))
    rs = bool(pick(extra, space, "row_scaled", [False, True], [0.6, 0.4]))
    te_rn = o["rule"] == "te" and o["rounding"] == "rn" and not o["rht"]
    out = {}
    if te_rn and fo6 is not None and dtype in space.get("four_over_six_dtype", [dtype]):
        out["four_over_six"] = fo6
        if fast:
            out["four_over_six_fast_math"] = True
        if g != 448:
            out["global_scale_max"] = g
    if te_rn and rs and list(o["block"]) == [1, 16]:
        out["row_scaled"] = True
    return out


def te_variant_tag(o: dict) -> str:
    """The ``te_variant`` tag of a quantize case: "plain", or "4over6:mae" / "4over6:mse" with ":fast" and ":G256",
    "row_scaled", or both joined by "+"."""
    parts = []
    if o.get("four_over_six"):
        parts.append(":".join(["4over6", o["four_over_six"]] + (["fast"] if o.get("four_over_six_fast_math") else [])
                              + ([f"G{o['global_scale_max']}"] if o.get("global_scale_max", 448) != 448 else [])))
    if o.get("row_scaled"):
        parts.append("row_scaled")
    return "+".join(parts) or "plain"


def _col_amax_supply(rng, x64: np.ndarray, splits: np.ndarray | None) -> np.ndarray:
    """A supplied amax for a row-scaled columnwise plane (SPEC 5.7): :func:`_row_amax_supply` over the rows of X^T,
    float32 [K]; grouped, over each group's X_g^T (on the SPEC 9.4 cut sizes), float32 [E, K]."""
    if splits is None:
        return _row_amax_supply(rng, x64.T)
    ends = np.cumsum(oracle.cut_splits(splits, x64.shape[0]))
    return np.stack([_row_amax_supply(rng, x64[e0:e1].T) for e0, e1 in zip(np.r_[0, ends[:-1]], ends, strict=True)])


def _row_amax_supply(rng, x64: np.ndarray) -> np.ndarray:
    """A supplied amax for a row-scaled plane (SPEC 5.7, 4.3 per row): each row's max |x| (1 for a row without a
    finite one) times 1, 2, 0.5 or 1 + 2^-20; now and then one of them 0, +Inf or NaN. float32 [rows]."""
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(np.where(np.isfinite(x64), x64, 0.0)).max(axis=1) if x64.shape[1] else np.zeros(x64.shape[0])
        a = np.where(a > 0, a, 1.0) * rng.choice([1.0, 2.0, 0.5, 1.0 + 2.0**-20], size=a.shape)
        vals = a.astype(np.float32)
    if vals.size and rng.random() < 0.2:
        vals[rng.integers(vals.size)] = rng.choice([0.0, np.inf, np.nan])
    return vals


def _four_over_six_ties(rng, m: int, k: int, block: tuple) -> np.ndarray:
    """Values whose 4over6 candidates (SPEC 5.6) tie in real arithmetic, so that only the fp32 roundings of the error
    sums (element order, 16x16 tree, the input-domain association) decide each block: per block (a 16-element block
    row, or a 16x16 tile) the max 12 u (map-to-6 scale 2 u, map-to-4 scale 3 u), one 5 u (error 1 against 0.5) and
    one 2 u (error 0 against 0.5), in other rows of a tile where it has them; every other element below 0.5 u (both
    candidates give 0). One element of 2688 u, or of a random value in [12 u, 2688 u) to vary S_enc, holds the plane's
    amax; u = 2^j with j in [-4, 4], signs random. float64 [m, k]."""
    u = 2.0 ** int(rng.integers(-4, 5))
    v = rng.uniform(-0.49, 0.49, (m, k)) * u  # (below 0.5 u in every dtype after rounding)
    rows = 16 if tuple(block) == (16, 16) else 1
    for r0 in range(0, m, rows):
        nr = min(rows, m - r0)
        for c0 in range(0, k, 16):
            cells = rng.choice(nr * 16, size=3, replace=False)
            for cell, val in zip(cells, (12.0, 5.0, 2.0), strict=True):
                v[r0 + cell // 16, c0 + cell % 16] = val * u * rng.choice([-1.0, 1.0])
    if v.size:
        top = 2688.0 * u if rng.random() < 0.5 else float(rng.uniform(12.0, 2688.0)) * u
        v.flat[int(rng.integers(v.size))] = top
    return v


def _special_amax(rng, arrays: dict, x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """A supplied amax of 0, +Inf or NaN (SPEC 4.3: S_enc is then FLT_MAX, 0 or FLT_MAX through fminf) in the shape
    :func:`_amax_supply` gives, and x with one all-zero block and one block of +-the dtype's least normal value where
    it has two blocks (the blocks whose scale bytes such an S_enc moves; elsewhere the scales saturate either way)."""
    n = int(arrays["splits"].size) if "splits" in arrays else None
    pair = rng.random() < 0.5
    vals = np.full((2 if pair else 1) * (1 if n is None else n), rng.choice([0.0, np.inf, np.nan]), np.float32)
    if pair and rng.random() < 0.5:
        vals[: vals.size // 2] = np.float32(np.nanmax(np.abs(x))) if x.size and np.isfinite(x).any() else 1.0
    amax = vals if n is None else vals.reshape(2 if pair else 1, n)
    x = x.copy()
    blocks = x.reshape(x.shape[0], x.shape[1] // 16, 16)  # (a view: writes go to x)
    if blocks.shape[0] * blocks.shape[1] >= 2:  # two different blocks
        zero, tiny = rng.choice(blocks.shape[0] * blocks.shape[1], size=2, replace=False)
        blocks[divmod(int(zero), blocks.shape[1])] = 0.0
        blocks[divmod(int(tiny), blocks.shape[1])] = DTYPE_TINY[dtype] * rng.choice([-1.0, 1.0], size=16)
    return amax, x


def _apply_te_variants(rng, space, dtype: str, o: dict, arrays: dict, x64: np.ndarray, tags: dict) -> None:
    """Add :func:`_te_variants`' options to ``o`` and the ``te_variant`` tag. A 4over6 case (from a child stream)
    takes, in 30% of the cases (50% with 16x16 blocks), values whose candidates tie (:func:`_four_over_six_ties`, tag
    ``values`` "fo6_ties"), and in 20% of the cases that are not row-scaled and whose space allows a supplied amax, a
    supplied amax of 0, +Inf or NaN with a zero and a tiny block (:func:`_special_amax`, tag ``amax`` "special");
    where neither was drawn, a case that can hold them takes golden vector 16's tiles (:func:`_tree_order_values`, tag
    ``values`` "fo6_tree"). Then, on those values, a row-scaled case (from its own child stream, spawned first) takes,
    in 25% of the cases, a NaN at a random element where the space allows specials (tag ``row_nan`` "yes": the
    NaN-ignoring amax of its row and column), and supplies one amax per plane row where _amax_supply drew a supplied
    amax, and in 40% of the others its space allowing (tag ``amax`` "rows"): ``amax`` for the rowwise plane,
    ``col_amax`` for the columnwise plane (:func:`_col_amax_supply`)."""
    v = _te_variants(rng, space, dtype, o)
    o.update(v)
    tags["te_variant"] = te_variant_tag(o)
    sub = rng.spawn(1)[0] if v.get("row_scaled") else None  # (spawned before the 4over6 streams, as it always was)
    if v.get("four_over_six"):
        extra = rng.spawn(1)[0]
        # (a case with a special amax already, _apply_te_special_amax's, keeps its zero and tiny blocks: no ties)
        ties = extra.random() < (0.5 if list(o["block"]) == [16, 16] else 0.3) and tags.get("amax") != "special"
        special = extra.random() < 0.2 and not v.get("row_scaled") and _amax_may_be_supplied(space)
        if ties:
            x64 = _four_over_six_ties(extra, *x64.shape, o["block"])
            tags["values"] = "fo6_ties"
        if special:
            arrays["amax"], x64 = _special_amax(extra, arrays, x64, dtype)
            tags["amax"] = "special"
        if ties or special:
            arrays["x"] = to_dtype(x64, dtype)
        elif _tree_order_case(o, dtype, arrays, x64):
            tree = _tree_order_values(rng.spawn(1)[0], *x64.shape, o["four_over_six"])
            if tree is not None:
                x64 = tree
                arrays["x"] = to_dtype(tree, dtype)
                tags["values"] = "fo6_tree"
    if sub is not None:
        # SPEC 5.7's NaN-ignoring amax of a row / column that has a NaN (where the space takes NaN inputs)
        if sub.random() < 0.25 and x64.size > 1 and space.get("specials", True):
            x64 = x64.copy()
            x64.flat[int(sub.integers(x64.size))] = np.nan
            arrays["x"] = to_dtype(x64, dtype)
            tags["row_nan"] = "yes"
        if "amax" in arrays or (_amax_may_be_supplied(space) and sub.random() < 0.4):  # (40% beside _amax_supply's 15%)
            rows = _row_amax_supply(sub, x64)
            if o["rowwise"]:
                arrays["amax"] = rows
            else:
                arrays.pop("amax", None)
            if o["columnwise"]:
                arrays["col_amax"] = _col_amax_supply(sub, x64, arrays.get("splits"))
            tags["amax"] = "rows"


def _tree_order_case(o: dict, dtype: str, arrays: dict, x64: np.ndarray) -> bool:
    """Whether a 4over6 case can hold :func:`_tree_order_values`: one tensor (no groups) of bf16 or fp32 at least
    32 x 32, 16x16 blocks, the input-domain error with G = 448, its amax computed."""
    return ("splits" not in arrays and "amax" not in arrays and dtype in ("bfloat16", "float32")
            and list(o["block"]) == [16, 16] and not o.get("four_over_six_fast_math")
            and o.get("global_scale_max", 448) == 448 and min(x64.shape) >= 32)


def _tree_order_values(rng, m: int, k: int, mode: str) -> np.ndarray | None:
    """Values whose 16x16 4over6 choice only SPEC 5.6's tree of the tile's row errors makes (every other sum order
    of ``oracle.vectors.OTHER_TILE_SUM_ORDERS`` chooses the other candidate): golden vector 16's construction
    (``oracle.vectors.tree_order_tiles``, a search over random rows) for the tile of rows 0-15, columns 0-15 (the
    rowwise plane) and, transposed, for the tile of rows 0-15, columns 16-31 (the columnwise plane's tile of plane
    rows 16-31); every other value in [-3, 3], one 6 (the amax the tiles are built for), all times 2^j, j in
    [-4, 4] (the choice scales with them). float64 [m, k]; None where the search finds no such tiles (about 1 draw in
    20 under MSE, 1 in 5 under MAE: the case keeps its values)."""
    from oracle.vectors import tree_order_tiles

    try:
        for_rows, for_cols = (t.astype(np.float64) for t in tree_order_tiles(rng, 2, mode))
    except RuntimeError:
        return None
    x = np.clip(rng.standard_normal((m, k)), -3.0, 3.0)
    x[:16, :16], x[:16, 16:32] = for_rows, for_cols.T
    x[m - 1, k - 1] = 6.0
    return x * 2.0 ** int(rng.integers(-4, 5))


def _amax_may_be_supplied(space) -> bool:
    """Whether a backend's space lets a case supply its amax (``amax`` absent, or naming "one" or "pair")."""
    return space.get("amax") is None or any(m in space["amax"] for m in ("one", "pair"))


def _apply_te_special_amax(rng, space, dtype: str, o: dict, arrays: dict, x64: np.ndarray,
                           tags: dict) -> np.ndarray:
    """In 8% of the rule te / te_fused_rht cases whose space allows a supplied amax, one of 0, +Inf or NaN with a zero
    and a tiny block (:func:`_special_amax`, tag ``amax`` "special"): the S_enc of SPEC 5.1 and 5.3 at A = 0, Inf and
    NaN, which a computed amax never reaches with NaN (a supplied one is 4.3's only way in). Drawn before TE's
    variants, from a child stream, on the case's own options only (so a case draws the same here under any variant
    space); a variant that supplies its own amax later (row scaling, 4over6's) replaces it. Returns the values of x."""
    if not _amax_may_be_supplied(space) or o["rule"] not in ("te", "te_fused_rht"):
        return x64
    extra = rng.spawn(1)[0]
    if extra.random() < 0.08:
        arrays["amax"], x64 = _special_amax(extra, arrays, x64, dtype)
        arrays["x"] = to_dtype(x64, dtype)
        tags["amax"] = "special"
    return x64


def _quantize_kernel(rng, space, dtype: str, o: dict) -> str | None:
    """The quantize kernel a device backend is made to run (option and tag ``quantize_kernel``; drawn only where the
    backend's space names the kernels): "general" forces the general kernels onto inputs the fast bf16 kernels
    normally take (bf16, 1x16 blocks, either rounding, no RHT or its default sign mask), "auto" leaves the choice to
    the device. None for other inputs and for 4over6 (its own kernel, SPEC 5.6). Drawn last, so a case's other draws
    do not depend on it."""
    fast_input = (dtype == "bfloat16" and list(o["block"]) == [1, 16]
                  and (not o["rht"] or o["rht_signs"] == DEFAULT_RHT_SIGNS) and not o.get("four_over_six"))
    if "quantize_kernel" not in space or not fast_input:
        return None
    return pick(rng, space, "quantize_kernel", ["auto", "general"])


def gen_quantize(rng, space) -> tuple[dict, dict, dict]:
    """``oracle.quantize`` inputs: x [M, K] (f32/f16/bf16) and every option of SPEC 4-10."""
    dtype = pick(rng, space, "dtype", ["bfloat16", "float32", "float16"], [0.5, 0.3, 0.2])
    m, k = _size(rng, space)
    v, kind = gen_values(rng, m, k, dtype, specials=bool(space.get("specials", True)))
    o = _quant_options(rng, space, dtype)
    arrays = {"x": to_dtype(v, dtype)}
    amax, mode = _amax_supply(rng, space, v, None)
    if amax is not None:
        arrays["amax"] = amax
    tags = _tags_quant(o, dtype, kind, m)
    tags["amax"] = mode
    v = _apply_te_special_amax(rng, space, dtype, o, arrays, v, tags)
    _apply_te_variants(rng, space, dtype, o, arrays, v, tags)
    if space.get("rht_plain") and o["rht"]:  # (no draw: the case's other draws stay as they are)
        arrays["x"] = plain_rht_blocks(arrays["x"])
    qk = _quantize_kernel(rng, space, dtype, o)
    if qk is not None:
        o["quantize_kernel"] = tags["quantize_kernel"] = qk
    tags["specials"] = _has_specials(arrays["x"].astype(np.float32))  # (x in its dtype: an fp16 overflow is an Inf)
    return arrays, o, tags


#: plain_rht_blocks' window: every nonzero magnitude of a block within 2^-10 of its largest (SPEC 7.4 allows 12
#: exponents; bf16's rounding may move one value by one), magnitudes in [2^-90, 2^110] (7.4: exponents 27..249)
_PLAIN_SPAN, _PLAIN_LO, _PLAIN_HI = 2.0**-10, 2.0**-90, 2.0**110


def plain_rht_blocks(x: np.ndarray) -> np.ndarray:
    """A bf16 ``[M, K]`` x made an input whose every columnwise 16-block (16 consecutive rows of one column) is plain
    (SPEC 7.4), M a positive multiple of 16: the first M // 16 * 16 rows (x repeated up to 16 rows when shorter), each
    block's largest magnitude clipped into [2^-90, 2^110] (the block scaled by a power of two), every other element
    (zeros included) at least 2^-10 of it with its sign kept, and an all-zero block made ones. Finite input only."""
    m, k = x.shape
    v = np.asarray(x, np.float64)
    v = np.concatenate([v] * -(-16 // m))[:16] if m < 16 else v[: m // 16 * 16]
    b = v.reshape(-1, 16, k)
    mag = np.abs(b)
    top = mag.max(axis=1, keepdims=True)
    b = np.where(top == 0, 1.0, b)
    top = np.where(top == 0, 1.0, top)
    scale = np.exp2(np.clip(np.floor(np.log2(top)), np.log2(_PLAIN_LO), np.log2(_PLAIN_HI)) - np.floor(np.log2(top)))
    b, top = b * scale, top * scale
    floor = top * _PLAIN_SPAN
    sign = np.where(np.signbit(b), -1.0, 1.0)
    b = np.where(np.abs(b) < floor, sign * floor, b)
    return to_dtype(b.reshape(-1, k), "bfloat16")


def gen_group_quantize(rng, space) -> tuple[dict, dict, dict]:
    """``oracle.group_quantize`` inputs: x [T, K], splits [E] (1..128 groups, zeros, giant, unaligned)."""
    dtype = pick(rng, space, "dtype", ["bfloat16", "float32", "float16"], [0.5, 0.3, 0.2])
    e = int(rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 128, int(rng.integers(1, 129))]))
    t, k = _size(rng, space)
    v, kind = gen_values(rng, t, k, dtype, specials=bool(space.get("specials", True)))
    splits, skind = gen_splits(rng, t, e)
    o = _quant_options(rng, space, dtype)
    if space.get("loose_splits") and rng.random() < 0.15:  # a device backend: SPEC 9.4's cut (reference: cut_splits)
        splits, skind = _loosen_splits(rng, splits, t)
        o["splits_rule"] = "cut"
    arrays = {"x": to_dtype(v, dtype), "splits": splits}
    amax, mode = _amax_supply(rng, space, v, e)
    if amax is not None:
        arrays["amax"] = amax
    tags = _tags_quant(o, dtype, kind, t)
    tags.update(splits=skind, groups="1" if e == 1 else ("2-16" if e <= 16 else "17-128"), amax=mode)
    v = _apply_te_special_amax(rng, space, dtype, o, arrays, v, tags)
    _apply_te_variants(rng, space, dtype, o, arrays, v, tags)
    qk = _quantize_kernel(rng, space, dtype, o)
    if qk is not None:
        o["quantize_kernel"] = tags["quantize_kernel"] = qk
    tags["specials"] = _has_specials(arrays["x"].astype(np.float32))  # (x in its dtype: an fp16 overflow is an Inf)
    return arrays, o, tags


def gen_codec(rng, space) -> tuple[dict, dict, dict]:
    """1-D float32 values around a codec's grid: ties, neighbours of ties, zeros, subnormals, huge, specials."""
    with np.errstate(all="ignore"):
        return _gen_codec(rng, space)


def _gen_codec(rng, space) -> tuple[dict, dict, dict]:
    fmt = space.get("format", "e2m1")
    n = int(rng.integers(1, 4097))
    kind = str(rng.choice(["grid", "ties", "random_bits", "wide"]))
    if fmt == "e2m1":
        grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], float)
        scale = 1.0
    elif fmt == "e4m3":
        b = np.arange(0x7F)
        grid = np.where(b >> 3 == 0, (b & 7) * 2.0**-9, (1 + (b & 7) / 8) * 2.0 ** ((b >> 3) - 7.0))
        scale = 1.0
    else:
        grid = (np.arange(0, 0x7F80, 7, dtype=np.uint32) << 16).view(np.float32).astype(float)
        scale = 1.0
    if kind == "grid":
        v = rng.choice(grid, n) * scale
    elif kind == "ties":
        mids = (grid[1:] + grid[:-1]) / 2
        v = rng.choice(np.concatenate([mids, [grid[-1] * 1.0625, grid[-1] * 2]]), n)
    elif kind == "wide":
        v = rng.standard_normal(n) * 2.0 ** rng.uniform(-160, 130, n)
    else:
        v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(float)
    f = v.astype(np.float32)
    if kind in ("grid", "ties"):
        nudge = rng.integers(-1, 2, n).astype(np.int64)  # -1 ulp, exact, +1 ulp
        bits = f.view(np.uint32).astype(np.int64) + nudge
        f = np.where(f == 0, f, bits.clip(0, 0x7F7FFFFF).astype(np.uint32).view(np.float32))
    f = f * rng.choice(np.array([-1, 1], np.float32), n)
    if rng.random() < 0.5:  # specials: each chosen element one of NaN, +-Inf, -0 (at least one of them)
        hit = rng.random(n) < 0.02
        hit[rng.integers(n)] = True
        f[hit] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), size=int(hit.sum()))
    return {"x": f.astype(np.float32)}, {}, {"values": kind}


def gen_rht(rng, space) -> tuple[dict, dict, dict]:
    """bf16 blocks [n, 16] for the RHT: narrow exponent spans (the fp32 butterfly is exact) and wide ones."""
    n = int(rng.integers(1, 513))
    kind = str(rng.choice(["narrow", "narrow", "wide", "subnormal", "large", "zeros"]))
    mant = rng.uniform(1, 2, (n, 16)) * rng.choice([-1.0, 1.0], (n, 16))
    if kind == "narrow":
        e0 = rng.integers(-120, 110, (n, 1))
        v = mant * 2.0 ** (e0 + rng.integers(0, 13, (n, 16)))
    elif kind == "wide":
        v = mant * 2.0 ** rng.integers(-40, 40, (n, 16))
    elif kind == "subnormal":
        v = mant * 2.0 ** rng.integers(-133, -118, (n, 16))
    elif kind == "large":
        v = mant * 2.0 ** rng.integers(110, 124, (n, 16))
    else:
        v = np.zeros((n, 16)) * rng.choice([-1.0, 1.0], (n, 16))
    v[rng.random((n, 16)) < 0.1] = 0.0
    signs, _ = draw_rht_signs(rng, space, (0.5, 0.5))
    return {"x": to_dtype(v, "bfloat16")}, {"rht_signs": signs}, {"values": kind}


def gen_gemm(rng, space) -> tuple[dict, dict, dict]:
    """GEMM operands a [M, K], b [N, K] (quantized by the oracle), optional bias / accumulate / alpha."""
    small = bool(space.get("small", False))
    mmax, kmax = (6, 128) if small else (48, 1024)
    m, n = int(rng.integers(0, mmax + 1)), int(rng.integers(1, mmax + 1))
    k = gen_k(rng, kmax)
    dtype = pick(rng, space, "dtype", ["float32", "bfloat16"])
    specials = bool(space.get("specials", not small))
    kinds = ["normal", "heavy", "ties", "integers", "subnormal", "constant", "zeros"]
    kind = str(rng.choice(kinds, p=[0.3, 0.15, 0.15, 0.15, 0.1, 0.1, 0.05]))
    a, _ = gen_values(rng, m, k, dtype, kind, specials=specials)
    b, _ = gen_values(rng, n, k, dtype, kind, specials=specials)
    rule = pick(rng, space, "rule", ["te", "te_fused_rht", "torchao", "torchao_noscale"], [0.5, 0.1, 0.25, 0.15])
    out_dtype = pick(rng, space, "out_dtype", ["bfloat16", "float32"])
    arrays = {"a": to_dtype(a, dtype), "b": to_dtype(b, dtype)}
    if rng.random() < 0.3:
        arrays["bias"] = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
    bias_dtype = "none"
    if "bias" in arrays:  # oracle.gemm takes a float32 or bfloat16 bias (SPEC 12.2: widened exactly); the dtype comes
        # from a child stream, so that the case's other draws do not depend on it
        bias_dtype = pick(rng.spawn(1)[0], space, "bias_dtype", ["float32", "bfloat16"], [0.7, 0.3])
        arrays["bias"] = arrays["bias"].astype(ml_dtypes.bfloat16 if bias_dtype == "bfloat16" else np.float32)
    if rng.random() < 0.3:
        arrays["c"] = (rng.standard_normal((m, n)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
    alpha_mode = str(rng.choice(["auto", "auto", "auto", "huge", "tiny", "random"]))
    alpha = None
    if alpha_mode == "huge":
        alpha = float(np.float32(2.0 ** rng.integers(90, 128)))
    elif alpha_mode == "tiny":
        alpha = float(np.float32(2.0 ** rng.integers(-149, -110) * rng.uniform(1, 2)))
    elif alpha_mode == "random":
        alpha = float(np.float32(rng.standard_normal() * 10.0 ** rng.uniform(-5, 5)))
    o = dict(rule=rule, out_dtype=out_dtype, alpha=alpha)
    o.update(gen_operand_quant(rng, space, rule=rule, b_blocks=((1, 16), (16, 16))))
    tags = dict(rule=rule, out_dtype=out_dtype, alpha=alpha_mode, values=kind, dtype=dtype, bias_dtype=bias_dtype,
                bias_c="+".join([x for x in ("bias", "c") if x in arrays]) or "none",
                operands=operand_quant_tag(o, (1, 16)))
    return arrays, o, tags


def gen_layout(rng, space) -> tuple[dict, dict, dict]:
    """Random compact scale bytes [R, C] and group splits for the swizzle / offsets checks (SPEC 8, 9)."""
    r = gen_rows(rng, 700)
    c = int(rng.integers(1, 41))
    scales = rng.integers(1, 256, (r, c), dtype=np.uint8)  # nonzero so that padding errors show
    e = int(rng.integers(1, 129))
    t = gen_rows(rng, 5000)
    splits, kind = gen_splits(rng, t, e)
    k = gen_k(rng, 4096)
    return {"scales": scales, "splits": splits}, {"k": k}, {"splits": kind, "rows": "edge" if r in EDGE_ROWS else "random"}


_DEQ_AMAX = {  # amax supplies of gen_dequantize (SPEC 11.2: any float32 >= 0, +Inf and NaN included)
    "normal": None, "zero": 0.0, "subnormal": 1e-40, "huge": 3.0e38, "inf": np.inf, "nan": np.nan,
}


def gen_dequantize(rng, space) -> tuple[dict, dict, dict]:
    """A stored plane of arbitrary bytes (SPEC 11.2): data u8 [R, C/2], compact scales u8 [R, C/16] (uniform bytes,
    NaN patterns included, or E4M3 subnormals and zeros only), amax f32 [1]; options: swizzled (the device reads the
    SPEC 8.2 layout) and the byte offset (a multiple of 8) of the data inside a larger buffer (views)."""
    r = gen_rows(rng, min(300, int(space.get("max_rows", 300))), int(space.get("min_rows", 0)))
    c = 16 * int(rng.integers(1, 33))
    data = rng.integers(0, 256, (r, c // 2), dtype=np.uint8)
    skind = pick(rng, space, "scales", ["uniform", "subnormal"], [0.75, 0.25])
    hi = 256 if skind == "uniform" else 8
    scales = rng.integers(0, hi, (r, c // 16), dtype=np.uint8)
    if skind == "subnormal":
        scales |= (rng.random(scales.shape) < 0.5).astype(np.uint8) << 7  # signed too
    akind = pick(rng, space, "amax", list(_DEQ_AMAX), [0.6, 0.08, 0.08, 0.08, 0.08, 0.08])
    a = _DEQ_AMAX[akind]
    amax = np.float32(np.exp(rng.uniform(-20, 20))) if a is None else np.float32(a)
    o = {"swizzled": bool(rng.random() < 0.5), "offset": int(rng.choice([0, 0, 0, 8, 24]))}
    # the block factor's rule (SPEC 11.1), drawn last so that the draws above do not depend on it
    o["rule"] = pick(rng, space, "rule", ["te", "torchao", "torchao_noscale"], [0.6, 0.25, 0.15])
    # a rule "te" plane's G (SPEC 11.1: fp32(1/(6G)); 256 for a 4over6 plane, SPEC 5.6), from the child stream so the
    # case's own draws stay as they were; the option only where it is not 448
    g = int(pick(rng.spawn(1)[0], space, "global_scale_max", [448, 256], [0.7, 0.3]))
    if o["rule"] == "te" and g != 448:
        o["global_scale_max"] = g
    tags = {"scales": skind, "amax": akind, "swizzled": str(o["swizzled"]), "rule": o["rule"],
            "rows": "edge" if r in EDGE_ROWS else "random", "global_scale_max": str(o.get("global_scale_max", 448))}
    return {"data": data, "scales": scales, "amax": np.asarray([amax], np.float32)}, o, tags


def disagreeing_splits(rng: np.random.Generator, s: np.ndarray) -> np.ndarray | None:
    """``s`` with 1 to all of one group's rows moved to another group (the same total); None when every group is
    empty. Moved rows of any count, so a columnwise plane's groups after them need not start on a whole row."""
    donors = np.flatnonzero(s > 0)
    if donors.size == 0 or s.size < 2:
        return None
    g1 = int(rng.choice(donors))
    g2 = int(rng.choice([g for g in range(s.size) if g != g1]))
    r = int(rng.integers(1, int(s[g1]) + 1))
    out = s.astype(np.int64).copy()
    out[g1] -= r
    out[g2] += r
    return out


#: The device's grouped-GEMM algorithms (``device.testing.force_plan(algorithm=...)``; docs/design.md). Fast mode
#: (every one bit-exact with the oracle's tensor-core model, SPEC 12.6): the fused-decode kernel in 64 x 256 and
#: 128 x 256 tiles and in 2-CTA clusters of 256 x 256, fp16 copies of both operands then CUTLASS's grouped GEMM, and
#: the swapped kernel in 64 x 256 and 256 x 128 tiles (weights as wgmma's register operand; fprop / dgrad). Exact mode (the sequential model, SPEC
#: 12.2): the fused kernel with exact per-16-block partials, fp16 copies of both operands, and an fp16 copy of A with B
#: decoded in the K loop (fprop / dgrad). Listed in the generator's draw order.
FAST_ALGORITHMS = ("fused_64x256", "fused_128x256", "fused_pair_256x256", "copies_cutlass", "swapped_64x256",
                   "swapped_256x128")
EXACT_ALGORITHMS = ("exact_copies", "exact_fused", "exact_hybrid")
#: the fused fast kernels: both epilogues ("staged"; "tma_store" for bf16 output)
FUSED_FAST = FAST_ALGORITHMS[:3]


@dataclass(frozen=True)
class GemmShape:
    """What decides which algorithms, loaders and epilogues a grouped-GEMM case can force: the kind, the contraction
    length (fprop K, dgrad N, wgrad the tokens), the output's rows and columns (fprop [T, N], dgrad [T, K], wgrad E
    planes [N, K] as E N rows), its dtype, and whether there is a bias or a C to accumulate into."""

    kind: str
    contraction: int
    out_rows: int
    out_cols: int
    out_dtype: str
    bias: bool
    c: bool

    @classmethod
    def of(cls, kind: str, out_dtype: str, arrays: dict) -> GemmShape:
        """The shape of a grouped-GEMM case's arrays x [T, K], w [E N, K], splits [E] (and bias, c)."""
        (t, k), e = arrays["x"].shape, arrays["splits"].size
        n = arrays["w"].shape[0] // e
        contraction, rows, cols = {"fprop": (k, t, n), "dgrad": (n, t, k), "wgrad": (t, e * n, k)}[kind]
        return cls(kind, contraction, rows, cols, out_dtype, "bias" in arrays, "c" in arrays)

    def rows_aligned(self) -> bool:
        """Whether the output's rows are 16 bytes apart (a whole number of 16-byte units per row)."""
        return self.out_cols % (8 if self.out_dtype == "bfloat16" else 4) == 0


def algorithm_runs(name: str, g: GemmShape) -> bool:
    """Whether the device can run algorithm ``name`` ("auto": always) on a case of shape ``g``: the swapped and hybrid
    kernels fprop and dgrad only (swapped_256x128 wgrad too), the hybrid one with a contraction % 32 == 0 (its B rows
    read as TMA boxes of 16-byte multiples; device.group_quantize's planes are 16-byte aligned), the CUTLASS copies
    with 16-byte aligned output rows, and with a bias for bf16 output only."""
    if name in ("swapped_64x256", "exact_hybrid") and g.kind == "wgrad":
        return False
    if name == "exact_hybrid":
        return g.contraction % 32 == 0
    if name == "copies_cutlass":
        return (not g.bias or g.out_dtype == "bfloat16") and g.rows_aligned()
    return name == "auto" or name in FAST_ALGORITHMS or name in EXACT_ALGORITHMS


def loaders_of(name: str, g: GemmShape) -> tuple[str, ...]:
    """The loaders a case can force on algorithm ``name``: the swapped kernels' cp.async loader, and their TMA loader
    with a contraction % 32 == 0 and at least one token (its tensor maps need a row of each plane) for fprop, and for
    swapped_256x128's dgrad (swapped_64x256's dgrad takes cp.async), and with at least one token for swapped_256x128's
    wgrad; both loaders of the exact kernel over fp16 copies.
    None for the algorithms with one loader, nor for "auto" (the algorithm is not known here)."""
    if name in ("swapped_64x256", "swapped_256x128"):
        if g.kind == "wgrad":  # (swapped_256x128: one token map per group; the weight rows by cp.async)
            return ("cp_async", "tma") if g.contraction > 0 else ("cp_async",)
        kind_ok = g.kind == "fprop" or (g.kind == "dgrad" and name == "swapped_256x128")
        tma = kind_ok and g.contraction % 32 == 0 and g.out_rows > 0
        return ("cp_async", "tma") if tma else ("cp_async",)
    if name == "exact_copies":
        return ("cp_async", "tma")
    return ()


def epilogues_of(name: str, g: GemmShape) -> tuple[str, ...]:
    """The epilogues a case can force on algorithm ``name``: "staged" on the fused fast kernels; "tma_store" for fp32
    wgrad without C or bias on fused_128x256 and exact_copies, and for bf16 output without C on the fused fast kernels
    (both with 16-byte aligned output rows and at least one row: the output's TMA tensor map)."""
    out = ["staged"] if name in FUSED_FAST else []
    if g.c or not g.rows_aligned() or g.out_rows == 0:
        return tuple(out)
    if g.out_dtype == "float32" and g.kind == "wgrad" and not g.bias and name in ("fused_128x256", "exact_copies"):
        out.append("tma_store")
    elif g.out_dtype == "bfloat16" and name in FUSED_FAST:
        out.append("tma_store")
    return tuple(out)


def fit_plan(options: dict, g: GemmShape) -> dict:
    """The plan options of ``options`` (algorithm, loader, epilogue) that no longer apply to shape ``g`` put back to
    their defaults ("auto", None, None), so that a shrunk case does not ask the device for a plan it must refuse."""
    out = {}
    algorithm = options.get("algorithm", "auto")
    if not algorithm_runs(algorithm, g):
        algorithm = out["algorithm"] = "auto"
    if options.get("loader") is not None and options["loader"] not in loaders_of(algorithm, g):
        out["loader"] = None
    if options.get("epilogue") is not None and options["epilogue"] not in epilogues_of(algorithm, g):
        out["epilogue"] = None
    return out


def _pick_valid(rng, space: dict, name: str, choices: list, p=None):
    """One of ``choices`` (weights ``p``, else uniform) restricted to ``space[name]`` when the backend restricts it,
    never outside ``choices`` (the first choice when the restriction allows none). Exactly one ``rng.random()`` is
    drawn whatever the restriction, so the draws after it stay in place; unrestricted, the value is the one
    :func:`pick` would draw (``rng.choice`` with ``p``)."""
    u = rng.random()
    w = np.asarray(p if p is not None else np.ones(len(choices)), float)
    if name in space:
        allowed = np.array([norm_option(c) in [norm_option(a) for a in space[name]] for c in choices])
        if not allowed.any():
            return choices[0]
        w = np.where(allowed, w, 0.0)
        if w.sum() == 0:  # (choices of weight 0 that the backend allows are drawn uniformly)
            w = allowed.astype(float)
    cdf = np.cumsum(w / w.sum())
    cdf /= cdf[-1]
    return choices[int(cdf.searchsorted(u, side="right"))]


#: the grid caps drawn (0: one CTA per SM), as one uniform draw of this list
NUM_SMS_DRAWS = (0, 0, 0, 1, 2, 3, 5, 8)


def _draw_algorithms(rng, space: dict) -> tuple[str, int, str]:
    """The first part of a grouped-GEMM case's device plan, from the case's stream ``rng``: a fast algorithm, the grid
    (0 = one CTA per SM, else the persistent grid capped at that many CTAs by ``device.set_num_sms``: every CTA walks
    many tiles, and the last round's tiles run as half tiles) and an exact algorithm, both algorithms whatever the
    case's mode, so that the draws after them do not depend on it. Every algorithm of a mode gives the same bits (SPEC
    12.6 / 12.2), so each case checks one of them; "auto" leaves the choice to the device's plan (by the sizes)."""
    fast = _pick_valid(rng, space, "algorithm", ["auto", *FAST_ALGORITHMS],
                       [0.3, 0.1, 0.1, 0.1, 0.14, 0.13, 0.13])
    j = int(rng.integers(len(NUM_SMS_DRAWS)))  # (restricted: an allowed value picked by the same draw)
    allowed = [v for v in NUM_SMS_DRAWS if v in space.get("num_sms", NUM_SMS_DRAWS)] or [0]
    num_sms = NUM_SMS_DRAWS[j] if NUM_SMS_DRAWS[j] in allowed else allowed[j % len(allowed)]
    exact = _pick_valid(rng, space, "algorithm", ["auto", *EXACT_ALGORITHMS], [0.6, 0.4, 0.0, 0.0])
    return fast, num_sms, exact


def _draw_plan(rng, extra, space: dict, g: GemmShape, drawn: tuple[str, int, str]) -> dict:
    """The device plan of a grouped-GEMM case of shape ``g`` (options ``algorithm``, ``loader``, ``epilogue``,
    ``num_sms``) from the draws of :func:`_draw_algorithms`: a further split of the exact "auto" draws from ``extra``
    (its last draw), the mode's algorithm ("auto" where it cannot run), then from ``rng`` (its last draws) the loader
    and the epilogue where the algorithm has a choice (None: the plan's own)."""
    fast, num_sms, exact = drawn
    if exact == "auto" and "algorithm" not in space:  # a quarter each of these force the fused and the hybrid kernel
        exact = pick(extra, {}, "algorithm", ["auto", "exact_fused", "exact_hybrid"], [0.5, 0.25, 0.25])
    if space.get("mode") == "sm100":  # the exact draw that forces exact_fused (~15%) forces sm100_simt; each its own
        # loader and epilogue ("auto": sm100_copies)
        return dict(algorithm="sm100_simt" if exact == "exact_fused" else "auto", loader=None, epilogue=None,
                    num_sms=num_sms)
    algorithm = exact if space.get("mode") == "exact" else fast
    if not algorithm_runs(algorithm, g):
        algorithm = "auto"
    loaders, epilogues = loaders_of(algorithm, g), epilogues_of(algorithm, g)
    loader = _pick_valid(rng, space, "loader", [None, *loaders]) if loaders else None
    epilogue = None
    if epilogues:
        epilogue = _pick_valid(rng, space, "epilogue", [None, *epilogues],
                               [0.5] + [0.5 / len(epilogues)] * len(epilogues))
    return dict(algorithm=algorithm, loader=loader, epilogue=epilogue, num_sms=num_sms)


def plan_tags(o: dict) -> dict:
    """The report's tags of a grouped-GEMM case's plan options."""
    n = int(o.get("num_sms", 0))
    return dict(algorithm=o.get("algorithm", "auto"), loader=o.get("loader") or "default",
                epilogue=o.get("epilogue") or "default",
                grid=f"{n} SM{'s' if n > 1 else ''}" if n else "one CTA per SM")


def gen_operand_quant(rng, space, rule: str | None = None, b_blocks: tuple = ()) -> dict:
    """How GEMM operands a and b are quantized (drawn late in a case, so that the draws before it do not depend on it); half
    the cases keep the defaults. Options ``quant_a`` / ``quant_b``: dict(rule, rounding, seed, offset): the given
    scale rule, else one of the TE family (SPEC 5.2 / 5.3; gen_grouped_gemm may then put both under one torchao rule),
    and round-to-nearest or stochastic rounding (SPEC 10) with its own seed and counter offset. ``b_block``: b's scale blocks, one of
    ``b_blocks`` (the default first; none: not drawn). Read back by ``conformance.ops.operand_quant_kwargs``."""
    out = {f"quant_{name}": dict(PLAIN_QUANT, rule=rule or "te") for name in ("a", "b")}
    if b_blocks:
        out["b_block"] = list(b_blocks[0])
    if pick(rng, space, "operand_quant", ["default", "varied"]) == "default":
        return out
    for name in ("a", "b"):
        r = rule or pick(rng, space, "operand_rule", ["te", "te_fused_rht"], p=[0.7, 0.3])
        rounding = pick(rng, space, "operand_rounding", ["rn", "sr"])
        sr = rounding == "sr"
        out[f"quant_{name}"] = dict(
            rule=r, rounding=rounding,
            seed=int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2)) if sr else 0,
            offset=int(rng.choice([0, int(rng.integers(0, 2**32)), 2**32 - 1])) if sr else 0)
    if b_blocks:
        out["b_block"] = list(pick(rng, space, "b_block", list(b_blocks)))
    return out


def operand_quant_tag(o: dict, default_block=(16, 16)) -> str:
    """A short tag of the operands' quantization: "default" (the case's rule or TE, round-to-nearest, b's default
    blocks), else e.g. "a:sr b:sr+te_fused_rht b:1x16"."""
    parts = []
    for name in ("a", "b"):
        q = o.get(f"quant_{name}", {})
        bits = [x for x in (q.get("rounding") == "sr" and "sr",
                            q.get("rule", "te") not in ("te", o.get("rule", "te")) and q.get("rule")) if x]
        parts += [f"{name}:{'+'.join(bits)}"] if bits else []
    block = list(o.get("b_block", default_block))
    if block != list(default_block):
        parts.append(f"b:{block[0]}x{block[1]}")
    return " ".join(parts) or "default"


#: Long contractions (LONG_SHARE of the grouped-GEMM cases): fprop's K or dgrad's N (weight rows per group) from
#: 1024 to 8192, or wgrad with one group of 2048+ tokens. Half of them have few rows (tag ``contraction=long``: 1 to
#: 3 groups, 16 or 32 weight columns, at most LONG_MACS multiply-adds and LONG_ELEMS weight elements), half are sized
#: so that the device's size rules pick its 2-CTA pair tiles by themselves (``contraction=long+rows``: at least
#: PAIR_ROWS output rows and PAIR_CONTRACTION contraction per group, the device plan's tile rule; fprop and dgrad
#: with a contraction of 2048 take swapped_256x128 instead; one 16-column block on the other side, at most PAIR_MACS
#: multiply-adds). So such a case costs about what an average one does.
LONG_SHARE = 0.04
LONG_K = (1024, 1040, 2048, 4096, 4112, 8192)
PAIR_K = (1024, 1040, 2048)
LONG_GROUP = (2048, 2049, 2063, 4095, 4096)
LONG_MACS = 1 << 21
LONG_ELEMS = 1 << 18
PAIR_MACS = 1 << 23
PAIR_ROWS, PAIR_CONTRACTION = 256, 1024


def _long_length(rng, edges: tuple, lo: int, hi: int, step: int) -> int:
    """A long contraction: one of ``edges`` (half the draws), else a multiple of ``step`` in [lo, hi]."""
    if rng.random() < 0.5:
        return int(rng.choice(edges))
    return step * int(rng.integers(lo // step, hi // step + 1))


def _long_fprop_dgrad(rng, space, kind: str, pair: bool) -> tuple[int, int, int, int]:
    """``(E, T, K, N)``: a contraction (fprop's K, dgrad's N) of 1024..8192 (pair sizes: 1024..2048 over PAIR_ROWS+
    tokens per group), ``max_k`` capping it; the weights' other dimension 16 or 32 (fprop's N a quarter of the time
    any size up to it)."""
    max_len = int(space.get("max_k", 8192)) // 16 * 16
    if pair:
        length, width = min(_long_length(rng, PAIR_K, 1024, 2048, 16), max_len), 16
        t_max = max(PAIR_ROWS, PAIR_MACS // (length * width))
        e = min(int(rng.integers(1, 3)), t_max // PAIR_ROWS)
        t = int(rng.integers(PAIR_ROWS * e, t_max + 1))
    else:
        length = min(_long_length(rng, LONG_K, 1024, 8192, 16), max_len)
        e = min(int(rng.integers(1, 4)), max(1, LONG_ELEMS // (16 * length)))
        width = 16 * int(rng.integers(1, min(2, max(1, LONG_ELEMS // (16 * e * length))) + 1))
        t = gen_rows(rng, max(1, LONG_MACS // (length * width)))
    if kind == "dgrad":
        return e, t, width, length
    n = int(rng.integers(1, width + 1)) if rng.random() < 0.25 else width
    return e, t, length, n


def _long_wgrad(rng, space, pair: bool) -> tuple[int, int, int, int, int]:
    """``(E, T, K, N, big)``: ``big`` tokens (2048..4096, ``max_rows`` capping it) for one group on top of up to 256
    split among the E groups; K, N 16..64 with N K T <= 2 LONG_MACS (pair sizes: 1 or 2 groups, N = PAIR_ROWS,
    K = 16, 2048..2304 + up to 256 tokens)."""
    if pair:
        e, big, k, n = int(rng.integers(1, 3)), int(rng.integers(2048, 2305)), 16, PAIR_ROWS
    else:
        e, big = int(rng.integers(1, 4)), _long_length(rng, LONG_GROUP, 2048, 4096, 1)
        k, n = 16 * int(rng.integers(1, 5)), 16 * int(rng.integers(1, 5))
    big = min(big, int(space.get("max_rows", big)))
    t = big + gen_rows(rng, 256)
    while not pair and k * n * t > 2 * LONG_MACS and max(k, n) > 16:
        k, n = (k - 16, n) if k >= n else (k, n - 16)
    return e, t, k, n, big


def long_contraction_sizes(rng, space, kind: str) -> tuple[int, int, int, int, int, str]:
    """``(E, T, K, N, big, tag)`` of a long-contraction grouped GEMM (see LONG_SHARE): ``big`` > 0 (wgrad) is the
    long group's token count, added to one group of a split of the other ``T - big``; ``tag`` "long" or
    "long+rows" (the pair tiles' sizes)."""
    pair = bool(rng.random() < 0.5)
    tag = "long+rows" if pair else "long"
    if kind == "wgrad":
        return (*_long_wgrad(rng, space, pair), tag)
    return (*_long_fprop_dgrad(rng, space, kind, pair), 0, tag)


def gen_grouped_gemm(rng, space) -> tuple[dict, dict, dict]:
    """Grouped GEMM inputs (SPEC 12.5): x [T, K], w [E*N, K], dy [T, N] (bf16), splits, kind, bias / C, the operands'
    quantization and the device plan.

    Draw order: the case's stream ``rng`` and its child stream ``extra`` (``rng.spawn``) are each drawn in a fixed
    order, and the draws that depend on others come last in their stream, so that adding or changing one draw moves
    as few of a seed's other draws as possible. ``extra`` holds the long contractions, the bias dtype, wgrad's RHT sign
    mask, the operands' rule family and the split of the exact "auto" draws."""
    kind = pick(rng, space, "kind", ["fprop", "dgrad", "wgrad"])
    e = int(rng.choice([1, 2, 3, 4, 8, int(rng.integers(1, 17))]))
    if rng.random() < 0.05:  # many experts (E = 32 or 64), mostly empty or tiny groups at these T
        e = int(rng.choice([32, 64]))
    t = gen_rows(rng, int(space.get("max_rows", 600)))
    # mostly N, K <= 128; a quarter up to 512, so that wgrad outputs and N tiles reach the large kernels' second
    # 128-row halves (the fast mode's 2-CTA cluster tiles are 256 x 256)
    hi = 33 if rng.random() < 0.25 else 9
    k, n = 16 * int(rng.integers(1, hi)), 16 * int(rng.integers(1, hi))
    if kind == "fprop" and rng.random() < 0.25:  # fprop's N (weight rows per group, output columns) may be any size
        n = int(rng.integers(1, 16 * hi))
    extra = rng.spawn(1)[0]
    contraction = pick(extra, space, "contraction", ["normal", "long"], [1 - LONG_SHARE, LONG_SHARE])
    big = 0
    if contraction != "normal":
        e, t, k, n, big, contraction = long_contraction_sizes(extra, space, kind)
    splits, skind = gen_splits(rng, t - big, e)
    if big:  # (wgrad: the long group on top of the split)
        splits[int(extra.integers(e))] += big
    x, vkind = gen_values(rng, t, k, "bfloat16", specials=bool(space.get("specials", True)))
    # the weights: mostly plain normal values; a fifth any value kind (all-zero experts, ties, subnormals, near-max)
    # with NaN / Inf / -0 as for x, so the B operand's quantization and alpha meet the edge cases too
    wkind = "normal"
    if rng.random() < 0.2:
        w, wkind = gen_values(rng, e * n, k, "bfloat16", specials=bool(space.get("specials", True)))
    else:
        w, _ = gen_values(rng, e * n, k, "bfloat16", "normal", specials=False)
    dy, _ = gen_values(rng, t, n, "bfloat16", specials=bool(space.get("specials", True)))
    rht = bool(kind == "wgrad" and rng.random() < 0.5)
    # (wgrad: bf16 output in a quarter of the cases, never with C: accumulating means fp32, SPEC 12.5)
    out_dtype = pick(rng, space, "out_dtype", ["float32", "bfloat16"] if kind == "wgrad" else ["bfloat16", "float32"],
                     p=[0.75, 0.25] if kind == "wgrad" else None)
    arrays = {"x": to_dtype(x, "bfloat16"), "w": to_dtype(w, "bfloat16"), "dy": to_dtype(dy, "bfloat16"),
              "splits": splits}
    if kind != "wgrad" and rng.random() < 0.3:
        arrays["bias"] = (rng.standard_normal((e, n if kind == "fprop" else k)) * 10.0 ** rng.uniform(-2, 2)).astype(np.float32)
    bias_dtype = "none"
    if "bias" in arrays:  # device.grouped_gemm takes a float32 or bfloat16 bias (its reference: the exact widening)
        bias_dtype = pick(extra, space, "bias_dtype", ["float32", "bfloat16"], [0.7, 0.3])
        arrays["bias"] = arrays["bias"].astype(ml_dtypes.bfloat16 if bias_dtype == "bfloat16" else np.float32)
    if kind == "wgrad" and out_dtype == "float32" and rng.random() < 0.4:
        c = (rng.standard_normal((e, n, k)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
        c.flat[rng.integers(c.size, size=max(1, c.size // 50))] = -0.0
        arrays["c"] = c
    shape = GemmShape.of(kind, out_dtype, arrays)
    drawn = _draw_algorithms(rng, space)
    # wgrad's RHT (both operands, SPEC 7.2): the default sign mask, or a random one in a quarter of the cases
    signs, signs_kind = draw_rht_signs(extra, space, (0.75, 0.25)) if rht else (DEFAULT_RHT_SIGNS, "none")
    o = dict(kind=kind, out_dtype=out_dtype, rht=rht, rht_signs=signs)
    # SPEC 12.5: operand groups that disagree (the group sizes live on the device, so the device cannot raise): b's
    # groups (fprop / dgrad: W's, N rows each; wgrad: X's, split like dY) with rows moved between two groups, the
    # same total. Those two groups are NaN, the others as usual.
    agree = True
    if e >= 2 and pick(rng, space, "groups_agree", [True, False], p=[0.88, 0.12]) is False:
        b_splits = disagreeing_splits(rng, splits if kind == "wgrad" else np.full(e, n, np.int64))
        if b_splits is not None:
            o["b_splits"] = b_splits.tolist()
            agree = False
    # (b_block: W's scale blocks; TE quantizes weights in 16x16 blocks, SPEC 6.3)
    o.update(gen_operand_quant(rng, space, b_blocks=((16, 16), (1, 16)) if kind != "wgrad" else ()))
    # the scale rules (SPEC 12.1): both operands TE rules, as gen_operand_quant draws them, or both the same torchao
    # rule, whose NaN block scales make rows NaN (12.3)
    operand_rules = pick(extra, space, "operand_rules", ["te", "torchao", "torchao_noscale"], [0.7, 0.2, 0.1])
    if operand_rules != "te":
        for name in ("a", "b"):
            o[f"quant_{name}"] = dict(o[f"quant_{name}"], rule=operand_rules)
    o.update(_draw_plan(rng, extra, space, shape, drawn))
    tags = dict(kind=kind, out_dtype=out_dtype, rht=str(rht), rht_signs=signs_kind, splits=skind, values=vkind,
                contraction=contraction, bias_dtype=bias_dtype,
                groups_agree=str(agree), operands=operand_quant_tag(o), operand_rules=operand_rules,
                **plan_tags(o),
                n="multiple of 16" if n % 16 == 0 else "other",
                w_values=wkind, groups="1" if e == 1 else ("2-16" if e <= 16 else "32-64"),
                bias_c="+".join(x for x in ("bias", "c") if x in arrays) or "none")
    return arrays, o, tags


#: GroupedLinear's modes (SPEC 16.5) and the oracle's GEMM model of each
LAYER_MODELS = {"fast": "tensor_core", "exact": "sequential", "sm100": "sm100"}


def gen_grouped_linear(rng, space) -> tuple[dict, dict, dict]:
    """One step of the grouped linear layer (SPEC 16): x [T, K], w [E, N, K], dy [T, N] (bf16), splits, an optional
    bias [E, N] (the parameters' dtype) and fp32 main_grad [E, N, K]; the recipe (16.1), the layer's mode (16.5) and
    the device layer's settings: parameter dtype, fused wgrad accumulation, deferred wgrad, the weight-plane cache
    and its fp16 copy, x without a gradient, one or two steps over the same inputs (the second reads the cached
    weight planes where the cache is on and its ``is_first_microbatch`` is not True) with TE's
    ``is_first_microbatch`` per step, and host or device splits (device splits may not add
    up to T, SPEC 9.4, where the space allows ``loose_splits``).

    Draw order: the sizes and arrays on the case's stream, then the options in a fixed order; the loose splits and
    the main_grad values on the child stream ``extra``, so that they move no other draw."""
    e = int(rng.choice([1, 2, 3, 4, 8, int(rng.integers(1, 17))]))
    t = gen_rows(rng, int(space.get("max_rows", 300)))
    hi = 17 if rng.random() < 0.2 else 9  # N, K up to 128, a fifth up to 256
    k, n = 16 * int(rng.integers(1, hi)), 16 * int(rng.integers(1, hi))
    splits, skind = gen_splits(rng, t, e)
    specials = bool(space.get("specials", True))
    x, vkind = gen_values(rng, t, k, "bfloat16", specials=specials)
    w, wkind = gen_values(rng, e * n, k, "bfloat16", "normal" if rng.random() < 0.8 else None, specials=specials)
    dy, dykind = gen_values(rng, t, n, "bfloat16", specials=specials)
    mode = pick(rng, space, "layer_mode", list(LAYER_MODELS), [0.5, 0.3, 0.2])
    rule = pick(rng, space, "rule", ["te", "te_fused_rht", "torchao", "torchao_noscale"], [0.55, 0.15, 0.2, 0.1])
    weight_block = pick(rng, space, "b_block", [(16, 16), (1, 16)], [0.7, 0.3])
    rht = bool(pick(rng, space, "rht", [True, False], [0.7, 0.3]))
    signs, signs_kind = draw_rht_signs(rng, space, (0.75, 0.25))
    sr = pick(rng, space, "rounding", ["sr", "rn"], [0.7, 0.3]) == "sr"
    seed = int(rng.integers(0, 2**64, dtype=np.uint64))
    with_bias = bool(rng.random() < 0.5)
    params_dtype = pick(rng, space, "params_dtype", ["bfloat16", "float32"], [0.8, 0.2])
    fuse = bool(pick(rng, space, "main_grad", [False, True], [0.7, 0.3]))
    delay = bool(rng.random() < 0.2)
    x_grad = bool(rng.random() < 0.9)
    cache_f16 = bool(rng.random() < 0.7)
    reuse = bool(rng.random() < 0.85)
    steps = int(pick(rng, space, "steps", [1, 2], [0.75, 0.25]))
    first = [[None, True, False][int(rng.integers(3))] for _ in range(steps)]
    splits_on = "device" if rng.random() < 0.5 else "host"
    arrays = {"x": to_dtype(x, "bfloat16"), "w": to_dtype(w, "bfloat16").reshape(e, n, k),
              "dy": to_dtype(dy, "bfloat16"), "splits": splits}
    if with_bias:
        b = rng.standard_normal((e, n)) * 10.0 ** rng.uniform(-2, 2)
        arrays["bias"] = to_dtype(b, params_dtype)
    extra = rng.spawn(1)[0]
    # (the sign mask and the seed are drawn either way, so the draws after them do not depend on RHT / SR; a case
    # records them only where they act)
    o = dict(layer_mode=mode, rule=rule, weight_block=list(weight_block), rht_wgrad=rht,
             rht_signs=signs if rht else DEFAULT_RHT_SIGNS, sr_grad=sr, seed=seed if sr else 0,
             params_dtype=params_dtype, fuse_wgrad_accumulation=fuse, delay_wgrad_compute=delay, x_requires_grad=x_grad,
             cache_f16_weights=cache_f16, weight_plane_reuse=reuse, steps=steps, is_first_microbatch=first,
             splits_on=splits_on)
    if fuse:  # values and -0.0 entries (an empty expert keeps its slice bit for bit, SPEC 16.3)
        mg = (extra.standard_normal((e, n, k)) * 10.0 ** extra.uniform(-3, 3)).astype(np.float32)
        mg.flat[extra.integers(mg.size, size=max(1, mg.size // 50))] = -0.0
        arrays["main_grad"] = mg
    if space.get("loose_splits") and extra.random() < 0.1:  # device splits only (SPEC 9.4: the cut sizes)
        arrays["splits"], skind = _loosen_splits(extra, splits, t)
        o["splits_on"], o["splits_rule"] = "device", "cut"
    tags = dict(mode=mode, rule=rule, weight_block=f"{weight_block[0]}x{weight_block[1]}", rht=str(rht),
                rht_signs=signs_kind if rht else "none", rounding="sr" if sr else "rn", splits=skind, values=vkind,
                w_values=wkind, dy_values=dykind, bias=str(with_bias), params_dtype=params_dtype,
                main_grad=str(fuse), delay_wgrad=str(delay), x_grad=str(x_grad), steps=str(steps),
                groups="1" if e == 1 else "2-16")
    return arrays, o, tags


#: How gen_mma draws the E2M1 codes and the scale bytes of its raw planes (its tags ``codes`` and ``scales``).
MMA_CODES = ("uniform", "sparse", "cancel_groups", "cancel_products", "zero_groups")
MMA_SCALES = ("narrow", "spread", "extreme", "subnormal")


def _mma_scale_bytes(rng: np.random.Generator, shape: tuple, kind: str) -> np.ndarray:
    """Scale bytes (never NaN here) of one scale kind: "narrow" (exponent fields within 1 of one value), "spread"
    (any exponent field), "extreme" (each byte 2^-9 .. 2^-6 or 2^7 .. 448) or "subnormal" (E4M3 subnormals and 0)."""
    mant = rng.integers(0, 8, shape)
    if kind == "narrow":
        ef = np.clip(int(rng.integers(1, 15)) + rng.integers(-1, 2, shape), 0, 15)
    elif kind == "spread":
        ef = rng.integers(0, 16, shape)
    elif kind == "extreme":
        ef = np.where(rng.random(shape) < 0.5, rng.integers(14, 16, shape), rng.integers(0, 2, shape))
    else:
        ef = np.zeros(shape, np.int64)
    b = (ef << 3) | mant
    return np.where(b == 0x7F, 0x7E, b).astype(np.uint8)


def gen_mma(rng, space) -> tuple[dict, dict, dict]:
    """Raw operand planes for the MMA step models (SPEC 12.6, 12.7): E2M1 codes and scale bytes of A [M, K] and
    B [N, K] (``a_data``, ``a_scales``, ``b_data``, ``b_scales``, packed as SPEC 2.3 and 8.1) drawn to stress the
    steps' arithmetic, and an epilogue (alpha, out dtype, optional bias and C).

    Codes: uniform nibbles; sparse (mostly +-0); ``cancel_groups`` (in some k64 steps one 16-group of A is another's
    negation with the same scales on both sides, so their values cancel exactly for every output; the pair gets
    large scales half the time; sometimes the negated copy is in the next step, against the accumulator);
    ``cancel_products`` (some groups hold products p, -p: their sum is 0 but they are not zero groups); zero groups
    (all-zero codes or zero scale bytes in random 16-blocks). Scales: narrow, spread, extreme (2^-9 against 448:
    tiny and huge scale products) or subnormal; in 15% of the cases some scale bytes carry a sign bit, in 10% a few are
    NaN (0x7F / 0xFF). K: a multiple of 16 up to 512 (not always of 64: the k64 padding), 10% 1024..2048."""
    m, n = int(rng.integers(1, 13)), int(rng.integers(1, 13))
    u = rng.random()
    if u < 0.1:
        k, kkind = 16 * int(rng.integers(64, 129)), "long"
    elif u < 0.55:
        k, kkind = int(rng.choice([16, 32, 48, 64, 80, 112, 128, 144, 192, 256])), "edge"
    else:
        k, kkind = 16 * int(rng.integers(1, 33)), "random"
    nb = k // 16
    ckind = str(rng.choice(MMA_CODES, p=[0.2, 0.15, 0.3, 0.15, 0.2]))
    skind = str(rng.choice(MMA_SCALES, p=[0.25, 0.3, 0.3, 0.15]))
    ca, cb = rng.integers(0, 16, (m, k)), rng.integers(0, 16, (n, k))
    sa, sb = _mma_scale_bytes(rng, (m, nb), skind), _mma_scale_bytes(rng, (n, nb), skind)
    if ckind == "sparse":
        ca = np.where(rng.random(ca.shape) < 0.7, 8 * rng.integers(0, 2, ca.shape), ca)
        cb = np.where(rng.random(cb.shape) < 0.7, 8 * rng.integers(0, 2, cb.shape), cb)
    elif ckind == "cancel_groups" and nb >= 2:
        for _ in range(int(rng.integers(1, max(2, nb // 2) + 1))):
            g1 = int(rng.integers(nb))
            step = g1 // 4
            same_step = [g for g in range(4 * step, min(4 * step + 4, nb)) if g != g1]
            nxt = list(range(4 * step + 4, min(4 * step + 8, nb)))
            pool = same_step if (rng.random() < 0.7 or not nxt) else nxt
            if not pool:
                continue
            g2 = int(rng.choice(pool))
            c1, c2 = slice(16 * g1, 16 * g1 + 16), slice(16 * g2, 16 * g2 + 16)
            ca[:, c2], cb[:, c2] = ca[:, c1] ^ 8, cb[:, c1]
            if rng.random() < 0.5:  # a large pair next to small groups: the window cuts the others' bits
                sa[:, g1], sb[:, g1] = rng.integers(0x70, 0x7F, m), rng.integers(0x70, 0x7F, n)
            sa[:, g2], sb[:, g2] = sa[:, g1], sb[:, g1]
    elif ckind == "cancel_products":
        for g in np.flatnonzero(rng.random(nb) < 0.5):
            c = slice(16 * g, 16 * g + 16)
            blk_a, blk_b = ca[:, c].copy(), cb[:, c].copy()
            blk_a[:, 1::2], blk_b[:, 1::2] = blk_a[:, 0::2], blk_b[:, 0::2] ^ 8
            ca[:, c], cb[:, c] = blk_a, blk_b
            if rng.random() < 0.5:
                sa[:, g], sb[:, g] = 0x7E, 0x7E
    elif ckind == "zero_groups":
        for codes, scales in ((ca, sa), (cb, sb)):
            for g in np.flatnonzero(rng.random(nb) < 0.3):
                if rng.random() < 0.6:
                    codes[:, 16 * g : 16 * g + 16] = 8 * rng.integers(0, 2, (codes.shape[0], 16))
                    if rng.random() < 0.5:
                        scales[:, g] = 0x7E  # a zero group with the largest scale: it must not set the window
                else:
                    scales[:, g] = rng.choice([0x00, 0x80])
    signed = rng.random() < 0.15
    if signed:
        sa |= ((rng.random(sa.shape) < 0.3) << 7).astype(np.uint8)
        sb |= ((rng.random(sb.shape) < 0.3) << 7).astype(np.uint8)
    nan = rng.random() < 0.1
    if nan:
        for scales in (sa, sb):
            hit = rng.random(scales.shape) < 0.05
            scales[hit] = rng.choice([0x7F, 0xFF], size=int(hit.sum()))
    arrays = {"a_data": (ca[:, 0::2] | (ca[:, 1::2] << 4)).astype(np.uint8), "a_scales": sa.astype(np.uint8),
              "b_data": (cb[:, 0::2] | (cb[:, 1::2] << 4)).astype(np.uint8), "b_scales": sb.astype(np.uint8)}
    out_dtype = pick(rng, space, "out_dtype", ["bfloat16", "float32"])
    amode = str(rng.choice(["auto", "one", "random", "negative", "zero", "tiny", "huge"],
                           p=[0.2, 0.2, 0.2, 0.15, 0.1, 0.1, 0.05]))
    alpha = {"auto": None, "one": 1.0, "zero": 0.0,
             "random": float(np.float32(np.exp(rng.uniform(-20, 20)))),
             "negative": -float(np.float32(np.exp(rng.uniform(-20, 20)))),
             "tiny": float(np.float32(2.0 ** rng.integers(-149, -125))),
             "huge": float(np.float32(2.0 ** rng.integers(100, 128)))}[amode]
    if rng.random() < 0.3:
        bias = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32)
        bias[rng.random(n) < 0.2] = -0.0
        if rng.random() < 0.1:
            bias[int(rng.integers(n))] = rng.choice([np.nan, np.inf, -np.inf])
        arrays["bias"] = bias.astype(ml_dtypes.bfloat16) if rng.random() < 0.3 else bias
    if rng.random() < 0.3:
        c = (rng.standard_normal((m, n)) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32)
        c[rng.random((m, n)) < 0.2] = -0.0
        if rng.random() < 0.1:
            c[int(rng.integers(m)), int(rng.integers(n))] = rng.choice([np.nan, np.inf, -np.inf])
        arrays["c"] = c
    o = {"out_dtype": out_dtype, "alpha": alpha}
    tags = {"codes": ckind, "scales": skind, "k": kkind, "signed_scales": str(signed), "nan_scales": str(nan),
            "alpha": amode, "out_dtype": out_dtype, "bias_c": "+".join(x for x in ("bias", "c") if x in arrays) or "none"}
    return arrays, o, tags


GENERATORS: dict[str, Callable] = {
    "grouped_gemm": gen_grouped_gemm,
    "quantize": gen_quantize,
    "group_quantize": gen_group_quantize,
    "codec": gen_codec,
    "rht": gen_rht,
    "gemm": gen_gemm,
    "layout": gen_layout,
    "dequantize": gen_dequantize,
    "mma": gen_mma,
    "grouped_linear": gen_grouped_linear,
}


def generate(op: str, seed: int, index: int, generator: str, space: dict | None = None) -> Case:
    """Build case ``index`` of ``seed`` for ``op`` with the generator named ``generator`` under ``space``."""
    rng = case_rng(seed, op, index)
    arrays, options, tags = GENERATORS[generator](rng, dict(space or {}))
    return Case(op, int(seed), int(index), arrays, options, tags)
