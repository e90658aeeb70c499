// Does compute-sanitizer's synccheck run kernels that use mbarriers in
// thread-block clusters of more than 8 blocks? The smallest kernels with the
// row kernels' Hopper pattern (csrc/common/hopper.cuh), correct without the
// tool, in three steps:
//   barriers  cluster barriers alone;
//   mbarrier  and one mbarrier initialized and published to the cluster;
//   async     and each block's share of a row bulk-copied into shared memory
//             (counted on that mbarrier), its sum pushed into every block of
//             the cluster by st.async (counted on theirs), rows taken in turn.
// Not part of the package: built by hand for the GPU at hand,
//   nvcc -std=c++17 -O3 -arch=sm_90 scripts/synccheck_cluster_probe.cu -o build/probe
//   compute-sanitizer --tool synccheck build/probe 16 async
// It prints each row sum's check and exits 0 when every one is right.
#include <cooperative_groups.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../csrc/common/hopper.cuh"
#include "bench_check.h"

namespace {

using namespace jax_camp;

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 16;
constexpr int kPacksPerThread = 8;  // a block's share of a row: kThreads * this float4s

enum Step { kBarriers, kMbarrier, kAsync };

__global__ void __launch_bounds__(kThreads, 1)
    RowSums(const float4* x, float* sums, int rows, int row_packs, Step step) {
  __shared__ float warp_sums[kThreads / 32];
  __shared__ alignas(8) float block_sums[2][kMaxBlocks];
  __shared__ uint64_t sums_arrived[2];
  __shared__ uint64_t row_loaded;
  extern __shared__ __align__(16) float4 row_share[];
  auto cluster = cooperative_groups::this_cluster();
  const unsigned blocks = cluster.num_blocks();
  const unsigned rank = cluster.block_rank();
  if (step >= kMbarrier && threadIdx.x == 0) {
    hopper::InitBarrier(&row_loaded, 1);
    hopper::InitBarrier(&sums_arrived[0], 1);
    hopper::InitBarrier(&sums_arrived[1], 1);
    hopper::PublishBarrierInit();
  }
  cluster.sync();
  if (step < kAsync) return;
  const int first_pack = rank * kThreads * kPacksPerThread;
  int share = row_packs - first_pack;
  share = share < 0 ? 0 : share > kThreads * kPacksPerThread ? kThreads * kPacksPerThread : share;
  int reduction = 0;
  for (int row = blockIdx.x / blocks; row < rows; row += gridDim.x / blocks, ++reduction) {
    if (threadIdx.x == 0) {
      hopper::FenceBeforeBulkCopies();
      hopper::ArriveExpectingBytes(&row_loaded, share * 16);
      if (share > 0)
        hopper::BulkLoad(row_share, x + static_cast<size_t>(row) * row_packs + first_pack,
                         share * 16, &row_loaded);
    }
    hopper::WaitBarrier(&row_loaded, reduction & 1);
    float sum = 0;
    for (int p = threadIdx.x; p < share; p += kThreads)
      sum += row_share[p].x + row_share[p].y + row_share[p].z + row_share[p].w;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(~0u, sum, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();  // also: every thread has read row_share before it is refilled
    float block_sum = 0;
    for (int w = 0; w < kThreads / 32; ++w) block_sum += warp_sums[w];
    // Two rounds of slots in turn, as RowTeam::ClusterReduce uses them.
    const int round = reduction & 1;
    if (threadIdx.x == 0) hopper::ArriveExpectingBytes(&sums_arrived[round], blocks * sizeof(float));
    if (threadIdx.x < blocks)
      hopper::StoreToBlock(&block_sums[round][rank], block_sum, &sums_arrived[round], threadIdx.x);
    hopper::WaitBarrier(&sums_arrived[round], (reduction >> 1) & 1);
    float total = 0;
    for (unsigned b = 0; b < blocks; ++b) total += block_sums[round][b];
    if (rank == 0 && threadIdx.x == 0) sums[row] = total;
    __syncthreads();  // warp_sums is rewritten next row
  }
  cluster.sync();  // no block exits while others may still store into it
}

}  // namespace

int main(int argc, char** argv) {
  const char* steps[] = {"barriers", "mbarrier", "async"};
  int step = -1;
  for (int i = 0; argc == 3 && i < 3; ++i)
    if (std::strcmp(argv[2], steps[i]) == 0) step = i;
  const int blocks = argc == 3 ? std::atoi(argv[1]) : 0;
  if (step < 0 || blocks < 1 || blocks > kMaxBlocks) {
    std::fprintf(stderr, "usage: %s BLOCKS(1-16) barriers|mbarrier|async\n", argv[0]);
    return 1;
  }
  const int rows = 200, row_packs = blocks * kThreads * kPacksPerThread - 100;
  std::vector<float> host_x(static_cast<size_t>(rows) * row_packs * 4);
  for (size_t i = 0; i < host_x.size(); ++i) host_x[i] = static_cast<float>(i % 17) - 8;
  float *x, *sums;
  BENCH_CHECK(cudaMalloc(&x, host_x.size() * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&sums, rows * sizeof(float)));
  BENCH_CHECK(cudaMemcpy(x, host_x.data(), host_x.size() * sizeof(float), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemset(sums, 0, rows * sizeof(float)));
  const int shared_bytes = kThreads * kPacksPerThread * sizeof(float4);
  BENCH_CHECK(cudaFuncSetAttribute(RowSums, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  BENCH_CHECK(cudaFuncSetAttribute(RowSums, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   shared_bytes));
  cudaLaunchAttribute cluster_dims = {};
  cluster_dims.id = cudaLaunchAttributeClusterDimension;
  cluster_dims.val.clusterDim = {static_cast<unsigned>(blocks), 1, 1};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &cluster_dims;
  config.numAttrs = 1;
  int resident = 0;  // a grid of resident clusters, each taking several rows in turn
  BENCH_CHECK(cudaOccupancyMaxActiveClusters(&resident, RowSums, &config));
  config.gridDim = dim3(resident * blocks);
  BENCH_CHECK(cudaLaunchKernelEx(&config, RowSums, static_cast<const float4*>(static_cast<void*>(x)),
                                 sums, rows, row_packs, static_cast<Step>(step)));
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> host_sums(rows);
  BENCH_CHECK(cudaMemcpy(host_sums.data(), sums, rows * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int row = 0; step == kAsync && row < rows; ++row) {
    double want = 0;
    for (int i = 0; i < row_packs * 4; ++i) want += host_x[static_cast<size_t>(row) * row_packs * 4 + i];
    wrong += std::fabs(host_sums[row] - want) > 1e-3 * (std::fabs(want) + 1);
  }
  std::printf("clusters of %d blocks (%d resident), %s: %s\n", blocks, resident, steps[step],
              step < kAsync ? "ran" : wrong ? "WRONG sums" : "every row sum right");
  return wrong ? 2 : 0;
}
