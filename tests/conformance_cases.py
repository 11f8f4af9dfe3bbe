"""Conformance cases built by hand for the tests: the quantize options of a plain TE 1x16 rowwise call."""

from __future__ import annotations

import numpy as np

from conformance.cases import Case

QUANTIZE_OPTIONS = dict(rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=[1, 16], rule="te",
                        rounding="rn", seed=0, offset=0, swizzled=True)
"""The options a quantize / group_quantize case carries: TE rule, 1x16 blocks, round to nearest, rowwise plane only,
swizzled scales."""


def quantize_case(x: np.ndarray, op: str = "quantize", **options) -> Case:
    """A case of ``op`` on ``x`` with :data:`QUANTIZE_OPTIONS`, ``options`` replacing single entries."""
    return Case(op, 0, 0, {"x": x}, {**QUANTIZE_OPTIONS, **options}, {})
