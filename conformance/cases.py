"""The :class:`Case` record (one generated test input) and its ``.npz`` serialization.

A case is identified by ``(op, seed, index)`` and the backend's option space:
:func:`conformance.generators.generate` rebuilds it from those (``generate(op, seed, index, OPS[op].generator,
space)``). A saved case is self-contained (its arrays are stored), so replay never regenerates it.
The ``.npz`` loads with ``allow_pickle=False``: bfloat16 arrays are stored as their uint16 bits and the
dtype names go in the JSON ``meta`` entry.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from oracle.rht import DEFAULT_RHT_SIGNS

__all__ = ["Case", "CaseFileError", "PLAIN_QUANT", "TE_VARIANT_DEFAULTS", "load_case", "norm_option", "save_case",
           "case_size"]


@dataclass
class Case:
    """One conformance test input.

    Attributes:
        op: the op name (a key of :data:`conformance.ops.OPS`).
        seed, index: the generator coordinates; ``generate(op, seed, index, OPS[op].generator, space)`` rebuilds
            the case (``space``: the option space of the backend it was drawn for).
        arrays: the input arrays by name (``x``, ``splits``, ``a``, ``b``, ...).
        options: JSON-able keyword options of the op (rule, rounding, ...).
        tags: short categorical labels for the summary table (dtype, values kind, ...).
    """

    op: str
    seed: int
    index: int
    arrays: dict[str, np.ndarray]
    options: dict
    tags: dict = field(default_factory=dict)

    def key(self) -> str:
        """``op/seed/index``: the case's identity."""
        return f"{self.op}/{self.seed}/{self.index}"

    def replace(self, arrays: dict | None = None, options: dict | None = None) -> Case:
        """A copy with some arrays / options replaced (used by the shrinker)."""
        a = dict(self.arrays)
        a.update(arrays or {})
        o = dict(self.options)
        o.update(options or {})
        return Case(self.op, self.seed, self.index, a, o, dict(self.tags))


def case_size(case: Case) -> tuple[int, int, int]:
    """Order used by the shrinker: (total input elements, nonzero input elements, non-default options)."""
    total = sum(int(a.size) for a in case.arrays.values())
    nonzero = 0
    for a in case.arrays.values():
        v = a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a
        nonzero += int(np.count_nonzero(v))
    complexity = sum(_option_weight(k, v, case.options) for k, v in case.options.items())
    return total, nonzero, complexity


PLAIN_QUANT = dict(rule="te", rounding="rn", seed=0, offset=0)  # a GEMM operand's default (gen_operand_quant)

#: TE's variants of rule "te" (SPEC 5.6, 5.7) and their plain values: a quantize case's options hold only the others
#: (generators._te_variants), so a plain case's options are what they were before the variants existed.
TE_VARIANT_DEFAULTS = {"four_over_six": None, "four_over_six_fast_math": False, "global_scale_max": 448,
                       "row_scaled": False}


#: the plain values of a grouped-linear case's settings whose plain value is not falsy (shrink order)
_LAYER_PLAIN = {"steps": 1, "x_requires_grad": True, "weight_plane_reuse": True, "cache_f16_weights": True,
                "params_dtype": "bfloat16", "splits_on": "host", "weight_block": [16, 16]}


def norm_option(v):
    """An option value as JSON holds it: a tuple or list as a list (so that (1, 16) and [1, 16] compare equal)."""
    return list(v) if isinstance(v, (tuple, list)) else v


def _option_weight(key: str, v, options: dict) -> int:
    """0 where option ``key`` has its plain value (off, 0, None, "auto", RN, the TE rule, 1x16 blocks, the default RHT
    sign mask; a GEMM operand quantized the TE / RN way; a grouped GEMM's weights in 16x16 blocks, TE's weight blocks),
    else 1; a GEMM operand's quantization one per non-plain part."""
    if key == "rht_signs":
        return int(v != DEFAULT_RHT_SIGNS)
    if key in ("quant_a", "quant_b"):  # one per non-plain part: the rule (other than TE and the case's), SR, its seeds
        return (int(v.get("rule", "te") not in ("te", options.get("rule", "te"))) + int(v.get("rounding") == "sr")
                + int(bool(v.get("seed") or v.get("offset"))))
    if key == "global_scale_max":
        return int(v != 448)
    if key == "b_block" and "kind" in options:
        return int(list(v) != [16, 16])
    if key in _LAYER_PLAIN:  # a grouped-linear case's settings (SPEC 16): 0 at the plain layer's value
        return int(norm_option(v) != _LAYER_PLAIN[key])
    if key == "is_first_microbatch":  # (one entry per step: TE's argument, None where the layer decides)
        return int(any(x is not None for x in v))
    return int(v not in (None, False, 0, "auto", "rn", "te", [1, 16], (1, 16)))


def _ml_dtype(name: str):
    """The ml_dtypes type of that name (bfloat16, float8_e4m3fn, float4_e2m1fn, ...), or None."""
    t = getattr(ml_dtypes, name, None)
    return t if isinstance(t, type) and issubclass(t, np.generic) else None


