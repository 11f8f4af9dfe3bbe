"""Golden test vectors on disk, for kernels tested outside Python (``python -m oracle vectors OUT_DIR``).

Every case is a folder holding ``case.json`` and one raw ``.bin`` file per array (little-endian, C order, no
header); ``index.json`` in OUT_DIR lists the cases and defines the names case.json uses (:data:`CONVENTIONS`).
``case.json`` gives the format version, the op, its keyword options, the SPEC sections it exercises, the seed of the
generated inputs (``seed``; a quantizer's own SR seed is ``options.seed``), and for every input and output array its
file, dtype and shape, plus for scale arrays their ``layout``: "compact" (SPEC 8.1, ``[rows, cols / 16]``
row-major), "swizzled" (SPEC 8.2's 128x4 tiles, zero padding included), "grouped_swizzled" or
"grouped_padded_compact" (SPEC 9.2: each group's swizzled, or zero-padded compact, scales at its scale offset).
bfloat16 arrays are stored as their uint16 bit patterns (dtype "bfloat16"); a scalar (an amax, alpha) is an array of
shape [1]. Inputs come from the seed, outputs from the oracle, so a kernel's test reads the inputs, runs, and
compares bytes. The GEMM cases' operands nearly cancel block against block, so that the models' roundings (SPEC
12.2, 12.3, 12.6, 12.7) give different bytes.

:func:`write_vectors` writes the set, :func:`read_case` reads one case back.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from .four_over_six import block_row_candidates, tile_error_sum
from .gemm import gemm, gemm_alpha
from .grouped import group_quantize
from .grouped_gemm import grouped_gemm
from .quantize import quantize
from .swizzle import swizzle_scales

__all__ = ["CONVENTIONS", "read_case", "tree_order_tiles", "write_vectors"]

FORMAT_VERSION = 1
_DTYPES = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32, "uint8": np.uint8,
           "int64": np.int64}


#: what the names in case.json mean (index.json repeats it, so that the files describe themselves)
CONVENTIONS = {
    "files": "one raw .bin per array: little-endian, C order, no header; a scalar is an array of shape [1]",
    "dtype bfloat16": "the uint16 bit patterns of bf16 values",
    "packed data (uint8 *_data)": "two E2M1 codes per byte, element 2i in the low nibble (SPEC 2.3); the shape counts "
                                  "bytes: [rows, cols / 2]",
    "layout compact": "E4M3 scale bytes [rows, cols / 16], row-major (SPEC 8.1)",
    "layout swizzled": "the 128x4 tiled layout, padded to [roundup(rows, 128), roundup(cols / 16, 4)] with zeros "
                       "(SPEC 8.2)",
    "layout grouped_swizzled": "each group's swizzled scales (SPEC 8.2) at its scale offset in one flat buffer "
                               "(SPEC 9.2)",
    "layout grouped_padded_compact": "each group's scales in the padded compact form, [roundup(rows, 128), "
                                     "roundup(cols / 16, 4)] row-major with zeros in the padding (SPEC 8.1), at its "
                                     "scale offset in one flat buffer (SPEC 9.2)",
}


def _dtype_name(a: np.ndarray) -> str:
    name = "bfloat16" if a.dtype == ml_dtypes.bfloat16 else a.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"no vector file format for dtype {a.dtype}")
    return name


#: the layout of each scale array a case writes, by op (module docstring)
_SCALE_LAYOUTS = {
    "quantize": {"row_scales": "compact", "col_scales": "compact", "row_scales_swizzled": "swizzled",
                 "col_scales_swizzled": "swizzled"},
    "group_quantize": {"row_scales": "grouped_swizzled", "col_scales": "grouped_swizzled",
                       "row_scales_compact": "grouped_padded_compact", "col_scales_compact": "grouped_padded_compact"},
    "gemm": {"a_scales": "compact", "b_scales": "compact"},
    "grouped_gemm": {"a_scales": "grouped_swizzled", "b_scales": "grouped_swizzled"},
    "swizzle_scales": {"compact": "compact", "swizzled": "swizzled"},
}


def _write_arrays(folder: Path, arrays: dict, layouts: dict) -> dict:
    """Write each array to ``<name>.bin``; return its {file, dtype, shape} entries (and ``layout`` where ``layouts``
    names the array)."""
    entries = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a.reshape(1) if a.ndim == 0 else a
        dt = _dtype_name(a)
        raw = np.ascontiguousarray(a).view(_DTYPES[dt]) if dt == "bfloat16" else np.ascontiguousarray(a)
        raw.astype(raw.dtype.newbyteorder("<"), copy=False).tofile(folder / f"{name}.bin")
        entries[name] = {"file": f"{name}.bin", "dtype": dt, "shape": list(a.shape)}
        if name in layouts:
            entries[name]["layout"] = layouts[name]
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
    """NaN, -0, a block of bf16 subnormals and an outlier that sets the (finite) amax."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, np.nan]
    x[1, :16] = 2.0**-133  # bf16 subnormals: a block of them
    x[2, 5] = 3.0e4  # an outlier that sets the amax
    return x.astype(ml_dtypes.bfloat16)


