#!/usr/bin/env bash
# A/B of two builds of the device package on one GPU machine: this working tree against device/ of another git
# revision, in alternating processes, timed by benchmarks/ab_env_switch.py (docs/gemm.md, stop 47, used it for the
# shared-memory group table). Two steps, because the GPU machine gets the working tree without .git:
#
#   bash benchmarks/ab_two_builds.sh prepare HEAD~1    # here: device/ of that revision into _ab_old/ (git-ignored)
#   bash benchmarks/ab_two_builds.sh run 2 --mode exact --exact-kernel auto --cases "E64 wgrad,E8 wgrad"
#                                                      # there (the device tool's carry: .whl and _ab_old):
#                                                      # build both, then rounds x (new, old) of ab_env_switch.py
#                                                      # (old first in even rounds)
#   bash benchmarks/ab_two_builds.sh runpy 2 benchmarks/bench_quantize.py --quick --no-compile
#                                                      # there: any script, run per build and round the same way
#                                                      # (only the quantize extension is built for the old side)
#
# ab_env_switch.py runs with an unused variable (one side per process), so each line is one build's TFLOP/s and its
# ratio to torch._grouped_mm measured in the same process; the bits check compares nothing across builds.
set -u
OLD_DIR=_ab_old
case "${1:-}" in
  prepare)
    rev=${2:?"usage: ab_two_builds.sh prepare REV"}
    rm -rf "$OLD_DIR" && mkdir -p "$OLD_DIR" && git archive "$rev" device | tar -x -C "$OLD_DIR" || exit 1
    echo "device/ of $(git rev-parse --short "$rev") in $OLD_DIR/"
    ;;
  run | runpy)
    mode=$1
    rounds=${2:?"usage: ab_two_builds.sh run ROUNDS [ab_env_switch.py arguments] | runpy ROUNDS SCRIPT [arguments]"}
    shift 2
    [ -d "$OLD_DIR/device" ] || { echo "no $OLD_DIR/device: run 'prepare' first and carry $OLD_DIR"; exit 2; }
    bash benchmarks/gpu_session.sh build >/dev/null || { tail -n 20 "${OUT:-/tmp/gpu_session_out}/build.log"; exit 1; }
    new_path="$PWD:/tmp/site" old_path="$PWD/$OLD_DIR:$PWD:/tmp/site"
    if [ "$mode" = runpy ]; then load="import device._build as b; b.load_extension()"
    else load="import device._build as b, device._gemm_build as g; b.load_extension(); g.load_gemm_extension()"; fi
    find /tmp/nvfp4old -name lock -print -delete 2>/dev/null  # a stale lock of a killed build (gpu_session.sh build)
    PYTHONPATH=$old_path NVFP4_BUILD_DIR=/tmp/nvfp4old python3 -c "$load" || exit 1
    for ((r = 1; r <= rounds; r++)); do
      # the order alternates by round (new first in odd rounds), so neither build always runs first
      if ((r % 2)); then order="new old"; else order="old new"; fi
      for side in $order; do
        if [ "$side" = new ]; then p=$new_path b=/tmp/nvfp4b; else p=$old_path b=/tmp/nvfp4old; fi
        echo "### $side, round $r"
        if [ "$mode" = runpy ]; then
          PYTHONPATH=$p NVFP4_BUILD_DIR=$b PYTHONWARNINGS=ignore python3 "$@"
        else
          PYTHONPATH=$p NVFP4_BUILD_DIR=$b PYTHONWARNINGS=ignore python3 benchmarks/ab_env_switch.py \
            --var NVFP4_AB_UNUSED --values 1 "$@" | grep -v '^NVFP4_AB_UNUSED'
        fi
      done
    done
    ;;
  *) echo "usage: ab_two_builds.sh prepare REV | run ROUNDS [ab_env_switch.py arguments] | runpy ROUNDS SCRIPT [arguments]"
     exit 2 ;;
esac
