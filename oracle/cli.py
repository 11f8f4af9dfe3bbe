"""Command line: ``python -m oracle explain`` / ``quantize`` (debugging) and ``vectors`` (golden test vectors)."""

from __future__ import annotations

import argparse
import json
import sys

import ml_dtypes
import numpy as np

from .dequantize import block_decode_scales
from .fp4_numpy import E2M1_VALUES, decode_e4m3, unpack_fp4
from .quantize import as_2d_f32, block_scales, columnwise_source, quantize
from .rht import DEFAULT_RHT_SIGNS
from .scale_rules import RULES

__all__ = ["main"]


def _load(path: str, input_dtype: str) -> np.ndarray:
    """Load an .npy; ``--input-dtype bfloat16`` reinterprets 2-byte elements, float32/float16 convert."""
    x = np.load(path, allow_pickle=False)
    two_byte = x.dtype.itemsize == 2 and x.dtype.kind in "Vu"
    if input_dtype == "bfloat16" or (input_dtype == "auto" and x.dtype.kind == "V" and x.dtype.itemsize == 2):
        if x.dtype.itemsize != 2:
            raise ValueError(f"--input-dtype bfloat16 needs 2-byte elements, got {x.dtype}")
        return x.view(np.uint16).view(ml_dtypes.bfloat16)
    if input_dtype in ("float32", "float16"):
        if two_byte and x.dtype.kind == "V":  # a saved bf16 array: decode it before converting
            x = x.view(np.uint16).view(ml_dtypes.bfloat16)
        return x.astype(input_dtype)
    return x


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"],
                   help="interpret the .npy data as this dtype (bfloat16 reinterprets 2-byte elements)")
    p.add_argument("--rht", action="store_true", help="RHT on the columnwise plane (bf16 input)")
    p.add_argument("--rht-signs", type=lambda s: int(s, 0), default=DEFAULT_RHT_SIGNS)
    p.add_argument("--block", default="1x16", choices=["1x16", "16x16"])
    p.add_argument("--rule", default="te", choices=list(RULES))
    p.add_argument("--amax", type=float, nargs="+", default=None, metavar="A",
                   help="use this amax instead of computing it (two values: row amax, col amax)")
    p.add_argument("--rounding", default="rn", choices=["rn", "sr"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--offset", type=int, default=0)


def _opts(a) -> dict:
    return dict(
        rht=a.rht, rht_signs=a.rht_signs, block=(1, 16) if a.block == "1x16" else (16, 16), rule=a.rule,
        amax=None if a.amax is None else (a.amax[0] if len(a.amax) == 1 else tuple(a.amax)), rounding=a.rounding,
        seed=a.seed, offset=a.offset,
    )


def _fmt(v) -> str:
    return f"{float(v):.6g}"


def explain(a) -> int:
    """Print, block by block, how one row of one plane was quantized."""
    x = _load(a.input, a.input_dtype)
    opts = _opts(a)
    col = a.plane == "col"
    t = quantize(x, rowwise=not col, columnwise=col, **opts)
    plane = t.col if col else t.row
    if not 0 <= a.row < plane.rows:
        raise ValueError(f"--row {a.row} is outside the {a.plane} plane's {plane.rows} rows")
    x2, _ = as_2d_f32(x)
    src = columnwise_source(x2, opts["rht"], opts["rht_signs"]) if col else x2
    b, sbytes, mult = block_scales(src, amax=plane.amax, rule=plane.rule, block=plane.block)
    codes = unpack_fp4(plane.data, plane.cols)[a.row]
    fac = block_decode_scales(plane)[a.row]
    print(f"plane={a.plane} shape={plane.shape} rule={plane.rule} block={plane.block} rht={plane.rht} "
          f"rounding={opts['rounding']} amax={_fmt(plane.amax)} (bits 0x{np.float32(plane.amax).view(np.uint32):08X})")
    for k in range(plane.cols // 16):
        vals = src[a.row, 16 * k : 16 * k + 16]
        c = codes[16 * k : 16 * k + 16]
        deq = (E2M1_VALUES[c] * fac[k]).astype(np.float32)
        with np.errstate(invalid="ignore"):
            err = np.abs(deq.astype(np.float64) - vals.astype(np.float64))
        print(f"block {k}: block_amax={_fmt(b[a.row, k])} scale=0x{sbytes[a.row, k]:02X} "
              f"({_fmt(decode_e4m3(sbytes[a.row, k]))}) multiplier={_fmt(mult[a.row, k])} factor={_fmt(fac[k])}")
        print("  input   " + " ".join(f"{_fmt(v):>9}" for v in vals))
        print("  code    " + " ".join(f"0x{v:X}".rjust(9) for v in c))
        print("  dequant " + " ".join(f"{_fmt(v):>9}" for v in deq))
        print("  |error| " + " ".join(f"{_fmt(v):>9}" for v in err))
    return 0


def quantize_to_npz(a) -> int:
    """Write every plane and buffer of one quantization to an .npz (loadable with allow_pickle=False)."""
    x = _load(a.input, a.input_dtype)
    opts = _opts(a)
    t = quantize(x, rowwise=True, columnwise=not a.no_columnwise, **opts)
    out = {}
    for name, p in (("row", t.row), ("col", t.col)):
        if p is None:
            continue
        out[f"{name}_data"] = p.data
        out[f"{name}_scales"] = p.scales
        out[f"{name}_scales_swizzled"] = p.swizzled_scales()
        out[f"{name}_amax"] = np.array(p.amax, np.float32)
        out[f"{name}_shape"] = np.array(p.shape, np.int64)
    opts_json = {**opts, "block": list(opts["block"]), "shape": list(t.shape)}
    if isinstance(opts_json["amax"], tuple):
        opts_json["amax"] = list(opts_json["amax"])
    out["options_json"] = np.array(json.dumps(opts_json))
    np.savez(a.output, **out)
    print(f"wrote {a.output}: " + ", ".join(f"{k} {v.shape}" for k, v in out.items()))
    return 0


def write_vectors_cmd(a) -> int:
    """Write the golden vector set (oracle.vectors) and list its cases."""
    from .vectors import write_vectors

    names = write_vectors(a.output, seed=a.seed)
    print(f"wrote {len(names)} cases to {a.output} (index.json; each folder: case.json + raw .bin files)")
    for n in names:
        print(f"  {n}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m oracle``."""
    p = argparse.ArgumentParser(prog="python -m oracle", description="NVFP4 oracle tools (see SPEC.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("explain", help="print how one row of a plane is quantized, block by block")
    e.add_argument("input", help=".npy file (2-D or N-D, last dim a multiple of 16)")
    e.add_argument("--row", type=int, required=True, help="row of the plane (for --plane col: a column of X)")
    e.add_argument("--plane", default="row", choices=["row", "col"])
    _add_options(e)
    q = sub.add_parser("quantize", help="quantize an .npy file and write every plane and buffer to an .npz")
    q.add_argument("input")
    q.add_argument("output")
    q.add_argument("--no-columnwise", action="store_true", help="only the rowwise plane")
    _add_options(q)
    v = sub.add_parser("vectors", help="write golden test vectors (raw .bin files + case.json) to a folder")
    v.add_argument("output", help="folder to write (created)")
    v.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    a = p.parse_args(argv)
    try:
        if a.cmd == "vectors":
            return write_vectors_cmd(a)
        return explain(a) if a.cmd == "explain" else quantize_to_npz(a)
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
