// copy on the GPU: launch policy and XLA FFI handler.
#include "../common/cuda_common.cuh"
#include "../handlers.h"
#include "copy_kernel.cuh"

namespace jax_camp::copy {
namespace {

constexpr int kThreads = 256;

template <typename T>
ffi::Error Launch(cudaStream_t stream, const T* x, T* y, int64_t n) {
  constexpr int kPack = kPack128<T>;
  const bool vectorized = IsAligned(x, 16) && IsAligned(y, 16);
  const auto blocks = TileBlocks<kUnroll>(vectorized ? n / kPack : n, kThreads, "copy");
  if (!blocks.has_value()) return blocks.error();
  if (vectorized) {
    CopyKernel<T, kPack><<<*blocks, kThreads, 0, stream>>>(x, y, n);
  } else {
    CopyKernel<T, 1><<<*blocks, kThreads, 0, stream>>>(x, y, n);
  }
  return CheckCuda(cudaGetLastError(), "launching copy");
}

ffi::Error CopyCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("copy", x, {&*y}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("copy", x, *y));
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch<T>(stream, static_cast<const T*>(x.untyped_data()),
                     static_cast<T*>(y->untyped_data()), n);
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
