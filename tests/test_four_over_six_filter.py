"""The claims behind the 4over6 kernel's filter sums (device/csrc/quantize/four_over_six.cuh: fo6_filter_sum,
fo6_filter_bound, fo6_filter_decides), checked on the CPU against independent references.

The kernel compares the two SPEC 5.6 candidates of a 1x16 block row (input domain) by filter sums F and takes the
exact sums only where a proven bound leaves the comparison open. These tests restate the filter's arithmetic in NumPy
(fp32, one rounding per operation) and check, against a brute-force E2M1 distance and against SPEC 5.6's exact sums
from ``conformance.te_torch_variants`` (torch, written from the SPEC, sharing no code with the oracle or the kernel):

* the subnormal placement of E2M1 gives a nearest E2M1 point, and ``|D|`` lies in ``[dist(Y), dist(Y) + 3u]``;
* ``|S / W^k - F|`` stays below the bound on every row the filter may take, with room to spare;
* where the margin decides, the decision is SPEC 5.6's.

The kernel's scale bytes divide the block amax by 6 with two FMAs instead of a division (``fo6_div6``); the last
test checks that form against IEEE division for every finite value it can take (an Inf or NaN block amax gives the
scale byte 448 either way, as the kernel's comment argues).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

from conformance.te_torch_variants import Variant, candidate_errors, encode_scale_g  # noqa: E402

F32 = np.float32
U = 2.0**-24
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def filter_terms(y: np.ndarray) -> np.ndarray:
    """D = fma(r', -2^126, Y) for fp32 Y in [0, 7): r' the nearest one-mantissa-bit fp32 value of RN(Y 2^-126)."""
    y = y.astype(F32)
    yp = (y * F32(2.0**-126)).astype(F32)  # subnormal below Y = 1
    r = ((yp.view(np.uint32) + np.uint32(0x00200000)) & np.uint32(0xFFC00000)).view(F32)
    # the fma: r' * 2^126 is exact, Y - r exact in float64, one rounding to fp32
    return (y.astype(np.float64) - r.astype(np.float64) * 2.0**126).astype(F32), r.astype(np.float64) * 2.0**126


def brute_dist(y: np.ndarray) -> np.ndarray:
    """The distance of each Y to its nearest E2M1 point, by trying all eight (float64)."""
    return np.abs(y.astype(np.float64)[:, None] - E2M1[None, :]).min(axis=1)


def test_nearest_point_by_subnormal_placement():
    rng = np.random.default_rng(0)
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], F32)
    near = np.concatenate([np.nextafter(mids, F32(0)), mids, np.nextafter(mids, F32(8))])
    grid = E2M1.astype(F32)
    y = np.concatenate([
        rng.uniform(0, 7, 200_000).astype(F32),
        (rng.uniform(0, 1, 50_000) * np.exp2(-rng.integers(0, 140, 50_000))).astype(F32),  # down to subnormal Y
        near, grid, np.nextafter(grid, F32(8)), np.nextafter(grid[1:], F32(0)),
        np.array([np.nextafter(F32(7), F32(0)), F32(2.0**-149), F32(2.0**-126)], F32),
    ])
    d, r = filter_terms(y)
    assert np.isin(r, E2M1).all()
    dist = brute_dist(y)
    a = np.abs(d.astype(np.float64))
    assert (a >= dist).all() and (a <= dist + 3 * U).all()
    assert (np.abs(y.astype(np.float64) - r) <= dist + 2 * U).all()  # a nearest point of RN(Y 2^-126), within u of Y


def filter_sum(x3: np.ndarray, mult: np.ndarray, mse: bool) -> np.ndarray:
    """fo6_filter_sum over rows [R, 16] (fp32 fma chains emulated in float64, one rounding to fp32 per step)."""
    with np.errstate(over="ignore", invalid="ignore"):  # rows whose products overflow are not filter rows
        y = (np.abs(x3) * mult[:, None]).astype(F32)
        d, _ = filter_terms(y.reshape(-1))
    d = d.reshape(y.shape).astype(np.float64)
    f = np.zeros(y.shape[0], F32)
    with np.errstate(over="ignore"):
        for i in range(16):
            f = (f.astype(np.float64) + (d[:, i] ** 2 if mse else np.abs(d[:, i]))).astype(F32)
    return f.astype(np.float64)


def bound(f: np.ndarray, mse: bool) -> np.ndarray:
    """fo6_filter_bound, in float64 (the kernel rounds it in fp32; its constants leave that room)."""
    if mse:
        return U * (448 * np.sqrt(f) + 48 * f) + 2.0**-30
    return U * (1024 + 48 * f) + 2.0**-30


def rows(kind: str, n: int, rng) -> np.ndarray:
    """``n`` bf16 block rows [n, 16] (as fp32) of one kind of data: normal, Student-t(3), or mixed magnitudes."""
    if kind == "normal":
        x = rng.standard_normal((n, 16))
    elif kind == "t3":
        x = rng.standard_t(3, (n, 16))
    else:  # rows of very different magnitudes, and ones of many small integers
        x = rng.standard_normal((n, 16)) * np.exp(2 * rng.standard_normal((n, 1)))
        x[: n // 4] = rng.integers(-6, 7, (n // 4, 16))
    return x.astype(ml_dtypes.bfloat16).astype(F32)


@pytest.mark.parametrize("g", [448, 256])
@pytest.mark.parametrize("mse", [False, True])
@pytest.mark.parametrize("kind", ["normal", "t3", "mixed"])
def test_filter_bound_and_decisions_against_spec_sums(kind, mse, g):
    rng = np.random.default_rng(len(kind) * 7 + mse * 3 + g)
    x = rows(kind, 60_000, rng)
    amax = torch.tensor(F32(np.abs(x).max()))
    _, s_dec = encode_scale_g(amax, g)
    src3 = torch.from_numpy(x).reshape(-1, 1, 16)
    (byte6, d6, _, s6), (byte4, d4, _, s4) = candidate_errors(src3, src3.abs().amax(dim=2), amax,
                                                              Variant("mse" if mse else "mae", False, g))
    s4, s6 = s4[:, 0].double().numpy(), s6[:, 0].double().numpy()
    m4 = torch.fmin(1.0 / (d4 * s_dec), torch.tensor(np.finfo(F32).max))[:, 0].numpy()
    m6 = torch.fmin(1.0 / (d6 * s_dec), torch.tensor(np.finfo(F32).max))[:, 0].numpy()
    b = np.abs(x).max(axis=1)
    # the rows the kernel gives the filter: products below 7 for both, differing bytes, multipliers in [2^-40, 2^40]
    ok = ((b * m4).astype(F32) < 7) & ((b * m6).astype(F32) < 7) & (byte4 != byte6)[:, 0].numpy()
    ok &= (m4 >= 2.0**-40) & (m6 <= 2.0**40)
    assert ok.mean() > 0.5
    k = 2 if mse else 1
    six_g = 6.0 * g
    for s, d, m in ((s4, d4, m4), (s6, d6, m6)):
        w = d[:, 0].double().numpy() * float(amax) / six_g
        f = filter_sum(x, m, mse)
        with np.errstate(divide="ignore", invalid="ignore"):  # all-zero rows (w = 0) are not filter rows
            err = np.abs(s / w**k - f)[ok]
        assert (err <= bound(f, mse)[ok]).all()
        assert (err / bound(f, mse)[ok]).max() < 0.5  # the bound holds with room to spare
    # the decision as fo6_filter_decides forms it in fp32, rcp.approx taken one ulp either side of 1 / m4: where the
    # margin decides, it is SPEC 5.6's (s4 < s6; an exact tie is never decided)
    f4, f6 = filter_sum(x, m4, mse).astype(F32), filter_sum(x, m6, mse).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for inv in (np.nextafter(F32(1) / m4, F32(0)), np.nextafter(F32(1) / m4, F32(np.inf))):
            rho = (m6 * inv).astype(F32)
            kk = (rho * rho).astype(F32) if mse else rho
            a4 = (kk * f4).astype(F32)
            slack = (F32(64 * U) * (a4 + f6).astype(F32) + bound(f6, mse).astype(F32)).astype(F32)
            margin = (kk * bound(f4, mse).astype(F32) + slack).astype(F32)
            decided = ok & (np.abs((a4 - f6).astype(F32)) > margin)
            assert decided.mean() > 0.99 * ok.mean()
            assert np.array_equal((a4 < f6)[decided], (s4 < s6)[decided])


def rn_f32(v: Fraction) -> Fraction:
    """v >= 0 rounded to the nearest fp32 value, ties to even (normal and subnormal; no overflow here), exactly."""
    if v == 0:
        return v
    e = v.numerator.bit_length() - v.denominator.bit_length()  # 2^e <= v < 2^(e+2)
    if v < Fraction(2) ** e:
        e -= 1
    elif v >= Fraction(2) ** (e + 1):
        e += 1
    quantum = Fraction(2) ** max(e - 23, -149)
    n, rem = divmod(v, quantum)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2 == 1):
        n += 1
    return n * quantum


def test_div6_by_two_fmas_is_the_correctly_rounded_quotient():
    """fo6_div6: q = RN(b c), c = fp32(1/6); RN(q + RN(b - 6 q) c), each FMA rounded once, equals RN(b / 6) (IEEE
    division, NumPy's fp32) for every finite bf16 b >= 0, subnormal quotients included."""
    b = np.arange(0, 0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(F32)
    want = b / F32(6.0)
    c = Fraction(float(F32(1.0 / 6.0)))
    got = np.empty_like(b)
    for i, bv in enumerate(b):
        fb = Fraction(float(bv))
        q = rn_f32(fb * c)
        r = fb - 6 * q  # the first FMA's exact result, an fp32 value (checked), so its rounding changes nothing
        assert rn_f32(abs(r)) == abs(r)
        assert r * c + q >= 0
        got[i] = float(rn_f32(r * c + q))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
