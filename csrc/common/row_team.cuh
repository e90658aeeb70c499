// Row kernels (reduce_sum, softmax forward and backward) are written once
// against a RowTeam: the threads that share one row. Short rows get a few
// lanes of a warp each (several rows per warp, reduced with shuffles); long
// rows get the whole block (reduced through shared memory). Each thread holds
// a chunk of its row in registers: kChunk packs, all loaded before any is
// used, so that many loads are in flight. A row that fits in one chunk per
// thread is read from memory once, however many passes the kernel makes.
#pragma once

#include <cstdint>

#include "cuda_common.cuh"

namespace jax_camp {

struct RowTeam {
  int lanes;  // threads per row: a power of two up to 32, or the whole block
  int lane;   // this thread's place in its team
  int64_t first_row;
  int64_t row_stride;

  __device__ explicit RowTeam(int team_lanes)
      : lanes(team_lanes),
        lane(threadIdx.x % team_lanes),
        first_row(int64_t{blockIdx.x} * (blockDim.x / team_lanes)),
        row_stride(int64_t{gridDim.x} * (blockDim.x / team_lanes)) {}

  // This thread's row in the block's current group of rows starting at
  // `group`. The loop over groups is uniform across the block, so every
  // thread reaches every reduction; rows past the end are simply empty.
  __device__ int64_t RowIn(int64_t group) const { return group + threadIdx.x / lanes; }

  // Every lane of the team returns op over the team's values. `scratch` holds
  // 32 floats (block teams only).
  template <typename Op>
  __device__ float Reduce(float v, Op op, float* scratch) const {
    if (lanes > 32) return BlockReduce(v, op, scratch);
    for (int offset = lanes / 2; offset > 0; offset >>= 1)
      v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
  }
};

// How a chunk holds T: 16-bit floats as their bits. nvcc keeps arrays of
// plain integers in registers where arrays of __nv_bfloat16 went to the stack.
template <typename T>
struct ChunkStorage {
  using type = T;
  static __device__ __forceinline__ float ToFloat(T v) { return v; }
  static __device__ __forceinline__ T FromFloat(float v) { return v; }
};
template <>
struct ChunkStorage<__nv_bfloat16> {
  using type = unsigned short;
  static __device__ __forceinline__ float ToFloat(unsigned short bits) {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
  static __device__ __forceinline__ unsigned short FromFloat(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};
template <>
struct ChunkStorage<__half> {
  using type = unsigned short;
  static __device__ __forceinline__ float ToFloat(unsigned short bits) {
    return __half2float(__ushort_as_half(bits));
  }
  static __device__ __forceinline__ unsigned short FromFloat(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};

// One thread's chunk of a row: kChunk packs, pack i being the row's pack
// base + i * lanes + lane, so that a team's loads are contiguous.
template <typename T, int kPack, int kChunk>
struct RowChunk {
  using Storage = ChunkStorage<T>;
  using StoredPack = Pack<typename Storage::type, kPack>;
  StoredPack packs[kChunk];

  __device__ __forceinline__ void Load(const T* row, int64_t num_packs, int64_t base,
                                       const RowTeam& team) {
    const StoredPack* row_packs = reinterpret_cast<const StoredPack*>(row);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t p = base + int64_t{i} * team.lanes + team.lane;
      // Clamped rather than skipped: a predicated-off load keeps the chunk in
      // registers, where a branch around it sends 16-bit chunks to the stack.
      packs[i] = row_packs[p < num_packs ? p : 0];
    }
  }

  // visit(i, column, values) for each loaded pack i, values in float32.
  template <typename Visit>
  __device__ __forceinline__ void ForEach(int64_t num_packs, int64_t base, const RowTeam& team,
                                          Visit visit) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t p = base + int64_t{i} * team.lanes + team.lane;
      if (p < num_packs) {
        float values[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k) values[k] = Storage::ToFloat(packs[i].v[k]);
        visit(i, p * kPack, values);
      }
    }
  }

  __device__ __forceinline__ float Value(int i, int k) const {
    return Storage::ToFloat(packs[i].v[k]);
  }
};

template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  using Storage = ChunkStorage<T>;
  Pack<typename Storage::type, kPack> packed;
#pragma unroll
  for (int k = 0; k < kPack; ++k) packed.v[k] = Storage::FromFloat(values[k]);
  *reinterpret_cast<decltype(packed)*>(dst) = packed;
}

// Packs per chunk for a chunk of about kChunkElements values: the same
// number of values, so the same registers, whatever the dtype; unpacked
// (scalar) rows take a quarter as many, each load being that much narrower.
__host__ __device__ constexpr int ChunkPacks(int chunk_elements, int pack) {
  return pack == 1 ? chunk_elements / 4 : chunk_elements / pack;
}

template <int N>
struct IntTag {
  static constexpr int value = N;
};

// The row kernels' shared launch policy. Lanes per row: enough that each
// thread's share fits one chunk of ChunkPacks(kChunkElements, pack) packs
// (and at least 8) (so the row stays in registers), rounded up to
// a power of two; up to 32 lanes a row shares a warp with other rows, beyond
// that a block of up to kMaxRowThreads takes each row, chunk after chunk. 128-
// bit packs when the rows are 16-byte aligned. launch(pack, blocks, threads,
// lanes) does the <<<>>> with the caller's kernel, which must allow
// kMaxThreads threads a block (__launch_bounds__).
constexpr int kRowsBlockThreads = 256;

template <typename T, int kChunkElements, int kMaxThreads, typename Launch>
ffi::Error LaunchRowKernel(const char* what, int64_t rows, int64_t cols, bool aligned,
                           Launch launch) {
  constexpr int kPack = kPack128<T>;
  const bool packed = aligned && cols % kPack == 0;
  const int64_t num_packs = packed ? cols / kPack : cols;
  const int chunk = packed ? ChunkPacks(kChunkElements, kPack) : ChunkPacks(kChunkElements, 1);
  const int64_t lanes_wanted = (num_packs + chunk - 1) / chunk;
  // At least 8 lanes (128 bytes of a row per load instruction) when the row
  // has the packs for them: with fewer, each warp load touches more rows'
  // cache lines than it fills (2 lanes a row ran softmax at a third of
  // XLA's speed on 128-column rows).
  const int64_t lanes_floor = num_packs < 8 ? num_packs : 8;
  int lanes = 1;
  while ((lanes < lanes_wanted || lanes < lanes_floor) && lanes < kMaxThreads) lanes *= 2;
  const int threads = lanes <= 32 ? kRowsBlockThreads : lanes;
  const int64_t rows_per_block = threads / lanes;

  auto sm_count = SmCount();
  if (!sm_count.has_value()) return sm_count.error();
  const int64_t wanted = (rows + rows_per_block - 1) / rows_per_block;
  // Several waves of resident blocks; the kernels' row loop takes the rest.
  const int64_t cap = int64_t{*sm_count} * (2048 / threads) * 4;
  const int blocks = static_cast<int>(wanted < cap ? wanted : cap);
  if (packed) {
    launch(IntTag<kPack>{}, blocks, threads, lanes);
  } else {
    launch(IntTag<1>{}, blocks, threads, lanes);
  }
  return CheckCuda(cudaGetLastError(), what);
}

}  // namespace jax_camp
