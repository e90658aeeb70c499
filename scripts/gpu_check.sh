#!/usr/bin/env bash
# The GPU check in one command, on the package exactly as users get it: the
# build `pip install .` makes (no architecture override), README's test
# command `pytest tests` whole with --backend cuda and --backend tilelang,
# then compute-sanitizer's four tools over the GPU tests of both backends,
# and the benchmark. A short summary comes last; the exit status is 1 if a
# step failed.
#
#   scripts/gpu_check.sh [build] [cuda] [tilelang] [memcheck] [racecheck]
#                        [synccheck] [initcheck] [sanitize] [bench]
#
# With no arguments it runs build cuda tilelang sanitize; sanitize is the four
# tools. A later call's steps find the package the first installed while the
# machine stays up, and build it again if it did not. Each step is meant to
# fit one 10-minute device call: build and cuda together (with GPU_CHECK_SHARDS
# below); tilelang, whose compile test takes minutes on a cold disk cache, in
# the next; memcheck, synccheck and initcheck together (one backend a call on an
# 80 GB card, which runs fewer processes at once); racecheck, the slowest, wants a
# call a backend (GPU_CHECK_SANITIZE_BACKENDS below).
# GPU_CHECK_BENCH_OPS (default "all") names the ops the bench step times, comma-separated,
# so that a matrix longer than one call can take one call a part. GPU_CHECK_BENCH_SECONDS
# bounds the bench (default: what is left of 540 s since the script started).
# GPU_CHECK_TESTS (default "tests") names what the cuda and tilelang steps give pytest, and the
# files whose GPU tests the sanitizers run, so that a suite or a tool longer than one call can
# take one call a part (test files, space-separated).
# GPU_CHECK_SHARDS (default 1) runs each of the cuda and tilelang suites as that many pytest
# processes at once, the GPU tests dealt out in turn, so that a whole suite fits one call: a
# process keeps the GPU far from busy. Each host-only file (below) keeps a process of its own:
# the compilers its tests wait on (nvcc, TileLang) start in every process that runs one of them.
# GPU_CHECK_SUITE_SECONDS, if set, stops the suites that many seconds after the script started;
# a shard stopped so reports exit 124, and one whose turn comes later does not start and says so.
# GPU_CHECK_SANITIZE_SECONDS bounds the sanitizer steps together: shards not
# done by then are reported unfinished. GPU_CHECK_SANITIZE_BACKENDS (default
# "cuda tilelang") names the backends whose tests they run, so that a tool too
# slow for one call can take one call a backend.
# Logs go to $OUT (the device tool's output folder) or /tmp/jax_camp_gpu.
# TileLang comes from .device/ (see ../shared/device/README.md): start with
# `source .device/setup.sh && scripts/gpu_check.sh ...`.
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/jax_camp_gpu}
mkdir -p "$out"
steps=${*:-build cuda tilelang sanitize}
tests=${GPU_CHECK_TESTS:-tests}
export PATH=/usr/local/cuda/bin:$PATH
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1
# README's `pytest tests`: the console script keeps the source tree off
# sys.path, as `python3 -P -m pytest` does with the python3 that holds jax.
# --require-backend: a backend that cannot run fails its tests rather than
# skipping them, so that a missing GPU or TileLang never reads as a pass.
pytest="python3 -P -m pytest -q -p no:cacheprovider --require-backend"
# The test files that launch no kernel of ours (compiler output, host plans,
# CMake's configuration, the harness's CPU checks, install checks) stay out of
# the sanitizers' runs.
host_only="test_cuda_codegen.py test_launch_policy.py test_cuda_build.py test_tilelang_compile.py test_tilelang_tiles.py
  test_benchmark*.py test_install.py test_sharding.py"

run_step() {  # name, command...: runs it with its log under $out; its summary line goes beside
  local name=$1; shift
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local status=$?
  printf '%-16s exit %-3s %4ss  %s\n' "$name" "$status" $((SECONDS - start)) \
    "$(tail -n 1 "$out/$name.log")" >"$out/$name.summary"
}

has() { [[ " $steps " == *" $1 "* ]]; }

installed() {  # whether python3 imports a jax_camp built from this tree, outside the tree
  (cd /tmp && python3 -c "import jax_camp, sys; sys.exit(not jax_camp.registration.BUILT_WITH_CUDA)") 2>/dev/null
}

