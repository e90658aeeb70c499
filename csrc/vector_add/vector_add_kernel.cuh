// vector_add: out[i] = x[i] + y[i], added in float32 and rounded once. Each
// block adds one tile (see ForBlockTile) of kPack-element packs (128-bit when
// aligned), kUnroll packs a thread; the first tile also takes the tail.
#pragma once

#include <cstdint>

#include "../common/cuda_common.cuh"

namespace jax_camp::vector_add {

// One 16-byte pack a thread a tile, as copy: it ran at least as fast as two
// everywhere, and four took registers that cost blocks an SM.
constexpr int kUnroll = 1;

// The sum of the kPack values at a and at b, in float32, rounded once.
template <typename T, int kPack>
__device__ __forceinline__ PackedBits<T, kPack> AddPacks(const T* a, const T* b) {
  using Bits = PackedBits<T, kPack>;
  Bits a_bits, b_bits, sum_bits;
  a_bits.Load(reinterpret_cast<const typename Bits::MemoryPack*>(a));
  b_bits.Load(reinterpret_cast<const typename Bits::MemoryPack*>(b));
  float sum[kPack];
#pragma unroll
  for (int k = 0; k < kPack; ++k) sum[k] = a_bits.Get(k) + b_bits.Get(k);
  sum_bits.Set(sum);
  return sum_bits;
}

template <typename T, int kPack>
__global__ void VectorAddKernel(const T* __restrict__ x, const T* __restrict__ y,
                                T* __restrict__ out, int64_t n) {
  const int64_t num_packs = n / kPack;
  ForBlockTile<kUnroll>(
      num_packs, [&](int64_t i) { return AddPacks<T, kPack>(x + i * kPack, y + i * kPack); },
      [&](int64_t i, const PackedBits<T, kPack>& sum) {
        sum.Store(reinterpret_cast<typename PackedBits<T, kPack>::MemoryPack*>(out + i * kPack));
      });
  // The n % kPack elements past the last whole pack, in the first tile.
  const int64_t done = num_packs * kPack;
  ForBlockTile<1>(
      n - done, [&](int64_t i) { return AddPacks<T, 1>(x + done + i, y + done + i); },
      [&](int64_t i, const PackedBits<T, 1>& sum) {
        sum.Store(reinterpret_cast<typename PackedBits<T, 1>::MemoryPack*>(out + done + i));
      });
}

}  // namespace jax_camp::vector_add
