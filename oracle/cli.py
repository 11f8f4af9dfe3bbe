"""Command line: ``python -m oracle explain`` / ``quantize`` / ``diagnose`` (debugging) and ``vectors`` (golden test
vectors)."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import zipfile

import ml_dtypes
import numpy as np

from .dequantize import block_decode_scales
from .diagnose import DIAGNOSE_RULES, LAYOUTS, diagnose, format_block
from .fp4_numpy import E2M1_VALUES, decode_e4m3, unpack_fp4
from .quantize import as_2d_f32, block_scales, columnwise_source, quantize
from .rht import DEFAULT_RHT_SIGNS
from .scale_rules import RULES

__all__ = ["THEIRS_KEYS", "build_parser", "check_input", "main", "read_theirs"]

INPUT_DTYPES = ("auto", "float32", "float16", "bfloat16")

#: how to hand the CLI bf16 data (shown under ``explain --help`` and ``quantize --help``)
BF16_INPUT_HELP = """\
bf16 input (--rht needs it, SPEC 7.3). Either of:
  an ml_dtypes.bfloat16 array saved with np.save (it loads as 2-byte void, which
  --input-dtype auto reads as bfloat16):
    np.save("x.npy", x.astype(ml_dtypes.bfloat16))
  a uint16 (or int16) array holding bf16 bit patterns, with --input-dtype bfloat16:
    np.save("x.npy", x.astype(ml_dtypes.bfloat16).view(np.uint16))
A float32 or float16 file is not bf16: convert it with x.astype(ml_dtypes.bfloat16)
before np.save (the CLI does not round values to bf16).

example:
  {example}"""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default in its help, except where there is none (``None``) or the help names it itself;
    descriptions and epilogs as written."""

    def _get_help_string(self, action):
        h = action.help or ""
        if action.default is None or "%(default)" in h or "(default:" in h:
            return h
        return super()._get_help_string(action)


def _integer(s: str) -> int:
    """An integer in any base Python reads (``0xD7E8``, ``55272``, ``0b...``)."""
    return int(s, 0)


_integer.__name__ = "integer"  # argparse's "invalid integer value: ..."


