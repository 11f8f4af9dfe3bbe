"""tools/ab/ab_plans.py's case grammar (``E,T,K,N,kind[,out][,skew|ragged8][,bias]``), on the CPU."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # ab_plans imports torch and the device package (the CPU build suffices)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "ab"))
import ab_plans  # noqa: E402


def test_split_patterns_and_defaults():
    c = ab_plans.parse_case("64,16384,2048,1408,fprop,ragged8")
    assert (c.e, c.t, c.k, c.n, c.kind, c.out, c.splits, c.bias) == (64, 16384, 2048, 1408, "fprop", "bf16",
                                                                      "ragged8", False)
    assert c.label == "E64 T16384 K2048 N1408 fprop bf16 ragged8"
    c = ab_plans.parse_case("8,16384,4096,14336,wgrad,skew")
    assert (c.out, c.splits) == ("f32", "skewed") and c.label.endswith("wgrad f32 skew")
    c = ab_plans.parse_case("8,512,4096,14336,dgrad,bias")
    assert (c.splits, c.bias, c.label) == ("balanced", True, "E8 T512 K4096 N14336 dgrad bf16 bias")
    assert [x.splits for x in ab_plans.parse_cases("8,512,64,64,fprop; 8,512,64,64,fprop,ragged8;")] == [
        "balanced", "ragged8"]


@pytest.mark.parametrize("text, words", [
    ("8,512,64,64,fprop,skew,ragged8", "not both"),
    ("8,512,64,64,fprop,f16", "out must be"),
    ("8,512,64,64,wgrad,bias", "a bias is for"),
    ("8,512,64,64,fprop,f32+c", "accumulate"),
    ("8,512,64,64", "expected"),
])
def test_bad_cases_are_refused(text, words):
    with pytest.raises(ValueError, match=words):
        ab_plans.parse_case(text)
