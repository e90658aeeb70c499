// reduce_sum: out[r] = sum_c x[r, c], accumulated in float32. A team of threads
// (a few lanes of a warp, two warps of a block shared with other rows, or the
// block; see row_team.cuh) shares a row: each thread sums its strided share,
// chunk by chunk with the chunk's loads issued ahead of its adds, into a
// CompensatedSum where the row is streamed, so that rows of millions of values
// come out as accurate as short ones; then the team's tree reduction combines
// the partial sums. The order of additions depends only on the shape, so
// results are bitwise reproducible.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/compensated_sum.cuh"
#include "../common/row_team.cuh"
#include "reduce_sum_policy.h"

namespace jax_camp::reduce_sum {

// Blocks an SM that a kernel's registers must leave room for. Left to
// choose, ptxas kept a chunk in fewer registers by issuing its loads in
// rounds, each after the previous packs were summed, so a row waited on
// memory several times. Told one block, it issues a float32 chunk's loads all
// first. 16-bit chunks take two blocks, and add their packs by RowChunk::Sum,
// whose select leaves ptxas no branch to sink a pack's load into; one block
// cost them far more than it saved.
template <typename T>
constexpr int kMinBlocks = sizeof(T) == 4 ? 1 : 2;

// kStreamed: rows longer than the team's chunks, summed chunk by chunk; a
// held row is one chunk, with no loop around it to set up before its loads.
// kLanes: the team's lanes where the kernel is compiled for them (see
// SelectReduceSumKernel), else 0 and the launch's `lanes`. A kernel compiled
// for its lanes is launched with a team for every row, and takes its block's
// threads as a constant (TeamBlockThreads): it sums one row a team, with no
// loop over rows and its team's geometry and reduction without branches.
template <typename T, int kPack, int kChunk, bool kStreamed, int kLanes>
__global__ void __launch_bounds__(PolicyFor(sizeof(T)).max_threads, kMinBlocks<T>)
    ReduceSumKernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t cols,
                    int lanes) {
  constexpr RowPolicy kPolicyOfT = PolicyFor(sizeof(T));
  constexpr bool kClusters = kPolicyOfT.ClusterTeams();
  constexpr bool kSharedBlockTeams = kPolicyOfT.SharedBlockTeams();
  constexpr bool kTeamPerRow = kLanes > 0;
  constexpr unsigned kBlockThreads = kTeamPerRow ? TeamBlockThreads(kLanes, kPolicyOfT) : 0;
  __shared__ RowScratch<float> scratch;
  RowTeam team(kTeamPerRow ? kLanes : lanes, kClusters,
               kBlockThreads);
  team.Begin<kClusters>(scratch);
  const int64_t num_packs = cols / kPack;
  auto sum_group = [&](int64_t group) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const T* x_row = x + (valid ? row : 0) * cols;
    // A held row gives each thread at most a chunk of packs to add, too few
    // to drift, and compensating them cost time at the small shapes.
    std::conditional_t<kStreamed, CompensatedSum, PlainSum> partial;
    auto add_chunk = [&](const T* first, int count) {
      RowChunk<T, kPack, kChunk> chunk;
      chunk.Load(first, count, team);
      // Float32 through Sum won at some shapes and lost at others, a tie. A
      // 16-bit sum is rounded to 16 bits at the end, far coarser than a
      // chunk's float32 rounding: it compensates once a chunk.
      if constexpr (sizeof(T) == 4) {
        chunk.ForEach(count, team, [&](int, int, const float(&v)[kPack]) {
          partial.Add(PackSum(v));
        });
      } else {
        partial.Add(chunk.Sum(count, team, 0.f));
      }
    };
    if constexpr (kStreamed) {
      ForEachChunkOf(valid ? num_packs : 0, team.lanes * kChunk, [&](int64_t first, int count) {
        add_chunk(x_row + first * kPack, count);
      });
    } else {
      add_chunk(x_row, valid ? static_cast<int>(num_packs) : 0);
    }
    const float total = team.Reduce<kClusters, kSharedBlockTeams>(
        partial.Value(), SumOp{}, scratch);
    if (valid && team.lane == 0) out[row] = FromFloat<T>(total);
  };
  team.ForEachGroup<kTeamPerRow>(rows, sum_group);
  team.Finish<kClusters>();
}

}  // namespace jax_camp::reduce_sum
