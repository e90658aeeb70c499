// The 16-byte pack: the widest global access a thread makes in one
// instruction. Host code, shared by the planner and the kernels.
#pragma once

namespace jax_camp {

// Elements of `item_bytes` bytes in a 16-byte pack.
constexpr int PackElements(int item_bytes) { return 16 / item_bytes; }

}  // namespace jax_camp
