"""conformance.shrink's contract: only strictly smaller candidates, and never one whose check raises."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from conformance_cases import QUANTIZE_OPTIONS

from conformance.cases import Case
from conformance.shrink import shrink


def test_a_candidate_whose_check_raises_is_not_kept():
    """shrink(): fails() returning None or raising means the candidate is not a failure of the same kind; only the
    8 x 32 original fails, every smaller candidate raises, so the original comes back."""
    c = Case("quantize", 0, 0, {"x": np.ones((8, 32), np.float32)}, dict(QUANTIZE_OPTIONS), {})

    def fails(k):
        if k.arrays["x"].shape == (8, 32) and k.arrays["x"].all():
            return frozenset({"row_data"})
        raise RuntimeError("candidate cannot run")

    small, tried = shrink(c, fails, deadline=time.monotonic() + 10)
    assert small is c and tried > 1


def test_every_kept_candidate_is_strictly_smaller():
    """shrink.py: each candidate is strictly smaller by case_size. With a failure that every candidate shares, every
    candidate tried is kept, so the sizes fails() sees must strictly decrease."""
    from conformance.cases import case_size
    from conformance.generators import generate
    from conformance.ops import OPS

    def recorder(sizes: list):
        def fails(k):
            sizes.append(case_size(k))
            return frozenset({"y"})
        return fails

    for op in ("layout", "dequantize", "quantize"):
        for i in range(3):
            sizes: list = []
            shrink(generate(op, 0, i, OPS[op].generator), recorder(sizes), deadline=time.monotonic() + 10)
            assert all(b < a for a, b in zip(sizes, sizes[1:], strict=False)), (op, i, sizes)


@pytest.mark.parametrize("op", ["quantize", "group_quantize"])
def test_row_scaled_candidates_keep_one_amax_per_row(op):
    """SPEC 5.7: a row-scaled plane's supplied amax holds one value per plane row (``amax``: per row of X;
    ``col_amax``: per column of X, [E, K] grouped), so every shrink candidate that drops rows, columns or groups drops
    their amaxes too; the oracle runs every candidate of such a case."""
    from conformance.generators import generate
    from conformance.ops import OPS, reference
    from conformance.shrink import candidates

    seen = Counter()
    for i in range(1500):
        c = generate(op, 3, i, OPS[op].generator, {**OPS[op].space, "max_elems": 1 << 12})
        if not (c.options.get("row_scaled") and ("amax" in c.arrays or "col_amax" in c.arrays)):
            continue
        planes = ("row" if c.options["rowwise"] else "") + ("col" if c.options["columnwise"] else "")
        if seen[planes] == 2:
            continue
        seen[planes] += 1
        for cand in candidates(c):
            t, k = cand.arrays["x"].shape
            if cand.options.get("row_scaled") and "amax" in cand.arrays:
                assert cand.arrays["amax"].reshape(-1).size == t, (i, cand.options)
            if cand.options.get("row_scaled") and "col_amax" in cand.arrays:
                e = cand.arrays["splits"].size if "splits" in cand.arrays else None
                assert cand.arrays["col_amax"].shape == ((k,) if e is None else (e, k)), (i, cand.options)
            reference(cand)  # (raises where a candidate's amax does not fit its rows)
        if len(seen) == 3 and min(seen.values()) == 2:
            break
    assert sorted(seen) == ["col", "row", "rowcol"] and min(seen.values()) == 2, seen


def test_row_subsets_worked_by_hand():
    """The row subsets the shrinker tries (conformance/shrink.py): halves first, then every quarter and eighth
    dropped in turn (edges floor(i n / parts)); one row shrinks to none; none, to nothing."""
    from conformance.shrink import _chunks

    assert [c.tolist() for c in _chunks(0)] == []
    assert [c.tolist() for c in _chunks(1)] == [[]]
    assert [c.tolist() for c in _chunks(3)] == [[0], [1, 2]]
    assert [c.tolist() for c in _chunks(5)] == [[0, 1], [2, 3, 4], [1, 2, 3, 4], [0, 2, 3, 4], [0, 1, 3, 4],
                                                [0, 1, 2]]
    eighths = [c.tolist() for c in _chunks(8)][6:]
    assert eighths == [[j for j in range(8) if j != i] for i in range(8)]
