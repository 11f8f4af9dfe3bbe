"""The :class:`Backend` interface and the built-in backends.

A backend is an implementation under test. The runner pairs every op a backend exposes with the oracle's
reference for that op (:mod:`conformance.ops`) and compares the outputs (:mod:`conformance.compare`).

Built-in backends (CPU, the oracle self-conformance): ``mldtypes``, ``torch``, ``torchao``, ``torch-te``,
``fractions``, ``oracle-seq``, ``oracle-tc``, ``composed``, ``oracle-grouped``, ``oracle-layer`` and ``mmasim``; with a
TE source checkout: ``te-reference:PATH`` (TE's own reference quantizer). GPU: ``device:cuda:N`` (the project's
``device`` package). Tests and plugins add more with :func:`register_backend` or ``--backend module:attr`` on the command line.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
from collections.abc import Callable

import ml_dtypes
import numpy as np

import oracle
from oracle.rht import DEFAULT_RHT_SIGNS
from oracle.swizzle import swizzle_scales

from . import independent as ind
from .cases import Case
from .generators import LAYER_MODELS
from .ops import (
    gemm_epilogue,
    gemm_planes,
    grouped_gemm_b_splits,
    layer_bias,
    layer_param_dtype,
    layer_recipe,
    layer_splits,
    operand_quant_kwargs,
    quantize_kwargs,
)

__all__ = ["Backend", "BACKENDS", "BackendSpecError", "CPU_DEFAULT", "DeviceBackend", "MmasimBackend",
           "OracleGroupedBackend", "OracleLayerBackend", "TEReferenceBackend", "grouped_gemm_operands_by",
           "grouped_gemm_plan", "make_backend", "register_backend"]


class BackendSpecError(ValueError):
    """A ``--backend`` spec that names no backend, or a backend object that cannot be used (a usage error)."""


#: The space of a quantize backend without TE's variants of rule "te" (SPEC 5.6, 5.7): plain rule "te" only.
NO_TE_VARIANTS = {"four_over_six": [None], "four_over_six_fast_math": [False], "global_scale_max": [448],
                  "row_scaled": [False]}


class Backend:
    """An implementation under test.

    Subclasses set ``name`` and ``ops`` and implement :meth:`run`. :meth:`available` returns None when the
    backend can run, else the reason (a missing library): its ops are then reported as skipped.
    :meth:`space` restricts the generator to the options the backend supports (``{"rule": [...]}``).
    :meth:`warmup` does one-time set-up (a GPU context, JIT-built extensions) before a worker's first case, so that
    it is not charged to whichever op happens to run first.
    """

    name: str = "backend"
    ops: tuple[str, ...] = ()

    def available(self) -> str | None:
        """None when usable, else why not."""
        return None

    def space(self, op: str) -> dict:
        """Generator restrictions for ``op`` (see :func:`conformance.generators.pick`)."""
        return {}

    def warmup(self, ops: tuple[str, ...]) -> None:
        """One-time set-up for running ``ops`` (those of this run), called once per worker before its first case
        and not timed (default: nothing). An exception here is ignored: the cases then report the error themselves."""

    def run(self, op: str, case: Case) -> dict[str, np.ndarray]:
        """Run ``op`` on ``case``; return outputs keyed like the reference (see :meth:`expected_outputs`)."""
        raise NotImplementedError

    def expected_outputs(self, op: str, case: Case, ref_keys) -> set[str]:
        """The reference buffers this backend must return for ``case`` (default: every one). A buffer expected but
        not returned is a mismatch, so a backend that drops a plane cannot pass; backends that deliberately return
        fewer (e.g. only the scale layout they write) narrow this set."""
        return set(ref_keys)


class MlDtypesBackend(Backend):
    """E2M1 / E4M3 / bf16 conversions by ml_dtypes, and dequantize (SPEC 11, G = 448 or 256) with ml_dtypes'
    decoders."""

    name = "mldtypes"
    ops = ("e2m1", "e4m3", "bf16", "dequantize")

    def run(self, op, case):
        if op == "dequantize":
            a, o = case.arrays, case.options
            return {"y": ind.mld_dequantize(a["data"], a["scales"], a["amax"][0], o.get("rule", "te"),
                                            int(o.get("global_scale_max", 448)))}
        x = case.arrays["x"]
        return {"e2m1": lambda: {"codes": ind.mld_e2m1(x)}, "e4m3": lambda: {"bytes": ind.mld_e4m3(x)},
                "bf16": lambda: {"bits": ind.mld_bf16(x)}}[op]()


class TorchBackend(Backend):
    """torch (CPU): the bf16 cast and a float64 matmul RHT."""

    name = "torch"
    ops = ("bf16", "rht")

    def available(self):
        return None if ind.import_torch() is not None else "torch is not installed (pip install .[torch])"

    def run(self, op, case):
        if op == "bf16":
            return {"bits": ind.torch_bf16(case.arrays["x"])}
        return {"y": ind.torch_rht(case.arrays["x"], case.options["rht_signs"])}


class TorchaoBackend(Backend):
    """torchao 0.18 ``NVFP4Tensor.to_nvfp4`` (rules torchao / torchao_noscale), ``NVFP4Tensor.dequantize`` of stored
    planes (SPEC 11.1's torchao factors) and its ``to_blocked`` swizzle. torchao computes every byte and value; its
    tensors' fields are read and written by ``oracle.interop`` (SPEC 14.10)."""

    name = "torchao"
    ops = ("quantize", "dequantize", "layout")

    def expected_outputs(self, op, case, ref_keys):
        return {"swizzled"} if op == "layout" else set(ref_keys)  # torchao has a swizzle, no offsets or capacities

    def available(self):
        if ind.import_torch() is None or ind.import_torchao() is None:
            return "torch/torchao are not installed (pip install .[torch])"
        return None

    def space(self, op):
        if op == "quantize":  # (torchao has no 4over6 or row scaling)
            # NaN inputs only where this torch forms NaN products as SPEC 3.5 models them (x86 AVX2 / AVX512)
            keeps = ind.import_torch() is None or ind.torch_nan_products_keep_the_multiplier()  # (per case: cheap)
            specials = {} if keeps else {"specials": False}
            return {"rule": ["torchao", "torchao_noscale"], "rounding": ["rn"], "block": [[1, 16]], "rht": [False],
                    "dtype": ["bfloat16", "float32"], "amax": ["computed"], "min_rows": 1, "swizzled": [True],
                    **NO_TE_VARIANTS, **specials}
        if op == "dequantize":  # (an NVFP4Tensor of 0 rows reads its packed width as the row length)
            return {"rule": ["torchao", "torchao_noscale"], "min_rows": 1, "global_scale_max": [448]}
        return {}

    def run(self, op, case):
        if op == "layout":
            return {"swizzled": ind.torchao_swizzle(case.arrays["scales"])}
        if op == "dequantize":
            a = case.arrays
            return {"y": ind.torchao_dequantize(a["data"], a["scales"], a["amax"][0], case.options["rule"])}
        o = case.options
        return ind.torchao_quantize(case.arrays["x"], rule=o["rule"], rowwise=o["rowwise"], columnwise=o["columnwise"])


class TorchTEBackend(Backend):
    """Rule "te" / "te_fused_rht" quantization and grouped quantization (round to nearest, both planes, 1x16 and
    16x16 blocks, the RHT, compact and swizzled scales, a computed or supplied amax, SPEC 9's flat buffers) and TE's
    variants of rule "te" (4over6: MAE / MSE, input or product domain, G = 448 or 256; row scaling; SPEC 5.6, 5.7) and
    stochastic rounding (SPEC 3.4 with SPEC 10's Philox bytes) by :mod:`conformance.te_torch`,
    :mod:`conformance.te_torch_variants` and :mod:`conformance.te_torch_sr`: torch float32 ops (Philox in NumPy
    uint64) written from SPEC 3-10 alone, sharing no code with the oracle, so the oracle's TE arithmetic meets a second
    implementation on the CPU. The torchao rules are not implemented (space: ``rule=["te", "te_fused_rht"]``)."""

    name = "torch-te"
    ops = ("quantize", "group_quantize")

    def available(self):
        return None if ind.import_torch() is not None else "torch is not installed (pip install .[torch])"

    def space(self, op):
        return {"rule": ["te", "te_fused_rht"]}

    def expected_outputs(self, op, case, ref_keys):
        return set(ref_keys) - {"row_tile_offsets"}  # the device's tile table; SPEC 9 has no tiles

    def run(self, op, case):
        from . import te_torch  # (imports torch)

        o = case.options
        if o["rule"] not in te_torch.RULES or o.get("splits_rule", "exact") != "exact":
            raise ValueError(f"torch-te runs rules {te_torch.RULES} and splits adding up to T, not "
                             f"{o['rule']!r} / {o.get('splits_rule')!r}")
        kw = quantize_kwargs(case)  # (the oracle's keywords, amax forms included, are te_torch's too)
        if op == "group_quantize":
            return te_torch.group_quantize(case.arrays["x"], case.arrays["splits"], **kw)
        return te_torch.quantize(case.arrays["x"], **kw)


class TEReferenceBackend(Backend):
    """TransformerEngine's own pure-torch reference quantizer (``NVFP4QuantizerRef`` of
    ``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py``), loaded from the TE source checkout ``te`` by
    :mod:`conformance.te_reference` (TE need not be installed): rule "te" with round to nearest, 1x16 and 16x16
    blocks, either plane, TE's variants (4over6: MAE / MSE, input or product domain, G = 448 or 256; row scaling of
    either plane, 1x16) and TE's RHT (``with_rht``, its sign vector: the default mask) on the columnwise plane. The
    spec is ``te-reference:PATH``.

    Its space leaves out two differences SPEC 14 lists between TE's reference and the TE kernels (and so the
    oracle): the RHT's rounding (14.2: a bf16 matmul), by drawing RHT cases only on inputs whose columnwise blocks
    are all SPEC 7.4's plain blocks (space flag ``rht_plain``: M a multiple of 16, as TE's reference needs), and NaN
    and Inf inputs (14.6: NaN propagates into S_enc); and what the reference does not take (a supplied amax,
    stochastic rounding, no rows). The third, 14.1 (0x0 where the scaled value is -0.0), is undone on its bytes
    (:func:`conformance.te_reference.signed_zero_codes`): a code 0x0 of an element whose value (x, or the RHT'd
    value: :func:`conformance.te_reference.rht_negative`) has its sign bit set becomes 0x8, the one place where the
    two may differ by that rule. It returns
    TE's planes as :meth:`conformance.te_reference.TEReference.quantize` keys them: compact scales only, and the
    columnwise codes only where M is even (TE stores M // 2 bytes a plane row)."""

    name = "te-reference"
    ops = ("quantize",)

    def __init__(self, te: str):
        self.te = te
        self._ref = None

    def _reference(self):
        if self._ref is None:
            from .te_reference import TEReference

            self._ref = TEReference(self.te)
        return self._ref

    def available(self):
        if ind.import_torch() is None:
            return "torch is not installed (pip install .[torch])"
        from .te_reference import CannotRun

        try:
            self._reference()
        except CannotRun as e:
            return str(e)
        return None

    def space(self, op):
        return {"rule": ["te"], "rounding": ["rn"], "rht_signs": ["default"], "rht_plain": True, "amax": ["computed"],
                "specials": False, "min_rows": 1}

    def expected_outputs(self, op, case, ref_keys):
        keys = {k for k in ref_keys if not k.endswith("_swizzled")}
        if case.arrays["x"].shape[0] % 2:
            keys.discard("col_data")  # (the last token's code is not stored)
        return keys

    def run(self, op, case):
        kw = quantize_kwargs(case)
        if kw["rule"] != "te" or kw["rounding"] != "rn" or "amax" in kw or (
                kw["rht"] and (kw["rht_signs"] != DEFAULT_RHT_SIGNS or case.arrays["x"].shape[0] % 16)):
            raise ValueError("TE's reference quantizer runs rule te, round to nearest and a computed amax, and the RHT "
                             "with the default sign mask and M a multiple of 16")
        from .te_reference import rht_negative, signed_zero_codes

        x = case.arrays["x"]
        theirs = self._reference().quantize(
            ind._to_torch(x), rowwise=kw["rowwise"], columnwise=kw["columnwise"], block=kw["block"],
            four_over_six=kw.get("four_over_six"), four_over_six_fast_math=kw.get("four_over_six_fast_math", False),
            global_scale_max=kw.get("global_scale_max", 448), row_scaled=kw.get("row_scaled", False), rht=kw["rht"])
        col_negative = rht_negative(x, kw["rht_signs"]) if kw["rht"] and kw["columnwise"] else None
        return signed_zero_codes(np.signbit(x), theirs, col_negative)


def _alpha_by_hand(pa, pb, rule: str) -> np.float32:
    """SPEC 12.1 alpha in fp32, left to right, written from the formula."""
    f = np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        if rule in ("te", "te_fused_rht"):
            return f(f(f(pa.amax) * f(pb.amax)) * f(1.0 / 7225344.0))
        if rule == "torchao":
            return f(f(f(pa.amax) / f(2688.0)) * f(f(pb.amax) / f(2688.0)))
    return f(1.0)


class FractionsBackend(Backend):
    """``oracle.gemm(model="exact")`` checked against an exact ``fractions.Fraction`` evaluation."""

    name = "fractions"
    ops = ("gemm_exact",)

    def space(self, op):
        return {"specials": False}

    def run(self, op, case):
        pa, pb = gemm_planes(case)
        ep = gemm_epilogue(case)
        alpha = ep["alpha"] if ep["alpha"] is not None else _alpha_by_hand(pa, pb, case.options["rule"])
        y = ind.fraction_gemm(pa, pb, alpha=alpha, bias=ep["bias"], c=ep["accumulate"], out_dtype=ep["out_dtype"])
        return {"y": y}


class SequentialBackend(Backend):
    """``oracle.gemm(model="sequential")`` (TE's order), which must lie within ``oracle.gemm_error_bound``."""

    name = "oracle-seq"
    ops = ("gemm",)

    def run(self, op, case):
        pa, pb = gemm_planes(case)
        return {"y": oracle.gemm(pa, pb, model="sequential", **gemm_epilogue(case))}


class TensorCoreBackend(Backend):
    """``oracle.gemm(model="tensor_core")`` (the Hopper wgmma model, SPEC 12.6), which must lie within
    ``oracle.gemm_error_bound``: checks SPEC 12.6's claim that a wgmma step on normal operands meets 12.4 (ii)."""

    name = "oracle-tc"
    ops = ("gemm",)

    def run(self, op, case):
        pa, pb = gemm_planes(case)
        return {"y": oracle.gemm(pa, pb, model="tensor_core", **gemm_epilogue(case))}


class ComposedBackend(Backend):
    """Grouped quantization composed from per-group ``oracle.quantize`` calls (TE's variants too, SPEC 5.6, 5.7) and
    layout code written from SPEC 8/9 (scatter swizzle, offsets, capacities): checks ``oracle.group_quantize`` and
    ``oracle.swizzle``."""

    name = "composed"
    ops = ("group_quantize", "layout")

    def expected_outputs(self, op, case, ref_keys):
        return set(ref_keys) - {"row_tile_offsets"}  # the device's tile table; the oracle's layout has no tiles

    def run(self, op, case):
        if op == "layout":
            s, splits, k = case.arrays["scales"], case.arrays["splits"], int(case.options["k"])
            out = {"swizzled": ind.swizzle_by_formula(s), "roundtrip": s.copy(),
                   "swizzled_8x4": ind.swizzle_8x4_by_formula(s), "roundtrip_8x4": s.copy()}
            out.update({f"offsets_{n}": v for n, v in ind.offsets_by_table(splits, k).items()})
            out["capacities"] = ind.capacities_by_formula(int(splits.sum()), k, splits.size)
            return out
        return self._group(case)

    @staticmethod
    def _group(case: Case) -> dict:
        x, splits = case.arrays["x"], case.arrays["splits"]
        kw = quantize_kwargs(case)
        amax = kw.pop("amax", None)
        t, k = x.shape
        e = splits.size
        offs = ind.offsets_by_table(splits, k)
        cap = dict(zip(("row_data", "row_scale", "col_data", "col_scale"), ind.capacities_by_formula(t, k, e), strict=True))
        parts: dict[str, list] = {}
        amaxes: dict[str, list] = {"row": [], "col": []}
        row_scaled = bool(kw.get("row_scaled"))
        for g in range(e):
            rows = slice(offs["row_offsets"][g], offs["row_offsets"][g + 1])
            xg = x[rows]
            ag = None
            if amax is not None and row_scaled:  # SPEC 5.7: the group's rows' own amaxes and its K column amaxes
                cols = slice(g * k, (g + 1) * k)
                ag = ((amax[0][rows], amax[1][cols]) if isinstance(amax, tuple)
                      else amax[rows] if case.options["rowwise"] else amax[cols])
            elif amax is not None:
                ag = (np.float32(amax[0][g]), np.float32(amax[1][g])) if isinstance(amax, tuple) else np.float32(amax[g])
            kw_g = dict(kw, offset=(int(kw["offset"]) + g) % 2**32)
            tq = oracle.quantize(xg, amax=ag, **kw_g)
            for p in ("row", "col"):
                plane = getattr(tq, p)
                if plane is None:
                    continue
                parts.setdefault(f"{p}_data", []).append(plane.data.reshape(-1))
                parts.setdefault(f"{p}_scales", []).append(ind.swizzle_by_formula(plane.scales))
                parts.setdefault(f"{p}_scales_compact", []).append(ind.padded_compact_by_hand(plane.scales))
                amaxes[p].append(plane.amax)
        out = {}
        for p in ("row", "col"):
            if not case.options["rowwise" if p == "row" else "columnwise"]:
                continue
            for name in ("data", "scales", "scales_compact"):
                chunks = parts.get(f"{p}_{name}", [])
                out[f"{p}_{name}"] = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
            # (row-scaled: each group's [m_g] row amaxes or [K] column amaxes, one after the other, SPEC 5.7)
            out[f"{p}_amax"] = (np.concatenate([np.zeros(0, np.float32), *amaxes[p]]) if row_scaled
                                else np.array(amaxes[p], np.float32))
            out[f"{p}_data_offsets"] = offs[f"{p}_data"]
            out[f"{p}_scale_offsets"] = offs[f"{p}_scale"]
            out[f"{p}_data_tail"] = np.zeros(int(cap[f"{p}_data"]) - out[f"{p}_data"].size, np.uint8)
            out[f"{p}_scales_tail"] = np.zeros(int(cap[f"{p}_scale"]) - out[f"{p}_scales"].size, np.uint8)
        out["row_offsets"] = offs["row_offsets"]
        return out


def grouped_gemm_operands_by(group_quantize, case: Case, t: dict, splits, b_splits) -> tuple:
    """The ``(a, b)`` grouped tensors of a grouped GEMM case as ``device.grouped_gemm`` takes them (SPEC 12.5),
    quantized by ``group_quantize`` (``device.group_quantize`` on torch tensors or ``oracle.group_quantize`` on the
    arrays) from ``t`` (x, w, dy) with ``splits`` and operand b's ``b_splits``: W rowwise and columnwise; fprop X
    rowwise; dgrad / wgrad dY both planes; wgrad X columnwise. Rule, rounding and blocks per operand as the reference
    (ops.operand_quant_kwargs); the case's RHT and sign mask on both of wgrad's operands."""
    o, kind = case.options, case.options["kind"]
    rht = dict(rht=bool(o["rht"]), rht_signs=int(o["rht_signs"]))
    qa, qb = operand_quant_kwargs(case, "a"), operand_quant_kwargs(case, "b")
    if kind != "wgrad":
        wq = group_quantize(t["w"], b_splits, rowwise=True, columnwise=True, **qb)
    if kind == "fprop":
        return group_quantize(t["x"], splits, rowwise=True, **qa), wq
    dyq = group_quantize(t["dy"], splits, rowwise=True, columnwise=True, **rht, **qa)
    if kind == "dgrad":
        return dyq, wq
    return dyq, group_quantize(t["x"], b_splits, rowwise=False, columnwise=True, **rht, **qb)


class OracleGroupedBackend(Backend):
    """``oracle.grouped_gemm`` (the oracle's own grouped API: its SPEC 12.5 checks, per-group alphas and assembly) on
    operands quantized by ``oracle.group_quantize`` the way the device backend quantizes them, with the case's bias as
    drawn (float32 or bfloat16). Fast mode runs the sequential model, which must lie within the SPEC 12.4 bound; the
    tensor-core and exact ops the tensor-core / sequential models, byte for byte. Operand groups that disagree are
    not drawn: ``oracle.grouped_gemm`` raises where the device writes NaN."""

    name = "oracle-grouped"
    ops = ("grouped_gemm", "grouped_gemm_tc", "grouped_gemm_exact", "grouped_gemm_sm100")
    models = {"grouped_gemm": "sequential", "grouped_gemm_tc": "tensor_core", "grouped_gemm_exact": "sequential",
              "grouped_gemm_sm100": "sm100"}

    def space(self, op):
        return {"groups_agree": [True]}

    def run(self, op, case):
        a, o = case.arrays, case.options
        lhs, rhs = grouped_gemm_operands_by(oracle.group_quantize, case, a, a["splits"], grouped_gemm_b_splits(case))
        y = oracle.grouped_gemm(lhs, rhs, kind=o["kind"], model=self.models[op], out_dtype=o["out_dtype"],
                                bias=a.get("bias"), accumulate=a.get("c"))
        return {"y": y.astype(np.float32) if op == "grouped_gemm" else y}  # (fast mode: compared as float32)


class OracleLayerBackend(Backend):
    """``oracle.grouped_linear_forward`` / ``grouped_linear_backward`` (the oracle's layer: group_quantize, grouped_gemm
    and grouped_bias_grad, SPEC 16) against the reference composed group by group (ops.ref_grouped_linear). A case
    with two steps runs the backward twice, accumulating into main_grad where the case has one."""

    name = "oracle-layer"
    ops = ("grouped_linear",)

    def run(self, op, case):
        a, o = case.arrays, case.options
        r, model, pdt = layer_recipe(case), LAYER_MODELS[o["layer_mode"]], layer_param_dtype(case)
        bias = layer_bias(case)
        y = oracle.grouped_linear_forward(a["x"], a["w"], a["splits"], bias=bias, recipe=r, model=model)
        mg = a["main_grad"].copy() if "main_grad" in a else None
        for _ in range(int(o["steps"]) if mg is not None else 1):
            dx, dw, db = oracle.grouped_linear_backward(a["x"], a["w"], a["splits"], a["dy"],
                                                        with_bias=bias is not None, recipe=r, model=model,
                                                        main_grad=mg)
        out = {"y": y, "dx": dx, "dw": dw if mg is not None else dw.astype(pdt)}
        if db is not None:
            out["dbias"] = db.astype(pdt)
        return out


class MmasimBackend(Backend):
    """mmasim 2.1.1, MMA-Sim's bit-accurate instruction models (Xie et al., arXiv:2511.10909), run case by case on raw
    planes (generators.gen_mma): ``mma_sm100`` chains its Blackwell ``tcgen05.mma kind::mxf4nvf4.block16`` (k64)
    model over K and applies SPEC 12.7's epilogue written independently (``independent.sm100_epilogue_by_hand``),
    against ``oracle.sm100.sm100_sum`` and ``oracle.gemm(model="sm100")``; ``mma_tc`` chains its Hopper wgmma k16
    model (``m64n8k16.f32.bf16.bf16`` and ``.f32.f16.f16``) against ``oracle.tensor_core.tensor_core_sum`` with
    bf16 and fp16 operands (SPEC 12.6). Unavailable (its ops skipped) without mmasim."""

    name = "mmasim"
    ops = ("mma_sm100", "mma_tc")

    def available(self):
        if ind.import_torch() is None or ind.import_mmasim() is None:
            return "mmasim is not installed (pip install mmasim==2.1.1)"
        return None

    def run(self, op, case):
        a = case.arrays
        planes = (a["a_data"], a["a_scales"], a["b_data"], a["b_scales"])
        if op == "mma_tc":
            return {"acc_bf16": ind.mmasim_wgmma(*planes, "bf16"), "acc_fp16": ind.mmasim_wgmma(*planes, "fp16")}
        acc = ind.mmasim_tcgen05_nvf4(*planes)
        ep = gemm_epilogue(case)
        alpha = ep["alpha"]
        if alpha is None:  # SPEC 12.1 with the raw planes' amax of 1 (ops.mma_planes)
            one = np.float32(1.0)
            alpha = np.float32(np.float32(one * one) * np.float32(1.0 / 7225344.0))
        bias = None if ep["bias"] is None else np.asarray(ep["bias"]).astype(np.float32)
        y = ind.sm100_epilogue_by_hand(acc, alpha, c=ep["accumulate"], bias=bias, out_dtype=ep["out_dtype"])
        return {"acc": acc, "y": y}


# ---------------------------------------------------------------------------------------------------------------
# the CUDA device
# ---------------------------------------------------------------------------------------------------------------

#: Saved cases may name their plan with the options ``fast_kernel`` (fast mode) / ``exact_kernel`` (exact mode); these
#: map those names to the device's algorithms ("fused", chosen by the sizes among the fused kernels: "auto").
_FAST_KERNEL_ALGORITHMS = {"skinny": "fused_64x256", "large": "fused_128x256", "pair": "fused_pair_256x256",
                           "swapped": "swapped_64x256", "dequant": "copies_cutlass", "fused": "auto", "auto": "auto"}
_EXACT_KERNEL_ALGORITHMS = {"fused": "exact_fused", "dequant": "exact_copies", "hybrid": "exact_hybrid", "auto": "auto"}


def grouped_gemm_plan(case: Case) -> dict:
    """The device plan a grouped-GEMM case asks for: ``algorithm`` ("auto": the device's choice), ``loader`` and
    ``epilogue`` (None: the plan's own) and ``num_sms`` (0: one CTA per SM). A saved case that names its plan
    with the options ``fast_kernel`` / ``exact_kernel`` (by the op's mode) and ``max_ctas`` is read through the
    mapping above and ``max_ctas`` as ``num_sms``; its ``loader_env`` (environment switches the device does not read)
    is ignored."""
    o = case.options
    if "algorithm" in o:
        algorithm = o["algorithm"]
    elif case.op == "grouped_gemm_exact":
        algorithm = _EXACT_KERNEL_ALGORITHMS[o.get("exact_kernel", "auto")]
    else:
        algorithm = _FAST_KERNEL_ALGORITHMS[o.get("fast_kernel", "auto")]
    return dict(algorithm=algorithm, loader=o.get("loader"), epilogue=o.get("epilogue"),
                num_sms=int(o.get("num_sms", o.get("max_ctas", 0)) or 0))


def _call(fn, *args, **kw):
    """Call ``fn`` with the keyword arguments its signature accepts (the device API may lack some options)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **kw)
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kw)
    return fn(*args, **{k: v for k, v in kw.items() if k in params})


def _layout_kw(fn, swizzled: bool) -> dict:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    for name in ("swizzled", "swizzle"):
        if name in params:
            return {name: swizzled}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return {"swizzled": swizzled}  # (a plugin whose quantize takes **kwargs: device.quantize's keyword)
    if "layout" in params:
        return {"layout": "swizzled" if swizzled else "compact"}
    return {}


def _exposes(mod, name: str) -> bool:
    """Whether the device package ``mod`` has the public name ``name``, read from its ``__all__`` where it has one:
    ``device`` imports its modules on first access (PEP 562), and those need torch, which a machine without a GPU
    may lack (``hasattr`` would import them and raise ModuleNotFoundError)."""
    names = getattr(mod, "__all__", None)
    if names is not None:
        return name in names
    try:
        return hasattr(mod, name)
    except Exception:  # noqa: BLE001 -- a name whose import fails is not exposed
        return False


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


class DeviceBackend(Backend):
    """The CUDA kernels of the ``device`` package on one GPU: ``device.quantize`` / ``device.group_quantize``
    results (``.to_oracle()`` plus the raw scale buffers), ``device.grouped_gemm`` (four ops: fast within the bound,
    fast against the tensor-core model, exact, sm100), ``device.dequantize`` of raw planes, ``device.swizzle_scales``
    (the ``layout`` op's ``swizzled`` buffer) and one step of ``device.GroupedLinear`` (``grouped_linear``) against the
    oracle. Ops are the ones ``device`` exposes; a device that is missing or whose ``is_available()`` raises makes the
    backend unavailable.

    A case's kernel choices reach the device through its test hooks, around the one call they are for and never
    through the environment: ``device.testing.force_plan(algorithm=, loader=, epilogue=)`` and
    ``device.set_num_sms(n)`` (the previous ``device.get_num_sms()`` restored after the call) for a grouped GEMM,
    ``force_plan(quantize="general")`` for a quantize case that draws the general kernels."""

    # every op a device run covers; listed (as skipped) when the device is unavailable too
    ops = ("quantize", "group_quantize", "dequantize", "layout", "grouped_gemm", "grouped_gemm_exact",
           "grouped_gemm_tc", "grouped_gemm_sm100", "grouped_linear")

    def __init__(self, dev: str = "cuda:0"):
        self.dev = dev
        self.name = f"device:{dev}"
        self._mod = None
        self._reason = None
        try:
            self._mod = importlib.import_module("device")
            ok = self._mod.is_available()
            if not ok:
                self._reason = "device.is_available() is False"
        except Exception as e:  # noqa: BLE001 -- any failure means: no device run
            self._reason = f"device package unusable: {type(e).__name__}: {e}"
        if self._mod is not None:  # the ops this device package exposes, whether or not a GPU is there
            self.ops = tuple(op for op in ("quantize", "group_quantize", "dequantize") if _exposes(self._mod, op))
            if _exposes(self._mod, "swizzle_scales"):
                self.ops += ("layout",)
            if _exposes(self._mod, "grouped_gemm"):
                self.ops += ("grouped_gemm", "grouped_gemm_exact", "grouped_gemm_tc", "grouped_gemm_sm100")
            if _exposes(self._mod, "GroupedLinear"):
                self.ops += ("grouped_linear",)

    def available(self):
        return self._reason

    def expected_outputs(self, op, case, ref_keys):
        """The buffers a device call writes: ``layout`` only the swizzle kernel's output, quantize results only the
        scale layout the call was asked for (``swizzled``)."""
        keys = set(ref_keys)
        if op == "layout":
            return {"swizzled"}
        if op == "grouped_linear" and not case.options["x_requires_grad"]:
            return keys - {"dx"}  # (no gradient of x asked for: the layer computes none)
        if op in ("quantize", "group_quantize"):
            swz = bool(case.options.get("swizzled", True))
            if op == "quantize" and not swz:
                keys -= {"row_scales_swizzled", "col_scales_swizzled"}
            if op == "group_quantize":
                keys -= {"row_scales_compact", "col_scales_compact"} if swz else {"row_scales", "col_scales"}
        return keys

    def warmup(self, ops: tuple[str, ...]) -> None:
        """Create the CUDA context and load the JIT-built extensions that ``ops`` need, with one tiny call per
        kernel family. Each worker process loads them itself and torch serialises the loads on the build directory's
        lock, so the first case of an op would otherwise carry seconds of waiting, and the scheduler, which shares
        the budget by the time the cases took, would starve that op."""
        import torch

        x = torch.zeros((16, 16), dtype=torch.bfloat16, device=self.dev)
        self._mod.quantize(x)  # the quantize extension (also the GEMM's operands below)
        if any(op.startswith("grouped_gemm") for op in ops):
            one = torch.tensor([16], dtype=torch.int64, device=self.dev)
            a = self._mod.group_quantize(x, one)
            b = self._mod.group_quantize(x, one)
            self._mod.grouped_gemm(a, b, kind="fprop")
        if "grouped_linear" in ops:  # (the layer's own kernels: bias gradient, packed scales)
            layer = self._mod.GroupedLinear(1, 16, 16, device=self.dev)
            xg = x.clone().requires_grad_(True)
            layer(xg, [16]).backward(torch.ones((16, 16), dtype=torch.bfloat16, device=self.dev))
        torch.cuda.synchronize(self.dev)

    def space(self, op):
        if op.startswith("grouped_gemm") or op in ("dequantize", "layout"):
            return {}
        if op == "grouped_linear":
            return {"loose_splits": True}  # device splits need not add up to T (SPEC 9.4, 16.5)
        # 4over6 (SPEC 5.6) on bfloat16 input; no row-scaled planes (SPEC 5.7: the oracle's only)
        s = {"max_elems": 1 << 22, "quantize_kernel": ["auto", "general"], "four_over_six_dtype": ["bfloat16"],
             "row_scaled": [False]}
        if op == "group_quantize":
            s["loose_splits"] = True  # device splits need not add up to T (SPEC 9.4)
        sup = getattr(self._mod, "SUPPORTED", None)  # (every option of SPEC 4-10 runs on the device)
        if isinstance(sup, dict):
            s.update(sup.get(op, {}))
        return s

    def _x(self, case):
        ind.import_torch()
        return ind._to_torch(case.arrays["x"]).to(self.dev)

    def run(self, op, case):
        import torch

        if op.startswith("grouped_gemm"):
            return self._grouped_gemm(op, case)
        if op == "grouped_linear":
            return self._grouped_linear(case)
        if op in ("dequantize", "layout"):
            return self._standalone(op, case)
        kw = quantize_kwargs(case)
        swz = bool(case.options["swizzled"])
        x = self._x(case)
        kernel = case.options.get("quantize_kernel", "auto")
        if op == "quantize":
            fn = self._mod.quantize
            with self._forced(quantize=None if kernel == "auto" else kernel):
                res = _call(fn, x, **kw, **_layout_kw(fn, swz))
                torch.cuda.synchronize(self.dev)
            return self._quantize_outputs(res)
        fn = self._mod.group_quantize
        splits = torch.from_numpy(case.arrays["splits"]).to(self.dev)
        if "amax" in kw:
            a = kw["amax"]
            kw["amax"] = tuple(torch.from_numpy(np.asarray(v, np.float32)).to(self.dev) for v in a) if isinstance(a, tuple) \
                else torch.from_numpy(np.asarray(a, np.float32)).to(self.dev)
        with self._forced(quantize=None if kernel == "auto" else kernel):
            res = _call(fn, x, splits, **kw, **_layout_kw(fn, swz))
            torch.cuda.synchronize(self.dev)
        return self._group_outputs(res)

    @contextlib.contextmanager
    def _forced(self, num_sms: int = 0, **plan):
        """``device.testing.force_plan`` with the plan entries that are not None (none: not entered), and with
        ``num_sms`` > 0 the persistent grid capped by ``device.set_num_sms``, the previous value set back after."""
        plan = {k: v for k, v in plan.items() if v is not None}
        with contextlib.ExitStack() as stack:
            if plan:
                testing = getattr(self._mod, "testing", None)  # (a package's submodule: an attribute once imported)
                if testing is None:
                    testing = importlib.import_module(f"{self._mod.__name__}.testing")
                stack.enter_context(testing.force_plan(**plan))
            if num_sms:
                before = self._mod.get_num_sms()
                self._mod.set_num_sms(int(num_sms))
                stack.callback(self._mod.set_num_sms, before)
            yield

    def _standalone(self, op: str, case) -> dict:
        """The standalone kernels: ``device.swizzle_scales`` of the layout case's compact scales (SPEC 8.2), and
        ``device.dequantize`` of a raw plane (SPEC 11), its data a view ``offset`` bytes (a multiple of 8) into a
        larger buffer and its scales swizzled by the oracle when the case asks for the swizzled layout."""
        import torch

        a, dev = case.arrays, self.dev
        if op == "layout":
            sw = self._mod.swizzle_scales(torch.from_numpy(a["scales"]).to(dev))
            torch.cuda.synchronize(dev)
            return {"swizzled": _np(sw).reshape(-1)}
        d, sc = a["data"], a["scales"]
        off = int(case.options["offset"])
        buf = torch.zeros(off + d.size, dtype=torch.uint8, device=dev)
        data = buf[off:]
        data.copy_(torch.from_numpy(d.reshape(-1)))
        swz = bool(case.options["swizzled"])
        scales = torch.from_numpy(swizzle_scales(sc) if swz else sc).to(dev)
        kw = {}
        if int(case.options.get("global_scale_max", 448)) != 448:  # (SPEC 11.1's G; a plain case passes none)
            kw["global_scale_max"] = int(case.options["global_scale_max"])
        y = self._mod.dequantize(data, scales=scales, amax=torch.from_numpy(a["amax"]).to(dev),
                                 shape=(d.shape[0], 2 * d.shape[1]), swizzled=swz,
                                 rule=case.options.get("rule", "te"), **kw)
        torch.cuda.synchronize(dev)
        return {"y": _np(y)}

    def _grouped_gemm(self, op: str, case) -> dict:
        """device.group_quantize of the operands, then device.grouped_gemm (SPEC 12.5) under the case's plan
        (:func:`grouped_gemm_plan`)."""
        import torch

        ind.import_torch()
        a, o, dev, mod = case.arrays, case.options, self.dev, self._mod
        t = {n: ind._to_torch(a[n]).to(dev) for n in ("x", "w", "dy")}
        splits = torch.from_numpy(a["splits"]).to(dev)
        b_splits = torch.from_numpy(grouped_gemm_b_splits(case)).to(dev)  # (SPEC 12.5: may disagree with splits)
        kind = o["kind"]
        lhs, rhs = grouped_gemm_operands_by(mod.group_quantize, case, t, splits, b_splits)
        mode = {"grouped_gemm_exact": "exact", "grouped_gemm_sm100": "sm100"}.get(op, "fast")
        kw = dict(kind=kind, mode=mode,
                  out_dtype=torch.bfloat16 if o["out_dtype"] == "bfloat16" else torch.float32)
        plan = grouped_gemm_plan(case)
        if plan["algorithm"] == "auto":
            plan["algorithm"] = None
        if "bias" in a:  # float32 or bfloat16, as drawn (torch.from_numpy knows no ml_dtypes bfloat16)
            kw["bias"] = ind._to_torch(a["bias"]).to(dev)
        if "c" in a:
            kw.update(out=torch.from_numpy(a["c"].copy()).to(dev), accumulate=True)
        with self._forced(**plan):
            y = mod.grouped_gemm(lhs, rhs, **kw)
            torch.cuda.synchronize(dev)
        y = y.float().cpu().numpy()  # bf16 -> f32 is exact
        if op != "grouped_gemm" and o["out_dtype"] == "bfloat16":  # compared byte for byte
            y = y.astype(ml_dtypes.bfloat16)
        return {"y": y}

    def _grouped_linear(self, case) -> dict:
        """One ``device.GroupedLinear`` built with the case's settings, its parameters (and main_grad) set to the
        case's values, then ``steps`` forward + backward passes over the same x and dy (backward_dw after each where
        the wgrad is deferred; the parameters' gradients cleared before each, main_grad accumulating). Outputs of the
        last step: y and x.grad over the rows the groups cover, main_grad or weight.grad, bias.grad."""
        import torch

        ind.import_torch()
        a, o, dev = case.arrays, case.options, self.dev
        e, n, k = a["w"].shape
        fuse = bool(o["fuse_wgrad_accumulation"])
        layer = self._mod.GroupedLinear(
            e, k, n, bias="bias" in a, device=dev,
            params_dtype=torch.bfloat16 if o["params_dtype"] == "bfloat16" else torch.float32,
            recipe=layer_recipe(case), mode=o["layer_mode"], fuse_wgrad_accumulation=fuse,
            delay_wgrad_compute=bool(o["delay_wgrad_compute"]), cache_f16_weights=bool(o["cache_f16_weights"]))
        layer.weight_plane_reuse = bool(o["weight_plane_reuse"])
        with torch.no_grad():
            layer.weight.copy_(ind._to_torch(a["w"]).to(dev))  # (bf16 values: exact in either parameter dtype)
            if "bias" in a:
                layer.bias.copy_(ind._to_torch(a["bias"]).to(dev))
            if fuse:
                layer.weight.main_grad.copy_(torch.from_numpy(a["main_grad"]).to(dev))
        x, dy = ind._to_torch(a["x"]).to(dev), ind._to_torch(a["dy"]).to(dev)
        s = a["splits"]
        splits = torch.from_numpy(s).to(dev) if o["splits_on"] == "device" else [int(v) for v in s]
        for first in o["is_first_microbatch"]:
            layer.weight.grad = None
            if layer.bias is not None:
                layer.bias.grad = None
            xg = x.detach().clone().requires_grad_(bool(o["x_requires_grad"]))
            y = layer(xg, splits, is_first_microbatch=first)
            y.backward(dy)
            if layer.delay_wgrad_compute:
                layer.backward_dw()
        torch.cuda.synchronize(dev)
        rows = int(layer_splits(case).sum())
        out = {"y": ind.torch_to_numpy(y[:rows]),
               "dw": ind.torch_to_numpy(layer.weight.main_grad if fuse else layer.weight.grad)}
        if xg.grad is not None:
            out["dx"] = ind.torch_to_numpy(xg.grad[:rows])
        if layer.bias is not None:
            out["dbias"] = ind.torch_to_numpy(layer.bias.grad)
        return out

    @staticmethod
    def _quantize_outputs(res) -> dict:
        o = res.to_oracle()
        out = {}
        for p, raw_scales in (("row", res.row_scales), ("col", res.col_scales)):
            plane = getattr(o, p)
            if plane is None:
                continue
            out[f"{p}_data"] = plane.data
            out[f"{p}_scales"] = plane.scales
            if res.swizzled:
                out[f"{p}_scales_swizzled"] = _np(raw_scales).reshape(-1)
            out[f"{p}_amax"] = _np(getattr(res, f"{p}_amax"))  # the buffer as written: dtype, shape and bits
        return out

    @staticmethod
    def _group_outputs(res) -> dict:
        o = res.to_oracle()
        out = {"row_offsets": np.asarray(o.row_offsets, np.int64),
               "row_tile_offsets": _np(res.row_tile_offsets).astype(np.int64)}
        for p in ("row", "col"):
            data = getattr(res, f"{p}_data")
            if data is None:
                continue
            d_off = np.asarray(getattr(o, f"{p}_data_offsets"), np.int64)
            s_off = np.asarray(getattr(o, f"{p}_scale_offsets"), np.int64)
            raw_d = _np(data).reshape(-1)
            raw_s = _np(getattr(res, f"{p}_scales")).reshape(-1)
            out[f"{p}_data"] = raw_d[: d_off[-1]]
            out[f"{p}_data_tail"] = raw_d[d_off[-1]:]
            out[f"{p}_scales" if res.swizzled else f"{p}_scales_compact"] = raw_s[: s_off[-1]]
            out[f"{p}_scales_tail"] = raw_s[s_off[-1]:]
            out[f"{p}_amax"] = _np(getattr(res, f"{p}_amax"))  # the buffer as written: dtype, shape and bits
            out[f"{p}_data_offsets"] = d_off
            out[f"{p}_scale_offsets"] = s_off
        return out


def cuda_devices() -> list[str]:
    """``cuda:N`` for every visible GPU (empty without torch / CUDA)."""
    torch = ind.import_torch()
    try:
        n = torch.cuda.device_count() if torch is not None else 0
    except Exception:  # noqa: BLE001
        n = 0
    return [f"cuda:{i}" for i in range(n)]


# ---------------------------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------------------------

BACKENDS: dict[str, Callable[[], Backend]] = {
    "mldtypes": MlDtypesBackend,
    "torch": TorchBackend,
    "torchao": TorchaoBackend,
    "torch-te": TorchTEBackend,
    "fractions": FractionsBackend,
    "oracle-seq": SequentialBackend,
    "oracle-tc": TensorCoreBackend,
    "composed": ComposedBackend,
    "oracle-grouped": OracleGroupedBackend,
    "oracle-layer": OracleLayerBackend,
    "mmasim": MmasimBackend,
}
#: The CPU self-conformance (``--device cpu``).
CPU_DEFAULT = ("mldtypes", "torch", "torchao", "torch-te", "fractions", "oracle-seq", "oracle-tc", "composed",
               "oracle-grouped", "oracle-layer", "mmasim")


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``factory`` available as backend ``name`` in this process (for ``run(RunConfig(backends=[name]))``
    and :func:`conformance.cli.replay` called from Python). The command line cannot see it: use
    ``--backend module:attr`` there, which is also what saved cases record for replay."""
    BACKENDS[name] = factory


class _PluginAdapter(Backend):
    """A plugin object that has ``run`` (and maybe ``name``, ``ops``, ``available``, ``space``, ``warmup``,
    ``expected_outputs``) but does not subclass :class:`Backend`: the missing methods get Backend's defaults."""

    def __init__(self, obj):
        self._obj = obj
        self.name = str(getattr(obj, "name", type(obj).__name__))
        self.ops = tuple(getattr(obj, "ops", ()))

    def available(self):
        f = getattr(self._obj, "available", None)
        return f() if f else None

    def space(self, op):
        f = getattr(self._obj, "space", None)
        return f(op) if f else {}

    def warmup(self, ops):
        f = getattr(self._obj, "warmup", None)
        if f:
            f(ops)

    def run(self, op, case):
        return self._obj.run(op, case)

    def expected_outputs(self, op, case, ref_keys):
        f = getattr(self._obj, "expected_outputs", None)
        return f(op, case, ref_keys) if f else set(ref_keys)


def make_backend(spec: str) -> Backend:
    """Build a backend from a registered name, ``device:cuda:N``, ``te-reference:PATH`` (TE's reference quantizer
    from the TE source checkout at PATH) or ``package.module:attr`` (a class or factory)."""
    if spec in BACKENDS:
        b = BACKENDS[spec]()
        b.spec = spec
        return b
    if spec.startswith("te-reference:"):
        b = TEReferenceBackend(spec.split(":", 1)[1])
        b.spec = spec
        return b
    if spec.startswith("device:"):
        dev = spec.split(":", 1)[1]
        if not re.fullmatch(r"cuda(:\d+)?", dev):
            raise BackendSpecError(f"unknown device in backend {spec!r}: the device backend runs on cuda or cuda:N "
                                   "(device:cuda:0)")
        b = DeviceBackend(dev)
        b.spec = spec
        return b
    if ":" in spec:
        mod, attr = spec.split(":", 1)
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise BackendSpecError(f"cannot load backend {spec!r}: {type(e).__name__}: {e} (is its directory "
                                   "on PYTHONPATH?)") from e
        try:
            b = obj()
        except Exception as e:  # (a constructor that raises, or an attribute that is not a class or factory)
            raise BackendSpecError(f"cannot build backend {spec!r}: {type(e).__name__}: {e}") from e
        if not isinstance(b, Backend):
            if not callable(getattr(b, "run", None)):
                raise BackendSpecError(f"{spec} did not produce a Backend (an object with a run(op, case) method)")
            b = _PluginAdapter(b)
        if not getattr(b, "spec", None):
            b.spec = spec
        return b
    raise BackendSpecError(f"unknown backend {spec!r}; known: {sorted(BACKENDS)}, device:cuda:N, module:attr")
