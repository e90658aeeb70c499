// Device-side pieces shared by the CUDA kernels and their launchers: 16-bit float
// conversions, packs for 128-bit memory access, warp and block reductions, cached
// device queries, the elementwise tile launch, and cudaError_t to ffi::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ffi_common.h"
#include "pack_size.h"

namespace jax_camp {

struct DeviceTypes {
  using BF16 = __nv_bfloat16;
  using F16 = __half;
};

// 16-bit results are computed in float32 and rounded once on the way out.
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
constexpr int kPack128 = PackElements(sizeof(T));

// A compile-time int as an argument, for choosing a kernel template's instance.
template <int N>
struct IntTag {
  static constexpr int value = N;
};

inline bool IsAligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// Values as raw bits in 32-bit words (two 16-bit values per word), converted to float32
// where used: whole words keep accesses 128-bit and stay in registers, unlike __nv_bfloat16 arrays.
template <typename T>
struct ValueBits;
template <>
struct ValueBits<float> {
  static __device__ __forceinline__ float ToFloat(unsigned bits) { return __uint_as_float(bits); }
  static __device__ __forceinline__ unsigned FromFloat(float v) { return __float_as_uint(v); }
};

// The 16-bit types' conversions, overloaded on the type (the first argument, unused); two
// floats round into one word in one instruction.
__device__ __forceinline__ float Widen(__nv_bfloat16, unsigned bits) {
  return __uint_as_float(bits << 16);
}
__device__ __forceinline__ float Widen(__half, unsigned bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ unsigned short Narrow(__nv_bfloat16, float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ unsigned short Narrow(__half, float v) {
  return __half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ __nv_bfloat162 NarrowPair(__nv_bfloat16, float low, float high) {
  return __floats2bfloat162_rn(low, high);
}
__device__ __forceinline__ __half2 NarrowPair(__half, float low, float high) {
  return __floats2half2_rn(low, high);
}

// A 16-bit type's pair of values (__nv_bfloat162, __half2) as the 32-bit word that holds it.
template <typename Pair>
__device__ __forceinline__ unsigned WordOf(Pair pair) {
  return *reinterpret_cast<const unsigned*>(&pair);
}
template <typename Pair>
__device__ __forceinline__ Pair PairOf(unsigned word) {
  return *reinterpret_cast<const Pair*>(&word);
}

// bfloat16's and float16's bits; two values a word also take the larger of each pair's values
// in one instruction (as fmaxf, a NaN dropped), and kNegInfPair is two -inf.
template <typename T>
struct ValueBits {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
  using Pair = decltype(NarrowPair(T{}, 0.f, 0.f));
  static __device__ __forceinline__ float ToFloat(unsigned bits) { return Widen(T{}, bits); }
  static __device__ __forceinline__ unsigned FromFloat(float v) { return Narrow(T{}, v); }
  static __device__ __forceinline__ unsigned PairFromFloats(float low, float high) {
    return WordOf(NarrowPair(T{}, low, high));
  }
  static constexpr unsigned kNegInfPair =
      std::is_same_v<T, __nv_bfloat16> ? 0xff80ff80u : 0xfc00fc00u;
  static __device__ __forceinline__ unsigned PairMax(unsigned a, unsigned b) {
    return WordOf(__hmax2(PairOf<Pair>(a), PairOf<Pair>(b)));
  }
};

// kPack values of T as 32-bit words in registers. In memory a pack is one access of
// kPack * sizeof(T) bytes (a lone 16-bit value is loaded as such and widened).
template <typename T, int kPack>
struct PackedBits {
  using MemoryWord = std::conditional_t<(sizeof(T) * kPack >= 4), unsigned, unsigned short>;
  static constexpr int kPerWord = sizeof(MemoryWord) / sizeof(T);
  static constexpr int kWords = kPack / kPerWord;
  static constexpr int kBits = 8 * sizeof(T);
  using MemoryPack = Pack<MemoryWord, kWords>;
  unsigned words[kWords];

  // 16-byte packs move as one 128-bit access. That store is written in PTX, so dst
  // must be in global memory; in C++, nvcc split some of them into 4-byte stores.
  __device__ __forceinline__ void Load(const MemoryPack* src) {
    if constexpr (sizeof(MemoryPack) == 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(src);
      words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else {
      const MemoryPack pack = *src;
#pragma unroll
      for (int w = 0; w < kWords; ++w) words[w] = pack.v[w];
    }
  }
  __device__ __forceinline__ void Store(MemoryPack* dst) const {
    if constexpr (sizeof(MemoryPack) == 16) {
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(words[0]),
                   "r"(words[1]), "r"(words[2]), "r"(words[3])
                   : "memory");
    } else {
      MemoryPack pack;
#pragma unroll
      for (int w = 0; w < kWords; ++w) pack.v[w] = static_cast<MemoryWord>(words[w]);
      *dst = pack;
    }
  }
  __device__ __forceinline__ float Get(int k) const {
    const unsigned word = words[k / kPerWord];
    return ValueBits<T>::ToFloat(kPerWord == 1 ? word : (word >> (kBits * (k % kPerWord))) & 0xffffu);
  }
  __device__ __forceinline__ void Set(const float (&values)[kPack]) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      if constexpr (kPerWord == 2) {
        words[w] = ValueBits<T>::PairFromFloats(values[2 * w], values[2 * w + 1]);
      } else {
        words[w] = ValueBits<T>::FromFloat(values[w]);
      }
    }
  }
};

// NaN-propagating max, as jnp.max: fmaxf would drop a NaN.
__device__ __forceinline__ float MaxPropagateNan(float a, float b) {
  return (a > b || a != a) ? a : b;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Reductions carry a float, or a struct of floats (softmax's running max and
// sum) with its own ShuffleXor overload.
__device__ __forceinline__ float ShuffleXor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}

// Butterfly reduction within each group of `width` lanes (a power of two up to 32),
// called by the whole warp: every lane gets its group's result, in a fixed order.
template <typename V, typename Op>
__device__ __forceinline__ V WarpReduce(V v, Op op, int width = 32) {
  for (int offset = width / 2; offset > 0; offset >>= 1) v = op(v, ShuffleXor(v, offset));
  return v;
}

// Tree reduction over a team of `team_warps` warps (a power of two) from `first_warp`;
// the whole block (a power of two of at least 32 threads) is blockDim.x / 32 from 0.
// Every thread of the block calls it and gets its team's result, the same bits in each.
// One barrier per call suffices as long as callers alternate two `warp_results` arrays.
template <typename V, typename Op>
__device__ __forceinline__ V BlockReduce(V v, Op op, V* warp_results, int team_warps,
                                         int first_warp) {
  v = WarpReduce(v, op);
  if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = v;
  __syncthreads();
  return WarpReduce(warp_results[first_warp + (threadIdx.x & (team_warps - 1))], op, team_warps);
}

inline ffi::Error CheckCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                              cudaGetErrorString(status) + ")");
}

// query(device, &value) for the current device, asked once per device and kept under
// Key, since handlers run on XLA's launch path where host time can leave the GPU idle.
template <typename Key, typename Query>
ffi::ErrorOr<int> CachedPerDevice(Query query, const char* what) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};  // the value + 1; 0: not asked yet
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "querying the device"));
  if (device < kMaxDevices) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known - 1;
  }
  int value = 0;
  status = query(device, &value);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, what));
  if (device < kMaxDevices) cached[device].store(value + 1, std::memory_order_relaxed);
  return value;
}

