// The host handlers' shape, shared by softmax.cc and ../log_softmax: a forward
// that writes a value of each row's max and sum of exps (where='s masked-out
// values aside), and a backward that sums one term per element along each row
// and then writes one output per element (Gradient's Term and Out, as the
// GPU's SoftmaxGradient), in float32.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "../common/ffi_common.h"
#include "../common/host_common.h"

namespace jax_camp::softmax {

// NaN-propagating, as jnp.max.
inline float MaxPropagateNan(float a, float b) { return (a > b || std::isnan(a)) ? a : b; }

// One row of the forward: x in float32, -inf where where='s mask drops a value, as the
// GPU kernels see it, and the row's max and sum(exp(x - max)) (and its log); `exps`
// receives exp(x - max).
struct HostRow {
  std::vector<float> x;
  std::vector<float> exps;
  float max;
  float sum;
  float log_sum;

  // `keep`: the row's mask bytes (nonzero keeps a value), or null.
  template <typename T>
  void Load(const T* values, const uint8_t* keep, int64_t cols) {
    max = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      x[c] = keep == nullptr || keep[c] ? ToFloat(values[c]) : -INFINITY;
      max = MaxPropagateNan(max, x[c]);
    }
    for (int64_t c = 0; c < cols; ++c) exps[c] = std::exp(x[c] - max);
    sum = PairwiseSum(cols, [&](int64_t c) { return exps[c]; });
    log_sum = std::log(sum);
  }
};

// For every row, out_row[c] = value(row, c) where the mask (if any) keeps column c, else
// `masked` (the op's output for a masked-out value). The row counter is the CUDA kernel's;
// the host has no use for it.
template <typename Value>
ffi::Error ForwardCpu(const char* op, ffi::AnyBuffer x, const ffi::AnyBuffer* mask,
                      ffi::Result<ffi::AnyBuffer> y, float masked, Value value) {
  JAX_CAMP_RETURN_IF_ERROR(CheckLikeInput(op, x, {&*y}));
  if (mask != nullptr) JAX_CAMP_RETURN_IF_ERROR(CheckMask(op, x, *mask));
  const int64_t rows = Rows(x);
  const int64_t cols = Cols(x);
  const auto* keep = mask ? static_cast<const uint8_t*>(mask->untyped_data()) : nullptr;
  return DispatchFloat<HostTypes>(x.element_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.untyped_data());
    T* out = static_cast<T*>(y->untyped_data());
    HostRow row{std::vector<float>(cols), std::vector<float>(cols), 0.f, 0.f, 0.f};
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row_keep = keep ? keep + r * cols : nullptr;
      row.Load(in + r * cols, row_keep, cols);
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = FromFloat<T>(!row_keep || row_keep[c] ? value(row, c) : masked);
    }
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
      const float sum = PairwiseSum(cols, [&](int64_t c) {
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

// The FFI bindings of ForwardCpu's and BackwardCpu's handlers: the CUDA ones'
// operands and results (softmax_launch.cuh), the unmasked forward's row counter too.
inline auto ForwardCpuBinding() {
  return ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().RemainingRets();
}
// Two operands, one result: the forward with where= (x, then its mask) and the
// backward (y, then g).
inline auto TwoOperandCpuBinding() {
  return ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>();
}

}  // namespace jax_camp::softmax
