// softmax over the last dim, and its backward. A team of threads (a few
// lanes of a warp, or the block; see row_team.cuh) shares each row; each
// thread works through its share in register chunks; arithmetic is float32.
//
// Forward, when the row fits in the team's registers (the launch policy sees
// to it up to 524288 columns): one read of x; each thread takes the max of
// its values and exp(x - that max) once per element, kept in registers in
// x's place, and adds them up; one team reduction combines the threads'
// (max, sum) pairs into the row's; each thread scales its exps by
// exp(its max - row max) / sum and writes them. One exp per element matters:
// for 16-bit inputs the SFU's exp2 rate comes close to HBM's with two.
// Longer rows are streamed, two passes over x instead of the textbook three:
// each thread keeps an online (max, sum of exp(x - max)) over its share, a
// chunk at a time, rescaling its sum when its max grows (a CompensatedSum, as
// a share of a long row is thousands of terms); the team combines the pairs
// as above. The second pass writes exp(x - max) / sum. Subtracting the max keeps
// exp from overflowing on large logits and does not change the result: it
// cancels between numerator and sum.
//
// log_softmax is the same forward with another output: x - max - log(sum),
// from x itself rather than the exps, so that a log-probability far below
// float32's smallest exp (-1000, say) stays exact and finite.
//
// Backward: one reduction then one write pass over the forward's output y and
// the cotangent g, so nothing of the forward is recomputed. What is summed
// and what is written are the op's (RowGradient): softmax's dx = y * (g -
// sum(g * y)) is SoftmaxGradient; log_softmax's are in ../log_softmax.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/compensated_sum.cuh"
#include "softmax_mask.cuh"
#include "softmax_policy.h"
#include "softmax_prefetch.cuh"

namespace jax_camp::softmax {


// log2(e) in float32, and what that rounding leaves out (PreciseExp).
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLog2eRest = 1.925963e-08f;  // log2(e) - kLog2e
constexpr float kLn2 = 0.6931471805599453f;  // 1 / log2(e)

// 2^v by the hardware's exp2. The flush-to-zero form is one instruction;
// exp2f's, three more that keep results below 2^-126 (probabilities under
// 1e-38 of the row's largest) as denormals instead of zero.
__device__ __forceinline__ float Exp2(float v) {
  float result;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(v));
  return result;
}

// exp(v) as one multiply and the hardware's exp2: the error this adds is
// below float32 softmax's tolerance, and it keeps 16-bit inputs memory-bound.
__device__ __forceinline__ float Exp(float v) { return Exp2(v * kLog2e); }

// exp(v) for log-probabilities v (at most about 0, never +inf), far from 0:
// about -15 in a row of millions, where Exp's rounding of v * log2(e) costs
// about |v| * 6e-8 of relative error. What that product and log2(e)'s float32
// rounding lose is added back, to first order, after the exp2: a few
// instructions more than Exp, and fewer registers than expf's range reduction.
// A result flushed to 0 (-inf among them, whose correction would be NaN) is
// returned as it is; the test on the result, not on v, kept ptxas from
// spilling in the tangent's kernels.
__device__ __forceinline__ float PreciseExp(float v) {
  const float scaled = v * kLog2e;
  const float lost = fmaf(v, kLog2e, -scaled) + v * kLog2eRest;
  const float result = Exp2(scaled);
  return result == 0.f ? 0.f : fmaf(result, lost * kLn2, result);
}

// exp(old_max - new_max) with the equal case (both -inf, an all -inf share so
// far) kept finite; NaN and +inf still propagate as in jax.nn.softmax.
__device__ __forceinline__ float RescaleFactor(float old_max, float new_max) {
  return old_max == new_max ? 1.f : Exp(old_max - new_max);
}

// exp(v - running_max) for the running sum. While the running max is still
// -inf every value seen is -inf and adds nothing; exp(-inf - -inf) would be a
// NaN that no later element could undo. (A row that is -inf throughout still
// comes out NaN, as in jax.nn.softmax, from the final exp(x - max).)
__device__ __forceinline__ float ShiftedExp(float v, float running_max) {
  return running_max == -INFINITY ? 0.f : Exp(v - running_max);
}

