// Walks a channel view row by row (channel_kernels.h) and hands each row, in
// the compute type, to the loops of channel_rows.cc.
#include "kernels/channel_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "base/half16.h"
#include "kernels/channel_rows.h"
#include "kernels/parallel_for.h"

namespace fuseopt {
namespace kernels {
namespace {

bool is_16bit(int32_t dtype) { return is_16bit_float(static_cast<fuseopt_dtype_t>(dtype)); }

// How a call walks its views: along each channel's contiguous run, or along
// each position's contiguous channels.
enum class Walk { kChannelRows, kPositionRows };

// One view's rows in the compute type C: a pointer into the tensor when its
// row is already C and contiguous, else a converted copy (read) or a buffer
// written back on flush.
template <class C>
class Rows {
 public:
  Rows(const fuseopt_channel_view_t& v, Walk walk) : v_(v) {
    const bool along_channels = walk == Walk::kPositionRows;
    n_ = along_channels ? v.channels : v.inner;
    stride_ = along_channels ? v.channel_stride : v.inner_stride;
    direct_ = stride_ == 1 && v.dtype == (sizeof(C) == 8 ? FUSEOPT_FLOAT64 : FUSEOPT_FLOAT32);
    if (!direct_) buffer_.resize(static_cast<size_t>(n_));
  }
  const C* read(int64_t offset) {
    if (direct_) return static_cast<const C*>(v_.data) + offset;
    if (is_16bit(v_.dtype) && stride_ == 1 && sizeof(C) == 4) {
      widen16(static_cast<fuseopt_dtype_t>(v_.dtype), element<uint16_t>(offset),
              reinterpret_cast<float*>(buffer_.data()), n_, 1.0f);
      return buffer_.data();
    }
    for (int64_t i = 0; i < n_; ++i)
      buffer_[i] = static_cast<C>(load_element(v_.data, v_.dtype, offset + i * stride_));
    return buffer_.data();
  }
  bool direct() const { return direct_; }
  C* target(int64_t offset) {
    return direct_ ? static_cast<C*>(v_.data) + offset : buffer_.data();
  }
  void flush(int64_t offset) {
    if (direct_) return;
    if (is_16bit(v_.dtype) && stride_ == 1 && sizeof(C) == 4) {
      narrow16(static_cast<fuseopt_dtype_t>(v_.dtype), reinterpret_cast<const float*>(buffer_.data()),
               element<uint16_t>(offset), n_, 1.0f);
      return;
    }
    for (int64_t i = 0; i < n_; ++i)
      store_element(v_.data, v_.dtype, offset + i * stride_, buffer_[i]);
  }

