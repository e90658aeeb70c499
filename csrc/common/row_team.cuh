// Row kernels (reduce_sum, softmax forward and backward) are written once
// against a RowTeam: the threads that share one row. Short rows get a few lanes
// of a warp each (several rows per warp, reduced with shuffles); longer ones a
// few warps of a block that other rows share, where the op's policy allows
// (RowPolicy::shared_block_lanes), or the whole block (reduced through shared
// memory); rows too long for one block's registers get a thread-block cluster
// (Hopper), whose blocks exchange their partial results through distributed
// shared memory. Each thread holds a chunk of its row in registers (RowChunk):
// kChunk packs, loaded ahead of their use, so that many loads are in flight. A
// row that fits in one chunk per thread is read from memory once, however many
// passes the kernel makes. The launch plan (row_plan.h) picks the team.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "hopper.cuh"
#include "row_plan.h"

namespace jax_camp {

// The shared memory a row kernel declares for RowTeam::Reduce over values of
// type V, in two rounds used in turn (see BlockReduce, ClusterReduce): one
// per warp; and for a cluster team's reductions, every block's result
// (pushed there by each block of the team) and the barrier that counts them
// in.
template <typename V>
struct RowScratch {
  static constexpr int kMaxWarps = 32;
  V warps[2][kMaxWarps];
  alignas(8) V cluster_results[2][kMaxClusterBlocks];
  uint64_t cluster_arrivals[2];
};

// Whether the launcher gave this kernel dynamic shared memory: a kernel that
// can prefetch its next row does so exactly when LaunchRowPlan gave it
// somewhere to prefetch into, so the rule lives in the launcher alone.
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
  // The block's threads where the kernel is compiled for them, else 0 and
  // BlockThreads() reads blockDim.x.
  unsigned fixed_block_threads;
  int block_reductions = 0;
  int cluster_reductions = 0;

  // A team of up to a block's threads, or of team_lanes / BlockThreads()
  // blocks (a cluster, consecutive in x). Lanes and block sizes are powers of
  // two (the launcher plans no others), so the team's geometry is shifts:
  // divisions by runtime values multiplied a small kernel's instructions.
  // `spans_blocks`: whether the team may be a
  // cluster (the kernel's kClusters); a kernel whose teams never are leaves
  // out the geometry for them, which sat between its start and its first
  // load. A kernel compiled for its lanes may pass its block's threads too
  // (TeamBlockThreads), so that the geometry and the reduction's steps are
  // constants.
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

  // Where this thread's pack i of a chunk is among the chunk's packs
  // (RowChunk): the team's loads of pack i are contiguous.
  __device__ int PackOf(int i) const { return i * lanes + lane; }

  __device__ unsigned BlockThreads() const {
    return fixed_block_threads > 0 ? fixed_block_threads : blockDim.x;
  }

  // This thread's row in the block's current group of rows starting at
  // `group`. The loop over groups is uniform across the block (the cluster),
  // so every thread reaches every reduction; rows past the end are simply
  // empty.
  __device__ int64_t RowIn(int64_t group) const { return group + (threadIdx.x >> lanes_log2); }

  // f(group) for each of the block's groups of rows: with kTeamPerRow (a
  // launch with a team for every row, RowLaunch::TeamForEveryRow) the one
  // group, with no loop around it; else every row_stride-th from the first.
  template <bool kTeamPerRow, typename F>
  __device__ __forceinline__ void ForEachGroup(int64_t rows, F&& f) const {
    if constexpr (kTeamPerRow) {
      f(first_row);
    } else {
      for (int64_t group = first_row; group < rows; group += row_stride) f(group);
    }
  }

  // Every row kernel calls this first. A cluster team's blocks set up the
  // barriers that the others' results count in on (ClusterReduce); none may
  // push a result before every block has.
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

  // Every lane of the team returns op over the team's values (block and
  // cluster teams through `scratch`). kClusters: whether the team can be a
  // cluster; kSharedBlockTeams: whether a team of several warps can share
  // its block with other rows' teams (RowPolicy::kSharedBlockLanes). Code for
  // teams a kernel never has is left out, since even never run it cost
  // registers.
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

