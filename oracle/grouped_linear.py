"""The grouped (MoE) linear layer of NVFP4 training, modelled from group_quantize and grouped_gemm (SPEC 16).

Expert g owns the rows ``[P_{g-1}, P_g)`` of X (``P`` the running sum of ``splits``) and the weight ``W[g]`` ``[N, K]``:
``Y_g = X_g W_g^T (+ bias_g)``. The backward returns ``dX_g = dY_g W_g``, ``dW_g = dY_g^T X_g`` and
``dbias_g = column sums of dY_g``. Every product is an NVFP4 grouped GEMM over operands quantized as SPEC 16.1-16.2
state; ``device.GroupedLinear`` returns the same bytes (SPEC 16.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bias_grad import grouped_bias_grad
from .checks import ArrayOrTensor, Splits, check_flag, from_torch, is_torch
from .gemm import check_model
from .grouped import check_splits, group_quantize, split_sizes
from .grouped_gemm import grouped_gemm
from .planes import GroupedNVFP4Tensor
from .recipe import DEFAULT_RECIPE, NVFP4Recipe

__all__ = [
    "GroupedLinearGrads",
    "GroupedLinearOperands",
    "grouped_linear_backward",
    "grouped_linear_forward",
    "grouped_linear_operands",
]

ACTIVATION_BLOCK = (1, 16)  # X and dY (SPEC 16.1)


class GroupedLinearGrads(tuple):
    """The result of :func:`grouped_linear_backward`: a tuple ``(dx, dw, dbias)`` that also records the recipe.

    Attributes:
        dx: ``[T, K]`` ml_dtypes.bfloat16.
        dw: ``[E, N, K]`` float32; the caller's ``main_grad`` object itself when one was given.
        dbias: ``[E, N]`` float32, or None without ``with_bias``.
        recipe: the :class:`NVFP4Recipe` the gradients were computed with.
    """

    def __new__(cls, dx: np.ndarray, dw: ArrayOrTensor, dbias: np.ndarray | None,
                recipe: NVFP4Recipe) -> GroupedLinearGrads:
        self = super().__new__(cls, (dx, dw, dbias))
        self.recipe = recipe
        return self

    def __getnewargs__(self):
        return (*self, self.recipe)

    @property
    def dx(self):
        """dX ``[T, K]`` bfloat16."""
        return self[0]

    @property
    def dw(self):
        """dW ``[E, N, K]`` float32 (``main_grad`` when given)."""
        return self[1]

    @property
    def dbias(self):
        """dbias ``[E, N]`` float32, or None."""
        return self[2]

    def __repr__(self) -> str:
        def shape(a):
            return None if a is None else f"{a.dtype}{list(a.shape)}"

        return (f"GroupedLinearGrads(dx={shape(self.dx)}, dw={shape(self.dw)}, dbias={shape(self.dbias)}, "
                f"recipe={self.recipe!r})")


@dataclass(frozen=True)
class GroupedLinearOperands:
    """The layer's quantized operands (SPEC 16.1): every plane a device layer quantizes, saves or reuses.

    Attributes:
        x: X ``[T, K]`` with its rowwise plane (fprop) and its columnwise plane (wgrad).
        weight: W viewed as ``[E*N, K]`` with splits ``[N] * E``, rowwise (fprop) and columnwise (dgrad) planes.
        dy: dY ``[T, N]`` with its rowwise (dgrad) and columnwise (wgrad) planes, or None when no dY was given.
        recipe: the :class:`NVFP4Recipe` they were quantized with.
    """

    x: GroupedNVFP4Tensor
    weight: GroupedNVFP4Tensor
    dy: GroupedNVFP4Tensor | None
    recipe: NVFP4Recipe


# ---------------------------------------------------------------------------------------------- argument checks


def _array(name: str, a) -> np.ndarray:
    if is_torch(a):
        a = from_torch(a)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array (or a torch tensor), got {type(a).__name__}")
    return a


def _bf16(name: str, a, shape_text: str, ndim: int) -> np.ndarray:
    a = _array(name, a)
    if a.dtype.name != "bfloat16":
        raise TypeError(f"{name} must be bfloat16 (ml_dtypes.bfloat16 or torch.bfloat16), got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape_text}, got shape {a.shape}")
    return a


def _check_recipe(recipe) -> None:
    if not isinstance(recipe, NVFP4Recipe):
        raise TypeError(f"recipe must be an oracle.NVFP4Recipe, got {type(recipe).__name__}")


def _check_layer(x, weight, splits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [T, K] bf16, weight [E, N, K] bf16, splits [E] of sizes >= 0 adding up to T; K and N multiples of 16."""
    x = _bf16("x", x, "[T, K]", 2)
    weight = _bf16("weight", weight, "[E, N, K]", 3)
    e, n, k = weight.shape
    if e < 1:
        raise ValueError("weight must hold at least one expert (E >= 1)")
    if x.shape[1] != k:
        raise ValueError(f"x has K={x.shape[1]} columns but weight is [E, N, K] = {weight.shape}")
    for name, v in (("K", k), ("N", n)):
        if v < 16 or v % 16:
            raise ValueError(f"{name}={v} must be a positive multiple of 16 (one E4M3 scale per 16 elements; "
                             f"{name} is a GEMM contraction length)")
    if is_torch(splits):
        splits = splits.detach().cpu().numpy()
    return x, weight, check_splits(split_sizes(splits, e), x.shape[0])


