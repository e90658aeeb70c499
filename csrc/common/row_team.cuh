// The row kernels (reduce_sum, softmax) are written once against a RowTeam, the
// threads that share one row: lanes of a warp, warps of a block, a block, or a
// Hopper cluster of blocks (row_plan.h picks). Each thread holds its part of the
// row in registers (RowChunk), so a row that fits is read from memory only once.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "hopper.cuh"
#include "row_plan.h"

namespace jax_camp {

// Shared memory for RowTeam::Reduce over V: per-warp results and, for cluster
// teams, per-block results and their barriers, each in two rounds used in turn.
template <typename V>
struct RowScratch {
  static constexpr int kMaxWarps = 32;
  V warps[2][kMaxWarps];
  alignas(8) V cluster_results[2][kMaxClusterBlocks];
  uint64_t cluster_arrivals[2];
};

// Whether LaunchRowPlan gave this kernel dynamic shared memory: exactly when it should prefetch.
__device__ __forceinline__ bool HasDynamicSharedMemory() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes > 0;
}

struct RowTeam {
  int lanes;  // threads per row: a power of two up to a block's threads, or a cluster
  int lane;   // this thread's place in its team
  int64_t first_row;
  int64_t row_stride;
  int lanes_log2;
  // The block size where the kernel is compiled for it, else 0 (use blockDim.x).
  unsigned fixed_block_threads;
  int block_reductions = 0;
  int cluster_reductions = 0;

  // A team of up to a block's threads, or a cluster of team_lanes / BlockThreads() blocks
  // consecutive in x; all sizes must be powers of two, as the geometry is shifts.
  // spans_blocks: it may be a cluster (kClusters); block_threads: as fixed_block_threads.
  __device__ RowTeam(int team_lanes, bool spans_blocks, unsigned block_threads = 0)
      : lanes(team_lanes), fixed_block_threads(block_threads) {
    lanes_log2 = __ffs(team_lanes) - 1;
    const int block_log2 = __ffs(static_cast<int>(BlockThreads())) - 1;
    if (!spans_blocks || lanes_log2 <= block_log2) {
      lane = threadIdx.x & (team_lanes - 1);
      first_row = int64_t{blockIdx.x} << (block_log2 - lanes_log2);
      row_stride = int64_t{gridDim.x} << (block_log2 - lanes_log2);
    } else {
      const int blocks_log2 = lanes_log2 - block_log2;
      const unsigned rank = blockIdx.x & ((1u << blocks_log2) - 1);
      lane = static_cast<int>((rank << block_log2) | threadIdx.x);
      first_row = blockIdx.x >> blocks_log2;
      row_stride = gridDim.x >> blocks_log2;
    }
  }

  // This thread's pack i of a chunk (RowChunk): the team's loads of pack i are contiguous.
  __device__ int PackOf(int i) const { return i * lanes + lane; }

  __device__ unsigned BlockThreads() const {
    return fixed_block_threads > 0 ? fixed_block_threads : blockDim.x;
  }

  // This thread's row in the group of rows starting at `group`. Every thread runs
  // every group, so all reach each reduction; rows past the end are empty.
  __device__ int64_t RowIn(int64_t group) const { return group + (threadIdx.x >> lanes_log2); }

  // f(group) for each of the block's groups of rows: with kTeamPerRow
  // (RowLaunch::TeamForEveryRow) the first alone, else every row_stride-th.
  template <bool kTeamPerRow, typename F>
  __device__ __forceinline__ void ForEachGroup(int64_t rows, F&& f) const {
    if constexpr (kTeamPerRow) {
      f(first_row);
    } else {
      for (int64_t group = first_row; group < rows; group += row_stride) f(group);
    }
  }