build() {
  python3 -m pip install --no-build-isolation --no-deps -v . &&
    (cd /tmp && python3 -c "from jax_camp import _kernels as k; print('built for', k.cuda_architectures, '(' + k.cuda_architectures_chosen_by + ')')")
}

is_host_only() {  # file name
  local - pattern
  set -f  # host_only's patterns match file names here, not files in the working directory
  for pattern in $host_only; do [[ $1 == $pattern ]] && return 0; done
  return 1
}

pytest_count() {  # word logs...: the sum of pytest's "N <word>" over the logs (passed, skipped, ...)
  local word=$1; shift
  grep -ho "[0-9]* $word" "$@" | awk '{n += $1} END {print n + 0}'
}

exit_counts() {  # logs...: how many shards ended with each exit status, on one line
  grep -h "^exit " "$@" | sort | uniq -c | tr '\n' ' '
}

gpu_test_files() {  # the files of $tests (a folder stands for its test files) that launch kernels of ours
  local entry file
  for entry in $tests; do
    [ -d "$entry" ] && entry="$entry/test_*.py"
    for file in $entry; do is_host_only "$(basename "$file")" || echo "$file"; done
  done
}

# Each tool runs the GPU tests of both backends in shards of at most
# $shard_tests tests, one process a shard, as many at once as there are cores
# and the GPU's memory holds at 9 GiB a process (sanitizer_processes below):
# each tool slows the kernels it watches many times over, and a shard that
# crashes takes only its own tests with it. Two exceptions, each shown to lie
# outside the project (docs/sanitizers.md):
# - synccheck leaves out the kernels of rows held in thread-block clusters: in
#   clusters of more than 8 blocks it faults on any kernel that initializes an
#   mbarrier (scripts/synccheck_cluster_probe.cu), which memcheck, racecheck
#   and plain runs of the same kernels do not;
# - initcheck leaves out one zero-size reduce_sum test, which runs no kernel
#   of ours: XLA's scalar results there read as uninitialized with plain JAX
#   too (--backend xla). It also runs with XLA's autotuner off, whose
#   comparisons of candidate kernels read padding it never writes, by design;
#   racecheck too, under which that search for XLA's own fusions is most of
#   the time of a test.
# racecheck, the slowest by far, gets small shards, so that its slow tests
# spread over all the processes rather than queueing in a few.
# The tests that start a Python process of their own stay out of every tool's runs: the tools
# follow only the process they started, and there such a test's child stalled until the
# deadline (test_backends.py's, 2026-12-02). The kernels they run, other tests run.
sanitize_deselect="--deselect tests/test_backends.py::test_require_backend_fails_where_a_backend_would_skip
  --deselect tests/test_export.py::test_round_trip_in_a_fresh_process"
declare -A tool_shard_tests=([memcheck]=40 [synccheck]=40 [initcheck]=40 [racecheck]=8)
declare -A tool_flags=(
  [memcheck]=""
  [racecheck]=""
  [synccheck]="--kernel-name-exclude regex=RowLayoutE1E"
  [initcheck]=""
)
declare -A tool_pytest_flags=(
  [initcheck]="--deselect tests/test_reduce_sum.py::test_zero_size_matches_jnp[shape2-None]"
)
declare -A tool_xla_flags=([initcheck]="--xla_gpu_autotune_level=0" [racecheck]="--xla_gpu_autotune_level=0")

shard_tests_of() {  # backend size: writes $out/sanitizer/shards-<size>/<backend>-<file>-<n>, one test id a line
  local backend=$1 size=$2 dir=$out/sanitizer/shards-$2
  mkdir -p "$dir"
  # shellcheck disable=SC2046
  python3 -P -m pytest -p no:cacheprovider --collect-only -q $(gpu_test_files) --backend "$backend" 2>/dev/null | grep '::' |
    awk -v dir="$dir" -v backend="$backend" -v size="$size" -F'::' '{
      file = $1; sub(/.*\//, "", file); sub(/\.py$/, "", file)
      if (file != last) { n = 0; count = 0; last = file }
      if (count++ % size == 0) n++
      print > (dir "/" backend "-" file "-" n)
    }'
}

sanitize_backends=${GPU_CHECK_SANITIZE_BACKENDS:-cuda tilelang}

# One a core made the longest rows' shards, which start together, run out of an 80 GB card's
# memory, and a test out of memory fails as if its kernel had (docs/sanitizers.md).
sanitizer_processes() {
  local mib processes
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
  processes=$(( mib / (9 * 1024) ))
  (( processes > $(nproc) )) && processes=$(nproc)
  echo $(( processes > 0 ? processes : 1 ))
}

