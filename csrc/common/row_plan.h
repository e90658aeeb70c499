// The row kernels' launch planner, host code alone (it builds with g++): from an op's
// RowPolicy, its loaded code and the device to a RowLaunch. docs/performance_notes.md
// ("The launch policy's thresholds") says why each threshold is what it is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "pack_size.h"

#ifdef __CUDACC__
#define JAX_CAMP_HOST_DEVICE __host__ __device__
#else
#define JAX_CAMP_HOST_DEVICE
#endif

namespace jax_camp {

// Compute capabilities as major * 10 + minor, i.e. __CUDA_ARCH__ / 10. Hopper (9.0)
// brought thread-block clusters, distributed shared memory and TMA bulk copies.
constexpr int kHopperArchitecture = 90;

inline bool HasClusters(int architecture) { return architecture >= kHopperArchitecture; }

// Hopper's largest cluster; past 8 blocks a kernel must opt in.
constexpr int kMaxClusterBlocks = 16;
constexpr int kMaxPortableClusterBlocks = 8;

// A row op's launch policy: a constexpr table beside its handler, the planner's only input from it.
struct RowPolicy {
  int max_chunk_elements = 0;  // the most values a thread holds in registers
  int max_threads = 0;         // the most threads per block: the kernels' __launch_bounds__
  int team_lanes = 0;          // the lanes per row the op runs fastest with, where rows allow
  int cluster_block_threads = 0;  // a cluster team's block size; 0: no clusters, long rows stream
  int min_lanes = 8;              // the fewest lanes per row
  int shared_block_lanes = 32;    // the most lanes per row whose team shares a block with others
  int rows_block_threads = 256;   // the threads of a block that such teams share
  int small_grid_lanes = 128;     // the most lanes per row on grids too small to fill the SMs
  int busy_grid_max_chunk = 0;    // packs per thread that busy grids halve lanes up to; 0: never
  int quiet_grid_max_chunk = 0;   // packs per thread above which quiet grids double lanes; 0: never

  constexpr bool ClusterTeams() const { return cluster_block_threads > 0; }
  // Whether a team of several warps may share its block (RowTeam::Reduce).
  constexpr bool SharedBlockTeams() const { return shared_block_lanes > 32; }
  constexpr bool Valid() const {
    return min_lanes >= 1 && rows_block_threads >= shared_block_lanes && rows_block_threads >= 32 &&
           (rows_block_threads & (rows_block_threads - 1)) == 0;
  }
};

// Where a row kernel runs: elements per pack (1, or 16 bytes' worth), the architecture
// its loaded code was compiled for (KernelArchitecture), and the device's SM count.
struct RowTarget {
  int pack;
  int architecture;
  int sm_count;
};

// Packs per thread for `chunk_elements` values, so the registers are the same for every
// dtype; unpacked (scalar) rows take a quarter as many, their loads being narrower.
JAX_CAMP_HOST_DEVICE constexpr int ChunkPacks(int chunk_elements, int pack) {
  return pack == 1 ? chunk_elements / 4 : chunk_elements / pack;
}

// The block size for teams of `lanes` outside clusters: teams of up to shared_block_lanes
// share blocks of rows_block_threads, and larger ones take a block each, as small blocks
// overlap their phases with other blocks'.
JAX_CAMP_HOST_DEVICE constexpr int TeamBlockThreads(int lanes, const RowPolicy& policy) {
  return lanes <= policy.shared_block_lanes ? policy.rows_block_threads : lanes;
}

// How a team covers its row: held in registers (by warp lanes, a block or a
// cluster), or streamed through them when longer. Each has its own kernels.
enum class RowLayout { kHeld, kHeldInCluster, kStreamed };

template <RowLayout kLayout>
using RowLayoutTag = std::integral_constant<RowLayout, kLayout>;

// A row kernel's launch plan for `rows` rows: `chunk` packs per thread, `lanes`
// threads per row, in teams of one block or of `cluster` blocks.
struct RowLaunch {
  int chunk;
  int lanes;
  int blocks;
  int threads;
  int cluster;
  RowLayout layout;
  int64_t rows;