def _rule_names(s: str) -> list[str]:
    """``--rules``: comma-separated rule names, at least one."""
    names = [r.strip() for r in s.split(",") if r.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{s!r} names no rule (give one or more, comma-separated)")
    return names


def _load(path: str, input_dtype: str) -> np.ndarray:
    """Load an .npy. ``auto``: as stored, a saved ml_dtypes.bfloat16 array (2-byte void) read as bfloat16;
    ``bfloat16``: the 2-byte integer or void elements reinterpreted as bf16 bit patterns; ``float32`` /
    ``float16``: the values converted (a saved bfloat16 array decoded first)."""
    with _open_read(path) as f:
        magic = f.read(len(np.lib.format.MAGIC_PREFIX))
        if magic != np.lib.format.MAGIC_PREFIX:
            what = "an .npz archive" if magic[:2] == b"PK" else "not an .npy file"
            raise ValueError(f"{path} is {what}; X must be one array saved by np.save (.npy)")
        f.seek(0)
        try:
            x = np.load(f, allow_pickle=False)
        except EOFError:
            raise ValueError(f"{path} is a truncated .npy file (it ends before its data)") from None
    if x.dtype.kind == "c":
        raise TypeError(f"{path} holds complex values ({x.dtype}); NVFP4 quantizes real numbers")
    two_byte = x.dtype.itemsize == 2 and x.dtype.kind in "Vu"
    if input_dtype == "bfloat16" or (input_dtype == "auto" and x.dtype.kind == "V" and x.dtype.itemsize == 2):
        if x.dtype.itemsize != 2:
            raise ValueError(f"--input-dtype bfloat16 needs 2-byte elements, got {x.dtype}")
        if x.dtype.kind == "f":
            raise ValueError(
                f"--input-dtype bfloat16 reads the elements as bf16 bit patterns, but {path} holds {x.dtype} "
                "values; convert them with x.astype(ml_dtypes.bfloat16) before np.save")
        return x.view(np.uint16).view(ml_dtypes.bfloat16)
    if input_dtype in ("float32", "float16"):
        if two_byte and x.dtype.kind == "V":  # a saved bf16 array: decode it before converting
            x = x.view(np.uint16).view(ml_dtypes.bfloat16)
        elif two_byte:
            print(f"note: --input-dtype {input_dtype} converts the {x.dtype} values of {path} as numbers; if they "
                  "are bf16 bit patterns, pass --input-dtype bfloat16", file=sys.stderr)
        return _convert(x, input_dtype, path)
    return x


def _open_read(path: str):
    """``path`` opened for reading bytes, seekable: a pipe or FIFO (``<(cat x.npy)``) is read into memory once, so
    that the file is opened a single time."""
    f = open(path, "rb")  # (closed by the caller's with, or below)
    if f.seekable():
        return f
    with f:
        return io.BytesIO(f.read())


def _convert(x: np.ndarray, dtype: str, path: str) -> np.ndarray:
    """``x.astype(dtype)`` (--input-dtype float32 / float16), with a note on stderr when that changed values: how
    many were rounded, and how many overflowed to +-Inf (a conversion the user asked for, so not an error)."""
    with np.errstate(invalid="ignore", over="ignore"):
        y = x.astype(dtype)
        if x.dtype == y.dtype:
            return y
        before, after = x.astype(np.float64), y.astype(np.float64)
    changed = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    n = int(np.count_nonzero(changed))
    if n:
        inf = int(np.count_nonzero(np.isinf(after) & ~np.isinf(before)))
        print(f"note: --input-dtype {dtype} changed {n} of {x.size} values of {path} ({x.dtype} -> {dtype})"
              + (f", {inf} of them to +-Inf (past {dtype}'s range)" if inf else ""), file=sys.stderr)
    return y


def check_input(x, what: str = "the input") -> None:
    """Refuse, in the CLI's words, an input :func:`oracle.quantize` cannot take: a NumPy scalar (an np.float32
    or a 0-d array, e.g. ``np.save`` of a scalar), or a dtype other than float32 / float16 / bfloat16."""
    if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0):
        raise ValueError(
            f"{what} is a NumPy scalar (a 0-d array, shape ()), not a matrix: explain and quantize need an array "
            "of at least one dimension whose last dimension is a multiple of 16, e.g. shape (1, 16)")
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what} must be a NumPy array, got {type(x).__name__}")
    if x.dtype.kind in "iu" and x.dtype.itemsize == 2:
        raise TypeError(f"{what} holds {x.dtype}: if those are bf16 bit patterns, pass --input-dtype bfloat16")
    if x.dtype.kind == "V" and x.dtype.name != "bfloat16":
        raise TypeError(f"{what} holds raw {x.dtype.itemsize}-byte elements ({x.dtype}; np.save stores ml_dtypes "
                        "types other than bfloat16 that way); the oracle takes float32, float16 or bfloat16")
    if x.dtype.newbyteorder("=") not in (np.float32, np.float16) and x.dtype.name != "bfloat16":
        raise TypeError(f"{what} holds {x.dtype}; the oracle takes float32, float16 or bfloat16 "
                        "(see --input-dtype)")