sanitize() {  # tools...
  rm -rf "$out/sanitizer"
  mkdir -p "$out/sanitizer"
  for tool in "$@"; do
    local size=${tool_shard_tests[$tool]}
    [ -d "$out/sanitizer/shards-$size" ] ||
      for backend in $sanitize_backends; do shard_tests_of $backend "$size"; done
  done
  # Shards past the deadline (GPU_CHECK_SANITIZE_SECONDS from the step's start,
  # if set) are not started, or are stopped: their logs say "exit skipped" or 124.
  # softmax's shards start first: they hold the longest rows.
  local deadline=$(( $(date +%s) + ${GPU_CHECK_SANITIZE_SECONDS:-86400} )) processes
  processes=$(sanitizer_processes)
  for tool in "$@"; do
    local dir=$out/sanitizer/shards-${tool_shard_tests[$tool]}
    for shard in $(ls "$dir" | grep softmax; ls "$dir" | grep -v softmax); do
      printf "%s %s '%s' '%s' '%s' %s\n" "$tool" "$shard" "${tool_flags[$tool]}" \
        "${tool_xla_flags[$tool]:-}" "${tool_pytest_flags[$tool]:-}" "$dir"
    done
  done | xargs -P "$processes" -L 1 bash -c '
    tool=$0 shard=$1 backend=${1%%-*} log='"$out"'/sanitizer/$0-$1.log
    left=$(( '"$deadline"' - $(date +%s) ))
    if [ $left -le 0 ]; then echo "exit skipped" >$log; exit 0; fi
    # An XLA_FLAGS of blanks alone stops jax at import, silently.
    xla_flags=$(echo ${XLA_FLAGS:-} $3)
    if [ -n "$xla_flags" ]; then export XLA_FLAGS=$xla_flags; fi
    mapfile -t tests <"$5/$shard"  # one id a line; an id may hold blanks
    XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout $left \
      compute-sanitizer --tool $tool --target-processes application-only \
      --error-exitcode 9 --print-limit 20 $2 \
      '"$pytest"' --durations=3 '"$(echo $sanitize_deselect)"' $4 --backend $backend \
      "${tests[@]}" >$log 2>&1
    status=$?
    printf "\nexit %s\n" $status >>$log'
  local failed=0
  for tool in "$@"; do
    for backend in $sanitize_backends; do
      local logs=("$out"/sanitizer/$tool-$backend-*.log)
      local errors passed skipped exits unfinished
      errors=$(grep -ho "ERROR SUMMARY: [0-9]* error\|RACECHECK SUMMARY: [0-9]* hazard" "${logs[@]}" |
               awk '{n += $3} END {print n + 0}')
      passed=$(pytest_count passed "${logs[@]}")
      skipped=$(pytest_count skipped "${logs[@]}")
      exits=$(exit_counts "${logs[@]}")
      # A shard stopped at the deadline may leave no exit line.
      unfinished=$(grep -L "^exit " "${logs[@]}" | wc -l)
      echo "$tool --backend $backend: $passed passed, $skipped skipped, $errors errors;" \
        "${#logs[@]} shards, $processes at once, $exits$unfinished unfinished"
      { grep -q "^exit [^0]" "${logs[@]}" || [ "$unfinished" -gt 0 ]; } && failed=1
    done
  done
  # The logs as one file, since the device tool brings back few files.
  tar czf "$out/sanitizer.tgz" -C "$out" sanitizer && rm -rf "$out/sanitizer"
  return $failed
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
rm -f "$out"/*.summary
if has build || ! installed; then run_step build build; fi
# A process compiles a TileLang kernel on its first call, one at a time; the compile test
# compiles every configuration at once on all cores, into TileLang's disk cache, where the
# steps after it find them. Each step that runs TileLang kernels runs it first, once a call.
compile_tilelang() {
  [ -f "$out/tilelang-compile.summary" ] || run_step tilelang-compile $pytest tests/test_tilelang_compile.py
}
# The TileLang suite leaves out the compile test where this call's tilelang-compile step, run
# just before it, passed: the step's summary line stands for that file of README's suite.
compiled_tilelang() {  # backend
  [ "$1" = tilelang ] && grep -qs "^tilelang-compile  *exit 0 " "$out/tilelang-compile.summary"
}
shards=${GPU_CHECK_SHARDS:-1}
suite_deadline=$(( $(date +%s) - SECONDS + ${GPU_CHECK_SUITE_SECONDS:-86400} ))
until_suite_deadline() {  # command...: runs it under timeout until the deadline; past it, starts nothing
  local left=$(( suite_deadline - $(date +%s) ))
  if [ "$left" -le 0 ]; then echo "not started: GPU_CHECK_SUITE_SECONDS had passed"; return 124; fi
  timeout "$left" "$@"
}
export suite_deadline
export -f until_suite_deadline
suite() {  # backend: README's pytest over $tests, in $shards processes at once; a summary line last
  local backend=$1 dir=$out/shards-$1
  local skip=()
  if compiled_tilelang "$backend"; then skip=(--deselect=tests/test_tilelang_compile.py); fi
  if [ "$shards" -le 1 ]; then
    # shellcheck disable=SC2086
    until_suite_deadline $pytest $tests "${skip[@]}" --backend "$backend"; return
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  # shellcheck disable=SC2086
  python3 -P -m pytest -p no:cacheprovider --collect-only -q $tests --backend "$backend" | grep '::' |
    while IFS= read -r id; do
      local file=${id%%::*}
      file=${file##*/}
      if [ "$file" = test_tilelang_compile.py ] && [ ${#skip[@]} -gt 0 ]; then continue; fi
      if is_host_only "$file"; then echo "$id" >>"$dir/${file%.py}"; else echo "$id"; fi
    done | awk -v dir="$dir" -v n="$shards" '{ print > (dir "/" (NR % n)) }'
  ls "$dir" | xargs -P "$shards" -I{} bash -c '
    mapfile -t ids <"$0/$1"  # one id a line; an id may hold blanks
    until_suite_deadline '"$pytest"' --backend '"$backend"' "${ids[@]}" >"$0/$1.log" 2>&1
    printf "\nexit %s\n" $? >>"$0/$1.log"' "$dir" {}
  local logs=("$dir"/*.log) name
  grep -h '^FAILED\|^ERROR' "${logs[@]}" | head -n 40
  for name in passed failed skipped error; do
    printf '%s %s, ' "$(pytest_count "$name" "${logs[@]}")" "$name"
  done
  local compiled=${skip:+" (test_tilelang_compile.py: the tilelang-compile step)"}
  echo "in ${#logs[@]} processes: $(exit_counts "${logs[@]}")$compiled"
  ! grep -q '^exit [^0]' "${logs[@]}"
}
# The two suites run at once: each keeps the GPU far from busy.
has cuda && run_step pytest-cuda suite cuda &
has tilelang && { compile_tilelang; run_step pytest-tilelang suite tilelang; } &
wait
tools=
for tool in memcheck synccheck initcheck racecheck; do
  if has sanitize || has $tool; then tools+=" $tool"; fi
done
if [ -n "$tools" ]; then
  [[ " $sanitize_backends " == *" tilelang "* ]] && compile_tilelang
  run_step sanitize sanitize $tools
  grep -- '--backend' "$out/sanitize.log" | sed 's/^/    /' >>"$out/sanitize.summary"
fi
if has bench; then
  compile_tilelang
  # Stops starting cases in time to write what it has before a 10-minute device call ends,
  # counting what this call ran before it. Where the whole matrix takes longer, run it in
  # parts, one call each (GPU_CHECK_BENCH_OPS above), and read the parts as one:
  # run_ops.py --from-json part1.json,part2.json --json --markdown --plot.
  # The results are named for the GPU that ran them (h200.*, h100.*), as benchmarks/results/ keeps them.
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -oiE '[a-z][0-9]{2,3}' | head -n 1)
  card=$(echo "${card:-gpu}" | tr '[:upper:]' '[:lower:]')
  run_step bench python3 benchmarks/run_ops.py --op "${GPU_CHECK_BENCH_OPS:-all}" --backend all \
    --mode all --no-progress --time-limit "${GPU_CHECK_BENCH_SECONDS:-$((540 - SECONDS))}" \
    --json "$out/$card.json" --plot "$out/$card.png" --markdown "$out/$card.md"
  cp "$out/bench.log" "$out/$card.txt"
fi
failed=0
for name in build pytest-cuda tilelang-compile pytest-tilelang sanitize bench; do
  if [ -f "$out/$name.summary" ]; then
    cat "$out/$name.summary"
    grep -q "^$name  *exit 0 " "$out/$name.summary" || failed=1
  fi
done
exit $failed
