// Row kernels (reduce_sum, softmax forward and backward) are written once
// against a RowTeam: the threads that share one row. Short rows get a few lanes
// of a warp each (several rows per warp, reduced with shuffles); longer ones a
// few warps of a block that other rows share, where the kernel's policy allows
// (RowPolicy::kSharedBlockLanes), or the whole block (reduced through shared
// memory); rows too long for one block's registers get a thread-block cluster
// (Hopper), whose blocks exchange their partial results through distributed
// shared memory. Each thread holds a chunk of its row in registers: kChunk
// packs, loaded ahead of their use, so that many loads are in flight. A row
// that fits in one chunk per thread is read from memory once, however many
// passes the kernel makes; a cluster team can load its next row into shared
// memory while it works on this one (NextRow).
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "cuda_common.cuh"
#include "hopper.cuh"

namespace jax_camp {

// Hopper's largest cluster; past 8 blocks a kernel must opt in.
constexpr int kMaxClusterBlocks = 16;
constexpr int kMaxPortableClusterBlocks = 8;

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

// Cluster teams of at least this many blocks, of at least this many threads,
// prefetch their next row where their kernel can (RowKernel,
// PrefetchSharedBytes): the more blocks a row's reduction waits for, the
// longer an SM would sit without a load in flight. Float32 forward:
// 1024x262144 in clusters of 8 ran 603 us prefetching, 634 not; clusters of
// 4 (4096x131072) ran the same either way, of 2 (8192x65536) 3% slower
// (per-thread cp.async; docs/performance_notes.md, v7). The backward ran
// 2% slower prefetching in clusters of 8 and 16 blocks of 256 threads
// (8192x65536, 4096x131072 float32), 4-29% faster in blocks of 512 (v8).
constexpr int kMinPrefetchClusterBlocks = 8;
constexpr int kMinPrefetchBlockThreads = 512;

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
  // with divisions by runtime values, a 144x1280 reduce_sum executed three
  // times XLA's instructions (ncu). `spans_blocks`: whether the team may be a
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
  // (with the memory fence it implies, which waited for the block's earlier
  // stores) and remote reads after it cost 11% of the float32 forward's
  // stall samples at 1024x262144 (ncu). Two rounds used in turn are enough: a
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
  // it reused a loaded pack's register), so those waited on the first;
  // bfloat16 1000x8192 then ran 10% slower than widening
  // (benchmarks/results/2026-11-30-h200-v20-probes.txt, probe 2).
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

// A block's share of its team's next row, loaded into shared memory while
// the team works on the row it holds (a row held whole, 16-byte packs). The
// share is the RowChunk that each thread would Load, laid out pack i of
// thread t at stripe[i * blockDim.x + t]: kChunk runs of blockDim.x packs,
// each contiguous in the row too, so that thread 0 starts one bulk copy (the
// TMA engine) a run and the block's other threads issue nothing. With
// per-thread cp.async copies, 15% of the float32 forward's stall samples at
// 1024x262144 were their issue waiting on the memory pipeline (ncu); bulk
// copies, with ClusterReduce's barrier gone too, ran it in 570 us, not 618.
//
// The stripes live in the block's dynamic shared memory (NextRowStripes),
// aligned to 1024 bytes: where the bulk copies land changed their speed. A
// forward with 16 more bytes of static shared memory, which put the stripe
// 48 bytes past a 128-byte line instead of 32, ran float32 1024x262144 in
// 598 us, and in 534 with the stripe aligned to 1024 bytes; these kernels
// ran 552 us aligned against 554 (float32), 285 against 288 (bfloat16)
// (CUDA graphs on the H200, benchmarks/results/2026-11-30-h200-v18-probes.txt).
constexpr int kNextRowStripeAlignment = 1024;

// The block's dynamic shared memory, which a kernel's NextRow stripes take
// in turn (PrefetchSharedBytes sizes it).
__device__ __forceinline__ uint4* NextRowStripes() {
  extern __shared__ __align__(kNextRowStripeAlignment) uint4 next_row_stripes[];
  return next_row_stripes;
}

template <typename T, int kPack, int kChunk>
class NextRow {
 public:
  using Chunk = RowChunk<T, kPack, kChunk>;
  static_assert(sizeof(typename Chunk::StoredPack::MemoryPack) == 16,
                "bulk copies of 16-byte packs");

  // `stripe`: kChunk * blockDim.x packs of NextRowStripes(); `arrival`: a
  // barrier in shared memory. Every thread of the block constructs it.
  __device__ NextRow(uint4* stripe, uint64_t* arrival) : stripe_(stripe), arrival_(arrival) {
    if (threadIdx.x == 0) hopper::InitBarrier(arrival_, 1);
    __syncthreads();
  }

