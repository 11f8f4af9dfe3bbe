"""Conformance cases for the tests: built by hand (the quantize options of a plain TE 1x16 rowwise call) or drawn by the
generators."""

from __future__ import annotations

import numpy as np

from conformance.cases import Case
from conformance.generators import generate
from conformance.ops import OPS

QUANTIZE_OPTIONS = dict(rowwise=True, columnwise=False, rht=False, rht_signs=0xD7E8, block=[1, 16], rule="te",
                        rounding="rn", seed=0, offset=0, swizzled=True)
"""The options a quantize / group_quantize case carries: TE rule, 1x16 blocks, round to nearest, rowwise plane only,
swizzled scales."""


def quantize_case(x: np.ndarray, op: str = "quantize", **options) -> Case:
    """A case of ``op`` on ``x`` with :data:`QUANTIZE_OPTIONS`, ``options`` replacing single entries."""
    return Case(op, 0, 0, {"x": x}, {**QUANTIZE_OPTIONS, **options}, {})


def generated_cases(op: str, n: int, seed: int = 0, **space) -> list[Case]:
    """Cases 0 .. n-1 of ``op`` under ``seed``, drawn in the op's own space with the entries of ``space`` on top."""
    return [generate(op, seed, i, OPS[op].generator, {**OPS[op].space, **space}) for i in range(n)]
