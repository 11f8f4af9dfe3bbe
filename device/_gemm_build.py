"""JIT build of the NVFP4 grouped-GEMM extension (``nvfp4_gemm``: ``device/csrc/gemm_*``), separate from the
quantize extension. Same cache directory rules as :mod:`device._build` (``$NVFP4_BUILD_DIR`` or
``~/.cache/nvfp4_device``); flags: ``-O3``, sm_90a only, no fast-math, ``--fmad=false`` (the exact path also uses
explicit ``__fadd_rn`` / ``__fmul_rn``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import ModuleType

__all__ = ["load_gemm_extension"]

CSRC = Path(__file__).resolve().parent / "csrc"
_SOURCES = ("gemm/bindings.cpp", "gemm/setup.cu", "gemm/fused_fast.cu", "gemm/fused_pair.cu", "gemm/fused_exact.cu",
            "gemm/copies.cu", "gemm/exact_copies.cu", "gemm/exact_hybrid.cu",
            "gemm/swapped.cu")
#: the dequantize-first path's CUTLASS instantiations (one per epilogue), built when CUTLASS's headers are found
_CUTLASS_SOURCES = ("gemm/cutlass_bf16.cu", "gemm/cutlass_f32.cu", "gemm/cutlass_f32_plus_c.cu")
_CUDA_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--fmad=false",
    "-Xptxas=-warn-spills",
    "-DNDEBUG",  # CUTLASS's device asserts are calls, which serialise its wgmma pipeline (ptxas C7510)
    "--expt-relaxed-constexpr",
]
_lock = threading.Lock()
_ext: ModuleType | None = None


def _build_dir() -> Path:
    d = Path(os.environ.get("NVFP4_BUILD_DIR", Path.home() / ".cache" / "nvfp4_device")) / "gemm"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cutlass_include_dir() -> Path | None:
    """CUTLASS/CuTe headers for the dequantize-first path: ``$NVFP4_CUTLASS_INCLUDE``, else the ``nvidia-cutlass``
    wheel's copy (``cutlass_library/source/include``); None when neither exists (the path is then not built)."""
    env = os.environ.get("NVFP4_CUTLASS_INCLUDE")
    if env:
        return Path(env)
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")  # located, not imported (its generators are heavy)
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(next(iter(spec.submodule_search_locations))).resolve() / "source" / "include"
    return inc if (inc / "cutlass" / "cutlass.h").is_file() else None


def load_gemm_extension(verbose: bool = False) -> ModuleType:
    """Build (first use) or load (cached) the ``nvfp4_gemm`` extension and return it."""
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is None:
            from torch.utils.cpp_extension import load

            os.environ.setdefault("MAX_JOBS", "2")
            inc = cutlass_include_dir()
            sources = _SOURCES + (_CUTLASS_SOURCES if inc else ())
            no_cutlass = [] if inc else ["-DNVFP4_NO_CUTLASS"]
            _ext = load(
                name="nvfp4_gemm" if inc else "nvfp4_gemm_nocutlass",
                sources=[str(CSRC / s) for s in sources],
                extra_cflags=["-O3", *no_cutlass],  # torch's own -std for the bindings, as device/_build.py
                extra_cuda_cflags=[*_CUDA_FLAGS, *no_cutlass],
                extra_include_paths=[str(CSRC)] + ([str(inc)] if inc else []),
                build_directory=str(_build_dir()),
                verbose=verbose or bool(os.environ.get("NVFP4_BUILD_VERBOSE")),
            )
    return _ext
