#include "kernels/pair_sum.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/vector_lanes.h"

#if defined(__x86_64__)
#include <immintrin.h>  // SSE2's streaming stores: the x86-64 baseline, so every clone has them
#define FUSEOPT_STREAMING_STORES 1
#endif

namespace fuseopt {
namespace kernels {
namespace {

// T(x * factor) for 8 floats, the product in double.
FUSEOPT_INLINE v8f scaled(v8f x, double factor) {
  return narrow(widen(x) * factor);
}

// A store that bypasses the caches (write-combined, no read for ownership) to
// 16-byte aligned p; a plain store where the CPU has none.
template <class V, class T>
FUSEOPT_INLINE void stream(T* p, V v) {
#if FUSEOPT_STREAMING_STORES
  for (size_t b = 0; b < sizeof v; b += 16) {
    __m128i part;
    std::memcpy(&part, reinterpret_cast<const char*>(&v) + b, 16);
    _mm_stream_si128(reinterpret_cast<__m128i*>(reinterpret_cast<char*>(p) + b), part);
  }
#else
  store(p, v);
#endif
}

FUSEOPT_INLINE void stream(double* p, v8d v) {  // half by half, as load and store
  stream(p, v.lo);
  stream(p + 4, v.hi);
}

FUSEOPT_INLINE void stream_fence() {
#if FUSEOPT_STREAMING_STORES
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anyone reads
#endif
}

// Elements to write one by one before out is 16-byte aligned (streaming stores).
template <class T>
int64_t unaligned_head(const T* out, int64_t n) {
  const int64_t misaligned = (reinterpret_cast<uintptr_t>(out) & 15) / sizeof(T);
  return std::min(n, misaligned ? static_cast<int64_t>(16 / sizeof(T)) - misaligned : 0);
}

// Whether a and b sit at the same offset from a 16-byte boundary (one head
// aligns both for streaming stores).
template <class T>
bool same_alignment(const T* a, const T* b) {
  return ((reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) & 15) == 0;
}

// What the loops of both kernels write: out, plain or streamed; publish (when
// kPublish), plain or streamed. Streaming stores need 16-byte alignment: the
// head aligns the published copy when it streams, else the output, and the
// output then streams only if that aligns it too.
template <class T, bool kPublish, bool kStreamOut, bool kStreamPublish>
struct Writes {
  T* out;
  T* publish;
  bool stream_out;
  int64_t head;
  Writes(T* o, T* p, int64_t n)
      : out(o), publish(p),
        stream_out(kStreamOut && (!kStreamPublish || same_alignment(o, p))),
        head(kStreamPublish ? unaligned_head(p, n) : kStreamOut ? unaligned_head(o, n) : 0) {}
  template <class V>
  FUSEOPT_INLINE void put(int64_t at, V r) {
    if (stream_out) stream(out + at, r); else store(out + at, r);
    if (kStreamPublish) stream(publish + at, r); else if (kPublish) store(publish + at, r);
  }
  FUSEOPT_INLINE void finish() {
    if (kStreamOut || kStreamPublish) stream_fence();
  }
};

template <bool kPublish, bool kStreamOut, bool kStreamPublish>
FUSEOPT_INLINE void sum_floats(const float* in, double pre, const float* other, float* out,
                               float* publish, double post, int64_t n) {
  auto one = [&](int64_t i) {  // the unaligned head and the tail
    const float r = static_cast<float>((other[i] + static_cast<float>(in[i] * pre)) * post);
    out[i] = r;
    if (kPublish) publish[i] = r;
  };
  Writes<float, kPublish, kStreamOut, kStreamPublish> w(out, publish, n);
  int64_t i = 0;
  for (; i < w.head; ++i) one(i);
  if (pre == 1.0 && post == 1.0) {  // the products are exact: skip them
    for (; i + 8 <= n; i += 8) w.put(i, load<v8f>(other + i) + load<v8f>(in + i));
  } else {
    for (; i + 8 <= n; i += 8)
      w.put(i, scaled(load<v8f>(other + i) + scaled(load<v8f>(in + i), pre), post));
  }
  w.finish();
  for (; i < n; ++i) one(i);
}

template <bool kPublish, bool kStreamOut, bool kStreamPublish>
FUSEOPT_INLINE void sum_doubles(const double* in, double pre, const double* other, double* out,
                                double* publish, double post, int64_t n) {
  auto one = [&](int64_t i) {  // the unaligned head and the tail
    const double r = (other[i] + in[i] * pre) * post;
    out[i] = r;
    if (kPublish) publish[i] = r;
  };
  Writes<double, kPublish, kStreamOut, kStreamPublish> w(out, publish, n);
  int64_t i = 0;
  for (; i < w.head; ++i) one(i);
  for (; i + 8 <= n; i += 8) w.put(i, (load<v8d>(other + i) + load<v8d>(in + i) * pre) * post);
  w.finish();
  for (; i < n; ++i) one(i);
}

// One instantiation per combination of stores: a branch per call, not per
// element.
#define FUSEOPT_PAIR_SUM_DISPATCH(sum)                                               \
  if (!publish)                                                                     \
    return stream_out ? sum<false, true, false>(in, pre, other, out, nullptr, post, n) \
                      : sum<false, false, false>(in, pre, other, out, nullptr, post, n); \
  if (stream_publish)                                                               \
    return stream_out ? sum<true, true, true>(in, pre, other, out, publish, post, n)  \
                      : sum<true, false, true>(in, pre, other, out, publish, post, n); \
  return stream_out ? sum<true, true, false>(in, pre, other, out, publish, post, n)   \
                    : sum<true, false, false>(in, pre, other, out, publish, post, n)

}  // namespace

FUSEOPT_CLONES
void pair_sum_publish(const float* in, double pre, const float* other, float* out,
                      float* publish, double post, int64_t n, bool stream_out,
                      bool stream_publish) {
  FUSEOPT_PAIR_SUM_DISPATCH(sum_floats);
}

FUSEOPT_CLONES
void pair_sum_publish(const double* in, double pre, const double* other, double* out,
                      double* publish, double post, int64_t n, bool stream_out,
                      bool stream_publish) {
  FUSEOPT_PAIR_SUM_DISPATCH(sum_doubles);
}

void stream_copy(void* dst, const void* src, int64_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const int64_t head = unaligned_head(d, bytes);
  std::memcpy(d, s, head);
  int64_t i = head;
#if FUSEOPT_STREAMING_STORES
  for (; i + 64 <= bytes; i += 64) {
    for (int b = 0; b < 64; b += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + b),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + b)));
  }
  stream_fence();
#endif
  std::memcpy(d + i, s + i, bytes - i);
}

}  // namespace kernels
}  // namespace fuseopt