def _check_rht(x: np.ndarray, what: str, columnwise: bool, plane_flag: str) -> None:
    """--rht's preconditions in the CLI's words (SPEC 7.3): bf16 input, and the columnwise plane."""
    if x.dtype.name != "bfloat16":
        raise TypeError(
            f"--rht needs bf16 input (SPEC 7.3) and {what} holds {x.dtype}: save an ml_dtypes.bfloat16 array with "
            "np.save, or pass bf16 bit patterns in a uint16 array with --input-dtype bfloat16 (see --help)")
    if not columnwise:
        raise ValueError(f"--rht applies to the columnwise plane only (SPEC 7.3); {plane_flag}")


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-dtype", default="auto", choices=INPUT_DTYPES,
                   help="how to read the .npy: auto = as stored (a saved ml_dtypes.bfloat16 array is read as "
                        "bfloat16); bfloat16 = the file's 2-byte elements (uint16, int16 or a saved bfloat16 "
                        "array) are bf16 bit patterns; float32 / float16 = convert the values to that dtype "
                        "(a saved bfloat16 array is decoded first; a note on stderr counts the values the "
                        "conversion changed)")
    p.add_argument("--rht", action="store_true",
                   help="apply the Random Hadamard Transform to the columnwise plane only (SPEC 7); needs bf16 input: "
                        "an ml_dtypes.bfloat16 array saved with np.save, or a uint16 array of bf16 bit patterns "
                        "with --input-dtype bfloat16")
    p.add_argument("--rht-signs", type=_integer, default=DEFAULT_RHT_SIGNS, metavar="MASK",
                   help="16-bit RHT sign mask, bit i set <=> sign -1 (SPEC 7.1); any base, e.g. 0xD7E8 "
                        "(default: 0x%(default)04X)")
    p.add_argument("--block", default="1x16", choices=["1x16", "16x16"],
                   help="scale block shape: 1x16, or 16x16 tiles for weights (SPEC 6.3)")
    p.add_argument("--rule", default="te", choices=list(RULES), help="scale rule (SPEC 5)")
    p.add_argument("--amax", type=float, nargs="+", default=None, metavar="A",
                   help="use this amax instead of computing it (SPEC 4.3): one value for both planes, or two "
                        "(row amax, col amax) (default: computed from the input, SPEC 4)")
    p.add_argument("--rounding", default="rn", choices=["rn", "sr"],
                   help="rn = round to nearest even (SPEC 3.1), sr = stochastic rounding (SPEC 3.4)")
    p.add_argument("--seed", type=int, default=0, help="Philox key of the stochastic rounding (SPEC 10.2)")
    p.add_argument("--offset", type=int, default=0,
                   help="Philox counter offset of the stochastic rounding (SPEC 10.2)")


