"""Stall cycles of SASS segments: the stall counts ptxas writes into the instructions' control bits, summed.

Every sm_70 .. sm_90 instruction is 128 bits; bits 105-108 (bits 41-44 of its second 64-bit word, the second hex
number `cuobjdump -sass` prints for it) hold the cycles the warp waits before it issues its next instruction. Their
sum over a straight-line segment is a lower bound on one warp's cycles through it (scoreboard waits for memory,
barriers and wgmma, and other warps' issue come on top), so two builds of one kernel (two register budgets, two
orders of the same arithmetic) compare without a GPU: fewer stall cycles, a shorter dependency chain.

    python tools/sass/stall_cycles.py DUMP.sass --function sm100_copies_kernelILb0 --from WARPGROUP.DEPBAR --to VOTE.ALL
    python tools/sass/stall_cycles.py DUMP.sass --function sm100_copies_kernelILb0 --range 0x1370:0x1730 --list

DUMP.sass: `cuobjdump -sass` output (tools/sass/build_sass.sh writes one per .cu file). ``--function``: a substring
of the mangled name (the first function that contains it). Segments: from each instruction whose text contains
``--from`` to the next one that contains ``--to`` (both included), or the addresses of ``--range`` (end excluded).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

FUNCTION = re.compile(r"^\s+Function : (\S+)")
INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/")
SECOND_WORD = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: its address, text (without the ';') and stall count (control bits 105-108)."""

    address: int
    text: str
    stall: int


def instructions(dump: str, function: str) -> list[Instruction]:
    """The instructions of the first function of ``dump`` whose mangled name contains ``function``."""
    lines = dump.splitlines()
    out: list[Instruction] = []
    inside = found = False
    for i, line in enumerate(lines):
        m = FUNCTION.match(line)
        if m:
            if found:
                break
            inside = found = function in m.group(1)
            continue
        m = INSTRUCTION.match(line) if inside else None
        if m and i + 1 < len(lines):
            second = SECOND_WORD.match(lines[i + 1])
            if second:
                stall = (int(second.group(1), 16) >> 41) & 0xF
                out.append(Instruction(int(m.group(1), 16), m.group(2), stall))
    if not found:
        raise ValueError(f"no function whose name contains {function!r}")
    return out


def load_function(dump: Path, function: str) -> list[Instruction] | None:
    """The instructions of ``function`` in the dump file, or None after printing why not (no such function)."""
    try:
        return instructions(dump.read_text(), function)
    except ValueError as e:
        print(e, file=sys.stderr)
        return None


def marked_segments(code: list[Instruction], start: str, end: str) -> list[list[Instruction]]:
    """From each instruction containing ``start`` to the next containing ``end``, both included."""
    segments = []
    for i, ins in enumerate(code):
        if start in ins.text:
            j = next((k for k in range(i, len(code)) if end in code[k].text), None)
            if j is not None:
                segments.append(code[i : j + 1])
    return segments


def address_segment(code: list[Instruction], first: int, stop: int) -> list[Instruction]:
    """The instructions at addresses [first, stop)."""
    return [ins for ins in code if first <= ins.address < stop]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", type=Path, help="cuobjdump -sass output")
    ap.add_argument("--function", required=True, help="a substring of the function's mangled name")
    ap.add_argument("--from", dest="start", help="text of a segment's first instruction (with --to)")
    ap.add_argument("--to", dest="end", help="text of a segment's last instruction (with --from)")
    ap.add_argument("--range", help="START:STOP, hexadecimal addresses (STOP excluded)")
    ap.add_argument("--list", action="store_true", help="print each segment's instructions with their stalls")
    a = ap.parse_args(argv)
    code = load_function(a.dump, a.function)
    if code is None:
        return 2
    if a.range:
        first, _, stop = a.range.partition(":")
        segments = [address_segment(code, int(first, 16), int(stop, 16))]
    elif a.start and a.end:
        segments = marked_segments(code, a.start, a.end)
    else:
        print("give --range, or --from and --to", file=sys.stderr)
        return 2
    print(f"{len(code)} instructions in the function, {len(segments)} segment(s)")
    for seg in segments:
        if not seg:
            print("empty segment")
            continue
        print(f"{seg[0].address:#07x}-{seg[-1].address:#07x}: {len(seg)} instructions, "
              f"{sum(x.stall for x in seg)} stall cycles")
        if a.list:
            for x in seg:
                print(f"  {x.address:#07x}  s{x.stall:<2d} {x.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
