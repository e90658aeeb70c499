// vector_add: out[i] = x[i] + y[i], added in float32 and rounded once. A
// grid-stride loop of kPack-element (128-bit when aligned) packs, then the tail.
#pragma once

#include <cstdint>

#include "../common/cuda_common.cuh"

namespace jax_camp::vector_add {

template <typename T>
__device__ __forceinline__ T Add(T a, T b) {
  return FromFloat<T>(ToFloat(a) + ToFloat(b));
}

template <typename T, int kPack>
__global__ void VectorAddKernel(const T* __restrict__ x, const T* __restrict__ y,
                                T* __restrict__ out, int64_t n) {
  using Vec = Pack<T, kPack>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t num_packs = n / kPack;
  for (int64_t i = tid; i < num_packs; i += stride) {
    const Vec a = reinterpret_cast<const Vec*>(x)[i];
    const Vec b = reinterpret_cast<const Vec*>(y)[i];
    Vec sum;
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum.v[k] = Add(a.v[k], b.v[k]);
    reinterpret_cast<Vec*>(out)[i] = sum;
  }
  for (int64_t i = num_packs * kPack + tid; i < n; i += stride) out[i] = Add(x[i], y[i]);
}

}  // namespace jax_camp::vector_add
