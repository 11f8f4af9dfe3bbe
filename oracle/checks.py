"""Argument checks shared by the oracle's public functions: integers, flags and block shapes, each refused with an
error that names the argument (a float, a bool or a string where an integer is meant is never rounded or parsed);
torch tensors recognised and converted without importing torch, and the annotation aliases for arguments that take
them."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

__all__ = ["BLOCKS", "ArrayOrTensor", "Splits", "TorchTensor", "check_block", "check_flag", "check_index",
           "from_torch", "host_array", "is_real", "is_torch"]

if TYPE_CHECKING:
    import torch

    TorchTensor = torch.Tensor
else:
    class TorchTensor(Protocol):
        """``torch.Tensor`` in the oracle's annotations at run time: the oracle takes torch tensors without importing
        torch (:func:`is_torch`, :func:`from_torch`), so ``typing.get_type_hints`` and ``help()`` resolve its
        signatures without torch; type checkers see ``torch.Tensor`` itself."""

#: a NumPy array or a torch tensor (converted by :func:`from_torch`)
ArrayOrTensor = np.ndarray | TorchTensor
#: E group sizes: a sequence of ints, a NumPy array or a torch tensor
Splits = Sequence[int] | np.ndarray | TorchTensor

#: The block shapes of SPEC 6.3: 1x16 blocks and 16x16 tiles.
BLOCKS = ((1, 16), (16, 16))


def check_index(v, name: str, *, lo: int | None = 0) -> int:
    """``v`` as a Python int: an integer (Python or NumPy, not a bool), at least ``lo`` unless ``lo`` is None;
    ``TypeError`` for any other type (a float is not rounded), ``ValueError`` below ``lo``."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {v!r}") from None
    if lo is not None and i < lo:
        raise ValueError(f"{name} must be >= {lo}, got {i}")
    return i


def check_flag(v, name: str) -> bool:
    """``v`` as a bool: True or False (Python or NumPy); ``TypeError`` for anything else (a string such as "no" is
    not read by its truth value)."""
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def check_block(block) -> tuple:
    """``(1, 16)`` / ``(16, 16)`` from a pair of integers or the strings ``"1x16"`` / ``"16x16"`` (SPEC 6.3); a
    ``ValueError`` for anything else (floats and bools included: they are never rounded)."""
    if isinstance(block, str):
        parts = block.strip().lower().split("x")
        ok = len(parts) == 2 and all(p.isdigit() for p in parts)
        pair = tuple(int(p) for p in parts) if ok else None
    else:
        pair = tuple(block) if isinstance(block, (tuple, list, np.ndarray)) else None
        if pair is not None and any(isinstance(b, (bool, np.bool_)) for b in pair):
            pair = None
        if pair is not None:
            try:
                pair = tuple(operator.index(b) for b in pair)
            except TypeError:
                pair = None
    if pair not in BLOCKS:
        raise ValueError(f"block must be (1, 16) or (16, 16) (or \"1x16\" / \"16x16\"), got {block!r}")
    return pair


def is_torch(a) -> bool:
    """Whether ``a`` is a torch tensor (checked without importing torch)."""
    return type(a).__module__.startswith("torch") and hasattr(a, "detach")


def from_torch(t) -> np.ndarray:
    """A torch tensor (any device) as a NumPy array of the same dtype and values; bfloat16 and float8_e4m3fn become
    ``ml_dtypes.bfloat16`` / ``ml_dtypes.float8_e4m3fn`` (torch's ``.numpy()`` has neither). ``ValueError`` for a meta
    tensor (no values), ``TypeError`` for a dtype without a NumPy form."""
    import ml_dtypes
    import torch

    if t.is_meta:
        raise ValueError("a meta tensor holds no values (torch's device='meta'): pass a tensor with data")
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype == torch.float8_e4m3fn:  # (NumPy has no float8: ml_dtypes' holds the same bytes)
        return t.contiguous().view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    try:
        return t.numpy()
    except TypeError as e:  # a torch dtype NumPy has no counterpart for (other float8s, float4, ...)
        raise TypeError(f"a torch {t.dtype} tensor has no NumPy form here: {e}") from None


def refuse_masked(a, name: str) -> None:
    """``TypeError`` when ``a`` is a NumPy masked array: NVFP4 has no masked elements, and a conversion would drop the
    mask and read the masked elements as stored."""
    if isinstance(a, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array: its mask would be dropped and the masked elements read as stored; "
                        f"pass {name}.filled(value) or {name}.data")


def host_array(a, name: str = "the array") -> np.ndarray:
    """``a`` as a NumPy array: a torch tensor through :func:`from_torch`, anything else through ``np.asarray``.
    ``TypeError`` for a masked array (:func:`refuse_masked`; ``name`` names it in the message)."""
    refuse_masked(a, name)
    return from_torch(a) if is_torch(a) else np.asarray(a)


def native_order(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order: a byte-swapped numeric array (e.g. ``>f4`` from a file written on a
    big-endian machine) is converted, with the same values; any other array is returned as it is."""
    return a.astype(a.dtype.newbyteorder("=")) if a.dtype.kind in "fiu" and not a.dtype.isnative else a


def is_real(a: np.ndarray) -> bool:
    """Whether an array holds real numbers: a NumPy integer or float dtype, or an ml_dtypes float (bfloat16, the
    float8 types); not bool, complex, strings or objects."""
    return a.dtype.kind in "fiu" or (a.dtype.kind == "V" and a.dtype.name.startswith(("bfloat16", "float8")))


def dtype_hint(dtype: np.dtype) -> str:
    """A hint for a dtype that is a bfloat16 array in disguise: ``np.save`` writes ml_dtypes.bfloat16 as the raw
    2-byte type ``|V2``, which ``np.load`` returns; "" for any other dtype."""
    if dtype.kind == "V" and dtype.itemsize == 2 and dtype.fields is None:
        return (" (a bfloat16 array saved with np.save loads as |V2: read it with "
                "x.view(np.uint16).view(ml_dtypes.bfloat16))")
    return ""
