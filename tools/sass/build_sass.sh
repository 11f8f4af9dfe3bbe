#!/usr/bin/env bash
# Compile device/csrc's .cu files of one source tree to cubins with the extensions' flags and dump their SASS, so that
# two trees' kernels can be compared function by function (compare_sass.py). No GPU needed: nvcc, and cuobjdump from
# the CUDA toolkit, from the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (`pip install nvidia-cuda-cuobjdump
# nvidia-cuda-nvdisasm`: nvidia/cu13/bin of site-packages; cuobjdump runs nvdisasm, which must be on PATH) or from
# Triton's package (backends/nvidia/bin of the triton package). CUTLASS's headers come from the nvidia-cutlass wheel.
#
#   bash tools/sass/build_sass.sh device/csrc /tmp/sass_new          # every .cu of the tree
#   bash tools/sass/build_sass.sh /tmp/old/device/csrc /tmp/sass_old gemm/fused_fast.cu
#   python tools/sass/compare_sass.py /tmp/sass_old /tmp/sass_new
set -euo pipefail
csrc=$(cd "$1" && pwd); out=$2; shift 2
mkdir -p "$out"
if [ $# -eq 0 ]; then
  mapfile -t files < <(cd "$csrc" && find . -name '*.cu' | sed 's|^\./||' | sort)
else
  files=("$@")
fi
inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
# the first cuobjdump found: on PATH, in the wheels' bin folder (nvidia/cu13/bin, or nvidia/cuda_cuobjdump/bin of the
# CUDA 12 wheels), in Triton's; its folder goes first on PATH, so that cuobjdump runs the nvdisasm beside it
cuobjdump=$(command -v cuobjdump || python3 - <<'PY'
import importlib.util
import os
import sys

places = (("nvidia", ("cu13", "bin")), ("nvidia", ("cuda_cuobjdump", "bin")), ("triton", ("backends", "nvidia", "bin")))
for name, sub in places:
    spec = importlib.util.find_spec(name)
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, *sub, "cuobjdump")
        if os.path.exists(path):
            print(path)
            sys.exit(0)
sys.exit("no cuobjdump: install the CUDA toolkit, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
PY
)
export PATH="$(dirname "$cuobjdump"):$PATH"
for d in "$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia'); print(*(s.submodule_search_locations if s else []))")"; do
  for sub in cu13/bin cuda_nvdisasm/bin; do [ -x "$d/$sub/nvdisasm" ] && export PATH="$PATH:$d/$sub"; done
done
command -v nvdisasm > /dev/null || { echo "no nvdisasm (cuobjdump runs it): pip install nvidia-cuda-nvdisasm" >&2; exit 1; }
jobs=${JOBS:-$(nproc)}
for f in "${files[@]}"; do
  name=$(echo "${f%.cu}" | tr '/' '_')
  ( nvcc -cubin -o "$out/$name.cubin" "$csrc/$f" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --fmad=false       -DNDEBUG --expt-relaxed-constexpr -I"$csrc" -I"$inc" 2> "$out/$name.log"     && "$cuobjdump" -sass "$out/$name.cubin" > "$out/$name.sass" 2>> "$out/$name.log"     || { echo "FAILED: $f (see $out/$name.log)"; touch "$out/$name.failed"; } ) &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait
failed=$(find "$out" -name '*.failed' | wc -l)
echo "SASS of $(( ${#files[@]} - failed )) of ${#files[@]} file(s) in $out"
[ "$failed" -eq 0 ]