  // Every row kernel calls this first: a cluster team's blocks set up their barriers
  // (ClusterReduce) and sync, so that none pushes a result before all are ready.
  template <bool kClusters, typename V>
  __device__ void Begin(RowScratch<V>& scratch) const {
#if __CUDA_ARCH__ >= 900
    if constexpr (kClusters) {
      if (lanes > BlockThreads()) {
        if (threadIdx.x == 0) {
          hopper::InitBarrier(&scratch.cluster_arrivals[0], 1);
          hopper::InitBarrier(&scratch.cluster_arrivals[1], 1);
          hopper::PublishBarrierInit();
        }
        cooperative_groups::this_cluster().sync();
      }
    }
#endif
  }

  // op over the team's values, returned to every lane; every thread of the block calls
  // it alike. kClusters, kSharedBlockTeams (RowPolicy::SharedBlockTeams): whether the
  // team may be a cluster or share its block; code for other teams would cost registers.
  template <bool kClusters, bool kSharedBlockTeams = false, typename V, typename Op>
  __device__ V Reduce(V v, Op op, RowScratch<V>& scratch) {
    if (lanes <= 32) return WarpReduce(v, op, lanes);
    if constexpr (kSharedBlockTeams) {
      if (lanes < BlockThreads()) {
        const int team_warps = lanes >> 5;
        const int first_warp = (threadIdx.x >> 5) & ~(team_warps - 1);
        return BlockReduce(v, op, scratch.warps[block_reductions++ & 1], team_warps, first_warp);
      }
    }
    v = BlockReduce(v, op, scratch.warps[block_reductions++ & 1],
                    static_cast<int>(BlockThreads() / 32), 0);
    if (!kClusters || lanes <= BlockThreads()) return v;
    return ClusterReduce(v, op, scratch);
  }

  // Every row kernel calls this last: a cluster team's blocks write into one
  // another's shared memory, so none may exit before all have reduced.
  template <bool kClusters>
  __device__ void Finish() const {
#if __CUDA_ARCH__ >= 900
    if constexpr (kClusters) {
      if (lanes > BlockThreads()) cooperative_groups::this_cluster().sync();
    }
#endif
  }

 private:
  // Each block pushes its result to slot `rank` of every block, on that block's
  // barrier, then waits on its own (a cluster barrier would stall) and combines the
  // results in rank order, the same bits everywhere. Two rounds suffice: a block
  // reuses one only after every block has read it and sent the round between.
  template <typename V, typename Op>
  __device__ V ClusterReduce(V v, Op op, RowScratch<V>& scratch) {
#if __CUDA_ARCH__ >= 900
    const int round = cluster_reductions & 1;
    const unsigned parity = (cluster_reductions >> 1) & 1;
    ++cluster_reductions;
    const int block_log2 = __ffs(static_cast<int>(BlockThreads())) - 1;
    const int blocks = lanes >> block_log2;
    V* results = scratch.cluster_results[round];
    uint64_t* arrivals = &scratch.cluster_arrivals[round];
    if (threadIdx.x == 0) hopper::ArriveExpectingBytes(arrivals, blocks * sizeof(V));
    const unsigned rank = lane >> block_log2;
    if (threadIdx.x < blocks) hopper::StoreToBlock(&results[rank], v, arrivals, threadIdx.x);
    hopper::WaitBarrier(arrivals, parity);
    // Lane i takes the result of rank i % blocks; the butterfly's order is the same in every warp.
    return WarpReduce(results[threadIdx.x & (blocks - 1)], op, blocks);
#else
    __trap();  // the launcher plans clusters only for code compiled for them
    return v;
#endif
  }
};

// One thread's chunk of a row: kChunk of the `count` packs from `first`, pack i
// being pack i * lanes + lane so the team's loads are contiguous. Offsets are
// 32-bit (a chunk has at most lanes * kChunk packs): 64-bit ones cost more per load.
template <typename T, int kPack, int kChunk>
struct RowChunk {
  using StoredPack = PackedBits<T, kPack>;
  StoredPack packs[kChunk];

