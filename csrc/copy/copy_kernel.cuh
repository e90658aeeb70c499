// copy: y[i] = x[i]. A grid-stride loop, so any size runs on any grid; each
// thread moves kPack elements at a time (one 128-bit access when the launcher
// found both pointers 16-byte aligned).
#pragma once

#include <cstdint>

#include "../common/cuda_common.cuh"

namespace jax_camp::copy {

template <typename T, int kPack>
__global__ void CopyKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  using Vec = Pack<T, kPack>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t num_packs = n / kPack;
  const Vec* x_packs = reinterpret_cast<const Vec*>(x);
  Vec* y_packs = reinterpret_cast<Vec*>(y);
  for (int64_t i = tid; i < num_packs; i += stride) y_packs[i] = x_packs[i];
  // The n % kPack elements past the last whole pack.
  for (int64_t i = num_packs * kPack + tid; i < n; i += stride) y[i] = x[i];
}

}  // namespace jax_camp::copy