  // The teams the grid holds.
  int64_t Teams() const {
    return lanes <= threads ? int64_t{blocks} * (threads / lanes) : blocks / cluster;
  }
  // Whether each team has one row to take (RowTeam::ForEachGroup).
  bool TeamForEveryRow() const { return Teams() >= rows; }
};

// Elements per pack: 16 bytes' worth where `aligned` (every pointer the kernel
// touches is 16-byte aligned) and cols is a multiple of that, else one.
inline int RowPack(int item_bytes, int64_t cols, bool aligned) {
  const int pack = PackElements(item_bytes);
  return aligned && cols % pack == 0 ? pack : 1;
}

// The most packs per thread, and cluster teams' block size (0 where the code has none).
inline int MaxChunk(const RowPolicy& policy, const RowTarget& target) {
  return ChunkPacks(policy.max_chunk_elements, target.pack);
}
inline int ClusterThreads(const RowPolicy& policy, const RowTarget& target) {
  return HasClusters(target.architecture) ? policy.cluster_block_threads : 0;
}

// Lanes per row before the grid is considered (PlanRowLaunch), a power of two: enough to
// hold the row in max_chunk packs per thread, up to team_lanes while each keeps 4 packs, and
// min_lanes (at most one per pack). Rows too long for the largest team stream (max_threads).
inline int RowLanes(int64_t num_packs, const RowPolicy& policy, const RowTarget& target) {
  constexpr int64_t kMinChunk = 4;
  const int64_t max_lanes =
      int64_t{policy.max_threads} * (ClusterThreads(policy, target) > 0 ? kMaxClusterBlocks : 1);
  const int max_chunk = MaxChunk(policy, target);
  const int64_t lanes_for_chunk = (num_packs + max_chunk - 1) / max_chunk;
  if (lanes_for_chunk > max_lanes) return policy.max_threads;  // streamed
  const int64_t lanes_for_overlap =
      std::min<int64_t>(policy.team_lanes, (num_packs + kMinChunk - 1) / kMinChunk);
  const int64_t lanes_wanted = std::max(
      {lanes_for_chunk, lanes_for_overlap, std::min<int64_t>(num_packs, policy.min_lanes)});
  int lanes = 1;
  while (lanes < lanes_wanted) lanes *= 2;
  return lanes;
}

// A grid's cap in waves of resident blocks (2048 threads per SM); kernels loop past it.
constexpr int kGridWaves = 8;
constexpr int kClusterGridWaves = 4;

// The plan for a given number of lanes per row (a power of two). A held row's team of more
// than cluster_block_threads is a cluster of blocks that size (two or more per SM), then of
// kMaxClusterBlocks larger ones. A team in one block holds the fewest packs per thread that
// fit, to spare registers; clusters and streams hold the most (see LaunchRowKernelAs).
inline RowLaunch PlanRowLaunchWithLanes(int64_t rows, int64_t num_packs, int lanes,
                                        const RowPolicy& policy, const RowTarget& target) {
  const int max_chunk = MaxChunk(policy, target);
  const int cluster_threads = ClusterThreads(policy, target);
  const bool held = int64_t{lanes} * max_chunk >= num_packs;
  int threads = TeamBlockThreads(lanes, policy);
  int cluster = 1;
  if (cluster_threads > 0 && lanes > cluster_threads && held) {
    threads = std::max(cluster_threads, lanes / kMaxClusterBlocks);
    cluster = lanes / threads;
  }  // streamed rows keep to one block
  const int chunk = held && cluster == 1 ? static_cast<int>((num_packs + lanes - 1) / lanes)
                                         : max_chunk;
  const int64_t rows_per_block = std::max(1, threads / lanes);
  const int64_t wanted = (rows + rows_per_block - 1) / rows_per_block * cluster;
  const int waves = cluster > 1 ? kClusterGridWaves : kGridWaves;
  const int64_t clusters_cap = int64_t{target.sm_count} * (2048 / threads) * waves / cluster;
  const int64_t cap = std::max<int64_t>(clusters_cap, 1) * cluster;
  const RowLayout layout = !held        ? RowLayout::kStreamed
                           : cluster > 1 ? RowLayout::kHeldInCluster
                                         : RowLayout::kHeld;
  return {chunk, lanes, static_cast<int>(std::min(wanted, cap)), threads, cluster, layout, rows};
}

// Threads per SM below which a grid is small, and above which it is busy (PlanRowLaunch).
constexpr int kSmallGridThreadsPerSm = 128;
constexpr int kBusyGridThreadsPerSm = 1024;

// RowLanes' lanes, adjusted to the grid. A small grid doubles them, up to small_grid_lanes
// and one pack per lane, since it ends with its slowest thread. A busy grid halves them
// while each thread holds at most busy_grid_max_chunk packs, for more bytes in flight and
// fewer partial results. Other grids of packed rows double them while a thread would hold
// more than quiet_grid_max_chunk packs, up to shared_block_lanes, as their SMs have room.
inline RowLaunch PlanRowLaunch(int64_t rows, int64_t num_packs, const RowPolicy& policy,
                               const RowTarget& target) {
  const int64_t sm_count = target.sm_count;
  const int quiet_grid_max_chunk = target.pack > 1 ? policy.quiet_grid_max_chunk : 0;
  int lanes = RowLanes(num_packs, policy, target);
  while (lanes < policy.small_grid_lanes && 2 * lanes <= num_packs &&
         rows * lanes < sm_count * kSmallGridThreadsPerSm)
    lanes *= 2;
  while (lanes / 2 >= policy.min_lanes && rows * lanes > sm_count * kBusyGridThreadsPerSm &&
         (num_packs + lanes / 2 - 1) / (lanes / 2) <= policy.busy_grid_max_chunk)
    lanes /= 2;
  while (quiet_grid_max_chunk > 0 && 2 * lanes <= policy.shared_block_lanes &&
         rows * lanes <= sm_count * kBusyGridThreadsPerSm &&
         (num_packs + lanes - 1) / lanes > quiet_grid_max_chunk)
    lanes *= 2;
  return PlanRowLaunchWithLanes(rows, num_packs, lanes, policy, target);
}

// Cluster teams of this many blocks of this many threads or more prefetch their next row
// (RowKernel): the more blocks a reduction waits for, the longer an SM sits with no load in flight.
constexpr int kMinPrefetchClusterBlocks = 8;
constexpr int kMinPrefetchBlockThreads = 512;

// Dynamic shared memory per block for prefetching `bytes_per_thread`; 0 outside such clusters.
inline int PrefetchSharedBytes(const RowLaunch& plan, int bytes_per_thread) {
  const bool prefetches =
      plan.cluster >= kMinPrefetchClusterBlocks && plan.threads >= kMinPrefetchBlockThreads;
  return prefetches ? bytes_per_thread * plan.threads : 0;
}

// Clusters claim their rows (ClaimedRows) only past this many rows each, since
// zeroing the counter and claiming cost time that only many rows repay.
constexpr int kMinRowsPerClaimingCluster = 16;

// Whether a launch under `policy` may claim rows on some GPU, so that its call needs a
// row counter: only cluster teams claim (they prefetch), and only rows longer than one
// block holds take a cluster. Decided from the shape alone, as it is known when the
// call is traced, before any device is; a call without a counter takes rows in order.
inline bool MayClaimRows(const RowPolicy& policy, int64_t rows, int64_t cols) {
  return policy.ClusterTeams() && rows > kMinRowsPerClaimingCluster &&
         cols > int64_t{policy.max_threads} * policy.max_chunk_elements;
}

}  // namespace jax_camp
