"""What :func:`oracle.diagnose` says of a failing ``quantize`` or ``group_quantize`` case: for each plane (and group)
whose bytes the backend got wrong, the closest rule (or the rules that reproduce those bytes, when the case's own
rule does not) and the known bug classes that fit (SPEC 14.10, 14.11; docs/conformance.md). The runner adds the
lines to the failure record.
"""

from __future__ import annotations

import numpy as np

from oracle.diagnose import DIAGNOSE_RULES, diagnose

from .cases import TE_VARIANT_DEFAULTS, Case
from .ops import quantize_kwargs

__all__ = ["case_setting", "failure_hypotheses", "group_quantize_hypotheses", "quantize_hypotheses"]

_NONE_FITS = "none of the known bug classes"
_MAX_GROUPS = 3  # differing groups diagnosed per grouped case (each plane of each is a full diagnose run)
_MAX_ELEMENTS = 1 << 20  # larger cases (a shrink that ran out of time) are not diagnosed: a run per plane is slow


def _plane_amax(kw_amax, plane: str, out_amax):
    """The amax diagnose is given for one plane: the case's supplied value for it, else the backend's stored one."""
    if kw_amax is not None:
        return kw_amax[0 if plane == "row" else 1] if isinstance(kw_amax, tuple) else kw_amax
    if out_amax is None or np.size(out_amax) != 1:
        return None
    return np.float32(np.asarray(out_amax, np.float32).reshape(-1)[0])


# the oracle.quantize keywords that name a rule of DIAGNOSE_RULES, with their defaults
_RULE_KEYS = {"rule": "te", **TE_VARIANT_DEFAULTS}
_BY_NAME = {r.name: r for r in DIAGNOSE_RULES}


def _rule_keys(quantize_kw: dict) -> tuple:
    return tuple(quantize_kw.get(k, d) for k, d in _RULE_KEYS.items())


def case_setting(kw: dict, plane: str) -> tuple[tuple, bool, bool]:
    """(the rule keywords, 16x16 blocks, RHT) that a case's quantize keywords ``kw`` ask of ``plane``."""
    return _rule_keys(kw), tuple(kw.get("block", (1, 16))) == (16, 16), bool(kw.get("rht")) and plane == "col"


def _label_setting(label: str) -> tuple[tuple, bool, bool]:
    """(base rule keywords, 16x16 blocks, RHT) of a diagnose label such as ``te (block 16x16, rht, amax given)``: a
    SPEC 14.11 variant counts as its base rule (its bytes are another implementation's of the same call)."""
    name, _, extra = label.partition(" (")
    notes = extra.rstrip(")").split(", ") if extra else []
    return _rule_keys(_BY_NAME[name].quantize), "block 16x16" in notes, "rht" in notes


def _setting_words(setting: tuple[tuple, bool, bool]) -> str:
    """The case's settings in words: its rule (a rule name of DIAGNOSE_RULES, or its keywords), blocks and RHT."""
    keys, block2d, rht = setting
    name = next((r.name for r in DIAGNOSE_RULES if r.variant is None and _rule_keys(r.quantize) == keys), None)
    if name is None:  # a combination no rule of the table names: its keywords
        want = dict(zip(_RULE_KEYS, keys, strict=True))
        name = want["rule"] + "".join(f" {k}={v}" for k, v in want.items() if k != "rule" and v != _RULE_KEYS[k])
    return f"{name}, {'16x16' if block2d else '1x16'} blocks" + (", RHT" if rht else "")


def _diagnosed(label: str, x, data, scales, amax, layout: str, plane: str, rht_signs: int,
               asked: tuple[str, bool, bool]) -> list[str]:
    """diagnose's reading of one plane's bytes as lines ``"<label>: ..."``. ``asked``: the case's own rule, block
    shape and RHT (:func:`case_setting`); where every rule that reproduces the bytes, or the closest one, has other
    settings (a 14.11 variant counts as its base rule), the line says so: the backend made (nearly) correct bytes of
    another call, such as an option it ignored. A negative stored amax (which diagnose refuses: SPEC 4.3) is named as
    a sign error, and the bytes are read without it."""
    head_lines = []
    a = None if amax is None else np.asarray(amax, np.float32).reshape(-1)
    if a is not None and np.any(a < 0):
        head_lines = [f"{label}: the stored amax {float(a[0])!r} is negative: an amax is an absolute maximum (SPEC "
                      "4.3), so it was stored with a sign error; the bytes are read without it"]
        amax = None
    try:
        r = diagnose(x, data, scales, amax=amax, layout=layout, plane=plane, rht_signs=rht_signs)
    except (ValueError, TypeError) as e:  # bytes diagnose cannot read as this plane
        return head_lines + [f"{label}: not diagnosed ({e})"]
    if r.matches:
        head = f"{label}: reproduced exactly by {', '.join(r.matches)}"
        if all(_label_setting(m) != asked for m in r.matches):
            head += f", not by the case's own settings ({_setting_words(asked)})"
    else:
        head = f"{label}: closest {r.closest}, {r.n_diff} of {r.n_blocks} blocks differ"
        if _label_setting(r.closest) != asked:
            head += f" (the case's own settings are {_setting_words(asked)})"
    return head_lines + [head] + [f"{label}: {h}" for h in r.hypotheses if not h.startswith(_NONE_FITS)]


