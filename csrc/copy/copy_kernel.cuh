// copy: y[i] = x[i]. Each block copies one tile (see ForBlockTile), each
// thread kPack elements at a time (one 128-bit access when the launcher
// found both pointers 16-byte aligned), kUnroll packs a tile.
#pragma once

#include <cstdint>

#include "../common/cuda_common.cuh"

namespace jax_camp::copy {

// One 16-byte pack a thread a tile, a block a tile: four packs ran slower
// than two (registers cost blocks an SM), and one no slower than two.
constexpr int kUnroll = 1;

template <typename T, int kPack>
__global__ void CopyKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  using Vec = Pack<T, kPack>;
  const Vec* x_packs = reinterpret_cast<const Vec*>(x);
  Vec* y_packs = reinterpret_cast<Vec*>(y);
  const int64_t num_packs = n / kPack;
  ForBlockTile<kUnroll>(
      num_packs, [&](int64_t i) { return x_packs[i]; },
      [&](int64_t i, const Vec& v) { y_packs[i] = v; });
  // The n % kPack elements past the last whole pack, in the first tile.
  const int64_t done = num_packs * kPack;
  ForBlockTile<1>(
      n - done, [&](int64_t i) { return x[done + i]; },
      [&](int64_t i, const T& v) { y[done + i] = v; });
}

}  // namespace jax_camp::copy
