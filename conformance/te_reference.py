"""TransformerEngine's own pure-torch NVFP4 reference, loaded from a TE source checkout (TE need not be installed).

TE's ``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`` (with ``reference_utils.py``) imports two
modules that need TE's compiled extension: the quantizer base classes and the GEMM enums. Both only name things there,
so :func:`load_reference` copies the two reference files into a package tree of its own beside stand-ins for those
modules and imports them from it. :class:`TEReference` holds one such tree for its lifetime and quantizes with TE's
``NVFP4QuantizerRef``; :meth:`TEReference.quantize` returns TE's planes as the conformance op ``quantize`` keys its
buffers (``conformance.ops``). ``tools/te_reference_check.py`` and the ``te-reference:PATH`` conformance backend
(``conformance.backends.TEReferenceBackend``) run on it.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

__all__ = ["CannotRun", "TEReference", "load_reference", "plane_arrays", "plane_fields", "rht_negative",
           "signed_zero_codes", "te_call"]

_RECIPES = Path("transformer_engine/pytorch/custom_recipes")
# stand-ins for the modules reference_nvfp4.py imports besides reference_utils: base classes and the names its
# signatures use (GEMM enums), none of which takes part in quantization
_STANDINS = {
    "transformer_engine/__init__.py": "",
    "transformer_engine/pytorch/__init__.py": "",
    "transformer_engine/pytorch/custom_recipes/__init__.py": "",
    "transformer_engine/pytorch/quantized_tensor.py": (
        "class QuantizedTensorStorage:\n    pass\n\n\n"
        "class Quantizer:\n"
        "    def __init__(self, *, rowwise, columnwise):\n"
        "        self.rowwise_usage, self.columnwise_usage, self.internal = rowwise, columnwise, False\n"),
    "transformer_engine/pytorch/custom_recipes/gemm.py": (
        "import dataclasses\nimport enum\n\n\n"
        "class GEMMType(enum.Enum):\n    FPROP = 0\n    DGRAD = 1\n    WGRAD = 2\n\n\n"
        "@dataclasses.dataclass\nclass MMParams:\n    pass\n"),
}


class CannotRun(Exception):
    """TE's reference cannot be used: no reference at the path, or one whose imports, constructor keywords or
    results this code does not know (a newer or older TE)."""


def load_reference(te: Path, work: Path):
    """TE's ``NVFP4QuantizerRef``, ``reference_utils`` and the GEMM enum its ``qgemm`` compares with (the
    stand-in's), imported from a package tree built in ``work``. Raises :class:`CannotRun`."""
    src = te / _RECIPES
    for name in ("reference_nvfp4.py", "reference_utils.py"):
        if not (src / name).is_file():
            raise CannotRun(f"{src / name} not found: the path must be a TransformerEngine source checkout")
    for rel, text in _STANDINS.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    for name in ("reference_nvfp4.py", "reference_utils.py"):
        shutil.copy(src / name, work / _RECIPES / name)
    # a package tree loaded before (another checkout in this process) must not answer for this one
    for mod in [m for m in sys.modules if m == "transformer_engine" or m.startswith("transformer_engine.")]:
        del sys.modules[mod]
    sys.path.insert(0, str(work))
    try:
        ref = importlib.import_module("transformer_engine.pytorch.custom_recipes.reference_nvfp4")
        return (ref.NVFP4QuantizerRef,
                importlib.import_module("transformer_engine.pytorch.custom_recipes.reference_utils"),
                importlib.import_module("transformer_engine.pytorch.custom_recipes.gemm").GEMMType)
    except (ImportError, AttributeError) as e:  # a TE whose reference imports or names more than the stand-ins give
        raise CannotRun(f"TE's reference at {src} does not load beside the stand-ins: {type(e).__name__}: "
                        f"{e}") from None
    finally:
        sys.path.remove(str(work))


@contextlib.contextmanager
def te_call(what: str):
    """A call into TE's reference: a TypeError or AttributeError there (an argument or field passed or read that this
    TE does not have) becomes :class:`CannotRun`, not a difference in bytes."""
    try:
        yield
    except (TypeError, AttributeError) as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        raise CannotRun(f"TE's {what} does not take or give what is passed or read: {type(e).__name__}: {e} "
                        f"(at {where.filename}:{where.lineno})") from None


def plane_fields(result, columnwise: bool) -> tuple:
    """(data, scales, amax) tensors of one plane of a TE reference result, as TE holds them: its columnwise fields
    (``data_t`` [K, M // 2], ``scale_t``, ``global_amax_col``) or its rowwise ones (``data``, ``scale``,
    ``global_amax_row``)."""
    if columnwise:
        return result.data_t, result.scale_t, result.global_amax_col
    return result.data, result.scale, result.global_amax_row


