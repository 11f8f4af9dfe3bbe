"""Compare two SASS dumps (tools/sass/build_sass.sh) function by function, by normalized body, names ignored.

A refactoring that moves, renames or splits code but should leave every kernel as it was shows "identical bodies" for
every function and nothing only on one side; a change to a kernel shows that kernel on both sides (old body, new
body). Bodies are compared as their instruction text without addresses and encodings; mangled names inside
instructions are masked.

    python tools/sass/compare_sass.py OLD_DIR NEW_DIR
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from pathlib import Path

FUNCTION = re.compile(r"^\s+Function : (\S+)")
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);")


def functions(directory: Path) -> dict[str, str]:
    """Mangled function name -> its normalized SASS body, for every *.sass file in ``directory``."""
    out: dict[str, str] = {}
    for path in sorted(directory.glob("*.sass")):
        name, body = None, []
        for line in path.read_text().splitlines():
            m = FUNCTION.match(line)
            if m:
                if name:
                    out[name] = "\n".join(body)
                name, body = m.group(1), []
                continue
            m = INSTRUCTION.match(line)
            if name and m:
                body.append(re.sub(r"\b_Z\w+", "SYM", m.group(1)))
        if name:
            out[name] = "\n".join(body)
    return out


def demangle(names: list[str]) -> list[str]:
    try:
        return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    except FileNotFoundError:
        return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the old tree's SASS folder")
    ap.add_argument("new", type=Path, help="the new tree's SASS folder")
    args = ap.parse_args()
    old, new = functions(args.old), functions(args.new)
    old_bodies, new_bodies = Counter(old.values()), Counter(new.values())
    only_old = [n for n, b in old.items() if b not in new_bodies]
    only_new = [n for n, b in new.items() if b not in old_bodies]
    same = len(set(old.values()) & set(new.values()))
    print(f"old: {len(old)} functions, new: {len(new)}; identical bodies: {same}")
    for title, names, side in (("only in OLD", only_old, old), ("only in NEW", only_new, new)):
        print(f"--- {title}: {len(names)}")
        for name, pretty in zip(names, demangle(names), strict=True):
            print(f"  [{side[name].count(chr(10)) + 1} instructions] {pretty[:200]}")
    return 1 if only_old or only_new else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BrokenPipeError:  # (piped into head)
        raise SystemExit(0) from None
