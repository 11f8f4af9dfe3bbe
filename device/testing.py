"""Test-only hooks: reach every kernel path of the device package from tests, benchmarks and the fuzzer.

Production code never needs these: the plans chosen by :mod:`device._dispatch` are the fast ones, and every plan of a
mode gives the same bits. Tests use :func:`force_plan` to check each plan against the oracle on inputs the automatic
choice would send elsewhere; benchmarks use it to time the alternatives side by side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from oracle.quantize import planes_are_transposes

from . import _dispatch
from ._codes import Algorithm, Epilogue, Loader, QuantizeKernel

__all__ = ["force_plan", "gemm_over_weight_copy"]

_CHOICES = {"algorithm": Algorithm, "loader": Loader, "epilogue": Epilogue, "quantize": QuantizeKernel}


@contextlib.contextmanager
def force_plan(*, algorithm: str | None = None, loader: str | None = None, epilogue: str | None = None,
               quantize: str | None = None) -> Iterator[None]:
    """Within the block, calls run with the named parts of their plan forced (``None``: chosen as usual).

    Args:
        algorithm: the grouped GEMM's algorithm: ``"fused_64x256"``, ``"fused_128x256"``, ``"fused_pair_256x256"``,
            ``"swapped_64x256"``, ``"swapped_256x128"``, ``"copies_cutlass"`` (fast mode), ``"exact_fused"``,
            ``"exact_copies"``, ``"exact_hybrid"`` (exact mode) or ``"sm100_copies"``, ``"sm100_simt"`` (mode sm100).
        loader: ``"cp_async"`` or ``"tma"`` (the swapped algorithms and ``exact_copies`` have both; ``sm100_copies``
            has ``"tma"`` only and ``sm100_simt`` its own ``"loads"``).
        epilogue: ``"staged"`` or ``"tma_store"`` (the others, ``"direct"`` and ``"cutlass"``, are the only
            epilogues of the swapped algorithms, both sm100 algorithms and ``copies_cutlass``).
        quantize: the quantize passes' kernels, ``"general"`` or ``"fast_bf16"`` (``"four_over_six"``: the 4over6
            quantizer, which 4over6 calls run anyway and other calls cannot).

    A call whose forced plan cannot run it raises :class:`ValueError` (saying why) before launching anything. The
    names are checked on entry. Blocks nest: an inner block replaces only the parts it names. Not thread-safe (one
    process-wide setting, read when a call chooses its plan; a CUDA graph keeps the plan it was captured with).
    """
    given = {"algorithm": algorithm, "loader": loader, "epilogue": epilogue, "quantize": quantize}
    for part, value in given.items():
        if value is not None and value not in _CHOICES[part].__members__:
            raise ValueError(f"{part} must be one of {list(_CHOICES[part].__members__)}, got {value!r}")
    before = dict(_dispatch.FORCED)
    _dispatch.FORCED.update({k: v for k, v in given.items() if v is not None})
    try:
        yield
    finally:
        _dispatch.FORCED.clear()
        _dispatch.FORCED.update(before)


def gemm_over_weight_copy(a, b, *, kind: str, out, bias=None, mode: str = "fast") -> Callable[[], None]:
    """An fprop / dgrad call of :func:`device.grouped_gemm`'s operands into ``out`` (plus ``bias``) that reads the
    weights' fp16 copy, as ``GroupedLinear(cache_f16_weights=True)`` runs it: the copy ``[E, N, K]`` is made here,
    once, from ``b``'s rowwise plane (``device._ops.weight_f16_copy``; ``b`` as :func:`device.group_quantize` makes
    the weights, with that plane); each call of the returned function launches the GEMM with it, under the plan parts
    forced when it runs (:func:`force_plan`; the copy is read by ``copies_cutlass`` only).

    Raises ValueError for another kind, a ``b`` without its rowwise plane, or dgrad over a ``b`` whose columnwise
    plane is not its rowwise one transposed (16x16 blocks, RN, no RHT, no 4over6: SPEC 6.3); TypeError for an
    ``out`` that is not a tensor; and whatever :func:`device.grouped_gemm` raises for its arguments, all before the
    copy is made."""
    import torch

    from . import _ops
    from . import gemm as _gemm

    if kind not in ("fprop", "dgrad"):
        raise ValueError(f"the weights' copy serves fprop and dgrad only, got kind={kind!r}")
    if getattr(b, "row_data", None) is None:
        raise ValueError("b needs its rowwise plane: the weights' copy is made from it")
    o = getattr(b, "options", {})
    if kind == "dgrad" and not planes_are_transposes(o.get("block", (1, 16)), o.get("rounding"), o.get("rht"),
                                                     o.get("four_over_six")):
        raise ValueError("dgrad over the weights' copy needs b quantized in 16x16 blocks, round to nearest, without "
                         "the RHT or 4over6: only then is its columnwise plane the rowwise one transposed (SPEC 6.3)")
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor (the call writes into it), got {type(out).__name__}")
    c = _gemm._checked_call(a, b, kind, None, out, False, bias, mode)  # (the arguments checked before the copy is made)
    if kind == "dgrad":  # (dgrad's call reads b's columnwise plane; the copy is made from its rowwise one)
        _gemm._plane(b, "row", "b", kind)
    operands = _gemm._operands(c, a, b)
    e = b.offsets.shape[1] - 1
    n, k = b.shape[0] // e, b.shape[1]
    copy = _ops.weight_f16_copy(b.row_data, b.row_scales, b.offsets, e, n, k)

    def call() -> None:
        _ops.launch_grouped_gemm(_gemm._KIND_CODES[kind], mode, *operands, out, c.bias, False, c.sizes,
                                 *_gemm._plan_parts(), b_copy=copy)

    return call
