// Unit tests of the core's element-wise work on the host: scaling, identity
// elements, float16/bfloat16 conversion, and the 16-bit kernels (vector
// against scalar, bit for bit, and narrowing/widening against a cast plus
// scale16). Built and run by tests/test_native_policy.py.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/dtype.h"
#include "check.h"
#include "kernels/pair_sum.h"

using namespace fuseopt;

static void test_half() {
  // Every half value round-trips exactly through float.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = half_to_float((uint16_t)h);
    if (std::isnan(f)) continue;
    CHECK(float_to_half(f) == h);
  }
  CHECK(half_to_float(0x3c00) == 1.0f && half_to_float(0xc000) == -2.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));      // smallest subnormal
  CHECK(float_to_half(65520.0f) == 0x7c00);                    // rounds to inf
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie to even
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0);            // tie to even (zero)
  CHECK(std::isnan(half_to_float(float_to_half(NAN))));
  CHECK(bfloat_to_float(float_to_bfloat(3.0f)) == 3.0f);
  CHECK(float_to_bfloat(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even
  uint16_t in[3] = {float_to_half(1.5f), float_to_half(-2.0f), float_to_half(0.0f)};
  uint16_t out[3];
  scale_copy(FUSEOPT_FLOAT16, in, out, 3, 2.0);
  CHECK(half_to_float(out[0]) == 3.0f && half_to_float(out[1]) == -4.0f);
  int32_t ints[2] = {7, -7};
  scale_copy(FUSEOPT_INT32, ints, ints, 2, 0.5);
  CHECK(ints[0] == 3 && ints[1] == -3);  // truncation toward zero
  float id[2];
  fill_identity(FUSEOPT_FLOAT32, FUSEOPT_MIN, id, 2);
  CHECK(std::isinf(id[0]) && id[0] > 0);
  int8_t idi;
  fill_identity(FUSEOPT_INT8, FUSEOPT_MAX, &idi, 1);
  CHECK(idi == -128);
}

// 16-bit values of every class, in random order: random bits (normals,
// subnormals, zeros, infinities, quiet and signalling NaNs) mixed with the
// edges rounding cares about.
static std::vector<uint16_t> bits16(bool half, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<uint16_t> edges =
      half ? std::vector<uint16_t>{0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00,
                                   0xfc00, 0x7c01, 0x7e00, 0xfe01, 0x3c00, 0x3c01, 0x8001}
           : std::vector<uint16_t>{0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x7f7f, 0x7f80,
                                   0xff80, 0x7f81, 0x7fc0, 0xffc1, 0x3f80, 0x3f81, 0x8001};
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = (rng() % 4 == 0) ? edges[rng() % edges.size()] : uint16_t(rng());
  return v;
}

// The F16C + AVX2 kernels give the scalar kernels' bits, NaN payloads
// included, for every op and both 16-bit types, at lengths with tails.
static void test_half16_kernels() {
  std::printf("16-bit kernels on this CPU: %s\n", kernels16_name(best_kernels16()));
  if (best_kernels16() == Kernels16::kScalar) return;  // nothing to compare against
  for (fuseopt_dtype_t dtype : {FUSEOPT_FLOAT16, FUSEOPT_BFLOAT16}) {
    const bool half = dtype == FUSEOPT_FLOAT16;
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(16), size_t(24), size_t(37),
                     size_t(1) << 18}) {
      const std::vector<uint16_t> in = bits16(half, n, 1 + n), acc = bits16(half, n, 2 + n);
      for (fuseopt_reduce_op_t op :
           {FUSEOPT_SUM, FUSEOPT_AVERAGE, FUSEOPT_MIN, FUSEOPT_MAX, FUSEOPT_PRODUCT}) {
        std::vector<uint16_t> scalar = acc, vector = acc;
        combine16(dtype, op, in.data(), scalar.data(), n, Kernels16::kScalar);
        combine16(dtype, op, in.data(), vector.data(), n, Kernels16::kAvx2);
        size_t first_diff = n;
        for (size_t i = 0; i < n && first_diff == n; ++i)
          if (scalar[i] != vector[i]) first_diff = i;
        if (first_diff != n)
          std::printf("combine16 dtype %d op %d: %04x op %04x -> scalar %04x, vector %04x\n",
                      dtype, op, in[first_diff], acc[first_diff], scalar[first_diff],
                      vector[first_diff]);
        CHECK(first_diff == n);
      }
      for (float factor : {0.5f, 1.0f / 3.0f, 3.0f, 1e-5f, 6e4f, -1.0f}) {
        std::vector<uint16_t> scalar(n), vector(n);
        scale16(dtype, in.data(), scalar.data(), n, factor, Kernels16::kScalar);
        scale16(dtype, in.data(), vector.data(), n, factor, Kernels16::kAvx2);
        CHECK(scalar == vector);
      }
    }
  }
}

// float32 values of every class: random bits, and values right at and next
// to the 16-bit types' rounding edges (halfway cases, the subnormal range,
// overflow to infinity), with NaNs and infinities.
static std::vector<float> bits32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<uint32_t> edges = {0x00000000, 0x80000000, 0x00000001, 0x33000000, 0x33000001,
                                       0x387fe000, 0x38800000, 0x477fefff, 0x477ff000, 0x7f7fffff,
                                       0x7f800000, 0xff800000, 0x7f800001, 0x7fc00000, 0x3f801000,
                                       0x3f803000, 0x3f808000, 0x3f818000, 0x00800000, 0xff7fffff};
  std::vector<float> v(n);
  for (auto& x : v) {
    uint32_t b = rng();
    const int pick = rng() % 4;
    if (pick == 0) b = edges[rng() % edges.size()];
    if (pick == 1) b = (b & 0x8fffe000u) | 0x38000000u | (rng() % 2 ? 0x1000u : 0u);  // near fp16
    std::memcpy(&x, &b, 4);
  }
  return v;
}

