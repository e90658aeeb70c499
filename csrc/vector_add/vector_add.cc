// vector_add on the host.
#include "../common/ffi_common.h"
#include "../common/host_common.h"
#include "../handlers.h"

namespace jax_camp::vector_add {
namespace {

ffi::Error VectorAddCpu(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput("vector_add", x, {&y, &*out}));
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(x.untyped_data());
    const T* b = static_cast<const T*>(y.untyped_data());
    T* sum = static_cast<T*>(out->untyped_data());
    const size_t n = x.element_count();
    for (size_t i = 0; i < n; ++i) sum[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jax_camp::vector_add

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampVectorAddCpu, jax_camp::vector_add::VectorAddCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
