#!/usr/bin/env bash
# GPU checks and benchmarks in one command, run from the repository root on a machine with an H100 / H200.
#
#   bash tools/gpu_session.sh build gemm-tests sanitize ab-kernel       # stages run in the order given
#   STAGE_TIMEOUT_gemm_tests=240 bash tools/gpu_session.sh build gemm-tests
#
# Stages (each under `timeout -s KILL`; the log goes to $OUT/<stage>.log, its tail to stdout):
#   build          install the wheels of .whl/ (nvidia-cutlass) into /tmp/site, JIT-build both extensions
#                  (device._build.load_extensions)
#   smoke          one tiny quantize against the oracle, one tiny grouped GEMM (its shape and finiteness printed)
#   gemm-tests     tests/test_device_gemm.py, test_device_gemm_torchao.py (8 workers)
#   quant-tests    tests/test_device_quantize.py, test_device_four_over_six.py, test_device_torchao.py,
#                  test_device_placement.py, test_device_results.py, test_device_args_host.py,
#                  test_device_kernel_choice.py (8 workers)
#   layer-tests    tests/test_device_grouped_linear.py, test_device_grouped_linear_host.py (8 workers)
#   cuda-tests     every test marked `cuda` (pytest -m cuda tests, 14 workers; test_device_large.py's skip without
#                  NVFP4_LARGE): the GPU tests of every file, those of no stage above included
#   large-tests    tests/test_device_large.py with NVFP4_LARGE=1 (buffers past 32-bit offsets, ~40 GB of GPU memory)
#   sanitize       compute-sanitizer $SANITIZE_TOOLS (memcheck racecheck) on $SANITIZE_K (pytest -k of
#                  $SANITIZE_FILE, default tests/test_device_gemm.py)
#   racecheck-repro  tools/sanitizer/warp_release_repro.cu under racecheck, modes 0 1 2 (whether racecheck sees a
#                  per-warp stage release: __syncwarp, then lane 0 arrives)
#   timeline       tools/profile/gemm_timeline.py: host enqueue time, kernels and gaps per call (fast plans chosen by
#                  the sizes; exact mode on E64 and E8 T512)
#   ab-kernel      tools/ab/ab_plans.py gemm: the plans $AB_PLANS on the cases $AB_CASES (E,T,K,N,kind[,out];...)
#   ab-quant       tools/ab/ab_plans.py quantize: the plans $AB_QUANT_PLANS (bytes compared, then timed)
#   conformance    python -m conformance run on the GPU, ops $CONF_OPS (default: the grouped-GEMM ops; "all" for
#                  every op), $CONF_BUDGET, seed $CONF_SEED
#   binding-errors tools/sanitizer/check_binding_errors.py (every binding refusal is a Python error, not a crash)
#   ncu            Nsight Compute on one launch of kernel $NCU_KERNEL (a regex) per case of $NCU_CASES (";"-separated
#                  argument lists of $NCU_SCRIPT, default tools/profile/gemm_one_case.py;
#                  tools/profile/quant_one_case.py for the quantizer). Three files come back, whatever the number of
#                  cases (the device tool returns at most 8): the details pages (speed of light, warp states,
#                  scheduler, instruction mix) in $OUT/ncu_details.txt, the summaries of the per-SASS-line stall
#                  samples (tools/profile/ncu_sass_summary.py) in $OUT/ncu_summary.txt, each case under a "--- ncu
#                  <i>: <case>" line, and the reports with their per-SASS-line CSVs in $OUT/ncu_raw.tar.gz (made in
#                  $NCU_WORK, default /tmp/gpu_session_ncu)
#   bench-gemm     benchmarks/bench_grouped_gemm.py $BENCH_GEMM_ARGS, default --iters 10 --reps 3 (three rounds: the
#                  median survives one disturbed round, which happens in about one timing in 20) and the burst
#                  columns only (about a minute; the sustained columns add a second of the same call per column,
#                  row and round: about 7 minutes in all)
#   bench-quant    benchmarks/bench_quantize.py --quick --no-compile
# The exit status is the first failing stage's (0 when all passed); later stages still run, except after a failed
# build. tools/ab/two_trees.py compares the benchmarks of two source trees (it builds both itself).
set -u
OUT=${OUT:-/tmp/gpu_session_out}
mkdir -p "$OUT"
export PYTHONPATH=.:/tmp/site NVFP4_BUILD_DIR=${NVFP4_BUILD_DIR:-/tmp/nvfp4b} PYTHONUNBUFFERED=1 \
  PYTHONWARNINGS=ignore MAX_JOBS=${MAX_JOBS:-16}
