"""The debugging CLI (`python -m oracle explain|quantize`) end to end: results, help, messages, pipes."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import oracle


def _run(*args):
    return subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True, text=True)


def test_explain_prints_every_block(tmp_path):
    """--row 1 --amax 2688 (S_enc = 1, SPEC 5.1), blocks worked by hand (E4M3 bytes from ml_dtypes); row 0 differs, so
    that explaining another row than asked shows. Block 0: amax 12 (the NaN ignored) -> scale 2 = 0x40, multiplier 0.5;
    block 1: all 3.0 -> scale 0.5 = 0x30, multiplier 2, every code 0x7 (3 * 2 = 6), dequantized 3."""
    e4m3 = lambda v: int(np.float32(v).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))  # noqa: E731
    x = np.zeros((2, 32), np.float32)
    x[0, :] = 1.5
    x[1, :16] = [12, 5, 7, -1, 0.5, 1.5, 2.5, 3.5, 10, 11, -0.0, np.nan, -3, 9, 0.4, -12]
    x[1, 16:] = 3.0
    np.save(tmp_path / "x.npy", x)
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "1", "--amax", "2688")
    assert r.returncode == 0, r.stderr
    blocks = [ln for ln in r.stdout.splitlines() if ln.startswith("block ")]
    assert blocks[0].startswith(f"block 0: block_amax=12 scale=0x{e4m3(2.0):02X} (2) multiplier=0.5 factor=2"), blocks
    assert blocks[1].startswith(f"block 1: block_amax=3 scale=0x{e4m3(0.5):02X} (0.5) multiplier=2 factor=0.5"), blocks
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("  ")]
    codes = [row[1:] for row in rows if row[0] == "code"]
    assert codes[0][:4] == ["0x7", "0x4", "0x6", "0x9"] and codes[1] == ["0x7"] * 16
    assert [row[1:] for row in rows if row[0] == "dequant"][1] == ["3"] * 16


def test_quantize_writes_all_buffers(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 48)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--rht", "--rounding", "sr", "--seed", "3")
    assert r.returncode == 0, r.stderr
    d = np.load(tmp_path / "o.npz", allow_pickle=False)
    ref = oracle.quantize(x, columnwise=True, rht=True, rounding="sr", seed=3)
    assert np.array_equal(d["row_data"], ref.row.data) and np.array_equal(d["col_scales"], ref.col.scales)
    assert np.array_equal(d["col_scales_swizzled"], ref.col.swizzled_scales())
    assert d["col_amax"].view(np.uint32) == np.float32(ref.col.amax).view(np.uint32)
    assert json.loads(str(d["options_json"]))["rounding"] == "sr"


def test_cli_reports_bad_input(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 20), np.float32))
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "0")
    assert r.returncode == 2 and "multiple of 16" in r.stderr


def test_cli_missing_file_and_bad_row(tmp_path):
    r = _run("quantize", str(tmp_path / "nope.npy"), str(tmp_path / "o.npz"))
    assert r.returncode == 2 and "error:" in r.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float32))
    for row in ("5", "2", "-1"):  # a 2-row plane: rows 0 and 1 only (no Python-style negative index)
        r = _run("explain", str(tmp_path / "x.npy"), "--row", row)
        assert r.returncode == 2 and "outside" in r.stderr and "Traceback" not in r.stderr, (row, r.stderr)


def test_cli_amax_pair_and_dtype_conversion(tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--amax", "2688", "7", "--input-dtype", "float32")
    assert r.returncode == 0, r.stderr
    d = np.load(tmp_path / "o.npz", allow_pickle=False)
    assert float(d["row_amax"]) == 2688.0 and float(d["col_amax"]) == 7.0
    ref = oracle.quantize(x.astype(np.float32), columnwise=True, amax=(2688.0, 7.0))
    assert np.array_equal(d["row_data"], ref.row.data)


# ---- the CLI's own surface: help, labels, odd inputs, pipes --------------------------------------------------


def test_explain_help_says_how_to_pass_bf16_and_the_recipes_work(tmp_path, monkeypatch):
    """`explain --help` tells how to give --rht its bf16 input, and following it to the letter works."""
    r = _run("explain", "--help")
    assert r.returncode == 0, r.stderr
    h = r.stdout
    assert "--input-dtype {auto,float32,float16,bfloat16}" in h
    assert "needs bf16 input" in h and "uint16" in h and "--input-dtype bfloat16" in h and "np.save" in h
    recipes = [ln.strip() for ln in h.splitlines() if ln.strip().startswith("np.save(")]
    example = [ln.strip() for ln in h.splitlines() if ln.strip().startswith("python -m oracle explain")]
    assert len(recipes) == 2 and len(example) == 1, h
    x = np.random.default_rng(5).standard_normal((20, 32)).astype(np.float32)
    outs = []
    monkeypatch.chdir(tmp_path)  # the recipes write x.npy in the working directory
    for recipe in recipes:  # each writes x.npy in its own way; the example command then reads it
        (tmp_path / "x.npy").unlink(missing_ok=True)
        exec(recipe, {"np": np, "ml_dtypes": ml_dtypes, "x": x, "__builtins__": {}}, {})
        r = subprocess.run([sys.executable, *example[0].split()[1:]], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, (recipe, r.stderr)
        outs.append(r.stdout)
    assert outs[0] == outs[1] and "rht=True" in outs[0]
    # the saved ml_dtypes array also works without --input-dtype (auto reads it as bfloat16)
    np.save(tmp_path / "b.npy", x.astype(ml_dtypes.bfloat16))
    r = _run("explain", str(tmp_path / "b.npy"), "--row", "3", "--plane", "col", "--rht")
    assert r.returncode == 0 and r.stdout == outs[0], r.stderr
    # what the help warns about gets a message that points back to it
    np.save(tmp_path / "f.npy", x)
    r = _run("explain", str(tmp_path / "f.npy"), "--row", "3", "--plane", "col", "--rht")
    assert r.returncode == 2 and "--rht needs bf16 input" in r.stderr and "--input-dtype bfloat16" in r.stderr
    np.save(tmp_path / "u.npy", x.astype(ml_dtypes.bfloat16).view(np.uint16))
    r = _run("explain", str(tmp_path / "u.npy"), "--row", "3", "--plane", "col", "--rht")
    assert r.returncode == 2 and "pass --input-dtype bfloat16" in r.stderr
    np.save(tmp_path / "h.npy", np.linspace(-3, 3, 16, dtype=np.float16).reshape(1, 16))
    r = _run("explain", str(tmp_path / "h.npy"), "--row", "3", "--plane", "col", "--rht", "--input-dtype", "bfloat16")
    assert r.returncode == 2 and "holds float16 values" in r.stderr
    r = _run("explain", str(tmp_path / "b.npy"), "--row", "3", "--rht")
    assert r.returncode == 2 and "--plane col" in r.stderr
    r = _run("quantize", str(tmp_path / "b.npy"), str(tmp_path / "o.npz"), "--rht", "--no-columnwise")
    assert r.returncode == 2 and "columnwise plane only" in r.stderr


def _help_problems(parser) -> list[str]:
    """Every action of ``parser`` and its subparsers without help text, or whose non-None default the rendered
    help does not show as ``(default: V)`` with V read back equal to it."""
    import argparse

    problems, todo = [], [(parser.prog, parser)]
    while todo:
        name, p = todo.pop()
        lines = p.format_help().splitlines()
        for act in p._actions:
            what = f"{name} {'/'.join(act.option_strings) or act.dest}"
            if not (act.help or "").strip():
                problems.append(f"{what}: no help")
            if isinstance(act, argparse._SubParsersAction):
                for choice in act._choices_actions:
                    if not (choice.help or "").strip():
                        problems.append(f"{name} {choice.dest}: no help")
                todo.extend((sp.prog, sp) for sp in act.choices.values())
                continue
            if act.default is None or act.default is argparse.SUPPRESS:
                continue
            head = act.option_strings[0] if act.option_strings else (act.metavar or act.dest)
            at = [i for i, ln in enumerate(lines) if ln.split() and ln.split()[0].rstrip(",") == head]
            entry = []  # the option's line and its continuation lines (help under a long invocation)
            for ln in lines[at[0]:] if at else []:  # (the first: an epilog may quote the option too)
                if entry and not (ln.startswith("    ") and not ln.lstrip().startswith("-")):
                    break
                entry.append(ln)
            shown = re.findall(r"\(default: ([^)]*)\)", " ".join(entry))
            if len(shown) != 1:
                problems.append(f"{what}: the help does not show its default {act.default!r}")
                continue
            v, d = shown[0], act.default
            ok = v == str(d) if isinstance(d, (bool, str)) else (int(v, 0) == d if isinstance(d, int) else False)
            if not ok:
                problems.append(f"{what}: help shows default {v!r}, the parser's is {d!r}")
    return problems


def test_every_option_has_help_and_shows_its_default(monkeypatch):
    import argparse

    from oracle.cli import build_parser

    monkeypatch.setenv("COLUMNS", "2000")  # one line per option, so each default is on its option's line
    p = build_parser()
    assert _help_problems(p) == []
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)][0].choices
    assert set(subs) == {"explain", "quantize", "diagnose", "vectors"}
    assert len(subs["explain"]._actions) >= 12 and "(default: 0xD7E8)" in subs["explain"].format_help()
    # the walk finds what it looks for: an option without help, and a default the help does not show
    bad = argparse.ArgumentParser(prog="bad")
    bad.add_argument("--quiet-default", type=int, default=3, help="shows nothing")
    bad.add_argument("--no-help", action="store_true")
    assert _help_problems(bad) == ["bad --quiet-default: the help does not show its default 3",
                                   "bad --no-help: no help", "bad --no-help: the help does not show its default False"]


def test_explain_labels_rht_output_as_such(tmp_path):
    """Under --rht the values explain prints are the RHT outputs (SPEC 7.2, 7.3), and the row says so."""
    from oracle.cli import _fmt
    from oracle.rht import rht

    x = np.random.default_rng(9).standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)

    def rows(*extra):
        r = _run("explain", str(tmp_path / "x.npy"), "--row", "5", "--plane", "col", *extra)
        assert r.returncode == 0, r.stderr
        return {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines() if ln.startswith("  ")}

    with_rht = rows("--rht")
    assert "input" not in with_rht
    assert with_rht["rht(input)"] == [_fmt(v) for v in rht(x[:, 5])]  # column 5 of X: 16 tokens, one block
    plain = rows()
    assert "rht(input)" not in plain and plain["input"] == [_fmt(v) for v in x[:, 5]]
    assert with_rht["rht(input)"] != plain["input"]


def test_scalar_input_gets_a_message_that_makes_sense(tmp_path):
    from oracle.cli import check_input

    np.save(tmp_path / "s.npy", np.float32(3.0))  # np.save of a scalar writes a 0-d array
    for args in (("explain", str(tmp_path / "s.npy"), "--row", "0"),
                 ("quantize", str(tmp_path / "s.npy"), str(tmp_path / "o.npz")),
                 ("explain", str(tmp_path / "s.npy"), "--row", "0", "--input-dtype", "float16")):
        r = _run(*args)
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert "is a NumPy scalar (a 0-d array, shape ())" in r.stderr and "multiple of 16" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and "got float32" not in r.stderr
    for s in (np.float32(3.0), np.array(3.0, np.float32), np.array(3.0, ml_dtypes.bfloat16)):
        with pytest.raises(ValueError, match=r"NumPy scalar \(a 0-d array, shape \(\)\)"):
            check_input(s, "x")
    check_input(np.zeros((1, 16), np.float32), "x")  # a matrix passes


def _big_explain_input(tmp_path):
    """An input whose explain output (~1.5 MB) is far larger than a pipe's buffer."""
    np.save(tmp_path / "big.npy", np.random.default_rng(0).standard_normal((2, 16 * 2000)).astype(np.float32))
    return str(tmp_path / "big.npy")