template <cudaDeviceAttr kAttribute>
ffi::ErrorOr<int> CachedDeviceAttribute() {
  return CachedPerDevice<std::integral_constant<cudaDeviceAttr, kAttribute>>(
      [](int device, int* value) { return cudaDeviceGetAttribute(value, kAttribute, device); },
      "querying the device");
}

// For sizing grids to the machine.
inline ffi::ErrorOr<int> SmCount() {
  return CachedDeviceAttribute<cudaDevAttrMultiProcessorCount>();
}

// Internal to each file that includes this header, so that each asks about its own code.
namespace {

// An empty kernel loaded with the file's others; a template, so only files that ask carry it.
template <int kUnused = 0>
__global__ void ArchitectureProbe() {}
struct ArchitectureProbeKey {};

// The __CUDA_ARCH__ of the code the driver loaded for this file's kernels on the current
// device. It is older than the device where the driver had to compile older PTX, and such
// code traps on Hopper paths, so launch plans must use this, never the device's own.
inline ffi::ErrorOr<int> KernelArchitecture() {
  return CachedPerDevice<ArchitectureProbeKey>(
      [](int, int* value) {
        cudaFuncAttributes attributes = {};
        const cudaError_t status = cudaFuncGetAttributes(&attributes, ArchitectureProbe<>);
        *value = attributes.ptxVersion;
        return status;
      },
      "asking which architecture the loaded kernels were compiled for");
}

}  // namespace