SAN=/usr/local/cuda/bin/compute-sanitizer
SANITIZE_K=${SANITIZE_K:-"exact_fused_edges or off_a_whole"}
SANITIZE_FILE=${SANITIZE_FILE:-tests/test_device_gemm.py}
SANITIZE_TOOLS=${SANITIZE_TOOLS:-"memcheck racecheck"}
AB_PLANS=${AB_PLANS:-"auto; algorithm=fused_128x256; algorithm=copies_cutlass"}
AB_CASES=${AB_CASES:-"64,16384,2048,1408,wgrad,f32;64,16384,2048,1408,wgrad,bf16"}
AB_QUANT_PLANS=${AB_QUANT_PLANS:-"quantize=general; quantize=fast_bf16"}
BENCH_GEMM_ARGS=${BENCH_GEMM_ARGS:-"--iters 10 --reps 3 --columns fast,fused,exact,x_fused,x_dq,x_hyb,grouped_mm"}
CONF_BUDGET=${CONF_BUDGET:-45s}
CONF_OPS=${CONF_OPS:-grouped_gemm,grouped_gemm_tc,grouped_gemm_exact,grouped_gemm_sm100}
CONF_SEED=${CONF_SEED:-$(date +%s)}
NCU_KERNEL=${NCU_KERNEL:-"exact_copies_kernel"}
NCU_CASES=${NCU_CASES:-"--algorithm exact_hybrid --e 64 --t 16384 --k 2048 --n 1408"}
NCU_SCRIPT=${NCU_SCRIPT:-tools/profile/gemm_one_case.py}
PYTEST="python3 -m pytest -q -p no:cacheprovider"
status=0

default_timeout() {
  case "$1" in
    build) echo 300 ;; ncu) echo 300 ;; smoke) echo 120 ;; large-tests) echo 420 ;; racecheck-repro) echo 90 ;;
    gemm-tests) echo 240 ;; quant-tests) echo 240 ;; layer-tests) echo 240 ;; cuda-tests) echo 420 ;;
    sanitize) echo 300 ;; ab-kernel) echo 240 ;; ab-quant) echo 240 ;;
    timeline) echo 240 ;; conformance) echo 120 ;; binding-errors) echo 120 ;; bench-gemm) echo 240 ;;
    bench-quant) echo 240 ;; *) echo 60 ;;
  esac
}

stage_body() {
  case "$1" in
    build)
      # A build killed by a timeout leaves torch's `lock` file in its directory, and every later load waits on it
      # for ever. No other build runs when this stage starts, so any lock found here is stale.
      find "$NVFP4_BUILD_DIR" -name lock -print -delete 2>/dev/null
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || return 1
      python3 -c "import device._build as b; b.load_extensions()"
      ;;
    smoke)
      python3 - <<'EOF'
import numpy as np, torch, oracle, device
x = torch.randn(40, 64, device="cuda", dtype=torch.bfloat16)
q = device.quantize(x, columnwise=True, rht=True).to_oracle()
xb = x.cpu().view(torch.int16).numpy().view(np.uint16)
import ml_dtypes
want = oracle.quantize(xb.view(ml_dtypes.bfloat16), columnwise=True, rht=True)
assert np.array_equal(q.row.data, want.row.data) and np.array_equal(q.col.scales, want.col.scales)
s = torch.tensor([16, 0, 24], device="cuda")
a = device.group_quantize(x, s)
w = device.group_quantize(torch.randn(3 * 32, 64, device="cuda", dtype=torch.bfloat16),
                          torch.full((3,), 32, device="cuda"), block=(16, 16))
