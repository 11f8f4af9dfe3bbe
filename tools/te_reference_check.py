"""TransformerEngine's own pure-torch NVFP4 reference (quantizer and GEMM) against the oracle, byte for byte, on the CPU.

TE's `transformer_engine/pytorch/custom_recipes/reference_nvfp4.py` (with `reference_utils.py`) is loaded from a TE
source checkout by `conformance.te_reference` (beside stand-ins for the two compiled-backed TE modules it imports) and
quantizes random inputs under every variant it shares with the oracle: 1x16 / 16x16 blocks, rowwise and columnwise
planes, 4over6 (MAE / MSE, fast-math error, G = 448 / 256) and row scaling of either plane (with and without 4over6).
Data, scale bytes and amax bits are compared; the RHT is not (TE's reference sums it by a bf16 matmul, SPEC 14.2).
Inputs hold no NaN (SPEC 14.6); a mismatch that SPEC 14.1 explains (TE's reference writes 0x0 where the scaled value is
-0.0: TE's bytes with 0x8 for those codes are the oracle's) is counted apart. Then its `qgemm` (fprop of two rowwise
planes: bf16 / fp32 output, a C, G = 256 operands, a row-scaled X; wgrad of two columnwise planes, with and without a C,
and with a row-scaled X) against `oracle.gemm(model="sequential")` (SPEC 12.2) on the oracle's planes of the same
inputs; a mismatch that SPEC 14.9 explains (on the CPU TE's alpha is the quotient by 36 G_A G_B, where 12.1 multiplies
by its rounded reciprocal: the oracle's GEMM given TE's alpha is TE's) is counted apart. Neither kind fails the run.

    python tools/te_reference_check.py --te /path/to/TransformerEngine [--cases 300] [--seed 0]

Prints one row per variant (cases, mismatches, of them explained). Exit status: 0 when every mismatch is explained, 1
when one is not, 2 when the comparison cannot run (no reference at the path, or a TE whose reference imports, takes
or gives what this tool does not know: a TypeError or AttributeError inside it); a run that stops so after an
unexplained mismatch exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oracle  # noqa: E402
from conformance.te_reference import (  # noqa: E402
    CannotRun,
    TEReference,
    plane_arrays,
    plane_fields,
    signed_zero_codes,
    te_call,
)


def random_input(rng, *, even_rows: bool) -> torch.Tensor:
    """bf16 or fp32 [M, K]: normal values times 2^k, k drawn per row, column or element (-20 .. 20), some all-zero
    rows (+0.0 or -0.0), a few -0.0 elements in one input of four, and a share of elements moved onto E2M1 ties of a
    unit scale."""
    m = int(rng.integers(1, 41)) * (2 if even_rows else 1)
    k = 16 * int(rng.integers(1, 9))
    where = ((m, 1), (1, k), (m, k))[int(rng.integers(3))]
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 21, where))
    x[rng.random(m) < 0.1] = rng.choice([0.0, -0.0])
    if rng.random() < 0.25:
        x.flat[rng.integers(x.size, size=3)] = -0.0
    ties = rng.random((m, k)) < 0.1
    x[ties] = rng.choice([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], ties.sum()) * rng.choice([-1, 1], ties.sum())
    t = torch.from_numpy(x.astype(np.float32))
    return t.to(torch.bfloat16) if rng.random() < 0.5 else t


def host(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a NumPy array (bf16 as ml_dtypes.bfloat16)."""
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


def same_bytes(theirs, ours) -> bool:
    """Every array of ``theirs`` has the shape and the bytes of its partner in ``ours``."""
    return all(a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
               for a, b in zip(theirs, ours, strict=True))


def compare(ref: TEReference, x: torch.Tensor, v: dict) -> tuple[bool, bool]:
    """(equal, explained by SPEC 14.1) for one input under variant ``v``: TE's buffers of the one plane
    (``TEReference.quantize``: data, compact scales, amaxes) against the oracle's of the same name; a mismatch is
    14.1's when TE's bytes with that difference undone (``signed_zero_codes``: 0x8 for TE's 0x0 at a negative or
    -0.0 element) are the oracle's. (M is even for the columnwise plane, whose codes TE stores for M // 2 bytes a
    row.)"""
    col = v["plane"] == "col"
    kw = dict(rowwise=not col, columnwise=col, block=v["block"], four_over_six=v["fos"].lower() if v["fos"] else None,
              four_over_six_fast_math=v["fast"], global_scale_max=v["g"], row_scaled=v["row_scaled"])
    theirs = ref.quantize(x, **kw)
    ours = oracle.quantize(host(x), **kw).buffers()
    names = sorted(theirs)
    if same_bytes([theirs[n] for n in names], [ours[n] for n in names]):
        return True, False
    undone = signed_zero_codes(torch.signbit(x).numpy(), theirs)
    return False, same_bytes([undone[n] for n in names], [ours[n] for n in names])