  // Starts loading this block's share of `row` (num_packs packs). Thread 0
  // does it all; every thread may call it.
  __device__ void Load(const T* row, int num_packs, const RowTeam& team) {
    if (threadIdx.x != 0) return;
    const auto* row_packs = reinterpret_cast<const uint4*>(row);
    // Thread 0's lane is the block's first in the team.
    auto run_packs = [&](int i) {
      const int left = num_packs - team.PackOf(i);
      return static_cast<unsigned>(left <= 0 ? 0 : left < blockDim.x ? left : blockDim.x);
    };
    unsigned bytes = 0;
    for (int i = 0; i < kChunk; ++i) bytes += run_packs(i) * 16;
    // The threads' reads of the stripe (TakeInto) come before the copies
    // that overwrite it.
    hopper::FenceBeforeBulkCopies();
    hopper::ArriveExpectingBytes(arrival_, bytes);
    // Pack PackOf(i), stepped to as pointers: as one int offset, ptxas laid
    // out the prefetching kernels' registers otherwise (untimed).
    for (int i = 0; i < kChunk; ++i) {
      const unsigned packs = run_packs(i);
      if (packs > 0)
        hopper::BulkLoad(stripe_ + i * blockDim.x, row_packs + i * team.lanes + team.lane,
                         packs * 16, arrival_);
    }
  }

  // Waits for the last Load and takes each thread's packs into `chunk`
  // (those past the row's end hold stale bits, which ForEach skips). Every
  // thread of the block calls it, before the next Load.
  __device__ void TakeInto(Chunk& chunk) {
    hopper::WaitBarrier(arrival_, phase_);
    phase_ ^= 1;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      chunk.packs[i].Load(reinterpret_cast<const typename Chunk::StoredPack::MemoryPack*>(
          stripe_ + i * blockDim.x + threadIdx.x));
    __syncthreads();  // every thread has its packs before thread 0 refills the stripe
  }

 private:
  uint4* stripe_;
  uint64_t* arrival_;
  unsigned phase_ = 0;
};

// A count of the rows that prefetching cluster teams have claimed (ClaimedRows):
// one unsigned in global memory that comes with each call (an output of the
// custom call), so that calls in flight at once never share it. A kernel
// parameter; LaunchRowPlan zeroes it on the stream where the plan claims rows,
// and passes it null where it does not.
struct RowCounter {
  unsigned* claimed;
};

// The shared memory of a block's ClaimedRows: the claim its team's first
// block pushed, and the barrier it counts in on.
struct ClaimSlot {
  uint64_t arrival;
  unsigned claim;
};

// The rows a prefetching cluster team (NextRow) takes, in turn. Static rows,
// every row_stride-th from the team's first, give every team as many rows, but
// the teams do not run equally fast: float32 1024x262144's 15 clusters of
// 68-69 rows ended between 474 and 559 us, bfloat16's 30 in two groups,
// 186-222 and 262-291 us, and the kernel ends with its slowest
// (benchmarks/results/2026-11-30-h200-v18-probes.txt, probe 2). With a counter,
// a team takes its first two rows so, and claims each later one from the
// counter, a row ahead of its prefetch: the team's first thread claims a row,
// pushes the claim into every block of the team after the next row's
// reduction (whose barrier shows each block has read the claim before), and
// claims the next. A claim has a whole row's time to return.
class ClaimedRows {
 public:
  // Every thread of the block constructs it, before RowTeam::Begin, whose
  // cluster barrier publishes the slot's barrier to the other blocks.
  __device__ ClaimedRows(RowCounter counter, ClaimSlot* slot, const RowTeam& team, int64_t rows)
      : counter_(counter.claimed), slot_(slot), stride_(team.row_stride), rows_(rows) {
    if (counter_ == nullptr) return;
    // A claim is pushed for the team's third row if it has a second.
    const bool claims = team.first_row + stride_ < rows_;
    if (threadIdx.x == 0) {
      hopper::InitBarrier(&slot_->arrival, 1);
      if (claims) hopper::ArriveExpectingBytes(&slot_->arrival, sizeof(unsigned));
    }
    if (team.lane == 0 && claims) held_ = atomicAdd(counter_, 1u);
    pushes_ = team.lane == 0 ? team.lanes / static_cast<int>(team.BlockThreads()) : 0;
  }

