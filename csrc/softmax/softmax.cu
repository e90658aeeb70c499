// softmax and its backward on the GPU: the XLA FFI handlers, which check
// their buffers and launch the kernels that softmax_launch.cuh selects.
#include "../handlers.h"
#include "softmax_launch.cuh"

namespace jax_camp::softmax {
namespace {

// row_counter: the forward's scratch (LaunchScratch), where the kernel for long
// rows counts the rows its teams claim; zeroed by the launch that claims, and
// not kept.
ffi::Error SoftmaxForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                              ffi::Result<ffi::AnyBuffer> y,
                              ffi::Result<RowCounterBuffer> row_counter) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("softmax", x, {&*y}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax", x, *y));
  if (row_counter->element_count() != 1)
    return ffi::Error::InvalidArgument("softmax: the row counter must hold one uint32");
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  if (rows * cols == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    return LaunchRowKernel<T, kForwardPolicy>(
        "launching softmax", stream, rows, cols, IsAligned(in, 16) && IsAligned(out, 16),
        SelectForwardKernel<T>{}, LaunchScratch{row_counter->typed_data()}, in, out, rows, cols);
  });
}

ffi::Error SoftmaxBackwardCuda(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer g,
                               ffi::Result<ffi::AnyBuffer> dx) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("softmax_backward", y, {&g, &*dx}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax_backward", y, g));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax_backward", y, *dx));
  const int64_t rows = Rows(y);
  const int64_t cols = Cols(y);
  if (rows * cols == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(y.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y_data = static_cast<const T*>(y.untyped_data());
    const T* g_data = static_cast<const T*>(g.untyped_data());
    T* dx_data = static_cast<T*>(dx->untyped_data());
    const bool aligned = IsAligned(y_data, 16) && IsAligned(g_data, 16) && IsAligned(dx_data, 16);
    return LaunchRowKernel<T, kBackwardPolicy>(
        "launching softmax_backward", stream, rows, cols, aligned,
        SelectBackwardKernel<T>{}, LaunchScratch{}, y_data, g_data, dx_data, rows, cols);
  });
}

}  // namespace
}  // namespace jax_camp::softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxCuda, jax_camp::softmax::SoftmaxForwardCuda,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<jax_camp::RowCounterBuffer>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCuda, jax_camp::softmax::SoftmaxBackwardCuda,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