def _infinities(rng, m: int, k: int) -> np.ndarray:
    """+-Inf beside NaN and finite values: the amax is +Inf, so S_enc = 1 (SPEC 4.1, 5.1)."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, 5.0]
    x[3, 17] = -np.inf
    return x.astype(ml_dtypes.bfloat16)


def _near_cancelling(rng, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GEMM operands a [m, k] and b [n, k] (bf16) and a bias [n]: a's 16-blocks come in equal pairs with a power-of-two
    factor in [2^-10, 2^10] per pair, and b's second block of each pair is the first's negative changed by about 2%,
    so the block products nearly cancel and the sum's rounding decides the low bits."""
    a = rng.standard_normal((m, k // 32, 1, 16)) * np.exp2(rng.integers(-10, 11, (m, k // 32, 1, 1)))
    a = np.repeat(a, 2, axis=2).reshape(m, k)
    b0 = rng.standard_normal((n, k // 32, 16)) * np.exp2(rng.integers(-10, 11, (n, k // 32, 1)))
    b = np.stack([b0, -b0 * (1 + 0.02 * rng.standard_normal(b0.shape))], axis=2).reshape(n, k)
    bf16 = ml_dtypes.bfloat16
    return a.astype(np.float32).astype(bf16), b.astype(np.float32).astype(bf16), rng.standard_normal(n).astype(np.float32)


def _fast_math_choices(rng: np.random.Generator, rows: int = 8, k: int = 64, flips: int = 8) -> np.ndarray:
    """bf16 ``[rows, k]`` for TE's 4over6 with the fast-math MAE (SPEC 5.6): ``flips`` of its 1x16 blocks choose the
    other candidate than the input-domain error would (a few random blocks in 10,000 do), the others do not. Blocks
    have random amaxes up to 4.375 and the first block reaches it, so the tensor's amax, and with it every block's
    choice, is the same as in the pool the blocks are drawn from."""
    a = 4.375  # (exact in bf16: x / max|x| * a is +-a exactly at the maximum)
    pool = rng.standard_normal((1 << 15, 16))
    pool = pool / np.abs(pool).max(axis=1, keepdims=True) * (a * np.exp2(-3.0 * rng.random((len(pool), 1))))
    pool[0] *= a / np.abs(pool[0]).max()
    pool = pool.astype(ml_dtypes.bfloat16)
    fast, exact = (quantize(pool, four_over_six="mae", four_over_six_fast_math=f).row.scales[:, 0]
                   for f in (True, False))
    differ, same = np.flatnonzero(fast != exact), np.flatnonzero(fast == exact)
    if differ.size < flips:
        raise RuntimeError(f"{differ.size} of {len(pool)} random blocks choose by the fast-math error otherwise; "
                           f"the case needs {flips}")
    blocks = np.concatenate([pool[same[:1]], pool[differ[:flips]], pool[same[1: rows * k // 16 - flips]]])
    return blocks.reshape(rows, k)  # (the amax block 0 is same[0] or differ[0]: either way it is kept)


def _sum_from_zero(e: np.ndarray) -> np.float32:
    """The elements of ``e`` added one by one to +0 in fp32, in order."""
    return functools.reduce(lambda s, v: np.float32(s + v), e, np.float32(0.0))


#: orders in which a kernel might sum a 16x16 tile's 16 row errors other than SPEC 5.6's tree (on float32 [16])
OTHER_TILE_SUM_ORDERS: dict[str, Callable[[np.ndarray], float]] = {
    "rows in order": _sum_from_zero,
    "rows in reverse": lambda e: _sum_from_zero(e[::-1]),
    "adjacent rows first": lambda e: functools.reduce(
        lambda t, _: (t[0::2] + t[1::2]).astype(np.float32), range(4), np.asarray(e, np.float32))[0],
    "float64": lambda e: float(np.sum(e, dtype=np.float64)),
}


def tree_order_tiles(rng: np.random.Generator, count: int = 2, mode: str = "mse") -> list[np.ndarray]:
    """``count`` bf16 16x16 tiles, for a plane whose amax is 6 (SPEC 5.6: 4over6, 16x16 blocks, input-domain
    ``mode`` error, G = 448), whose choice SPEC 5.6's tree of the row errors makes and every sum order of
    :data:`OTHER_TILE_SUM_ORDERS` would make otherwise. Random tiles almost never tell the orders apart (none of 4,096
    did), so the rows come from a pool of random rows under the tile max 3 (row 0 holds it), picked so that the two
    candidates' error totals nearly tie: 12 rows whose candidates' errors are close, then three more whose differences
    cancel the rest (a nearest sum from a sorted table of pairs), in random order after row 0."""
    b, amax, n = 3.0, np.float32(6.0), 1 << 14
    pool = rng.standard_normal((n, 16)) * np.exp2(rng.uniform(-3.0, 0.0, (n, 1)))
    pool = np.clip(pool, -b, b).astype(ml_dtypes.bfloat16).astype(np.float32)
    pool[0, 0] = b
    c = block_row_candidates(pool, np.full((n, 1), b, np.float32), amax=amax, mode=mode, domain="input",
                             global_scale_max=448)
    e6, e4 = c.err6[:, 0], c.err4[:, 0]
    d = e6.astype(np.float64) - e4
    close = np.flatnonzero(np.abs(d) < 0.02)
    close = close[close > 0]
    pairs = rng.integers(1, n, 3000)
    ii, jj = np.triu_indices(pairs.size, 1)
    pair_d = d[pairs[ii]] + d[pairs[jj]]
    by_d = np.argsort(pair_d)
    sorted_d = pair_d[by_d]
    tiles: list[np.ndarray] = []
    for _ in range(50):
        rows = np.concatenate([[0], rng.choice(close, 12)])
        rest, tolerance = d[rows].sum(), 1e-6 * e6[rows].sum()
        third = rng.integers(1, n, 4000)
        at = np.clip(np.searchsorted(sorted_d, -rest - d[third]), 1, sorted_d.size - 1)
        for k, p in zip(third, at, strict=True):
            for q in (p - 1, p):
                if abs(sorted_d[q] + d[k] + rest) > tolerance:
                    continue
                tile = np.concatenate([rows, [k, pairs[ii[by_d[q]]], pairs[jj[by_d[q]]]]])
                rng.shuffle(tile[1:])
                pick4 = tile_error_sum(e4[tile, None])[0, 0] < tile_error_sum(e6[tile, None])[0, 0]
                if all((order(e4[tile]) < order(e6[tile])) != pick4 for order in OTHER_TILE_SUM_ORDERS.values()):
                    tiles.append(pool[tile].astype(ml_dtypes.bfloat16))
                    if len(tiles) == count:
                        return tiles
    raise RuntimeError(f"found {len(tiles)} of {count} tiles that tell the tile sum orders apart")


def _tree_order_tensor(rng: np.random.Generator) -> np.ndarray:
    """bf16 [32, 32]: two :func:`tree_order_tiles`, the first as X's tile (0, 0) for the rowwise plane, the second
    transposed at tile (0, 1), so that the columnwise plane (X^T) has it as its tile of plane rows 16-31; tile (1, 0)
    holds the amax 6 among random values, tile (1, 1) random values."""
    for_rows, for_cols = tree_order_tiles(rng)
    x = np.clip(rng.standard_normal((32, 32)), -3.0, 3.0).astype(ml_dtypes.bfloat16)
    x[:16, :16], x[:16, 16:] = for_rows, for_cols.T
    x[21, 5] = 6.0
    return x


def _cases(seed: int) -> list[tuple[str, str, str, Callable[[], tuple[dict, dict, dict]]]]:
    """(name, op, SPEC sections, build) of every case; build() gives (inputs, options, outputs). The GEMM cases draw
    from their own streams of ``seed``."""
    rng = np.random.default_rng(seed)
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
        models = ("sequential", "tensor_core", "sm100", "exact")

        def build():
            pa, pb = quantize(a).row, quantize(b, block=(16, 16)).row
            ins = {"a_data": pa.data, "a_scales": pa.scales, "a_amax": np.float32(pa.amax),
                   "b_data": pb.data, "b_scales": pb.scales, "b_amax": np.float32(pb.amax)}
            out = {"alpha": gemm_alpha(pa, pb)}
            for model in models:
                for od in ("bfloat16", "float32"):
                    out[f"y_{model}_{od}"] = gemm(pa, pb, model=model, out_dtype=od, **o)
            ins.update({k: v for k, v in o.items() if isinstance(v, np.ndarray)})
            opts = {"a": _with_defaults(quantize, {}), "b": _with_defaults(quantize, {"block": (16, 16)}),
                    "gemm": {"model": list(models), "out_dtype": ["bfloat16", "float32"], "bias": "bias" in o,
                             "alpha": "from the amaxes", "accumulate": None},
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
                    "b": _with_defaults(group_quantize, {"block": (16, 16)}), "N": n, "K": x.shape[1],
                    "b_splits": [n] * e,
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
    gemm_a, gemm_b, gemm_bias = _near_cancelling(np.random.default_rng([seed, 0]), 17, 24, 256)
    moe_x, moe_w, _ = _near_cancelling(np.random.default_rng([seed, 1]), 70, 4 * 40, 256)
    fo6_rng = np.random.default_rng([seed, 2])
    fo6_x = (fo6_rng.standard_normal((48, 64)) * np.exp2(fo6_rng.integers(-4, 5, (48, 1)))).astype(bf16)
    fast_math_x = _fast_math_choices(np.random.default_rng([seed, 3]))
    tree_order_x = _tree_order_tensor(np.random.default_rng([seed, 4]))
    return [
        ("quantize_te_wgrad", "quantize", "4-8", q(normal, columnwise=True, rht=True)),
        ("quantize_specials_17x48", "quantize", "3-6, 8, 13", q(_specials(rng, 17, 48), columnwise=True)),
        ("quantize_inf_16x32", "quantize", "4.1, 5.1, 5.2, 13", q(_infinities(rng, 16, 32), columnwise=True)),
        ("quantize_ties", "quantize", "3.1, 5", q(_ties(np.float32))),
        ("quantize_16x16_sr", "quantize", "3.4, 6.3, 10", q(rng.standard_normal((33, 64)).astype(np.float32),
                                                      columnwise=True, block=(16, 16), rounding="sr", seed=7,
                                                      offset=3)),
        ("quantize_torchao", "quantize", "5.4", q(normal[:64, :32], columnwise=True, rule="torchao")),
        ("quantize_one_row_f16", "quantize", "4-6", q(rng.standard_normal((1, 16)).astype(np.float16))),
        ("group_quantize_moe", "group_quantize", "9", gq(rng.standard_normal((100, 64)).astype(bf16),
                                                         [0, 37, 0, 16, 47], columnwise=True, rht=True)),
        ("gemm_17x24x256", "gemm", "12", mm(gemm_a, gemm_b, bias=gemm_bias)),
        ("grouped_gemm_fprop", "grouped_gemm", "9.2, 12.5", ggemm(moe_x, moe_w, [0, 33, 1, 36], 40)),
        ("swizzle_130x7", "swizzle_scales", "8.2", swz(rng.integers(0, 256, (130, 7), dtype=np.uint8))),
        # TE's 4over6 and row scaling (rows scaled by powers of two: about 4 blocks in 10 take map-to-4)
        ("quantize_4over6_mse", "quantize", "5.6, 6", q(fo6_x[:48], columnwise=True, four_over_six="mse")),
        ("quantize_4over6_mae_16x16_fast_g256", "quantize", "5.6, 6.3",
         q(fo6_x[:33], columnwise=True, block=(16, 16), four_over_six="mae", four_over_six_fast_math=True,
           global_scale_max=256)),
        ("quantize_row_scaled_4over6", "quantize", "5.6, 5.7", q(fo6_x[:20], row_scaled=True, four_over_six="mae")),
        # the fast-math error's own choices (the 16x16 case above gives the same bytes either way: its tile sums)
        ("quantize_4over6_fast_math_choices", "quantize", "5.6",
         q(fast_math_x, four_over_six="mae", four_over_six_fast_math=True)),
        # SPEC 5.6's tree of a 16x16 tile's row errors: other sum orders choose otherwise in one tile of each plane
        ("quantize_4over6_16x16_tree_order", "quantize", "5.6, 6.3",
         q(tree_order_x, columnwise=True, block=(16, 16), four_over_six="mse")),
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
    for i, (name, op, spec, build) in enumerate(_cases(seed)):
        folder = out / f"{i:02d}_{name}"
        folder.mkdir(exist_ok=True)
        for stale in folder.glob("*.bin"):  # (a rewrite leaves only this version's arrays)
            stale.unlink()
        ins, opts, outs = build()
        layouts = _SCALE_LAYOUTS.get(op, {})
        meta = {"format_version": FORMAT_VERSION, "op": op, "spec": spec, "options": opts, "seed": seed,
                "inputs": _write_arrays(folder, ins, layouts), "outputs": _write_arrays(folder, outs, layouts)}
        (folder / "case.json").write_text(_json(meta))
        index.append({"folder": folder.name, "op": op, "spec": spec})
    (out / "index.json").write_text(_json({"format_version": FORMAT_VERSION, "byte_order": "little", "array_order": "C",
                                           "conventions": CONVENTIONS, "cases": index}))
    return [e["folder"] for e in index]