def _check_dy(dy, t: int, n: int) -> np.ndarray:
    dy = _bf16("dy", dy, "[T, N]", 2)
    if dy.shape != (t, n):
        raise ValueError(f"dy must be [T, N] = {(t, n)}, got {dy.shape}")
    return dy


def _check_bias(bias, e: int, n: int) -> np.ndarray:
    b = _array("bias", bias)
    if b.dtype != np.float32 and b.dtype.name != "bfloat16":
        raise TypeError(f"bias must be float32 or bfloat16, got dtype {b.dtype}")
    if b.shape != (e, n):
        raise ValueError(f"bias must be [E, N] = {(e, n)}, got {b.shape}")
    return b


def _check_main_grad(main_grad, e: int, n: int, k: int) -> np.ndarray:
    """The NumPy array to update in place: main_grad itself, or the memory of a CPU torch tensor."""
    if is_torch(main_grad):
        if main_grad.device.type != "cpu":
            raise ValueError(f"main_grad must be a NumPy array or a CPU tensor, got a tensor on {main_grad.device}")
        if str(main_grad.dtype) != "torch.float32":
            raise TypeError(f"main_grad must be float32, got dtype {main_grad.dtype}")
        main_grad = main_grad.detach().numpy()  # shares its memory
    if not isinstance(main_grad, np.ndarray):
        raise TypeError(f"main_grad must be a float32 NumPy array, got {type(main_grad).__name__}")
    if main_grad.dtype != np.float32:
        raise TypeError(f"main_grad must be float32, got dtype {main_grad.dtype}")
    if main_grad.shape != (e, n, k):
        raise ValueError(f"main_grad must be [E, N, K] = {(e, n, k)}, got {main_grad.shape}")
    if not main_grad.flags.writeable:
        raise ValueError("main_grad must be writeable (it is updated in place)")
    return main_grad


# ---------------------------------------------------------------------------------------------- quantization


def _quantize_x(x, splits, recipe: NVFP4Recipe, *, rowwise: bool, columnwise: bool) -> GroupedNVFP4Tensor:
    """SPEC 16.1: X in 1x16 blocks, rounded to nearest; the RHT (when rht_wgrad) on its columnwise plane only."""
    return group_quantize(x, splits, rowwise=rowwise, columnwise=columnwise, rht=recipe.rht_wgrad and columnwise,
                          rht_signs=recipe.rht_signs, block=ACTIVATION_BLOCK, rule=recipe.rule, rounding="rn")


