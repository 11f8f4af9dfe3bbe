"""Failure minimization: greedy delta debugging over a case's arrays and options.

Each candidate is strictly smaller by :func:`conformance.cases.case_size` (fewer elements, then fewer nonzero
elements, then fewer non-default options). A candidate is kept when it still fails with an overlapping
failure signature (the same mismatching buffers or the same exception type), so the shrinker does not drift
to a different bug.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np

import oracle
from oracle.rht import DEFAULT_RHT_SIGNS

from .cases import PLAIN_QUANT, Case, case_size
from .generators import GemmShape, fit_plan
from .ops import MMA_OPS, grouped_gemm_b_splits

__all__ = ["shrink", "candidates"]

Signature = frozenset


def _chunks(n: int) -> Iterator[np.ndarray]:
    """Index subsets of range(n) to keep: halves first, then drop each quarter / eighth."""
    if n <= 1:
        if n == 1:
            yield np.arange(0)
        return
    h = n // 2
    yield np.arange(h)
    yield np.arange(h, n)
    for parts in (4, 8):
        if n < parts:
            break
        edges = np.linspace(0, n, parts + 1).astype(int)
        for i in range(parts):
            yield np.concatenate([np.arange(edges[i]), np.arange(edges[i + 1], n)])


def _zero_blocks(x: np.ndarray) -> Iterator[np.ndarray]:
    """Copies of a [.., K] float array with half / a quarter of its nonzero 16-blocks set to zero."""
    if x.size == 0 or x.shape[-1] % 16:
        return
    f = x.reshape(-1, 16)
    with np.errstate(invalid="ignore"):
        nz = np.flatnonzero((f.astype(np.float32) != 0).any(axis=1) | np.isnan(f.astype(np.float32)).any(axis=1))
    for keep in _chunks(nz.size):
        y = f.copy()
        drop = np.setdiff1d(nz, nz[keep])
        if drop.size == 0:
            continue
        y[drop] = 0
        yield y.reshape(x.shape)


def _zero_elements(x: np.ndarray) -> Iterator[np.ndarray]:
    """For small arrays: copies with half / a quarter of the nonzero elements (NaN included) set to zero."""
    if x.size == 0 or x.size > 4096:
        return
    f = x.reshape(-1)
    with np.errstate(invalid="ignore"):
        nz = np.flatnonzero(f.astype(np.float32) != 0)
    for keep in _chunks(nz.size):
        drop = np.setdiff1d(nz, nz[keep])
        if drop.size:
            y = f.copy()
            y[drop] = 0
            yield y.reshape(x.shape)


def _fewer_rows_in_one_group(s: np.ndarray, total: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For each nonempty group g and each chunk of its rows: the row indices kept (every other group's rows, the chunk
    of g's, and the rows past the groups up to ``total``) and the splits with g's count cut to the chunk."""
    starts = np.concatenate([[0], np.cumsum(s)]).astype(np.int64)
    for g in np.flatnonzero(s):
        for keep in _chunks(int(s[g])):
            rows = np.concatenate([np.arange(starts[g]), starts[g] + keep, np.arange(starts[g + 1], total)])
            s2 = s.copy()
            s2[g] = keep.size
            yield rows.astype(np.int64), s2


def _cols16(x: np.ndarray) -> Iterator[np.ndarray]:
    """Column subsets of whole 16-blocks (K stays a multiple of 16, at least 16)."""
    nb = x.shape[-1] // 16
    for keep in _chunks(nb):
        if keep.size == 0:
            continue
        idx = (keep[:, None] * 16 + np.arange(16)[None, :]).reshape(-1)
        yield idx


