#!/usr/bin/env bash
# Compile device/csrc's .cu files of one source tree to cubins with the extensions' flags and dump their SASS, so that
# two trees' kernels can be compared function by function (compare_sass.py). No GPU needed: nvcc, and cuobjdump from
# the CUDA toolkit or from Triton's package (python -c "import triton, os; print(os.path.dirname(triton.__file__))",
# backends/nvidia/bin/cuobjdump). CUTLASS's headers come from the nvidia-cutlass wheel.
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
cuobjdump=$(command -v cuobjdump || python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends', 'nvidia', 'bin', 'cuobjdump'))")
jobs=${JOBS:-$(nproc)}
for f in "${files[@]}"; do
  name=$(echo "${f%.cu}" | tr '/' '_')
  ( nvcc -cubin -o "$out/$name.cubin" "$csrc/$f" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --fmad=false \
      -DNDEBUG --expt-relaxed-constexpr -I"$csrc" -I"$inc" 2> "$out/$name.log" \
    && "$cuobjdump" -sass "$out/$name.cubin" > "$out/$name.sass" || echo "FAILED: $f (see $out/$name.log)" ) &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait
echo "SASS of ${#files[@]} file(s) in $out"
