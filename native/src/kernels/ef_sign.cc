// Every float operation is rounded once, as written (the core builds with
// -ffp-contract=off): the values sent, the steps and the decoded gradient
// have the bits of EFSignCompressor's primitives (fuseopt/training/
// compression.py) on any CPU. Residuals may differ from torch's own path in
// a last bit: its addcmul fuses a multiply-add on AVX2 CPUs and not on
// others, where this is the same everywhere (and TensorFlow's two roundings).
#include "kernels/ef_sign.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/parallel_for.h"
#include "kernels/vector_lanes.h"

namespace fuseopt {
namespace kernels {
namespace {

// Elements per task: large enough that a wake-up of the pool is paid back.
constexpr int64_t kChunk = int64_t(1) << 16;

// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22
// to an integer, ties to even (the FPU's default mode): torch.round's and
// tf.round's rounding, in plain vector arithmetic.
constexpr float kRounder = 12582912.0f;

int64_t chunks(int64_t count) { return (count + kChunk - 1) / kChunk; }

// residual += gradient over [begin, end); returns max|c|, and in *finite
// whether every c was finite (c * 0 is 0 exactly for those).
FUSEOPT_CLONES float accumulate_max(const float* g, float* e, int64_t begin, int64_t end,
                                    bool* finite) {
  v8f m = {}, z = {};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const v8f c = load<v8f>(e + i) + load<v8f>(g + i);
    store(e + i, c);
    const v8f a = c < 0 ? -c : c;
    m = m > a ? m : a;
    z += c * 0.0f;
  }
  float top = 0, zero = 0;
  for (int k = 0; k < 8; ++k) {
    top = std::max(top, m[k]);
    zero += z[k];
  }
  for (; i < end; ++i) {
    const float c = e[i] + g[i];
    e[i] = c;
    top = std::max(top, std::fabs(c));
    zero += c * 0.0f;
  }
  *finite = zero == 0;
  return top;
}

// GCC's vector extensions scalarize conversions between 8 floats and 8
// int8s (GCC 12: ~3x slower than the loads and stores); its loop vectorizer
// widens and narrows them properly, so these two loops are left to it.
#define FUSEOPT_VECTORIZED FUSEOPT_CLONES __attribute__((optimize("O3")))

FUSEOPT_VECTORIZED void quantize(float* __restrict e, int8_t* __restrict values,
                                 int8_t* __restrict kept, int64_t begin, int64_t end, float step,
                                 float levels) {
  for (int64_t i = begin; i < end; ++i) {
    const float c = e[i];
    float q = c / step;
    q = q > levels ? levels : q;  // clamped first, so that the rounder is exact
    q = q < -levels ? -levels : q;
    q = (q + kRounder) - kRounder;
    e[i] = c - q * step;
    values[i] = kept[i] = static_cast<int8_t>(static_cast<int>(q));
  }
}

FUSEOPT_VECTORIZED void decode(const int8_t* __restrict sum, const int8_t* __restrict kept,
                               float* __restrict e, float* __restrict out, int64_t begin,
                               int64_t end, float correction, float scale) {
  for (int64_t i = begin; i < end; ++i) {
    e[i] = e[i] - static_cast<float>(kept[i]) * correction;
    out[i] = static_cast<float>(sum[i]) * scale;
  }
}

}  // namespace

float ef_sign_encode(const float* gradient, float* residual, int8_t* values, int8_t* kept,
                     int64_t count, int levels, int threads) {
  const int64_t tasks = chunks(count);
  std::vector<float> tops(tasks);
  std::vector<char> finite(tasks);
  parallel_for(tasks, threads, [&](int64_t t) {
    bool ok = true;
    tops[t] = accumulate_max(gradient, residual, t * kChunk, std::min(count, (t + 1) * kChunk),
                             &ok);
    finite[t] = ok;
  });
  float top = 0;
  for (int64_t t = 0; t < tasks; ++t) top = std::max(top, tops[t]);
  const bool all_finite = std::all_of(finite.begin(), finite.end(), [](char f) { return f; });
  const float step = all_finite ? top / static_cast<float>(levels) : NAN;
  if (!(step > 0) || !std::isfinite(step)) {
    // Nothing expressible: send zeros and keep all of c (the NaN step, summed,
    // makes every rank's decoded gradient NaN, as a non-finite gradient should).
    std::fill(values, values + count, 0);
    std::fill(kept, kept + count, 0);
    return step;
  }
  parallel_for(tasks, threads, [&](int64_t t) {
    quantize(residual, values, kept, t * kChunk, std::min(count, (t + 1) * kChunk), step,
             static_cast<float>(levels));
  });
  return step;
}

void ef_sign_decode(const int8_t* sum, const int8_t* kept, float* residual, float* out,
                    int64_t count, float step_sum, float step, int ranks, int threads) {
  const float mean = step_sum / static_cast<float>(ranks);
  const float correction = mean - step, scale = mean / static_cast<float>(ranks);
  parallel_for(chunks(count), threads, [&](int64_t t) {
    decode(sum, kept, residual, out, t * kChunk, std::min(count, (t + 1) * kChunk), correction,
           scale);
  });
}

}  // namespace kernels
}  // namespace fuseopt