  // After the reduction of the row before `following` (the row the team
  // prefetches): hands the team the row after `following`.
  __device__ void Hand(int64_t following) {
    if (pushes_ == 0 || following >= rows_) return;
    for (int rank = 0; rank < pushes_; ++rank)
      hopper::StoreToBlock(&slot_->claim, held_, &slot_->arrival, rank);
    if (Row(held_) < rows_) held_ = atomicAdd(counter_, 1u);
  }

  // The row after `following`, in every thread; past the rows if there is
  // none. After Hand, before the team's next reduction.
  __device__ int64_t After(int64_t following) {
    if (counter_ == nullptr) return following + stride_;
    if (following >= rows_) return rows_;
    hopper::WaitBarrier(&slot_->arrival, parity_);
    parity_ ^= 1;
    const int64_t row = Row(slot_->claim);
    // Another claim comes (Hand) only while the rows last: a block does not
    // exit with its barrier waiting for one, where the next block on the SM
    // would initialize its own.
    if (threadIdx.x == 0 && row < rows_)
      hopper::ArriveExpectingBytes(&slot_->arrival, sizeof(unsigned));
    return row;
  }

 private:
  // The rows before the claimed ones are every team's first two.
  __device__ int64_t Row(unsigned claim) const { return 2 * stride_ + claim; }

  unsigned* counter_;
  ClaimSlot* slot_;
  int64_t stride_;
  int64_t rows_;
  unsigned held_ = 0;
  int pushes_ = 0;  // the team's blocks, in the thread that claims; else 0
  unsigned parity_ = 0;
};

template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  PackedBits<T, kPack> packed;
  packed.Set(values);
  packed.Store(reinterpret_cast<typename PackedBits<T, kPack>::MemoryPack*>(dst));
}

// Packs per chunk for a chunk of about `chunk_elements` values: the same
// number of values, so the same registers, whatever the dtype; unpacked
// (scalar) rows take a quarter as many, each load being that much narrower.
__host__ __device__ constexpr int ChunkPacks(int chunk_elements, int pack) {
  return pack == 1 ? chunk_elements / 4 : chunk_elements / pack;
}

// A row kernel's launch limits: the most values a thread holds
// (kMaxChunkElements), the most threads a block (kMaxThreads, the kernel's
// __launch_bounds__), the lanes a row it prefers (kTeamLanes; see RowLanes),
// the block size of its cluster teams (kClusterBlockThreads; 0 for none:
// rows longer than a block holds are then streamed), the fewest lanes a
// row (kMinLanes; see RowLanes), the most lanes a row whose team shares a
// block with other rows' teams (kSharedBlockLanes: 32, a warp's, or 64 or
// 128; its kernel then passes kSharedBlockTeams to RowTeam::Reduce), the
// threads of such a block (kRowsBlockThreads, a power of two, at least
// kSharedBlockLanes and a warp), the most lanes a row that a grid too
// small to fill the SMs gives its rows (kSmallGridLanes), the most packs
// a thread down to which a busy grid halves its rows' lanes
// (kBusyGridMaxChunk; 0: it does not), and the most packs a thread that a
// grid not busy keeps in 16-byte packs, doubling its rows' lanes up to
// kSharedBlockLanes while a thread would hold more (kQuietGridMaxChunk; 0: it
// does not; see PlanRowLaunch for all three).
template <int kMaxChunkElementsValue, int kMaxThreadsValue, int kTeamLanesValue,
          int kClusterBlockThreadsValue = 0, int kMinLanesValue = 8,
          int kSharedBlockLanesValue = 32, int kRowsBlockThreadsValue = 256,
          int kSmallGridLanesValue = 128, int kBusyGridMaxChunkValue = 0,
          int kQuietGridMaxChunkValue = 0>
struct RowPolicy {
  static constexpr int kMaxChunkElements = kMaxChunkElementsValue;
  static constexpr int kMaxThreads = kMaxThreadsValue;
  static constexpr int kTeamLanes = kTeamLanesValue;
  static constexpr int kClusterBlockThreads = kClusterBlockThreadsValue;
  static constexpr bool kClusters = kClusterBlockThreads > 0;
  static constexpr int kMinLanes = kMinLanesValue;
  static constexpr int kSharedBlockLanes = kSharedBlockLanesValue;
  static constexpr bool kSharedBlockTeams = kSharedBlockLanes > 32;
  static constexpr int kRowsBlockThreads = kRowsBlockThreadsValue;
  static constexpr int kSmallGridLanes = kSmallGridLanesValue;
  static constexpr int kBusyGridMaxChunk = kBusyGridMaxChunkValue;
  static constexpr int kQuietGridMaxChunk = kQuietGridMaxChunkValue;
  static_assert(kRowsBlockThreads >= kSharedBlockLanes && kRowsBlockThreads >= 32 &&
                    (kRowsBlockThreads & (kRowsBlockThreads - 1)) == 0,
                "blocks that teams share hold whole teams and warps");
  static_assert(kMinLanes >= 1, "PlanRowLaunch halves lanes down to kMinLanes and divides by them");
};