def test_explain_into_a_pipe_closed_early_exits_quietly(tmp_path):
    """A reader that stops early: exit status 0, nothing on stderr (no "Broken pipe", no traceback)."""
    p = subprocess.Popen([sys.executable, "-m", "oracle", "explain", _big_explain_input(tmp_path), "--row", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = [p.stdout.readline() for _ in range(3)]
    p.stdout.close()
    err = p.stderr.read()
    p.stderr.close()
    assert p.wait(timeout=120) == 0, err
    assert err == b"" and first[0].startswith(b"plane=row") and first[1].startswith(b"block 0:")


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("head") is None, reason="needs bash and head")
def test_explain_piped_to_head(tmp_path):
    cmd = f"set -o pipefail; {shlex.quote(sys.executable)} -m oracle explain {_big_explain_input(tmp_path)} --row 0 | head -3"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # pipefail: the oracle's own status is 0 too
    assert len(r.stdout.splitlines()) == 3


def test_diagnose_keeps_its_verdict_when_the_reader_leaves(tmp_path, monkeypatch, capsys):
    """diagnose's exit status 1 (no rule reproduces the bytes) survives a closed pipe: under ``set -o pipefail``
    ``python -m oracle diagnose ... | head -1`` must not pass a mismatch."""
    from oracle.cli import main

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    x, t = _bad_inputs(tmp_path)
    data = t.row.data.copy()
    data[0, 0] ^= 0x11  # two codes of block 0 changed: no rule makes these bytes
    np.savez(tmp_path / "wrong.npz", row_data=data, row_scales=t.row.scales)
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["diagnose", str(tmp_path / "x.npy"), str(tmp_path / "wrong.npz"), "--rules", "te"]) == 1
    assert main(["diagnose", str(tmp_path / "x.npy"), str(tmp_path / "theirs.npz"), "--rules", "te"]) == 0
    assert "error" not in capsys.readouterr().err


