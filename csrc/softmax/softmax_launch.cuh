// Which of softmax's kernels runs a launch plan: the instance for the plan's
// pack, chunk and layout, as LaunchRowKernelAs asks for it. The policies that
// plan the launch are softmax_policy.h, the kernels softmax_kernel.cuh.
#pragma once

#include "../common/row_launch.cuh"
#include "softmax_kernel.cuh"

namespace jax_camp::softmax {

// The forward kernel for a plan's pack, chunk and layout, with the shared
// memory it prefetches into (see LaunchRowKernelAs): softmax.cu's handlers
// and scripts/row_policy_bench.cu launch the same kernels. Rows held by a
// warp or more take a kernel with no loop over rows where the grid has a team
// for every row, as reduce_sum's, which the medium shapes ran shorter; teams
// of fewer lanes, sharing a block with other rows, ran longer so and keep the
// loop, as does the backward, which lost with it.
template <typename T>
struct SelectForwardKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& plan) const {
    auto kernel = [](auto team_per_row) {
      return RowKernel{
          SoftmaxForwardKernel<T, Pack::value, Chunk::value, Layout::value,
                               decltype(team_per_row)::value>,
          kForwardPrefetchBytes<T, Pack::value, Chunk::value, Layout::value>};
    };
    if constexpr (Layout::value == RowLayout::kHeld) {
      // Teams of a warp to a block (of at most 512 threads) a row.
      return TeamPerRowKernel<32, 64, 128, 256, 512>(plan, [&](auto lanes) {
        return kernel(std::bool_constant<(decltype(lanes)::value > 0)>{});
      });
    }
    return kernel(std::false_type{});
  }
};

// The backward kernel for a plan (see SelectForwardKernel).
template <typename T>
struct SelectBackwardKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& /*plan*/) const {
    return RowKernel{SoftmaxBackwardKernel<T, Pack::value, Chunk::value, Layout::value>,
                     kBackwardPrefetchBytes<T, Pack::value, Chunk::value, Layout::value>};
  }
};

}  // namespace jax_camp::softmax
