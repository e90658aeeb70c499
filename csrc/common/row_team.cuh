// Row kernels (reduce_sum, softmax forward and backward) are written once
// against a RowTeam: the threads that share one row. Short rows get a few
// lanes of a warp each (several rows per warp, reduced with shuffles); long
// rows get the whole block (reduced through shared memory). Each thread holds
// a chunk of its row in registers: kChunk packs, all loaded before any is
// used, so that many loads are in flight. A row that fits in one chunk per
// thread is read from memory once, however many passes the kernel makes.
#pragma once

#include <algorithm>
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

// One thread's chunk of a row: kChunk packs, pack i being the row's pack
// base + i * lanes + lane, so that a team's loads are contiguous.
template <typename T, int kPack, int kChunk>
struct RowChunk {
  using StoredPack = PackedBits<T, kPack>;
  StoredPack packs[kChunk];

  __device__ __forceinline__ void Load(const T* row, int64_t num_packs, int64_t base,
                                       const RowTeam& team) {
    const auto* row_packs = reinterpret_cast<const typename StoredPack::MemoryPack*>(row);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t p = base + int64_t{i} * team.lanes + team.lane;
      // Clamped rather than skipped: a predicated-off load keeps the chunk in
      // registers, where a branch around it sent 16-bit chunks to the stack.
      packs[i].Load(row_packs + (p < num_packs ? p : 0));
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
        for (int k = 0; k < kPack; ++k) values[k] = packs[i].Get(k);
        visit(i, p * kPack, values);
      }
    }
  }

  __device__ __forceinline__ float Value(int i, int k) const { return packs[i].Get(k); }
};

template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  PackedBits<T, kPack> packed;
  packed.Set(values);
  packed.Store(reinterpret_cast<typename PackedBits<T, kPack>::MemoryPack*>(dst));
}

// Packs per chunk for a chunk of about `chunk_elements` values: the same
// number of values, so the same registers, whatever the dtype; unpacked
// (scalar) rows take a quarter as many, each load being that much narrower.
__host__ __device__ constexpr int ChunkPacks(int chunk_elements, int pack) {
  return pack == 1 ? chunk_elements / 4 : chunk_elements / pack;
}

template <int N>
struct IntTag {
  static constexpr int value = N;
};

// A row kernel's launch limits: the most values a thread holds
// (kMaxChunkElements), the most threads a row (kMaxThreads, the kernel's
// __launch_bounds__), and the lanes a row it prefers (kTeamLanes; see
// RowLanes).
template <int kMaxChunkElementsValue, int kMaxThreadsValue, int kTeamLanesValue>
struct RowPolicy {
  static constexpr int kMaxChunkElements = kMaxChunkElementsValue;
  static constexpr int kMaxThreads = kMaxThreadsValue;
  static constexpr int kTeamLanes = kTeamLanesValue;
};

// A row kernel's launch plan: `chunk` packs a thread (a power of two),
// `lanes` threads a row.
struct RowLaunch {
  int chunk;
  int lanes;
  int blocks;
  int threads;
};

constexpr int kRowsBlockThreads = 256;  // the block size when teams are warp lanes

// The row kernels' shared launch policy, for rows of `num_packs` packs, from
// timing each kernel under several plans on the H200
// (scripts/row_policy_bench.cu; docs/performance_notes.md, v3):
// - lanes a row: at least `team_lanes` (64 or 128, each kernel's fastest)
//   while each still gets 4 packs (64 bytes in flight a thread), more where
//   the row needs them to fit `max_chunk` packs a thread, and at least 8 (128
//   bytes of a row per warp load: with 2 lanes a row each warp load touched
//   16 rows' cache lines); a power of two up to `max_threads`. Up to 32 lanes share a warp with other rows; beyond, a
//   block takes each row: small blocks, whose load, reduce and store phases
//   overlap with other blocks', beat large ones.
// - chunk: the fewest packs a thread that hold the row (a power of two), so
//   short rows keep few registers and many warps resident. Rows longer than
//   max_threads * max_chunk packs are streamed through, chunk after chunk.
// - grid: one team a row, capped at 4 waves of resident blocks; the kernels
//   loop over the remaining rows.
inline int RowLanes(int64_t num_packs, int max_chunk, int max_threads, int team_lanes) {
  constexpr int64_t kMinChunk = 4;
  const int64_t lanes_for_chunk = (num_packs + max_chunk - 1) / max_chunk;
  const int64_t lanes_for_overlap =
      std::min<int64_t>(team_lanes, (num_packs + kMinChunk - 1) / kMinChunk);
  const int64_t lanes_wanted =
      std::max({lanes_for_chunk, lanes_for_overlap, std::min<int64_t>(num_packs, 8)});
  int lanes = 1;
  while (lanes < lanes_wanted && lanes < max_threads) lanes *= 2;
  return lanes;
}