def test_main_in_process_treats_a_broken_pipe_as_done(tmp_path, monkeypatch, capsys):
    """main() itself (as tests call it) returns 0 on a BrokenPipeError and prints no "error:"."""
    from oracle.cli import main

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    np.save(tmp_path / "x.npy", np.zeros((2, 32), np.float32))
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["explain", str(tmp_path / "x.npy"), "--row", "0"]) == 0
    assert "error" not in capsys.readouterr().err


def test_diagnose_a_columnwise_plane_saved_under_the_generic_names(tmp_path):
    """A columnwise plane (bytes from conformance.te_torch, torch written from SPEC 6.2) saved as data / scales is
    diagnosed as the columnwise plane: found from the data's shape, or named by --plane col."""
    pytest.importorskip("torch")  # conformance.te_torch runs on torch
    from conformance import te_torch as tt

    x = (np.random.default_rng(3).standard_normal((40, 64)) * 4).astype(np.float32)  # M = 40: X^T padded to 48
    o = tt.quantize(x, rowwise=False, columnwise=True)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "col.npz", data=o["col_data"], scales=o["col_scales"])
    for extra in ((), ("--plane", "col")):
        r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "col.npz"), "--rules", "te,torchao", *extra)
        assert r.returncode == 0, (extra, r.stdout, r.stderr)
        assert "compared as the col plane" in r.stdout and "reproduced exactly by: te" in r.stdout, r.stdout
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "col.npz"), "--plane", "row")
    assert r.returncode == 2 and "is not the row plane" in r.stderr, r.stderr


