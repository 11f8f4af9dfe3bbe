"""Calls the quantize extension's C++ entry points with buffers too small for them, bypassing the Python checks, and
prints how each refusal reaches Python. The bindings re-check every buffer they hand a kernel (device/csrc/
bindings.cpp) and return the refusal's message (device/_ops.py raises it as RuntimeError); it must never become a
launch or a crash (a TORCH_CHECK thrown out of the module crashed the process on the H100 machine in stop 37, which
is why the bindings return their errors). Exit status 0 when every call was refused with a message. Run in a child process by tests/test_device_quantize.py (a crash there would take
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