// A share of a row's (max, sum of exp(x - max)). The team combines its
// threads' pairs in one reduction, each sum rescaled to the larger max: one
// round of warp shuffles or block barriers where a max and then a sum took
// two.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum ShuffleXor(MaxSum v, int offset) {
  return {jax_camp::ShuffleXor(v.max, offset), jax_camp::ShuffleXor(v.sum, offset)};
}

// Commutative (a sum rescaled by the same factor either way round), so that
// every lane of a butterfly ends with the same bits.
struct MaxSumOp {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float max = MaxPropagateNan(a.max, b.max);
    return {max, a.sum * RescaleFactor(a.max, max) + b.sum * RescaleFactor(b.max, max)};
  }
};

// What a forward kernel writes: probabilities, or their logs (log_softmax).
enum class Output { kSoftmax, kLogSoftmax };

// Writes log_softmax's (x - max) - log(sum) for the chunk's `count` packs of
// x, and -inf where `keep` masks a value out. x - max comes first, exact, as in
// jax.nn.log_softmax: adding the log to the max first would round a large
// max's last digits away. A row of -inf comes out NaN (-inf - -inf), a NaN or
// +inf makes the sum and so the row NaN.
template <typename T, int kPack, int kChunk, typename Keep>
__device__ __forceinline__ void StoreLogSoftmax(const RowChunk<T, kPack, kChunk>& chunk,
                                                const Keep& keep, T* y, int count,
                                                const RowTeam& team, MaxSum row) {
  const float log_sum = logf(row.sum);
  chunk.ForEach(count, team, [&](int i, int col, const float(&v)[kPack]) {
    float out[kPack];
#pragma unroll
    for (int k = 0; k < kPack; ++k)
      out[k] = keep.Keeps(i, k) ? (v[k] - row.max) - log_sum : -INFINITY;
    StorePack(y + col, out);
  });
}

// Where a kernel is short of registers, the form that holds fewer ran faster or did not
// spill; elsewhere the form that lets ptxas issue all of a chunk's loads before its first
// wait ran faster (docs/performance_notes.md). Short of registers: float32 rows held in
// clusters (64 values a thread beside the cluster reduction), for log_softmax's sum of exps
// by Sum's selects (fewer registers) or ForEach's branches:
template <typename T, bool kClusters>
constexpr bool kFloat32InClusters = kClusters && sizeof(T) == 4;

// One row held whole in the team's registers, loaded into `chunk` (its masked-out
// values -inf, `keep` saying which); after_reduce() runs once the team's reduction is done.
template <Output kOutput, typename T, int kPack, int kChunk, bool kClusters, typename Keep,
          typename AfterReduce>