def _quantize_weight(weight, recipe: NVFP4Recipe, *, rowwise: bool, columnwise: bool) -> GroupedNVFP4Tensor:
    """SPEC 16.1: W as [E*N, K] with splits [N] * E, in recipe.weight_block blocks, rounded to nearest, no RHT."""
    e, n, k = weight.shape
    return group_quantize(weight.reshape(e * n, k), np.full(e, n, np.int64), rowwise=rowwise, columnwise=columnwise,
                          block=recipe.weight_block, rule=recipe.rule, rounding="rn")


def _quantize_dy(dy, splits, recipe: NVFP4Recipe) -> GroupedNVFP4Tensor:
    """SPEC 16.1-16.2: dY in 1x16 blocks, both planes; the RHT (when rht_wgrad) on its columnwise plane; stochastic
    rounding (when sr_grad) with Philox seed recipe.seed and offset 0, so group g draws from stream g."""
    return group_quantize(dy, splits, rowwise=True, columnwise=True, rht=recipe.rht_wgrad,
                          rht_signs=recipe.rht_signs, block=ACTIVATION_BLOCK, rule=recipe.rule,
                          rounding=recipe.grad_rounding, seed=recipe.seed, offset=0)


def grouped_linear_operands(x: ArrayOrTensor, weight: ArrayOrTensor, splits: Splits, dy: ArrayOrTensor | None = None,
                            *, recipe: NVFP4Recipe = DEFAULT_RECIPE) -> GroupedLinearOperands:
    """Every quantized operand of the layer (SPEC 16.1-16.2), both planes of each: what
    :func:`grouped_linear_forward` and :func:`grouped_linear_backward` multiply, for comparing the planes a device
    layer saves or reuses byte for byte. Arguments ``x``, ``weight``, ``splits`` and ``recipe`` as in
    :func:`grouped_linear_backward`; ``dy`` optional."""
    _check_recipe(recipe)
    x, weight, s = _check_layer(x, weight, splits)
    if dy is not None:
        dy = _check_dy(dy, x.shape[0], weight.shape[1])
    return GroupedLinearOperands(
        x=_quantize_x(x, s, recipe, rowwise=True, columnwise=True),
        weight=_quantize_weight(weight, recipe, rowwise=True, columnwise=True),
        dy=None if dy is None else _quantize_dy(dy, s, recipe),
        recipe=recipe,
    )


# ---------------------------------------------------------------------------------------------- the layer


def grouped_linear_forward(x: ArrayOrTensor, weight: ArrayOrTensor, splits: Splits, *,
                           bias: ArrayOrTensor | None = None, recipe: NVFP4Recipe = DEFAULT_RECIPE,
                           model: str = "sequential") -> np.ndarray:
    """Y ``[T, N]`` bfloat16 of the grouped linear layer: ``Y_g = X_g W_g^T + bias_g`` as one NVFP4 grouped GEMM
    (SPEC 16.3: fprop of X's rowwise plane and W's rowwise plane, the bias in 12.2's epilogue).

    Args:
        x: ``[T, K]`` bfloat16 (ml_dtypes.bfloat16 NumPy array, or a torch bfloat16 tensor).
        weight: ``[E, N, K]`` bfloat16, expert g's weight ``W[g]`` ``[N, K]``.
        splits: E group sizes (any integers >= 0, 0 included, adding up to T; int64 as the device takes them).
        bias: optional ``[E, N]`` float32 or bfloat16, one row per expert.
        recipe: the :class:`NVFP4Recipe` (SPEC 16.1).
        model: the GEMM model (SPEC 16.5): "sequential" (the device's ``mode="exact"``), "tensor_core" (its
            ``mode="fast"``), "exact" or "sm100" (SPEC 12).

    Returns a plain ml_dtypes.bfloat16 ndarray ``[T, N]``; the recipe is the caller's argument (the backward's
    result records it, :class:`GroupedLinearGrads`). Raises ``TypeError`` / ``ValueError`` before any work for a
    wrong dtype or shape, splits of the wrong length, negative or not adding up to T, K or N not a positive
    multiple of 16, an unknown model or a recipe that is not an :class:`NVFP4Recipe`.
    """
    _check_recipe(recipe)
    check_model(model)
    x, weight, s = _check_layer(x, weight, splits)
    e, n, _ = weight.shape
    if bias is not None:
        bias = _check_bias(bias, e, n)
    xq = _quantize_x(x, s, recipe, rowwise=True, columnwise=False)
    wq = _quantize_weight(weight, recipe, rowwise=True, columnwise=False)
    return grouped_gemm(xq, wq, kind="fprop", model=model, bias=bias)