// A policy's limits in packs, for one pack size and device.
struct RowLimits {
  int max_chunk;           // packs a thread
  int max_threads;         // threads a block
  int team_lanes;          // preferred lanes a row
  int cluster_threads;     // threads a block of a cluster team; 0: no clusters
  int min_lanes;           // fewest lanes a row
  int shared_block_lanes;  // most lanes a row that share a block with other rows
  int rows_block_threads;  // threads a block that such rows share
  int small_grid_lanes;    // most lanes a row on grids too small to fill the SMs
  int busy_grid_max_chunk; // most packs a thread that busy grids halve lanes to; 0: none
  int quiet_grid_max_chunk; // most packs a thread that other grids keep; 0: no limit
};

// The threads of the blocks that teams of `lanes` run in outside clusters:
// teams of up to `shared_block_lanes` share blocks of `rows_block_threads`,
// larger ones take a block each. The planner (PlanRowLaunchWithLanes) and the
// kernels compiled for their lanes both take it from here.
__host__ __device__ constexpr int TeamBlockThreads(int lanes, int shared_block_lanes,
                                                   int rows_block_threads) {
  return lanes <= shared_block_lanes ? rows_block_threads : lanes;
}
template <typename Policy>
__host__ __device__ constexpr int TeamBlockThreads(int lanes) {
  return TeamBlockThreads(lanes, Policy::kSharedBlockLanes, Policy::kRowsBlockThreads);
}

// For kernels compiled for `architecture` (KernelArchitecture): cluster
// teams only where that code has them. kQuietGridMaxChunk holds for 16-byte
// packs only, what it was measured on.
template <typename Policy>
RowLimits LimitsOf(int pack, int architecture) {
  return {ChunkPacks(Policy::kMaxChunkElements, pack), Policy::kMaxThreads, Policy::kTeamLanes,
          HasClusters(architecture) ? Policy::kClusterBlockThreads : 0, Policy::kMinLanes,
          Policy::kSharedBlockLanes, Policy::kRowsBlockThreads, Policy::kSmallGridLanes,
          Policy::kBusyGridMaxChunk, pack > 1 ? Policy::kQuietGridMaxChunk : 0};
}

// How a team covers its row: held in its registers, by warp lanes or a
// block, or by a cluster of blocks; or streamed through them, when the row is
// longer than the team's chunks hold. Kernels may be compiled for each apart.
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

// The row kernels' shared launch policy, for rows of `num_packs` packs, from
// timing each kernel under several plans on the H200
// (scripts/row_policy_bench.cu; docs/performance_notes.md, v3 to v6):
// - lanes a row: at least `team_lanes` (32 to 128, each kernel's fastest)
//   while each still gets 4 packs (64 bytes in flight a thread), more where
//   the row needs them to fit `max_chunk` packs a thread, and at least
//   `min_lanes`; a power of two. 8 lanes make 128 bytes of a row per warp
//   load (with 2 lanes a row each warp load touched 16 rows' cache lines);
//   the forward takes 4, with 4 packs each, where rows are that short
//   (bfloat16 262144x128: 33.2 us against 34.5 in 8 lanes, in CUDA graphs).
//   Up to 32 lanes share a warp with other rows, and up to `shared_block_lanes`
//   a block of `rows_block_threads`; beyond, a block takes each row: small
//   blocks, whose load, reduce and store phases overlap with other blocks',
//   beat large ones.
//   Rows that need more lanes than `cluster_threads` take a cluster of blocks
//   of that size, so that two or more blocks still share each SM, up to
//   kMaxClusterBlocks, then clusters of that many larger blocks, up to
//   `max_threads` (bfloat16 1024x262144 backward: 514 us held in 16 blocks
//   of 512, 634 us streamed). Rows longer still are streamed through one
//   block of `max_threads`, chunk after chunk.
// - chunk: for a team within a block, the fewest packs a thread that hold
//   the row, so that short rows keep few registers and many warps resident,
//   and no thread loads more than one pack it does not use. Rounded up to a
//   power of two, as before, 3 of the 8 packs a thread of bfloat16 1008x1280
//   reduce_sum fell past the row, and ptxas issued the chunk's loads in two
//   rounds: 2.49 us in CUDA graphs, 2.07 with 5 packs
//   (docs/performance_notes.md, v14). Clusters and streams take the most
//   (see LaunchRowKernelAs).
// - grid: one team a row, capped at kGridWaves waves of resident blocks
//   (kClusterGridWaves for clusters); the kernels loop over the remaining
//   rows. Grids too small to fill the SMs take more lanes a row
//   (PlanRowLaunch).
inline int RowLanes(int64_t num_packs, const RowLimits& limits) {
  constexpr int64_t kMinChunk = 4;
  const int64_t max_lanes =
      int64_t{limits.max_threads} * (limits.cluster_threads > 0 ? kMaxClusterBlocks : 1);
  const int64_t lanes_for_chunk = (num_packs + limits.max_chunk - 1) / limits.max_chunk;
  if (lanes_for_chunk > max_lanes) return limits.max_threads;  // streamed
  const int64_t lanes_for_overlap =
      std::min<int64_t>(limits.team_lanes, (num_packs + kMinChunk - 1) / kMinChunk);
  const int64_t lanes_wanted = std::max(
      {lanes_for_chunk, lanes_for_overlap, std::min<int64_t>(num_packs, limits.min_lanes)});
  int lanes = 1;
  while (lanes < lanes_wanted) lanes *= 2;
  return lanes;
}

