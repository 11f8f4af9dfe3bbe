"""Run one grouped-GEMM case a few times (for ncu / compute-sanitizer): no timing, no checking.

    PYTHONPATH=. python tools/profile/gemm_one_case.py --kind fprop --e 8 --t 16384 --k 4096 --n 14336
        [--mode fast] [--algorithm fused_pair_256x256] [--loader tma] [--epilogue staged] [--reps 2]

Without ``--algorithm`` / ``--loader`` / ``--epilogue`` the planner chooses; given, they are forced through
``device.testing.force_plan``. ``--mode`` defaults to exact for an exact_* algorithm, sm100 for an sm100_* one, else fast.
"""

from __future__ import annotations

import argparse
import contextlib

import torch

import device
from device import testing

ALGORITHMS = ("fused_64x256", "fused_128x256", "fused_pair_256x256", "swapped_64x256", "swapped_256x128",
              "copies_cutlass", "exact_fused", "exact_copies", "exact_hybrid", "sm100_simt", "sm100_copies")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="fprop", choices=["fprop", "dgrad", "wgrad"], help="the GEMM (SPEC 12)")
    ap.add_argument("--mode", choices=["fast", "exact", "sm100"],
                    help="default: exact for an exact_* algorithm, sm100 for an sm100_* one, else fast")
    ap.add_argument("--e", type=int, default=8, help="groups (experts)")
    ap.add_argument("--t", type=int, default=16384, help="tokens, balanced over the groups")
    ap.add_argument("--k", type=int, default=4096, help="hidden size (fprop's contraction)")
    ap.add_argument("--n", type=int, default=14336, help="weight rows per group (fprop's output columns)")
    ap.add_argument("--reps", type=int, default=2, help="calls (ncu: --launch-skip 1 profiles the second)")
    ap.add_argument("--algorithm", choices=ALGORITHMS, help="force this GEMM algorithm")
    ap.add_argument("--loader", choices=["cp_async", "tma"], help="force this loader")
    ap.add_argument("--epilogue", choices=["staged", "tma_store"], help="force this epilogue")
    a = ap.parse_args()
    mode = a.mode or next((m for m in ("exact", "sm100") if (a.algorithm or "").startswith(m + "_")), "fast")
    dev = "cuda"
    st = torch.full((a.e,), a.t // a.e, dtype=torch.int64, device=dev)
    st[-1] += a.t - int(st.sum())
    wsplits = torch.full((a.e,), a.n, dtype=torch.int64, device=dev)
    x = torch.randn((a.t, a.k), device=dev, dtype=torch.bfloat16)
    dy = torch.randn((a.t, a.n), device=dev, dtype=torch.bfloat16)
    w = torch.randn((a.e * a.n, a.k), device=dev, dtype=torch.bfloat16)
    if a.kind == "fprop":
        aq = device.group_quantize(x, st, rowwise=True)
        bq = device.group_quantize(w, wsplits, rowwise=True, block=(16, 16))
    elif a.kind == "dgrad":
        aq = device.group_quantize(dy, st, rowwise=True)
        bq = device.group_quantize(w, wsplits, rowwise=False, columnwise=True, block=(16, 16))
    else:
        aq = device.group_quantize(dy, st, rowwise=False, columnwise=True)
        bq = device.group_quantize(x, st, rowwise=False, columnwise=True)
    forced = {k: v for k, v in (("algorithm", a.algorithm), ("loader", a.loader), ("epilogue", a.epilogue)) if v}
    with testing.force_plan(**forced) if forced else contextlib.nullcontext():
        for _ in range(a.reps):
            device.grouped_gemm(aq, bq, kind=a.kind, mode=mode)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
