"""Oracle speed on one CPU core, next to torchao's CPU nvfp4_quantize on the same input.

Prints one table: quantize 4096x4096 bf16 (rowwise + RHT columnwise; rowwise only), diagnose on its 1024x1024 corner
(every rule; also as a multiple of one quantize of that corner), torchao's `nvfp4_quantize` (rowwise; rowwise +
transposed), the exact GEMM model at 512x4096x4096 and the tensor-core (SPEC 12.6) and sm100 (SPEC 12.7) models at
128x1024x1024.
Targets: oracle quantize <= 1 s and faster than torchao CPU; exact GEMM <= 10 s.

    python benchmarks/bench_oracle.py [--repeat 3] [--skip-gemm]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_v] = "1"  # one core, set before NumPy / torch load their thread pools

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import oracle  # noqa: E402


def best_of(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed calls per quantize row after one warm-up; the best is shown (GEMM rows: one call)")
    ap.add_argument("--skip-gemm", action="store_true", help="time the quantize rows only")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 4096)).astype(ml_dtypes.bfloat16)
    rows = []
    t_full = best_of(lambda: oracle.quantize(x, rowwise=True, columnwise=True, rht=True), a.repeat)
    rows.append(("oracle quantize row + RHT col, 4096x4096 bf16", t_full))
    t_row = best_of(lambda: oracle.quantize(x), a.repeat)
    rows.append(("oracle quantize row only", t_row))
    # diagnose tries every rule it knows (and both planes: a square input's bytes fit either), one quantize each
    xd = x[:1024, :1024]
    qd = oracle.quantize(xd).row
    t_dq = best_of(lambda: oracle.quantize(xd), a.repeat)
    t_diag = best_of(lambda: oracle.diagnose(xd, qd.data, qd.scales), 1)
    rows.append(("oracle diagnose 1024x1024 bf16, rowwise te bytes (every rule)", t_diag))
    try:
        import torch

        torch.set_num_threads(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
        xt = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)

        def ao_row():
            nvfp4_quantize(xt, per_tensor_scale=per_tensor_amax_to_scale(torch.max(torch.abs(xt.float()))))

        def ao_row_col():
            ao_row()
            tt = xt.t().contiguous()
            nvfp4_quantize(tt, per_tensor_scale=per_tensor_amax_to_scale(torch.max(torch.abs(tt.float()))))

        rows.append(("torchao nvfp4_quantize row only (CPU)", best_of(ao_row, a.repeat)))
        rows.append(("torchao nvfp4_quantize row + transposed col (CPU, no RHT)", best_of(ao_row_col, a.repeat)))
    except ImportError:
        rows.append(("torchao (not installed)", float("nan")))
    if not a.skip_gemm:
        pa = oracle.quantize(rng.standard_normal((512, 4096)).astype(np.float32)).row
        pb = oracle.quantize(rng.standard_normal((4096, 4096)).astype(np.float32)).row
        rows.append(("oracle gemm exact 512x4096x4096 (bf16 out)", best_of(lambda: oracle.gemm(pa, pb, model="exact"), 1)))
        # the Hopper tensor-core model (SPEC 12.6) is sequential over the 16-blocks: a smaller shape
        qa = oracle.quantize(rng.standard_normal((128, 1024)).astype(np.float32)).row
        qb = oracle.quantize(rng.standard_normal((1024, 1024)).astype(np.float32)).row
        rows.append(("oracle gemm tensor_core 128x1024x1024 (bf16 out)",
                     best_of(lambda: oracle.gemm(qa, qb, model="tensor_core"), 1)))
        # Blackwell's k64 block-scaled steps (SPEC 12.7): sequential over the k64 steps, the same shape
        rows.append(("oracle gemm sm100 128x1024x1024 (bf16 out)",
                     best_of(lambda: oracle.gemm(qa, qb, model="sm100"), 1)))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  seconds")
    for name, t in rows:
        print(f"{name:<{width}}  {t:7.3f}")
    print(f"diagnose 1024x1024: {t_diag / t_dq:.0f}x one oracle quantize (row only) of the same input")
    ao = dict(rows).get("torchao nvfp4_quantize row + transposed col (CPU, no RHT)")
    if ao:
        print(f"oracle (row + RHT col) vs torchao (row + col): {ao / t_full:.2f}x faster")


if __name__ == "__main__":
    main()
