// Which of softmax's kernels runs a launch plan: the instance for the plan's
// pack, chunk and layout, as LaunchRowKernelAs asks for it. The policies that
// plan the launch are softmax_policy.h, the kernels softmax_kernel.cuh.
#pragma once

#include <string>

#include "../common/row_launch.cuh"
#include "softmax_kernel.cuh"

namespace jax_camp::softmax {

// The forward kernel for a plan's pack, chunk and layout, with the shared
// memory it prefetches into (see LaunchRowKernelAs): softmax.cu's handlers
// and scripts/row_policy_bench.cu launch the same kernels. Rows held by a
// warp or more take a kernel with no loop over rows where the grid has a team
// for every row, as reduce_sum's, which the medium shapes ran shorter; teams
// of fewer lanes, sharing a block with other rows, ran longer so and keep the
// loop, as does the backward, which lost with it.
template <Output kOutput, bool kMasked, typename T>
struct SelectForwardKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& plan) const {
    // A masked float32 row streams half the plan's chunk at a time: with its mask beside
    // it, the whole chunk spilled.
    constexpr int kChunk = kMasked && sizeof(T) == 4 && Layout::value == RowLayout::kStreamed
                               ? Chunk::value / 2
                               : Chunk::value;
    auto kernel = [](auto team_per_row) {
      return RowKernel{
          SoftmaxForwardKernel<kOutput, kMasked, T, Pack::value, kChunk, Layout::value,
                               decltype(team_per_row)::value>,
          kForwardPrefetchBytes<T, Pack::value, kChunk, Layout::value, kMasked>};
    };
    if constexpr (Layout::value == RowLayout::kHeld) {
      // Teams of a warp to a block (of at most 512 threads) a row.
      return TeamPerRowKernel<32, 64, 128, 256, 512>(plan, [&](auto lanes) {
        return kernel(std::bool_constant<(decltype(lanes)::value > 0)>{});
      });
    }
    return kernel(std::false_type{});
  }
};

// The backward kernel for a plan (see SelectForwardKernel).
template <typename Gradient, typename T>
struct SelectBackwardKernel {
  template <typename Pack, typename Chunk, typename Layout>
  auto operator()(Pack, Chunk, Layout, const RowLaunch& /*plan*/) const {
    return RowKernel{SoftmaxBackwardKernel<Gradient, T, Pack::value, Chunk::value, Layout::value>,
                     kBackwardPrefetchBytes<T, Pack::value, Chunk::value, Layout::value>};
  }
};

// The FFI bindings of ForwardCuda's and BackwardCuda's handlers. The unmasked
// forward's scratch results are its row counter, where the call brings one
// (OptionalRowCounter).
inline auto ForwardCudaBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>()
      .RemainingRets();
}
// Two operands, one result: the forward with where= (x, then its mask; its kernels
// never claim rows, as they do not prefetch, so it has no row counter) and the
// backward (y, then g).
inline auto TwoOperandCudaBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()
      .Arg<ffi::AnyBuffer>()
      .Ret<ffi::AnyBuffer>();
}

// The forward's FFI handler, for softmax.cu and ../log_softmax: checks its
// buffers and launches the forward kernel writing kOutput, with where='s
// `mask` (x's shape) where there is one (kMasked). `row_counter` is the call's
// scratch (LaunchScratch) or null, where the kernel for long rows counts the
// rows its teams claim; zeroed by the launch that claims, and not kept.
template <Output kOutput, bool kMasked = false>
ffi::Error ForwardCuda(const char* op, cudaStream_t stream, ffi::AnyBuffer x,
                       const ffi::AnyBuffer* mask, ffi::Result<ffi::AnyBuffer> y,
                       unsigned* row_counter) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput(op, x, {&*y}));
  if constexpr (kMasked) JAX_CAMP_RETURN_IF_ERROR(CheckMask(op, x, *mask));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  if (rows * cols == 0) return ffi::Error::Success();
  const std::string what = std::string("launching ") + op;
  const auto* keep = kMasked ? static_cast<const uint8_t*>(mask->untyped_data()) : nullptr;
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    const bool aligned = IsAligned(in, 16) && IsAligned(out, 16) && IsAligned(keep, 16);
    return LaunchRowKernel<T, kForwardPolicy>(
        what.c_str(), stream, rows, cols, aligned, SelectForwardKernel<kOutput, kMasked, T>{},
        LaunchScratch{row_counter}, in, keep, out, rows, cols);
  });
}

// A backward kernel's FFI handler (see SoftmaxGradient): out from the
// forward's output y and the incoming g, all of one shape and dtype.
template <typename Gradient>
ffi::Error BackwardCuda(const char* op, cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer g,
                        ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput(op, y, {&g, &*out}));
  const int64_t rows = Rows(y);
  const int64_t cols = Cols(y);
  if (rows * cols == 0) return ffi::Error::Success();
  const std::string what = std::string("launching ") + op;
  return DispatchFloat<DeviceTypes>(y.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y_data = static_cast<const T*>(y.untyped_data());
    const T* g_data = static_cast<const T*>(g.untyped_data());
    T* out_data = static_cast<T*>(out->untyped_data());
    const bool aligned =
        IsAligned(y_data, 16) && IsAligned(g_data, 16) && IsAligned(out_data, 16);
    return LaunchRowKernel<T, kBackwardPolicy>(what.c_str(), stream, rows, cols, aligned,
                                               SelectBackwardKernel<Gradient, T>{},
                                               LaunchScratch{}, y_data, g_data, out_data, rows,
                                               cols);
  });
}

}  // namespace jax_camp::softmax
