"""Probe of Hopper tensor-core accumulation (fp16 x fp16 -> fp32 through Triton's tl.dot, which compiles to wgmma on
sm_90): how small products are added to a large accumulator or a large product. Evidence for docs/gemm.md
("Known defect"); prints one line per magnitude 2^-e of the small terms.

    PYTHONPATH=. python3 benchmarks/probe_wgmma_accumulation.py        (needs a GPU and triton)
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, K: tl.constexpr):
    offs_m = tl.arange(0, 64)
    offs_n = tl.arange(0, 64)
    offs_k = tl.arange(0, 16)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k0 in range(0, K, 16):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * 64 + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * 64 + offs_n[None, :], acc)


def tensor_core_dot(row: list[float], k: int) -> float:
    """sum(row) computed as row . ones by the tensor cores, k16 steps in order."""
    a = torch.zeros((64, k), dtype=torch.float16, device="cuda")
    a[0, : len(row)] = torch.tensor(row, dtype=torch.float64).half()
    b = torch.ones((k, 64), dtype=torch.float16, device="cuda")
    c = torch.empty((64, 64), dtype=torch.float32, device="cuda")
    _dot_kernel[(1,)](a, b, c, K=k, num_warps=4)
    return float(c[0, 0])


def fp32_rne(x: float) -> float:
    return float(np.float32(x))


def main() -> None:
    for e in range(22, 30):
        v = 2.0**-e
        two_steps = tensor_core_dot([1.0] + [0.0] * 15 + [v] * 16, 32)  # 16 small products onto an accumulator of 1
        one_step = tensor_core_dot([1.0] + [v] * 15, 16)  # 1 and 15 small products in one k16 step
        print(f"v = 2^-{e}: 1 + 16v over two steps -> 1 + {(two_steps - 1) / v:6.3f} v (fp32 RNE of exact: "
              f"1 + {(fp32_rne(1 + 16 * v) - 1) / v:6.3f} v) | 1 + 15v in one step -> 1 + {(one_step - 1) / v:6.3f} v "
              f"(RNE 1 + {(fp32_rne(1 + 15 * v) - 1) / v:6.3f} v)")


if __name__ == "__main__":
    main()
