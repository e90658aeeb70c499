// Times one read of a large float32 buffer (summed, one value a block kept so
// that no load is dead) under three access schemes, with CUDA events: the
// HBM read ceiling that reduce_sum's large shapes are measured against
// (docs/performance_notes.md). Not part of the package: built by hand
// for the GPU at hand,
//   nvcc -std=c++17 -O3 -arch=sm_90 scripts/read_bandwidth_bench.cu -o build/read_bandwidth_bench
// and prints microseconds per launch and TB/s for each size and scheme:
//   tile Uk:      one tile of 256 threads x k 16-byte loads a block, as jax_camp's kernels;
//   stride Uk bN: N blocks looping over the buffer, k loads in flight a thread;
//   bulk cK sS bN: N blocks, each streaming its share through S stages of
//                  K-KiB bulk copies (the TMA engine) into shared memory.
// A launch's time includes the gap to the next one.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../csrc/common/hopper.cuh"
#include "bench_check.h"

namespace {

using namespace jax_camp::hopper;

constexpr int kThreads = 256;

__device__ __forceinline__ float SumOf(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// Keeps a block's sum, and so its loads, live: the store never happens, as
// the buffer holds zeros, but the compiler cannot know that.
__device__ __forceinline__ void Keep(float sum, float* out) {
  if (sum == 1234.5f) *out = sum;
}

template <int kLoads>
__device__ __forceinline__ float SumLoads(const float4* x, int64_t first, int64_t n4) {
  float4 v[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int64_t i = first + int64_t{k} * blockDim.x;
    v[k] = i < n4 ? __ldg(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) sum += SumOf(v[k]);
  return sum;
}

template <int kLoads>
__global__ void ReadTiles(const float4* __restrict__ x, int64_t n4, float* out) {
  Keep(SumLoads<kLoads>(x, int64_t{blockIdx.x} * blockDim.x * kLoads + threadIdx.x, n4), out);
}

template <int kLoads>
__global__ void ReadStrided(const float4* __restrict__ x, int64_t n4, float* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x * kLoads;
  float sum = 0.f;
  for (int64_t first = int64_t{blockIdx.x} * blockDim.x * kLoads + threadIdx.x; first < n4;
       first += stride)
    sum += SumLoads<kLoads>(x, first, n4);
  Keep(sum, out);
}

// Each block takes whole chunks of `chunk` bytes, the first (chunks % grid)
// blocks one more, through a ring of `stages` buffers.
__global__ void ReadBulk(const float* __restrict__ x, int64_t n, float* out, int chunk,
                         int stages) {
  extern __shared__ __align__(1024) unsigned char ring[];
  __shared__ uint64_t filled[8];
  const int64_t total = n * 4 / chunk, share = total / gridDim.x, extra = total % gridDim.x;
  const int64_t first = blockIdx.x * share + min(int64_t{blockIdx.x}, extra);
  const int chunks = static_cast<int>(share + (blockIdx.x < extra ? 1 : 0));
  const unsigned char* src = reinterpret_cast<const unsigned char*>(x) + first * chunk;
  auto fill = [&](int stage, int c) {
    ArriveExpectingBytes(&filled[stage], chunk);
    BulkLoad(ring + stage * chunk, src + int64_t{c} * chunk, chunk, &filled[stage]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) InitBarrier(&filled[s], 1);
    FenceBeforeBulkCopies();
    for (int s = 0; s < stages && s < chunks; ++s) fill(s, s);
  }
  __syncthreads();
  float sum = 0.f;
  for (int c = 0; c < chunks; ++c) {
    const int stage = c % stages;
    WaitBarrier(&filled[stage], (c / stages) & 1);
    const float4* v = reinterpret_cast<const float4*>(ring + stage * chunk);
    for (int i = threadIdx.x; i < chunk / 16; i += blockDim.x) sum += SumOf(v[i]);
    __syncthreads();  // every thread is done with the stage before it refills
    if (threadIdx.x == 0 && c + stages < chunks) {
      FenceBeforeBulkCopies();
      fill(stage, c + stages);
    }
  }
  Keep(sum, out);
}

// Median over 5 rounds of the seconds a launch, 30 launches a round.
template <typename Launch>
double SecondsPerLaunch(Launch launch) {
  constexpr int kLaunches = 30, kRounds = 5;
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();
  BENCH_CHECK(cudaGetLastError());
  std::vector<float> ms(kRounds);
  for (float& round_ms : ms) {
    BENCH_CHECK(cudaEventRecord(start));
    for (int i = 0; i < kLaunches; ++i) launch();
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    BENCH_CHECK(cudaEventElapsedTime(&round_ms, start, stop));
  }
  BENCH_CHECK(cudaGetLastError());
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[kRounds / 2] / kLaunches * 1e-3;
}

template <int kLoads>
void TimeTiles(const float* x, int64_t bytes, float* out) {
  const int64_t n4 = bytes / 16, blocks = n4 / (kThreads * kLoads);
  const double s = SecondsPerLaunch(
      [&] { ReadTiles<kLoads><<<blocks, kThreads>>>(reinterpret_cast<const float4*>(x), n4, out); });
  std::printf("%5lld MiB  tile U%d b%-10lld %9.2f us %7.3f TB/s\n", (long long)(bytes >> 20),
              kLoads, (long long)blocks, s * 1e6, bytes / s / 1e12);
}

template <int kLoads>
void TimeStrided(const float* x, int64_t bytes, float* out, int blocks) {
  const int64_t n4 = bytes / 16;
  const double s = SecondsPerLaunch([&] {
    ReadStrided<kLoads><<<blocks, kThreads>>>(reinterpret_cast<const float4*>(x), n4, out);
  });
  std::printf("%5lld MiB  stride U%d b%-8d %9.2f us %7.3f TB/s\n", (long long)(bytes >> 20),
              kLoads, blocks, s * 1e6, bytes / s / 1e12);
}

void TimeBulk(const float* x, int64_t bytes, float* out, int blocks, int chunk, int stages) {
  const int shared = chunk * stages;
  BENCH_CHECK(cudaFuncSetAttribute(ReadBulk, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  const double s = SecondsPerLaunch(
      [&] { ReadBulk<<<blocks, kThreads, shared>>>(x, bytes / 4, out, chunk, stages); });
  std::printf("%5lld MiB  bulk c%dK s%d b%-6d %9.2f us %7.3f TB/s\n", (long long)(bytes >> 20),
              chunk / 1024, stages, blocks, s * 1e6, bytes / s / 1e12);
}

}  // namespace

int main() {
  int sm_count = 0;
  BENCH_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const int64_t sizes[] = {int64_t{1} << 30, int64_t{256} << 20, int64_t{128} << 20};
  float *x, *out;
  BENCH_CHECK(cudaMalloc(&x, sizes[0]));
  BENCH_CHECK(cudaMalloc(&out, sizeof(float)));
  BENCH_CHECK(cudaMemset(x, 0, sizes[0]));
  for (const int64_t bytes : sizes) {
    TimeTiles<1>(x, bytes, out);
    TimeTiles<2>(x, bytes, out);
    TimeTiles<4>(x, bytes, out);
    TimeTiles<8>(x, bytes, out);
    for (const int blocks_per_sm : {4, 8, 16}) {
      TimeStrided<1>(x, bytes, out, sm_count * blocks_per_sm);
      TimeStrided<4>(x, bytes, out, sm_count * blocks_per_sm);
      TimeStrided<8>(x, bytes, out, sm_count * blocks_per_sm);
    }
    for (const int chunk : {8192, 16384, 32768})
      for (const int stages : {2, 4, 6})
        for (const int blocks_per_sm : {1, 2})
          if (chunk * stages * blocks_per_sm <= 220 * 1024)
            TimeBulk(x, bytes, out, sm_count * blocks_per_sm, chunk, stages);
  }
  BENCH_CHECK(cudaFree(x));
  BENCH_CHECK(cudaFree(out));
  return 0;
}