def _bad_inputs(tmp_path):
    """Files a user may pass by mistake, and a correct THEIRS.npz of x's rowwise plane."""
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x_archive.npz", x=x)
    (tmp_path / "x.txt").write_text("not an array")
    np.save(tmp_path / "x_complex.npy", x.astype(np.complex64))
    t = oracle.quantize(x)
    np.savez(tmp_path / "theirs.npz", row_data=t.row.data, row_scales=t.row.scales)
    (tmp_path / "corrupt.npz").write_bytes((tmp_path / "theirs.npz").read_bytes()[:200])  # (the header whole, the data cut)
    np.savez(tmp_path / "torchao_empty_scale.npz", qdata=t.row.data, scale=t.row.scales,
             per_tensor_scale=np.zeros(0, np.float32))
    return x, t


@pytest.mark.parametrize("argv, words", [
    (["diagnose", "x.npy", "theirs.npz", "--rht-signs", "0x10000"], "16-bit"),
    (["diagnose", "x.npy", "theirs.npz", "--rht-signs", "-1"], "16-bit"),
    (["diagnose", "x.npy", "corrupt.npz"], "not a readable .npz"),
    (["diagnose", "x.npy", "x.npy"], "single .npy array"),
    (["diagnose", "x.npy", "torchao_empty_scale.npz"], "per_tensor_scale is empty"),
    (["diagnose", "x_archive.npz", "theirs.npz"], "is an .npz archive"),
    # a file with the rowwise plane's names only, searched for the columnwise plane's
    (["diagnose", "x.npy", "theirs.npz", "--plane", "col"], "the row plane's names, and --plane col looks for the col"),
    (["explain", "x_archive.npz", "--row", "0"], "is an .npz archive"),
    (["quantize", "x_archive.npz", "o.npz"], "is an .npz archive"),
    (["explain", "x.txt", "--row", "0"], "not an .npy file"),
    (["quantize", "x_complex.npy", "o.npz", "--input-dtype", "float32"], "complex"),
    (["vectors", "vv", "--seed", "-1"], "--seed must be >= 0"),
    (["vectors", "x.npy"], "x.npy is a file, not a folder"),
])
def test_cli_refuses_bad_files_in_one_line(tmp_path, monkeypatch, capsys, argv, words):
    """Exit status 2 and one 'error:' line naming the problem, no traceback (a wrong sign mask used to change
    diagnose's verdict; a corrupt archive, an .npz as X and an empty torchao scale raised tracebacks)."""
    from oracle.cli import main

    _bad_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and len(err.strip().splitlines()) == 1, err


