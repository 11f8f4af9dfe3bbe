bash benchmarks/gpu_session.sh build >/dev/null; tail -2 $OUT/build.log
export NVFP4_BUILD_DIR=/tmp/nvfp4b
NEW="$PWD:/tmp/site"; OLD="$PWD/_ab_old:$PWD:/tmp/site"
PYTHONPATH=$NEW python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_device_gemm.py tests/test_device_gemm_torchao.py 2>&1 | tail -1
PYTHONPATH=$OLD NVFP4_BUILD_DIR=/tmp/nvfp4old python3 -c "import device._gemm_build as g; g.load_gemm_extension(); print('old built')" 2>&1 | tail -1
for round in 1 2; do for side in new old; do
  if [ $side = new ]; then P=$NEW; B=/tmp/nvfp4b; else P=$OLD; B=/tmp/nvfp4old; fi
  echo "### $side round $round"
  PYTHONPATH=$P NVFP4_BUILD_DIR=$B python3 benchmarks/ab_env_switch.py --var NVFP4_UNUSED --values 1 --mode exact --exact-kernel auto --cases "E64 wgrad,E64 fprop,E64 dgrad,E8 wgrad" 2>&1 | grep -v "^NVFP4"
  PYTHONPATH=$P NVFP4_BUILD_DIR=$B python3 benchmarks/ab_env_switch.py --var NVFP4_UNUSED --values 1 --mode fast --cases "E64 wgrad,E64 fprop,E8 wgrad" 2>&1 | grep -v "^NVFP4"
done; done
