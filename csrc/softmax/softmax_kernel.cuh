// softmax over the last dim, and its backward. A team of threads (a warp or
// the block, see row_team.cuh) shares each row; arithmetic is float32.
//
// Forward, two passes over x instead of the textbook three: each thread keeps
// an online (max, sum of exp(x - max)) over its share, rescaling its sum when
// its max grows; the team then agrees on the row max, rescales each partial
// sum to it and adds them. The second pass writes exp(x - max) / sum.
// Subtracting the max keeps exp from overflowing on large logits and does not
// change the result, since it cancels between numerator and denominator.
//
// Backward: dx = y * (g - sum(g * y)), one reduction then one write pass; y is
// the forward's output, so nothing of the forward is recomputed.
#pragma once

#include <cstdint>

#include "../common/row_team.cuh"

namespace jax_camp::softmax {

// exp(old_max - new_max) with the equal case (both -inf, an all -inf row so
// far) kept finite; NaN and +inf still propagate as in jax.nn.softmax.
__device__ __forceinline__ float RescaleFactor(float old_max, float new_max) {
  return old_max == new_max ? 1.f : expf(old_max - new_max);
}

// exp(v - running_max) for the running sum. While the running max is still
// -inf every value seen is -inf and adds nothing; exp(-inf - -inf) would be a
// NaN that no later element could undo. (A row that is -inf throughout still
// comes out NaN, as in jax.nn.softmax, from the final exp(x - max).)
__device__ __forceinline__ float ShiftedExp(float v, float running_max) {
  return running_max == -INFINITY ? 0.f : expf(v - running_max);
}

template <typename T, int kPack, typename Team>
__global__ void SoftmaxForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                     int64_t cols) {
  __shared__ float scratch[Team::kScratchFloats > 0 ? Team::kScratchFloats : 1];
  const Team team;
  for (int64_t row = team.first_row; row < rows; row += team.row_stride) {
    const T* x_row = x + row * cols;
    float thread_max = -INFINITY;
    float thread_sum = 0.f;
    ForEachPack<kPack>(x_row, cols, team, [&](int64_t, const float(&v)[kPack]) {
      float pack_max = v[0];
#pragma unroll
      for (int k = 1; k < kPack; ++k) pack_max = MaxPropagateNan(pack_max, v[k]);
      const float new_max = MaxPropagateNan(thread_max, pack_max);
      thread_sum *= RescaleFactor(thread_max, new_max);
#pragma unroll
      for (int k = 0; k < kPack; ++k) thread_sum += ShiftedExp(v[k], new_max);
      thread_max = new_max;
    });
    const float row_max = team.Reduce(thread_max, MaxOp{}, scratch);
    const float row_sum =
        team.Reduce(thread_sum * RescaleFactor(thread_max, row_max), SumOp{}, scratch);
    const float inv_sum = 1.f / row_sum;
    T* y_row = y + row * cols;
    ForEachPack<kPack>(x_row, cols, team, [&](int64_t col, const float(&v)[kPack]) {
      float out[kPack];
#pragma unroll
      for (int k = 0; k < kPack; ++k) out[k] = expf(v[k] - row_max) * inv_sum;
      StorePack(y_row + col, out);
    });
  }
}

template <typename T, int kPack, typename Team>
__global__ void SoftmaxBackwardKernel(const T* __restrict__ y, const T* __restrict__ g,
                                      T* __restrict__ dx, int64_t rows, int64_t cols) {
  __shared__ float scratch[Team::kScratchFloats > 0 ? Team::kScratchFloats : 1];
  const Team team;
  for (int64_t row = team.first_row; row < rows; row += team.row_stride) {
    const T* y_row = y + row * cols;
    const T* g_row = g + row * cols;
    float thread_dot = 0.f;
    ForEachPack<kPack>(y_row, cols, team, [&](int64_t col, const float(&yv)[kPack]) {
      float gv[kPack];
      LoadPack(g_row + col, gv);
#pragma unroll
      for (int k = 0; k < kPack; ++k) thread_dot += gv[k] * yv[k];
    });
    const float dot = team.Reduce(thread_dot, SumOp{}, scratch);
    T* dx_row = dx + row * cols;
    ForEachPack<kPack>(y_row, cols, team, [&](int64_t col, const float(&yv)[kPack]) {
      float gv[kPack];
      LoadPack(g_row + col, gv);
#pragma unroll
      for (int k = 0; k < kPack; ++k) gv[k] = yv[k] * (gv[k] - dot);
      StorePack(dx_row + col, gv);
    });
  }
}

}  // namespace jax_camp::softmax
