// reduce_sum: out[r] = sum_c x[r, c], accumulated in float32. A team of
// threads (a warp or the block, see row_team.cuh) shares a row: each thread
// sums its strided share, then the team's tree reduction combines them. The
// order of additions depends only on the shape, so results are bitwise
// reproducible.
#pragma once

#include <cstdint>

#include "../common/row_team.cuh"

namespace jax_camp::reduce_sum {

template <typename T, int kPack, typename Team>
__global__ void ReduceSumKernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows,
                                int64_t cols) {
  __shared__ float scratch[Team::kScratchFloats > 0 ? Team::kScratchFloats : 1];
  const Team team;
  for (int64_t row = team.first_row; row < rows; row += team.row_stride) {
    float partial = 0.f;
    ForEachPack<kPack>(x + row * cols, cols, team, [&](int64_t, const float(&v)[kPack]) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) partial += v[k];
    });
    const float total = team.Reduce(partial, SumOp{}, scratch);
    if (team.lane == 0) out[row] = FromFloat<T>(total);
  }
}

}  // namespace jax_camp::reduce_sum