def _encode(a: np.ndarray) -> tuple[np.ndarray, str]:
    """An array as the .npz can hold it without pickles, and the dtype name that reads it back: ml_dtypes arrays as
    their unsigned-integer bit patterns; anything else numpy cannot store plainly (None, Python objects) as its text
    (an output a backend returned, kept for the record)."""
    name = a.dtype.name
    if _ml_dtype(name) is not None:
        return a.view(f"u{a.dtype.itemsize}"), name
    if a.dtype.kind == "O":
        return np.array(repr(a.tolist())), "repr"
    return a, name


def _decode(a: np.ndarray, name: str) -> np.ndarray:
    ml = _ml_dtype(name)
    if ml is not None:
        return a.view(ml)
    if name == "repr":
        return a
    return a.astype(np.dtype(name), copy=False)


def save_case(path, case: Case, *, backend: str, ref: dict | None = None, out: dict | None = None,
              extra: dict | None = None) -> Path:
    """Write ``case`` (+ the reference and candidate outputs) to ``path`` as an ``.npz`` without pickles.

    Entries: ``in__NAME`` inputs, ``ref__KEY`` / ``out__KEY`` outputs, ``options`` (JSON string) and
    ``meta`` (JSON string: op, seed, index, backend, tags, dtypes, plus ``extra``). Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for prefix, d in (("in", case.arrays), ("ref", ref or {}), ("out", out or {})):
        for k, v in d.items():
            arr, name = _encode(np.asarray(v))
            entries[f"{prefix}__{k}"] = arr
            dtypes[f"{prefix}__{k}"] = name
    meta = dict(op=case.op, seed=case.seed, index=case.index, backend=backend, tags=case.tags, dtypes=dtypes)
    meta.update(extra or {})
    entries["options"] = np.array(json.dumps(case.options))
    entries["meta"] = np.array(json.dumps(meta, default=str))
    with open(path, "wb") as f:
        np.savez_compressed(f, **entries)
    return path


class CaseFileError(ValueError):
    """A file :func:`load_case` cannot read as a saved case; the message says what is wrong with it (one line)."""


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first local header; an empty zip's end record


def _check_file(path: Path) -> None:
    """Refuse what is not an ``.npz`` archive before numpy reads it (numpy's own errors mislead: random bytes read
    as "pickled (object) data", an ``.npy`` file as an array without the context-manager protocol)."""
    if not path.exists():
        raise CaseFileError("no such file")
    if path.is_dir():
        raise CaseFileError("a directory, not a case file (.npz)")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise CaseFileError(f"cannot read it ({e.strerror or e})") from None
    if not head:
        raise CaseFileError("an empty file (0 bytes), not a case file (.npz)")
    if head.startswith(_NPY_MAGIC):
        raise CaseFileError("a single .npy array, not a saved case (an .npz archive written by save_case)")
    if not head.startswith(_ZIP_MAGIC):
        raise CaseFileError(f"not an .npz archive (it starts with {head[:4]!r}, not the zip signature b'PK\\x03\\x04')")


def load_case(path) -> tuple[Case, dict, dict, dict]:
    """Read a case written by :func:`save_case`. Returns ``(case, meta, ref_outputs, out_outputs)``.

    Raises :class:`CaseFileError` (a ``ValueError``) with a one-line reason for anything else: a missing file, a
    directory, an empty, truncated or corrupt file, an ``.npy`` array, an ``.npz`` without the case entries.
    """
    path = Path(path)
    _check_file(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("meta", "options") if k not in z.files]
            if missing:
                raise CaseFileError(f"an .npz archive without the case entries {missing} (its entries: "
                                    f"{', '.join(z.files[:8]) or 'none'}{', ...' if len(z.files) > 8 else ''}): not "
                                    "a case saved by conformance")
            try:
                meta = json.loads(str(z["meta"]))
                options = json.loads(str(z["options"]))
            except ValueError as e:
                raise CaseFileError(f"its 'meta' or 'options' entry is not JSON ({e})") from None
            if not isinstance(meta, dict) or not isinstance(options, dict):
                raise CaseFileError("its 'meta' or 'options' entry is not a JSON object")
            lacking = [k for k in ("op", "seed", "index") if k not in meta]
            if lacking:
                raise CaseFileError(f"its 'meta' entry lacks {lacking}: not a case saved by conformance")
            dtypes = meta.get("dtypes") or {}
            groups: dict[str, dict] = {"in": {}, "ref": {}, "out": {}}
            for name in z.files:
                if "__" not in name:
                    continue
                prefix, key = name.split("__", 1)
                if prefix in groups:
                    groups[prefix][key] = _decode(z[name], dtypes.get(name, z[name].dtype.name))
        case = Case(str(meta["op"]), int(meta["seed"]), int(meta["index"]), groups["in"], options,
                    meta.get("tags", {}))
    except CaseFileError:
        raise
    except zipfile.BadZipFile as e:
        raise CaseFileError(f"a truncated or damaged .npz archive (zip: {e})") from None
    except (EOFError, zlib.error) as e:
        raise CaseFileError(f"a truncated or damaged .npz archive ({type(e).__name__}: {e})") from None
    except Exception as e:  # noqa: BLE001 -- anything numpy or the decoding raises: one line, no traceback
        text = " ".join(str(e).split())
        if "pickle" in text:
            text = "an entry holds Python objects (pickled data), which a saved case never does"
        raise CaseFileError(f"cannot read it as a saved case ({type(e).__name__}: {text})") from None
    return case, meta, groups["ref"], groups["out"]
