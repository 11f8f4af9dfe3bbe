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
rm -f "$out"/*.failed  # (markers of an earlier run into the same folder)
if [ $# -eq 0 ]; then
  mapfile -t files < <(cd "$csrc" && find . -name '*.cu' | sed 's|^\./||' | sort)
else
  files=("$@")
fi
inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
# cuobjdump and the nvdisasm it runs, each the first found: on PATH, in the wheels' bin folders (nvidia/cu13/bin;
# nvidia/cuda_cuobjdump/bin and nvidia/cuda_nvdisasm/bin of the CUDA 12 wheels), in Triton's (backends/nvidia/bin)
tools=$(python3 - <<'PY'
import importlib.util
import os
import shutil
import sys


def find(tool, wheel_bin):
    if shutil.which(tool):
        return shutil.which(tool)
    places = (("nvidia", ("cu13", "bin")), ("nvidia", (wheel_bin, "bin")), ("triton", ("backends", "nvidia", "bin")))
    for name, sub in places:
        spec = importlib.util.find_spec(name)
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.join(root, *sub, tool)
            if os.path.exists(path):
                return path
    sys.exit(f"no {tool}: install the CUDA toolkit, or pip install nvidia-cuda-{tool}")


print(find("cuobjdump", "cuda_cuobjdump"), os.path.dirname(find("nvdisasm", "cuda_nvdisasm")))
PY
)
read -r cuobjdump nvdisasm_dir <<< "$tools"
export PATH="$nvdisasm_dir:$PATH"
jobs=${JOBS:-$(nproc)}
for f in "${files[@]}"; do
  name=$(echo "${f%.cu}" | tr '/' '_')
  ( nvcc -cubin -o "$out/$name.cubin" "$csrc/$f" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --fmad=false \
      -DNDEBUG --expt-relaxed-constexpr -I"$csrc" -I"$inc" 2> "$out/$name.log" \
    && "$cuobjdump" -sass "$out/$name.cubin" > "$out/$name.sass" 2>> "$out/$name.log" \
    || { echo "FAILED: $f (see $out/$name.log)"; touch "$out/$name.failed"; } ) &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait
failed=$(find "$out" -name '*.failed' | wc -l)
echo "SASS of $(( ${#files[@]} - failed )) of ${#files[@]} file(s) in $out"
[ "$failed" -eq 0 ]
