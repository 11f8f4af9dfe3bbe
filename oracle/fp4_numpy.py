"""Bit-exact NumPy codecs for the NVFP4 element and scale formats.

Every function here implements one rule of SPEC.md section 2 and 3; the section is named in each docstring.
All inputs are converted to float32 first (exact for float16 / bfloat16 / float32 inputs).
"""

from __future__ import annotations

import numpy as np

from .checks import check_index, host_array

__all__ = [
    "E2M1_VALUES",
    "E4M3_MAX",
    "bf16_bits_to_f32",
    "decode_e2m1",
    "decode_e4m3",
    "encode_e2m1",
    "encode_e4m3",
    "encode_e4m3_reference",
    "f32_to_bf16_bits",
    "pack_fp4",
    "round_to_bf16",
    "unpack_fp4",
]

#: SPEC 2.1: the value of each 4-bit E2M1 code (code = sign << 3 | index).
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)
#: SPEC 2.2: largest finite E4M3 ("fn") value.
E4M3_MAX = np.float32(448.0)


def _as_f32(x) -> np.ndarray:
    """The fp32 values of ``x``: float32 as it is; float16, bfloat16, and float64 (Python floats) or integers whose
    every value is a float32 value, widened or narrowed exactly. A value that float32 cannot hold (e.g. 2.5000001) is a
    ``ValueError``: these codecs round fp32 values, and rounding it to fp32 first would round twice."""
    arr = host_array(x, "x")  # (a torch tensor's bfloat16 as ml_dtypes' bfloat16)
    if arr.dtype == np.float32:
        return arr
    if arr.dtype.kind not in "fiu" and arr.dtype.name != "bfloat16":
        raise TypeError(f"expected a floating-point array, got dtype {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        f = arr.astype(np.float32)
    if arr.dtype.kind in "iu" or arr.dtype.itemsize > 4:
        wide = arr.astype(np.float64) if arr.dtype.kind in "iu" else arr
        exact = (f.astype(wide.dtype) == wide) | (np.isnan(f) & np.isnan(wide))
        if arr.dtype.kind in "iu":
            exact &= f.astype(np.float64).astype(arr.dtype) == arr  # (an integer past 2^53 in float64 too)
        if not np.all(exact):
            bad = np.asarray(arr).reshape(-1)[np.flatnonzero(~np.asarray(exact).reshape(-1))[0]]
            raise ValueError(f"{bad!r} is not a float32 value: these codecs take fp32 inputs (SPEC 3), and rounding "
                             f"{arr.dtype} to float32 first would round twice; cast with .astype(np.float32) if that "
                             "is what you want")
    return f


# ---------------------------------------------------------------------------------------------------------------
# E2M1 (SPEC 2.1, 3.1)
# ---------------------------------------------------------------------------------------------------------------

def encode_e2m1(x_f32) -> np.ndarray:
    """fp32 -> E2M1 code, round to nearest even, saturating (SPEC 3.1; PTX cvt.rn.satfinite.e2m1x2.f32).

    |x| > 6 and +-Inf saturate to +-6, NaN -> +6 (0x7), the sign is kept on zero and on underflow.
    Returns uint8 codes in 0..15 (one code per element, unpacked).
    """
    x = _as_f32(x_f32)
    a = np.abs(x)
    # Index of the nearest E2M1 magnitude. At a tie the even index (mantissa bit 0) wins, so the comparison
    # is strict (>) where the lower neighbour is even and inclusive (>=) where the upper one is.
    idx = (a > 0.25).view(np.uint8)  # bool -> 0 / 1, then the other six comparisons added in place
    for t in (0.75, 1.75, 3.5):
        idx += a >= t
    for t in (1.25, 2.5, 5.0):
        idx += a > t
    nan = np.isnan(x)
    sign = np.signbit(x) & ~nan
    idx = np.where(nan, np.uint8(7), idx)
    return (idx | (sign.astype(np.uint8) << 3)).astype(np.uint8)


def decode_e2m1(codes) -> np.ndarray:
    """E2M1 code -> float32 value (SPEC 2.1): the low 4 bits of each uint8 (a byte's high nibble is ignored), or
    integers 0..15 of any other integer dtype (``ValueError`` outside)."""
    c = host_array(codes, "codes")
    if c.dtype.kind not in "ui":
        raise TypeError(f"E2M1 codes must be an integer array, got {c.dtype}")
    if c.dtype != np.uint8 and c.size and (c.min() < 0 or c.max() > 15):
        raise ValueError(f"E2M1 codes are 0..15 (a uint8 array's low nibbles are read as they are), got values "
                         f"{int(c.min())}..{int(c.max())}")
    return E2M1_VALUES[c.astype(np.uint8) & 0x0F]


def pack_fp4(codes) -> np.ndarray:
    """Pack E2M1 codes (0..15; ``ValueError`` outside) two per byte along the last axis (SPEC 2.3).

    Element 2i goes to the LOW nibble of byte i and element 2i+1 to the HIGH nibble. An odd last
    dimension is padded with a zero nibble. Returns uint8 of shape [..., ceil(n/2)].
    """
    c = np.asarray(codes)
    if c.dtype.kind not in "ui":
        raise TypeError(f"E2M1 codes must be an integer array, got {c.dtype}")
    if c.ndim == 0:
        raise ValueError("E2M1 codes to pack must have at least one dimension (codes along the last axis)")
    if c.size and (c.min() < 0 or c.max() > 15):
        raise ValueError(f"E2M1 codes are 0..15 (sign bit 3, SPEC 2.1), got values in [{c.min()}, {c.max()}]")
    c = c.astype(np.uint8)
    n = c.shape[-1]
    if n % 2:
        c = np.concatenate([c, np.zeros(c.shape[:-1] + (1,), np.uint8)], axis=-1)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed, n: int) -> np.ndarray:
    """Inverse of :func:`pack_fp4`: uint8 [..., ceil(n/2)] -> codes [..., n] (SPEC 2.3)."""
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise TypeError(f"packed FP4 data must be uint8, got {p.dtype}")
    if p.ndim == 0:
        raise ValueError("packed FP4 data must have at least one dimension (bytes along the last axis)")
    n = check_index(n, "n")
    if p.shape[-1] != (n + 1) // 2:
        raise ValueError(f"packed last dimension {p.shape[-1]} does not hold {n} codes")
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), np.uint8)
    out[..., 0::2] = p & 0x0F
    out[..., 1::2] = p >> 4
    return out[..., :n]