  __device__ __forceinline__ void Load(const T* first, int count, const RowTeam& team) {
    const auto* first_packs = reinterpret_cast<const typename StoredPack::MemoryPack*>(first);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int p = team.PackOf(i);
      // Clamped, not skipped: a branch around the load sent 16-bit chunks to the stack.
      packs[i].Load(first_packs + (p < count ? p : 0));
    }
  }

  // visit(i, column, values) for each loaded pack i below `count`: its first
  // column counted from `first`, its values in float32.
  template <typename Visit>
  __device__ __forceinline__ void ForEach(int count, const RowTeam& team, Visit visit) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int p = team.PackOf(i);
      if (p < count) {
        float values[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k) values[k] = packs[i].Get(k);
        visit(i, p * kPack, values);
      }
    }
  }

  // `total` plus term(value) of the loaded values below `count`, in ForEach's order. A
  // select, not a branch, so that no pack's load is sunk behind the sums before it (term
  // runs on the packs past `count` too, and is dropped).
  template <typename Term>
  __device__ __forceinline__ float Sum(int count, const RowTeam& team, float total,
                                       Term term) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      float with_pack = total;
#pragma unroll
      for (int k = 0; k < kPack; ++k) with_pack += term(packs[i].Get(k));
      total = team.PackOf(i) < count ? with_pack : total;
    }
    return total;
  }
  __device__ __forceinline__ float Sum(int count, const RowTeam& team, float total) const {
    return Sum(count, team, total, [](float v) { return v; });
  }

  // The largest loaded value below `count`, as fmaxf finds it (a NaN dropped; -inf for
  // none); 16-bit values are compared exactly, two per word, cheaper than widened. A
  // branch per pack, since Sum's select let comparisons start before the last loads.
  __device__ __forceinline__ float Max(int count, const RowTeam& team) const {
    if constexpr (StoredPack::kPerWord == 2) {
      unsigned pair_max = ValueBits<T>::kNegInfPair;
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (team.PackOf(i) < count) {
#pragma unroll
          for (int w = 0; w < StoredPack::kWords; ++w)
            pair_max = ValueBits<T>::PairMax(pair_max, packs[i].words[w]);
        }
      }
      return fmaxf(ValueBits<T>::ToFloat(pair_max & 0xffffu), ValueBits<T>::ToFloat(pair_max >> 16));
    } else {
      float max = -INFINITY;
      ForEach(count, team, [&](int, int, const float(&v)[kPack]) {
#pragma unroll
        for (int k = 0; k < kPack; ++k) max = fmaxf(max, v[k]);
      });
      return max;
    }
  }

  __device__ __forceinline__ float Value(int i, int k) const { return packs[i].Get(k); }

  // Overwrites pack i with `values`, rounded to T.
  __device__ __forceinline__ void Replace(int i, const float (&values)[kPack]) {
    packs[i].Set(values);
  }
};

// f(first, count) for each chunk of `chunk_packs` packs of a streamed row of
// `packs` packs: `first` is the chunk's first pack, `count` its packs.
template <typename F>
__device__ __forceinline__ void ForEachChunkOf(int64_t packs, int chunk_packs, F f) {
  for (int64_t first = 0; first < packs; first += chunk_packs)
    f(first, static_cast<int>(packs - first < chunk_packs ? packs - first : chunk_packs));
}

// Where a kernel's teams count the rows they claimed (softmax's ClaimedRows): one
// unsigned per custom call (an output), so calls in flight never share it.
// LaunchRowPlan zeroes it where the plan claims rows and passes null elsewhere.
struct RowCounter {
  unsigned* claimed;
};

// Rounds `values` to T and stores them as one pack at `dst`, in global memory.
template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  PackedBits<T, kPack> packed;
  packed.Set(values);
  packed.Store(reinterpret_cast<typename PackedBits<T, kPack>::MemoryPack*>(dst));
}

}  // namespace jax_camp