def test_diagnose_refuses_an_empty_rule_list(tmp_path, monkeypatch, capsys):
    """``--rules ,`` names no rule: a usage error that says so, not a report that no rule of the oracle applies to
    the input (as if the input were at fault)."""
    from oracle.cli import main

    _bad_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "x.npy", "theirs.npz", "--rules", " , "])
    assert e.value.code == 2
    assert "--rules: ' , ' names no rule" in capsys.readouterr().err


def test_quantize_writes_the_named_path(tmp_path, monkeypatch, capsys):
    """np.savez appends .npz to a name without it; the CLI writes the path it names, and a folder is refused."""
    from oracle.cli import main

    x, t = _bad_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["quantize", "x.npy", "out.bin"]) == 0
    assert "wrote out.bin" in capsys.readouterr().out and not (tmp_path / "out.bin.npz").exists()
    with np.load(tmp_path / "out.bin", allow_pickle=False) as d:
        assert np.array_equal(d["row_data"], t.row.data)
    (tmp_path / "folder").mkdir()
    assert main(["quantize", "x.npy", "folder"]) == 2
    assert not (tmp_path / "folder.npz").exists()
    before = (tmp_path / "x.npy").read_bytes()
    assert main(["quantize", "x.npy", "./x.npy"]) == 2  # the input itself (another spelling of its path) is refused
    assert "is the input file" in capsys.readouterr().err and (tmp_path / "x.npy").read_bytes() == before


def test_diagnose_refuses_bad_mask_and_amax_count():
    """oracle.diagnose itself refuses a sign mask outside 16 bits and an amax that is neither one value nor one per
    row (both used to be skipped silently, the mask changing which rules were tried)."""
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    t = oracle.quantize(x)
    for mask, error in ((-1, ValueError), (1 << 16, ValueError), (True, TypeError), (1.5, TypeError)):
        with pytest.raises(error, match="16-bit"):
            oracle.diagnose(x, t.row.data, t.row.scales, rht_signs=mask)
    with pytest.raises(ValueError, match="one per plane row"):
        oracle.diagnose(x, t.row.data, t.row.scales, amax=[1.0, 2.0, 3.0])
    assert oracle.diagnose(x, t.row.data, t.row.scales, amax=[float(t.row.amax)] * 4) is not None


# ---- options reach the oracle: values worked by hand or by the scalar SPEC transcription (tests/spec_scalar.py) ----


