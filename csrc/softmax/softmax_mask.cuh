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

// kBitsAtLoad: Load makes each pack's bytes bits as it reads them, holding fewer registers.
// Otherwise it keeps the bytes until DropFrom, so that ptxas issues all of the chunk's
// loads, x's and the mask's, before it waits on any: made bits at once, each pack's bits
// waited for its load before the next loads were issued. Which kernels take which is
// kMaskBitsAtLoad's (softmax_kernel.cuh).
template <int kPack, int kChunk, bool kBitsAtLoad>
class ChunkMask {
 public:
  // The mask of the chunk RowChunk::Load loads from the same place: the bytes of pack i at
  // mask pack team.PackOf(i) from `first`, clamped to pack 0 past `count` as there.
  __device__ __forceinline__ void Load(const uint8_t* first, int count, const RowTeam& team) {
    if constexpr (kBitsAtLoad) ClearBits();
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int p = team.PackOf(i);
      const uint8_t* bytes = first + (p < count ? p : 0) * kPack;
      if constexpr (kBitsAtLoad) {
        bits_[i * kPack / 32] |= PackBits(bytes) << (i * kPack % 32);
      } else {
        bytes_[i] = LoadPack(bytes);
      }
    }
  }

  // Makes the loaded bytes bits and sets the chunk's masked-out values to -inf, so that they
  // take no part in the row's max and sum of exps.
  template <typename T>
  __device__ __forceinline__ void DropFrom(RowChunk<T, kPack, kChunk>& chunk) {
    if constexpr (!kBitsAtLoad) {
      ClearBits();
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        bits_[i * kPack / 32] |= BitsOf(bytes_[i]) << (i * kPack % 32);
    }
    using Pack = typename RowChunk<T, kPack, kChunk>::StoredPack;
    const unsigned neg_inf = ValueBits<T>::FromFloat(-INFINITY);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const int shift = Pack::kBits * (k % Pack::kPerWord);
        const unsigned value_bits = (Pack::kPerWord == 1 ? ~0u : 0xffffu) << shift;
        unsigned& word = chunk.packs[i].words[k / Pack::kPerWord];
        word = Keeps(i, k) ? word : (word & ~value_bits) | (neg_inf << shift);
      }
    }
  }

  // Whether value k of pack i takes part in its row.
  __device__ __forceinline__ bool Keeps(int i, int k) const {
    const int bit = i * kPack + k;
    return (bits_[bit / 32] >> (bit % 32)) & 1u;
  }

 private:
  static_assert(kPack == 1 || kPack == 4 || kPack == 8, "a pack's mask is 1, 4 or 8 bytes");
  static constexpr int kWords = (kPack * kChunk + 31) / 32;

  __device__ __forceinline__ void ClearBits() {
#pragma unroll
    for (int w = 0; w < kWords; ++w) bits_[w] = 0;
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

  // BitsOf(LoadPack(bytes)) written out as one function: as those two calls, ptxas
  // scheduled the float32 cluster kernel otherwise, and it ran slower.
  static __device__ __forceinline__ unsigned PackBits(const uint8_t* bytes) {
    if constexpr (kPack == 1) {
      return *bytes != 0;
    } else {
      const uint2 words = kPack == 8 ? *reinterpret_cast<const uint2*>(bytes)
                                     : make_uint2(*reinterpret_cast<const unsigned*>(bytes), 0);
      unsigned bits = 0;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const unsigned word = k < 4 ? words.x : words.y;
        bits |= (((word >> (8 * (k % 4))) & 0xffu) != 0) << k;
      }
      return bits;
    }
  }

  // A pack's bytes (LoadPack's) as kPack bits, bit k set where byte k is nonzero.
  static __device__ __forceinline__ unsigned BitsOf(uint2 bytes) {
    unsigned bits = 0;
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const unsigned word = k < 4 ? bytes.x : bytes.y;
      bits |= (((word >> (8 * (k % 4))) & 0xffu) != 0) << k;
    }
    return bits;
  }

  uint2 bytes_[kChunk];  // kept only without kBitsAtLoad
  unsigned bits_[kWords];
};

// A kernel's mask: a ChunkMask where it has one, else AllKept.
template <bool kMasked, int kPack, int kChunk, bool kBitsAtLoad = false>
using KeepOf = std::conditional_t<kMasked, ChunkMask<kPack, kChunk, kBitsAtLoad>, AllKept>;

}  // namespace jax_camp::softmax