  // A cluster team's blocks write into one another's shared memory up to
  // their last reduction: none may exit before all are past it. Every row
  // kernel calls this last.
  template <bool kClusters>
  __device__ void Finish() const {
#if __CUDA_ARCH__ >= 900
    if constexpr (kClusters) {
      if (lanes > BlockThreads()) cooperative_groups::this_cluster().sync();
    }
#endif
  }

 private:
  // Each block pushes its result into every block's slot of its rank (thread
  // t to rank t), where it counts in on that block's barrier; each block
  // waits on its own barrier alone, then every thread combines the results
  // in rank order (the same float in every block). No cluster barrier: one
  // (with the memory fence it implies, which waits for the block's earlier
  // stores) and remote reads after it were a large share of the long-row
  // forward's stalls. Two rounds used in turn are enough: a
  // block pushes into a round again only after it has every block's result
  // of the round between, which each block pushed only after its threads had
  // all read that round's results (they reach the barrier of the block's
  // BlockReduce for the round between after those reads).
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
    // Lane i takes rank (i mod blocks)'s result and a butterfly over each
    // group of `blocks` lanes combines them, in the same order in every warp.
    return WarpReduce(results[threadIdx.x & (blocks - 1)], op, blocks);
#else
    __trap();  // the launcher plans clusters only for code compiled for them
    return v;
#endif
  }
};

// One thread's chunk of a row: kChunk packs of the `count` packs from
// `first` on (a whole row that the team holds, or a part of a streamed one),
// pack i being pack i * lanes + lane of them, so that a team's loads are
// contiguous. Offsets within a chunk are 32-bit (a chunk is at most lanes *
// kChunk packs): 64-bit ones took twice the instructions a load.
template <typename T, int kPack, int kChunk>
struct RowChunk {
  using StoredPack = PackedBits<T, kPack>;
  StoredPack packs[kChunk];

  __device__ __forceinline__ void Load(const T* first, int count, const RowTeam& team) {
    const auto* first_packs = reinterpret_cast<const typename StoredPack::MemoryPack*>(first);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int p = team.PackOf(i);
      // Clamped rather than skipped: a predicated-off load keeps the chunk in
      // registers, where a branch around it sent 16-bit chunks to the stack.
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

  // `total` plus the loaded packs below `count`, added in ForEach's order.
  // Every pack is added and a select keeps the sum only for the row's packs:
  // no branch for ptxas to sink a pack's load into, behind the sums before it.
  __device__ __forceinline__ float Sum(int count, const RowTeam& team, float total) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      float with_pack = total;
#pragma unroll
      for (int k = 0; k < kPack; ++k) with_pack += packs[i].Get(k);
      total = team.PackOf(i) < count ? with_pack : total;
    }
    return total;
  }

  // The largest of the loaded values below `count`, as fmaxf finds it (a NaN
  // dropped; -inf for none). 16-bit values are compared two to a word in
  // their own type, exactly, without being widened to float32 first: ptxas
  // folds two words (four values) into the running pair an instruction
  // (VHMNMX), where widening and comparing took two instructions a value.
  // A branch a pack, not Sum's select: with the select, ptxas placed the
  // first comparison before a held chunk's last two loads (at 64 registers
  // it reused a loaded pack's register), so those waited on the first, and
  // the kernel ran slower than widening.
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

// f(first, count) for the chunks of a row of `packs` packs that a team
// streams through chunks of `chunk_packs`: `first` the chunk's offset in
// packs, `count` its packs.
template <typename F>
__device__ __forceinline__ void ForEachChunkOf(int64_t packs, int chunk_packs, F f) {
  for (int64_t first = 0; first < packs; first += chunk_packs)
    f(first, static_cast<int>(packs - first < chunk_packs ? packs - first : chunk_packs));
}

// A count of the rows that a kernel's teams have claimed (softmax's
// ClaimedRows): one unsigned in global memory that comes with each call (an
// output of the custom call), so that calls in flight at once never share it.
// A kernel parameter; LaunchRowPlan zeroes it on the stream where the plan
// claims rows, and passes it null where it does not.
struct RowCounter {
  unsigned* claimed;
};

template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  PackedBits<T, kPack> packed;
  packed.Set(values);
  packed.Store(reinterpret_cast<typename PackedBits<T, kPack>::MemoryPack*>(dst));
}


}  // namespace jax_camp
