// Row kernels (reduce_sum, softmax) are written once against a "team": the
// threads that share one row. A warp team suits short rows (no shared memory,
// no block barrier); a block team suits long rows. The launcher picks one.
#pragma once

#include <cstdint>

#include "cuda_common.cuh"

namespace jax_camp {

// One warp per row; a block holds blockDim.x / 32 such teams.
struct WarpTeam {
  static constexpr int kScratchFloats = 0;
  int64_t first_row;
  int64_t row_stride;
  int lane;
  __device__ WarpTeam()
      : first_row(int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32),
        row_stride(int64_t{gridDim.x} * (blockDim.x / 32)),
        lane(threadIdx.x % 32) {}
  __device__ int size() const { return 32; }
  template <typename Op>
  __device__ float Reduce(float v, Op op, float*) const {
    return WarpReduce(v, op);
  }
};

// The whole block on one row.
struct BlockTeam {
  static constexpr int kScratchFloats = 32;
  int64_t first_row;
  int64_t row_stride;
  int lane;
  __device__ BlockTeam() : first_row(blockIdx.x), row_stride(gridDim.x), lane(threadIdx.x) {}
  __device__ int size() const { return blockDim.x; }
  template <typename Op>
  __device__ float Reduce(float v, Op op, float* scratch) const {
    return BlockReduce(v, op, scratch);
  }
};

template <int kPack, typename T>
__device__ __forceinline__ void LoadPack(const T* src, float (&values)[kPack]) {
  const Pack<T, kPack> packed = *reinterpret_cast<const Pack<T, kPack>*>(src);
#pragma unroll
  for (int k = 0; k < kPack; ++k) values[k] = ToFloat(packed.v[k]);
}

template <int kPack, typename T>
__device__ __forceinline__ void StorePack(T* dst, const float (&values)[kPack]) {
  Pack<T, kPack> packed;
#pragma unroll
  for (int k = 0; k < kPack; ++k) packed.v[k] = FromFloat<T>(values[k]);
  *reinterpret_cast<Pack<T, kPack>*>(dst) = packed;
}

// Calls visit(column, values) for this thread's packs of one row: packs
// lane, lane + team size, ... The launcher only picks kPack > 1 when it
// divides the row length and the rows are 16-byte aligned.
template <int kPack, typename T, typename Team, typename Visit>
__device__ __forceinline__ void ForEachPack(const T* row, int64_t cols, const Team& team,
                                            Visit visit) {
  for (int64_t p = team.lane; p < cols / kPack; p += team.size()) {
    float values[kPack];
    LoadPack(row + p * kPack, values);
    visit(p * kPack, values);
  }
}


}  // namespace jax_camp

namespace jax_camp {

template <int N>
struct IntTag {
  static constexpr int value = N;
};

// Rows of up to this many columns go to a warp each; longer ones to a block.
constexpr int64_t kWarpTeamMaxCols = 1024;
constexpr int kRowThreads = 256;

// The launch policy every row kernel shares: picks the team by row length,
// 128-bit packs when alignment allows, and a grid that covers the SMs (rows
// beyond it are taken by the kernels' row-stride loops). launch(pack, team,
// blocks, threads) does the <<<>>> with the kernel the caller owns.
template <typename T, typename Launch>
ffi::Error LaunchRowKernel(const char* what, int64_t rows, int64_t cols, bool aligned,
                           Launch launch) {
  constexpr int kPack = kPack128<T>;
  const bool packed = aligned && cols % kPack == 0;
  const bool warp_team = cols <= kWarpTeamMaxCols;
  const int64_t team_threads = warp_team ? 32 : kRowThreads;
  auto blocks = GridSize(rows * team_threads, kRowThreads, 16);
  if (!blocks.has_value()) return blocks.error();
  auto with_pack = [&](auto pack) {
    if (warp_team) {
      launch(pack, Tag<WarpTeam>{}, *blocks, kRowThreads);
    } else {
      launch(pack, Tag<BlockTeam>{}, *blocks, kRowThreads);
    }
  };
  if (packed) {
    with_pack(IntTag<kPack>{});
  } else {
    with_pack(IntTag<1>{});
  }
  return CheckCuda(cudaGetLastError(), what);
}

}  // namespace jax_camp
