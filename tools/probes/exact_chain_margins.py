"""Can exact mode skip its per-block adds when nothing rounds? A CPU analysis over the oracle (prints one table).

SPEC 12.2's sequential model adds one exact block term per 16-block to an fp32 accumulator. When no addition
rounds, the chain returns the exact sum S, and so does the tensor-core chain of the fast mode (12.6): every addend
is then a multiple of the pair's common grid and every prefix sum fits 24 bits above it, so 12.6's truncation and
its final rounding cut nothing. A fast-mode tile would then equal the exact-mode tile bit for bit. This script
measures how often that holds, and whether a kernel could *prove* it cheaply enough to skip the exact kernel's
per-block `FADD`s.

For an output (i, n), block j has the term p_j = sfA_ij sfB_nj dot16_j, a multiple of
g_j = uA_ij uB_nj / 4 (u = the E4M3 scale's quantum: 2^(e-3) for a normal scale, 2^-9 for a subnormal one; E2M1
values are multiples of 1/2). On the common grid g_lb = min_j uA_ij * min_j uB_nj / 4 every prefix sum S_j is a
multiple of g_lb, so "no step rounds" follows from max_j |S_j| < 2^24 g_lb. Columns:

* ``rounds``: fraction of outputs where some step of the 12.2 chain actually rounds (computed, not bounded);
* ``margin``: log2(2^24 g_lb / max_j |S_j|), median and minimum over the outputs: the headroom of the best
  certificate on the common grid, one that knew every prefix sum (below 0: that certificate fails);
* ``c=C elem``: fraction of outputs certified by reading the accumulator every C blocks (an exact kernel summing
  C blocks per tensor-core chain and adding chunks with FADD) and bounding the terms inside a chunk by
  ``576 sum_j sfA_ij sfB_nj`` (|dot16| <= 16 * 6 * 6);
* ``c=C tile``: the same bound made checkable per thread without per-column work (the largest A scale of the row in
  the chunk, the largest B scale of the 128 columns, the tile's smallest B quantum), over 64 x 128 warpgroup tiles.

Run: ``PYTHONPATH=. python3 tools/probes/exact_chain_margins.py`` (a few seconds). What it shows on the default
cases: Gaussian operands never round in the 12.2 chain (there exact and fast mode agree bit for bit); heavy tails
defeat even the certificate that knows every prefix sum; and the per-thread tile bound certifies almost no 64 x 128
tile beyond two blocks per chunk, so no cheap certificate exists for skipping the adds.
"""

from __future__ import annotations

import argparse

import numpy as np

import oracle
from oracle.fp4_numpy import decode_e2m1, decode_e4m3

DOT16_MAX = 16 * 6 * 6  # |dot16| of two E2M1 blocks
TILE_ROWS, TILE_COLS = 64, 128  # one MMA warpgroup's output tile in the exact kernel


def scale_quantum(s: np.ndarray) -> np.ndarray:
    """Quantum of each decoded E4M3 scale: 2^(e-3) for a normal one, 2^-9 for a subnormal one, inf for 0 (a zero
    scale's terms are 0 and constrain nothing)."""
    q = np.full(s.shape, np.inf)
    nz = s > 0
    q[nz] = np.maximum(2.0 ** (np.floor(np.log2(s[nz])) - 3), 2.0**-9)
    return q


def planes(x: np.ndarray, w: np.ndarray):
    """Rowwise NVFP4 planes (TE rule) of activations x [M, K] and weights w [N, K], as exact float64 arrays:
    E2M1 values [R, K] and E4M3 scales [R, K/16] of each."""
    a, b = oracle.quantize(x).row, oracle.quantize(w).row
    return (decode_e2m1(a.codes()).astype(np.float64), decode_e4m3(a.scales).astype(np.float64),
            decode_e2m1(b.codes()).astype(np.float64), decode_e4m3(b.scales).astype(np.float64))


