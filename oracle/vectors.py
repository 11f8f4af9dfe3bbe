"""Golden test vectors on disk, for kernels tested outside Python (``python -m oracle vectors OUT_DIR``).

Every case is a folder holding ``case.json`` and one raw ``.bin`` file per array (little-endian, C order, no
header); ``index.json`` in OUT_DIR lists the cases. ``case.json`` gives the op, its keyword options, the SPEC
sections it exercises, and for every input and output array its file, dtype and shape. bfloat16 arrays are stored as
their uint16 bit patterns (dtype "bfloat16"); a scalar (an amax, alpha) is an array of shape [1]. Inputs come from a
fixed seed, outputs from the oracle, so a kernel's test reads the inputs, runs, and compares bytes.

:func:`write_vectors` writes the set, :func:`read_case` reads one case back.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from .gemm import gemm, gemm_alpha
from .grouped import group_quantize
from .grouped_gemm import grouped_gemm
from .quantize import quantize
from .swizzle import swizzle_scales

__all__ = ["read_case", "write_vectors"]

FORMAT_VERSION = 1
_DTYPES = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32, "uint8": np.uint8,
           "int64": np.int64}


def _dtype_name(a: np.ndarray) -> str:
    name = "bfloat16" if a.dtype == ml_dtypes.bfloat16 else a.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"no vector file format for dtype {a.dtype}")
    return name


def _write_arrays(folder: Path, arrays: dict) -> dict:
    """Write each array to ``<name>.bin``; return its {file, dtype, shape} entries."""
    entries = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a.reshape(1) if a.ndim == 0 else a
        dt = _dtype_name(a)
        raw = np.ascontiguousarray(a).view(_DTYPES[dt]) if dt == "bfloat16" else np.ascontiguousarray(a)
        raw.astype(raw.dtype.newbyteorder("<"), copy=False).tofile(folder / f"{name}.bin")
        entries[name] = {"file": f"{name}.bin", "dtype": dt, "shape": list(a.shape)}
    return entries


def read_case(folder) -> tuple[dict, dict, dict]:
    """One case written by :func:`write_vectors`: (case.json as a dict, input arrays, output arrays)."""
    folder = Path(folder)
    meta = json.loads((folder / "case.json").read_text())
    out = []
    for part in ("inputs", "outputs"):
        arrays = {}
        for name, e in meta[part].items():
            a = np.fromfile(folder / e["file"], dtype=np.dtype(_DTYPES[e["dtype"]]).newbyteorder("<"))
            a = a.astype(_DTYPES[e["dtype"]]).reshape(e["shape"])
            arrays[name] = a.view(ml_dtypes.bfloat16) if e["dtype"] == "bfloat16" else a
        out.append(arrays)
    return meta, out[0], out[1]


def _with_defaults(fn: Callable, options: dict) -> dict:
    """``options`` completed with ``fn``'s keyword defaults (all of a case's options, spelled out), tuples as lists."""
    full = {n: p.default for n, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}
    full.update(options)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in full.items()}


def _ties(dtype) -> np.ndarray:
    """16 x 32 with S_enc = 1 (amax 2688 in block 0 of row 0, TE rule: SPEC 5.1) and, in every other row's blocks, a
    block amax of 6 (decode scale 1) and the E2M1 midpoints 0.25 ... 5 and their negatives: every tie of SPEC 3.1."""
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    row = np.concatenate([[6.0], mids, -mids, [0.0]]).astype(np.float32)  # 16 values
    x = np.tile(row, (16, 2))
    x[0, :16] = 0.0
    x[0, 0] = 2688.0
    return x.astype(dtype)


def _specials(rng, m: int, k: int) -> np.ndarray:
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, :16] = 2.0**-133  # bf16 subnormals: a block of them
    x[2, 5] = 3.0e4  # an outlier that sets the amax
    return x.astype(ml_dtypes.bfloat16)


def _cases(rng) -> list[tuple[str, str, str, Callable[[], tuple[dict, dict, dict]]]]:
    """(name, op, SPEC sections, build) of every case; build() gives (inputs, options, outputs)."""
    def q(x, **o):
        def build():
            return {"x": x}, _with_defaults(quantize, o), quantize(x, **o).buffers()
        return build

    def gq(x, splits, **o):
        def build():
            out = group_quantize(x, splits, **o).buffers()
            return {"x": x, "splits": np.asarray(splits, np.int64)}, _with_defaults(group_quantize, o), out
        return build

    def mm(a, b, **o):
        def build():
            pa, pb = quantize(a).row, quantize(b, block=(16, 16)).row
            ins = {"a_data": pa.data, "a_scales": pa.scales, "a_amax": np.float32(pa.amax),
                   "b_data": pb.data, "b_scales": pb.scales, "b_amax": np.float32(pb.amax)}
            out = {"alpha": gemm_alpha(pa, pb)}
            for model in ("sequential", "tensor_core", "sm100", "exact"):
                for od in ("bfloat16", "float32"):
                    out[f"y_{model}_{od}"] = gemm(pa, pb, model=model, out_dtype=od, **o)
            ins.update({k: v for k, v in o.items() if isinstance(v, np.ndarray)})
            opts = {"a": _with_defaults(quantize, {}), "b": _with_defaults(quantize, {"block": (16, 16)}),
                    "outputs": "y_<model>_<out_dtype> = oracle.gemm(a, b, model=..., out_dtype=..., bias=bias): "
                               "sequential (TE, SPEC 12.2), tensor_core (Hopper wgmma, 12.6), sm100 (B200 "
                               "tcgen05 and CUTLASS's epilogue, 12.7), exact (12.3); "
                               "alpha from the amaxes (12.1)"}
            return ins, opts, out
        return build

    def ggemm(x, w, splits, n):
        def build():
            e = len(splits)
            xq = group_quantize(x, splits)
            wq = group_quantize(w, [n] * e, block=(16, 16))
            ins = {"splits": np.asarray(splits, np.int64)}
            for name, t in (("a", xq), ("b", wq)):  # the flat buffers a device kernel reads (SPEC 9.2)
                for f in ("data", "scales", "amax", "data_offsets", "scale_offsets"):
                    ins[f"{name}_{f}"] = getattr(t, f"row_{f}")
            out = {f"y_{m}_bfloat16": grouped_gemm(xq, wq, kind="fprop", model=m)
                   for m in ("sequential", "tensor_core", "sm100")}
            opts = {"kind": "fprop", "a": _with_defaults(group_quantize, {}),
                    "b": _with_defaults(group_quantize, {"block": (16, 16)}), "N": n,
                    "outputs": "y_<model>_bfloat16 [T, N] = oracle.grouped_gemm(a, b, kind='fprop', model=...): "
                               "rows of group g = X_g W_g^T (SPEC 12.5); scales swizzled per group (SPEC 8.2)"}
            return ins, opts, out
        return build

    def swz(compact):
        def build():
            return {"compact": compact}, {}, {"swizzled": swizzle_scales(compact)}
        return build

    bf16 = ml_dtypes.bfloat16
    normal = rng.standard_normal((128, 64)).astype(bf16)
    return [
        ("quantize_te_wgrad", "quantize", "4-8", q(normal, columnwise=True, rht=True)),
        ("quantize_specials_17x48", "quantize", "3-6, 8, 13", q(_specials(rng, 17, 48), columnwise=True)),
        ("quantize_ties", "quantize", "3.1, 5", q(_ties(np.float32))),
        ("quantize_16x16_sr", "quantize", "6.3, 10", q(rng.standard_normal((33, 64)).astype(np.float32),
                                                      columnwise=True, block=(16, 16), rounding="sr", seed=7,
                                                      offset=3)),
        ("quantize_torchao", "quantize", "5.4", q(normal[:64, :32], columnwise=True, rule="torchao")),
        ("quantize_one_row_f16", "quantize", "4-6", q(rng.standard_normal((1, 16)).astype(np.float16))),
        ("group_quantize_moe", "group_quantize", "9", gq(rng.standard_normal((100, 64)).astype(bf16),
                                                         [0, 37, 0, 16, 47], columnwise=True, rht=True)),
        ("gemm_17x24x64", "gemm", "12", mm(rng.standard_normal((17, 64)).astype(bf16),
                                           rng.standard_normal((24, 64)).astype(bf16),
                                           bias=rng.standard_normal(24).astype(np.float32))),
        ("grouped_gemm_fprop", "grouped_gemm", "9.2, 12.5", ggemm(rng.standard_normal((70, 64)).astype(bf16),
                                                                  (rng.standard_normal((4 * 40, 64)) * 0.1).astype(bf16),
                                                                  [0, 33, 1, 36], 40)),
        ("swizzle_130x7", "swizzle_scales", "8.2", swz(rng.integers(0, 256, (130, 7), dtype=np.uint8))),
    ]


def _json(obj) -> str:
    """Indented JSON with every innermost object (an array entry, an index row) on one line."""
    def nested(x) -> bool:
        return isinstance(x, dict) or (isinstance(x, list) and bool(x) and isinstance(x[0], dict))

    def render(v, depth):
        if isinstance(v, dict) and any(nested(x) for x in v.values()):
            pad = " " * (depth + 1)
            body = ",\n".join(f"{pad}{json.dumps(k)}: {render(x, depth + 1)}" for k, x in v.items())
            return "{\n" + body + "\n" + " " * depth + "}"
        if isinstance(v, list) and v and isinstance(v[0], dict):
            pad = " " * (depth + 1)
            return "[\n" + ",\n".join(pad + render(x, depth + 1) for x in v) + "\n" + " " * depth + "]"
        return json.dumps(v)
    return render(obj, 0) + "\n"


def write_vectors(out_dir, *, seed: int = 0) -> list[str]:
    """Write the golden vector set to ``out_dir`` (created; existing case folders are overwritten, their old ``.bin`` files removed); the case
    folder names, in order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for i, (name, op, spec, build) in enumerate(_cases(np.random.default_rng(seed))):
        folder = out / f"{i:02d}_{name}"
        folder.mkdir(exist_ok=True)
        for stale in folder.glob("*.bin"):  # (a rewrite leaves only this version's arrays)
            stale.unlink()
        ins, opts, outs = build()
        meta = {"format_version": FORMAT_VERSION, "op": op, "spec": spec, "options": opts, "seed": seed,
                "inputs": _write_arrays(folder, ins), "outputs": _write_arrays(folder, outs)}
        (folder / "case.json").write_text(_json(meta))
        index.append({"folder": folder.name, "op": op, "spec": spec})
    (out / "index.json").write_text(_json({"format_version": FORMAT_VERSION, "cases": index}))
    return [e["folder"] for e in index]