// A grid's cap in waves of resident blocks (2048 threads an SM); the
// kernels loop over the rows past it. Against v14's 4 waves, 8 ran held rows
// within a block up to 2% faster on the H200 in CUDA graphs (float32 forward
// 65536x1024 131.1 -> 128.8 us, 32768x2048 135.5 -> 133.3, 1048576x32 66.3 ->
// 65.0; backward 65536x1024 186.7 -> 185.3) and at most 0.7% slower elsewhere.
// A team a row, no cap, lost up to 9% on 32-column rows (reduce_sum
// 1048576x32 37.1 -> 40.3 us), whose blocks have little work each. Cluster
// teams keep 4 waves: at 8 the bfloat16 backward at 4096x32768 ran up to 1.3%
// slower, with a cluster a row 11% slower
// (benchmarks/results/2026-11-30-h200-v15-probes.txt, probe 2).
constexpr int kGridWaves = 8;
constexpr int kClusterGridWaves = 4;

// The plan for a given number of lanes a row (a power of two).
inline RowLaunch PlanRowLaunchWithLanes(int64_t rows, int64_t num_packs, int lanes,
                                        const RowLimits& limits, int sm_count) {
  const bool held = int64_t{lanes} * limits.max_chunk >= num_packs;
  int threads = TeamBlockThreads(lanes, limits.shared_block_lanes, limits.rows_block_threads);
  int cluster = 1;
  if (limits.cluster_threads > 0 && lanes > limits.cluster_threads && held) {
    threads = std::max(limits.cluster_threads, lanes / kMaxClusterBlocks);
    cluster = lanes / threads;
  }  // streamed rows keep to one block
  const int chunk = held && cluster == 1
                        ? static_cast<int>((num_packs + lanes - 1) / lanes)
                        : limits.max_chunk;
  const int64_t rows_per_block = std::max(1, threads / lanes);
  const int64_t wanted = (rows + rows_per_block - 1) / rows_per_block * cluster;
  const int waves = cluster > 1 ? kClusterGridWaves : kGridWaves;
  const int64_t clusters_cap = int64_t{sm_count} * (2048 / threads) * waves / cluster;
  const int64_t cap = std::max<int64_t>(clusters_cap, 1) * cluster;
  const RowLayout layout = !held        ? RowLayout::kStreamed
                           : cluster > 1 ? RowLayout::kHeldInCluster
                                         : RowLayout::kHeld;
  return {chunk, lanes, static_cast<int>(std::min(wanted, cap)), threads, cluster, layout, rows};
}

// Grids of fewer threads than this an SM give their rows more lanes (see
// PlanRowLaunch), up to the policy's kSmallGridLanes and one pack a lane;
// grids of more than kBusyGridThreadsPerSm, fewer.
constexpr int kSmallGridThreadsPerSm = 128;
constexpr int kBusyGridThreadsPerSm = 1024;

