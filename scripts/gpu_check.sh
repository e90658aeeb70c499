#!/usr/bin/env bash
# The GPU run in one command: build jax_camp, run the GPU tests, the memory and
# race checkers, and the benchmark, then print a short summary.
#
#   scripts/gpu_check.sh [build] [test] [memcheck] [racecheck] [policy] [bench] [tilelang]
#
# With no arguments it does all but tilelang. Logs go to $OUT (the device
# tool's output folder) or /tmp/jax_camp_gpu. On the H200 `build test bench`
# took 565-640 s (2026-11-30), about a device call's 600 s limit: there, run
# `build test` and `bench` as two calls back to back, which find the package
# that the first installed while the machine stays warm.
set -u -o pipefail
out=${OUT:-/tmp/jax_camp_gpu}
mkdir -p "$out"
steps=${*:-build test memcheck racecheck bench}
export PATH=/usr/local/cuda/bin:$PATH
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1
summary=()
op_tests="tests/test_copy.py tests/test_vector_add.py tests/test_reduce_sum.py tests/test_softmax.py tests/test_backends.py"
# -P: keep the source tree off sys.path, so tests import the installed package.
pytest="python3 -P -m pytest -q -p no:cacheprovider"

run_step() {  # name, command...: runs it with its log under $out, records the last line
  local name=$1; shift
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local status=$?
  summary+=("$(printf '%-10s exit %-3s %4ss  %s' "$name" "$status" $((SECONDS - start)) "$(tail -n 1 "$out/$name.log")")")
}

has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# sm_90 only here: the machine is an H200; CI builds every architecture.
has build && run_step build python3 -m pip install --no-build-isolation --no-deps -v \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90-real .
has test && run_step test $pytest $op_tests --backend cuda
# One cudaMalloc per buffer (no BFC pool), so that memcheck sees each
# buffer's bounds rather than one big slab.
has memcheck && XLA_PYTHON_CLIENT_ALLOCATOR=platform run_step memcheck \
  compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  $pytest $op_tests --backend cuda -x
has racecheck && XLA_PYTHON_CLIENT_ALLOCATOR=platform run_step racecheck \
  compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
  $pytest tests/test_softmax.py tests/test_reduce_sum.py --backend cuda -x
has tilelang && run_step tilelang $pytest $op_tests --backend tilelang
if has policy; then
  mkdir -p build
  run_step policy bash -c "nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
    -I$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())') \
    scripts/row_policy_bench.cu -o build/row_policy_bench && build/row_policy_bench"
  cp "$out/policy.log" "$out/row_policy.txt"
fi
if has bench && [ -f benchmarks/run_ops.py ]; then
  run_step bench python3 benchmarks/run_ops.py --op all --backend all --mode all --no-progress \
    --json "$out/h200.json" --plot "$out/h200.png"
  cp "$out/bench.log" "$out/h200.txt"
fi
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$out"/memcheck.log "$out"/racecheck.log 2>/dev/null
printf '%s\n' "${summary[@]}"
