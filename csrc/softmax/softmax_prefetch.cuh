// What softmax's long rows, held in thread-block clusters, add to a RowTeam
// (../common/row_team.cuh): loading the team's next row into shared memory
// while it works on this one (NextRow), and claiming rows from a counter as
// teams free up (ClaimedRows). Hopper only, as the cluster teams are.
#pragma once

#include <cstdint>

#include "../common/hopper.cuh"
#include "../common/row_team.cuh"

namespace jax_camp::softmax {

// A block's share of its team's next row, loaded into shared memory while
// the team works on the row it holds (a row held whole, 16-byte packs). The
// share is the RowChunk that each thread would Load, laid out pack i of
// thread t at stripe[i * blockDim.x + t]: kChunk runs of blockDim.x packs,
// each contiguous in the row too, so that thread 0 starts one bulk copy (the
// TMA engine) a run and the block's other threads issue nothing: per-thread
// cp.async copies spent much of the forward's time issuing, waiting on the
// memory pipeline.
//
// The stripes live in the block's dynamic shared memory (NextRowStripes),
// aligned to 1024 bytes: where the bulk copies land changed their speed, and
// a few more bytes of static shared memory, moving the stripe off a 128-byte
// line, slowed the long-row forward.
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

// The shared memory of a block's ClaimedRows: the claim its team's first
// block pushed, and the barrier it counts in on.
struct ClaimSlot {
  uint64_t arrival;
  unsigned claim;
};

// The rows a prefetching cluster team (NextRow) takes, in turn. Static rows,
// every row_stride-th from the team's first, give every team as many rows, but
// the teams do not run equally fast, and the kernel ends with its slowest.
// With a counter,
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

}  // namespace jax_camp::softmax
