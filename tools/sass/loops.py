"""The loops of one kernel in a SASS dump: every backward branch, with its body's instructions, stall cycles
(tools/sass/stall_cycles.py) and local-memory instructions (STL / LDL: register spills), so that two builds of a
kernel compare loop by loop without a GPU (a change that adds instructions to the per-element body, or a register
budget that spills inside a hot loop, shows here before any timing).

    python tools/sass/loops.py DUMP.sass --function quantize_4over6_kernelILb1ELb0ELb0E

DUMP.sass: `cuobjdump -sass` output (tools/sass/build_sass.sh writes one per .cu file). ``--function``: a substring
of the mangled name (the first function that contains it). A loop is the address range from a direct branch's (`BRA`)
target to the branch, for a branch whose target lies before it or is the branch itself under a predicate (a spin
wait); the unpredicated branch to itself that ends every kernel is no loop, and indirect branches (`BRX`, `JMX`) are
not followed. Nested loops are listed each on their own, outer ones include the inner ones' instructions.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stall_cycles import Instruction, load_function  # noqa: E402

BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)\s*$")
LOCAL = ("STL", "LDL")


@dataclass(frozen=True)
class Loop:
    """The body [first, branch] of one backward branch."""

    first: int
    branch: int
    body: tuple[Instruction, ...]

    @property
    def spills(self) -> int:
        return sum(is_local(x) for x in self.body)


def is_local(ins: Instruction) -> bool:
    """A local-memory load or store (the predicate stripped)."""
    op = re.sub(r"^@!?U?P\w+\s+", "", ins.text).split()[0]
    return op.split(".")[0] in LOCAL


def loops(code: list[Instruction]) -> list[Loop]:
    """Every backward branch of ``code`` and its body, in the order of the branches."""
    out = []
    for ins in code:
        m = BRANCH.search(ins.text)
        if not m:
            continue
        first = int(m.group(1), 16)
        if first < ins.address or (first == ins.address and ins.text.startswith("@")):
            out.append(Loop(first, ins.address, tuple(x for x in code if first <= x.address <= ins.address)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", type=Path, help="cuobjdump -sass output")
    ap.add_argument("--function", required=True, help="a substring of the function's mangled name")
    a = ap.parse_args(argv)
    code = load_function(a.dump, a.function)
    if code is None:
        return 2
    print(f"{len(code)} instructions, {sum(is_local(x) for x in code)} of them local-memory (STL / LDL)")
    print("loop (target-branch)  instructions  stall cycles  local-memory")
    for lp in loops(code):
        print(f"{lp.first:#07x}-{lp.branch:#07x}  {len(lp.body):12d}  {sum(x.stall for x in lp.body):12d}  "
              f"{lp.spills:12d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