def _quant_option_simplifications(o: dict) -> Iterator[dict]:
    if o.get("rowwise") and o.get("columnwise"):
        yield {"columnwise": False, "rht": False}
        yield {"rowwise": False}
    if o.get("rounding") == "sr":
        yield {"rounding": "rn", "seed": 0, "offset": 0}
    if o.get("rounding") == "sr" and (o.get("seed") or o.get("offset")):
        yield {"seed": 0, "offset": 0}
    if o.get("rht"):
        yield {"rht": False}
    if o.get("rht_signs") not in (None, DEFAULT_RHT_SIGNS):
        yield {"rht_signs": DEFAULT_RHT_SIGNS}
    if list(o.get("block", [1, 16])) != [1, 16]:
        yield {"block": [1, 16]}
    if o.get("four_over_six"):  # TE's variants (SPEC 5.6): plain rule "te", then one 4over6 option at a time
        yield {"four_over_six": None, "four_over_six_fast_math": False, "global_scale_max": 448}
    if o.get("four_over_six_fast_math"):
        yield {"four_over_six_fast_math": False}
    if o.get("global_scale_max", 448) != 448:
        yield {"global_scale_max": 448}


def _shared_quantize_candidates(case: Case) -> Iterator[Case]:
    """Candidates common to quantize and group_quantize: fewer 16-column blocks, no supplied amax, the device's own
    kernel choice, simpler options, then zeroed blocks / elements of x."""
    x, o = case.arrays["x"], case.options
    col_amax = case.arrays.get("col_amax")  # (row-scaled: one per column of X, [K] or [E, K], SPEC 5.7)
    for idx in _cols16(x):
        yield case.replace({"x": x[:, idx], **({} if col_amax is None else {"col_amax": col_amax[..., idx]})})
    if "amax" in case.arrays or col_amax is not None:
        c = case.replace()
        c.arrays.pop("amax", None)
        c.arrays.pop("col_amax", None)
        yield c
    if o.get("row_scaled"):  # SPEC 5.7 off: one amax per plane (a supplied per-row amax dropped with it)
        c = case.replace(options={"row_scaled": False})
        c.arrays.pop("amax", None)
        c.arrays.pop("col_amax", None)
        yield c
    if o.get("quantize_kernel", "auto") != "auto":  # (forcing the general kernels runs on any input)
        yield case.replace(options={"quantize_kernel": "auto"})
    for opts in _quant_option_simplifications(o):
        yield case.replace(options=opts)
    for y in _zero_blocks(x):
        yield case.replace({"x": y})
    for y in _zero_elements(x):
        yield case.replace({"x": y})


def _operand_quant_candidates(o: dict) -> Iterator[dict]:
    """Grouped-GEMM operands quantized more simply, in pairs SPEC 12.1 accepts (the device refuses a torchao rule
    paired with another): one operand round-to-nearest with its rule kept if it is a torchao rule (else "te"), then
    both operands under "te" together."""
    quants = {name: o.get(name, PLAIN_QUANT) for name in ("quant_a", "quant_b")}
    for name, q in quants.items():
        rule = q.get("rule", "te")
        plain = dict(PLAIN_QUANT, rule=rule if rule.startswith("torchao") else "te")
        if q != plain:
            yield {name: plain}
    if any(q.get("rule", "te").startswith("torchao") for q in quants.values()):
        yield {name: dict(q, rule="te") for name, q in quants.items()}


