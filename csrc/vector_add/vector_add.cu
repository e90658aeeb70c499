// vector_add on the GPU: launch policy and XLA FFI handler. Broadcasting is
// done on the JAX side, so the handler sees three buffers of one shape.
#include "../common/cuda_common.cuh"
#include "../handlers.h"
#include "vector_add_kernel.cuh"

namespace jax_camp::vector_add {
namespace {

constexpr int kThreads = 256;

template <typename T>
ffi::Error Launch(cudaStream_t stream, const T* x, const T* y, T* out, int64_t n) {
  constexpr int kPack = kPack128<T>;
  const bool vectorized = IsAligned(x, 16) && IsAligned(y, 16) && IsAligned(out, 16);
  const auto blocks = TileBlocks<kUnroll>(vectorized ? n / kPack : n, kThreads, "vector_add");
  if (!blocks.has_value()) return blocks.error();
  if (vectorized) {
    VectorAddKernel<T, kPack><<<*blocks, kThreads, 0, stream>>>(x, y, out, n);
  } else {
    VectorAddKernel<T, 1><<<*blocks, kThreads, 0, stream>>>(x, y, out, n);
  }
  return CheckCuda(cudaGetLastError(), "launching vector_add");
}

ffi::Error VectorAddCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer y,
                         ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("vector_add", x, {&y, &*out}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("vector_add", x, y));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("vector_add", x, *out));
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  return DispatchFloat<DeviceTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch<T>(stream, static_cast<const T*>(x.untyped_data()),
                     static_cast<const T*>(y.untyped_data()),
                     static_cast<T*>(out->untyped_data()), n);
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