def _quantize_npz(tmp_path, x, *args) -> dict:
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), *args)
    assert r.returncode == 0, r.stderr
    return dict(np.load(tmp_path / "o.npz", allow_pickle=False))


def test_quantize_input_dtype_converts_values(tmp_path):
    """--input-dtype converts the values: a uint16 file holding 1..16 read as float32 has amax 16 (not bf16 bits);
    an all-0.1 float32 row read as float16 has amax fp16(0.1) = 0.0999755859375 (NumPy's float16)."""
    d = _quantize_npz(tmp_path, np.arange(1, 17, dtype=np.uint16).reshape(1, 16), "--input-dtype", "float32",
                      "--no-columnwise")
    assert float(d["row_amax"]) == 16.0
    d = _quantize_npz(tmp_path, np.full((1, 16), 0.1, np.float32), "--input-dtype", "float16", "--no-columnwise")
    assert d["row_amax"].astype(np.float32).tobytes() == np.float32(np.float16(0.1)).tobytes()


def test_quantize_plane_shapes_and_no_columnwise(tmp_path):
    """X [20, 48]: row_shape [20, 48] (SPEC 6.1), col_shape [48, roundup(20, 16)] = [48, 32] (SPEC 6.2);
    --no-columnwise writes no col_* array."""
    d = _quantize_npz(tmp_path, np.random.default_rng(0).standard_normal((20, 48)).astype(np.float32))
    assert d["row_shape"].tolist() == [20, 48] and d["col_shape"].tolist() == [48, 32]
    d = _quantize_npz(tmp_path, np.ones((4, 32), np.float32), "--no-columnwise")
    assert not [k for k in d if k.startswith("col_")], sorted(d)


def _sr_codes_by_scalar_spec(x, seed: int, offset: int):
    from spec_scalar import sr_random_byte_source, te_amax, te_sr_plane

    from oracle.philox import philox4x32  # Random123's known answers: tests/test_oracle_rht_sr.py

    codes, _ = te_sr_plane(x, te_amax(x), sr_random_byte_source(philox4x32, seed, 0, offset))
    return codes


@pytest.mark.parametrize("args, seed, offset", [(("--seed", "5", "--offset", "9"), 5, 9), ((), 0, 0)])
def test_quantize_sr_seed_and_offset(tmp_path, args, seed, offset):
    """--rounding sr: the row codes are SPEC 3.4's with SPEC 10.2's bytes of key ``seed`` and counter word 3 =
    ``offset`` (the scalar transcription); without --seed / --offset both are 0 (the help's defaults)."""
    x = np.random.default_rng(4).standard_normal((3, 48)).astype(np.float32)
    d = _quantize_npz(tmp_path, x, "--rounding", "sr", "--no-columnwise", *args)
    got = np.stack([d["row_data"] & 0xF, d["row_data"] >> 4], -1).reshape(3, 48)
    assert np.array_equal(got, _sr_codes_by_scalar_spec(x, seed, offset))
    assert json.loads(str(d["options_json"]))["offset"] == offset


def test_explain_and_quantize_apply_rht_signs(tmp_path):
    """--rht-signs 0x0000: explain's header names the mask and its rht(input) values are SPEC 7.2's transform with
    those signs (spec_scalar.rht_block) rounded to bf16 (ml_dtypes); quantize records the mask in its options."""
    from spec_scalar import rht_block

    x = np.random.default_rng(9).standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "5", "--plane", "col", "--rht", "--rht-signs", "0x0000")
    assert r.returncode == 0, r.stderr
    assert "signs 0x0000" in r.stdout
    got = [float(v) for ln in r.stdout.splitlines() if ln.startswith("  ") and ln.split()[0] == "rht(input)"
           for v in ln.split()[1:]]
    want = [float(f"{float(np.float32(v).astype(ml_dtypes.bfloat16)):.6g}")
            for v in rht_block([float(t) for t in x[:, 5].astype(np.float32)], 0)]
    assert got == want
    d = _quantize_npz(tmp_path, x, "--rht", "--rht-signs", "0")
    assert json.loads(str(d["options_json"]))["rht_signs"] == 0


