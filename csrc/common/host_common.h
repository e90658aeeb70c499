// Shared by the host kernels: bfloat16 and float16 storage types (C++17 has none),
// converted to float32 exactly and back to nearest even as XLA and CUDA round (NaN
// and infinities kept), and a float32 sum whose rounding error grows with log2 of its length.
#pragma once

#include <cstdint>
#include <cstring>

namespace jax_camp {

struct HostBf16 {
  uint16_t bits;
};
struct HostF16 {
  uint16_t bits;
};

struct HostTypes {
  using BF16 = HostBf16;
  using F16 = HostF16;
};

inline uint32_t FloatBits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

inline float ToFloat(float v) { return v; }
inline float ToFloat(HostBf16 v) { return BitsFloat(uint32_t{v.bits} << 16); }

inline float ToFloat(HostF16 v) {
  const uint32_t sign = uint32_t{v.bits & 0x8000u} << 16;
  const uint32_t exponent = (v.bits >> 10) & 0x1fu;
  const uint32_t mantissa = v.bits & 0x3ffu;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * BitsFloat(0x33800000u);
  return sign ? -magnitude : magnitude;
}

template <typename T>
T FromFloat(float v);

template <>
inline float FromFloat<float>(float v) { return v; }

template <>
inline HostBf16 FromFloat<HostBf16>(float v) {
  const uint32_t bits = FloatBits(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it quiet and a NaN
    return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<uint16_t>((bits + rounding) >> 16)};
}

template <>
inline HostF16 FromFloat<HostF16>(float v) {
  const uint32_t bits = FloatBits(v);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Below float16's normal range: round |v| / 2^-24 to an integer, evenly;
    // adding 0.5 * 2^23 makes the float32 adder do exactly that.
    const float scaled = BitsFloat(magnitude) * BitsFloat(0x4b800000u);  // * 2^24
    const uint32_t rounded = FloatBits(scaled + BitsFloat(0x4b000000u)) - 0x4b000000u;
    return {static_cast<uint16_t>(sign | rounded)};
  }
  const uint32_t rounding = 0xfffu + ((magnitude >> 13) & 1u);
  const uint32_t rebased = magnitude - (uint32_t{112} << 23) + rounding;
  return {static_cast<uint16_t>(sign | (rebased >> 13))};
}

namespace detail {

inline constexpr int kSumLanes = 32;
inline constexpr int64_t kSumBlock = kSumLanes * 16;

// term(begin) + ... + term(end - 1), at most kSumBlock terms, over 32 strided partial
// sums combined by a tree, as a GPU block combines its threads' sums.
template <typename Term>
float BlockSum(int64_t begin, int64_t end, const Term& term) {
  float partial[kSumLanes] = {};
  int64_t i = begin;
  for (; i + kSumLanes <= end; i += kSumLanes)  // whole rounds of the lanes, which vectorize
    for (int lane = 0; lane < kSumLanes; ++lane) partial[lane] += term(i + lane);
  for (int lane = 0; i < end; ++i, ++lane) partial[lane] += term(i);
  for (int width = kSumLanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
  return partial[0];
}

template <typename Term>
float PairwiseSum(int64_t begin, int64_t end, const Term& term) {
  const int64_t blocks = (end - begin + kSumBlock - 1) / kSumBlock;
  if (blocks <= 1) return BlockSum(begin, end, term);
  const int64_t middle = begin + blocks / 2 * kSumBlock;
  return PairwiseSum(begin, middle, term) + PairwiseSum(middle, end, term);
}

}  // namespace detail

// sum_{i < n} term(i) in float32: blocks of 512 terms summed as BlockSum, then the blocks'
// sums added pairwise, so that the rounding error grows with log2(n). One running sum over a
// long row would grow until each term it adds is rounded to its coarse steps. The order is
// fixed, so results are reproducible.
template <typename Term>
float PairwiseSum(int64_t n, const Term& term) {
  return detail::PairwiseSum(0, n, term);
}

}  // namespace jax_camp