def _group_rows(sizes: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Row indices of ``groups`` in a tensor split by ``sizes``."""
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups] + [np.zeros(0, np.int64)])


def _grouped_gemm_candidates(case: Case) -> Iterator[Case]:
    """Smaller grouped-GEMM cases (SPEC 12.5; arrays x [T, K], w [E N, K], dy [T, N], splits [E], bias, c): no bias /
    C, the device's own plan (algorithm, loader, epilogue, grid), simpler options (no RHT or its default sign mask,
    operands quantized the default way), agreeing operand groups, fewer groups, fewer rows in one group, fewer
    16-column blocks of K and of N, zeroed 16-blocks of the operands the kind reads. Every candidate keeps what the
    device's host checks need: x and dy share T rows, w holds E N rows, and operand b's groups (option ``b_splits``)
    keep their totals; and a forced plan that no longer applies to its sizes goes back to the default
    (generators.fit_plan), so that the device does not refuse it."""
    for cand in _grouped_gemm_smaller(case):
        if "algorithm" in cand.options:
            o = cand.options
            cand = cand.replace(options=fit_plan(o, GemmShape.of(o["kind"], o["out_dtype"], cand.arrays)))
        yield cand


def _grouped_gemm_smaller(case: Case) -> Iterator[Case]:
    """The candidates of :func:`_grouped_gemm_candidates`, before their plans are fitted."""
    a, o = case.arrays, case.options
    kind, s, x, w, dy = o["kind"], a["splits"], a["x"], a["w"], a["dy"]
    e = s.size
    n = w.shape[0] // e
    b_splits = o.get("b_splits")
    bs = grouped_gemm_b_splits(case)
    for name in ("bias", "c"):
        if name in a:
            c = case.replace()
            del c.arrays[name]
            yield c
    if o.get("num_sms"):
        yield case.replace(options={"num_sms": 0})
    if o.get("algorithm", "auto") != "auto":
        yield case.replace(options={"algorithm": "auto", "loader": None, "epilogue": None})
    for name in ("loader", "epilogue"):
        if o.get(name) is not None:
            yield case.replace(options={name: None})
    if o.get("rht"):
        yield case.replace(options={"rht": False, "rht_signs": DEFAULT_RHT_SIGNS})
    if o.get("rht_signs", DEFAULT_RHT_SIGNS) != DEFAULT_RHT_SIGNS:
        yield case.replace(options={"rht_signs": DEFAULT_RHT_SIGNS})
    if b_splits is not None:
        c = case.replace()
        del c.options["b_splits"]
        yield c
    for opts in _operand_quant_candidates(o):
        yield case.replace(options=opts)
    if list(o.get("b_block", (16, 16))) != [16, 16]:
        yield case.replace(options={"b_block": [16, 16]})
    for keep in _chunks(e):  # fewer groups
        if keep.size == 0:
            continue
        if kind == "wgrad" and bs[keep].sum() != s[keep].sum():  # X (split by b_splits) and dY share T
            continue
        if kind != "wgrad" and bs[keep].sum() != keep.size * n:  # the device needs E N weight rows
            continue
        rows = _group_rows(s, keep)
        new = {"splits": s[keep], "dy": dy[rows],
               "x": x[_group_rows(bs, keep)] if kind == "wgrad" else x[rows],
               "w": w[: keep.size * n] if kind == "wgrad" else w[_group_rows(bs, keep)]}
        for name in ("bias", "c"):
            if name in a:
                new[name] = a[name][keep]
        yield case.replace(new, {"b_splits": bs[keep].tolist()} if b_splits is not None else None)
    if not (kind == "wgrad" and b_splits is not None):  # fewer rows in one group (X still split like dY)
        for rows, s2 in _fewer_rows_in_one_group(s, x.shape[0]):
            yield case.replace({"x": x[rows], "dy": dy[rows], "splits": s2})
    for idx in _cols16(x):  # fewer 16-blocks of K (x and w columns; C's and dgrad's bias columns)
        new = {"x": x[:, idx], "w": w[:, idx]}
        if "c" in a:
            new["c"] = a["c"][:, :, idx]
        if "bias" in a and kind == "dgrad":
            new["bias"] = a["bias"][:, idx]
        yield case.replace(new)
    if b_splits is None or kind == "wgrad":  # fewer 16-blocks of N (each group's weight rows, dy's columns)
        for idx in _cols16(dy):
            new = {"dy": dy[:, idx], "w": w[(np.arange(e)[:, None] * n + idx[None, :]).reshape(-1)]}
            if "c" in a:
                new["c"] = a["c"][:, idx, :]
            if "bias" in a and kind == "fprop":
                new["bias"] = a["bias"][:, idx]
            yield case.replace(new)
    for name in {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}[kind]:
        for y in _zero_blocks(a[name]):
            yield case.replace({name: y})


def _epilogue_candidates(case: Case) -> Iterator[Case]:
    """A GEMM case without its bias, without its C, and with the automatic alpha (SPEC 12.1) instead of an explicit
    one: each that applies."""
    for name in ("bias", "c"):
        if name in case.arrays:
            c = case.replace()
            del c.arrays[name]
            yield c
    if case.options.get("alpha") is not None:
        yield case.replace(options={"alpha": None})


def _mma_candidates(case: Case) -> Iterator[Case]:
    """Smaller ``mma_*`` cases: no bias / C / explicit alpha, fewer rows of A or B, fewer 16-blocks (both operands),
    zeroed 16-blocks of codes."""
    a = case.arrays
    yield from _epilogue_candidates(case)
    for side, axis in (("a", 0), ("b", 1)):
        rows = a[f"{side}_data"].shape[0]
        for keep in _chunks(rows):
            if keep.size == 0:
                continue
            new = {f"{side}_data": a[f"{side}_data"][keep], f"{side}_scales": a[f"{side}_scales"][keep]}
            if "c" in a:
                new["c"] = np.take(a["c"], keep, axis=axis)
            if side == "b" and "bias" in a:
                new["bias"] = a["bias"][keep]
            yield case.replace(new)
    nb = a["a_scales"].shape[1]
    for keep in _chunks(nb):
        if keep.size:  # block j: data bytes [8 j, 8 j + 8), scale column j
            cols = (8 * keep[:, None] + np.arange(8)).reshape(-1)
            yield case.replace({f"{s}_{f}": a[f"{s}_{f}"][:, cols if f == "data" else keep]
                                for s in ("a", "b") for f in ("data", "scales")})
    for side in ("a", "b"):
        d = a[f"{side}_data"]
        for j in range(nb):
            if d[:, 8 * j : 8 * j + 8].any():
                z = d.copy()
                z[:, 8 * j : 8 * j + 8] = 0
                yield case.replace({f"{side}_data": z})


def _grouped_linear_candidates(case: Case) -> Iterator[Case]:
    """Smaller grouped-linear cases (SPEC 16; arrays x [T, K], w [E, N, K], dy [T, N], splits [E], bias [E, N],
    main_grad [E, N, K]): no bias, no main_grad (and no fused accumulation), one step, simpler settings and recipe
    (bf16 parameters with the bias rounded as a bf16 parameter holds it), the cut sizes of loose device splits (a
    case that keeps them offers no group or row candidates), fewer groups, fewer rows in one group, fewer 16-column
    blocks of K and of N, zeroed 16-blocks of x, dy and w. Every candidate keeps x and dy on the same rows and w, bias
    and main_grad on the same E, N and K."""
    a, o = case.arrays, case.options
    x, w, dy, s = a["x"], a["w"], a["dy"], a["splits"]
    if "bias" in a:
        c = case.replace(options={})
        del c.arrays["bias"]
        yield c
    if "main_grad" in a:
        c = case.replace(options={"fuse_wgrad_accumulation": False})
        del c.arrays["main_grad"]
        yield c
    for opts in _layer_option_simplifications(o):
        if opts.get("params_dtype") == "bfloat16" and "bias" in a:  # (the bias as a bf16 parameter holds it)
            yield case.replace({"bias": a["bias"].astype(ml_dtypes.bfloat16)}, options=opts)
        else:
            yield case.replace(options=opts)
    if o.get("splits_rule") == "cut":  # loose device splits (SPEC 9.4): the sizes actually used, on the host
        cut = oracle.cut_splits(s, x.shape[0])
        rows = int(cut.sum())
        c = case.replace({"x": x[:rows], "dy": dy[:rows], "splits": cut}, options={"splits_on": "host"})
        del c.options["splits_rule"]
        yield c
    else:  # (fewer groups or rows: splits that add up to T; a failure that needs the loose ones keeps them)
        yield from _layer_group_candidates(case)
    for idx in _cols16(x):  # fewer blocks of K
        new = {"x": x[:, idx], "w": w[:, :, idx]}
        if "main_grad" in a:
            new["main_grad"] = a["main_grad"][:, :, idx]
        yield case.replace(new)
    for idx in _cols16(dy):  # fewer blocks of N
        new = {"dy": dy[:, idx], "w": w[:, idx]}
        new.update({name: a[name][:, idx] for name in ("bias", "main_grad") if name in a})
        yield case.replace(new)
    for name, v in (("x", x), ("dy", dy), ("w", w.reshape(-1, w.shape[-1]))):
        for y in _zero_blocks(v):
            yield case.replace({name: y.reshape(a[name].shape)})


def _layer_group_candidates(case: Case) -> Iterator[Case]:
    """Fewer groups (their rows of x and dy, their slices of w, bias and main_grad), then fewer rows in one group."""
    a = case.arrays
    x, dy, s = a["x"], a["dy"], a["splits"]
    per_group = {name: a[name] for name in ("w", "bias", "main_grad") if name in a}
    for keep in _chunks(s.size):
        if keep.size:
            rows = _group_rows(s, keep)
            yield case.replace({"x": x[rows], "dy": dy[rows], "splits": s[keep],
                                **{name: v[keep] for name, v in per_group.items()}})
    for rows, s2 in _fewer_rows_in_one_group(s, x.shape[0]):
        yield case.replace({"x": x[rows], "dy": dy[rows], "splits": s2})


def _layer_option_simplifications(o: dict) -> Iterator[dict]:
    """A grouped-linear case's settings and recipe one step nearer the plain layer (SPEC 16.1's default recipe but
    round to nearest, no RHT, 16x16 weights; one step, no deferred wgrad, the weight-plane cache with its copy)."""
    if int(o.get("steps", 1)) != 1:
        yield {"steps": 1, "is_first_microbatch": list(o["is_first_microbatch"][:1])}
    if any(v is not None for v in o.get("is_first_microbatch", ())):
        yield {"is_first_microbatch": [None] * len(o["is_first_microbatch"])}
    for key, plain in (("delay_wgrad_compute", False), ("x_requires_grad", True), ("weight_plane_reuse", True),
                       ("cache_f16_weights", True), ("params_dtype", "bfloat16"), ("splits_on", "host"),
                       ("sr_grad", False), ("seed", 0), ("rht_wgrad", False), ("rht_signs", DEFAULT_RHT_SIGNS),
                       ("rule", "te"), ("weight_block", [16, 16])):
        if key in o and o[key] != plain and not (key == "splits_on" and o.get("splits_rule") == "cut"):
            yield {key: plain}


def candidates(case: Case) -> Iterator[Case]:
    """Smaller variants of ``case`` (not yet checked to fail)."""
    a, o = case.arrays, case.options
    op = case.op
    if op.startswith("grouped_gemm"):
        yield from _grouped_gemm_candidates(case)
        return
    if op == "grouped_linear":
        yield from _grouped_linear_candidates(case)
        return
    if op in ("e2m1", "e4m3", "bf16", "rht"):
        x = a["x"]
        for keep in _chunks(x.shape[0]):
            if keep.size:
                yield case.replace({"x": x[keep]})
        return
    per_row = bool(o.get("row_scaled")) and "amax" in a  # (a row-scaled amax holds one value per row, SPEC 5.7)
    if op == "quantize":
        x = a["x"]
        for keep in _chunks(x.shape[0]):
            yield case.replace({"x": x[keep], **({"amax": a["amax"][keep]} if per_row else {})})
        yield from _shared_quantize_candidates(case)
        return
    if op == "group_quantize":
        x, s = a["x"], a["splits"]
        if o.get("splits_rule") == "cut":  # loose device splits (SPEC 9.4): shrink on the sizes actually used
            s = oracle.cut_splits(s, x.shape[0])
            new = {"x": x[: int(s.sum())], "splits": s}
            if per_row:
                new["amax"] = a["amax"][: int(s.sum())]
            yield case.replace(new)
        amax = a.get("amax")
        for keep in _chunks(s.size):  # fewer groups
            if keep.size == 0:
                continue
            rows = _group_rows(s, keep)
            new = {"x": x[rows], "splits": s[keep]}
            if amax is not None:
                new["amax"] = amax[rows] if per_row else amax[:, keep]
            if "col_amax" in a:  # (row-scaled columnwise plane: [E, K], SPEC 5.7)
                new["col_amax"] = a["col_amax"][keep]
            yield case.replace(new)
        for rows, s2 in _fewer_rows_in_one_group(s, x.shape[0]):
            yield case.replace({"x": x[rows], "splits": s2, **({"amax": amax[rows]} if per_row else {})})
        yield from _shared_quantize_candidates(case)
        return
    if op in ("gemm", "gemm_exact"):
        am, bm = a["a"], a["b"]
        yield from _epilogue_candidates(case)
        for keep in _chunks(am.shape[0]):
            new = {"a": am[keep]}
            if "c" in a:
                new["c"] = a["c"][keep]
            yield case.replace(new)
        for keep in _chunks(bm.shape[0]):
            if keep.size == 0:
                continue
            new = {"b": bm[keep]}
            if "c" in a:
                new["c"] = a["c"][:, keep]
            if "bias" in a:
                new["bias"] = a["bias"][keep]
            yield case.replace(new)
        for idx in _cols16(am):
            yield case.replace({"a": am[:, idx], "b": bm[:, idx]})
        for y in _zero_blocks(am):
            yield case.replace({"a": y})
        for y in _zero_blocks(bm):
            yield case.replace({"b": y})
        for name in ("a", "b"):
            for y in _zero_elements(a[name]):
                yield case.replace({name: y})
        return
    if op in MMA_OPS:  # raw planes: codes [R, K/2] (low nibble first), scales [R, K/16]
        yield from _mma_candidates(case)
        return
    if op == "dequantize":  # a stored plane: data [R, C/2], compact scales [R, C/16]; fewer rows, fewer 16-blocks
        data, sc = a["data"], a["scales"]
        if o.get("offset"):
            yield case.replace(options={"offset": 0})
        for keep in _chunks(data.shape[0]):
            yield case.replace({"data": data[keep], "scales": sc[keep]})
        for keep in _chunks(sc.shape[1]):
            if keep.size:  # block j: data bytes [8 j, 8 j + 8), scale column j
                cols = (8 * keep[:, None] + np.arange(8)).reshape(-1)
                yield case.replace({"data": data[:, cols], "scales": sc[:, keep]})
        return
    if op == "layout":
        sc, s = a["scales"], a["splits"]
        for keep in _chunks(sc.shape[0]):
            yield case.replace({"scales": sc[keep]})
        for keep in _chunks(sc.shape[1]):
            if keep.size:
                yield case.replace({"scales": sc[:, keep]})
        for keep in _chunks(s.size):
            if keep.size:
                yield case.replace({"splits": s[keep]})
        return


def shrink(case: Case, fails: Callable[[Case], Signature | None], *, deadline: float,
           max_steps: int = 2000) -> tuple[Case, int]:
    """Greedily minimize ``case`` while ``fails(candidate)`` returns a signature overlapping the original's.

    ``fails`` returns None for a passing candidate. Stops at ``deadline`` (time.monotonic()) or after
    ``max_steps`` candidate runs. Returns ``(smallest failing case, candidates tried)``.
    """
    sig0 = fails(case)
    if not sig0:
        return case, 1
    cur, size, tried = case, case_size(case), 1
    improved = True
    while improved and tried < max_steps and time.monotonic() < deadline:
        improved = False
        for cand in candidates(cur):
            if time.monotonic() >= deadline or tried >= max_steps:
                break
            csize = case_size(cand)
            if csize >= size:
                continue
            tried += 1
            try:
                sig = fails(cand)
            except Exception:  # noqa: BLE001 -- an invalid candidate simply is not kept
                sig = None
            if sig and (sig & sig0):
                cur, size, improved = cand, csize, True
                break
    return cur, tried
