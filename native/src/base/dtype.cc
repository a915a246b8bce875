#include "base/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/error.h"

namespace fuseopt {

size_t dtype_size(fuseopt_dtype_t dtype) {
  switch (dtype) {
    case FUSEOPT_UINT8:
    case FUSEOPT_INT8: return 1;
    case FUSEOPT_INT16:
    case FUSEOPT_UINT16:
    case FUSEOPT_FLOAT16:
    case FUSEOPT_BFLOAT16: return 2;
    case FUSEOPT_INT32:
    case FUSEOPT_FLOAT32: return 4;
    case FUSEOPT_INT64:
    case FUSEOPT_FLOAT64: return 8;
    default: return 0;
  }
}

bool is_valid_dtype(int dtype) { return dtype >= 0 && dtype < FUSEOPT_DTYPE_COUNT; }

bool is_floating(fuseopt_dtype_t dtype) {
  return dtype == FUSEOPT_FLOAT16 || dtype == FUSEOPT_BFLOAT16 ||
         dtype == FUSEOPT_FLOAT32 || dtype == FUSEOPT_FLOAT64;
}

namespace {

template <typename T>
void scale_typed(const void* src, void* dst, int64_t n, double factor) {
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  if (std::is_floating_point<T>::value) {
    const T f = static_cast<T>(factor);
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] * f;
  } else {
    // Saturate: converting an out-of-range double to an integer is undefined.
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    for (int64_t i = 0; i < n; ++i) {
      double v = static_cast<double>(s[i]) * factor;
      d[i] = v <= lo ? std::numeric_limits<T>::lowest()
                     : v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v);
    }
  }
}

template <typename T>
void fill_typed(void* buf, int64_t n, T value) {
  T* b = static_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) b[i] = value;
}

template <typename T>
T identity_of(fuseopt_reduce_op_t op) {
  switch (op) {
    case FUSEOPT_MIN:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case FUSEOPT_MAX:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    case FUSEOPT_PRODUCT: return T(1);
    default: return T(0);
  }
}

template <typename T>
void divide_typed(void* buf, int64_t n, int64_t divisor) {
  T* b = static_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<T>(b[i] / divisor);
}

}  // namespace

void divide_integers(fuseopt_dtype_t dtype, void* buf, int64_t count, int64_t divisor) {
  switch (dtype) {
    case FUSEOPT_UINT8: return divide_typed<uint8_t>(buf, count, divisor);
    case FUSEOPT_INT8: return divide_typed<int8_t>(buf, count, divisor);
    case FUSEOPT_INT16: return divide_typed<int16_t>(buf, count, divisor);
    case FUSEOPT_UINT16: return divide_typed<uint16_t>(buf, count, divisor);
    case FUSEOPT_INT32: return divide_typed<int32_t>(buf, count, divisor);
    case FUSEOPT_INT64: return divide_typed<int64_t>(buf, count, divisor);
    default: throw Error(FUSEOPT_INTERNAL, "divide_integers: not an integer dtype");
  }
}

void scale_copy(fuseopt_dtype_t dtype, const void* src, void* dst, int64_t count,
                double factor) {
  if (factor == 1.0) {
    if (src != dst) std::memcpy(dst, src, count * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case FUSEOPT_UINT8: return scale_typed<uint8_t>(src, dst, count, factor);
    case FUSEOPT_INT8: return scale_typed<int8_t>(src, dst, count, factor);
    case FUSEOPT_INT16: return scale_typed<int16_t>(src, dst, count, factor);
    case FUSEOPT_UINT16: return scale_typed<uint16_t>(src, dst, count, factor);
    case FUSEOPT_INT32: return scale_typed<int32_t>(src, dst, count, factor);
    case FUSEOPT_INT64: return scale_typed<int64_t>(src, dst, count, factor);
    case FUSEOPT_FLOAT16:
    case FUSEOPT_BFLOAT16:
      return scale16(dtype, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), count,
                     static_cast<float>(factor));
    case FUSEOPT_FLOAT32: return scale_typed<float>(src, dst, count, factor);
    case FUSEOPT_FLOAT64: return scale_typed<double>(src, dst, count, factor);
    default: throw Error(FUSEOPT_INTERNAL, "scale_copy: bad dtype");
  }
}

void convert_copy(fuseopt_dtype_t from, const void* src, fuseopt_dtype_t to, void* dst,
                  int64_t count, double factor) {
  if (from == to) return scale_copy(from, src, dst, count, factor);
  if (from == FUSEOPT_FLOAT32 && is_16bit_float(to))
    return narrow16(to, static_cast<const float*>(src), static_cast<uint16_t*>(dst), count,
                    static_cast<float>(factor));
  if (is_16bit_float(from) && to == FUSEOPT_FLOAT32)
    return widen16(from, static_cast<const uint16_t*>(src), static_cast<float*>(dst), count,
                   static_cast<float>(factor));
  throw Error(FUSEOPT_INTERNAL, "convert_copy: unsupported conversion");
}

void fill_identity(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, void* buf, int64_t count) {
  switch (dtype) {
    case FUSEOPT_UINT8: return fill_typed<uint8_t>(buf, count, identity_of<uint8_t>(op));
    case FUSEOPT_INT8: return fill_typed<int8_t>(buf, count, identity_of<int8_t>(op));
    case FUSEOPT_INT16: return fill_typed<int16_t>(buf, count, identity_of<int16_t>(op));
    case FUSEOPT_UINT16: return fill_typed<uint16_t>(buf, count, identity_of<uint16_t>(op));
    case FUSEOPT_INT32: return fill_typed<int32_t>(buf, count, identity_of<int32_t>(op));
    case FUSEOPT_INT64: return fill_typed<int64_t>(buf, count, identity_of<int64_t>(op));
    case FUSEOPT_FLOAT16:
      return fill_typed<uint16_t>(buf, count, float_to_half(identity_of<float>(op)));
    case FUSEOPT_BFLOAT16:
      return fill_typed<uint16_t>(buf, count, float_to_bfloat(identity_of<float>(op)));
    case FUSEOPT_FLOAT32: return fill_typed<float>(buf, count, identity_of<float>(op));
    case FUSEOPT_FLOAT64: return fill_typed<double>(buf, count, identity_of<double>(op));
    default: throw Error(FUSEOPT_INTERNAL, "fill_identity: bad dtype");
  }
}

}  // namespace fuseopt