y = device.grouped_gemm(a, w, kind="fprop", mode="exact")
print("smoke ok", tuple(y.shape), torch.isfinite(y.float()).all().item())
EOF
      ;;
    gemm-tests) $PYTEST -n 8 tests/test_device_gemm.py tests/test_device_gemm_torchao.py ;;
    quant-tests) $PYTEST -n 8 tests/test_device_quantize.py tests/test_device_four_over_six.py \
      tests/test_device_torchao.py tests/test_device_placement.py tests/test_device_results.py \
      tests/test_device_args_host.py tests/test_device_kernel_choice.py ;;
    layer-tests) $PYTEST -n 8 tests/test_device_grouped_linear.py tests/test_device_grouped_linear_host.py ;;
    cuda-tests) $PYTEST -n 14 -m cuda tests ;;
    large-tests) NVFP4_LARGE=1 $PYTEST -rs --durations=0 tests/test_device_large.py ;;
    sanitize)
      local tool rc=0
      for tool in $SANITIZE_TOOLS; do
        echo "--- $tool"
        $SAN --tool "$tool" --error-exitcode 9 $PYTEST "$SANITIZE_FILE" -k "$SANITIZE_K" || rc=$?
      done
      return $rc
      ;;
    racecheck-repro)
      nvcc -gencode=arch=compute_90a,code=sm_90a -I device/csrc -o /tmp/warp_release_repro \
        tools/sanitizer/warp_release_repro.cu || return 1
      local mode rc=0
      for mode in 0 1 2; do
        echo "--- mode $mode"
        $SAN --tool racecheck --error-exitcode 9 /tmp/warp_release_repro "$mode" 2>&1 | grep -v '^=========     and' \
          | tail -n 8
        [ "${PIPESTATUS[0]}" -ne 0 ] && rc=9
      done
      return $rc
      ;;
    timeline)
      python3 tools/profile/gemm_timeline.py || return $?
      python3 tools/profile/gemm_timeline.py --plan "mode=exact" \
        --cases "64,16384,2048,1408,fprop;64,16384,2048,1408,dgrad;64,16384,2048,1408,wgrad;8,512,4096,14336,fprop"
      ;;
    ab-kernel) python3 tools/ab/ab_plans.py gemm --plans "$AB_PLANS" --cases "$AB_CASES" ;;
    ab-quant) python3 tools/ab/ab_plans.py quantize --plans "$AB_QUANT_PLANS" ;;
    conformance)
      local ops=()
      [ "$CONF_OPS" != all ] && ops=(--ops "$CONF_OPS")
      python3 -m conformance run --device cuda:0 "${ops[@]}" \
        --budget "$CONF_BUDGET" --seed "$CONF_SEED" --no-progress --report "$OUT/conformance.json" \
        --artifacts "$OUT/conformance_failures"
      ;;
    binding-errors) python3 tools/sanitizer/check_binding_errors.py ;;
    ncu)
      local NCU=ncu i=0 case rc=0
      command -v ncu >/dev/null || NCU=$(ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
      local work=${NCU_WORK:-/tmp/gpu_session_ncu}
      rm -rf "$work" && mkdir -p "$work"
      : >"$OUT/ncu_details.txt"
      : >"$OUT/ncu_summary.txt"
      IFS=';' read -ra cases <<<"$NCU_CASES"
      for case in "${cases[@]}"; do
        echo "--- ncu $i: $case" | tee -a "$OUT/ncu_details.txt" "$OUT/ncu_summary.txt"
        # shellcheck disable=SC2086
        "$NCU" --clock-control none -k "regex:$NCU_KERNEL" --launch-skip 1 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
          --section ComputeWorkloadAnalysis \
          --section InstructionStats --section LaunchStats --section Occupancy --section SourceCounters \
          --import-source no -f -o "$work/ncu_$i" python3 "$NCU_SCRIPT" $case || rc=$?
        "$NCU" -i "$work/ncu_$i.ncu-rep" --page details >"$work/ncu_${i}_details.txt" || rc=$?
        "$NCU" -i "$work/ncu_$i.ncu-rep" --page source --csv --print-source sass >"$work/ncu_${i}_sass.csv" || rc=$?
        python3 tools/profile/ncu_sass_summary.py "$work/ncu_${i}_sass.csv" --top 12 >>"$OUT/ncu_summary.txt" || rc=$?
        cat "$work/ncu_${i}_details.txt" >>"$OUT/ncu_details.txt"
        grep -E "Duration|Issue Slots Busy|Tensor|No Eligible|Warp Cycles Per Issued|Registers" "$work/ncu_${i}_details.txt" | head -n 20
        i=$((i + 1))
      done
      tar -czf "$OUT/ncu_raw.tar.gz" -C "$work" . || rc=$?
      return $rc
      ;;
    bench-gemm) python3 benchmarks/bench_grouped_gemm.py $BENCH_GEMM_ARGS ;;
    bench-quant) python3 benchmarks/bench_quantize.py --quick --no-compile ;;
    *) echo "unknown stage $1"; return 2 ;;
  esac
}

for stage in "$@"; do
  var="STAGE_TIMEOUT_${stage//-/_}"
  limit=${!var:-$(default_timeout "$stage")}
  start=$(date +%s)
  # (the stage in a child shell, so that timeout can kill it and everything it started)
  timeout -s KILL "$limit" bash -c "$(declare -f stage_body); $(declare -p PYTEST SAN SANITIZE_K SANITIZE_FILE \
    SANITIZE_TOOLS AB_PLANS AB_CASES AB_QUANT_PLANS BENCH_GEMM_ARGS CONF_BUDGET CONF_SEED CONF_OPS NCU_KERNEL \
    NCU_CASES NCU_SCRIPT OUT); stage_body $stage" >"$OUT/$stage.log" 2>&1
  rc=$?
  echo "=== $stage: rc $rc, $(( $(date +%s) - start )) s (limit $limit s)"
  grep -v '^\[[0-9]*/[0-9]*\]' "$OUT/$stage.log" | tail -n "${TAIL_LINES:-15}"
  [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
  [ "$stage" = build ] && [ "$rc" -ne 0 ] && { echo "build failed: stopping"; exit "$rc"; }
done
exit "$status"