def test_explain_rht_on_float16_says_how_to_pass_bf16(tmp_path):
    """--rht needs bf16 input (SPEC 7.3): a float16 file gets the CLI's own message, which says how to give bf16."""
    np.save(tmp_path / "h.npy", np.ones((16, 32), np.float16))
    r = _run("explain", str(tmp_path / "h.npy"), "--row", "0", "--plane", "col", "--rht")
    assert r.returncode == 2 and "--rht needs bf16 input" in r.stderr, r.stderr


def _te_bytes_by_scalar_spec(x, amax):
    """Packed codes (SPEC 2.3: element 2i in the low nibble) and compact scale bytes of rule te's rowwise plane."""
    from spec_scalar import te_quantize_row_blocks

    data = np.zeros((x.shape[0], x.shape[1] // 2), np.uint8)
    scales = np.zeros((x.shape[0], x.shape[1] // 16), np.uint8)
    for r in range(x.shape[0]):
        codes, sb = te_quantize_row_blocks(x[r], amax)
        data[r] = [codes[2 * i] | (codes[2 * i + 1] << 4) for i in range(x.shape[1] // 2)]
        scales[r] = sb
    return data, scales


def test_diagnose_reads_a_generic_amax_and_honours_layout(tmp_path):
    """THEIRS saved as data / scales / amax (the generic names) made with a supplied amax of 2688: diagnose uses that
    amax and rule te reproduces every byte. Compact scale bytes given as --layout swizzled are named as linear scales
    read as swizzled; as compact, no such line."""
    from spec_scalar import te_amax

    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    data, scales = _te_bytes_by_scalar_spec(x, np.float32(2688.0))
    np.savez(tmp_path / "t.npz", data=data, scales=scales, amax=np.float32(2688.0))
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "t.npz"), "--rules", "te", "--plane", "row",
             "--layout", "compact")
    assert r.returncode == 0 and "reproduced exactly by: te" in r.stdout, (r.stdout, r.stderr)
    data, scales = _te_bytes_by_scalar_spec(x, te_amax(x))
    np.savez(tmp_path / "t.npz", data=data, scales=scales)
    for layout, named in (("swizzled", True), ("compact", False)):
        r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "t.npz"), "--rules", "te", "--layout", layout)
        assert r.returncode == 0, (layout, r.stderr)
        assert ("linear scales read as swizzled" in r.stdout) == named, (layout, r.stdout)


def test_diagnose_reads_flashinfer_8x4_scales(tmp_path):
    """--layout swizzled_8x4 and --layout flashinfer read scales placed by SPEC 8.3's offset formula (4 rows, 2 scale
    columns: padded to 8 x 4, one 32-byte tile, row r at bytes 4r .. 4r + 1); rule te reproduces every byte."""
    from spec_scalar import te_amax

    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    data, scales = _te_bytes_by_scalar_spec(x, te_amax(x))
    tile = np.zeros(32, np.uint8)
    for r in range(4):
        tile[4 * r: 4 * r + 2] = scales[r]
    np.savez(tmp_path / "t.npz", data=data, scales=tile)
    for layout in ("swizzled_8x4", "flashinfer"):
        r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "t.npz"), "--rules", "te", "--layout", layout)
        assert r.returncode == 0 and "reproduced exactly by: te" in r.stdout, (layout, r.stdout, r.stderr)
        assert "8x4 swizzled (SPEC 8.3)" in r.stdout, r.stdout


def test_input_dtype_conversion_notes_changed_values(tmp_path):
    """--input-dtype float16 on float32 values: 0.1 is not a float16 value (rounded) and 1e5 is past float16's 65504
    (Inf); 1.5 and 2 are exact. stderr counts both (2 of 16 changed, 1 to Inf), stdout is untouched; an exact
    conversion (float16 values read as float32) prints no note."""
    x = np.full((1, 16), 1.5, np.float32)
    x[0, 3], x[0, 7], x[0, 9] = 0.1, 1e5, 2.0
    np.save(tmp_path / "x.npy", x)
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--input-dtype", "float16",
             "--no-columnwise")
    assert r.returncode == 0, r.stderr
    assert "changed 2 of 16 values" in r.stderr and "float32 -> float16" in r.stderr, r.stderr
    assert "1 of them to +-Inf" in r.stderr and "note:" not in r.stdout
    np.save(tmp_path / "h.npy", np.linspace(-3, 3, 16, dtype=np.float16).reshape(1, 16))
    r = _run("quantize", str(tmp_path / "h.npy"), str(tmp_path / "o.npz"), "--input-dtype", "float32",
             "--no-columnwise")
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr


