// copy on the host: the reference the CPU path of JAX runs.
#include <algorithm>

#include "../common/ffi_common.h"
#include "../common/host_common.h"
#include "../handlers.h"

namespace jax_camp::copy {
namespace {

ffi::Error CopyCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput("copy", x, {&*y}));
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    std::copy(in, in + x.element_count(), static_cast<T*>(y->untyped_data()));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jax_camp::copy

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampCopyCpu, jax_camp::copy::CopyCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
