// softmax and its backward on the host, over the last dim, in float32 with
// the same max subtraction as the GPU kernels.
#include <cmath>
#include <vector>

#include "../common/ffi_common.h"
#include "../common/host_common.h"
#include "../handlers.h"

namespace jax_camp::softmax {
namespace {

// NaN-propagating, as jnp.max.
float MaxPropagateNan(float a, float b) { return (a > b || std::isnan(a)) ? a : b; }

template <typename T>
void SoftmaxRow(const T* x, T* y, int64_t cols, std::vector<float>& exps) {
  float row_max = -INFINITY;
  for (int64_t c = 0; c < cols; ++c) row_max = MaxPropagateNan(row_max, ToFloat(x[c]));
  for (int64_t c = 0; c < cols; ++c) exps[c] = std::exp(ToFloat(x[c]) - row_max);
  const float sum = StridedSum(cols, [&](int64_t c) { return exps[c]; });
  const float inv_sum = 1.f / sum;
  for (int64_t c = 0; c < cols; ++c) y[c] = FromFloat<T>(exps[c] * inv_sum);
}

// The row counter is the CUDA kernel's (softmax.cu); the host has no use for it.
ffi::Error SoftmaxForwardCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                             ffi::Result<RowCounterBuffer> /*row_counter*/) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("softmax", x, {&*y}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax", x, *y));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    std::vector<float> exps(cols);
    for (int64_t r = 0; r < rows; ++r) SoftmaxRow(in + r * cols, out + r * cols, cols, exps);
    return ffi::Error::Success();
  });
}

ffi::Error SoftmaxBackwardCpu(ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx) {
  JAX_CAMP_RETURN_IF_ERROR(CheckDtypes("softmax_backward", y, {&g, &*dx}));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax_backward", y, g));
  JAX_CAMP_RETURN_IF_ERROR(CheckSameShape("softmax_backward", y, *dx));
  const int64_t rows = Rows(y);
  const int64_t cols = Cols(y);
  return DispatchFloat<HostTypes>(y.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y_data = static_cast<const T*>(y.untyped_data());
    const T* g_data = static_cast<const T*>(g.untyped_data());
    T* dx_data = static_cast<T*>(dx->untyped_data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t offset = r * cols;
      const float dot = StridedSum(cols, [&](int64_t c) {
        return ToFloat(g_data[offset + c]) * ToFloat(y_data[offset + c]);
      });
      for (int64_t c = 0; c < cols; ++c) {
        const float yv = ToFloat(y_data[offset + c]);
        dx_data[offset + c] = FromFloat<T>(yv * (ToFloat(g_data[offset + c]) - dot));
      }
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jax_camp::softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxCpu, jax_camp::softmax::SoftmaxForwardCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<jax_camp::RowCounterBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCpu, jax_camp::softmax::SoftmaxBackwardCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
