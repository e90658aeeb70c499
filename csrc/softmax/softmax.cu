// softmax (with where='s mask, or without) and its backward on the GPU: the XLA
// FFI handlers, which check their buffers and launch the kernels that
// softmax_launch.cuh selects.
#include "../handlers.h"
#include "softmax_launch.cuh"

namespace jax_camp::softmax {
namespace {

ffi::Error SoftmaxForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                              ffi::Result<ffi::AnyBuffer> y, ffi::RemainingRets scratch) {
  const auto row_counter = OptionalRowCounter("softmax", scratch);
  if (!row_counter.has_value()) return row_counter.error();
  return ForwardCuda<Output::kSoftmax>("softmax", stream, x, nullptr, y, *row_counter);
}

ffi::Error SoftmaxMaskedCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer mask,
                             ffi::Result<ffi::AnyBuffer> y) {
  return ForwardCuda<Output::kSoftmax, true>("softmax_masked", stream, x, &mask, y, nullptr);
}

ffi::Error SoftmaxBackwardCuda(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer g,
                               ffi::Result<ffi::AnyBuffer> dx) {
  return BackwardCuda<SoftmaxGradient>("softmax_backward", stream, y, g, dx);
}

}  // namespace
}  // namespace jax_camp::softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxCuda, jax_camp::softmax::SoftmaxForwardCuda,
                              jax_camp::softmax::ForwardCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxMaskedCuda, jax_camp::softmax::SoftmaxMaskedCuda,
                              jax_camp::softmax::TwoOperandCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCuda, jax_camp::softmax::SoftmaxBackwardCuda,
                              jax_camp::softmax::TwoOperandCudaBinding(),
                              {xla::ffi::Traits::kCmdBufferCompatible});
