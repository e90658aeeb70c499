// The host handlers' shape, shared by softmax.cc and ../log_softmax: a
// forward that runs a row function over every row, and a backward that sums
// one term per element along each row and then writes one output per element
// (Gradient's Term and Out, as the GPU's SoftmaxGradient), in float32.
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "../common/ffi_common.h"
#include "../common/host_common.h"

namespace jax_camp::softmax {

// NaN-propagating, as jnp.max.
inline float MaxPropagateNan(float a, float b) { return (a > b || std::isnan(a)) ? a : b; }

// A row's max and sum(exp(x - max)), the max subtracted as the GPU kernels do;
// `exps` receives exp(x - max).
template <typename T>
void RowMaxSum(const T* x, int64_t cols, std::vector<float>& exps, float& max, float& sum) {
  max = -INFINITY;
  for (int64_t c = 0; c < cols; ++c) max = MaxPropagateNan(max, ToFloat(x[c]));
  for (int64_t c = 0; c < cols; ++c) exps[c] = std::exp(ToFloat(x[c]) - max);
  sum = StridedSum(cols, [&](int64_t c) { return exps[c]; });
}

// row(x_row, y_row, cols, exps) for every row, where `row` is generic in the
// element type. The row counter is the CUDA kernel's; the host has no use for it.
template <typename Row>
ffi::Error ForwardCpu(const char* op, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, Row row) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput(op, x, {&*y}));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    std::vector<float> exps(cols);
    for (int64_t r = 0; r < rows; ++r) row(in + r * cols, out + r * cols, cols, exps);
    return ffi::Error::Success();
  });
}

template <typename Gradient>
ffi::Error BackwardCpu(const char* op, ffi::AnyBuffer y, ffi::AnyBuffer g,
                       ffi::Result<ffi::AnyBuffer> out) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput(op, y, {&g, &*out}));
  const int64_t rows = Rows(y);
  const int64_t cols = Cols(y);
  return DispatchFloat<HostTypes>(y.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y_data = static_cast<const T*>(y.untyped_data());
    const T* g_data = static_cast<const T*>(g.untyped_data());
    T* out_data = static_cast<T*>(out->untyped_data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t offset = r * cols;
      const float sum = StridedSum(cols, [&](int64_t c) {
        return Gradient::Term(ToFloat(y_data[offset + c]), ToFloat(g_data[offset + c]));
      });
      for (int64_t c = 0; c < cols; ++c) {
        const float value =
            Gradient::Out(ToFloat(y_data[offset + c]), ToFloat(g_data[offset + c]), sum);
        out_data[offset + c] = FromFloat<T>(value);
      }
    }
    return ffi::Error::Success();
  });
}

// The FFI bindings of ForwardCpu's and BackwardCpu's handlers.
inline auto ForwardCpuBinding() {
  return ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<RowCounterBuffer>();
}
inline auto BackwardCpuBinding() {
  return ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>();
}

}  // namespace jax_camp::softmax
