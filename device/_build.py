"""JIT build of the two CUDA extensions through ``torch.utils.cpp_extension.load``.

* ``nvfp4_quantize``: ``csrc/quantize/`` (amax, quantize, grouped setup, swizzle, dequantize) and ``csrc/layer/``
  (the grouped linear layer's bias gradient and packed columnwise scales);
* ``nvfp4_gemm``: ``csrc/gemm/`` (the grouped GEMM), with the CUTLASS instantiations of ``copies_cutlass`` when
  CUTLASS's headers are found (:func:`cutlass_include_dir`); without them that algorithm is not built and the rest is.

Both are built on first use into ``$NVFP4_BUILD_DIR`` (default ``~/.cache/nvfp4_device``); torch hashes the sources,
so an edited kernel triggers a rebuild and an unchanged one loads from the cache. Flags: ``-O3``, sm_90a only, no
fast-math, ``--fmad=false`` (SPEC 1.1: every fp32 operation is rounded on its own; the kernels also use explicit
``__fmul_rn`` / ``__fadd_rn`` / ``__fdiv_rn``). The build-time environment variables (the only ones the package
reads) are listed in device/csrc/README.md.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["CSRC", "build_dir", "cutlass_include_dir", "load_extensions", "load_gemm_extension", "load_extension"]

CSRC = Path(__file__).resolve().parent / "csrc"
_CUDA_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--fmad=false",  # no FMA contraction anywhere (SPEC 1.1)
    "-Xptxas=-warn-spills",
    "-DNDEBUG",  # CUTLASS's device asserts are calls, which serialise its wgmma pipeline (ptxas C7510)
    "--expt-relaxed-constexpr",
]


@dataclass(frozen=True)
class _Extension:
    name: str
    subdir: str  # of the build directory
    sources: tuple[str, ...]  # relative to csrc/
    cutlass_sources: tuple[str, ...] = ()


_QUANTIZE = _Extension("nvfp4_quantize", "quantize", (
    "quantize/bindings.cpp", "quantize/grouped_setup.cu", "quantize/swizzle_dequantize.cu",
    "quantize/quantize_bf16.cu", "quantize/quantize_f16_f32.cu", "quantize/quantize_4over6.cu", "layer/bias_grad.cu",
    "layer/packed_scales.cu"))
_GEMM = _Extension("nvfp4_gemm", "gemm", (
    "gemm/bindings.cpp", "gemm/setup.cu", "gemm/fused_fast.cu", "gemm/fused_pair.cu", "gemm/fused_exact.cu",
    "gemm/copies.cu", "gemm/exact_copies.cu", "gemm/exact_hybrid.cu", "gemm/swapped.cu", "gemm/sm100_simt.cu",
    "gemm/sm100_copies.cu"),
    cutlass_sources=("gemm/cutlass_bf16.cu", "gemm/cutlass_bf16_t.cu", "gemm/cutlass_bf16_bias.cu",
                     "gemm/cutlass_f32.cu", "gemm/cutlass_f32_plus_c.cu"))

_locks = {_QUANTIZE.name: threading.Lock(), _GEMM.name: threading.Lock()}
_loaded: dict[str, ModuleType] = {}


def build_dir() -> Path:
    """The directory holding the compiled extensions (``$NVFP4_BUILD_DIR`` or ``~/.cache/nvfp4_device``)."""
    d = Path(os.environ.get("NVFP4_BUILD_DIR", Path.home() / ".cache" / "nvfp4_device"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def cutlass_include_dir() -> Path | None:
    """CUTLASS/CuTe headers for ``copies_cutlass``: ``$NVFP4_CUTLASS_INCLUDE``, else the ``nvidia-cutlass`` wheel's copy
    (``cutlass_library/source/include``); None when neither exists."""
    env = os.environ.get("NVFP4_CUTLASS_INCLUDE")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("cutlass_library")  # located, not imported (its generators are heavy)
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(next(iter(spec.submodule_search_locations))).resolve() / "source" / "include"
    return inc if (inc / "cutlass" / "cutlass.h").is_file() else None


def _load(ext: _Extension, verbose: bool) -> ModuleType:
    if ext.name in _loaded:
        return _loaded[ext.name]
    with _locks[ext.name]:
        if ext.name not in _loaded:
            from torch.utils.cpp_extension import load

            inc = cutlass_include_dir() if ext.cutlass_sources else None
            no_cutlass = ["-DNVFP4_NO_CUTLASS"] if ext.cutlass_sources and inc is None else []
            sources = ext.sources + (ext.cutlass_sources if inc else ())
            build = build_dir() / ext.subdir
            build.mkdir(parents=True, exist_ok=True)
            _loaded[ext.name] = load(
                name=ext.name + ("_nocutlass" if no_cutlass else ""),
                sources=[str(CSRC / s) for s in sources],
                # the bindings take torch's own -std (2.11: c++17; 2.13: c++20, which its headers need)
                extra_cflags=["-O3", *no_cutlass],
                extra_cuda_cflags=[*_CUDA_FLAGS, *no_cutlass],
                extra_include_paths=[str(CSRC)] + ([str(inc)] if inc else []),
                build_directory=str(build),
                verbose=verbose or bool(os.environ.get("NVFP4_BUILD_VERBOSE")),
            )
    return _loaded[ext.name]


def load_extension(verbose: bool = False) -> ModuleType:
    """The quantize extension (``nvfp4_quantize``), built on first use."""
    return _load(_QUANTIZE, verbose)


def load_gemm_extension(verbose: bool = False) -> ModuleType:
    """The grouped-GEMM extension (``nvfp4_gemm``), built on first use."""
    return _load(_GEMM, verbose)


def load_extensions(verbose: bool = False) -> tuple[ModuleType, ModuleType]:
    """Both extensions, ``(quantize, gemm)``, built on first use."""
    return load_extension(verbose), load_gemm_extension(verbose)