def test_inputs_from_a_pipe_and_output_to_a_stream(tmp_path):
    """X read from a FIFO (opened once: a second open would wait for a writer that has gone), the .npz written to a
    file that cannot seek (a FIFO read by a reader thread): the same bytes as from and to regular files."""
    import os
    import threading

    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    fifo_in, fifo_out = tmp_path / "in.npy", tmp_path / "out.npz"
    os.mkfifo(fifo_in)
    os.mkfifo(fifo_out)
    got = {}

    def feed():
        with open(fifo_in, "wb") as f:
            f.write((tmp_path / "x.npy").read_bytes())

    def drain():
        with open(fifo_out, "rb") as f:
            got["npz"] = f.read()

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    for t in threads:
        t.start()
    r = subprocess.run([sys.executable, "-m", "oracle", "quantize", str(fifo_in), str(fifo_out)], capture_output=True,
                       text=True, timeout=60)
    for t in threads:
        t.join(timeout=60)
    assert r.returncode == 0, r.stderr
    d = np.load(io.BytesIO(got["npz"]), allow_pickle=False)
    ref = oracle.quantize(x, columnwise=True)
    assert np.array_equal(d["row_data"], ref.row.data) and np.array_equal(d["col_scales"], ref.col.scales)


def test_cli_messages_for_files_of_the_wrong_kind(tmp_path):
    x = np.zeros((2, 32), np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "t.npy").write_text("not an array at all")
    r = _run("diagnose", str(tmp_path / "x.npy"), str(tmp_path / "t.npy"))
    assert r.returncode == 2 and "is not an .npz archive" in r.stderr and "pickle" not in r.stderr
    (tmp_path / "trunc.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:200])  # (the header whole, the data cut)
    r = _run("explain", str(tmp_path / "trunc.npy"), "--row", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    np.save(tmp_path / "f8.npy", x.astype(ml_dtypes.float8_e4m3fn))  # stored as 1-byte void elements
    r = _run("explain", str(tmp_path / "f8.npy"), "--row", "0")
    assert r.returncode == 2 and "raw 1-byte elements" in r.stderr
    r = subprocess.run([sys.executable, "-m", "oracle", "vectors", ""], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "empty path" in r.stderr and sorted(p.name for p in tmp_path.iterdir()) == [
        "f8.npy", "t.npy", "trunc.npy", "x.npy"]


def test_float32_conversion_of_two_byte_integers_notes_the_bf16_reading(tmp_path):
    bits = np.full((1, 16), 0x3F80, np.uint16)  # bf16 1.0 as bit patterns
    np.save(tmp_path / "u16.npy", bits)
    r = _run("quantize", str(tmp_path / "u16.npy"), str(tmp_path / "o.npz"), "--input-dtype", "float32")
    assert r.returncode == 0 and "if they are bf16 bit patterns, pass --input-dtype bfloat16" in r.stderr
    assert np.load(tmp_path / "o.npz")["row_amax"] == np.float32(0x3F80)  # the values converted, as asked


def test_options_that_would_be_dropped_are_named(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 16), np.float32))
    r = _run("quantize", str(tmp_path / "x.npy"), str(tmp_path / "o.npz"), "--no-columnwise", "--amax", "1", "2")
    assert r.returncode == 2 and "--no-columnwise writes no columnwise plane" in r.stderr
    assert not (tmp_path / "o.npz").exists()
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "0", "--seed", "5")
    assert r.returncode == 0 and "--seed and --offset enter stochastic rounding only" in r.stderr
    r = _run("explain", str(tmp_path / "x.npy"), "--row", "0", "--seed", "5", "--rounding", "sr")
    assert r.returncode == 0 and "note:" not in r.stderr
