// A thread's float32 sum of its share of a row, as accurate for rows of
// millions of values as for short ones.
//
// A thread that streams a long row adds up thousands of terms. A plain running
// float32 sum of that many drifts: once it is large, each small term is
// rounded to the sum's coarse steps, and the rounding adds up with the count.
// CompensatedSum keeps what each addition rounded away and gives it back with
// the next term (Kahan's summation), so that its error stays that of a few
// additions however many terms it takes. Its terms are a pack's values summed
// first, in pairs (PackSum), so that the compensation costs a few operations a
// pack rather than a value.
#pragma once

namespace jax_camp {

struct CompensatedSum {
  float sum = 0.f;
  float lost = 0.f;  // what the additions so far rounded away, negated

  __device__ __forceinline__ void Add(float term) {
    const float corrected = term - lost;
    const float next = sum + corrected;
    // An inf or NaN sum has nothing to compensate, and its inf - inf would
    // turn an inf sum into NaN.
    lost = isfinite(next) ? (next - sum) - corrected : 0.f;
    sum = next;
  }

  // Multiplies the sum by `factor` (softmax's rescaling to a larger max).
  __device__ __forceinline__ void Scale(float factor) {
    sum *= factor;
    lost *= factor;
  }

  __device__ __forceinline__ float Value() const { return sum - lost; }
};

// CompensatedSum's interface without the compensation, for a thread that adds
// only a few terms (a row held in registers), too few for its sum to drift.
struct PlainSum {
  float sum = 0.f;

  __device__ __forceinline__ void Add(float term) { sum += term; }

  __device__ __forceinline__ float Value() const { return sum; }
};

// The sum of a pack's values, added in pairs, then pairs of pairs.
template <int kPack>
__device__ __forceinline__ float PackSum(const float (&values)[kPack]) {
  static_assert((kPack & (kPack - 1)) == 0, "a pack holds a power of two values");
  float sums[kPack];
#pragma unroll
  for (int k = 0; k < kPack; ++k) sums[k] = values[k];
#pragma unroll
  for (int width = kPack / 2; width > 0; width /= 2) {
#pragma unroll
    for (int k = 0; k < width; ++k) sums[k] = sums[2 * k] + sums[2 * k + 1];
  }
  return sums[0];
}

}  // namespace jax_camp