def _modelled(case: Case, op: str) -> dict | None:
    """The case's oracle keywords when diagnose models it (round to nearest, one amax per plane), else None."""
    if case.op != op:
        return None
    kw = quantize_kwargs(case)
    return None if kw.get("rounding", "rn") != "rn" or kw.get("row_scaled") else kw


def quantize_hypotheses(case: Case, out: dict, ref: dict) -> list[str]:
    """Lines ``"<plane> plane: ..."`` for each plane of a ``quantize`` case whose data or compact scales differ from
    the reference's: the closest rule with its count of differing 16-blocks and the bug classes that fit, or the
    rules that reproduce the backend's bytes. Empty for other ops, stochastic rounding (diagnose's rules round to
    nearest) and a row-scaled case (one amax per row)."""
    kw = _modelled(case, "quantize")
    if kw is None:
        return []
    lines = []
    for p in ("row", "col"):
        d, s = out.get(f"{p}_data"), out.get(f"{p}_scales")
        if d is None or s is None or f"{p}_data" not in ref:
            continue
        if np.array_equal(d, ref[f"{p}_data"]) and np.array_equal(s, ref[f"{p}_scales"]):
            continue  # this plane is right: the mismatch is elsewhere
        lines += _diagnosed(f"{p} plane", case.arrays["x"], d, s, _plane_amax(kw.get("amax"), p, out.get(f"{p}_amax")),
                            "compact", p, kw["rht_signs"], case_setting(kw, p))
    return lines


def group_quantize_hypotheses(case: Case, out: dict, ref: dict) -> list[str]:
    """Lines ``"group <g>, <plane> plane: ..."`` for the first few groups whose data or swizzled scales differ from
    the reference's, each group's bytes cut out of the backend's flat buffers at the reference's offsets (SPEC 9.2)
    and read as one tensor's plane of that group's rows. Empty where :func:`quantize_hypotheses` would be."""
    kw = _modelled(case, "group_quantize")
    if kw is None:
        return []
    x = case.arrays["x"]
    rows = np.asarray(ref["row_offsets"], np.int64)
    amax = kw.get("amax")
    lines, done = [], 0
    for g in range(rows.size - 1):
        if rows[g + 1] == rows[g]:
            continue  # an empty group has no bytes
        before = len(lines)
        for p in ("row", "col"):
            if f"{p}_data" not in ref or out.get(f"{p}_data") is None or out.get(f"{p}_scales") is None:
                continue
            do, so = (np.asarray(ref[f"{p}_{n}_offsets"], np.int64) for n in ("data", "scale"))
            d = np.asarray(out[f"{p}_data"]).reshape(-1)[do[g]:do[g + 1]]
            s = np.asarray(out[f"{p}_scales"]).reshape(-1)[so[g]:so[g + 1]]
            if d.size != do[g + 1] - do[g] or s.size != so[g + 1] - so[g]:
                continue  # the backend's buffer is too short: compare reports that
            if (np.array_equal(d, np.asarray(ref[f"{p}_data"]).reshape(-1)[do[g]:do[g + 1]])
                    and np.array_equal(s, np.asarray(ref[f"{p}_scales"]).reshape(-1)[so[g]:so[g + 1]])):
                continue
            a_g = None if amax is None else (tuple(np.float32(np.asarray(v).reshape(-1)[g]) for v in amax)
                                             if isinstance(amax, tuple) else np.float32(np.asarray(amax).reshape(-1)[g]))
            their_amax = out.get(f"{p}_amax")
            their_g = None if their_amax is None else np.asarray(their_amax).reshape(-1)[g:g + 1]
            lines += _diagnosed(f"group {g}, {p} plane", x[rows[g]:rows[g + 1]], d, s, _plane_amax(a_g, p, their_g),
                                "swizzled", p, kw["rht_signs"], case_setting(kw, p))
        done += len(lines) > before
        if done == _MAX_GROUPS:
            break
    return lines


def failure_hypotheses(case: Case, out: dict, ref: dict) -> list[str]:
    """diagnose's lines for a failing case of any op (empty for the ops it does not read). Never raises: the runner
    calls it while it records a failure, so anything diagnose cannot take becomes a line saying so."""
    x = case.arrays.get("x")
    if x is not None and x.size > _MAX_ELEMENTS:
        return [f"not diagnosed: {x.size} elements (diagnose reads cases of at most {_MAX_ELEMENTS})"]
    try:
        if case.op == "group_quantize":
            return group_quantize_hypotheses(case, out, ref)
        return quantize_hypotheses(case, out, ref)
    except Exception as e:  # noqa: BLE001 - a backend's odd buffers must not end the run
        return [f"not diagnosed ({type(e).__name__}: {e})"]
