// Hopper's asynchronous data movement, as the cluster teams use it (row_team.cuh,
// ../softmax/softmax_prefetch.cuh): mbarriers that count arriving bytes, TMA bulk
// copies into shared memory, and stores into another cluster block's shared memory.
// These need sm_90 or newer and trap elsewhere; the launcher plans clusters only there.
#pragma once

#include <cstdint>
#include <cstring>

namespace jax_camp::hopper {

__device__ __forceinline__ unsigned SharedAddress(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// A barrier whose phase completes once `arrivals` threads have arrived and
// every byte they announced has landed.
__device__ __forceinline__ void InitBarrier(uint64_t* barrier, unsigned arrivals) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(barrier)),
               "r"(arrivals)
               : "memory");
#else
  __trap();
#endif
}

// Makes this thread's InitBarrier visible to the cluster's other blocks, as
// of the next cluster barrier.
__device__ __forceinline__ void PublishBarrierInit() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}

// Arrives on the barrier, announcing `bytes` more to land in this phase. The
// bytes may land before the announcement: the phase waits for both.
__device__ __forceinline__ void ArriveExpectingBytes(uint64_t* barrier, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Waits until the barrier's phase of parity `parity` (its 0th, 2nd, ... use:
// 0; 1st, 3rd, ...: 1) has completed.
__device__ __forceinline__ void WaitBarrier(uint64_t* barrier, unsigned parity) {
#if __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred complete; "
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2; "
        "selp.u32 %0, 1, 0, complete; }"
        : "=r"(done)
        : "r"(SharedAddress(barrier)), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// Orders this thread's earlier accesses to shared memory before the bulk copies
// (async proxy) that it starts next into the same memory.
__device__ __forceinline__ void FenceBeforeBulkCopies() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global into
// this block's shared memory in the background, counting them in on `barrier`.
__device__ __forceinline__ void BulkLoad(void* shared_dst, const void* global_src,
                                         unsigned bytes, uint64_t* barrier) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(shared_dst)),
      "l"(global_src), "r"(bytes), "r"(SharedAddress(barrier))
      : "memory");
#else
  __trap();
#endif
}

// Stores v at `slot` (this block's address for it) in cluster block `rank`, counting
// its bytes in on that block's `barrier`; the receiver waits there, not the sender.
template <typename V>
__device__ __forceinline__ void StoreToBlock(V* slot, V v, uint64_t* barrier, unsigned rank) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "one or two 32-bit words");
#if __CUDA_ARCH__ >= 900
  unsigned remote_slot, remote_barrier;
  asm("mapa.shared::cluster.u32 %0, %1, %2;"
      : "=r"(remote_slot)
      : "r"(SharedAddress(slot)), "r"(rank));
  asm("mapa.shared::cluster.u32 %0, %1, %2;"
      : "=r"(remote_barrier)
      : "r"(SharedAddress(barrier)), "r"(rank));
  unsigned words[sizeof(V) / 4];
  memcpy(words, &v, sizeof(V));
  if constexpr (sizeof(V) == 4) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                     remote_slot),
                 "r"(words[0]), "r"(remote_barrier)
                 : "memory");
  } else {
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(
            remote_slot),
        "r"(words[0]), "r"(words[1]), "r"(remote_barrier)
        : "memory");
  }
#else
  __trap();
#endif
}

}  // namespace jax_camp::hopper
