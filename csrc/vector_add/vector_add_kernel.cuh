// vector_add: out[i] = x[i] + y[i], added in float32 and rounded once. A
// grid-stride loop of kPack-element packs (128-bit when aligned), several in
// flight per thread, then the tail.
#pragma once

#include <cstdint>

#include "../common/cuda_common.cuh"

namespace jax_camp::vector_add {

// Two 16-byte packs a thread a tile: with four, 48-64 registers a thread
// left 4 blocks an SM and float32 ran 3-5% slower on the H200
// (benchmarks/results/2026-11-29-h200-v3b-elementwise.txt).
constexpr int kUnroll = 2;

template <typename T, int kPack>
__device__ __forceinline__ Pack<T, kPack> AddPacks(const Pack<T, kPack>& a,
                                                   const Pack<T, kPack>& b) {
  Pack<T, kPack> sum;
#pragma unroll
  for (int k = 0; k < kPack; ++k) sum.v[k] = FromFloat<T>(ToFloat(a.v[k]) + ToFloat(b.v[k]));
  return sum;
}

template <typename T, int kPack>
__global__ void VectorAddKernel(const T* __restrict__ x, const T* __restrict__ y,
                                T* __restrict__ out, int64_t n) {
  using Vec = Pack<T, kPack>;
  const Vec* x_packs = reinterpret_cast<const Vec*>(x);
  const Vec* y_packs = reinterpret_cast<const Vec*>(y);
  Vec* out_packs = reinterpret_cast<Vec*>(out);
  const int64_t num_packs = n / kPack;
  GridStride<kUnroll>(
      num_packs, [&](int64_t i) { return AddPacks(x_packs[i], y_packs[i]); },
      [&](int64_t i, const Vec& v) { out_packs[i] = v; });
  using Scalar = Pack<T, 1>;
  const int64_t done = num_packs * kPack;
  GridStride<1>(
      n - done,
      [&](int64_t i) { return AddPacks(Scalar{{x[done + i]}}, Scalar{{y[done + i]}}); },
      [&](int64_t i, const Scalar& v) { out[done + i] = v.v[0]; });
}

}  // namespace jax_camp::vector_add
