// log_softmax on the GPU is softmax's row kernels (../softmax/softmax_kernel.cuh)
// with the log output, y = (x - max) - log(sum(exp(x - max))), and two more
// gradients for its backward kernel. Its Jacobian, I - 1 softmax^T, is not
// symmetric as softmax's is, so forward and reverse mode need two maps, each
// one reduction along the row then one write pass, with softmax = exp(y):
// - reverse mode, from the cotangent g: dx = g - exp(y) * sum(g);
// - forward mode, from the tangent t:   dy = t - sum(exp(y) * t).
// Each is the other's transpose. exp(y) of a -inf log-probability is 0. It is
// PreciseExp, not Exp: y is a log-probability, about -15 in a row of millions,
// where Exp's error would be about 8e-7 relative (docs/accuracy.md).
#pragma once

#include "../softmax/softmax_kernel.cuh"

namespace jax_camp::log_softmax {

struct LogSoftmaxGradient {
  __device__ __forceinline__ static float Term(float /*y*/, float g) { return g; }
  __device__ __forceinline__ static float Out(float y, float g, float sum) {
    return g - softmax::PreciseExp(y) * sum;
  }
};

struct LogSoftmaxTangent {
  __device__ __forceinline__ static float Term(float y, float t) {
    return softmax::PreciseExp(y) * t;
  }
  __device__ __forceinline__ static float Out(float /*y*/, float t, float dot) { return t - dot; }
};

}  // namespace jax_camp::log_softmax
