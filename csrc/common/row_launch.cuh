// Launching a row kernel under its plan (row_plan.h): the kernel instance for
// the plan's pack, chunk and layout, its cluster attributes, the dynamic shared
// memory it prefetches into, and the row counter it claims rows from.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "cuda_common.cuh"
#include "row_plan.h"
#include "row_team.cuh"

namespace jax_camp {

// f(IntTag<chunk>{}), for 1 <= chunk <= kMaxChunk.
template <int kMaxChunk, typename F>
ffi::Error DispatchChunk(int chunk, F f) {
  if constexpr (kMaxChunk > 1) {
    if (chunk < kMaxChunk) return DispatchChunk<kMaxChunk - 1>(chunk, f);
  }
  return f(IntTag<kMaxChunk>{});
}

// make(IntTag<lanes>{}) where the plan has a team for every row and one of kLanes...
// lanes, else make(IntTag<0>{}): such kernels skip the loop over rows and fix their
// team's geometry at compile time. Every make(...) returns the same kernel type.
template <int... kLanes, typename Make>
auto TeamPerRowKernel(const RowLaunch& plan, Make make) {
  auto kernel = make(IntTag<0>{});
  if (plan.TeamForEveryRow())
    (void)((plan.lanes == kLanes && (kernel = make(IntTag<kLanes>{}), true)) || ...);
  return kernel;
}

// A row kernel, and the shared memory per thread for its next row (NextRow; 0: no prefetch).
template <typename... Params>
struct RowKernel {
  void (*function)(Params...);
  int prefetch_bytes_per_thread;
};
template <typename... Params>
RowKernel(void (*)(Params...), int) -> RowKernel<Params...>;

// The launch of `plan` on `stream` with `shared_bytes` of dynamic shared memory, in
// clusters where plan.cluster > 1; `cluster_dims` must outlive the configuration.
inline cudaLaunchConfig_t RowLaunchConfig(const RowLaunch& plan, int shared_bytes,
                                          cudaStream_t stream,
                                          cudaLaunchAttribute& cluster_dims) {
  cluster_dims = {};
  cluster_dims.id = cudaLaunchAttributeClusterDimension;
  cluster_dims.val.clusterDim = {static_cast<unsigned>(plan.cluster), 1, 1};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(plan.blocks);
  config.blockDim = dim3(plan.threads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &cluster_dims;
  config.numAttrs = plan.cluster > 1 ? 1 : 0;
  return config;
}

// Sets the attributes `plan`'s clusters need before a launch or occupancy query (past 8
// blocks, or `prefetch_bytes` of shared memory) and returns how many such clusters fit
// at once for a prefetching kernel (else 0). Cached per kernel, device and plan shape,
// as handlers run on XLA's launch path and the attributes last as long as the context.
template <typename... Params>
ffi::ErrorOr<int> PrepareClusterKernel(const char* what, const RowLaunch& plan,
                                       void (*kernel)(Params...), int prefetch_bytes) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "querying the device"));
  using Key = std::tuple<const void*, int, int, int, int>;
  const Key key{reinterpret_cast<const void*>(kernel), device, plan.cluster, plan.threads,
                prefetch_bytes};
  static std::mutex mutex;
  static std::map<Key, int> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = known.find(key); found != known.end()) return found->second;
  }
  if (plan.cluster > kMaxPortableClusterBlocks)
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (status == cudaSuccess && prefetch_bytes > 0)
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  prefetch_bytes);
  if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, what));
  int clusters = 0;
  if (prefetch_bytes > 0) {
    cudaLaunchAttribute cluster_dims;
    const cudaLaunchConfig_t config =
        RowLaunchConfig(plan, prefetch_bytes, nullptr, cluster_dims);
    status = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (status != cudaSuccess) return ffi::Unexpected(CheckCuda(status, "sizing the grid"));
  }
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, clusters);
  return clusters;
}

// The scratch an op's custom call gives its row kernels: `row_counter`, where kernels
// that claim rows count them (RowCounter; softmax's forward), or null: rows in order.
struct LaunchScratch {
  unsigned* row_counter = nullptr;
};

// Whether a kernel with these parameters claims rows from a RowCounter.
template <typename... Params>
constexpr bool kClaimsRows = (std::is_same_v<Params, RowCounter> || ...);

