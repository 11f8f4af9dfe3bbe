"""device/_codes.py: the integer codes shared with the CUDA extensions, read from csrc/common/codes.h. On the host (no
GPU, no torch): the reader on hand-written header text, its refusal of a line it cannot read, and the real header's
codes against the names the rest of the package and the oracle use."""

from __future__ import annotations

import enum

import pytest

from device import _codes
from device._codes import Algorithm, Epilogue, GemmKind, Loader, QuantizeKernel, Rule, ScaleLayout, read_enums
from oracle import scale_rules

HEADER = """\
// a comment, and an enum of another form that the reader skips
enum class Other { kA, kB };

namespace x {

// the first enum
enum Colour : int {
  kRed = 0,      // "red": the first
  kGreen = 1,    // "green"
  kBlue = 7,     // "blue_ish": values need not be consecutive
};

enum Single : int {
  kOnly = 3,  // "only": one member
};

}  // namespace x
"""


def test_read_enums_on_a_small_header():
    assert read_enums(HEADER) == {"Colour": {"red": 0, "green": 1, "blue_ish": 7}, "Single": {"only": 3}}
    assert read_enums("// no enums here\n") == {}


@pytest.mark.parametrize("line", [
    "  kRed = 0,",                     # no quoted Python name
    "  kRed = 0,  // red: unquoted",
    "  kRed,  // \"red\"",             # no value
    "  kRed = -1,  // \"red\"",        # not a non-negative integer
    "  Red = 0,  // \"red\"",          # not a kName enumerator
])
def test_read_enums_refuses_a_line_it_cannot_read(line):
    text = "enum Colour : int {\n  kGreen = 1,  // \"green\"\n" + line + "\n};\n"
    with pytest.raises(ValueError, match="enum Colour: cannot read the line"):
        read_enums(text)


#: the codes as codes.h states them, written out by hand: a change to the header (a renamed, moved or inserted
#: enumerator) must change this table too, and the kernels' switch statements with it
CODES = {
    "Rule": {"te": 0, "te_fused_rht": 1, "torchao": 2, "torchao_noscale": 3},
    "ScaleLayout": {"compact": 0, "padded_compact": 1, "swizzled": 2},
    "QuantizeKernel": {"general": 0, "fast_bf16": 1, "four_over_six": 2},
    "Kind": {"fprop": 0, "dgrad": 1, "wgrad": 2},
    "Algorithm": {"fused_64x256": 0, "fused_128x256": 1, "fused_pair_256x256": 2, "swapped_64x256": 3,
                  "copies_cutlass": 4, "exact_fused": 5, "exact_copies": 6, "exact_hybrid": 7, "sm100_simt": 8,
                  "sm100_copies": 9, "swapped_256x128": 10},
    "Loader": {"cp_async": 0, "tma": 1, "loads": 2},
    "Epilogue": {"staged": 0, "tma_store": 1, "direct": 2, "cutlass": 3},
}


def test_the_real_header():
    """The header read by read_enums, and the package's IntEnums, hold exactly the hand-written CODES."""
    assert read_enums(_codes.HEADER.read_text()) == CODES
    for cls, name in ((Rule, "Rule"), (ScaleLayout, "ScaleLayout"), (QuantizeKernel, "QuantizeKernel"),
                      (GemmKind, "Kind"), (Algorithm, "Algorithm"), (Loader, "Loader"), (Epilogue, "Epilogue")):
        assert issubclass(cls, enum.IntEnum)
        assert {m.name: m.value for m in cls} == CODES[name], name


def test_rule_names_are_the_oracles():
    """The scale rules' codes carry the oracle's rule names (oracle.scale_rules.RULES, SPEC 5), in its order; "te" is
    code 0, the default of every binding."""
    assert list(Rule.__members__) == list(scale_rules.RULES)
    assert Rule.te == 0 and Rule["torchao"] == 2


def test_other_names():
    # the kinds are grouped_gemm's, the scale layouts SPEC 8's, the quantize kernels device.testing.force_plan's
    assert list(GemmKind.__members__) == ["fprop", "dgrad", "wgrad"]
    assert list(ScaleLayout.__members__) == ["compact", "padded_compact", "swizzled"]
    assert list(QuantizeKernel.__members__) == ["general", "fast_bf16", "four_over_six"]