# ---------------------------------------------------------------------------------------------------------------
# E4M3 (SPEC 2.2, 3.2)
# ---------------------------------------------------------------------------------------------------------------

def _e4m3_table() -> np.ndarray:
    b = np.arange(256, dtype=np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 0x7
    mag = np.where(e == 0, m * 2.0**-9, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    val = (sign * mag).astype(np.float32)
    val[(b & 0x7F) == 0x7F] = np.nan
    return val


_E4M3_TABLE = _e4m3_table()


def decode_e4m3(u8) -> np.ndarray:
    """E4M3 ("fn") byte -> float32 (SPEC 2.2). 0x7F / 0xFF decode to NaN; there is no Inf."""
    b = np.asarray(u8)
    if b.dtype != np.uint8:
        raise TypeError(f"E4M3 bytes must be uint8, got {b.dtype}")
    return _E4M3_TABLE[b]


def encode_e4m3(x_f32) -> np.ndarray:
    """fp32 -> E4M3 byte, round to nearest even, saturating to +-448 (SPEC 3.2; __NV_SATFINITE).

    +-Inf -> +-448, NaN -> 0x7F, -0.0 -> 0x80. Subnormals have quantum 2**-9; |x| <= 2**-10 -> (signed) 0.
    Fast path: a table indexed by the fp32 sign, exponent, top 4 mantissa bits and a sticky bit of the
    other 19. Every E4M3 rounding boundary (midpoints, 448) has at most 4 significant mantissa bits, so
    no boundary lies inside one index class and the table (built from :func:`encode_e4m3_reference`)
    is exact.
    """
    x = _as_f32(x_f32)
    bits = np.ascontiguousarray(x).view(np.uint32)  # (a 0-d x becomes shape (1,) here: reshaped back below)
    key = (bits >> 19) << 1
    key |= (bits & 0x7FFFF) != 0
    return _E4M3_ENCODE_TABLE[key].reshape(x.shape)


def encode_e4m3_reference(x_f32) -> np.ndarray:
    """SPEC 3.2 computed directly (frexp / rint / ldexp); :func:`encode_e4m3` is a table built from it."""
    x = _as_f32(x_f32)
    nan = np.isnan(x)
    sign = np.signbit(x) & ~nan
    a = np.minimum(np.abs(np.where(nan, np.float32(0), x)), E4M3_MAX)
    _, e = np.frexp(a)  # a = f * 2**e with f in [0.5, 1): unbiased exponent of a is e - 1
    exp = np.maximum(e.astype(np.int32) - 1, -6)  # normal exponents start at -6; below that the quantum is fixed
    q = np.ldexp(np.rint(np.ldexp(a, 3 - exp)), exp - 3)  # RNE onto the grid of 3 fraction bits (exact ops)
    q = np.minimum(q, E4M3_MAX)  # cannot round past 448: 448 is on the grid and inputs were clamped
    _, e2 = np.frexp(q)
    qexp = e2.astype(np.int32) - 1
    normal = q >= np.float32(2.0**-6)
    field_e = np.where(normal, qexp + 7, 0)
    frac = np.where(normal, np.ldexp(q, 3 - qexp) - 8.0, np.ldexp(q, 9))
    code = (field_e << 3) | frac.astype(np.int32)
    code = code.astype(np.uint8) | (sign.astype(np.uint8) << 7)
    return np.where(nan, np.uint8(0x7F), code).astype(np.uint8)


def _e4m3_encode_table() -> np.ndarray:
    keys = np.arange(1 << 14, dtype=np.uint32)
    representative = ((keys >> 1) << 19) | (keys & 1)  # the class's lowest member (sticky -> +1 ulp)
    return encode_e4m3_reference(representative.view(np.float32))


_E4M3_ENCODE_TABLE = _e4m3_encode_table()

# ---------------------------------------------------------------------------------------------------------------
# bfloat16 (SPEC 3.3)
# ---------------------------------------------------------------------------------------------------------------

def f32_to_bf16_bits(x_f32) -> np.ndarray:
    """fp32 -> bfloat16 bit pattern (uint16), round to nearest even; NaN -> 0x7FC0 | sign (SPEC 3.3)."""
    x = _as_f32(x_f32)
    bits = np.ascontiguousarray(x).view(np.uint32)
    r = (bits >> 16) & 1  # uint32 arithmetic; only NaN patterns can wrap and they are replaced below
    r += bits
    r += 0x7FFF
    r >>= 16
    rounded = r.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) & 0x8000 | 0x7FC0).astype(np.uint16)
    return rounded


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bfloat16 bit pattern (integers 0..0xFFFF) -> float32 (exact). ``TypeError`` for a non-integer array (e.g.
    float values: view a bfloat16 array's bits with ``.view(np.uint16)``), ``ValueError`` outside 0..0xFFFF."""
    b = np.asarray(bits)
    if b.dtype.kind not in "ui":
        raise TypeError(f"bfloat16 bit patterns are integers (uint16), got dtype {b.dtype}")
    if b.size and (b.min() < 0 or b.max() > 0xFFFF):
        raise ValueError(f"bfloat16 bit patterns are 0..0xFFFF, got values in [{b.min()}, {b.max()}]")
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(x_f32) -> np.ndarray:
    """Round fp32 to the nearest bfloat16 value (RNE), returned as float32 (SPEC 3.3).

    Uses ml_dtypes' C conversion for speed; tests check it equals :func:`f32_to_bf16_bits` (the SPEC 3.3
    formula) on every non-NaN input class, and NaN stays NaN (its payload never matters downstream)."""
    import ml_dtypes

    with np.errstate(invalid="ignore"):
        return _as_f32(x_f32).astype(ml_dtypes.bfloat16).astype(np.float32)
