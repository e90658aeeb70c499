set -u
export PATH=/usr/local/cuda/bin:$PATH XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
OUT=/tmp/gc bash scripts/gpu_check.sh build policy > $OUT/check.txt 2>&1
tail -30 /tmp/gc/build.log >> $OUT/check.txt; cp /tmp/gc/row_policy.txt $OUT/
python3 -P -m pytest -q -p no:cacheprovider tests/test_softmax.py tests/test_reduce_sum.py --backend cuda -x > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
python3 -P benchmarks/run_ops.py --op softmax --backend all --mode all --no-progress --no-torch --shapes 4096x32768,1024x262144 > $OUT/bench_softmax.txt 2>&1
python3 -P benchmarks/run_ops.py --op softmax_grad --backend all --mode all --no-progress --no-torch --shapes 4096x32768,1024x262144 > $OUT/bench_grad.txt 2>&1
for op in copy vector_add; do python3 -P benchmarks/run_ops.py --op $op --backend all --mode bench --no-progress --no-torch --no-profile-check --shapes 8192x8192,2032x2304,4080x1536,4093*1024,1001*1024; done > $OUT/bench_elem.txt 2>&1
timeout 150 ncu --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread --csv python3 -P probe/small_ncu.py > $OUT/ncu.csv 2>&1
tail -4 $OUT/check.txt
grep -A14 "^op  *backend" $OUT/bench_softmax.txt $OUT/bench_grad.txt | tail -30
grep "^copy  \|^vector_add " $OUT/bench_elem.txt | head -50
