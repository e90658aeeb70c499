// reduce_sum: out[r] = sum_c x[r, c], accumulated in float32. A team of threads
// (a few lanes of a warp, two warps of a block shared with other rows, or the
// block; see row_team.cuh) shares a row: each thread sums its strided share,
// chunk by chunk with the chunk's loads issued ahead of its adds, then the
// team's tree reduction combines the partial sums. The order of additions
// depends only on the shape, so results are bitwise reproducible.
#pragma once

#include <cstdint>

#include "../common/row_team.cuh"

namespace jax_camp::reduce_sum {

// Launch policy (see PlanRowLaunch): up to 128 bytes a thread in flight
// (8 packs), and a warp's lanes a row where that holds it. A sum never needs
// its row twice, so rows longer than that are streamed, chunk by chunk, and
// none is held with more. Against 64 values a thread and 64 lanes a row,
// on the H200 in CUDA graphs: bfloat16 1008x1280 2.25 -> 1.96 us, 4080x1536
// 5.45 -> 4.85 us, float32 784x3840 4.59 -> 3.74 us, but float32 2032x2304
// 6.48 -> 7.05 us; the large shapes within 2%
// (benchmarks/results/2026-11-29-h200-v6-probes.txt).
// Teams of two warps share 256-thread blocks, four rows a block, rather than
// take a 64-thread block each: in CUDA graphs, bfloat16 1008x2304 2.61 ->
// 2.39 us, 2032x2304 3.24 -> 3.01, 784x3840 2.61 -> 2.44, float32 1008x1280
// 2.47 -> 2.32; four warps sharing a block cost float32 1008x2304 and
// 2032x2304 7-8% (benchmarks/results/2026-11-30-h200-v12-probes.txt, probe 4).
// Grids too small to fill the SMs give 16-bit rows up to 64 lanes, float32
// ones up to 128: at 144x1280 in CUDA graphs, bfloat16 ran 1.52 us in 64
// lanes against 1.65 in 128, float32 1.64 against 1.58; and at every shape
// with enough rows, bfloat16's 128-lane teams were the slower
// (-v16-probes.txt, probe 1).
// 16-bit rows that a grid of at most 1024 threads an SM would hold at 8 packs
// a thread take twice the lanes, 4 packs each (kQuietGridMaxChunk 7; ptxas
// issues the last two packs' loads of 8 only after the first pack's adds), and
// 16-bit teams of 128 lanes share 256-thread blocks. With a team a row, inputs
// cycling through the harness's sets, in CUDA graphs: bfloat16 784x3840 3.16 ->
// 2.96 us (inputs in L2 1.95 -> 2.00), 8192x8192 31.07 -> 31.02; 128-lane teams
// in 128-thread blocks ran 784x3840 in 3.02 (L2 2.11)
// (benchmarks/results/2026-11-30-h200-v21-probes.txt, probes 2 and 3).
template <typename T>
using Policy = RowPolicy<8 * kPack128<T>, 512, 32, 0, 8, sizeof(T) == 4 ? 64 : 128, 256,
                         sizeof(T) == 4 ? 128 : 64, 0, sizeof(T) == 4 ? 0 : 7>;

// Blocks an SM that a kernel's registers must leave room for. Left to
// choose, ptxas kept a chunk in fewer registers by issuing its loads in
// rounds, each after the previous packs were summed, so a row waited on
// memory several times. Told one block, it issues a float32 chunk's loads all
// first: on the H200 in CUDA graphs, float32 144x1280 1.88 -> 1.73 us,
// 4080x1536 5.19 -> 4.77, 8192x8192 60.2 -> 59.2, 1024x262144 233.4 -> 234.9
// (benchmarks/results/2026-11-30-h200-v10-probes.txt). 16-bit chunks take
// two blocks, and add their packs by RowChunk::Sum, whose select leaves ptxas
// no branch to sink a pack's load into: bfloat16 8192x8192 32.5 -> 31.2 us,
// 4096x32768 64.1 -> 60.4, 1008x1280 2.21 -> 2.12, 784x3840 2.89 -> 2.62,
// 1024x262144 and 262144x128 within 1% (-v12-probes.txt). One block cost
// bfloat16 4096x32768 a third (85.8 us); two with the branches, 1-5%.
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
__global__ void __launch_bounds__(Policy<T>::kMaxThreads, kMinBlocks<T>)
    ReduceSumKernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t cols,
                    int lanes) {
  constexpr bool kClusters = Policy<T>::kClusters;
  constexpr bool kTeamPerRow = kLanes > 0;
  __shared__ RowScratch<float> scratch;
  RowTeam team(kTeamPerRow ? kLanes : lanes, kClusters,
               kTeamPerRow ? TeamBlockThreads<Policy<T>>(kLanes) : 0);
  team.Begin<kClusters>(scratch);
  const int64_t num_packs = cols / kPack;
  auto sum_group = [&](int64_t group) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const T* x_row = x + (valid ? row : 0) * cols;
    float partial = 0.f;
    auto add_chunk = [&](const T* first, int count) {
      RowChunk<T, kPack, kChunk> chunk;
      chunk.Load(first, count, team);
      // Float32 through Sum: 4% faster at some shapes, 4% slower at others
      // (-v12-probes.txt, probe 2).
      if constexpr (sizeof(T) == 4) {
        chunk.ForEach(count, team, [&](int, int, const float(&v)[kPack]) {
#pragma unroll
          for (int k = 0; k < kPack; ++k) partial += v[k];
        });
      } else {
        partial = chunk.Sum(count, team, partial);
      }
    };
    if constexpr (kStreamed) {
      ForEachChunkOf(valid ? num_packs : 0, team.lanes * kChunk, [&](int64_t first, int count) {
        add_chunk(x_row + first * kPack, count);
      });
    } else {
      add_chunk(x_row, valid ? static_cast<int>(num_packs) : 0);
    }
    const float total = team.Reduce<kClusters, Policy<T>::kSharedBlockTeams>(
        partial, SumOp{}, scratch);
    if (valid && team.lane == 0) out[row] = FromFloat<T>(total);
  };
  team.ForEachGroup<kTeamPerRow>(rows, sum_group);
  team.Finish<kClusters>();
}

