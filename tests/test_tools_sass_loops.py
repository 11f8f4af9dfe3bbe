"""tools/sass/loops.py on a hand-made SASS dump: two nested loops, a forward branch, spills inside and outside."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "sass"))  # (loops.py imports stall_cycles from its folder)
_spec = importlib.util.spec_from_file_location("sass_loops", ROOT / "tools" / "sass" / "loops.py")
sass_loops = importlib.util.module_from_spec(_spec)
sys.modules["sass_loops"] = sass_loops  # (dataclasses look their module up)
_spec.loader.exec_module(sass_loops)


def line(address: int, text: str, stall: int) -> str:
    """One instruction as cuobjdump prints it: the text and first word, then the second word (stall at bits 41-44)."""
    return (f"        /*{address:04x}*/                   {text} ;   /* 0x{0xABCD:016x} */\n"
            f"                                                 /* 0x{(stall << 41) | 0x1234:016x} */\n")


DUMP = ("\n\tcode for sm_90a\n\t\tFunction : _Z6kernelv\n"
        + line(0x00, "STL [R1+0x4], R2", 1)
        + line(0x10, "FADD R4, R4, R5", 2)          # outer loop from here
        + line(0x20, "@P2 BRA 0x50", 3)             # a forward branch: no loop
        + line(0x30, "FMUL R6, R4, R4", 4)          # inner loop from here
        + line(0x40, "@!P0 LDL.64 R8, [R1+0x8]", 5)
        + line(0x50, "@P0 BRA 0x30", 6)             # inner loop: 0x30-0x50
        + line(0x60, "@P1 BRA 0x10", 7)             # outer loop: 0x10-0x60
        + line(0x70, "@!P3 BRA !P5, 0x70", 2)       # a spin wait on itself: a loop of one instruction
        + line(0x80, "EXIT", 0)
        + line(0x90, "BRA 0x90", 0))                # the kernel's trailing trap: no loop


def dump_file(folder: Path) -> Path:
    path = folder / "k.sass"
    path.write_text(DUMP)
    return path


def test_loops_bodies_stalls_and_spills(tmp_path):
    code = sass_loops.load_function(dump_file(tmp_path), "_Z6kernel")
    found = sass_loops.loops(code)
    assert [(lp.first, lp.branch) for lp in found] == [(0x30, 0x50), (0x10, 0x60), (0x70, 0x70)]
    inner, outer, spin = found
    assert [len(spin.body), sum(x.stall for x in spin.body), spin.spills] == [1, 2, 0]
    assert [len(inner.body), sum(x.stall for x in inner.body), inner.spills] == [3, 15, 1]
    assert [len(outer.body), sum(x.stall for x in outer.body), outer.spills] == [6, 27, 1]
    assert sum(sass_loops.is_local(x) for x in code) == 2


def test_main_prints_each_loop(tmp_path, capsys):
    dump = dump_file(tmp_path)
    assert sass_loops.main([str(dump), "--function", "_Z6kernel"]) == 0
    out = capsys.readouterr().out
    assert "10 instructions, 2 of them local-memory (STL / LDL)" in out
    assert "0x00030-0x00050             3            15             1" in out
    assert sass_loops.main([str(dump), "--function", "missing"]) == 2
    assert sass_loops.load_function(dump, "missing") is None
