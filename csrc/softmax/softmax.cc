// softmax (with where='s mask, or without) and its backward on the host, over
// the last dim, in float32 with the same max subtraction as the GPU kernels.
#include "../handlers.h"
#include "softmax_host.h"

namespace jax_camp::softmax {
namespace {

// dx = y * (g - sum(g * y)), as the GPU's SoftmaxGradient.
struct SoftmaxGradient {
  static float Term(float y, float g) { return g * y; }
  static float Out(float y, float g, float dot) { return y * (g - dot); }
};

// y = exp(x - max) / sum, as the GPU kernels; 0 where the mask drops a value.
float Probability(const HostRow& row, int64_t c) { return row.exps[c] / row.sum; }

ffi::Error SoftmaxForwardCpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                             ffi::RemainingRets /*row_counter*/) {
  return ForwardCpu("softmax", x, nullptr, y, 0.f, Probability);
}

ffi::Error SoftmaxMaskedCpu(ffi::AnyBuffer x, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> y) {
  return ForwardCpu("softmax_masked", x, &mask, y, 0.f, Probability);
}

ffi::Error SoftmaxBackwardCpu(ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx) {
  return BackwardCpu<SoftmaxGradient>("softmax_backward", y, g, dx);
}

}  // namespace
}  // namespace jax_camp::softmax

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxCpu, jax_camp::softmax::SoftmaxForwardCpu,
                              jax_camp::softmax::ForwardCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxMaskedCpu, jax_camp::softmax::SoftmaxMaskedCpu,
                              jax_camp::softmax::TwoOperandCpuBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxCampSoftmaxBackwardCpu, jax_camp::softmax::SoftmaxBackwardCpu,
                              jax_camp::softmax::TwoOperandCpuBinding());