 private:
  template <class T>
  T* element(int64_t offset) const {
    return static_cast<T*>(v_.data) + offset;
  }
  const fuseopt_channel_view_t& v_;
  int64_t n_ = 0, stride_ = 1;
  bool direct_ = false;
  std::vector<C> buffer_;
};

Walk choose_walk(std::initializer_list<const fuseopt_channel_view_t*> views) {
  bool runs = true, positions = true;
  for (const fuseopt_channel_view_t* v : views) {
    runs = runs && (v->inner_stride == 1 || v->inner <= 1);
    positions = positions && (v->channel_stride == 1 || v->channels <= 1);
  }
  const int64_t inner = (*views.begin())->inner;
  if (positions && (inner == 1 || !runs)) return Walk::kPositionRows;
  return Walk::kChannelRows;
}

int64_t offset_of(const fuseopt_channel_view_t& v, Walk walk, int64_t a, int64_t i) {
  return a * v.outer_stride + i * (walk == Walk::kChannelRows ? v.channel_stride : v.inner_stride);
}

template <class C>
const C* at(const fuseopt_channel_view_t& v, int64_t offset) {
  return static_cast<const C*>(v.data) + offset;
}

template <class C>
void sums_as(const fuseopt_channel_view_t& u, const fuseopt_channel_view_t* v, double* sum_u,
             double* sum_uv) {
  const Walk walk = v ? choose_walk({&u, v}) : choose_walk({&u});
  const fuseopt_channel_view_t& w = v ? *v : u;
  Rows<C> us(u, walk), vs(w, walk);
  if (walk == Walk::kChannelRows && us.direct() && vs.direct()) {
    // Each channel's runs of every sample in one call: one horizontal sum.
    for (int64_t c = 0; c < u.channels; ++c)
      channel_row_sums(at<C>(u, c * u.channel_stride), at<C>(w, c * w.channel_stride), u.inner,
                       u.outer, u.outer_stride, w.outer_stride, sum_u + c, sum_uv + c);
    return;
  }
  const int64_t rows = walk == Walk::kChannelRows ? u.channels : u.inner;
  for (int64_t n = 0; n < u.outer; ++n) {
    for (int64_t i = 0; i < rows; ++i) {
      const C* x = us.read(offset_of(u, walk, n, i));
      const C* y = v ? vs.read(offset_of(w, walk, n, i)) : x;
      if (walk == Walk::kChannelRows)
        channel_row_sums(x, y, u.inner, 1, 0, 0, sum_u + i, sum_uv + i);
      else
        position_row_sums(x, y, u.channels, sum_u, sum_uv);
    }
  }
}

template <class C>
void affine_as(const fuseopt_channel_view_t& out, const fuseopt_channel_view_t& a,
               const double* p, const fuseopt_channel_view_t* b, const double* q,
               const double* r) {
  const Walk walk = b ? choose_walk({&out, &a, b}) : choose_walk({&out, &a});
  const fuseopt_channel_view_t& bv = b ? *b : a;
  Rows<C> outs(out, walk), as(a, walk), bs(bv, walk);
  const int64_t channels = a.channels;
  std::vector<C> pc(p, p + channels), qc(channels, C(0)), rc(r, r + channels);
  if (b) qc.assign(q, q + channels);
  if (walk == Walk::kChannelRows && outs.direct() && as.direct() && bs.direct()) {
    const int64_t strides[3] = {out.outer_stride, a.outer_stride, bv.outer_stride};
    for (int64_t c = 0; c < channels; ++c)
      channel_row_affine(static_cast<C*>(out.data) + c * out.channel_stride,
                         at<C>(a, c * a.channel_stride), pc[c],
                         b ? at<C>(bv, c * bv.channel_stride) : nullptr, qc[c], rc[c], a.inner,
                         a.outer, strides);
    return;
  }
  const int64_t rows = walk == Walk::kChannelRows ? a.channels : a.inner;
  const int64_t one_row[3] = {0, 0, 0};
  for (int64_t n = 0; n < a.outer; ++n) {
    for (int64_t i = 0; i < rows; ++i) {
      const C* x = as.read(offset_of(a, walk, n, i));
      const C* y = b ? bs.read(offset_of(bv, walk, n, i)) : nullptr;
      const int64_t to = offset_of(out, walk, n, i);
      C* dst = outs.target(to);
      if (walk == Walk::kChannelRows)
        channel_row_affine(dst, x, pc[i], y, qc[i], rc[i], a.inner, 1, one_row);
      else
        position_row_affine(dst, x, pc.data(), y, b ? qc.data() : nullptr, rc.data(), channels);
      outs.flush(to);
    }
  }
}

// Channels [c0, c1) of v: the same tensor, fewer channels.
fuseopt_channel_view_t channels_of(const fuseopt_channel_view_t& v, int64_t c0, int64_t c1) {
  fuseopt_channel_view_t out = v;
  const int64_t size = static_cast<int64_t>(dtype_size(static_cast<fuseopt_dtype_t>(v.dtype)));
  out.data = static_cast<char*>(v.data) + c0 * v.channel_stride * size;
  out.channels = c1 - c0;
  return out;
}

// Below this many elements a call stays on its own thread: waking helpers
// costs tens of microseconds here, what a small layer takes in all.
constexpr int64_t kParallelMinElements = 1 << 16;

// range(c0, c1) over contiguous channel ranges, one per thread when v is
// large enough, else range(0, channels) on this thread.
template <class F>
void by_channel_ranges(const fuseopt_channel_view_t& v, int threads, F range) {
  const int64_t elements = v.outer * v.channels * v.inner;
  const int64_t parts = elements >= kParallelMinElements
                            ? std::min<int64_t>(std::max(threads, 1), v.channels)
                            : 1;
  if (parts <= 1) return range(0, v.channels);
  parallel_for(parts, static_cast<int>(parts), [&](int64_t i) {
    range(v.channels * i / parts, v.channels * (i + 1) / parts);
  });
}

}  // namespace

double load_element(const void* data, int32_t dtype, int64_t i) {
  switch (dtype) {
    case FUSEOPT_FLOAT64: return static_cast<const double*>(data)[i];
    case FUSEOPT_FLOAT32: return static_cast<const float*>(data)[i];
    case FUSEOPT_FLOAT16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    default: return bfloat_to_float(static_cast<const uint16_t*>(data)[i]);
  }
}

void store_element(void* data, int32_t dtype, int64_t i, double value) {
  switch (dtype) {
    case FUSEOPT_FLOAT64: static_cast<double*>(data)[i] = value; break;
    case FUSEOPT_FLOAT32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
    case FUSEOPT_FLOAT16:
      static_cast<uint16_t*>(data)[i] = float_to_half(static_cast<float>(value));
      break;
    default: static_cast<uint16_t*>(data)[i] = float_to_bfloat(static_cast<float>(value));
  }
}

void check_view(const fuseopt_channel_view_t& v, const char* what) {
  auto bad = [&](const std::string& why) {
    throw Error(FUSEOPT_INVALID_ARG, std::string(what) + ": " + why);
  };
  if (v.dtype != FUSEOPT_FLOAT32 && v.dtype != FUSEOPT_FLOAT64 && !is_16bit(v.dtype))
    bad("dtype must be float32, float64, float16 or bfloat16");
  if (v.outer < 0 || v.channels < 0 || v.inner < 0) bad("negative size");
  if (!v.data && v.outer * v.channels * v.inner > 0) bad("null data");
}

void check_same_shape(const fuseopt_channel_view_t& a, const fuseopt_channel_view_t& b,
                      const char* what) {
  if (a.dtype != b.dtype)
    throw Error(FUSEOPT_INVALID_ARG, std::string(what) + ": dtype differs from the input's");
  if (a.outer != b.outer || a.channels != b.channels || a.inner != b.inner)
    throw Error(FUSEOPT_INVALID_ARG, std::string(what) + ": shape differs from the input's");
}

void channel_sums(const fuseopt_channel_view_t& u, const fuseopt_channel_view_t* v,
                  double* sum_u, double* sum_uv, int threads) {
  std::fill(sum_u, sum_u + u.channels, 0.0);
  std::fill(sum_uv, sum_uv + u.channels, 0.0);
  if (u.outer * u.channels * u.inner == 0) return;
  by_channel_ranges(u, threads, [&](int64_t c0, int64_t c1) {
    const fuseopt_channel_view_t us = channels_of(u, c0, c1);
    fuseopt_channel_view_t vs;
    if (v) vs = channels_of(*v, c0, c1);
    if (u.dtype == FUSEOPT_FLOAT64)
      sums_as<double>(us, v ? &vs : nullptr, sum_u + c0, sum_uv + c0);
    else
      sums_as<float>(us, v ? &vs : nullptr, sum_u + c0, sum_uv + c0);
  });
}

void channel_affine(const fuseopt_channel_view_t& out, const fuseopt_channel_view_t& a,
                    const double* p, const fuseopt_channel_view_t* b, const double* q,
                    const double* r, int threads) {
  if (a.outer * a.channels * a.inner == 0) return;
  by_channel_ranges(a, threads, [&](int64_t c0, int64_t c1) {
    const fuseopt_channel_view_t os = channels_of(out, c0, c1), as = channels_of(a, c0, c1);
    fuseopt_channel_view_t bs;
    if (b) bs = channels_of(*b, c0, c1);
    if (a.dtype == FUSEOPT_FLOAT64)
      affine_as<double>(os, as, p + c0, b ? &bs : nullptr, b ? q + c0 : nullptr, r + c0);
    else
      affine_as<float>(os, as, p + c0, b ? &bs : nullptr, b ? q + c0 : nullptr, r + c0);
  });
}

}  // namespace kernels
}  // namespace fuseopt
