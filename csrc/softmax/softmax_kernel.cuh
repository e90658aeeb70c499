// softmax over the last dim, and its backward. A team of threads (a few
// lanes of a warp, or the block; see row_team.cuh) shares each row; each
// thread works through its share in register chunks; arithmetic is float32.
//
// Forward, two passes over the row instead of the textbook three: each thread
// keeps an online (max, sum of exp(x - max)) over its share, rescaling its sum
// when its max grows; the team then agrees on the row max, rescales each
// partial sum to it and adds them. The second pass writes exp(x - max) / sum.
// When the row fits in one chunk per thread, the second pass reads registers,
// not memory. Subtracting the max keeps exp from overflowing on large logits
// and does not change the result: it cancels between numerator and sum.
//
// Backward: dx = y * (g - sum(g * y)), one reduction then one write pass; y is
// the forward's output, so nothing of the forward is recomputed.
#pragma once

#include <cstdint>

#include "../common/row_team.cuh"

namespace jax_camp::softmax {

// Chunk sizes and block limits keep every dtype's chunks in registers
// (nvcc -Xptxas -v reports no spills): 512 threads x 64 values hold a row of
// 32768 in registers. The backward holds two chunks, y and g.
constexpr int kForwardChunkElements = 64;
constexpr int kForwardMaxThreads = 512;
constexpr int kBackwardChunkElements = 32;
constexpr int kBackwardMaxThreads = 512;

// exp(v) as one multiply and the hardware's exp2: the error this adds is
// below float32 softmax's tolerance, and it keeps 16-bit inputs memory-bound.
__device__ __forceinline__ float Exp(float v) { return exp2f(v * 1.4426950408889634f); }

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

template <typename T, int kPack>
__global__ void __launch_bounds__(kForwardMaxThreads)
    SoftmaxForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                         int lanes) {
  __shared__ float scratch[32];
  constexpr int kChunk = ChunkPacks(kForwardChunkElements, kPack);
  const RowTeam team(lanes);
  const int64_t num_packs = cols / kPack;
  const int64_t chunk_packs = int64_t{lanes} * kChunk;
  const bool row_in_registers = num_packs <= chunk_packs;
  for (int64_t group = team.first_row; group < rows; group += team.row_stride) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const int64_t packs = valid ? num_packs : 0;
    const int64_t offset = (valid ? row : 0) * cols;
    RowChunk<T, kPack, kChunk> chunk;
    float thread_max = -INFINITY;
    float thread_sum = 0.f;
    for (int64_t base = 0; base < packs; base += chunk_packs) {
      chunk.Load(x + offset, packs, base, team);
      chunk.ForEach(packs, base, team, [&](int, int64_t, const float(&v)[kPack]) {
        float pack_max = v[0];
#pragma unroll
        for (int k = 1; k < kPack; ++k) pack_max = MaxPropagateNan(pack_max, v[k]);
        const float new_max = MaxPropagateNan(thread_max, pack_max);
        thread_sum *= RescaleFactor(thread_max, new_max);
#pragma unroll
        for (int k = 0; k < kPack; ++k) thread_sum += ShiftedExp(v[k], new_max);
        thread_max = new_max;
      });
    }
    const float row_max = team.Reduce(thread_max, MaxOp{}, scratch);
    const float row_sum =
        team.Reduce(thread_sum * RescaleFactor(thread_max, row_max), SumOp{}, scratch);
    const float inv_sum = 1.f / row_sum;
    for (int64_t base = 0; base < packs; base += chunk_packs) {
      if (!row_in_registers) chunk.Load(x + offset, packs, base, team);
      chunk.ForEach(packs, base, team, [&](int, int64_t col, const float(&v)[kPack]) {
        float out[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k) out[k] = Exp(v[k] - row_max) * inv_sum;
        StorePack(y + offset + col, out);
      });
    }
  }
}

template <typename T, int kPack>
__global__ void __launch_bounds__(kBackwardMaxThreads)
    SoftmaxBackwardKernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                          int64_t rows, int64_t cols, int lanes) {
  __shared__ float scratch[32];
  constexpr int kChunk = ChunkPacks(kBackwardChunkElements, kPack);
  const RowTeam team(lanes);
  const int64_t num_packs = cols / kPack;
  const int64_t chunk_packs = int64_t{lanes} * kChunk;
  const bool row_in_registers = num_packs <= chunk_packs;
  for (int64_t group = team.first_row; group < rows; group += team.row_stride) {
    const int64_t row = team.RowIn(group);
    const bool valid = row < rows;
    const int64_t packs = valid ? num_packs : 0;
    const int64_t offset = (valid ? row : 0) * cols;
    RowChunk<T, kPack, kChunk> y_chunk;
    RowChunk<T, kPack, kChunk> g_chunk;
    float thread_dot = 0.f;
    for (int64_t base = 0; base < packs; base += chunk_packs) {
      y_chunk.Load(y + offset, packs, base, team);
      g_chunk.Load(g + offset, packs, base, team);
      y_chunk.ForEach(packs, base, team, [&](int i, int64_t, const float(&yv)[kPack]) {
#pragma unroll
        for (int k = 0; k < kPack; ++k) thread_dot += g_chunk.Value(i, k) * yv[k];
      });
    }
    const float dot = team.Reduce(thread_dot, SumOp{}, scratch);
    for (int64_t base = 0; base < packs; base += chunk_packs) {
      if (!row_in_registers) {
        y_chunk.Load(y + offset, packs, base, team);
        g_chunk.Load(g + offset, packs, base, team);
      }
      y_chunk.ForEach(packs, base, team, [&](int i, int64_t col, const float(&yv)[kPack]) {
        float out[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k) out[k] = yv[k] * (g_chunk.Value(i, k) - dot);
        StorePack(dx + offset + col, out);
      });
    }
  }
}

}  // namespace jax_camp::softmax