// RowLanes' lanes, more where the rows are too few to give each SM
// kSmallGridThreadsPerSm threads. Such a grid finishes when its slowest
// thread does, a chain of dependent loads, adds and shuffles, and more lanes
// shorten it: in CUDA graphs on the H200, 144x1280 bfloat16 reduce_sum 2.04 ->
// 1.81 us (32 -> 128 lanes; since v16's kernels, 64 lanes are faster still,
// see reduce_sum's Policy), softmax backward 2.03 -> 1.93 (64 -> 128),
// float32 reduce_sum 1.71 -> 1.68; every other shape within 1.5%. Applied to
// more rows it lost (bfloat16 2032x2304 reduce_sum 3.42 -> 3.76 us at 128
// lanes) (benchmarks/results/2026-11-30-h200-v10-probes.txt, probes 5 and 6).
// Where the rows are many enough to give each SM more than
// kBusyGridThreadsPerSm threads, a policy with kBusyGridMaxChunk halves its
// rows' lanes while each thread still holds at most that many packs (and
// the row at least min_lanes): threads are then plentiful, and each one's
// longer chunk puts more bytes in flight and leaves its team fewer to
// combine. The softmax forward at 6 packs (96 bytes), in CUDA graphs on the
// H200: bfloat16 2032x2304 5.51 -> 4.91 us, 4080x1536 5.93 -> 5.53, 4096x1280
// 5.92 -> 4.92, 4080x2304 10.14 -> 8.50, 3000x3072 8.80 -> 7.88, float32
// 4096x1280 9.22 -> 8.65, 2032x1280 4.77 -> 4.55; 0.7-1.3% slower at bfloat16
// 65536x1536 and float32 4080x1536; to 8 packs and more it lost (bfloat16
// 8192x2048 17.75 -> 18.05, 784x3840 3.78 -> 4.41)
// (benchmarks/results/2026-11-30-h200-v17-probes.txt, probe 4).
// Other grids, with a policy's kQuietGridMaxChunk, double their rows' lanes
// while a thread would hold more packs than that, up to the lanes that share
// a block: their SMs have room for the threads, and a shorter chunk is loaded
// in one round (see reduce_sum's Policy).
inline RowLaunch PlanRowLaunch(int64_t rows, int64_t num_packs, const RowLimits& limits,
                               int sm_count) {
  int lanes = RowLanes(num_packs, limits);
  while (lanes < limits.small_grid_lanes && 2 * lanes <= num_packs &&
         rows * lanes < int64_t{sm_count} * kSmallGridThreadsPerSm)
    lanes *= 2;
  while (lanes / 2 >= limits.min_lanes &&
         rows * lanes > int64_t{sm_count} * kBusyGridThreadsPerSm &&
         (num_packs + lanes / 2 - 1) / (lanes / 2) <= limits.busy_grid_max_chunk)
    lanes /= 2;
  while (limits.quiet_grid_max_chunk > 0 && 2 * lanes <= limits.shared_block_lanes &&
         rows * lanes <= int64_t{sm_count} * kBusyGridThreadsPerSm &&
         (num_packs + lanes - 1) / lanes > limits.quiet_grid_max_chunk)
    lanes *= 2;
  return PlanRowLaunchWithLanes(rows, num_packs, lanes, limits, sm_count);
}

// f(IntTag<chunk>{}), for 1 <= chunk <= kMaxChunk.
template <int kMaxChunk, typename F>
ffi::Error DispatchChunk(int chunk, F f) {
  if constexpr (kMaxChunk > 1) {
    if (chunk < kMaxChunk) return DispatchChunk<kMaxChunk - 1>(chunk, f);
  }
  return f(IntTag<kMaxChunk>{});
}

// A row kernel, and the shared memory a thread that it prefetches its team's
// next row into (NextRow); 0 for none.
template <typename... Params>
struct RowKernel {
  void (*function)(Params...);
  int prefetch_bytes_per_thread;
};
template <typename... Params>
RowKernel(void (*)(Params...), int) -> RowKernel<Params...>;

// The dynamic shared memory a block of `plan` gets for a kernel that
// prefetches `bytes_per_thread`: none outside clusters of many large blocks
// (kMinPrefetchClusterBlocks, kMinPrefetchBlockThreads).
inline int PrefetchSharedBytes(const RowLaunch& plan, int bytes_per_thread) {
  const bool prefetches =
      plan.cluster >= kMinPrefetchClusterBlocks && plan.threads >= kMinPrefetchBlockThreads;
  return prefetches ? bytes_per_thread * plan.threads : 0;
}