// The plan for a given number of lanes a row (a power of two).
inline RowLaunch PlanRowLaunchWithLanes(int64_t rows, int64_t num_packs, int lanes, int max_chunk,
                                        int sm_count) {
  int chunk = 1;
  while (int64_t{lanes} * chunk < num_packs && chunk < max_chunk) chunk *= 2;
  const int threads = lanes <= 32 ? kRowsBlockThreads : lanes;
  const int64_t rows_per_block = threads / lanes;
  const int64_t wanted = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t cap = int64_t{sm_count} * (2048 / threads) * 4;
  return {chunk, lanes, static_cast<int>(std::min(wanted, cap)), threads};
}

inline RowLaunch PlanRowLaunch(int64_t rows, int64_t num_packs, int max_chunk, int max_threads,
                               int team_lanes, int sm_count) {
  return PlanRowLaunchWithLanes(rows, num_packs,
                                RowLanes(num_packs, max_chunk, max_threads, team_lanes), max_chunk,
                                sm_count);
}

// f(IntTag<c>{}) for the power of two c == chunk, c <= kMaxChunk.
template <int kMaxChunk, typename F>
ffi::Error DispatchChunk(int chunk, F f) {
  if constexpr (kMaxChunk > 1) {
    if (chunk < kMaxChunk) return DispatchChunk<kMaxChunk / 2>(chunk, f);
  }
  return f(IntTag<kMaxChunk>{});
}

// kernel<<<plan>>>(args..., plan.lanes).
template <typename... Params, typename... Args>
ffi::Error LaunchRowPlan(const char* what, cudaStream_t stream, const RowLaunch& plan,
                         void (*kernel)(Params...), Args... args) {
  kernel<<<plan.blocks, plan.threads, 0, stream>>>(args..., plan.lanes);
  return CheckCuda(cudaGetLastError(), what);
}

// Plans a row kernel's launch by its RowPolicy and launches select_kernel(IntTag<pack>, IntTag<chunk>) with
// args..., plan.lanes. 128-bit packs when the rows are 16-byte aligned.
template <typename T, typename Policy, typename SelectKernel, typename... Args>
ffi::Error LaunchRowKernel(const char* what, cudaStream_t stream, int64_t rows, int64_t cols,
                           bool aligned, SelectKernel select_kernel, Args... args) {
  auto sm_count = SmCount();
  if (!sm_count.has_value()) return sm_count.error();
  constexpr int kPack = kPack128<T>;
  const bool packed = aligned && cols % kPack == 0;
  const RowLaunch plan =
      PlanRowLaunch(rows, packed ? cols / kPack : cols,
                    ChunkPacks(Policy::kMaxChunkElements, packed ? kPack : 1), Policy::kMaxThreads,
                    Policy::kTeamLanes, *sm_count);
  auto launch = [&](auto pack) {
    constexpr int kMaxChunk = ChunkPacks(Policy::kMaxChunkElements, decltype(pack)::value);
    return DispatchChunk<kMaxChunk>(plan.chunk, [&](auto chunk) {
      return LaunchRowPlan(what, stream, plan, select_kernel(pack, chunk), args...);
    });
  };
  return packed ? launch(IntTag<kPack>{}) : launch(IntTag<1>{});
}

}  // namespace jax_camp
