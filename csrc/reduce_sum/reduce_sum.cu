// reduce_sum on the GPU: the XLA FFI handlers, which check their buffers and
// launch the kernels that reduce_sum_launch.cuh selects.
#include "../handlers.h"
#include "reduce_sum_launch.cuh"

namespace jax_camp::reduce_sum {
namespace {

ffi::Error ReduceSumCuda(cudaStream_t stream, ffi::AnyBuffer x,
                         ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("reduce_sum", x, {&*out}));
  JAX_CAMP_RETURN_IF_ERROR(CheckRowShape("reduce_sum", x, *out));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  if (rows == 0) return ffi::Error::Success();
  if (cols == 0) return CheckCuda(cudaMemsetAsync(out->untyped_data(), 0, out->size_bytes(), stream),
                                  "zeroing reduce_sum's output");
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* sums = static_cast<T*>(out->untyped_data());
    return LaunchRowKernel<T, kPolicy<T>>(
        "launching reduce_sum", stream, rows, cols, IsAligned(in, 16),
        SelectReduceSumKernel<T>{}, LaunchScratch{}, in, sums, rows, cols);
  });
}

}  // namespace
}  // namespace jax_camp::reduce_sum

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampReduceSumCuda, jax_camp::reduce_sum::ReduceSumCuda,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
