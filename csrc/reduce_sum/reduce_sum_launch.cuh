// Which of reduce_sum's kernels runs a launch plan: the instance for the
// plan's pack, chunk, layout and lanes, as LaunchRowKernelAs asks for it. The
// policy that plans the launch is reduce_sum_policy.h, the kernel
// reduce_sum_kernel.cuh.
#pragma once

#include "../common/row_launch.cuh"
#include "reduce_sum_kernel.cuh"

namespace jax_camp::reduce_sum {

// The kernel for a plan's pack, chunk, layout and lanes (see
// LaunchRowKernelAs); reduce_sum's teams are never clusters. Held rows of 32,
// 64 and 128 lanes in 16-byte packs, those of 128 to 1024 packs such as the
// camp's shapes, take a kernel compiled for their lanes: a launch there lasts
// a few microseconds, and working out the team's geometry from a lane count
// read at run time sat between the kernel's start and its first load. Only
// where the grid has a team for every row: the kernel then takes one row a
// team, with no loop over rows. Other lane counts, grids capped short of the
// rows, and unaligned rows keep one kernel a chunk.
template <typename T>
struct SelectReduceSumKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& plan) const {
    constexpr bool kStreamed = Layout::value == RowLayout::kStreamed;
    auto kernel = [](auto fixed_lanes) {
      return ReduceSumKernel<T, Pack::value, Chunk::value, kStreamed, decltype(fixed_lanes)::value>;
    };
    if constexpr (!kStreamed && Pack::value > 1) return TeamPerRowKernel<32, 64, 128>(plan, kernel);
    return kernel(IntTag<0>{});
  }
};

}  // namespace jax_camp::reduce_sum