__device__ __forceinline__ void SoftmaxOfHeldRow(RowChunk<T, kPack, kChunk>& chunk,
                                                 const Keep& keep, T* y, int packs,
                                                 RowTeam& team,
                                                 RowScratch<MaxSum>& scratch,
                                                 AfterReduce after_reduce) {
  // A max that drops NaNs (fmaxf's, one instruction where MaxPropagateNan
  // takes four): a NaN still reaches every output of its row, through the
  // sum of exps.
  const float thread_max = chunk.Max(packs, team);
  // Exps relative to the thread's own max, before the team's is known. A
  // share that is -inf throughout shifts by 0, as exp(-inf - -inf) would be
  // a NaN. Each exp replaces its x in the chunk, so that it is computed once
  // without more registers (kept beside the chunk, 64 values a thread
  // spilled). For 16-bit types this rounds it to T before the scaling: within
  // one unit in the last place of the output (jax.nn.softmax rounds its exps
  // to T too).
  const float shift = thread_max == -INFINITY ? 0.f : thread_max;
  float thread_sum = 0.f;
  if constexpr (kOutput == Output::kSoftmax) {
    chunk.ForEach(packs, team, [&](int i, int, const float(&v)[kPack]) {
      float exps[kPack];
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        exps[k] = Exp(v[k] - shift);
        thread_sum += exps[k];
      }
      chunk.Replace(i, exps);
    });
  } else {
    // log_softmax writes from x, which it keeps. Summed by ForEach's branches, but for
    // float32 in clusters without a mask, where ForEach spilled: elsewhere Sum's selects let
    // ptxas hold back a chunk's later loads until its first packs' max was taken, a second
    // wait on memory every row (with a mask, every few packs).
    if constexpr (kFloat32InClusters<T, kClusters> && std::is_same_v<Keep, AllKept>) {
      thread_sum = chunk.Sum(packs, team, 0.f, [&](float v) { return Exp(v - shift); });
    } else {
      chunk.ForEach(packs, team, [&](int, int, const float(&v)[kPack]) {
#pragma unroll
        for (int k = 0; k < kPack; ++k) thread_sum += Exp(v[k] - shift);
      });
    }
  }
  const MaxSum row =
      team.Reduce<kClusters>(MaxSum{thread_max, thread_sum}, MaxSumOp{}, scratch);
  after_reduce();
  if constexpr (kOutput == Output::kSoftmax) {
    // A row of -inf comes out NaN (0 / 0), as in jax.nn.softmax; a masked-out value 0.
    const float scale = RescaleFactor(thread_max, row.max) / row.sum;
    chunk.ForEach(packs, team, [&](int i, int col, const float(&e)[kPack]) {
      float out[kPack];
#pragma unroll
      for (int k = 0; k < kPack; ++k) out[k] = keep.Keeps(i, k) ? e[k] * scale : 0.f;
      StorePack(y + col, out);
    });
  } else {
    StoreLogSoftmax(chunk, keep, y, packs, team, row);
  }
}

// One row streamed through one block's registers, a chunk at a time (see the
// top).
// `mask`: the row's where= bytes where kMasked, else null.
template <Output kOutput, bool kMasked, typename T, int kPack, int kChunk>
__device__ __forceinline__ void SoftmaxRowStreamed(const T* x, const uint8_t* mask, T* y,
                                                   int64_t packs, RowTeam& team,
                                                   RowScratch<MaxSum>& scratch) {
  const int chunk_packs = team.lanes * kChunk;
  RowChunk<T, kPack, kChunk> chunk;
  KeepOf<kMasked, kPack, kChunk> keep;
  float thread_max = -INFINITY;
  CompensatedSum thread_sum;
  ForEachChunkOf(packs, chunk_packs, [&](int64_t first, int count) {
    chunk.Load(x + first * kPack, count, team);
    keep.Load(kMasked ? mask + first * kPack : nullptr, count, team);
    keep.DropFrom(chunk);
    // The chunk's max first, so that the sum is rescaled once a chunk. Max
    // drops NaNs; a NaN still makes the sum, and so the row, NaN.
    const float new_max = fmaxf(thread_max, chunk.Max(count, team));
    thread_sum.Scale(RescaleFactor(thread_max, new_max));
    thread_max = new_max;
    chunk.ForEach(count, team, [&](int, int, const float(&v)[kPack]) {
      float exps[kPack];
#pragma unroll
      for (int k = 0; k < kPack; ++k) exps[k] = ShiftedExp(v[k], thread_max);
      thread_sum.Add(PackSum(exps));
    });
  });
  const MaxSum row =
      team.Reduce<false>(MaxSum{thread_max, thread_sum.Value()}, MaxSumOp{}, scratch);
  const float inv_sum = 1.f / row.sum;
  ForEachChunkOf(packs, chunk_packs, [&](int64_t first, int count) {
    chunk.Load(x + first * kPack, count, team);
    keep.Load(kMasked ? mask + first * kPack : nullptr, count, team);
    if constexpr (kOutput == Output::kSoftmax) {
      chunk.ForEach(count, team, [&](int i, int col, const float(&v)[kPack]) {
        float out[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k)
          out[k] = keep.Keeps(i, k) ? Exp(v[k] - row.max) * inv_sum : 0.f;
        StorePack(y + first * kPack + col, out);
      });
    } else {
      StoreLogSoftmax(chunk, keep, y + first * kPack, count, team, row);
    }
  });
}

