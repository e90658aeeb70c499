// The row kernels' launch planner: host code alone (it builds with g++), from
// an op's RowPolicy and the code and device it runs on to a RowLaunch: how
// many threads share a row (its team), how many packs each holds, the blocks,
// clusters and grid. Why each threshold is what it is, with the measurement
// that decided it, is in docs/performance_notes.md ("The launch policy's
// thresholds").
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

// Compute capabilities are written major * 10 + minor, as __CUDA_ARCH__ / 10.
// Hopper (9.0) brought thread-block clusters, distributed shared memory and
// the bulk copies of its TMA engine.
constexpr int kHopperArchitecture = 90;

inline bool HasClusters(int architecture) { return architecture >= kHopperArchitecture; }

// Hopper's largest cluster; past 8 blocks a kernel must opt in.
constexpr int kMaxClusterBlocks = 16;
constexpr int kMaxPortableClusterBlocks = 8;

// A row op's launch policy, in values (not packs). Each op writes its own as
// a constexpr table beside its handler; the planner reads nothing else.
struct RowPolicy {
  int max_chunk_elements = 0;  // the most values a thread holds in registers
  int max_threads = 0;         // the most threads a block: the kernels' __launch_bounds__
  int team_lanes = 0;          // the lanes a row the op runs fastest with, where rows allow
  int cluster_block_threads = 0;  // a cluster team's block size; 0: no clusters, long rows stream
  int min_lanes = 8;              // the fewest lanes a row
  int shared_block_lanes = 32;    // the most lanes a row whose team shares a block with others
  int rows_block_threads = 256;   // the threads of a block that such teams share
  int small_grid_lanes = 128;     // the most lanes a row on grids too small to fill the SMs
  int busy_grid_max_chunk = 0;    // packs a thread that busy grids halve lanes down to; 0: never
  int quiet_grid_max_chunk = 0;   // packs a thread above which quiet grids double lanes; 0: never

  constexpr bool ClusterTeams() const { return cluster_block_threads > 0; }
  // Whether a team of several warps may share its block (RowTeam::Reduce).
  constexpr bool SharedBlockTeams() const { return shared_block_lanes > 32; }
  constexpr bool Valid() const {
    return min_lanes >= 1 && rows_block_threads >= shared_block_lanes && rows_block_threads >= 32 &&
           (rows_block_threads & (rows_block_threads - 1)) == 0;
  }
};

// Where a row kernel runs: elements a pack (1, or 16 bytes' worth), the
// architecture its loaded code was compiled for (KernelArchitecture), and the
// device's SMs.
struct RowTarget {
  int pack;
  int architecture;
  int sm_count;
};

// Packs a thread for `chunk_elements` values: the same number of values, so
// the same registers, whatever the dtype; unpacked (scalar) rows take a
// quarter as many, each load being that much narrower.
JAX_CAMP_HOST_DEVICE constexpr int ChunkPacks(int chunk_elements, int pack) {
  return pack == 1 ? chunk_elements / 4 : chunk_elements / pack;
}

// The threads of the blocks that teams of `lanes` run in outside clusters:
// teams of up to shared_block_lanes share blocks of rows_block_threads,
// larger ones take a block each. The planner and the kernels compiled for
// their lanes both take it from here.
JAX_CAMP_HOST_DEVICE constexpr int TeamBlockThreads(int lanes, const RowPolicy& policy) {
  return lanes <= policy.shared_block_lanes ? policy.rows_block_threads : lanes;
}

// How a team covers its row: held in its registers, by warp lanes or a
// block, or by a cluster of blocks; or streamed through them, when the row is
// longer than the team's chunks hold. Kernels are compiled for each apart.
enum class RowLayout { kHeld, kHeldInCluster, kStreamed };

template <RowLayout kLayout>
using RowLayoutTag = std::integral_constant<RowLayout, kLayout>;

// A row kernel's launch plan for `rows` rows: `chunk` packs a thread,
// `lanes` threads a row, in teams of one block or of `cluster` blocks.
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

