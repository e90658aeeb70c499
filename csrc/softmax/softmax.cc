// softmax and its backward on the host, over the last dim, in float32 with
// the same max subtraction as the GPU kernels.
#include "../handlers.h"
#include "softmax_host.h"

namespace jax_camp::softmax {
namespace {

// dx = y * (g - sum(g * y)), as the GPU's SoftmaxGradient.
struct SoftmaxGradient {
  static float Term(float y, float g) { return g * y; }
  static float Out(float y, float g, float dot) { return y * (g - dot); }
};

ffi::Error SoftmaxForwardCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                             ffi::Result<RowCounterBuffer> /*row_counter*/) {
  return ForwardCpu("softmax", x, y, [](const auto* x_row, auto* y_row, int64_t cols,
                                        std::vector<float>& exps) {
    float max, sum;
    RowMaxSum(x_row, cols, exps, max, sum);
    const float inv_sum = 1.f / sum;
    using T = std::remove_reference_t<decltype(*y_row)>;
    for (int64_t c = 0; c < cols; ++c) y_row[c] = FromFloat<T>(exps[c] * inv_sum);
  });
}

ffi::Error SoftmaxBackwardCpu(ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx) {
  return BackwardCpu<SoftmaxGradient>("softmax_backward", y, g, dx);
}

}  // namespace
}  // namespace jax_camp::softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxCpu, jax_camp::softmax::SoftmaxForwardCpu,
                              jax_camp::softmax::ForwardCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCpu, jax_camp::softmax::SoftmaxBackwardCpu,
                              jax_camp::softmax::BackwardCpuBinding());
