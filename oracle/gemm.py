"""Block-scaled NVFP4 GEMM models (SPEC 12): alpha, TE's sequential fp32 model, the exact model and the
proven elementwise error bound that any fp32-accumulating implementation must meet; the Hopper and Blackwell
tensor-core models live in ``tensor_core.py`` and ``sm100.py``."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .checks import host_array, is_real
from .dequantize import nan_scale_rows, scaled_ints
from .exact import exact_int_matmul, f32_to_int_exp, round_certified, round_dyadic
from .fp4_numpy import decode_e2m1, decode_e4m3
from .planes import QuantizedPlane
from .scale_rules import torchao_per_tensor_scale
from .sm100 import sm100_epilogue, sm100_sum
from .tensor_core import tensor_core_sum

__all__ = ["alpha_factor", "gemm", "gemm_alpha", "gemm_error_bound", "within_bound"]

_TE_RULES = ("te", "te_fused_rht")
_OUT_DTYPES = ("bfloat16", "float32")
MODELS = ("sequential", "exact", "tensor_core", "sm100")
_U32 = 2.0**-24  # fp32 unit roundoff
_U_ACC = 2.0**-23  # per-step accumulation error allowed to any implementation (covers truncation too)
_ETA32 = 2.0**-150  # fp32 absolute underflow error (half the smallest subnormal)
_OUT_ERR = {"float32": (2.0**-24, 2.0**-150), "bfloat16": (2.0**-8, 2.0**-134)}
_OVERFLOW_BF16 = 2.0**128 - 2.0**119  # bf16 values at or above this round to Inf (fp32's threshold is higher)

#: gemm_error_bound's B where the bound's proof does not hold near overflow but the exact real value is finite
#: (SPEC 12.4): the largest float64; within_bound then asks only for a value that is not NaN
NEAR_OVERFLOW = float(np.finfo(np.float64).max)


def alpha_factor(g_a: int, g_b: int) -> np.float32:
    """fp32(1 / (36 G_A G_B)) (SPEC 12.1): the product 36 G_A G_B is exact in fp32, its reciprocal rounded once
    (G = 448 for both: fp32(1/7225344))."""
    return np.float32(np.float32(1.0) / np.float32(36 * int(g_a) * int(g_b)))


def gemm_alpha(a_plane: QuantizedPlane, b_plane: QuantizedPlane):
    """The GEMM's fp32 alpha from the operands' amaxes (SPEC 12.1, 12.8).

    TE rules: alpha = (amax_A * amax_B) * fp32(1/(36 G_A G_B)), left to right in fp32 (G = the planes'
    ``global_scale_max``; 448 for both gives fp32(1/7225344)). A row-scaled operand (SPEC 5.7) contributes one amax
    per row, so alpha is one value per output row (A) or column (B): a float32 array ``[M, 1]``, ``[1, N]`` or
    ``[M, N]`` (both row-scaled) that broadcasts against the output (SPEC 12.8); otherwise an ``np.float32``.
    torchao: alpha = P_A * P_B with P = amax / 2688; torchao_noscale: alpha = 1.
    """
    _check_planes(a_plane, b_plane)
    ra, rb = a_plane.rule, b_plane.rule
    if ra in _TE_RULES and rb in _TE_RULES:
        aa = a_plane.amax.reshape(-1, 1) if a_plane.row_scaled else a_plane.amax
        ab = b_plane.amax.reshape(1, -1) if b_plane.row_scaled else b_plane.amax
        with np.errstate(over="ignore", invalid="ignore"):
            al = ((aa * ab).astype(np.float32) * alpha_factor(a_plane.global_scale_max, b_plane.global_scale_max))
        al = np.asarray(al, np.float32)
        return np.float32(al) if al.ndim == 0 else al
    if ra == rb == "torchao":
        with np.errstate(over="ignore", invalid="ignore"):
            return np.float32(torchao_per_tensor_scale(a_plane.amax) * torchao_per_tensor_scale(b_plane.amax))
    if ra == rb == "torchao_noscale":
        return np.float32(1.0)
    raise ValueError(f"operands use incompatible scale rules {ra!r} and {rb!r}")


def check_model(model) -> None:
    """``ValueError`` unless ``model`` is one of :data:`MODELS` (SPEC 12.2, 12.3, 12.6, 12.7)."""
    if not isinstance(model, str) or model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")


def _check_planes(a, b) -> None:
    for name, p in (("a_plane", a), ("b_plane", b)):
        if not isinstance(p, QuantizedPlane):
            raise TypeError(f"{name} must be an oracle QuantizedPlane, got {type(p).__name__}")


def _check_operands(a: QuantizedPlane, b: QuantizedPlane) -> None:
    _check_planes(a, b)
    if a.cols != b.cols:
        raise ValueError(f"contraction lengths differ: a has K={a.cols}, b has K={b.cols}")
    if a.rht != b.rht:
        raise ValueError("one operand holds the RHT of its data and the other does not: the product is meaningless")
    if a.rht and None not in (a.rht_signs, b.rht_signs) and a.rht_signs != b.rht_signs:
        raise ValueError(f"the operands use different RHT sign masks (0x{a.rht_signs:04X} vs 0x{b.rht_signs:04X})")


def _check_epilogue(m: int, n: int, bias, accumulate, out_dtype: str):
    if not isinstance(out_dtype, str) or out_dtype not in _OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype!r}")
    c = bv = None
    if accumulate is not None:
        c = host_array(accumulate)
        if c.dtype != np.float32:
            raise TypeError(f"accumulate must be float32, got {c.dtype}")
        if c.shape != (m, n):
            raise ValueError(f"accumulate must have shape {(m, n)}, got {c.shape}")
    if bias is not None:
        bv = host_array(bias)
        if bv.dtype not in (np.float32,) and bv.dtype.name != "bfloat16":
            raise TypeError(f"bias must be float32 or bfloat16, got {bv.dtype}")
        if bv.shape != (n,):
            raise ValueError(f"bias must have shape {(n,)}, got {bv.shape}")
        bv = bv.astype(np.float32)
    return c, bv


def _resolve_alpha(a, b, alpha):
    """A scalar np.float32, or a float32 array broadcasting to [M, N] for row-scaled operands (SPEC 12.8)."""
    if alpha is None:
        return gemm_alpha(a, b)
    al = host_array(alpha)
    shapes = ((a.rows, 1), (1, b.rows), (a.rows, b.rows))
    if is_real(al) and al.size == 1 and al.shape not in shapes:
        al = al.reshape(())  # one value in any shape (TE's [1] amax product) is the scalar alpha
    if not is_real(al) or (al.ndim != 0 and al.shape not in shapes):
        raise ValueError(f"alpha must be a single real number, or an array of them of shape [M, 1], [1, N] or [M, N] "
                         f"(one per output row, column or element, SPEC 12.8; here {list(shapes)}), got {alpha!r}")
    with np.errstate(over="ignore"):
        return np.float32(al) if al.ndim == 0 else al.astype(np.float32)


def _finish(y32: np.ndarray, out_dtype: str) -> np.ndarray:
    return y32.astype(ml_dtypes.bfloat16) if out_dtype == "bfloat16" else y32.astype(np.float32)


def _sequential(a: QuantizedPlane, b: QuantizedPlane) -> np.ndarray:
    """SPEC 12.2: acc = 0; for each 16-block k in order: acc = fl32(acc + (sfA_k * sfB_k) * dot16_k)."""
    qa, qb = decode_e2m1(a.codes()), decode_e2m1(b.codes())
    sa, sb = decode_e4m3(a.scales), decode_e4m3(b.scales)
    acc = np.zeros((a.rows, b.rows), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(a.cols // 16):
            blk = slice(16 * k, 16 * k + 16)
            dot = qa[:, blk] @ qb[:, blk].T  # exact: multiples of 1/4 below 2**12 in any order
            term = (sa[:, k, None] * sb[None, :, k]) * dot  # exact: at most 20 significant bits
            acc = (acc + term).astype(np.float32)
    return acc


def gemm(
    a_plane: QuantizedPlane,
    b_plane: QuantizedPlane,
    *,
    alpha=None,
    model: str = "sequential",
    out_dtype: str = "bfloat16",
    bias=None,
    accumulate=None,
) -> np.ndarray:
    """Y = alpha * (A . B^T) (+ accumulate) (+ bias) for K-major NVFP4 planes A [M, K] and B [N, K] (SPEC 12).

    Args:
        a_plane, b_plane: :class:`QuantizedPlane` with the same K (both K-major, "TN").
        alpha: fp32 alpha (a number, or one value in any shape); default :func:`gemm_alpha` (SPEC 12.1). An array of
            shape [M, 1], [1, N] or [M, N] gives one alpha per output row, column or element, as :func:`gemm_alpha`
            forms it for row-scaled operands (SPEC 12.8).
        model: "sequential" (TE's model: fp32 accumulator, 16-blocks in K order, SPEC 12.2),
            "exact" (exact value rounded once to out_dtype, SPEC 12.3) or "tensor_core" (Hopper wgmma
            accumulation of normal operands, one k16 step per 16-block in K order, SPEC 12.6: what the device
            kernels' fast mode returns bit for bit); "sequential" and "tensor_core" then apply the epilogue of
            SPEC 12.2. Cost: "sequential" and "exact" take seconds for 2048^3; "tensor_core" models every k16 step
            of every output in integer arithmetic and is about 20x slower (one CPU measurement: 33 s against 1.8 s
            for "exact" at 2048^3): use it on the sizes a test needs, e.g. a few groups of a few hundred rows.
            "sm100": Blackwell's block-scaled MMA (tcgen05.mma kind::mxf4nvf4, k64 steps in K order, SPEC 12.7) and
            the epilogue of a CUTLASS SM100 grouped GEMM (SPEC 12.7, not 12.2's); the slowest model at large sizes
            (one 2-core CPU measurement: about 2x "sequential" at 1024^3, 43-68 s against 2-5 s at 2048^3).
        out_dtype: "bfloat16" (returns ml_dtypes.bfloat16) or "float32".
        bias: optional [N] float32/bfloat16 row vector added to every row.
        accumulate: optional float32 [M, N] C added to the product (wgrad's main_grad).
    """
    _check_operands(a_plane, b_plane)
    check_model(model)
    m, n = a_plane.rows, b_plane.rows
    c, bv = _check_epilogue(m, n, bias, accumulate, out_dtype)
    al = _resolve_alpha(a_plane, b_plane, alpha)
    if model in ("sequential", "tensor_core"):
        acc = _sequential(a_plane, b_plane) if model == "sequential" else tensor_core_sum(a_plane, b_plane)
        with np.errstate(invalid="ignore", over="ignore"):
            y = (al * acc).astype(np.float32)
            if c is not None:
                y = (y + c).astype(np.float32)
            if bv is not None:
                y = (y + bv[None, :]).astype(np.float32)
        return _finish(y, out_dtype)
    if model == "sm100":
        y = sm100_epilogue(sm100_sum(a_plane, b_plane), al, c=c, bias=bv)
        return _finish(y, out_dtype)
    return _finish(_exact(a_plane, b_plane, al, c, bv, out_dtype), out_dtype)


def _exact(a, b, al, c, bv, out_dtype) -> np.ndarray:
    """SPEC 12.3: v = alpha * S + C + bias computed exactly, then rounded once (RNE) to out_dtype."""
    m, n = a.rows, b.rows
    s, shift = exact_int_matmul(scaled_ints(a), scaled_ints(b))  # exact sum = s * 2**(shift - 20)
    s_exp = shift - 20
    extras = [x for x in (c, None if bv is None else np.broadcast_to(bv[None, :], (m, n))) if x is not None]
    # float64 estimate; each of its <= 4 roundings errs by <= 2**-53 of a magnitude <= mag (1 + 2**-50)
    with np.errstate(invalid="ignore", over="ignore"):
        est = np.ldexp(s.astype(np.float64), s_exp) * np.asarray(al, np.float64)
        mag = np.abs(est)
        for x in extras:
            est = est + x
            mag = mag + np.abs(x.astype(np.float64))
    est[nan_scale_rows(a)[:, None] | nan_scale_rows(b)[None, :]] = np.nan
    finite = np.isfinite(est) & np.isfinite(mag)
    r, ok = round_certified(np.where(finite, est, 0.0), np.ldexp(np.where(finite, mag, 0.0), -50), out_dtype)
    todo = finite & ~ok
    if todo.any():  # exact path: everything as integers in units of 2**unit
        am, ae = f32_to_int_exp(np.broadcast_to(np.asarray(al, np.float32), (m, n))[todo])  # SPEC 12.8: per element
        parts = [(s[todo].astype(object) * am.astype(object), s_exp + ae)]
        for x in extras:
            xm, xe = f32_to_int_exp(x[todo].astype(np.float32))
            parts.append((xm.astype(object), xe))
        unit = min(int(np.min(e)) for _, e in parts)
        total = sum(np.left_shift(v, (np.asarray(e) - unit).astype(object)) for v, e in parts)
        r = r.copy()
        r[todo] = round_dyadic(total, unit, out_dtype)
    return np.where(finite, r, est).astype(np.float32)


def gemm_error_bound(
    a_plane: QuantizedPlane,
    b_plane: QuantizedPlane,
    *,
    alpha=None,
    out_dtype: str = "bfloat16",
    bias=None,
    accumulate=None,
) -> np.ndarray:
    """Elementwise bound B (float64 [M, N]) with |y_impl - y_exact| <= B for every implementation that
    forms the exact products and sums them in fp32 in any order (SPEC 12.4, proof there).

    B = |alpha| g P + 3u T (1+u)^3 + u_o T (1+u)^4 + u_o T + 4 eta32 + 3 eta_o, with
    P = sum_k |a_k b_k|, g = K u_a / (1 - K u_a), u_a = 2**-23, u = 2**-24,
    T = |alpha| P (1 + g) + |C| + |bias|; (u_o, eta_o) the output format's unit roundoff and half its
    smallest subnormal; K < 2**23 (``ValueError`` otherwise: g needs K u_a < 1). Where T (1+u)^4 + B reaches
    the bf16 overflow threshold the proof does not hold: B is ``NEAR_OVERFLOW`` (``from oracle.gemm import
    NEAR_OVERFLOW``: the float64 maximum) where the exact real
    value is finite (then any value that is not NaN passes, Inf of either sign included) and +inf where it is
    infinite (an infinite C or bias: that value or NaN passes) or NaN (compared as NaN). Where alpha is not
    finite (per element with row-scaled operands, SPEC 12.8) B is NaN: the implementation must return a non-finite
    value (:func:`within_bound`).

    The arguments are :func:`gemm`'s without ``model`` (``alpha`` None: :func:`gemm_alpha`; ``accumulate``: the C
    added in the epilogue). ``ValueError`` / ``TypeError`` as :func:`gemm`'s.
    """
    _check_operands(a_plane, b_plane)
    if a_plane.cols >= 1 << 23:
        raise ValueError(f"gemm_error_bound needs K < 2**23 (SPEC 12.4: g = K u_a / (1 - K u_a)), "
                         f"got K={a_plane.cols}")
    m, n = a_plane.rows, b_plane.rows
    c, bv = _check_epilogue(m, n, bias, accumulate, out_dtype)
    al = np.abs(np.asarray(_resolve_alpha(a_plane, b_plane, alpha), np.float64))  # [M, 1], [1, N], [M, N] row-scaled
    k = a_plane.cols
    # P = |A| @ |B|^T: float32 BLAS on the scaled integers rounds, so inflate by (1 + (K + 2) * 2**-23)
    # (a valid bound for any summation order of non-negative terms) to keep an upper bound
    da = np.abs(scaled_ints(a_plane)).astype(np.float32)
    db = np.abs(scaled_ints(b_plane)).astype(np.float32)
    with np.errstate(over="ignore"):
        p = np.ldexp((da @ db.T).astype(np.float64), -20) * (1.0 + (k + 2) * 2.0**-23)
    g = k * _U_ACC / (1.0 - k * _U_ACC) if k else 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        t = al * p * (1.0 + g)
    if c is not None:
        t = t + np.abs(c.astype(np.float64))
    if bv is not None:
        t = t + np.abs(bv.astype(np.float64))[None, :]
    u_o, eta_o = _OUT_ERR[out_dtype]
    u = _U32
    with np.errstate(invalid="ignore", over="ignore"):
        bound = al * g * p + 3 * u * t * (1 + u) ** 3 + u_o * t * (1 + u) ** 4 + u_o * t + 4 * _ETA32 + 3 * eta_o
    # near overflow the proof's "error <= u|z| + eta" fails (a step can round to Inf): no bound there (SPEC 12.4);
    # where the exact value v is finite (T finite: no infinite C or bias) that is marked NEAR_OVERFLOW, not +inf
    near_overflow = t * (1 + u) ** 4 + bound >= _OVERFLOW_BF16
    nan_rows = nan_scale_rows(a_plane)[:, None] | nan_scale_rows(b_plane)[None, :]
    finite_v = np.isfinite(t) & np.isfinite(bound) & ~nan_rows
    bad = ~np.isfinite(bound) | near_overflow | nan_rows
    # an infinite / NaN alpha turns any accumulation error into a different non-finite result (0 * Inf,
    # or the sign of a cancelled sum): only "non-finite" is required there (SPEC 12.4), marked by NaN; with one alpha
    # per output row or column (SPEC 12.8) this holds per element
    bound = np.where(bad, np.where(near_overflow & finite_v, NEAR_OVERFLOW, np.inf), bound)
    return np.where(np.broadcast_to(np.isfinite(al), bound.shape), bound, np.nan)


def _real_f64(v, name: str) -> np.ndarray:
    """``v`` as float64, after checking that it holds real numbers (``TypeError`` otherwise)."""
    a = host_array(v, name)
    if not is_real(a):
        raise TypeError(f"{name} must hold real numbers (an integer or float dtype), got dtype {a.dtype}")
    return a.astype(np.float64)


def within_bound(y_impl, y_exact, bound) -> np.ndarray:
    """Elementwise check of SPEC 12.4: |y_impl - y_exact| <= bound; a NaN exact value must be matched by
    NaN; where the bound is NEAR_OVERFLOW (the exact real value is finite, even where its rounding y_exact is Inf)
    y_impl must not be NaN (any finite value or Inf of either sign); where it is +inf (an infinite C or bias)
    y_impl must be y_exact or NaN; where it is NaN (alpha not finite) y_impl must be non-finite. Returns a boolean
    array. ``y_impl`` and ``y_exact`` must have the same shape, and ``bound`` broadcast to it (``ValueError``); each
    must hold real numbers (``TypeError`` for bool, complex, string or object arrays)."""
    yi, ye, b = (_real_f64(v, n) for v, n in ((y_impl, "y_impl"), (y_exact, "y_exact"), (bound, "bound")))
    if yi.shape != ye.shape:
        raise ValueError(f"y_impl has shape {yi.shape} and y_exact {ye.shape}: they must be the same output")
    try:
        fits = np.broadcast_shapes(b.shape, ye.shape) == ye.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"bound of shape {b.shape} does not fit the output's {ye.shape}")
    with np.errstate(invalid="ignore"):
        close = np.abs(yi - ye) <= b
    nan = np.isnan(ye)
    inf = np.isinf(ye)
    checked = np.where(nan, np.isnan(yi), np.where(inf, yi == ye, close))
    # near overflow an intermediate may round to Inf of either sign (or lose its sign to one rounding); an infinite
    # exact value (an infinite C or bias) stays that value unless an opposite infinity meets it (NaN)
    checked = np.where(np.isposinf(b) & ~nan, np.where(inf, (yi == ye) | np.isnan(yi), ~np.isnan(yi)), checked)
    checked = np.where(b == NEAR_OVERFLOW, ~np.isnan(yi), checked)
    return np.where(np.isnan(b), ~np.isfinite(yi), checked)
