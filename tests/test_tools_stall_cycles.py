"""tools/sass/stall_cycles.py on a hand-made SASS dump whose control words are built field by field."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("stall_cycles", ROOT / "tools" / "sass" / "stall_cycles.py")
stall_cycles = importlib.util.module_from_spec(_spec)
sys.modules["stall_cycles"] = stall_cycles  # (dataclasses look their module up)
_spec.loader.exec_module(stall_cycles)


def control_word(stall: int, yield_: int = 0, write_bar: int = 7, read_bar: int = 7, wait_mask: int = 0,
                 reuse: int = 0, low: int = 0x1234) -> int:
    """The second 64-bit word of an instruction: the control field's parts at bits 41-44 (stall), 45 (yield), 46-48
    (write barrier), 49-51 (read barrier), 52-57 (wait mask), 58-61 (reuse), and opcode bits below bit 41."""
    return (low | stall << 41 | yield_ << 45 | write_bar << 46 | read_bar << 49 | wait_mask << 52
            | reuse << 58)


def line(address: int, text: str, stall: int, **fields: int) -> str:
    return (f"        /*{address:04x}*/                   {text} ;   /* 0x{0xABCD:016x} */\n"
            f"                                                 /* 0x{control_word(stall, **fields):016x} */\n")


DUMP = (
    "\n\tcode for sm_90a\n\t\tFunction : _Z5otherv\n"
    + line(0x0000, "FADD R1, R2, R3", 9)
    + "\t\tFunction : _Z6kernelv\n"
    + line(0x0000, "MOV R1, R2", 3, yield_=1, wait_mask=0x3F, reuse=0xF)
    + line(0x0010, "WARPGROUP.DEPBAR.LE gsb0, 0x0", 2, write_bar=0, read_bar=0)
    + line(0x0020, "FADD R4, |R5|, |R6|", 1, yield_=1)
    + line(0x0030, "VIMNMX3.U32 R7, R7, R4, R8, !PT", 15, wait_mask=0x01)
    + line(0x0040, "VOTE.ALL P6, P0", 13)
    + line(0x0050, "WARPGROUP.DEPBAR.LE gsb0, 0x0", 4)
    + line(0x0060, "VOTE.ALL P1, P1", 0, yield_=1, write_bar=5)
)


def test_stall_counts_from_bits_41_to_44_only():
    code = stall_cycles.instructions(DUMP, "_Z6kernel")
    assert [x.stall for x in code] == [3, 2, 1, 15, 13, 4, 0]
    assert [x.address for x in code] == [0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60]
    assert code[3].text == "VIMNMX3.U32 R7, R7, R4, R8, !PT"


def test_function_chosen_by_name():
    assert [x.stall for x in stall_cycles.instructions(DUMP, "_Z5other")] == [9]
    with pytest.raises(ValueError):
        stall_cycles.instructions(DUMP, "missing")


def test_marked_and_address_segments():
    code = stall_cycles.instructions(DUMP, "_Z6kernel")
    segments = stall_cycles.marked_segments(code, "WARPGROUP.DEPBAR", "VOTE.ALL")
    assert [[x.address for x in s] for s in segments] == [[0x10, 0x20, 0x30, 0x40], [0x50, 0x60]]
    assert [sum(x.stall for x in s) for s in segments] == [2 + 1 + 15 + 13, 4 + 0]
    assert [x.address for x in stall_cycles.address_segment(code, 0x20, 0x40)] == [0x20, 0x30]


def test_cli(tmp_path, capsys):
    dump = tmp_path / "k.sass"
    dump.write_text(DUMP)
    assert stall_cycles.main([str(dump), "--function", "_Z6kernel", "--from", "DEPBAR", "--to", "VOTE"]) == 0
    out = capsys.readouterr().out
    assert "4 instructions, 31 stall cycles" in out and "2 instructions, 4 stall cycles" in out
    assert stall_cycles.main([str(dump), "--function", "nope", "--range", "0:10"]) == 2
    assert stall_cycles.main([str(dump), "--function", "_Z6kernel"]) == 2