// Blocks an SM that a forward kernel's registers must leave room for. A
// block that holds its rows loads, reduces and stores in turn; a second block
// an SM overlaps one's stores with the other's loads, which paid more than
// the registers a single block could have. Larger chunks need
// more than 64 registers, and so did the cluster reduction beside a scalar
// chunk (it spilled), and a masked scalar or 16-bit chunk beside its mask (they
// spilled, the 16-bit ones with all of x's and the mask's loads in flight at
// once); there, and for streamed rows, ptxas takes what it needs.
template <typename T, int kPack, int kChunk, RowLayout kLayout, bool kMasked>
constexpr int kForwardMinBlocks =
    sizeof(T) * kPack * kChunk <= 128 && !(kMasked && (kPack == 1 || sizeof(T) < 4)) &&
            (kLayout == RowLayout::kHeld || (kLayout == RowLayout::kHeldInCluster && kPack > 1))
        ? 2
        : 1;

// Shared memory a thread (0: none) that a forward kernel prefetches its
// team's next row into while it works on the row it holds (NextRow), where
// the launcher lets it (PrefetchSharedBytes): otherwise, between a row's
// last load and its first store, an SM would have nothing to load. 16-bit
// kernels prefetch within the 64 registers of two blocks an SM, which 32-bit
// offsets within a chunk leave room for.
// Masked kernels do not prefetch: NextRow moves x alone.
template <typename T, int kPack, int kChunk, RowLayout kLayout, bool kMasked>
constexpr int kForwardPrefetchBytes =
    kMasked ? 0 : PrefetchBytesPerThread(1, sizeof(T), kPack, kChunk, kLayout);

// kTeamPerRow: the launch gives every row a team of its own (see
// SelectForwardKernel), and each team takes its one row with no loop over rows.
// kMasked: `mask` holds where='s bytes, x's shape (softmax_mask.cuh); else it is null.
template <Output kOutput, bool kMasked, typename T, int kPack, int kChunk, RowLayout kLayout,
          bool kTeamPerRow>
