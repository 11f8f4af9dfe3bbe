"""The NVFP4 training recipe of the grouped linear layer, one object shared by the oracle and the device (SPEC 16.1)."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import check_flag
from .quantize import check_block
from .rht import DEFAULT_RHT_SIGNS
from .scale_rules import RULES

__all__ = ["DEFAULT_RECIPE", "NVFP4Recipe"]


@dataclass(frozen=True, repr=False)
class NVFP4Recipe:
    """How a grouped linear layer quantizes its tensors (SPEC 16.1 states every use of every field).

    The defaults are NVIDIA's NVFP4 training recipe ("Pretraining Large Language Models with NVFP4",
    arXiv 2509.25149) as TransformerEngine's ``NVFP4BlockScaling()`` sets it up by default: weights in 16x16 blocks
    (``disable_2d_quantization=False``), activations and gradients in 1x16 blocks; the random Hadamard transform on
    the columnwise planes of the input and of the output gradient, the two wgrad operands
    (``disable_rht=False``; TE applies it to the columnwise usage only, with its hard-coded sign vector, mask
    0xD7E8); stochastic rounding on the output gradient only (``disable_stochastic_rounding=False``); every other
    quantization rounds to nearest. Where this recipe differs from TE: TE draws each stochastic-rounding call's
    Philox seed and offset from torch's CUDA generator, whereas here ``seed`` fixes them (SPEC 16.2), so a step is
    reproducible bit for bit; a caller that wants fresh random bits per step passes a recipe with a new seed.

    Attributes:
        rule: the scale rule of every quantization (SPEC 5): "te" (default), "te_fused_rht", "torchao" or
            "torchao_noscale".
        weight_block: the weights' block, ``(16, 16)`` (default, SPEC 6.3) or ``(1, 16)``; also accepts the strings
            "16x16" / "1x16" and stores the tuple. Inputs and output gradients always use ``(1, 16)``.
        rht_wgrad: RHT (SPEC 7) on the columnwise planes of X and dY, the wgrad operands (default True).
        rht_signs: the RHT's 16-bit sign mask (SPEC 7.1), default TE's 0xD7E8.
        sr_grad: stochastic rounding (SPEC 3.4, 10) on both planes of dY (default True).
        seed: the Philox seed of dY's stochastic rounding, an integer in [0, 2**64) (default 0; SPEC 16.2). Every
            step and every layer quantized with the same seed draws the same random bits: give each layer its own.

    Raises at construction: ``ValueError`` for a ``rule`` or ``weight_block`` that is not one of the choices (whatever
    its type), ``TypeError`` for a flag or an integer field of another type, ``ValueError`` for an integer out of
    range.
    """

    rule: str = "te"
    weight_block: tuple[int, int] = (16, 16)
    rht_wgrad: bool = True
    rht_signs: int = DEFAULT_RHT_SIGNS
    sr_grad: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.rule, str) or self.rule not in RULES:
            raise ValueError(f"NVFP4Recipe.rule must be one of {RULES}, got {self.rule!r}")
        object.__setattr__(self, "weight_block", check_block(self.weight_block))
        for name in ("rht_wgrad", "sr_grad"):  # (a NumPy bool is a bool, as quantize's flags take it)
            object.__setattr__(self, name, check_flag(getattr(self, name), f"NVFP4Recipe.{name}"))
        for name, limit in (("rht_signs", 1 << 16), ("seed", 1 << 64)):
            v = getattr(self, name)
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise TypeError(f"NVFP4Recipe.{name} must be an integer, got {v!r}")
            if not 0 <= int(v) < limit:
                raise ValueError(f"NVFP4Recipe.{name} must be in [0, {limit:#x}), got {int(v)}")
            object.__setattr__(self, name, int(v))

    def __repr__(self) -> str:
        return (f"NVFP4Recipe(rule={self.rule!r}, weight_block={self.weight_block}, rht_wgrad={self.rht_wgrad}, "
                f"rht_signs=0x{self.rht_signs:04X}, sr_grad={self.sr_grad}, seed={self.seed})")

    @property
    def grad_rounding(self) -> str:
        """The rounding of dY's planes: "sr" when ``sr_grad``, else "rn" (SPEC 16.1)."""
        return "sr" if self.sr_grad else "rn"


#: ``NVFP4Recipe()``: the default of every ``recipe=`` argument (an immutable value, safe to share).
DEFAULT_RECIPE = NVFP4Recipe()
