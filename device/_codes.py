"""The integer codes shared with the CUDA extensions, read from their one definition, ``csrc/common/codes.h``.

Each C++ enum there becomes an :class:`enum.IntEnum` here whose members carry the Python names quoted in the header
(``kRuleTE = 0,  // "te": ...`` gives ``Rule.te == 0``), so Python and C++ can never disagree on a number.
Reading the header needs neither torch nor CUDA.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path

__all__ = ["TORCHAO_RULES", "Algorithm", "Epilogue", "GemmKind", "Loader", "QuantizeKernel", "Rule", "ScaleLayout",
           "read_enums"]

HEADER = Path(__file__).resolve().parent / "csrc" / "common" / "codes.h"

_ENUM = re.compile(r"^enum (\w+) : int \{\n(.*?)^\};", re.M | re.S)
_ENUMERATOR = re.compile(r"^\s+k\w+ = (\d+),\s+// \"(\w+)\"")


def read_enums(text: str) -> dict[str, dict[str, int]]:
    """``{enum name: {python name: value}}`` of every ``enum X : int {...};`` in ``text`` (codes.h's format)."""
    enums: dict[str, dict[str, int]] = {}
    for m in _ENUM.finditer(text):
        members: dict[str, int] = {}
        for line in m.group(2).splitlines():
            e = _ENUMERATOR.match(line)
            if e is None:
                raise ValueError(f"{HEADER.name}: enum {m.group(1)}: cannot read the line {line!r} "
                                 '(expected `kName = <value>,  // "<python name>": ...`)')
            members[e.group(2)] = int(e.group(1))
        enums[m.group(1)] = members
    return enums


_ENUMS = read_enums(HEADER.read_text())


def _codes(python_name: str, header_name: str, doc: str) -> type[enum.IntEnum]:
    codes = enum.IntEnum(python_name, _ENUMS[header_name])
    codes.__doc__ = doc
    return codes


Rule = _codes("Rule", "Rule", "The scale rules (SPEC 5), by their Python names.")
#: The torchao scale rules by name (the others are TE's): their amax propagates NaN (SPEC 4.1), each pairs only with
#: itself in a GEMM (SPEC 12.1), and the quantizers treat them apart.
TORCHAO_RULES = ("torchao", "torchao_noscale")
ScaleLayout = _codes("ScaleLayout", "ScaleLayout", "The layouts of a plane's scale bytes (SPEC 8).")
QuantizeKernel = _codes("QuantizeKernel", "QuantizeKernel", "The kernel family of an amax or quantize pass.")
GemmKind = _codes("GemmKind", "Kind", "The three GEMMs of a linear layer (SPEC 12.5).")
Algorithm = _codes("Algorithm", "Algorithm", "The grouped GEMM's algorithms (docs/design.md describes each).")
Loader = _codes("Loader", "Loader", "How an algorithm's operand tiles reach shared memory.")
Epilogue = _codes("Epilogue", "Epilogue", "How an algorithm's output tiles reach global memory.")
