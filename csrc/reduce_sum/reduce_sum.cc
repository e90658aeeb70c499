// reduce_sum on the host over the last dim, summed in float32 (PairwiseSum).
#include "../common/ffi_common.h"
#include "../common/host_common.h"
#include "../handlers.h"

namespace jax_camp::reduce_sum {
namespace {

ffi::Error ReduceSumCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("reduce_sum", x, {&*out}));
  JAX_CAMP_RETURN_IF_ERROR(CheckRowShape("reduce_sum", x, *out));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* sums = static_cast<T*>(out->untyped_data());
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * cols;
      sums[r] = FromFloat<T>(PairwiseSum(cols, [&](int64_t c) { return ToFloat(row[c]); }));
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jax_camp::reduce_sum

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampReduceSumCpu, jax_camp::reduce_sum::ReduceSumCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
