// log_softmax, its backward and its forward-mode tangent on the host, in
// float32, with softmax's host handlers (../softmax/softmax_host.h) and the
// GPU kernels' math (log_softmax_kernel.cuh).
#include <cmath>

#include "../handlers.h"
#include "../softmax/softmax_host.h"

namespace jax_camp::log_softmax {
namespace {

// dx = g - exp(y) * sum(g).
struct LogSoftmaxGradient {
  static float Term(float /*y*/, float g) { return g; }
  static float Out(float y, float g, float sum) { return g - std::exp(y) * sum; }
};

// dy = t - sum(exp(y) * t).
struct LogSoftmaxTangent {
  static float Term(float y, float t) { return std::exp(y) * t; }
  static float Out(float /*y*/, float t, float dot) { return t - dot; }
};

// y = (x - max) - log(sum): x - max first, exact, as the GPU kernels and jax.nn.log_softmax;
// -inf where the mask drops a value.
float LogProbability(const softmax::HostRow& row, int64_t c) {
  return (row.x[c] - row.max) - row.log_sum;
}

ffi::Error LogSoftmaxForwardCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                                ffi::RemainingRets /*row_counter*/) {
  return softmax::ForwardCpu("log_softmax", x, nullptr, y, -INFINITY, LogProbability);
}

ffi::Error LogSoftmaxMaskedCpu(ffi::AnyBuffer x, ffi::AnyBuffer mask,
                               ffi::Result<ffi::AnyBuffer> y) {
  return softmax::ForwardCpu("log_softmax_masked", x, &mask, y, -INFINITY, LogProbability);
}

ffi::Error LogSoftmaxBackwardCpu(ffi::AnyBuffer y, ffi::AnyBuffer g,
                                 ffi::Result<ffi::AnyBuffer> dx) {
  return softmax::BackwardCpu<LogSoftmaxGradient>("log_softmax_backward", y, g, dx);
}

ffi::Error LogSoftmaxTangentCpu(ffi::AnyBuffer y, ffi::AnyBuffer t,
                                ffi::Result<ffi::AnyBuffer> dy) {
  return softmax::BackwardCpu<LogSoftmaxTangent>("log_softmax_tangent", y, t, dy);
}

}  // namespace
}  // namespace jax_camp::log_softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxCpu, jax_camp::log_softmax::LogSoftmaxForwardCpu,
                              jax_camp::softmax::ForwardCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxMaskedCpu,
                              jax_camp::log_softmax::LogSoftmaxMaskedCpu,
                              jax_camp::softmax::TwoOperandCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxBackwardCpu,
                              jax_camp::log_softmax::LogSoftmaxBackwardCpu,
                              jax_camp::softmax::TwoOperandCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxTangentCpu,
                              jax_camp::log_softmax::LogSoftmaxTangentCpu,
                              jax_camp::softmax::TwoOperandCpuBinding());
