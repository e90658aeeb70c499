// vector_add on the GPU: launch policy and XLA FFI handler. Broadcasting is
// done on the JAX side, so the handler sees three buffers of one shape.
#include "../common/cuda_common.cuh"
#include "../handlers.h"
#include "vector_add_kernel.cuh"

namespace jax_camp::vector_add {
namespace {

ffi::Error VectorAddCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer y,
                         ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput("vector_add", x, {&y, &*out}));
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* lhs = static_cast<const T*>(x.untyped_data());
    const T* rhs = static_cast<const T*>(y.untyped_data());
    T* sum = static_cast<T*>(out->untyped_data());
    return LaunchTiles<T, kUnroll>(
        "vector_add", stream, n, IsAligned(lhs, 16) && IsAligned(rhs, 16) && IsAligned(sum, 16),
        [](auto pack) { return VectorAddKernel<T, decltype(pack)::value>; }, lhs, rhs, sum, n);
  });
}

}  // namespace
}  // namespace jax_camp::vector_add

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampVectorAddCuda, jax_camp::vector_add::VectorAddCuda,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
