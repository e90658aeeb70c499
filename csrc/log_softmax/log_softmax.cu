// log_softmax (with where='s mask, or without), its backward and its
// forward-mode tangent on the GPU: the XLA FFI handlers of softmax's row
// kernels (../softmax/softmax_launch.cuh) with log_softmax's output and
// gradients (log_softmax_kernel.cuh), under softmax's launch policies: the
// same rows in registers, the same plans.
#include "../handlers.h"
#include "../softmax/softmax_launch.cuh"
#include "log_softmax_kernel.cuh"

namespace jax_camp::log_softmax {
namespace {

ffi::Error LogSoftmaxForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                                 ffi::Result<ffi::AnyBuffer> y, ffi::RemainingRets scratch) {
  const auto row_counter = OptionalRowCounter("log_softmax", scratch);
  if (!row_counter.has_value()) return row_counter.error();
  return softmax::ForwardCuda<softmax::Output::kLogSoftmax>("log_softmax", stream, x, nullptr,
                                                            y, *row_counter);
}

ffi::Error LogSoftmaxMaskedCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer mask,
                                ffi::Result<ffi::AnyBuffer> y) {
  return softmax::ForwardCuda<softmax::Output::kLogSoftmax, true>("log_softmax_masked", stream, x,
                                                                  &mask, y, nullptr);
}

ffi::Error LogSoftmaxBackwardCuda(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer g,
                                  ffi::Result<ffi::AnyBuffer> dx) {
  return softmax::BackwardCuda<LogSoftmaxGradient>("log_softmax_backward", stream, y, g, dx);
}

ffi::Error LogSoftmaxTangentCuda(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer t,
                                 ffi::Result<ffi::AnyBuffer> dy) {
  return softmax::BackwardCuda<LogSoftmaxTangent>("log_softmax_tangent", stream, y, t, dy);
}

}  // namespace
}  // namespace jax_camp::log_softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxCuda, jax_camp::log_softmax::LogSoftmaxForwardCuda,
                              jax_camp::softmax::ForwardCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxMaskedCuda,
                              jax_camp::log_softmax::LogSoftmaxMaskedCuda,
                              jax_camp::softmax::TwoOperandCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxBackwardCuda,
                              jax_camp::log_softmax::LogSoftmaxBackwardCuda,
                              jax_camp::softmax::TwoOperandCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampLogSoftmaxTangentCuda,
                              jax_camp::log_softmax::LogSoftmaxTangentCuda,
                              jax_camp::softmax::TwoOperandCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
