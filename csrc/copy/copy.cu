// copy on the GPU: launch policy and XLA FFI handler.
#include "../common/cuda_common.cuh"
#include "../handlers.h"
#include "copy_kernel.cuh"

namespace jax_camp::copy {
namespace {

ffi::Error CopyCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput("copy", x, {&*y}));
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    return LaunchTiles<T, kUnroll>(
        "copy", stream, n, IsAligned(in, 16) && IsAligned(out, 16),
        [](auto pack) { return CopyKernel<T, decltype(pack)::value>; }, in, out, n);
  });
}

}  // namespace
}  // namespace jax_camp::copy

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampCopyCuda, jax_camp::copy::CopyCuda,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
