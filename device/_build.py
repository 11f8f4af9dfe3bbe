"""JIT build of the CUDA extension (``device/csrc``) through ``torch.utils.cpp_extension.load``.

The build directory is ``$NVFP4_BUILD_DIR`` or ``~/.cache/nvfp4_device``; torch hashes the sources, so an
edited kernel triggers a rebuild and an unchanged one loads from the cache. Flags: ``-O3``, sm_90a only,
no fast-math, ``--fmad=false`` (the kernels also use explicit ``__fmul_rn``/``__fadd_rn``/``__fdiv_rn``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import ModuleType

__all__ = ["CSRC", "build_dir", "load_extension"]

CSRC = Path(__file__).resolve().parent / "csrc"
_SOURCES = ("quantize/bindings.cpp", "quantize/grouped_setup.cu", "quantize/quantize_bf16.cu", "quantize/quantize_f16.cu",
            "quantize/quantize_f32.cu")
_CUDA_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--fmad=false",  # no FMA contraction anywhere (SPEC 1.1: all fp32 ops are separately rounded)
    "-Xptxas=-warn-spills",
]
_lock = threading.Lock()
_ext: ModuleType | None = None


def build_dir() -> Path:
    """Directory holding the compiled extension (created on demand)."""
    d = Path(os.environ.get("NVFP4_BUILD_DIR", Path.home() / ".cache" / "nvfp4_device"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_extension(verbose: bool = False) -> ModuleType:
    """Build (first use) or load (cached) the extension module and return it."""
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is None:
            from torch.utils.cpp_extension import load

            os.environ.setdefault("MAX_JOBS", str(max(1, min(len(_SOURCES), os.cpu_count() or 1))))
            _ext = load(
                name="nvfp4_device_ext",
                sources=[str(CSRC / s) for s in _SOURCES],
                # the bindings take torch's own -std (2.11: c++17; 2.13: c++20, which its headers need)
                extra_cflags=["-O3"],
                extra_cuda_cflags=list(_CUDA_FLAGS),
                extra_include_paths=[str(CSRC)],
                build_directory=str(build_dir()),
                verbose=verbose or bool(os.environ.get("NVFP4_BUILD_VERBOSE")),
            )
    return _ext