// The launch of `plan` on `stream` with `shared_bytes` of dynamic shared
// memory, in clusters of plan.cluster blocks where that is more than one;
// `cluster_dims` holds that attribute, and must outlive the configuration.
inline cudaLaunchConfig_t RowLaunchConfig(const RowLaunch& plan, int shared_bytes,
                                          cudaStream_t stream,
                                          cudaLaunchAttribute& cluster_dims) {
  cluster_dims = {};
  cluster_dims.id = cudaLaunchAttributeClusterDimension;
  cluster_dims.val.clusterDim = {static_cast<unsigned>(plan.cluster), 1, 1};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(plan.blocks);
  config.blockDim = dim3(plan.threads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &cluster_dims;
  config.numAttrs = plan.cluster > 1 ? 1 : 0;
  return config;
}

// Readies `kernel` for `plan`'s clusters where they need it, past 8 blocks
// or with `prefetch_bytes` of shared memory to prefetch into: each a function
// attribute that a launch or an occupancy query needs set first. Sets them
// and, for a kernel that prefetches (whose grid LaunchRowPlan sizes by it),
// asks the driver how many such clusters the device holds at once (0 for
// others), once per kernel, device and plan shape: the handlers run on XLA's
// launch path (as CachedDeviceAttribute), and the attributes last as long as
// the context.
template <typename... Params>
ffi::ErrorOr<int> PrepareClusterKernel(const char* what, const RowLaunch& plan,
                                       void (*kernel)(Params...), int prefetch_bytes) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "querying the device"));
  using Key = std::tuple<const void*, int, int, int, int>;
  const Key key{reinterpret_cast<const void*>(kernel), device, plan.cluster, plan.threads,
                prefetch_bytes};
  static std::mutex mutex;
  static std::map<Key, int> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = known.find(key); found != known.end()) return found->second;
  }
  if (plan.cluster > kMaxPortableClusterBlocks)
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (status == cudaSuccess && prefetch_bytes > 0)
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  prefetch_bytes);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, what));
  int clusters = 0;
  if (prefetch_bytes > 0) {
    cudaLaunchAttribute cluster_dims;
    const cudaLaunchConfig_t config =
        RowLaunchConfig(plan, prefetch_bytes, nullptr, cluster_dims);
    status = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "sizing the grid"));
  }
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, clusters);
  return clusters;
}

// Clusters claim their rows (ClaimedRows) only where each would take more
// than this many: the counter's memset and the claims cost a few
// microseconds a call, which uneven clusters repay only over many rows. The
// softmax forward on the H200, in CUDA graphs, claimed against static rows:
// 3-5% faster at 1024x262144 (float32 551 -> 536 us, bfloat16 285 -> 275;
// 64 and 34 rows a cluster), 512x524288, 1000x500000, 2048x200000 and
// bfloat16 2000x140000 and 3000x150000, float32 3000x150000 1% (187);
// slower by 0.7% at float32 256x262144 (16 a cluster), by 2-14% at 40-100
// rows of 150000, 64 of 262144 and float32 24x300000 (2-6 a cluster); and by
// 0.8% at float32 2000x140000 (125), which this rule still lets claim
// (benchmarks/results/2026-11-30-h200-v19-probes.txt, probe 1).
constexpr int kMinRowsPerClaimingCluster = 16;

// A kernel's argument as launched: a RowCounter zeroed on the stream where the
// kernel claims rows (see LaunchRowPlan), else null; anything else as it is.
template <typename Arg>
ffi::Error PrepareRowArg(Arg&, bool /*claims*/, cudaStream_t) {
  return ffi::Error::Success();
}
inline ffi::Error PrepareRowArg(RowCounter& counter, bool claims, cudaStream_t stream) {
  if (!claims) {
    counter.claimed = nullptr;
    return ffi::Error::Success();
  }
  return CheckCuda(cudaMemsetAsync(counter.claimed, 0, sizeof(unsigned), stream),
                   "zeroing the row counter");
}