def compare_gemm(ref: TEReference, rng, v: dict) -> tuple[bool, bool]:
    """(equal, explained by SPEC 14.9) for one GEMM of TE's reference (``qgemm``: fp32 accumulation per 16-block in K
    order, then alpha, then C) against ``oracle.gemm(model="sequential")`` (SPEC 12.2) on the oracle's planes of the
    same inputs: fprop ``Y = X W^T`` of two rowwise planes, or wgrad ``dW = dY^T X`` of two columnwise planes (the
    contraction over the tokens; alpha from the columnwise amaxes). A mismatch is 14.9's when the oracle's GEMM given
    TE's alpha (its quotient by 36 G_A G_B, where SPEC 12.1 multiplies by its rounded reciprocal) is TE's."""
    wgrad = v["kind"] == "wgrad"
    rows, cols, red = int(rng.integers(1, 41)), 8 * int(rng.integers(1, 6)), 32 * int(rng.integers(1, 5))
    if wgrad:  # dY [T, N], X [T, K]: N and K are the inputs' rows of 16-blocks
        rows, cols = 16 * -(-rows // 16), 16 * -(-cols // 16)
    shapes = ((red, rows), (red, cols)) if wgrad else ((rows, red), (cols, red))
    a, b = (torch.from_numpy((rng.standard_normal(s) * np.exp2(rng.integers(-10, 11))).astype(np.float32))
            .to(torch.bfloat16) for s in shapes)
    opts = dict(nvfp4_use_4over6=v["fos"] is not None, nvfp4_4over6_err_mode=v["fos"] or "MAE", nvfp4_e4m3_max=v["g"])
    # the row-scaled operand: fprop's X (A: one alpha per output row), wgrad's X (B: one per output column, SPEC 12.8;
    # TE's row scaling needs the rowwise plane with it)
    a_rs, b_rs = v["row_scaled"] and not wgrad, v["row_scaled"] and wgrad
    qa = ref.make(rowwise=not wgrad, columnwise=wgrad, row_scaled_nvfp4=a_rs, **opts)
    qb = ref.make(rowwise=not wgrad or b_rs, columnwise=wgrad, row_scaled_nvfp4=b_rs, **opts)
    with te_call("NVFP4QuantizerRef.quantize"):
        ra, rb = qa.quantize(a), qb.quantize(b)
        te_planes = plane_fields(ra, wgrad), plane_fields(rb, wgrad)
    (da, sa, _), (db, sb, _) = te_planes
    out_dtype = torch.float32 if v["accumulate"] or v["out"] == "float32" else torch.bfloat16
    c = torch.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32)) if v["accumulate"] else None
    with te_call("NVFP4QuantizerRef.qgemm"):
        y = qa.qgemm(da, db, None, out_dtype, sa, sb, out=c, accumulate=c is not None,
                     **({"gemm_type": ref.gemm_type.WGRAD} if wgrad else {}), qresult_x=ra, qresult_w=rb)
    kw = dict(rowwise=not wgrad, columnwise=wgrad, four_over_six=v["fos"].lower() if v["fos"] else None,
              global_scale_max=v["g"])
    pa = oracle.quantize(host(a), row_scaled=a_rs, **kw)
    pb = oracle.quantize(host(b), row_scaled=b_rs, **kw)
    pa, pb = (pa.col, pb.col) if wgrad else (pa.row, pb.row)
    for fields, p in zip(te_planes, (pa, pb), strict=True):  # the operands agree first
        if not same_bytes(plane_arrays(*fields), (p.data, p.scales, np.asarray(p.amax, np.float32).reshape(-1))):
            return False, False
    gemm = dict(model="sequential", out_dtype="float32" if out_dtype == torch.float32 else "bfloat16",
                accumulate=None if c is None else c.numpy())
    theirs = host(y).view(np.uint8)
    if np.array_equal(oracle.gemm(pa, pb, **gemm).view(np.uint8), theirs):
        return True, False
    # SPEC 14.9: TE's alpha on the CPU, the fp32 product of the amaxes divided by 36 G_A G_B (exact in fp32)
    prod = (np.asarray(pa.amax, np.float32).reshape(-1, 1) * np.asarray(pb.amax, np.float32)).astype(np.float32)
    alpha = (prod / np.float32(36 * v["g"] * v["g"])).astype(np.float32)
    alpha = np.float32(alpha.reshape(-1)[0]) if alpha.size == 1 else alpha
    return False, np.array_equal(oracle.gemm(pa, pb, alpha=alpha, **gemm).view(np.uint8), theirs)


