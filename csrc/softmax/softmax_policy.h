// softmax's launch policies (RowPolicy): host code, which its kernels (their
// __launch_bounds__), its launcher and the module's planner binding read.
// Their chunks and block sizes keep every dtype's chunks in registers (nvcc
// -Xptxas -v reports no spills); the backward holds two chunks, y and g.
// docs/performance_notes.md gives the measurement behind each value.
#pragma once

#include "../common/row_plan.h"

namespace jax_camp::softmax {

inline constexpr RowPolicy kForwardPolicy = [] {
  RowPolicy policy;
  policy.max_chunk_elements = 64;      // 512 threads x 64 values hold a row of 32768
  policy.max_threads = 512;
  policy.team_lanes = 128;             // medium rows ran faster in 128 lanes than in 64
  policy.cluster_block_threads = 512;  // longer rows held in clusters, read once, not streamed
  policy.min_lanes = 4;                // rows of up to 16 packs take 4 lanes of 4 packs
  policy.rows_block_threads = 64;      // teams up to a warp share small blocks, which overlap
  policy.busy_grid_max_chunk = 6;      // many rows: fewer lanes, more bytes in flight each
  return policy;
}();
inline constexpr RowPolicy kBackwardPolicy = [] {
  RowPolicy policy;
  policy.max_chunk_elements = 32;      // two chunks a thread, y's and g's
  policy.max_threads = 512;
  policy.team_lanes = 64;              // 128 lanes ran medium rows slower
  policy.cluster_block_threads = 256;  // clusters of small blocks read long rows once
  return policy;
}();

// Shared memory a thread that a kernel prefetches its team's next row into
// (NextRow), for `chunks` chunks a thread (the forward's x; the backward's y
// and g): kernels of rows held in clusters, in 16-byte packs, have it; where
// the launcher gives it them, see PrefetchSharedBytes.
constexpr int PrefetchBytesPerThread(int chunks, int item_bytes, int pack, int chunk,
                                     RowLayout layout) {
  return layout == RowLayout::kHeldInCluster && pack > 1 ? chunks * item_bytes * pack * chunk : 0;
}

}  // namespace jax_camp::softmax
