// Times the row kernels (softmax forward and backward, reduce_sum) under the
// launch policy's plan (PlanRowLaunch) and under half and twice its lanes a
// row, with CUDA events: the check that the policy picks the fastest of its
// neighbours. Not part of the package: built by hand for the GPU at hand,
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//     -I$(python -c "import jax.ffi; print(jax.ffi.include_dir())") \
//     scripts/row_policy_bench.cu -o build/row_policy_bench
// and prints microseconds per call for each shape, dtype and plan
// (c: packs a thread, l: lanes a row, s: streamed): half the policy's lanes, the policy's,
// twice its lanes, and last the policy's plan without thread-block clusters.
#include <cstdio>
#include <vector>

#include "../csrc/reduce_sum/reduce_sum_launch.cuh"
#include "../csrc/softmax/softmax_launch.cuh"
#include "bench_check.h"

namespace jax_camp {
namespace {

template <typename T, const RowPolicy& kPolicy, typename Select, typename... Args>
void TimePlan(int lanes_scale, bool clusters, int64_t rows, int64_t cols, Select select,
              LaunchScratch scratch, Args... args) {
  constexpr int kPack = kPack128<T>;
  int sm_count = 0;
  BENCH_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const int64_t num_packs = cols / kPack;
  const RowTarget target{kPack, clusters ? kHopperArchitecture : 80, sm_count};
  int lanes = PlanRowLaunch(rows, num_packs, kPolicy, target).lanes;
  lanes = lanes_scale > 0 ? lanes * lanes_scale : lanes / -lanes_scale;
  const int max_lanes =
      kPolicy.max_threads * (ClusterThreads(kPolicy, target) > 0 ? kMaxClusterBlocks : 1);
  const bool in_range = lanes >= 1 && lanes <= max_lanes;
  const RowLaunch plan =
      in_range ? PlanRowLaunchWithLanes(rows, num_packs, lanes, kPolicy, target) : RowLaunch{};
  // Only the policy's own plan may stream: a neighbour that cannot hold the row is no neighbour.
  if (!in_range || (lanes_scale != 1 && plan.layout == RowLayout::kStreamed)) {
    std::printf(" %21s", "-");
    return;
  }
  auto launch = [&] { return LaunchRowKernelAs<kPolicy, kPack>("bench", nullptr, plan, select, scratch, args...); };
  for (int i = 0; i < 3; ++i) {
    if (ffi::Error error = launch(); error.failure()) {
      std::printf(" %21s", "no kernel");
      return;
    }
  }
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  constexpr int kCalls = 20;
  BENCH_CHECK(cudaEventRecord(start));
  for (int i = 0; i < kCalls; ++i) launch();
  BENCH_CHECK(cudaEventRecord(stop));
  BENCH_CHECK(cudaEventSynchronize(stop));
  BENCH_CHECK(cudaGetLastError());
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf(" %7.1f us (c%2d,l%4d%c)", ms * 1000 / kCalls, plan.chunk, plan.lanes,
              plan.layout == RowLayout::kStreamed ? 's' : ' ');
}

// One line of the table: the kernel under half the policy's lanes, the
// policy's plan, twice its lanes, and the policy's plan without clusters.
template <typename T, const RowPolicy& kPolicy, typename Select, typename... Args>
void TimeRow(const char* kernel, const char* dtype, int64_t rows, int64_t cols, Select select,
             LaunchScratch scratch, Args... args) {
  std::printf("%-8s %-8s %6lldx%-6lld", kernel, dtype, (long long)rows, (long long)cols);
  const struct {
    int lanes_scale;
    bool clusters;
  } plans[] = {{-2, true}, {1, true}, {2, true}, {1, false}};
  for (const auto& plan : plans)
    TimePlan<T, kPolicy>(plan.lanes_scale, plan.clusters, rows, cols, select, scratch, args...);
  std::printf("\n");
}

template <typename T>
void BenchShape(const char* dtype, int64_t rows, int64_t cols) {
  T *x, *y, *g;
  unsigned* row_counter;
  const size_t bytes = rows * cols * sizeof(T);
  BENCH_CHECK(cudaMalloc(&row_counter, sizeof(unsigned)));
  BENCH_CHECK(cudaMalloc(&x, bytes));
  BENCH_CHECK(cudaMalloc(&y, bytes));
  BENCH_CHECK(cudaMalloc(&g, bytes));
  BENCH_CHECK(cudaMemset(x, 0x3c, bytes));  // finite values, not zeros
  BENCH_CHECK(cudaMemset(g, 0x3c, bytes));
  TimeRow<T, softmax::kForwardPolicy>(
      "forward", dtype, rows, cols,
      softmax::SelectForwardKernel<softmax::Output::kSoftmax, false, T>{},
      LaunchScratch{row_counter}, (const T*)x, (const uint8_t*)nullptr, y, rows, cols);
  TimeRow<T, softmax::kBackwardPolicy>(
      "backward", dtype, rows, cols,
      softmax::SelectBackwardKernel<softmax::SoftmaxGradient, T>{}, LaunchScratch{},
      (const T*)y, (const T*)g, x, rows, cols);
  TimeRow<T, reduce_sum::kPolicy<T>>(
      "reduce", dtype, rows, cols,
      reduce_sum::SelectReduceSumKernel<T>{}, LaunchScratch{},
      (const T*)x, y, rows, cols);
  BENCH_CHECK(cudaFree(x));
  BENCH_CHECK(cudaFree(y));
  BENCH_CHECK(cudaFree(g));
  BENCH_CHECK(cudaFree(row_counter));
}

}  // namespace
}  // namespace jax_camp

int main() {
  const long long shapes[][2] = {{8192, 8192},  {65536, 1024}, {4096, 32768}, {262144, 128},
                                 {1024, 262144}, {1008, 1280},  {4080, 1536}};
  for (auto& s : shapes) jax_camp::BenchShape<float>("float32", s[0], s[1]);
  for (auto& s : shapes) jax_camp::BenchShape<__nv_bfloat16>("bfloat16", s[0], s[1]);
}
