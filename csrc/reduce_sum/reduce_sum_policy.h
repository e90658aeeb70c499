// reduce_sum's launch policy: host code, which its kernels (their
// __launch_bounds__), its launcher and the module's planner binding read.
#pragma once

#include "../common/row_plan.h"

namespace jax_camp::reduce_sum {

// The launch policy for elements of `item_bytes` (RowPolicy); docs/
// performance_notes.md gives the measurement behind each value. A sum never
// needs its row twice, so rows longer than a chunk a thread are streamed,
// chunk by chunk.
constexpr RowPolicy PolicyFor(int item_bytes) {
  const bool is_16_bit = item_bytes == 2;
  RowPolicy policy;
  policy.max_chunk_elements = 8 * PackElements(item_bytes);  // 128 bytes in flight a thread
  policy.max_threads = 512;
  policy.team_lanes = 32;  // a warp's lanes a row where 8 packs each hold it
  // Teams of up to 2 warps (4 for 16-bit) share 256-thread blocks, several rows a block.
  policy.shared_block_lanes = is_16_bit ? 128 : 64;
  policy.small_grid_lanes = is_16_bit ? 64 : 128;  // the fastest on grids too few to fill the SMs
  // 16-bit rows on quiet grids take twice the lanes rather than 8 packs a
  // thread: ptxas issues the last two packs' loads of 8 only after the first
  // pack's adds.
  policy.quiet_grid_max_chunk = is_16_bit ? 7 : 0;
  return policy;
}

inline constexpr RowPolicy kFloat32Policy = PolicyFor(4);
inline constexpr RowPolicy k16BitPolicy = PolicyFor(2);
// A reference to a plain constant, not a variable template's own object:
// nvcc lost the latter's constness where a launcher's template took it.
template <typename T>
inline constexpr const RowPolicy& kPolicy = sizeof(T) == 4 ? kFloat32Policy : k16BitPolicy;

}  // namespace jax_camp::reduce_sum
