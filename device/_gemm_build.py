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
_SOURCES = ("gemm_bindings.cpp", "gemm_kernels.cu", "gemm_wgmma_fast.cu", "gemm_wgmma_pair.cu", "gemm_wgmma_exact.cu")
_CUDA_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--fmad=false",
    "-Xptxas=-warn-spills",
]
_lock = threading.Lock()
_ext: ModuleType | None = None


def _build_dir() -> Path:
    d = Path(os.environ.get("NVFP4_BUILD_DIR", Path.home() / ".cache" / "nvfp4_device")) / "gemm"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_gemm_extension(verbose: bool = False) -> ModuleType:
    """Build (first use) or load (cached) the ``nvfp4_gemm`` extension and return it."""
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is None:
            from torch.utils.cpp_extension import load

            os.environ.setdefault("MAX_JOBS", "2")
            _ext = load(
                name="nvfp4_gemm",
                sources=[str(CSRC / s) for s in _SOURCES],
                extra_cflags=["-O3", "-std=c++17"],
                extra_cuda_cflags=list(_CUDA_FLAGS),
                extra_include_paths=[str(CSRC)],
                build_directory=str(_build_dir()),
                verbose=verbose or bool(os.environ.get("NVFP4_BUILD_VERBOSE")),
            )
    return _ext
