// Device-side pieces shared by the CUDA kernels and their launchers: float32
// conversions for the 16-bit types, aligned packs for 128-bit memory access,
// warp and block reductions, and turning a cudaError_t into an ffi::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "ffi_common.h"

namespace jax_camp {

struct DeviceTypes {
  using BF16 = __nv_bfloat16;
  using F16 = __half;
};

// 16-bit inputs are computed in float32 and rounded once on the way out.
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }

// kPack elements moved as one 16-byte (or narrower) load or store.
template <typename T, int kPack>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

// Elements per 128-bit access.
template <typename T>
constexpr int kPack128 = 16 / sizeof(T);

inline bool IsAligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// NaN-propagating max, as jnp.max: fmaxf would drop a NaN.
__device__ __forceinline__ float MaxPropagateNan(float a, float b) {
  return (a > b || a != a) ? a : b;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return MaxPropagateNan(a, b);
  }
};

// Butterfly reduction: every lane ends with the result, in a fixed order, so
// sums are bitwise reproducible.
template <typename Op>
__device__ __forceinline__ float WarpReduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Tree reduction over the block: warps reduce in registers, the per-warp
// results meet in shared memory. Every thread returns the block's result.
// `scratch` holds one float per warp; the leading barrier lets callers reuse
// it across successive reductions.
template <typename Op>
__device__ __forceinline__ float BlockReduce(float v, Op op, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = (blockDim.x + 31) / 32;
  v = WarpReduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < num_warps; ++w) result = op(result, scratch[w]);
  return result;
}

inline ffi::Error CheckCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                              cudaGetErrorString(status) + ")");
}

// The current device's SM count, for sizing grids to the machine. Asked of
// the driver once per device: a handler runs on XLA's launch path, where
// every host microsecond can leave the GPU idle between small kernels.
inline ffi::ErrorOr<int> SmCount() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "querying the device"));
  if (device < kMaxDevices && cached[device].load(std::memory_order_relaxed) > 0)
    return cached[device].load(std::memory_order_relaxed);
  int sm_count = 0;
  status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "querying the device"));
  if (device < kMaxDevices) cached[device].store(sm_count, std::memory_order_relaxed);
  return sm_count;
}

// Blocks of `threads` for GridStride over `count` items, kUnroll a thread:
// one tile per block, so that the grid covers the work in one sweep (the loop
// only matters past 2^31 - 1 blocks).
template <int kUnroll>
inline int GridStrideBlocks(int64_t count, int threads) {
  const int64_t tile = int64_t{threads} * kUnroll;
  const int64_t wanted = (count + tile - 1) / tile;
  constexpr int64_t kMaxBlocks = 0x7fffffff;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < kMaxBlocks ? wanted : kMaxBlocks));
}

// store(i, load(i)) for every i < count. Each block takes tiles of
// blockDim.x * kUnroll consecutive items; each thread loads its kUnroll items
// of a tile (a block-width apart, so every load instruction is coalesced)
// before it stores any: one load at a time per thread leaves HBM waiting on
// latency.
template <int kUnroll, typename Load, typename Store>
__device__ __forceinline__ void GridStride(int64_t count, Load load, Store store) {
  const int64_t tile = int64_t{blockDim.x} * kUnroll;
  for (int64_t start = int64_t{blockIdx.x} * tile + threadIdx.x; start < count;
       start += int64_t{gridDim.x} * tile) {
    decltype(load(start)) items[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (start + k * blockDim.x < count) items[k] = load(start + k * blockDim.x);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (start + k * blockDim.x < count) store(start + k * blockDim.x, items[k]);
  }
}

}  // namespace jax_camp