def _opts(a) -> dict:
    """oracle.quantize's keywords from the options of explain / quantize (a note on stderr for a --seed or --offset
    that round-to-nearest does not read)."""
    if a.rounding != "sr" and (a.seed or a.offset):
        print("note: --seed and --offset enter stochastic rounding only (--rounding sr); ignored", file=sys.stderr)
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
    check_input(x, a.input)
    col = a.plane == "col"
    if a.rht:
        _check_rht(x, a.input, col, "explain it with --plane col")
    opts = _opts(a)
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
    # under --rht the plane quantizes the RHT of each 16 tokens (SPEC 7.2, 7.3), not the input itself
    src_label = "rht(input)" if plane.rht else "input"
    if plane.rht:
        print(f"{src_label} = RHT of each 16 tokens (SPEC 7.2, signs 0x{opts['rht_signs']:04X}): the values quantized, "
              "and |error| is against them")
    for k in range(plane.cols // 16):
        vals = src[a.row, 16 * k : 16 * k + 16]
        c = codes[16 * k : 16 * k + 16]
        deq = (E2M1_VALUES[c] * fac[k]).astype(np.float32)
        with np.errstate(invalid="ignore"):
            err = np.abs(deq.astype(np.float64) - vals.astype(np.float64))
        print(f"block {k}: block_amax={_fmt(b[a.row, k])} scale=0x{sbytes[a.row, k]:02X} "
              f"({_fmt(decode_e4m3(sbytes[a.row, k]))}) multiplier={_fmt(mult[a.row, k])} factor={_fmt(fac[k])}")
        for line in format_block([(src_label, [_fmt(v) for v in vals]), ("code", [f"0x{v:X}" for v in c]),
                                  ("dequant", [_fmt(v) for v in deq]), ("|error|", [_fmt(v) for v in err])]):
            print(line)
    return 0


def quantize_to_npz(a) -> int:
    """Write every plane and buffer of one quantization to an .npz (loadable with allow_pickle=False)."""
    if os.path.exists(a.output) and os.path.samefile(a.input, a.output):
        raise ValueError(f"the output {a.output} is the input file: name another path for the .npz")
    if a.no_columnwise and a.amax is not None and len(a.amax) == 2:
        raise ValueError("--amax gives two values (rowwise, columnwise), but --no-columnwise writes no columnwise "
                         "plane: give one")
    x = _load(a.input, a.input_dtype)
    check_input(x, a.input)
    if a.rht:
        _check_rht(x, a.input, not a.no_columnwise, "drop --no-columnwise")
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
    buf = io.BytesIO()  # (a zip archive is written with seeks: /dev/stdout or a pipe could not take it directly)
    np.savez(buf, **out)
    with open(a.output, "wb") as f:  # the path as named (np.savez would append .npz to a name without it)
        f.write(buf.getbuffer())
    print(f"wrote {a.output}: " + ", ".join(f"{k} {v.shape}" for k, v in out.items()))
    return 0


#: the generic names of THEIRS.npz (data, scales, per-tensor value): either plane, told apart by --plane or the shape
THEIRS_GENERIC_KEYS = ("data", "scales", "amax")
#: the names ``diagnose`` looks for in THEIRS.npz, per plane: (data, scales, per-tensor value), first found wins
THEIRS_KEYS = {
    "row": (("row_data", "row_scales", "row_amax"),
            ("rowwise_data", "rowwise_scale_inv", "amax_rowwise"), ("qdata", "scale", "per_tensor_scale")),
    "col": (("col_data", "col_scales", "col_amax"), ("columnwise_data", "columnwise_scale_inv", "amax_columnwise")),
}

THEIRS_HELP = """THEIRS.npz holds their plane under one of these sets of names (the first set found is used):
  data, scales[, amax]                          any layout (see --layout), either plane (--plane, or
                                                  auto: from the data's shape and size)
  row_data, row_scales[, row_amax]              python -m oracle quantize's output
  col_data, col_scales[, col_amax]                (--plane col for the columnwise plane)
  rowwise_data, rowwise_scale_inv[, amax_rowwise]   TE's NVFP4Tensor fields
  columnwise_data, columnwise_scale_inv[, amax_columnwise]
  qdata, scale[, per_tensor_scale]              torchao's NVFP4Tensor fields (P = amax / 2688)
Scales may be uint8 or float8_e4m3fn bytes (saved as uint8). A flashinfer result: save its
two outputs as data and scales (128x4, 8x4 or linear layout; --layout flashinfer) and its
global_scale as amax; the report then says that the value given is S_enc rather than the amax.

examples:
  python -m oracle diagnose x.npy theirs.npz
  python -m oracle diagnose x.npy te_fields.npz --layout te --plane col"""


def read_theirs(path: str, plane: str) -> tuple:
    """(data, scales, amax or None, plane) from THEIRS.npz: the generic names :data:`THEIRS_GENERIC_KEYS` first (the
    plane then stays ``plane``, "auto" included, for :func:`oracle.diagnose` to tell from the data), else the
    per-plane names of :data:`THEIRS_KEYS` (a torchao per_tensor_scale is turned into its amax, SPEC 14.10)."""
    from .interop import amax_from_torchao_scale

    with _open_read(path) as f:  # (np.load of a path leaves the file open when the archive is corrupt)
        head = f.read(len(np.lib.format.MAGIC_PREFIX))
        f.seek(0)
        if head[:2] != b"PK" and head != np.lib.format.MAGIC_PREFIX:
            raise ValueError(f"{path} is not an .npz archive; diagnose needs their data and scales saved by "
                             "np.savez(path, data=..., scales=...)")
        try:
            z = np.load(f, allow_pickle=False)
        except (zipfile.BadZipFile, EOFError) as exc:
            raise ValueError(f"{path} is not a readable .npz archive ({exc})") from None
        if isinstance(z, np.ndarray):
            raise ValueError(f"{path} is a single .npy array; diagnose needs an .npz with their data and scales "
                             "(np.savez(path, data=..., scales=...))")
        with z:
            keys = set(z.files)
            dk, sk, ak = THEIRS_GENERIC_KEYS
            if dk in keys and sk in keys:
                return z[dk], z[sk], z[ak] if ak in keys else None, plane
            planes = ("row", "col") if plane == "auto" else (plane,)
            for p in planes:
                for dk, sk, ak in THEIRS_KEYS[p]:
                    if dk in keys and sk in keys:
                        amax = z[ak] if ak in keys else None
                        if ak == "per_tensor_scale" and amax is not None:
                            amax = amax_from_torchao_scale(amax.reshape(-1)[:1])
                        return z[dk], z[sk], amax, p
    other = {"row": "col", "col": "row"}.get(plane)
    if other is not None and any(dk in keys and sk in keys for dk, sk, _ in THEIRS_KEYS[other]):
        raise ValueError(f"{path} holds {sorted(keys)}: the {other} plane's names, and --plane {plane} looks for the "
                         f"{plane} plane's (drop --plane, or give --plane {other})")
    raise ValueError(f"{path} holds {sorted(keys)}; diagnose needs a data and a scales array under one of the names "
                     "of --help (e.g. data and scales)")


def diagnose_cmd(a) -> int:
    """Print which rule made THEIRS' bytes from X, or the closest rule and the bug classes that fit."""
    x = _load(a.input, a.input_dtype)
    check_input(x, a.input)
    data, scales, amax, plane = read_theirs(a.theirs, a.plane)
    d = diagnose(x, data, scales, amax=amax, layout=a.layout, plane=plane, rht_signs=a.rht_signs, rules=a.rules)
    rc = 0 if d.matches else 1
    try:
        print(d)
    except BrokenPipeError as e:
        e.exit_status = rc  # the verdict stands when the reader leaves early (main returns it)
        raise
    return rc


def write_vectors_cmd(a) -> int:
    """Write the golden vector set (oracle.vectors) and list its cases."""
    from .vectors import write_vectors

    if a.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {a.seed}")
    if not a.output:
        raise ValueError("the output folder is an empty path: name a folder for the cases")
    if os.path.exists(a.output) and not os.path.isdir(a.output):
        raise ValueError(f"{a.output} is a file, not a folder (vectors writes a folder of cases)")
    names = write_vectors(a.output, seed=a.seed)
    print(f"wrote {len(names)} cases to {a.output} (index.json; each folder: case.json + raw .bin files)")
    for n in names:
        print(f"  {n}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m oracle`` and its subcommands (every option has help; defaults are shown)."""
    p = argparse.ArgumentParser(prog="python -m oracle", description="NVFP4 oracle tools (see SPEC.md)",
                                formatter_class=_HelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", help="the tool to run")
    e = sub.add_parser("explain", help="print how one row of a plane is quantized, block by block",
                       description="Print how one row of one plane is quantized, block by block: the values\n"
                                   "the plane quantizes (labelled rht(input) under --rht: the RHT outputs, SPEC 7.2),\n"
                                   "block amax, scale byte, multiplier, codes, dequantized values and |error|.",
                       epilog=BF16_INPUT_HELP.format(example="python -m oracle explain x.npy --row 3 --plane col --rht "
                                                               "--input-dtype bfloat16"),
                       formatter_class=_HelpFormatter)
    e.add_argument("input", help=".npy file (1-D (one row) or N-D, last dim a multiple of 16)")
    e.add_argument("--row", type=int, required=True, help="row of the plane (for --plane col: a column of X)")
    e.add_argument("--plane", default="row", choices=["row", "col"],
                   help="row = rowwise plane of X; col = columnwise plane, X^T zero-padded to [K, roundup(M, 16)] "
                        "(SPEC 6.2; the plane --rht applies to)")
    _add_options(e)
    q = sub.add_parser("quantize", help="quantize an .npy file and write every plane and buffer to an .npz",
                       description="Quantize an .npy file and write every plane's data, scales (compact and\n"
                                   "swizzled), amax and shape, and the options, to an .npz.",
                       epilog=BF16_INPUT_HELP.format(example="python -m oracle quantize x.npy out.npz --rht --input-dtype bfloat16"),
                       formatter_class=_HelpFormatter)
    q.add_argument("input", help=".npy file (1-D (one row) or N-D, last dim a multiple of 16)")
    q.add_argument("output", help=".npz file to write")
    q.add_argument("--no-columnwise", action="store_true",
                   help="only the rowwise plane (no columnwise plane, so no --rht)")
    _add_options(q)
    dg = sub.add_parser("diagnose", help="find the rule that made someone's NVFP4 bytes from an input",
                        description="Quantize X by every rule the oracle knows (SPEC 5, 14.11) and compare with\n"
                                    "THEIRS byte for byte, reading their scales in every layout they fit (SPEC 8,\n"
                                    "14.10). Prints the rules that reproduce the bytes, or the closest rule with its\n"
                                    "differing blocks, the known bug classes that fit, and the first differing block\n"
                                    "decoded side by side. Exit status 0 when a rule reproduces every byte, 1 when\n"
                                    "none does, 2 on bad input.",
                        epilog=THEIRS_HELP, formatter_class=_HelpFormatter)
    dg.add_argument("input", help="X: the .npy their bytes were made from (1-D (one row) or N-D, last dim a multiple of 16)")
    dg.add_argument("theirs", help="THEIRS: an .npz with their data and scales (names below)")
    dg.add_argument("--layout", default="auto", choices=list(LAYOUTS),
                    help="their scale layout: auto = every layout the size fits (compact, padded, 128x4); compact, "
                         "padded (SPEC 8.1), swizzled (128x4, SPEC 8.2), swizzled_8x4 (SPEC 8.3); or a library's "
                         "storage: torchao, te, flashinfer (SPEC 14.10)")
    dg.add_argument("--plane", default="auto", choices=["auto", "row", "col"],
                    help="the plane their bytes are: auto = from the names in THEIRS and the data's shape")
    dg.add_argument("--rules", type=_rule_names, default=None, metavar="A,B",
                    help="try only these rules, names or shell patterns such as 'flashinfer_*' (default: all; "
                         + ", ".join(r.name for r in DIAGNOSE_RULES) + ")")
    dg.add_argument("--rht-signs", type=_integer, default=DEFAULT_RHT_SIGNS, metavar="MASK",
                    help="the RHT sign mask tried for a columnwise plane of bf16 input (default: 0x%(default)04X)")
    dg.add_argument("--input-dtype", default="auto", choices=INPUT_DTYPES,
                    help="how to read X (as for explain): auto = as stored, a saved ml_dtypes.bfloat16 array as "
                         "bfloat16; bfloat16 = 2-byte elements are bf16 bit patterns; float32 / float16 = convert "
                         "(a note on stderr counts the values changed)")
    v = sub.add_parser("vectors", help="write golden test vectors (raw .bin files + case.json) to a folder",
                       description="Write the golden test vectors (raw .bin files + case.json per case, and\n"
                                   "index.json) to a folder.", formatter_class=_HelpFormatter)
    v.add_argument("output", help="folder to write (created)")
    v.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    return p


def _run(argv: list[str] | None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "vectors":
            return write_vectors_cmd(a)
        if a.cmd == "diagnose":
            return diagnose_cmd(a)
        return explain(a) if a.cmd == "explain" else quantize_to_npz(a)
    except BrokenPipeError:
        raise  # (an OSError, but not a failure of the command: main handles it)
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m oracle``.

    A reader that closes the pipe early (``python -m oracle explain X.npy --row 0 | head -3``) ends the output
    quietly with the command's own exit status (0; diagnose's 1 when no rule reproduces the bytes): whatever the
    command computes or writes to disk is complete before it prints, and only the rest of its printout is dropped.
    """
    rc = 0
    try:
        rc = _run(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here at the latest
        return rc
    except BrokenPipeError as e:
        # Python's documented recipe (library/signal.html, "Note on SIGPIPE"): point stdout at devnull so that
        # the interpreter's final flush of the unwritten rest does not fail again
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):
            pass  # stdout is not a file descriptor (an in-process call): nothing would be flushed to a pipe
        return getattr(e, "exit_status", rc)
