// Element types: sizes, names, and the element-wise work the core does itself
// on the host (scaling on the way into / out of the fusion buffer, the
// identity element a joined rank contributes). 16-bit floats: half16.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/half16.h"
#include "fuseopt/fuseopt.h"

namespace fuseopt {

size_t dtype_size(fuseopt_dtype_t dtype);
bool is_valid_dtype(int dtype);
bool is_floating(fuseopt_dtype_t dtype);

// dst[i] = src[i] * factor, computed in double (float for 16-bit types) and
// rounded back. src may equal dst. For integers the product is truncated.
void scale_copy(fuseopt_dtype_t dtype, const void* src, void* dst, int64_t count,
                double factor);

inline bool is_16bit_float(fuseopt_dtype_t dtype) {
  return dtype == FUSEOPT_FLOAT16 || dtype == FUSEOPT_BFLOAT16;
}

// scale_copy from one element type into another: the same type, or float32
// to and from a 16-bit float (narrow16 / widen16 in half16.h, whose bits
// equal a cast followed by scale_copy in the 16-bit type).
void convert_copy(fuseopt_dtype_t from, const void* src, fuseopt_dtype_t to, void* dst,
                  int64_t count, double factor);

// buf[i] /= divisor for integer dtypes (exact integer division, truncating
// toward zero: used for Average, where multiplying by 1/size could land just
// below an exact quotient).
void divide_integers(fuseopt_dtype_t dtype, void* buf, int64_t count, int64_t divisor);

// Fills buf with the identity of op, so that a rank which has joined (run out
// of data) leaves every other rank's contribution unchanged.
void fill_identity(fuseopt_dtype_t dtype, fuseopt_reduce_op_t op, void* buf,
                   int64_t count);

}  // namespace fuseopt
