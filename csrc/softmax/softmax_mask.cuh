// where=: which values of a thread's RowChunk take part in their row. The mask has x's
// shape, a bool, one byte an element (nonzero keeps it, 0 masks it out), and is read with x: a
// chunk's mask is the bytes of the packs the chunk holds, one access a pack, kept in
// registers as one bit a value. A masked-out value is -inf to the row's max and sum, as in
// jax.nn.softmax, and its output is the op's masked value (0, or -inf for log_softmax).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/row_team.cuh"

namespace jax_camp::softmax {

// Every value kept: the kernels without a mask, where this all compiles away.
struct AllKept {
  __device__ __forceinline__ void Load(const uint8_t*, int, const RowTeam&) {}
  template <typename Chunk>
  __device__ __forceinline__ void DropFrom(Chunk&) const {}
  __device__ __forceinline__ bool Keeps(int, int) const { return true; }
};

// A thread's mask for its RowChunk of kChunk packs: one bit a value, made as the bytes load.
template <int kPack, int kChunk>
class ChunkMask {
 public:
  // The mask of the chunk RowChunk::Load loads from the same place: the bytes of pack i at
  // mask pack team.PackOf(i) from `first`, clamped to pack 0 past `count` as there, made bits
  // as they come.
  __device__ __forceinline__ void Load(const uint8_t* first, int count, const RowTeam& team) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) bits_[w] = 0;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int p = team.PackOf(i);
      bits_[i * kPack / 32] |= BitsOf(LoadPack(first + (p < count ? p : 0) * kPack))
                               << (i * kPack % 32);
    }
  }

  // Sets the chunk's masked-out values to -inf, so that they take no part in the row's max
  // and sum of exps.
  template <typename T>
  __device__ __forceinline__ void DropFrom(RowChunk<T, kPack, kChunk>& chunk) const {
    using Pack = typename RowChunk<T, kPack, kChunk>::StoredPack;
    const unsigned neg_inf = ValueBits<T>::FromFloat(-INFINITY);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const int shift = Pack::kBits * (k % Pack::kPerWord);
        const unsigned value_bits = (Pack::kPerWord == 1 ? ~0u : 0xffffu) << shift;
        unsigned& word = chunk.packs[i].words[k / Pack::kPerWord];
        // A select by bit arithmetic, with no predicate (see BitsOf).
        const unsigned kept = 0u - KeptBit(i, k);  // all ones where kept
        word = (word & (kept | ~value_bits)) | ((neg_inf << shift) & value_bits & ~kept);
      }
    }
  }

  // Whether value k of pack i takes part in its row.
  __device__ __forceinline__ bool Keeps(int i, int k) const { return KeptBit(i, k) != 0; }

 private:
  static_assert(kPack == 1 || kPack == 4 || kPack == 8, "a pack's mask is 1, 4 or 8 bytes");
  static constexpr int kWords = (kPack * kChunk + 31) / 32;

  // 1 where value k of pack i takes part in its row, else 0.
  __device__ __forceinline__ unsigned KeptBit(int i, int k) const {
    const int bit = i * kPack + k;
    return (bits_[bit / 32] >> (bit % 32)) & 1u;
  }

  // The kPack mask bytes at `bytes`, read as one access, as the low bytes of a uint2.
  static __device__ __forceinline__ uint2 LoadPack(const uint8_t* bytes) {
    if constexpr (kPack == 1) {
      return make_uint2(*bytes, 0);
    } else {
      return kPack == 8 ? *reinterpret_cast<const uint2*>(bytes)
                        : make_uint2(*reinterpret_cast<const unsigned*>(bytes), 0);
    }
  }

  // A pack's bytes (LoadPack's) as kPack bits, bit k set where byte k is nonzero. In integer
  // arithmetic, not a compare a byte: those compares take predicate registers, of which a
  // thread has seven, and with them ptxas waited on each pack's mask before it issued the
  // next pack's loads, x's included.
  static __device__ __forceinline__ unsigned BitsOf(uint2 bytes) {
    if constexpr (kPack == 1) {
      return bytes.x != 0;
    } else {
      const unsigned low = NonzeroBytes(bytes.x);
      return kPack == 8 ? low | NonzeroBytes(bytes.y) << 4 : low;
    }
  }

  // Bit k set where byte k of `word` is nonzero: each byte made 0 or 1, then one multiply
  // gathers them, byte k times 2^k landing in the top byte (sums below 16, so no carries).
  static __device__ __forceinline__ unsigned NonzeroBytes(unsigned word) {
    return ((__vcmpne4(word, 0u) & 0x01010101u) * 0x01020408u) >> 24;
  }

  unsigned bits_[kWords];
};

// A kernel's mask: a ChunkMask where it has one, else AllKept.
template <bool kMasked, int kPack, int kChunk>
using KeepOf = std::conditional_t<kMasked, ChunkMask<kPack, kChunk>, AllKept>;

}  // namespace jax_camp::softmax