__global__ void __launch_bounds__(kForwardPolicy.max_threads,
                                  kForwardMinBlocks<T, kPack, kChunk, kLayout, kMasked>)
    SoftmaxForwardKernel(const T* __restrict__ x, const uint8_t* __restrict__ mask,
                         T* __restrict__ y, int64_t rows, int64_t cols, RowCounter row_counter,
                         int lanes) {
  constexpr bool kClusters = kLayout == RowLayout::kHeldInCluster;
  constexpr bool kPrefetches = kForwardPrefetchBytes<T, kPack, kChunk, kLayout, kMasked> > 0;
  __shared__ RowScratch<MaxSum> scratch;
  // The policy's, not the layout's: told that its teams are never clusters,
  // ptxas spilled the unaligned bfloat16 kernel of 16 packs a thread.
  constexpr bool kPolicyClusters = kForwardPolicy.ClusterTeams();
  RowTeam team(lanes, kPolicyClusters);
  // Only a prefetching kernel claims rows (the launcher gives the others none).
  __shared__ ClaimSlot claim_slot;
  ClaimedRows claimed_rows(kPrefetches ? row_counter : RowCounter{}, &claim_slot, team, rows);
  team.Begin<kClusters>(scratch);
  const int64_t num_packs = cols / kPack;
  // Rows held in registers are at most lanes * kChunk packs.
  const int held_packs = static_cast<int>(num_packs);
  if constexpr (kPrefetches) {
    if (HasDynamicSharedMemory()) {
      // One row a team (a cluster), every row in full.
      __shared__ uint64_t next_row_arrival;
      NextRow<T, kPack, kChunk> next_row(NextRowStripes(), &next_row_arrival);
      int64_t row = team.first_row;
      int64_t following = row + team.row_stride;
      if (row < rows) next_row.Load(x + row * cols, held_packs, team);
      while (row < rows) {
        RowChunk<T, kPack, kChunk> chunk;
        next_row.TakeInto(chunk);
        if (following < rows) next_row.Load(x + following * cols, held_packs, team);
        SoftmaxOfHeldRow<kOutput, T, kPack, kChunk, kClusters>(
            chunk, AllKept{}, y + row * cols, held_packs, team, scratch,
            [&] { claimed_rows.Hand(following); });
        row = following;
        following = claimed_rows.After(following);
      }
      team.Finish<kClusters>();
      return;
    }
  }
  auto softmax_of_group = [&](int64_t group) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const int64_t offset = (valid ? row : 0) * cols;
    const uint8_t* row_mask = kMasked ? mask + offset : nullptr;
    if constexpr (kLayout == RowLayout::kStreamed) {
      SoftmaxRowStreamed<kOutput, kMasked, T, kPack, kChunk>(
          x + offset, row_mask, y + offset, valid ? num_packs : 0, team, scratch);
    } else {
      const int packs = valid ? held_packs : 0;
      RowChunk<T, kPack, kChunk> chunk;
      chunk.Load(x + offset, packs, team);
      KeepOf<kMasked, kPack, kChunk> keep;
      keep.Load(row_mask, packs, team);
      keep.DropFrom(chunk);
      SoftmaxOfHeldRow<kOutput, T, kPack, kChunk, kClusters>(chunk, keep, y + offset, packs, team,
                                                             scratch, [] {});
    }
  };
  team.ForEachGroup<kTeamPerRow>(rows, softmax_of_group);
  team.Finish<kClusters>();
}

// Shared memory a thread that a backward kernel prefetches its team's next
// y and g rows into (NextRow; 0: none), where the launcher lets it
// (PrefetchSharedBytes), as the forward does.
template <typename T, int kPack, int kChunk, RowLayout kLayout>
constexpr int kBackwardPrefetchBytes =
    PrefetchBytesPerThread(2, sizeof(T), kPack, kChunk, kLayout);

// A backward kernel's math, element by element, from the forward's output y
// and the incoming g: Term(y, g) is summed along the row, Out(y, g, sum) is
// written. softmax's is SoftmaxGradient; log_softmax's backward and its
// forward-mode tangent are the same two passes with other terms.
struct SoftmaxGradient {
  __device__ __forceinline__ static float Term(float y, float g) { return g * y; }
  __device__ __forceinline__ static float Out(float y, float g, float dot) {
    return y * (g - dot);
  }
};

// The backward's two passes over the `count` packs that the chunks hold:
// this thread's share of the row's sum, and dx's packs (dx at the chunks' first).
template <typename Gradient, typename T, int kPack, int kChunk>
__device__ __forceinline__ void AddDot(const RowChunk<T, kPack, kChunk>& y_chunk,
                                       const RowChunk<T, kPack, kChunk>& g_chunk, int count,
                                       const RowTeam& team, CompensatedSum& thread_dot) {
  y_chunk.ForEach(count, team, [&](int i, int, const float(&yv)[kPack]) {
    float terms[kPack];
#pragma unroll
    for (int k = 0; k < kPack; ++k) terms[k] = Gradient::Term(yv[k], g_chunk.Value(i, k));
    thread_dot.Add(PackSum(terms));
  });
}

template <typename Gradient, typename T, int kPack, int kChunk>
__device__ __forceinline__ void StoreGrad(const RowChunk<T, kPack, kChunk>& y_chunk,
                                          const RowChunk<T, kPack, kChunk>& g_chunk, float dot,
                                          T* dx, int count, const RowTeam& team) {
  y_chunk.ForEach(count, team, [&](int i, int col, const float(&yv)[kPack]) {
    float out[kPack];
#pragma unroll
    for (int k = 0; k < kPack; ++k) out[k] = Gradient::Out(yv[k], g_chunk.Value(i, k), dot);
    StorePack(dx + col, out);
  });
}