// Narrowing float32 into a 16-bit type and widening back (compression on
// the fusion buffer's copies): the vector kernels give the scalar bits, and
// both equal a cast followed by scale16.
static void test_narrow_widen_kernels() {
  for (fuseopt_dtype_t dtype : {FUSEOPT_FLOAT16, FUSEOPT_BFLOAT16}) {
    const bool half = dtype == FUSEOPT_FLOAT16;
    for (size_t n : {size_t(1), size_t(9), size_t(37), size_t(1) << 16}) {
      const std::vector<float> src = bits32(n, 5 + n);
      const std::vector<uint16_t> src16 = bits16(half, n, 6 + n);
      for (float factor : {1.0f, 0.5f, 1.0f / 3.0f, 6e4f}) {
        std::vector<uint16_t> cast(n), reference(n);
        for (size_t i = 0; i < n; ++i)
          cast[i] = half ? float_to_half(src[i]) : float_to_bfloat(src[i]);
        scale16(dtype, cast.data(), reference.data(), n, factor, Kernels16::kScalar);
        for (Kernels16 k : {Kernels16::kScalar, Kernels16::kAvx2}) {
          std::vector<uint16_t> narrowed(n);
          narrow16(dtype, src.data(), narrowed.data(), n, factor, k);
          CHECK(narrowed == reference);
          std::vector<uint16_t> scaled = src16;  // scale_copy leaves factor 1 alone
          if (factor != 1.0f)
            scale16(dtype, src16.data(), scaled.data(), n, factor, Kernels16::kScalar);
          std::vector<float> widened(n);
          widen16(dtype, src16.data(), widened.data(), n, factor, k);
          bool same = true;
          for (size_t i = 0; i < n; ++i) {
            const float expect = half ? half_to_float(scaled[i]) : bfloat_to_float(scaled[i]);
            same = same && std::memcmp(&expect, &widened[i], 4) == 0;
          }
          CHECK(same);
        }
      }
    }
  }
  // Through convert_copy, as the executor calls it.
  const float x[3] = {1.0f, -2.5f, 65520.0f};
  uint16_t h[3];
  float back[3];
  convert_copy(FUSEOPT_FLOAT32, x, FUSEOPT_FLOAT16, h, 3, 1.0);
  convert_copy(FUSEOPT_FLOAT16, h, FUSEOPT_FLOAT32, back, 3, 2.0);
  CHECK(back[0] == 2.0f && back[1] == -5.0f && std::isinf(back[2]));
}

// The two-rank shared-memory reduction (kernels/pair_sum.h), in the vector
// clone this CPU picks, against its scalar formula bit for bit: scales that
// round, exact ones, a length with a tail, and out aliasing in.
template <typename T>
static void test_pair_sum_publish() {
  const size_t n = 1003;
  for (const auto& scales : {std::make_pair(1.0, 1.0), std::make_pair(1.0 / 3, 1.0 / 7),
                             std::make_pair(0.5, 4.0)}) {
    std::vector<T> in(n), other(n), out(n), publish(n);
    for (size_t i = 0; i < n; ++i) {
      in[i] = static_cast<T>(std::sin(double(i)) * 1e3);
      other[i] = static_cast<T>(std::cos(double(i) * 0.7) * 1e-2);
    }
    std::vector<T> aliased = in;
    kernels::pair_sum_publish(in.data(), scales.first, other.data(), out.data(), publish.data(),
                              scales.second, int64_t(n));
    std::vector<T> publish2(n);
    kernels::pair_sum_publish(aliased.data(), scales.first, other.data(), aliased.data(),
                              publish2.data(), scales.second, int64_t(n));
    bool same = true;
    auto expect = [&](size_t i) {
      return static_cast<T>((other[i] + static_cast<T>(in[i] * scales.first)) * scales.second);
    };
    for (size_t i = 0; i < n; ++i) {
      const T e = expect(i);
      same = same && std::memcmp(&e, &out[i], sizeof(T)) == 0 &&
             std::memcmp(&e, &publish[i], sizeof(T)) == 0 &&
             std::memcmp(&e, &aliased[i], sizeof(T)) == 0 &&
             std::memcmp(&e, &publish2[i], sizeof(T)) == 0;
    }
    CHECK(same);
    // Streaming stores (Note [Streamed slots]): to either, both, with the
    // published copy at every offset from the output's 16-byte alignment.
    for (int shift = 0; shift < 4; ++shift) {
      for (int mode = 1; mode < 4; ++mode) {
        std::vector<T> out3(n + 4), publish3(n + 4);
        T* o = out3.data() + 1;  // misaligned by one element
        T* p = publish3.data() + shift;
        kernels::pair_sum_publish(in.data(), scales.first, other.data(), o, p, scales.second,
                                  int64_t(n), mode & 1, (mode & 2) != 0);
        bool same3 = true;
        for (size_t i = 0; i < n; ++i) {
          const T e = expect(i);
          same3 = same3 && std::memcmp(&e, &o[i], sizeof(T)) == 0 &&
                  std::memcmp(&e, &p[i], sizeof(T)) == 0;
        }
        CHECK(same3);
      }
    }
  }
}

int main() {
  test_pair_sum_publish<float>();
  test_pair_sum_publish<double>();
  test_half();
  test_half16_kernels();
  test_narrow_widen_kernels();
  std::printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
