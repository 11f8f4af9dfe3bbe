"""What :func:`oracle.diagnose` says of a failing ``quantize`` case: for each plane whose bytes the backend got wrong,
the closest rule (or the rules that reproduce those bytes, when the case's own rule does not) and the known bug
classes that fit (SPEC 14.10, 14.11; docs/conformance.md). The runner adds the lines to the failure record.
"""

from __future__ import annotations

import numpy as np

from oracle.diagnose import diagnose

from .cases import Case
from .ops import quantize_kwargs

__all__ = ["quantize_hypotheses"]

_NONE_FITS = "none of the known bug classes"


def _plane_amax(kw_amax, plane: str, out_amax):
    """The amax diagnose is given for one plane: the case's supplied value for it, else the backend's stored one."""
    if kw_amax is not None:
        return kw_amax[0 if plane == "row" else 1] if isinstance(kw_amax, tuple) else kw_amax
    if out_amax is None or np.size(out_amax) != 1:
        return None
    return np.float32(np.asarray(out_amax, np.float32).reshape(-1)[0])


def quantize_hypotheses(case: Case, out: dict, ref: dict) -> list[str]:
    """Lines ``"<plane> plane: ..."`` for each plane of a ``quantize`` case whose data or compact scales differ from
    the reference's: the closest rule with its count of differing 16-blocks and the bug classes that fit, or the
    rules that reproduce the backend's bytes. Empty for other ops, stochastic rounding (diagnose's rules round to
    nearest) and a row-scaled case (one amax per row)."""
    if case.op != "quantize":
        return []
    kw = quantize_kwargs(case)
    if kw.get("rounding", "rn") != "rn" or kw.get("row_scaled"):
        return []
    lines = []
    for p in ("row", "col"):
        d, s = out.get(f"{p}_data"), out.get(f"{p}_scales")
        if d is None or s is None or f"{p}_data" not in ref:
            continue
        if np.array_equal(d, ref[f"{p}_data"]) and np.array_equal(s, ref[f"{p}_scales"]):
            continue  # this plane is right: the mismatch is elsewhere
        try:
            r = diagnose(case.arrays["x"], d, s, amax=_plane_amax(kw.get("amax"), p, out.get(f"{p}_amax")),
                         layout="compact", plane=p, rht_signs=kw["rht_signs"])
        except (ValueError, TypeError) as e:  # bytes diagnose cannot read as this plane
            lines.append(f"{p} plane: not diagnosed ({e})")
            continue
        if r.matches:
            lines.append(f"{p} plane: reproduced exactly by {', '.join(r.matches)}")
        else:
            lines.append(f"{p} plane: closest {r.closest}, {r.n_diff} of {r.n_blocks} blocks differ")
        lines.extend(f"{p} plane: {h}" for h in r.hypotheses if not h.startswith(_NONE_FITS))
    return lines