template <typename Gradient, typename T, int kPack, int kChunk, RowLayout kLayout>
__global__ void __launch_bounds__(kBackwardPolicy.max_threads)
    SoftmaxBackwardKernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                          int64_t rows, int64_t cols, int lanes) {
  constexpr bool kClusters = kBackwardPolicy.ClusterTeams();
  __shared__ RowScratch<float> scratch;
  RowTeam team(lanes, kClusters);
  team.Begin<kClusters>(scratch);
  const int64_t num_packs = cols / kPack;
  const int held_packs = static_cast<int>(num_packs);  // as the forward's
  if constexpr (kBackwardPrefetchBytes<T, kPack, kChunk, kLayout> > 0) {
    if (HasDynamicSharedMemory()) {
      // One row a team (a cluster), every row in full, as the forward.
      __shared__ uint64_t next_row_arrivals[2];
      NextRow<T, kPack, kChunk> next_y(NextRowStripes(), &next_row_arrivals[0]);
      NextRow<T, kPack, kChunk> next_g(NextRowStripes() + kChunk * blockDim.x,
                                       &next_row_arrivals[1]);
      int64_t row = team.first_row;
      if (row < rows) {
        next_y.Load(y + row * cols, held_packs, team);
        next_g.Load(g + row * cols, held_packs, team);
      }
      for (; row < rows; row += team.row_stride) {
        RowChunk<T, kPack, kChunk> y_chunk;
        RowChunk<T, kPack, kChunk> g_chunk;
        next_y.TakeInto(y_chunk);
        next_g.TakeInto(g_chunk);
        const int64_t following = row + team.row_stride;
        if (following < rows) {
          next_y.Load(y + following * cols, held_packs, team);
          next_g.Load(g + following * cols, held_packs, team);
        }
        CompensatedSum thread_dot;
        AddDot<Gradient>(y_chunk, g_chunk, held_packs, team, thread_dot);
        const float dot = team.Reduce<kClusters>(thread_dot.Value(), SumOp{}, scratch);
        StoreGrad<Gradient>(y_chunk, g_chunk, dot, dx + row * cols, held_packs, team);
      }
      team.Finish<kClusters>();
      return;
    }
  }
  const int chunk_packs = lanes * kChunk;
  const bool row_in_registers = num_packs <= chunk_packs;
  // Its own loop over groups, not RowTeam::ForEachGroup<false>: through the
  // helper's lambda, ptxas allocated most backward kernels' registers
  // otherwise, and some small shapes ran slower.
  for (int64_t group = team.first_row; group < rows; group += team.row_stride) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const int64_t packs = valid ? num_packs : 0;
    const int64_t offset = (valid ? row : 0) * cols;
    RowChunk<T, kPack, kChunk> y_chunk;
    RowChunk<T, kPack, kChunk> g_chunk;
    CompensatedSum thread_dot;
    ForEachChunkOf(packs, chunk_packs, [&](int64_t first, int count) {
      y_chunk.Load(y + offset + first * kPack, count, team);
      g_chunk.Load(g + offset + first * kPack, count, team);
      AddDot<Gradient>(y_chunk, g_chunk, count, team, thread_dot);
    });
    const float dot = team.Reduce<kClusters>(thread_dot.Value(), SumOp{}, scratch);
    ForEachChunkOf(packs, chunk_packs, [&](int64_t first, int count) {
      if (!row_in_registers) {
        y_chunk.Load(y + offset + first * kPack, count, team);
        g_chunk.Load(g + offset + first * kPack, count, team);
      }
      StoreGrad<Gradient>(y_chunk, g_chunk, dot, dx + offset + first * kPack, count, team);
    });
  }
  team.Finish<kClusters>();
}

}  // namespace jax_camp::softmax
