// Pieces every jax_camp handler shares, host and CUDA alike: the FFI aliases,
// argument checks that turn bad buffers into ffi::Error, and dtype dispatch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace jax_camp {

namespace ffi = xla::ffi;

// The row counter (RowCounter in row_team.cuh) that softmax's unmasked forward
// call brings as its last result where its kernel may claim rows (MayClaimRows
// in row_plan.h): one uint32. Calls that cannot claim bring none, since every
// result is an allocation a call. The host kernels ignore it.
using RowCounterBuffer = ffi::Buffer<ffi::U32, 1>;

// The row counter among a call's `scratch` results, or null where it brings none.
inline ffi::ErrorOr<unsigned*> OptionalRowCounter(const char* op, ffi::RemainingRets scratch) {
  if (scratch.size() == 0) return static_cast<unsigned*>(nullptr);
  auto counter = scratch.get<RowCounterBuffer>(0);
  if (scratch.size() > 1 || !counter.has_value() || (*counter)->element_count() != 1)
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string(op) + ": the only scratch result is a row counter of one uint32"));
  return (*counter)->typed_data();
}

// A buffer seen as rows x cols: leading dims collapse into rows, the last dim
// is the one an op reduces over. The JAX side moves the reduced axis last.
inline int64_t Cols(const ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return dims.size() == 0 ? 1 : dims[dims.size() - 1];
}

inline int64_t Rows(const ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
  return rows;
}

inline const char* DtypeName(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F16: return "float16";
    default: return "an unsupported dtype";
  }
}

inline bool IsSupportedFloat(ffi::DataType dtype) {
  return dtype == ffi::DataType::F32 || dtype == ffi::DataType::BF16 ||
         dtype == ffi::DataType::F16;
}

inline std::string ShapeString(const ffi::AnyBuffer& buffer) {
  std::string text = "(";
  auto dims = buffer.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(dims[i]);
  }
  return text + ")";
}

// The input's dtype must be one we have kernels for, and every other buffer must match it.
inline ffi::Error CheckDtypes(const char* op, const ffi::AnyBuffer& input,
                              std::initializer_list<const ffi::AnyBuffer*> others) {
  if (!IsSupportedFloat(input.element_type())) {
    return ffi::Error::InvalidArgument(std::string(op) +
                                       ": dtype must be float32, bfloat16 or float16");
  }
  for (const ffi::AnyBuffer* other : others) {
    if (other->element_type() != input.element_type()) {
      return ffi::Error::InvalidArgument(std::string(op) + ": every buffer must be " +
                                         DtypeName(input.element_type()) + ", got " +
                                         DtypeName(other->element_type()));
    }
  }
  return ffi::Error::Success();
}

inline bool SameDims(const ffi::AnyBuffer& a, const ffi::AnyBuffer& b) {
  auto da = a.dimensions();
  auto db = b.dimensions();
  if (da.size() != db.size()) return false;
  for (size_t i = 0; i < da.size(); ++i)
    if (da[i] != db[i]) return false;
  return true;
}

inline ffi::Error CheckSameShape(const char* op, const ffi::AnyBuffer& expected,
                                 const ffi::AnyBuffer& actual) {
  if (SameDims(expected, actual)) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(op) + ": shape " + ShapeString(actual) +
                                     " does not match " + ShapeString(expected));
}

// Buffers of one dtype and shape (every op's but reduce_sum's): `input` of a dtype
// we have kernels for, and every other buffer of its dtype and shape.
inline ffi::Error CheckLikeInput(const char* op, const ffi::AnyBuffer& input,
                                 std::initializer_list<const ffi::AnyBuffer*> others) {
  ffi::Error error = CheckDtypes(op, input, others);
  for (const ffi::AnyBuffer* other : others)
    if (!error.failure()) error = CheckSameShape(op, input, *other);
  return error;
}

// where='s mask (softmax's, log_softmax's): a bool of x's shape, which XLA stores as one
// byte an element, nonzero where the element takes part.
inline ffi::Error CheckMask(const char* op, const ffi::AnyBuffer& x, const ffi::AnyBuffer& mask) {
  if (mask.element_type() != ffi::DataType::PRED)
    return ffi::Error::InvalidArgument(std::string(op) + ": the mask must be bool");
  return CheckSameShape(op, x, mask);
}

// reduce_sum's output is the input without its last dim.
inline ffi::Error CheckRowShape(const char* op, const ffi::AnyBuffer& input,
                                const ffi::AnyBuffer& output) {
  auto din = input.dimensions();
  auto dout = output.dimensions();
  bool ok = din.size() >= 1 && dout.size() + 1 == din.size();
  for (size_t i = 0; ok && i < dout.size(); ++i) ok = din[i] == dout[i];
  if (ok) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(op) + ": output shape " + ShapeString(output) +
                                     " must be the input shape " + ShapeString(input) +
                                     " without its last dim");
}

// Calls body(Tag<T>{}) with T the storage type that `Types` maps `dtype` to:
// Types is DeviceTypes (CUDA's __half, __nv_bfloat16) or HostTypes.
template <typename T>
struct Tag {
  using type = T;
};

template <typename Types, typename Body>
ffi::Error DispatchFloat(ffi::DataType dtype, Body&& body) {
  switch (dtype) {
    case ffi::DataType::F32: return body(Tag<float>{});
    case ffi::DataType::BF16: return body(Tag<typename Types::BF16>{});
    case ffi::DataType::F16: return body(Tag<typename Types::F16>{});
    default:
      return ffi::Error::InvalidArgument("dtype must be float32, bfloat16 or float16");
  }
}

}  // namespace jax_camp

// Returns the error from the enclosing handler if `expr` (an ffi::Error) failed.
#define JAX_CAMP_RETURN_IF_ERROR(expr)              \
  do {                                              \
    ::xla::ffi::Error jax_camp_error_ = (expr);     \
    if (jax_camp_error_.failure()) return jax_camp_error_; \
  } while (0)