// kernel<<<plan>>>(args..., plan.lanes); a kernel that claims rows gets (args...,
// RowCounter, plan.lanes). A prefetching kernel gets one grid of resident clusters,
// each taking its rows in turn so that the next row loads while one is worked on;
// past kMinRowsPerClaimingCluster rows per cluster, they claim rows on
// scratch.row_counter (zeroed on the stream first) where there is one, else the
// RowCounter is null and they take their rows in order.
template <typename... Params, typename... Args>
ffi::Error LaunchRowPlan(const char* what, cudaStream_t stream, const RowLaunch& plan,
                         RowKernel<Params...> kernel, LaunchScratch scratch, Args... args) {
  const int prefetch_bytes = PrefetchSharedBytes(plan, kernel.prefetch_bytes_per_thread);
  int resident_clusters = 0;
  if (plan.cluster > kMaxPortableClusterBlocks || prefetch_bytes > 0) {
    const auto resident = PrepareClusterKernel(what, plan, kernel.function, prefetch_bytes);
    if (!resident.has_value()) return resident.error();
    resident_clusters = *resident;
  }
  cudaLaunchAttribute cluster_dims;
  cudaLaunchConfig_t config = RowLaunchConfig(plan, prefetch_bytes, stream, cluster_dims);
  if (resident_clusters > 0)  // a prefetching kernel's
    config.gridDim.x = std::min(plan.blocks, resident_clusters * plan.cluster);
  if constexpr (kClaimsRows<Params...>) {
    const bool claims =
        scratch.row_counter != nullptr && resident_clusters > 0 &&
        plan.rows > int64_t{kMinRowsPerClaimingCluster} * resident_clusters;
    if (claims) {
      JAX_CAMP_RETURN_IF_ERROR(CheckCuda(
          cudaMemsetAsync(scratch.row_counter, 0, sizeof(unsigned), stream), "zeroing the row counter"));
    }
    const RowCounter counter{claims ? scratch.row_counter : nullptr};
    return CheckCuda(cudaLaunchKernelEx(&config, kernel.function, args..., counter, plan.lanes), what);
  } else {
    return CheckCuda(cudaLaunchKernelEx(&config, kernel.function, args..., plan.lanes), what);
  }
}

template <typename... Params, typename... Args>
ffi::Error LaunchRowPlan(const char* what, cudaStream_t stream, const RowLaunch& plan,
                         void (*kernel)(Params...), LaunchScratch scratch, Args... args) {
  return LaunchRowPlan(what, stream, plan, RowKernel<Params...>{kernel, 0}, scratch, args...);
}

// Launches select_kernel(IntTag<pack>, IntTag<chunk>, RowLayoutTag<layout>, plan)
// (a kernel or a RowKernel; `plan` for TeamPerRowKernel) under `plan` (LaunchRowPlan).
// Teams outgrow a block only at the largest chunk, so only that chunk has streamed
// and cluster kernels, and kernels for rows held in one block need fewer registers.
template <const RowPolicy& kPolicy, int kPack, typename SelectKernel, typename... Args>
ffi::Error LaunchRowKernelAs(const char* what, cudaStream_t stream, const RowLaunch& plan,
                             SelectKernel select_kernel, LaunchScratch scratch, Args... args) {
  constexpr int kMaxChunk = ChunkPacks(kPolicy.max_chunk_elements, kPack);
  auto launch = [&](auto chunk, auto layout) {
    return LaunchRowPlan(what, stream, plan,
                         select_kernel(IntTag<kPack>{}, chunk, layout, plan), scratch, args...);
  };
  return DispatchChunk<kMaxChunk>(plan.chunk, [&](auto chunk) {
    if constexpr (decltype(chunk)::value == kMaxChunk) {
      if (plan.layout == RowLayout::kStreamed)
        return launch(chunk, RowLayoutTag<RowLayout::kStreamed>{});
      if (plan.layout == RowLayout::kHeldInCluster)
        return launch(chunk, RowLayoutTag<RowLayout::kHeldInCluster>{});
    }
    // A kernel for held rows would run a cluster's blocks as separate teams.
    if (plan.layout != RowLayout::kHeld)
      return ffi::Error::Internal(std::string(what) + ": no kernel for this plan");
    return launch(chunk, RowLayoutTag<RowLayout::kHeld>{});
  });
}

// Plans a row kernel's launch by its op's policy and launches it (see
// LaunchRowKernelAs), in 128-bit packs when the rows are 16-byte aligned.
template <typename T, const RowPolicy& kPolicy, typename SelectKernel, typename... Args>
ffi::Error LaunchRowKernel(const char* what, cudaStream_t stream, int64_t rows, int64_t cols,
                           bool aligned, SelectKernel select_kernel, LaunchScratch scratch,
                           Args... args) {
  auto sm_count = SmCount();
  if (!sm_count.has_value()) return sm_count.error();
  // Code compiled for Hopper loads only on GPUs that launch clusters.
  auto architecture = KernelArchitecture();
  if (!architecture.has_value()) return architecture.error();
  constexpr int kPack = kPack128<T>;
  static_assert(kPolicy.Valid(), "blocks that teams share hold whole teams and warps");
  const int pack = RowPack(sizeof(T), cols, aligned);
  const RowLaunch plan =
      PlanRowLaunch(rows, cols / pack, kPolicy, RowTarget{pack, *architecture, *sm_count});
  return pack == kPack
             ? LaunchRowKernelAs<kPolicy, kPack>(what, stream, plan, select_kernel, scratch, args...)
             : LaunchRowKernelAs<kPolicy, 1>(what, stream, plan, select_kernel, scratch, args...);
}

}  // namespace jax_camp