def analyse(x: np.ndarray, w: np.ndarray, chunks: tuple[int, ...]) -> dict:
    """The table's columns for one operand pair (see the module docstring)."""
    qa, sa, qb, sb = planes(x, w)
    m, n, nb = qa.shape[0], qb.shape[0], sa.shape[1]
    ua, ub = scale_quantum(sa), scale_quantum(sb)
    acc = np.zeros((m, n), np.float32)
    exact = np.zeros((m, n))
    rounded = np.zeros((m, n), bool)
    prefix = np.empty((nb, m, n))  # |S_(j+1)|, exact in float64 (at most 53 bits above g_lb here)
    for j in range(nb):
        blk = slice(16 * j, 16 * j + 16)
        term = (sa[:, j, None] * sb[None, :, j]) * (qa[:, blk] @ qb[:, blk].T)  # exact (SPEC 12.2)
        exact += term
        wide = acc.astype(np.float64) + term
        acc = wide.astype(np.float32)  # RNE, SPEC 12.2's step
        rounded |= acc.astype(np.float64) != wide
        prefix[j] = np.abs(exact)
    grid = ua.min(axis=1)[:, None] * ub.min(axis=1)[None, :] / 4
    with np.errstate(divide="ignore"):
        margin = 24 - np.log2(prefix.max(axis=0) / grid)
    out = {"rounds": rounded.mean(), "margin_med": np.median(margin), "margin_min": margin.min()}
    tile_ub = ub.reshape(n // TILE_COLS, TILE_COLS, nb).min(axis=(1, 2))
    tile_grid = ua.min(axis=1)[:, None] * np.repeat(tile_ub, TILE_COLS)[None, :] / 4
    for c in chunks:
        if nb % c:
            continue
        starts = np.concatenate([np.zeros((1, m, n)), prefix[c - 1::c][:-1]])  # |S| where each chunk starts
        elem = np.ones((m, n), bool)
        tile = np.ones((m, n), bool)
        for ci in range(nb // c):
            js = slice(ci * c, ci * c + c)
            elem &= starts[ci] + DOT16_MAX * (sa[:, js] @ sb[:, js].T) < 2.0**24 * grid
            sb_max = np.repeat(sb[:, js].reshape(n // TILE_COLS, TILE_COLS, c).max(axis=(1, 2)), TILE_COLS)
            bound = DOT16_MAX * c * sa[:, js].max(axis=1)[:, None] * sb_max[None, :]
            tile &= starts[ci] + bound < 2.0**24 * tile_grid
        out[f"c={c} elem"] = elem.mean()
        out[f"c={c} tile"] = tile.reshape(m // TILE_ROWS, TILE_ROWS, n // TILE_COLS, TILE_COLS).all(axis=(1, 3)).mean()
    return out


def distributions(rng: np.random.Generator) -> dict:
    """Operand generators: name -> f(shape) returning float32."""
    return {
        "gaussian": lambda s: rng.standard_normal(s),
        "student-t(3)": lambda s: rng.standard_t(3, s),
        "2% outlier channels x30": lambda s: rng.standard_normal(s) * np.where(rng.random(s[1]) < 0.02, 30, 1),
        "log-normal row scales": lambda s: rng.standard_normal(s) * np.exp(rng.standard_normal((s[0], 1))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=256, help="M = N of each case (a multiple of 128)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the operand generators")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    chunks = (2, 4, 8, 16)
    # contraction lengths of the benchmark shapes: E64 wgrad (256 tokens), dgrad (N = 1408), fprop (K = 2048);
    # E8 fprop (K = 4096), dgrad (N = 14336)
    cases = [(d, k) for d in ("gaussian",) for k in (256, 1408, 2048, 4096, 14336)]
    cases += [(d, 2048) for d in ("student-t(3)", "2% outlier channels x30", "log-normal row scales")]
    gens = distributions(rng)
    cols = ["rounds", "margin_med", "margin_min"] + [f"c={c} {v}" for c in chunks for v in ("elem", "tile")]
    print(f"{'operands':25s} {'K':>6s} " + " ".join(f"{c:>10s}" for c in cols))
    for name, k in cases:
        x = gens[name]((args.rows, k)).astype(np.float32)
        w = gens[name]((args.rows, k)).astype(np.float32)
        r = analyse(x, w, chunks)
        cells = [f"{r[c]:10.4f}" if c in r and not c.startswith("margin") else
                 (f"{r[c]:10.1f}" if c in r else f"{'-':>10s}") for c in cols]
        print(f"{name:25s} {k:6d} " + " ".join(cells))


if __name__ == "__main__":
    main()
