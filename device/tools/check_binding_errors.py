"""Calls the quantize extension's C++ entry points with buffers too small for them, bypassing the Python checks, and
prints how each refusal reaches Python. The bindings re-check every buffer they hand a kernel (device/csrc/
bindings.cpp); a refusal must arrive as a RuntimeError, never as a launch or a crash. Exit status 0 when every call
was refused with a RuntimeError. Run in a child process by tests/test_device_quantize.py (a crash there would take
the test worker down), or under gdb to see where a crash happens:

    python device/tools/check_binding_errors.py
"""

from __future__ import annotations

import sys

import torch


def main() -> int:
    from device._build import load_extension

    ext = load_extension()
    dev = "cuda"
    u8 = dict(dtype=torch.uint8, device=dev)
    one = torch.ones(1, dtype=torch.float32, device=dev)
    calls = {
        "swizzle_ short out": lambda: ext.swizzle_(torch.zeros((4, 4), **u8), torch.zeros(16, **u8)),
        "dequantize_ short data": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(65536, **u8), one,
                                                          1024, 1024, True,
                                                          torch.empty((1024, 1024), dtype=torch.float32, device=dev)),
        "dequantize_ CPU amax": lambda: ext.dequantize_(torch.zeros(512, **u8), torch.zeros(512, **u8), one.cpu(),
                                                        32, 32, True,
                                                        torch.empty((32, 32), dtype=torch.float32, device=dev)),
        "dequantize_ CPU data (a check that predates stop 37)": lambda: ext.dequantize_(
            torch.zeros(512, dtype=torch.uint8), torch.zeros(512, **u8), one, 32, 32, True,
            torch.empty((32, 32), dtype=torch.float32, device=dev)),
    }
    bad = 0
    for name, call in calls.items():
        print(f"{name}: ", end="", flush=True)
        try:
            call()
            torch.cuda.synchronize()
            print("NOT refused")
            bad += 1
        except RuntimeError as ex:
            print(f"RuntimeError: {str(ex).splitlines()[0][:100]}")
        except Exception as ex:  # noqa: BLE001 - report any other type
            print(f"{type(ex).__name__} (expected RuntimeError): {ex}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