def plane_arrays(data, scales, amax) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A TE plane's fields (:func:`plane_fields`) as host arrays: the data and scale bytes as contiguous uint8 (the
    scales may be float8_e4m3fn tensors) and the amax(es) as float32 ``[n]``."""
    import torch

    def u8(t):
        return (t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t).contiguous().numpy()

    return u8(data), u8(scales), amax.float().numpy().astype(np.float32).reshape(-1)


class TEReference:
    """TE's reference quantizer from the checkout ``te``, loaded into a temporary package tree that lives as long as
    this object. Raises :class:`CannotRun` where it cannot load."""

    def __init__(self, te: str | Path):
        self._work = tempfile.TemporaryDirectory(prefix="te_reference_")
        self.quantizer, self.utils, self.gemm_type = load_reference(Path(te).resolve(), Path(self._work.name))

    def make(self, **kw):
        """An ``NVFP4QuantizerRef`` of E2M1 codes with TE's keywords ``kw``."""
        with te_call(f"NVFP4QuantizerRef constructor (keywords {sorted(kw)})"):
            return self.quantizer(dtype=self.utils.Fp4Formats.E2M1, **kw)

    def quantize(self, x, *, rowwise: bool, columnwise: bool, block=(1, 16), four_over_six: str | None = None,
                 four_over_six_fast_math: bool = False, global_scale_max: int = 448, row_scaled: bool = False,
                 rht: bool = False) -> dict[str, np.ndarray]:
        """TE's planes of the CPU tensor ``x`` [M, K] (M >= 1) under ``oracle.quantize``'s keywords of the same
        names (SPEC 5.6, 5.7; rule "te", round to nearest; ``rht``: TE's ``with_rht`` with its sign vector, the
        default mask of SPEC 7.1, on the columnwise plane; M a multiple of 16), as host arrays keyed ``row_data``,
        ``row_scales`` (compact), ``row_amax`` and the ``col_`` ones:

        * ``row_scales``: TE's first M rows (with 16x16 blocks TE keeps rows up to a multiple of 16);
        * ``col_data``: TE's ``[K, M / 2]`` codes, then zero bytes up to the plane's ``ceil(M / 16) * 8`` columns
          (SPEC 6.2's zero padding, which TE does not store); left out for an odd M, whose last token's code TE does
          not store (its rows are ``M // 2`` bytes);
        * the amaxes as float32 ``[1]``, or one per plane row when ``row_scaled``.

        TE's row scaling needs its rowwise plane: a row-scaled columnwise call quantizes both and returns the planes
        asked for."""
        q = self.make(rowwise=rowwise or row_scaled, columnwise=columnwise, quant_tile_shape=tuple(block),
                      nvfp4_use_4over6=four_over_six is not None,
                      nvfp4_4over6_err_mode=(four_over_six or "mae").upper(),
                      nvfp4_4over6_err_use_fast_math=bool(four_over_six_fast_math),
                      nvfp4_e4m3_max=int(global_scale_max), row_scaled_nvfp4=bool(row_scaled),
                      **({"with_rht": True, "with_random_sign_mask": True} if rht else {}))
        m = x.shape[0]
        with te_call("NVFP4QuantizerRef.quantize"):
            r = q.quantize(x)
            out = {}
            if rowwise:
                data, scales, amax = plane_arrays(*plane_fields(r, columnwise=False))
                out.update(row_data=data, row_scales=scales[:m], row_amax=amax)
            if columnwise:
                codes, scales, amax = plane_arrays(*plane_fields(r, columnwise=True))
                if m % 2 == 0:
                    out["col_data"] = np.zeros((codes.shape[0], -(-m // 16) * 8), np.uint8)  # the width (SPEC 6.2)
                    out["col_data"][:, : codes.shape[1]] = codes
                out.update(col_scales=scales, col_amax=amax)
        return out


def signed_zero_codes(negative: np.ndarray, buffers: dict[str, np.ndarray],
                      col_negative: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """SPEC 14.1's difference undone: TE's reference writes 0x0 for an element whose scaled value ``x * m`` is -0.0
    (a -0.0 input, or a negative one whose product underflows to zero), where SPEC 3.1 keeps x's sign (0x8). Returns
    ``buffers`` (:meth:`TEReference.quantize`'s) with every code 0x0 of an element whose ``negative`` (x's sign bit,
    bool ``[M, K]``) is set made 0x8; the columnwise plane's element (k, t) is x's (t, k), or ``col_negative[k, t]``
    where given (the RHT'd plane: the signs of its values, :func:`rht_negative`). Every other code, and every nibble
    past the plane's elements, is left as it is."""
    out = dict(buffers)
    for name, neg in (("row_data", negative), ("col_data", negative.T if col_negative is None else col_negative)):
        if name not in out:
            continue
        data = out[name]
        codes = np.stack([data & 0x0F, data >> 4], axis=-1).reshape(data.shape[0], -1)  # element order (SPEC 2)
        mask = np.zeros(codes.shape, bool)
        mask[: neg.shape[0], : neg.shape[1]] = neg
        codes = np.where(mask & (codes == 0), np.uint8(0x8), codes).reshape(data.shape[0], -1, 2)
        out[name] = (codes[..., 0] | (codes[..., 1] << 4)).astype(np.uint8)
    return out


def rht_negative(x: np.ndarray, signs: int) -> np.ndarray:
    """The sign bits ``[K, M]`` of the RHT'd columnwise plane of X (SPEC 7.1: ``(x * s) @ H16 / 4`` over each 16
    tokens of a column; M a multiple of 16), from :func:`conformance.independent.torch_rht`'s float64 sums: exact for
    SPEC 7.4's plain blocks (at most 2^24 multiples of the least input, below 2^53), whose zero sums are +0.0."""
    from .independent import torch_rht

    return (torch_rht(np.ascontiguousarray(np.asarray(x).T), signs) >> 15).astype(bool)
