"""The op registry: for every op, its generator, its reference outputs (the oracle) and how to compare.

Canonical output dicts (every backend returns a subset of the reference's keys, same dtypes and shapes):

* ``quantize``: ``row_data`` u8 [M, K/2], ``row_scales`` u8 compact [M, K/16], ``row_scales_swizzled`` u8 1-D
  (zero-padded, SPEC 8.2), ``row_amax`` f32 [1]; the same with ``col_`` for the columnwise plane (SPEC 6.2).
* ``group_quantize``: flat buffers ``row_data``, ``row_scales`` (swizzled), ``row_scales_compact`` (padded
  compact), ``row_amax`` [E], ``row_offsets``, ``row_data_offsets``, ``row_scale_offsets`` and the ``col_``
  counterparts (SPEC 9.2), plus ``*_tail`` zero bytes up to the device capacity (SPEC 9.3).
* ``e2m1`` / ``e4m3`` / ``bf16``: ``codes`` / ``bytes`` / ``bits`` of the non-NaN inputs.
* ``rht``: ``y`` bf16 bits u16 [n, 16].
* ``gemm`` / ``gemm_exact``: ``y`` (out dtype) [M, N]; ``gemm`` also ``bound`` (f64, SPEC 12.4).
* ``layout``: ``swizzled``, ``roundtrip`` (SPEC 8.2), ``swizzled_8x4``, ``roundtrip_8x4`` (8.3), ``offsets_*``,
  ``capacities``.
* ``dequantize``: ``y`` f32 [R, C] (SPEC 11 on arbitrary bytes; NaN compared as a class, SPEC 11.2).
* ``mma_sm100``: ``acc`` f32 [M, N] (the chain of Blackwell k64 steps, SPEC 12.7) and ``y`` (out dtype) [M, N] (with
  SPEC 12.7's epilogue); ``mma_tc``: ``acc_bf16`` and ``acc_fp16`` f32 [M, N] (the Hopper k16 chain over the operands
  presented in bf16 / fp16, SPEC 12.6). NaN compared as a class.
* ``grouped_linear``: ``y`` [T', N] and ``dx`` [T', K] bf16 (T' the rows the groups cover), ``dw`` [E, N, K] (fp32
  main_grad, else the parameters' dtype), ``dbias`` [E, N] (the parameters' dtype) of one layer step (SPEC 16). NaN
  compared as a class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import oracle
from oracle import fp4_numpy as F
from oracle.planes import QuantizedPlane
from oracle.sm100 import sm100_sum
from oracle.swizzle import (
    grouped_scale_offsets,
    swizzle_scales,
    swizzle_scales_8x4,
    unswizzle_scales,
    unswizzle_scales_8x4,
)
from oracle.tensor_core import tensor_core_sum

from .cases import TE_VARIANT_DEFAULTS, Case
from .generators import LAYER_MODELS

__all__ = ["MMA_OPS", "OPS", "OpSpec", "TE_VARIANT_DEFAULTS", "bias_grad_by_chunks", "gemm_planes", "layer_bias",
           "layer_param_dtype", "layer_recipe", "layer_splits", "mma_planes", "quantize_kwargs", "reference",
           "te_variant_kwargs"]


@dataclass(frozen=True)
class OpSpec:
    """One op: ``generator`` (a key of generators.GENERATORS) with a base ``space``, the oracle ``reference``
    and the comparison ``mode`` ("bytes", "bound" for GEMMs checked against SPEC 12.4, "rht" for the RHT)."""

    name: str
    generator: str
    reference: Callable[[Case], dict]
    mode: str = "bytes"
    space: dict = field(default_factory=dict)
    cost: float = 1.0




def te_variant_kwargs(case: Case) -> dict:
    """The case's 4over6 / row-scaled keywords (SPEC 5.6, 5.7) that are not plain (none for a plain case, and for a
    case saved before these options existed)."""
    o = case.options
    return {k: o[k] for k, d in TE_VARIANT_DEFAULTS.items() if o.get(k, d) != d}


def quantize_kwargs(case: Case) -> dict:
    """The ``oracle.quantize`` / ``oracle.group_quantize`` keyword arguments of a quantize case (the variants'
    keywords only where they are not plain; a row-scaled case's supplied amax: one value per row, SPEC 5.7)."""
    o = case.options
    kw = dict(rowwise=o["rowwise"], columnwise=o["columnwise"], rht=o["rht"], rht_signs=o["rht_signs"],
              block=tuple(o["block"]), rule=o["rule"], rounding=o["rounding"], seed=o["seed"], offset=o["offset"])
    kw.update(te_variant_kwargs(case))
    a = case.arrays.get("amax")
    if kw.get("row_scaled"):
        kw.update(_row_scaled_amax(case))
    elif a is not None:
        if case.op.startswith("group") or "splits" in case.arrays:
            kw["amax"] = a[0] if a.shape[0] == 1 else (a[0], a[1])
        else:
            kw["amax"] = np.float32(a[0]) if a.size == 1 else (np.float32(a[0]), np.float32(a[1]))
    return kw


def _row_scaled_amax(case: Case) -> dict:
    """A row-scaled case's supplied amax (SPEC 5.7) as the ``amax`` keyword: ``amax`` (the rowwise plane's values, one
    per row) and ``col_amax`` (the columnwise plane's, one per column of X, [E, K] grouped) flattened, the one plane's
    alone or a (row, col) pair; {} when the case supplies none. A case asking for both planes supplies both or
    neither."""
    a, c = case.arrays.get("amax"), case.arrays.get("col_amax")
    if a is None and c is None:
        return {}
    row = None if a is None else np.asarray(a, np.float32).reshape(-1)
    col = None if c is None else np.asarray(c, np.float32).reshape(-1)
    o = case.options
    if o["rowwise"] and o["columnwise"]:
        if row is None or col is None:
            raise ValueError("a row-scaled case of both planes supplies both planes' amaxes (amax and col_amax) or "
                             "neither")
        return {"amax": (row, col)}
    return {"amax": row if o["rowwise"] else col}


def _f32(v) -> np.ndarray:
    return np.asarray([v], np.float32)


def ref_quantize(case: Case) -> dict:
    """Every buffer of ``oracle.quantize`` with the case's options (SPEC 4-8, 10)."""
    return oracle.quantize(case.arrays["x"], **quantize_kwargs(case)).buffers()


def ref_group_quantize(case: Case) -> dict:
    """Every flat buffer of ``oracle.group_quantize`` at the device's worst-case capacities (SPEC 9)."""
    x, splits = case.arrays["x"], case.arrays["splits"]
    cap = oracle.grouped_capacities(x.shape[0], x.shape[1], splits.size)
    kw = quantize_kwargs(case)
    if case.options.get("splits_rule") == "cut":  # SPEC 9.4: the device cuts splits that do not add up to T
        splits = oracle.cut_splits(splits, x.shape[0])
        x = x[: int(splits.sum())]
        if kw.get("row_scaled") and case.options["rowwise"] and "amax" in kw:  # (one amax per row: the rows kept)
            a = kw["amax"]
            kw["amax"] = (a[0][: x.shape[0]], a[1]) if isinstance(a, tuple) else a[: x.shape[0]]
    out = oracle.group_quantize(x, splits, **kw).buffers()
    # the device's offset table row 1 (DeviceGroupedNVFP4Tensor.row_tile_offsets, read by its GEMM): the first
    # 128-row tile of each group, prefix sums of ceil(m_g / 128); a device-only table, other backends skip it
    out["row_tile_offsets"] = np.concatenate([[0], np.cumsum(-(-np.asarray(splits, np.int64) // 128))]).astype(np.int64)
    for p in ("row", "col"):
        if f"{p}_data" in out:  # SPEC 9.3: the device's buffers hold zeros past the last group
            out[f"{p}_data_tail"] = np.zeros(cap[f"{p}_data"] - out[f"{p}_data"].size, np.uint8)
            out[f"{p}_scales_tail"] = np.zeros(cap[f"{p}_scale"] - out[f"{p}_scales"].size, np.uint8)
    return out


def _not_nan(case: Case) -> np.ndarray:
    """The case's non-NaN values. The codec ops leave NaN inputs out: ml_dtypes' casts give other NaN codes than
    SPEC 3.1-3.3 (e4m3 of -NaN 0xFF, e2m1 of NaN 0x8), and the oracle's NaN codes are checked against hand-worked
    vectors instead (tests/test_oracle_codecs.py)."""
    x = case.arrays["x"]
    return x[~np.isnan(x)]


def ref_e2m1(case: Case) -> dict:
    """E2M1 codes of the case's non-NaN fp32 values (SPEC 3.1)."""
    return {"codes": F.encode_e2m1(_not_nan(case))}


def ref_e4m3(case: Case) -> dict:
    """E4M3 bytes of the case's non-NaN fp32 values (SPEC 3.2)."""
    return {"bytes": F.encode_e4m3(_not_nan(case))}


def ref_bf16(case: Case) -> dict:
    """bf16 bits of the case's non-NaN fp32 values (SPEC 3.3)."""
    return {"bits": F.f32_to_bf16_bits(_not_nan(case))}


def ref_rht(case: Case) -> dict:
    """The 16-point RHT of the case's rows, rounded to bf16 bits (SPEC 7, 3.3)."""
    y = oracle.rht(case.arrays["x"], case.options["rht_signs"])
    return {"y": F.f32_to_bf16_bits(y)}


def gemm_planes(case: Case):
    """The oracle's rowwise planes of the GEMM operands ``a`` and ``b`` (quantized with the case's rule, rounding
    and b's block shape: operand_quant_kwargs)."""
    pa = oracle.quantize(case.arrays["a"], **operand_quant_kwargs(case, "a")).row
    pb = oracle.quantize(case.arrays["b"], **operand_quant_kwargs(case, "b")).row
    return pa, pb


def gemm_epilogue(case: Case) -> dict:
    """``alpha`` / ``bias`` / ``accumulate`` / ``out_dtype`` keyword arguments of ``oracle.gemm``."""
    o = case.options
    return dict(alpha=None if o.get("alpha") is None else np.float32(o["alpha"]), out_dtype=o["out_dtype"],
                bias=case.arrays.get("bias"), accumulate=case.arrays.get("c"))


def ref_gemm_exact(case: Case) -> dict:
    """``oracle.gemm(model="exact")`` with the case's epilogue (SPEC 12.3)."""
    pa, pb = gemm_planes(case)
    return {"y": oracle.gemm(pa, pb, model="exact", **gemm_epilogue(case))}


def ref_gemm_bound(case: Case) -> dict:
    """The exact product and ``oracle.gemm_error_bound`` of the case (SPEC 12.3, 12.4)."""
    pa, pb = gemm_planes(case)
    ep = gemm_epilogue(case)
    return {"y": oracle.gemm(pa, pb, model="exact", **ep), "bound": oracle.gemm_error_bound(pa, pb, **ep)}


def _agreeing_b_splits(case: Case) -> np.ndarray:
    """The group sizes operand b must have for the kind (SPEC 12.5): N rows of W per group (fprop / dgrad) or dY's
    split (wgrad)."""
    a = case.arrays
    if case.options["kind"] == "wgrad":
        return a["splits"].astype(np.int64)
    e = a["splits"].size
    return np.full(e, a["w"].shape[0] // e, np.int64)


def grouped_gemm_b_splits(case: Case) -> np.ndarray:
    """The group sizes operand b is quantized with: W's rows per group (fprop / dgrad) or X's split (wgrad); the
    agreeing ones unless the case makes groups disagree (option ``b_splits``). SPEC 12.5."""
    if "b_splits" in case.options:
        return np.asarray(case.options["b_splits"], np.int64)
    return _agreeing_b_splits(case)


def grouped_gemm_disagreeing(case: Case) -> np.ndarray:
    """Per group: True where b's group does not hold the rows the kind reads (SPEC 12.5: N rows of W for fprop /
    dgrad, dY's m_g for wgrad); such a group's output is NaN."""
    return grouped_gemm_b_splits(case) != _agreeing_b_splits(case)


def operand_quant_kwargs(case: Case, name: str) -> dict:
    """The quantize keywords of GEMM operand ``name`` ("a" or "b") of a ``gemm`` or ``grouped_gemm`` case: scale
    rule and rounding (option ``quant_<name>``, conformance.generators.gen_operand_quant; a saved case without it:
    the case's ``rule`` or "te", round-to-nearest), and for b its scale blocks (option ``b_block``; without it: 16x16
    for a grouped case's weights, 1x16 for a gemm case). A grouped wgrad's b (X) takes 1x16 blocks."""
    o = case.options
    q = o.get(f"quant_{name}", {})
    kw = dict(rule=q.get("rule", o.get("rule", "te")), rounding=q.get("rounding", "rn"), seed=int(q.get("seed", 0)),
              offset=int(q.get("offset", 0)))
    if name == "b" and o.get("kind") != "wgrad":
        kw["block"] = tuple(o.get("b_block", (16, 16) if "kind" in o else (1, 16)))
    return kw


def grouped_gemm_operands(case: Case) -> tuple[list, list]:
    """The oracle's per-group (A, B) planes of a grouped GEMM case (SPEC 12.5), quantized with the case's operand
    options (operand_quant_kwargs). A group whose operands disagree (grouped_gemm_disagreeing) gets planes of
    different sizes."""
    a, o = case.arrays, case.options
    splits, b_splits = a["splits"], grouped_gemm_b_splits(case)
    rht = dict(rht=bool(o["rht"]), rht_signs=int(o["rht_signs"]))
    qa, qb = operand_quant_kwargs(case, "a"), operand_quant_kwargs(case, "b")
    if o["kind"] != "wgrad":
        wq = oracle.group_quantize(a["w"], b_splits, columnwise=True, **qb)
    if o["kind"] == "fprop":
        xq = oracle.group_quantize(a["x"], splits, **qa)
        return xq.row_planes, wq.row_planes
    dyq = oracle.group_quantize(a["dy"], splits, columnwise=True, **rht, **qa)
    if o["kind"] == "dgrad":
        return dyq.row_planes, wq.col_planes
    xq = oracle.group_quantize(a["x"], b_splits, rowwise=False, columnwise=True, **rht, **qb)
    return dyq.col_planes, xq.col_planes


def grouped_gemm_bias(case: Case) -> np.ndarray:
    """The reference's bias [E, cols] of a grouped GEMM case: float32, the exact widening of a bfloat16 bias (the
    very values the device is given, SPEC 12.5)."""
    return np.asarray(case.arrays["bias"]).astype(np.float32)


def _grouped_gemm(case: Case, model: str) -> dict:
    """Per-group ``oracle.gemm`` assembled into the device's output layout: [T, N] / [T, K] / [E, N, K]."""
    a, o = case.arrays, case.options
    planes_a, planes_b = grouped_gemm_operands(case)
    splits, disagree = a["splits"], grouped_gemm_disagreeing(case)
    e = splits.size
    n, k = a["w"].shape[0] // e, a["w"].shape[1]
    biases = grouped_gemm_bias(case) if "bias" in a else None
    ys, bounds = [], []
    for g, (pa, pb) in enumerate(zip(planes_a, planes_b, strict=True)):
        bias = None if biases is None else biases[g]
        c = None if "c" not in a else a["c"][g]
        if disagree[g]:  # SPEC 12.5: every output element NaN (accumulating too); bound 0: NaN required
            shape = {"fprop": (splits[g], n), "dgrad": (splits[g], k), "wgrad": (n, k)}[o["kind"]]
            y, bound = np.full(shape, np.nan, np.float32), np.zeros(shape)
        elif o["kind"] == "wgrad" and c is not None and splits[g] == 0:
            y, bound = c.copy(), np.zeros(c.shape)  # SPEC 12.5: an empty expert leaves C untouched, bit for bit
        else:
            kw = dict(out_dtype=o["out_dtype"], bias=bias, accumulate=c)
            y = oracle.gemm(pa, pb, model=model, **kw)
            bound = oracle.gemm_error_bound(pa, pb, **kw) if model == "exact" else None
        ys.append(np.asarray(y, np.float32))
        bounds.append(bound)
    stack = np.stack if o["kind"] == "wgrad" else np.concatenate
    out = {"y": stack(ys)}
    if model == "exact":
        out["bound"] = stack(bounds)
    else:  # byte comparison in the output dtype
        out["y"] = out["y"].astype(ml_dtypes.bfloat16) if o["out_dtype"] == "bfloat16" else out["y"]
    return out


def ref_grouped_gemm_fast(case: Case) -> dict:
    """mode="fast": the exact model per group plus the SPEC 12.4 bound."""
    return _grouped_gemm(case, "exact")


def ref_grouped_gemm_tensor_core(case: Case) -> dict:
    """mode="fast", bit for bit: the Hopper tensor-core model per group (SPEC 12.6)."""
    return _grouped_gemm(case, "tensor_core")


def ref_grouped_gemm_sm100(case: Case) -> dict:
    """mode="sm100": byte-identical to the Blackwell model per group (SPEC 12.7)."""
    return _grouped_gemm(case, "sm100")


def ref_grouped_gemm_exact(case: Case) -> dict:
    """mode="exact": byte-identical to the sequential model per group."""
    return _grouped_gemm(case, "sequential")


def ref_dequantize(case: Case) -> dict:
    """SPEC 11 on a plane of arbitrary bytes, with the block factor of the case's rule and G (a saved case without
    them: rule "te", G = 448)."""
    d, sc = case.arrays["data"], case.arrays["scales"]
    plane = QuantizedPlane(d, sc, case.arrays["amax"][0], (d.shape[0], 2 * d.shape[1]),
                           rule=case.options.get("rule", "te"),
                           global_scale_max=int(case.options.get("global_scale_max", 448)))
    return {"y": oracle.dequantize(plane)}


def ref_layout(case: Case) -> dict:
    """The case's scales swizzled (128x4 and 8x4) and the grouped scale offsets (SPEC 8.2, 8.3, 9.2)."""
    s, splits, k = case.arrays["scales"], case.arrays["splits"], int(case.options["k"])
    sw = swizzle_scales(s)
    sw8 = swizzle_scales_8x4(s)
    offs = grouped_scale_offsets(splits, k)
    cap = oracle.grouped_capacities(int(splits.sum()), k, splits.size)
    out = {"swizzled": sw, "roundtrip": unswizzle_scales(sw, *s.shape), "swizzled_8x4": sw8,
           "roundtrip_8x4": unswizzle_scales_8x4(sw8, *s.shape)}
    out.update({f"offsets_{n}": v for n, v in offs.items()})
    out["capacities"] = np.array([cap[n] for n in ("row_data", "row_scale", "col_data", "col_scale")], np.int64)
    return out


def mma_planes(case: Case) -> tuple[QuantizedPlane, QuantizedPlane]:
    """The raw operand planes of an ``mma_*`` case (generators.gen_mma): A [M, K] and B [N, K] from the stored codes and
    scale bytes, amax 1 under rule "te" (only an automatic alpha reads it: SPEC 12.1)."""
    a = case.arrays

    def plane(name: str) -> QuantizedPlane:
        d = a[f"{name}_data"]
        return QuantizedPlane(d, a[f"{name}_scales"], np.float32(1.0), (d.shape[0], 2 * d.shape[1]))

    return plane("a"), plane("b")


def ref_mma_sm100(case: Case) -> dict:
    """The Blackwell model's accumulator and its result with the case's epilogue (SPEC 12.7)."""
    pa, pb = mma_planes(case)
    return {"acc": sm100_sum(pa, pb), "y": oracle.gemm(pa, pb, model="sm100", **gemm_epilogue(case))}


def ref_mma_tc(case: Case) -> dict:
    """The Hopper tensor-core model's accumulator with the operands presented in bf16 and in fp16 (SPEC 12.6)."""
    pa, pb = mma_planes(case)
    return {"acc_bf16": tensor_core_sum(pa, pb, operands="bf16"), "acc_fp16": tensor_core_sum(pa, pb, operands="fp16")}


def layer_splits(case: Case) -> np.ndarray:
    """The group sizes a grouped-linear case's step uses: its splits, or SPEC 9.4's cut sizes for device splits that
    need not add up to T (``splits_rule`` "cut")."""
    s = case.arrays["splits"]
    return oracle.cut_splits(s, case.arrays["x"].shape[0]) if case.options.get("splits_rule") == "cut" else s


def layer_recipe(case: Case) -> oracle.NVFP4Recipe:
    """A grouped-linear case's recipe (SPEC 16.1)."""
    o = case.options
    return oracle.NVFP4Recipe(rule=o["rule"], weight_block=tuple(o["weight_block"]), rht_wgrad=bool(o["rht_wgrad"]),
                              rht_signs=int(o["rht_signs"]), sr_grad=bool(o["sr_grad"]), seed=int(o["seed"]))


def layer_param_dtype(case: Case) -> type:
    """The NumPy dtype of a grouped-linear case's parameters: ml_dtypes.bfloat16 or np.float32."""
    return ml_dtypes.bfloat16 if case.options["params_dtype"] == "bfloat16" else np.float32


def layer_bias(case: Case) -> np.ndarray | None:
    """A grouped-linear case's bias [E, N] as the layer's parameter holds it (rounded to the parameters' dtype), in
    float32 (the exact widening: the fprop epilogue's bias, SPEC 16.3); None without a bias."""
    b = case.arrays.get("bias")
    return None if b is None else b.astype(layer_param_dtype(case)).astype(np.float32)


def bias_grad_by_chunks(dy: np.ndarray) -> np.ndarray:
    """SPEC 16.4 for one group, as written: dY's rows [m, N] (bf16) in chunks of 16 rows, each chunk summed in fp32
    in row order from +0.0, then the chunk sums in chunk order from +0.0 (an empty group: +0.0)."""
    m, n = dy.shape
    f = np.zeros((-(-m // 16) * 16, n), np.float32)  # zero rows past m change no sum (SPEC 16.4)
    f[:m] = dy.astype(np.float32)
    chunks = f.reshape(-1, 16, n)
    part = np.zeros((chunks.shape[0], n), np.float32)
    total = np.zeros(n, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # (Inf and NaN are values here)
        for r in range(16):
            part = part + chunks[:, r]
        for c in part:
            total = total + c
    return total


def ref_grouped_linear(case: Case) -> dict:
    """One step of the grouped linear layer (SPEC 16) composed group by group from ``oracle.quantize`` and
    ``oracle.gemm``: expert g's X, W_g and dY quantized alone (16.1; dY's stochastic rounding with offset g, 16.2),
    fprop with the bias in the epilogue, dgrad and wgrad in the mode's model (16.3, 16.5), dbias by SPEC 16.4's
    chunks; with ``steps`` 2 and main_grad, the wgrad accumulates twice. Outputs: ``y`` [T', N] and ``dx`` [T', K]
    bf16 over the rows the (cut) groups cover, ``dw`` [E, N, K] (fp32 main_grad, else dW rounded to the parameters'
    dtype, as the device layer's weight.grad) and ``dbias`` [E, N] in the parameters' dtype."""
    a, o = case.arrays, case.options
    x, w, dy = a["x"], a["w"], a["dy"]
    e, n, k = w.shape
    s = layer_splits(case)
    rows = np.concatenate([[0], np.cumsum(s)]).astype(np.int64)
    r = layer_recipe(case)
    model = LAYER_MODELS[o["layer_mode"]]
    pdt = layer_param_dtype(case)
    bias = layer_bias(case)
    acc = a["main_grad"].copy() if "main_grad" in a else None
    q = dict(rule=r.rule, rht_signs=r.rht_signs)
    ys, dxs = [], []
    dw = np.zeros((e, n, k), np.float32)
    db = np.zeros((e, n), np.float32)
    for g in range(e):
        xg, dyg = x[rows[g]:rows[g + 1]], dy[rows[g]:rows[g + 1]]
        if xg.shape[0] == 0:  # no rows: dW +0.0 or main_grad kept, dbias +0.0 (SPEC 16.3, 16.4)
            if acc is not None:
                dw[g] = acc[g]
            continue
        xq = oracle.quantize(xg, rowwise=True, columnwise=True, rht=r.rht_wgrad, block=(1, 16), **q)
        wq = oracle.quantize(w[g], rowwise=True, columnwise=True, block=r.weight_block, **q)
        dyq = oracle.quantize(dyg, rowwise=True, columnwise=True, rht=r.rht_wgrad, block=(1, 16),
                              rounding=r.grad_rounding, seed=r.seed, offset=g, **q)
        ys.append(oracle.gemm(xq.row, wq.row, model=model, bias=None if bias is None else bias[g]))
        dxs.append(oracle.gemm(dyq.row, wq.col, model=model))
        c = None if acc is None else acc[g]
        for _ in range(int(o["steps"]) if acc is not None else 1):
            c = oracle.gemm(dyq.col, xq.col, model=model, out_dtype="float32", accumulate=c)
        dw[g] = c
        db[g] = bias_grad_by_chunks(dyg)
    out = {"y": np.concatenate([np.zeros((0, n), ml_dtypes.bfloat16), *ys]),
           "dx": np.concatenate([np.zeros((0, k), ml_dtypes.bfloat16), *dxs]),
           "dw": dw if acc is not None else dw.astype(pdt)}
    if bias is not None:
        out["dbias"] = db.astype(pdt)
    return out


#: the ops on raw planes (generator "mma"): their outputs hold NaN compared as a class (conformance.compare)
MMA_OPS = ("mma_sm100", "mma_tc")

OPS: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec("e2m1", "codec", ref_e2m1, space={"format": "e2m1"}, cost=0.2),
        OpSpec("e4m3", "codec", ref_e4m3, space={"format": "e4m3"}, cost=0.2),
        OpSpec("bf16", "codec", ref_bf16, space={"format": "bf16"}, cost=0.2),
        OpSpec("rht", "rht", ref_rht, mode="rht", cost=0.3),
        OpSpec("quantize", "quantize", ref_quantize),
        OpSpec("group_quantize", "group_quantize", ref_group_quantize),
        OpSpec("layout", "layout", ref_layout, cost=0.3),
        OpSpec("dequantize", "dequantize", ref_dequantize, cost=0.3),
        OpSpec("gemm_exact", "gemm", ref_gemm_exact, space={"small": True}),
        OpSpec("gemm", "gemm", ref_gemm_bound, mode="bound"),
        OpSpec("grouped_gemm", "grouped_gemm", ref_grouped_gemm_fast, mode="bound", cost=2.0),
        OpSpec("grouped_gemm_exact", "grouped_gemm", ref_grouped_gemm_exact, space={"mode": "exact"}, cost=2.0),
        OpSpec("grouped_gemm_tc", "grouped_gemm", ref_grouped_gemm_tensor_core, cost=2.0),
        OpSpec("grouped_gemm_sm100", "grouped_gemm", ref_grouped_gemm_sm100, space={"mode": "sm100"}, cost=2.0),
        OpSpec("mma_sm100", "mma", ref_mma_sm100, cost=1.5),
        OpSpec("mma_tc", "mma", ref_mma_tc, cost=1.5),
        OpSpec("grouped_linear", "grouped_linear", ref_grouped_linear, cost=3.0),
    )
}


def reference(case: Case) -> dict:
    """The oracle's canonical outputs for ``case``."""
    return OPS[case.op].reference(case)


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """uint16 bits of an ml_dtypes.bfloat16 array."""
    return np.asarray(a, ml_dtypes.bfloat16).view(np.uint16)