// Blocks of `threads` for ForBlockTile over `count` items, kUnroll per thread: a tile each.
template <int kUnroll>
ffi::ErrorOr<int> TileBlocks(int64_t count, int threads, const char* what) {
  const int64_t tile = int64_t{threads} * kUnroll;
  const int64_t blocks = count > 0 ? (count + tile - 1) / tile : 1;
  constexpr int64_t kMaxBlocks = 0x7fffffff;  // gridDim.x
  if (blocks > kMaxBlocks)
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string(what) + ": more elements than one grid of 2^31 - 1 blocks covers"));
  return static_cast<int>(blocks);
}

// store(i, load(i)) for this block's tile of blockDim.x * kUnroll items, those below
// `count`; each thread loads its kUnroll items, a block-width apart so loads coalesce,
// before storing any. A tile per block, since a grid-stride loop costs a 64-bit division.
template <int kUnroll, typename Load, typename Store>
__device__ __forceinline__ void ForBlockTile(int64_t count, Load load, Store store) {
  const int64_t start = int64_t{blockIdx.x} * blockDim.x * kUnroll + threadIdx.x;
  decltype(load(start)) items[kUnroll];
#pragma unroll
  for (int k = 0; k < kUnroll; ++k)
    if (start + k * blockDim.x < count) items[k] = load(start + k * blockDim.x);
#pragma unroll
  for (int k = 0; k < kUnroll; ++k)
    if (start + k * blockDim.x < count) store(start + k * blockDim.x, items[k]);
}

constexpr int kTileThreads = 256;

// Launches select_kernel(IntTag<pack>)(args...) over `count` elements of T, one tile
// of kTileThreads threads x kUnroll packs per block: 16-byte packs where `aligned`
// (every pointer 16-byte aligned), else single elements. `op` names the op in errors.
template <typename T, int kUnroll, typename SelectKernel, typename... Args>
ffi::Error LaunchTiles(const char* op, cudaStream_t stream, int64_t count, bool aligned,
                       SelectKernel select_kernel, Args... args) {
  constexpr int kPack = kPack128<T>;
  const auto blocks = TileBlocks<kUnroll>(aligned ? count / kPack : count, kTileThreads, op);
  if (!blocks.has_value()) return blocks.error();
  if (aligned) {
    select_kernel(IntTag<kPack>{})<<<*blocks, kTileThreads, 0, stream>>>(args...);
  } else {
    select_kernel(IntTag<1>{})<<<*blocks, kTileThreads, 0, stream>>>(args...);
  }
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return ffi::Error::Success();
  return CheckCuda(status, (std::string("launching ") + op).c_str());
}

}  // namespace jax_camp
