"""Calls the extensions' C++ entry points with arguments that their own checks must refuse, bypassing every Python
check, and prints how each refusal reaches Python. Every binding re-checks what it hands a kernel
(device/csrc/quantize/bindings.cpp, device/csrc/gemm/bindings.cpp) and returns the refusal's message
(device/csrc/common/refusal.h), which the Python layer raises as RuntimeError; it must never become a launch or a
crash. The messages carry numbers on purpose: where the compiler links libstdc++ statically into an extension (the
H100 machine), a message formatted with iostreams (c10::str, TORCH_CHECK) crashes the process (SIGSEGV;
common/refusal.h says why).

Exit status 0 when every call was refused with a message. tests/test_device_quantize.py and test_device_gemm.py run
it in a child process (a crash there would take the test worker down):

    python tools/sanitizer/check_binding_errors.py [quantize|gemm|all]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import ModuleType

import torch


def extensions() -> tuple[ModuleType, ModuleType]:
    """(the quantize extension, the grouped GEMM extension), built or loaded by device._build."""
    from device._build import load_extensions

    quantize_ext, gemm_ext = load_extensions()
    return quantize_ext, gemm_ext


def quantize_calls() -> dict[str, Callable[[], str]]:
    """Refused calls into the quantize extension."""
    ext = extensions()[0]
    u8 = dict(dtype=torch.uint8, device="cuda")
    one = torch.ones(1, dtype=torch.float32, device="cuda")

    def out(rows: int, cols: int) -> torch.Tensor:
        return torch.empty((rows, cols), dtype=torch.float32, device="cuda")

    bf16 = dict(dtype=torch.bfloat16, device="cuda")

    def offsets(e: int) -> torch.Tensor:
        return torch.zeros(6 * (e + 1), dtype=torch.int64, device="cuda")

    return {
        "amax_ K of 24": lambda: ext.amax_(torch.zeros((4, 24), **bf16), None, 1, 1, torch.zeros(1, device="cuda"),
                                           None, False, False, 0, False, False, None, None, 0),
        "amax_ RHT of float32": lambda: ext.amax_(torch.zeros((4, 32), device="cuda"), None, 1, 1,
                                                  torch.zeros(1, device="cuda"), None, True, True, 0xD7E8, False,
                                                  False, None, None, 0),
        "amax_ grouped, row_tiles short": lambda: ext.amax_(torch.zeros((300, 32), **bf16), offsets(2), 2, 3,
                                                           torch.zeros(2, device="cuda"), None, False, False, 0,
                                                           False, False, None, None, 0),
        "amax_ splits of 3 values for 2 groups": lambda: ext.amax_(
            torch.zeros((300, 32), **bf16), offsets(2), 2, 4, torch.zeros(2, device="cuda"), None, False, False, 0,
            True, False, None, torch.zeros(3, dtype=torch.int64, device="cuda"), 0),
        "amax_ offsets of 5 values": lambda: ext.amax_(torch.zeros((4, 32), **bf16),
                                                       torch.zeros(5, dtype=torch.int64, device="cuda"), 1, 1,
                                                       torch.zeros(1, device="cuda"), None, False, False, 0, False,
                                                       False, None, None, 0),
        "quantize_ amax of 1 value for 2 groups": lambda: ext.quantize_(
            torch.zeros((64, 32), **bf16), offsets(2), 2, 2, one, one, torch.zeros(1024, **u8),
            torch.zeros(1024, **u8), None, None, 2, False, False, 0, False, 0, 0, 0, 0, False, None, 0),
        # the output buffers' sizes (quantize/bindings.cpp check_outputs): 64 x 32 single tensor, swizzled scales need
        # roundup(64, 128) * roundup(2, 4) = 512 bytes
        "quantize_ row_scales of 256 bytes": lambda: ext.quantize_(
            torch.zeros((64, 32), **bf16), None, 1, 1, one, one, torch.zeros(1024, **u8), torch.zeros(256, **u8),
            None, None, 2, False, False, 0, False, 0, 0, 0, 0, False, None, 0),
        "quantize_ float32 col_data": lambda: ext.quantize_(
            torch.zeros((64, 32), **bf16), None, 1, 1, one, one, None, None, torch.zeros(256, device="cuda"),
            torch.zeros(512, **u8), 2, False, False, 0, False, 0, 0, 0, 0, False, None, 0),
        "quantize_ grouped compact layout": lambda: ext.quantize_(
            torch.zeros((64, 32), **bf16), offsets(2), 2, 2, torch.ones(2, device="cuda"),
            torch.ones(2, device="cuda"), torch.zeros(1024, **u8), torch.zeros(1024, **u8), None, None, 0, False,
            False, 0, False, 0, 0, 0, 0, False, None, 0),
        "supplied_amax_ float64 amax": lambda: ext.supplied_amax_(
            torch.ones(1, dtype=torch.float64, device="cuda"), one, torch.zeros(1, device="cuda"),
            torch.zeros(1, device="cuda")),
        "supplied_amax_ of 2 values": lambda: ext.supplied_amax_(torch.ones(2, device="cuda"), one,
                                                                 torch.zeros(1, device="cuda"),
                                                                 torch.zeros(1, device="cuda")),
        "group_setup_ supplied amax of 1 value for 2 groups": lambda: ext.group_setup_(
            torch.zeros(2, dtype=torch.int64, device="cuda"), 64, 32, offsets(2), torch.zeros(2, device="cuda"),
            torch.zeros(2, device="cuda"), one, None, None, None, None, None, None),
        "group_setup_ supplied amax without its buffer": lambda: ext.group_setup_(
            torch.zeros(2, dtype=torch.int64, device="cuda"), 64, 32, offsets(2), None, None,
            torch.ones(2, device="cuda"), None, None, None, None, None, None),
        "swizzle_ short out": lambda: ext.swizzle_(torch.zeros((4, 4), **u8), torch.zeros(16, **u8)),
        "dequantize_ short data": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(65536, **u8), one,
                                                          1024, 1024, True, 0, 448, out(1024, 1024)),
        "dequantize_ CPU amax": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(512, **u8), one.cpu(),
                                                        32, 32, True, 0, 448, out(32, 32)),
        "dequantize_ CPU data": lambda: ext.dequantize_(torch.zeros(512, dtype=torch.uint8), torch.zeros(512, **u8),
                                                        one, 32, 32, True, 0, 448, out(32, 32)),
        "dequantize_ rule 4": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(512, **u8), one, 32, 32,
                                                      True, 4, 448, out(32, 32)),
        "dequantize_ G 512": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(512, **u8), one, 32, 32,
                                                     True, 0, 512, out(32, 32)),
    }


def gemm_calls() -> dict[str, Callable[[], str]]:
    """Refused calls into the grouped GEMM extension (grouped_gemm_ in its argument order, device/gemm.py; the
    weights' fp16 copy)."""
    ext = extensions()[1]
    u8 = dict(dtype=torch.uint8, device="cuda")
    plane = torch.zeros(4096, **u8)
    amax = torch.ones(1, dtype=torch.float32, device="cuda")
    out = torch.zeros((16, 16), dtype=torch.bfloat16, device="cuda")
    ws = torch.zeros(1 << 16, **u8)

    def call(kind: int = 0, offs_numel: int = 12, workspace: torch.Tensor = ws, data: torch.Tensor = plane,
             rule: int = 0) -> str:
        offs = torch.zeros(offs_numel, dtype=torch.int64, device="cuda")
        # (plan: fused_128x256, cp_async, staged, no grid cap; device._codes)
        return ext.grouped_gemm_(kind, 1, data, plane, offs, amax, plane, plane, offs, amax, out, None, False,
                                 16, 16, 16, 16, 1.0, rule, 0, workspace, 1, 0, 0, 0, None)

    return {
        "grouped_gemm_ kind 7": lambda: call(kind=7),
        "grouped_gemm_ rule 9": lambda: call(rule=9),
        "grouped_gemm_ offsets of 5 values": lambda: call(offs_numel=5),
        "grouped_gemm_ short workspace": lambda: call(workspace=torch.zeros(8, **u8)),
        "grouped_gemm_ CPU data": lambda: call(data=plane.cpu()),
        "weight_f16_copy_ K 40": lambda: ext.weight_f16_copy_(plane, plane, torch.zeros(12, dtype=torch.int64,
                                                                                        device="cuda"), 1, 40,
                                                              torch.zeros(8192, dtype=torch.float16, device="cuda")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="?", default="all", choices=["quantize", "gemm", "all"],
                    help="the extension whose bindings are called (default: both)")
    which = ap.parse_args().which
    calls: dict[str, Callable[[], str]] = {}
    if which in ("quantize", "all"):
        calls.update(quantize_calls())
    if which in ("gemm", "all"):
        calls.update(gemm_calls())
    bad = 0
    for name, call in calls.items():
        print(f"{name}: ", end="", flush=True)
        try:
            err = call()
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001 - report any exception: the bindings return their errors
            print(f"raised {type(ex).__name__} (expected a returned message): {ex}")
            bad += 1
            continue
        if isinstance(err, str) and err:
            print(f"refused: {err.splitlines()[0][:100]}")
        else:
            print(f"NOT refused (returned {err!r})")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