// Elements a pack for rows of `cols` elements of `item_bytes`: 16 bytes' worth
// where the rows are 16-byte aligned (`aligned`: every pointer the kernel
// touches is, and cols a multiple of a pack), else one.
inline int RowPack(int item_bytes, int64_t cols, bool aligned) {
  const int pack = PackElements(item_bytes);
  return aligned && cols % pack == 0 ? pack : 1;
}

// The most packs a thread holds, and the block size of cluster teams (0 for
// none), for `target`: clusters only where the loaded code has them.
inline int MaxChunk(const RowPolicy& policy, const RowTarget& target) {
  return ChunkPacks(policy.max_chunk_elements, target.pack);
}
inline int ClusterThreads(const RowPolicy& policy, const RowTarget& target) {
  return HasClusters(target.architecture) ? policy.cluster_block_threads : 0;
}

// Lanes a row, before the grid is considered (PlanRowLaunch):
// - at least team_lanes while each lane still gets 4 packs (64 bytes in
//   flight a thread), more where the row needs them to fit max_chunk packs a
//   thread, and at least min_lanes; a power of two;
// - up to 32 lanes share a warp with other rows, up to shared_block_lanes a
//   block; beyond, a block takes each row: small blocks, whose load, reduce
//   and store phases overlap with other blocks', beat large ones;
// - rows that need more lanes than cluster_block_threads take a cluster of
//   blocks of that size, so that two or more blocks still share each SM, up
//   to kMaxClusterBlocks, then clusters of that many larger blocks; rows
//   longer still are streamed through one block of max_threads.
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

// A grid's cap in waves of resident blocks (2048 threads an SM); the
// kernels loop over the rows past it. Cluster teams take fewer waves.
constexpr int kGridWaves = 8;
constexpr int kClusterGridWaves = 4;

// The plan for a given number of lanes a row (a power of two). A team within
// a block holds the fewest packs a thread that hold the row, so that short
// rows keep few registers and many warps resident, and no thread loads more
// than one pack it does not use; clusters and streams take the most (see
// LaunchRowKernelAs).
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

// Grids of fewer threads than this an SM give their rows more lanes (see
// PlanRowLaunch); grids of more than kBusyGridThreadsPerSm, fewer.
constexpr int kSmallGridThreadsPerSm = 128;
constexpr int kBusyGridThreadsPerSm = 1024;

// RowLanes' lanes, adjusted to the grid:
// - too few rows to give each SM kSmallGridThreadsPerSm threads: more lanes,
//   up to small_grid_lanes and one pack a lane, since such a grid finishes
//   when its slowest thread does, and more lanes shorten each thread's chain
//   of loads, adds and shuffles;
// - rows enough for more than kBusyGridThreadsPerSm threads an SM: a policy
//   with busy_grid_max_chunk halves its lanes while each thread holds at most
//   that many packs, since threads are then plentiful and a longer chunk puts
//   more bytes in flight and leaves fewer partial results to combine;
// - other grids, with quiet_grid_max_chunk, double their lanes while a thread
//   would hold more packs than that, up to shared_block_lanes: their SMs have
//   room, and a shorter chunk is loaded in one round.
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

// Cluster teams of at least this many blocks, of at least this many threads,
// prefetch their next row where their kernel can (RowKernel): the more
// blocks a row's reduction waits for, the longer an SM would sit without a
// load in flight.
constexpr int kMinPrefetchClusterBlocks = 8;
constexpr int kMinPrefetchBlockThreads = 512;

// The dynamic shared memory a block of `plan` gets for a kernel that
// prefetches `bytes_per_thread`: none outside clusters of many large blocks.
inline int PrefetchSharedBytes(const RowLaunch& plan, int bytes_per_thread) {
  const bool prefetches =
      plan.cluster >= kMinPrefetchClusterBlocks && plan.threads >= kMinPrefetchBlockThreads;
  return prefetches ? bytes_per_thread * plan.threads : 0;
}

// Clusters claim their rows (ClaimedRows) only where each would take more
// than this many: the counter's memset and the claims cost a few
// microseconds a call, which uneven clusters repay only over many rows.
constexpr int kMinRowsPerClaimingCluster = 16;

}  // namespace jax_camp