def gemm_variants() -> list[dict]:
    """The qgemm calls compared: fprop (bf16 / fp32 out, a C, G = 256 4over6 operands, a row-scaled X) and wgrad
    (with a C, bf16 out, a row-scaled X)."""
    base = dict(kind="fprop", fos=None, g=448, row_scaled=False, accumulate=False)
    return [dict(base, out="bfloat16"), dict(base, out="float32"), dict(base, out="float32", accumulate=True),
            dict(base, fos="MSE", g=256, out="bfloat16"), dict(base, row_scaled=True, out="float32"),
            dict(base, kind="wgrad", out="float32", accumulate=True), dict(base, kind="wgrad", out="bfloat16"),
            dict(base, kind="wgrad", row_scaled=True, out="float32")]


def variants() -> list[dict]:
    """The quantizer settings compared: both planes x both block shapes x (plain, 4over6 mode x fast math x G), and
    row scaling of either plane with and without 4over6 (1x16 only, as TE has it)."""
    out = []
    for plane in ("row", "col"):
        for block in ((1, 16), (16, 16)):
            out.append(dict(plane=plane, block=block, fos=None, fast=False, g=448, row_scaled=False))
            for fos in ("MAE", "MSE"):
                for fast in (False, True):
                    for g in (448, 256):
                        out.append(dict(plane=plane, block=block, fos=fos, fast=fast, g=g, row_scaled=False))
    for plane in ("row", "col"):
        out.append(dict(plane=plane, block=(1, 16), fos=None, fast=False, g=448, row_scaled=True))
        for fos in ("MAE", "MSE"):
            out.append(dict(plane=plane, block=(1, 16), fos=fos, fast=False, g=448, row_scaled=True))
    return out


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main() -> int:
    """The command line (module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--te", type=Path, required=True, help="a TransformerEngine source checkout")
    ap.add_argument("--cases", type=_positive, default=300, help="random inputs per variant (at least 1)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    try:
        return _run(a)
    except CannotRun as e:
        print(f"cannot run: {e}", file=sys.stderr)
        return 2


def _run(a) -> int:
    ref = TEReference(a.te)
    rng = np.random.default_rng(a.seed)
    try:
        unexplained = _compare_all(a, ref, rng)
    except _Stopped as e:
        print(f"\nthe comparison stopped after {e.unexplained} unexplained input(s): {e.why}")
        return 1
    print("every byte matches, or differs only where SPEC 14.1 / 14.9 say" if unexplained == 0 else
          f"{unexplained} input(s) differ unexplained")
    return 1 if unexplained else 0


class _Stopped(Exception):
    """A CannotRun after some inputs already differed unexplained: those decide the exit status (1)."""

    def __init__(self, unexplained: int, why: str):
        super().__init__(why)
        self.unexplained, self.why = unexplained, why


def _compare_all(a, ref: TEReference, rng) -> int:
    """Every quantize variant, then every GEMM variant, a row each; returns the count of unexplained inputs. A
    CannotRun after an unexplained input becomes _Stopped."""
    unexplained = 0
    try:
        print(f"{'variant':<44} {'cases':>6} {'mismatch':>9} {'14.1 only':>10}")
        for v in variants():
            name = (f"{v['plane']} {v['block'][0]}x{v['block'][1]}" + (f" 4over6 {v['fos']}" if v["fos"] else "")
                    + (" fast" if v["fast"] else "") + (f" G{v['g']}" if v["g"] != 448 else "")
                    + (" row-scaled" if v["row_scaled"] else ""))
            bad = zero = 0
            for _ in range(a.cases):
                equal, negzero = compare(ref, random_input(rng, even_rows=v["plane"] == "col"), v)
                bad += not equal
                zero += negzero
                unexplained += not equal and not negzero
            print(f"{name:<44} {a.cases:>6} {bad:>9} {zero:>10}")
        print(f"\n{'GEMM (qgemm vs sequential model)':<44} {'cases':>6} {'mismatch':>9} {'alpha only':>10}")
        for v in gemm_variants():
            name = (f"{v['kind']} {v['out']} out" + (" + C" if v["accumulate"] else "")
                    + (f" 4over6 {v['fos']} G{v['g']}" if v["fos"] else "") + (" row-scaled X" if v["row_scaled"] else ""))
            bad = by_alpha = 0
            for _ in range(a.cases):
                equal, explained = compare_gemm(ref, rng, v)
                bad += not equal
                by_alpha += explained
                unexplained += not equal and not explained
            print(f"{name:<44} {a.cases:>6} {bad:>9} {by_alpha:>10}")
    except CannotRun as e:
        if unexplained:
            raise _Stopped(unexplained, str(e)) from None
        raise
    return unexplained


if __name__ == "__main__":
    sys.exit(main())