// kernel<<<plan>>>(args..., plan.lanes), in clusters of plan.cluster blocks.
// A kernel that prefetches (PrefetchSharedBytes) gets one grid of resident
// clusters, each taking its rows in turn, so that every row after a
// cluster's first is loaded while the one before it is worked on (float32
// 1024x262144 forward: 603 us, against 647 with the plan's grid of 264
// clusters). Where such a grid's clusters would take more than
// kMinRowsPerClaimingCluster rows each, a kernel given a RowCounter claims
// them (ClaimedRows).
template <typename... Params, typename... Args>
ffi::Error LaunchRowPlan(const char* what, cudaStream_t stream, const RowLaunch& plan,
                         RowKernel<Params...> kernel, Args... args) {
  const int prefetch_bytes = PrefetchSharedBytes(plan, kernel.prefetch_bytes_per_thread);
  int resident_clusters = 0;
  if (plan.cluster > kMaxPortableClusterBlocks || prefetch_bytes > 0) {
    const auto resident = PrepareClusterKernel(what, plan, kernel.function, prefetch_bytes);
    if (!resident.has_value()) return resident.error();
    resident_clusters = *resident;
  }
  const bool claims =
      resident_clusters > 0 &&
      plan.rows > int64_t{kMinRowsPerClaimingCluster} * resident_clusters;
  ffi::Error prepared;
  (void)((prepared = PrepareRowArg(args, claims, stream)).success() && ...);  // to a failure
  if (prepared.failure()) return prepared;
  cudaLaunchAttribute cluster_dims;
  cudaLaunchConfig_t config = RowLaunchConfig(plan, prefetch_bytes, stream, cluster_dims);
  if (resident_clusters > 0)  // a prefetching kernel's
    config.gridDim.x = std::min(plan.blocks, resident_clusters * plan.cluster);
  return CheckCuda(cudaLaunchKernelEx(&config, kernel.function, args..., plan.lanes), what);
}

template <typename... Params, typename... Args>
ffi::Error LaunchRowPlan(const char* what, cudaStream_t stream, const RowLaunch& plan,
                         void (*kernel)(Params...), Args... args) {
  return LaunchRowPlan(what, stream, plan, RowKernel<Params...>{kernel, 0}, args...);
}

// Launches select_kernel(IntTag<pack>, IntTag<chunk>, RowLayoutTag<layout>,
// plan) (a kernel or a RowKernel; the plan is for kernels compiled for a team
// size or a team a row) under `plan` with args..., plan.lanes. A team gets more
// lanes than a block only once its threads hold the most they may, so rows
// are streamed or held in clusters only at the largest chunk, and only that
// chunk has kernels for those layouts: a kernel that holds its rows in one
// block can then keep to the registers that this needs.
template <typename Policy, int kPack, typename SelectKernel, typename... Args>
ffi::Error LaunchRowKernelAs(const char* what, cudaStream_t stream, const RowLaunch& plan,
                             SelectKernel select_kernel, Args... args) {
  constexpr int kMaxChunk = ChunkPacks(Policy::kMaxChunkElements, kPack);
  auto launch = [&](auto chunk, auto layout) {
    return LaunchRowPlan(what, stream, plan,
                         select_kernel(IntTag<kPack>{}, chunk, layout, plan), args...);
  };
  return DispatchChunk<kMaxChunk>(plan.chunk, [&](auto chunk) {
    if constexpr (decltype(chunk)::value == kMaxChunk) {
      if (plan.layout == RowLayout::kStreamed)
        return launch(chunk, RowLayoutTag<RowLayout::kStreamed>{});
      if (plan.layout == RowLayout::kHeldInCluster)
        return launch(chunk, RowLayoutTag<RowLayout::kHeldInCluster>{});
    }
    // A kernel for held rows would run a cluster's blocks as separate teams.
    if (plan.layout != RowLayout::kHeld)
      return ffi::Error::Internal(std::string(what) + ": no kernel for this plan");
    return launch(chunk, RowLayoutTag<RowLayout::kHeld>{});
  });
}

// Plans a row kernel's launch by its RowPolicy and launches it (see
// LaunchRowKernelAs), in 128-bit packs when the rows are 16-byte aligned.
template <typename T, typename Policy, typename SelectKernel, typename... Args>
ffi::Error LaunchRowKernel(const char* what, cudaStream_t stream, int64_t rows, int64_t cols,
                           bool aligned, SelectKernel select_kernel, Args... args) {
  auto sm_count = SmCount();
  if (!sm_count.has_value()) return sm_count.error();
  // Code compiled for Hopper loads only on GPUs that launch clusters.
  auto architecture = KernelArchitecture();
  if (!architecture.has_value()) return architecture.error();
  constexpr int kPack = kPack128<T>;
  const bool packed = aligned && cols % kPack == 0;
  const int pack = packed ? kPack : 1;
  const RowLaunch plan =
      PlanRowLaunch(rows, cols / pack, LimitsOf<Policy>(pack, *architecture), *sm_count);
  return packed ? LaunchRowKernelAs<Policy, kPack>(what, stream, plan, select_kernel, args...)
                : LaunchRowKernelAs<Policy, 1>(what, stream, plan, select_kernel, args...);
}

}  // namespace jax_camp