// The kernel for a plan's pack, chunk, layout and lanes (see
// LaunchRowKernelAs); reduce_sum's teams are never clusters. Held rows of 32,
// 64 and 128 lanes in 16-byte packs, those of 128 to 1024 packs such as the
// camp's shapes, take a kernel compiled for their lanes: a launch there lasts
// a few microseconds, and working out the team's geometry from a lane count
// read at run time sat between the kernel's start and its first load. On the
// H200 in CUDA graphs: bfloat16 1008x1280 1.93 -> 1.86 us, 4080x1536 4.54 ->
// 4.46, float32 1008x2304 3.77 -> 3.70; float32 144x1280 unchanged
// (benchmarks/results/2026-11-30-h200-v15-probes.txt, probe 1). Since v21
// only where the grid has a team for every row: the kernel then takes one row
// a team, and ran 0.1-7.8% shorter at every such shape than with a loop over
// rows (bfloat16 144x1280 1.32 -> 1.22 us, 784x3840 3.24 -> 3.16; with the
// harness's rotating inputs, -v21-probes.txt, probe 2). Other lane counts,
// grids capped short of the rows, and unaligned rows keep one kernel a chunk.
template <typename T>
struct SelectReduceSumKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& plan) const {
    constexpr bool kStreamed = Layout::value == RowLayout::kStreamed;
    auto kernel = [](auto fixed_lanes) {
      return ReduceSumKernel<T, Pack::value, Chunk::value, kStreamed, decltype(fixed_lanes)::value>;
    };
    if constexpr (!kStreamed && Pack::value > 1) {
      if (plan.TeamForEveryRow()) {
        switch (plan.lanes) {
          case 32: return kernel(IntTag<32>{});
          case 64: return kernel(IntTag<64>{});
          case 128: return kernel(IntTag<128>{});
        }
      }
    }
    return kernel(IntTag<0>{});
  }
};

}  // namespace jax_camp::reduce_sum