def grouped_linear_backward(x: ArrayOrTensor, weight: ArrayOrTensor, splits: Splits, dy: ArrayOrTensor, *,
                            with_bias: bool = False, recipe: NVFP4Recipe = DEFAULT_RECIPE, model: str = "sequential",
                            main_grad: ArrayOrTensor | None = None) -> GroupedLinearGrads:
    """The gradients ``(dx, dw, dbias)`` of :func:`grouped_linear_forward` for the output gradient ``dy`` (SPEC 16.3).

    * dx ``[T, K]`` bfloat16: dgrad of dY's rowwise plane and W's columnwise plane, ``dX_g = dY_g W_g``.
    * dw ``[E, N, K]`` float32: wgrad of dY's and X's columnwise planes, ``dW_g = dY_g^T X_g``. With ``main_grad``
      (float32 ``[E, N, K]``, a NumPy array or a CPU torch tensor) it is added into ``main_grad`` in place and dw
      is that same object; an empty expert leaves its ``main_grad[g]`` unchanged bit for bit, and without
      ``main_grad`` its dw is +0.0 (SPEC 16.3, 12.5).
    * dbias ``[E, N]`` float32 when ``with_bias`` (:func:`oracle.grouped_bias_grad` of dY, SPEC 16.4), else None.

    Args:
        x, weight, splits, recipe, model: as in :func:`grouped_linear_forward` (the forward's inputs).
        dy: ``[T, N]`` bfloat16, the gradient of Y.
        with_bias: whether the forward had a bias (the bias's value does not enter the gradients).
        main_grad: optional float32 ``[E, N, K]`` wgrad accumulator (Megatron's ``main_grad``).

    Returns a :class:`GroupedLinearGrads`, which unpacks as ``dx, dw, dbias`` and has ``.recipe``. Raises as
    :func:`grouped_linear_forward` does, also for a ``dy`` or ``main_grad`` of the wrong dtype or shape, all before
    any work.
    """
    _check_recipe(recipe)
    check_model(model)
    with_bias = check_flag(with_bias, "with_bias")
    x, weight, s = _check_layer(x, weight, splits)
    e, n, k = weight.shape
    dy = _check_dy(dy, x.shape[0], n)
    acc = None if main_grad is None else _check_main_grad(main_grad, e, n, k)
    xq = _quantize_x(x, s, recipe, rowwise=False, columnwise=True)
    wq = _quantize_weight(weight, recipe, rowwise=False, columnwise=True)
    dyq = _quantize_dy(dy, s, recipe)
    dx = grouped_gemm(dyq, wq, kind="dgrad", model=model)
    dw = grouped_gemm(dyq, xq, kind="wgrad", model=model, accumulate=acc)
    if acc is not None:
        acc[...] = dw  # in place; an empty expert's slice is its own bytes (SPEC 12.5)
        dw = main_grad
    dbias = grouped_bias_grad(dy, s) if with_bias else None
    return GroupedLinearGrads(dx, dw, dbias, recipe)
