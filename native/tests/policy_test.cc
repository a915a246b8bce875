// Unit tests of the pure policy parts of the core: fusion planning, the
// response cache, the coordinator's message table, the wire encoding, the
// reducescatter row split, and 16-bit float conversion and its vector
// kernels. No MPI, no ranks. Built and run by tests/test_native_policy.py.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/common.h"
#include "base/dtype.h"
#include "policy/autotune.h"
#include "policy/coordinator.h"
#include "policy/fusion_planner.h"
#include "policy/response_cache.h"
#include "policy/row_split.h"
#include "policy/wire.h"

using namespace fuseopt;

static int g_failures = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::printf("%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      ++g_failures;                                                          \
    }                                                                        \
  } while (0)

static TensorSpec spec(const std::string& name, std::vector<int64_t> shape,
                       fuseopt_collective_t c = FUSEOPT_ALLREDUCE) {
  TensorSpec s;
  s.name = name;
  s.shape = std::move(shape);
  s.collective = c;
  return s;
}

static void test_planner() {
  // Same key, fits: one bucket; order preserved.
  auto b = plan_buckets({{"k", 10}, {"k", 20}, {"k", 30}}, 100);
  CHECK(b.size() == 1 && b[0] == (Bucket{0, 1, 2}));
  // Threshold splits; a tensor bigger than the threshold gets its own bucket.
  b = plan_buckets({{"k", 60}, {"k", 60}, {"k", 500}, {"k", 30}}, 100);
  CHECK(b.size() == 3);
  CHECK(b[0] == (Bucket{0}) && b[1] == (Bucket{1, 3}) && b[2] == (Bucket{2}));
  // Different keys never share; buckets ordered by their first tensor.
  b = plan_buckets({{"a", 1}, {"b", 1}, {"a", 1}, {"b", 1}}, 100);
  CHECK(b.size() == 2 && b[0] == (Bucket{0, 2}) && b[1] == (Bucket{1, 3}));
  // Empty key (non-fusible collectives) and threshold 0: one bucket each.
  b = plan_buckets({{"", 1}, {"", 1}}, 100);
  CHECK(b.size() == 2);
  b = plan_buckets({{"k", 1}, {"k", 1}}, 0);
  CHECK(b.size() == 2);
  // Exactly at the threshold still fits; zero-byte tensors fuse.
  b = plan_buckets({{"k", 50}, {"k", 50}, {"k", 0}}, 100);
  CHECK(b.size() == 1);
  CHECK(plan_buckets({}, 100).empty());
}

static Response response(const std::string& name, std::vector<int64_t> shape) {
  Response r;
  r.spec = spec(name, std::move(shape));
  return r;
}

static void test_cache() {
  ResponseCache c(2);
  int64_t slot = -1;
  CHECK(c.lookup(spec("a", {3}), 0, &slot) == ResponseCache::Lookup::kMiss);
  int64_t sa = c.put(response("a", {3}));
  int64_t sb = c.put(response("b", {4}));
  CHECK(sa == 0 && sb == 1);
  CHECK(c.lookup(spec("a", {3}), 0, &slot) == ResponseCache::Lookup::kHit && slot == sa);
  CHECK(c.lookup(spec("a", {5}), 0, &slot) == ResponseCache::Lookup::kStale && slot == sa);
  // LRU: touching a makes b the victim; the freed slot is reused.
  c.touch(sa);
  int64_t sc = c.put(response("c", {1}));
  CHECK(sc == sb && c.holds(sc, "c") && !c.holds(sb, "b") && c.holds(sa, "a"));
  CHECK(c.lookup(spec("b", {4}), 0, &slot) == ResponseCache::Lookup::kMiss);
  // Re-putting a name replaces it; erase frees the slot.
  c.erase(sa);
  CHECK(!c.holds(sa, "a") && c.size() == 1);
  CHECK(c.used_slots() == std::vector<int64_t>{sc});
  // Allgather: a changed first dimension of *this* rank is stale.
  Response g = response("g", {2, 3});
  g.spec.collective = FUSEOPT_ALLGATHER;
  g.first_dims = {2, 5};
  ResponseCache c2(4);
  c2.put(g);
  CHECK(c2.lookup(spec("g", {5, 3}, FUSEOPT_ALLGATHER), 1, &slot) == ResponseCache::Lookup::kHit);
  CHECK(c2.lookup(spec("g", {4, 3}, FUSEOPT_ALLGATHER), 1, &slot) ==
        ResponseCache::Lookup::kStale);
  // Capacity 0 disables.
  ResponseCache off(0);
  CHECK(off.put(response("a", {1})) == -1 && off.size() == 0);
  // Two caches fed the same updates agree slot for slot (what keeps ranks in step).
  ResponseCache x(3), y(3);
  const char* names[] = {"p", "q", "r", "s", "q", "t", "p"};
  for (const char* n : names) {
    CHECK(x.put(response(n, {1})) == y.put(response(n, {1})));
  }
  CHECK(x.used_slots() == y.used_slots());
}

static Request request(int rank, TensorSpec s) {
  Request q;
  q.rank = rank;
  q.spec = std::move(s);
  return q;
}

static void test_coordinator_order() {
  Coordinator c(3);
  std::vector<bool> none(3, false);
  c.add({request(0, spec("b", {2})), request(0, spec("a", {2}))}, 0.0);
  c.add({request(1, spec("a", {2})), request(1, spec("b", {2}))}, 1.0);
  CHECK(c.take_ready(none).empty());
  c.add({request(2, spec("a", {2})), request(2, spec("b", {2}))}, 2.0);
  auto ready = c.take_ready(none);
  // Ordered by first arrival at the coordinator: b before a.
  CHECK(ready.size() == 2 && ready[0].spec.name == "b" && ready[1].spec.name == "a");
  CHECK(!ready[0].is_error() && c.waiting() == 0);
  // Joined ranks count as present; allgather records 0 rows for them.
  auto g = spec("g", {5, 2}, FUSEOPT_ALLGATHER);
  c.add({request(0, g), request(2, spec("g", {1, 2}, FUSEOPT_ALLGATHER))}, 0);
  CHECK(c.take_ready(none).empty());
  ready = c.take_ready({false, true, false});
  CHECK(ready.size() == 1 && ready[0].first_dims == (std::vector<int64_t>{5, 0, 1}));
  CHECK(ready[0].joined == std::vector<int32_t>{1});
  // Broadcast from a joined root is an error, not a hang.
  auto bc = spec("bc", {1}, FUSEOPT_BROADCAST);
  bc.root = 1;
  c.add({request(0, bc), request(2, bc)}, 0);
  ready = c.take_ready({false, true, false});
  CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_INVALID_ARG);
}

static void test_coordinator_mismatch() {
  Coordinator c(3);
  std::vector<bool> none(3, false);
  // Mismatch names the tensor, groups ranks and shows both values.
  c.add({request(0, spec("m", {3})), request(1, spec("m", {4})), request(2, spec("m", {4}))}, 0);
  auto ready = c.take_ready(none);
  CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_MISMATCH);
  const std::string& msg = ready[0].error_message;
  CHECK(msg.find("'m'") != std::string::npos);
  CHECK(msg.find("rank 0 has allreduce float32[3]") != std::string::npos);
  CHECK(msg.find("ranks 1, 2 have allreduce float32[4]") != std::string::npos);
  // The device kind is part of what ranks agree on, and named when not host.
  auto on_cuda = spec("d", {2});
  on_cuda.device = FUSEOPT_DEVICE_CUDA;
  c.add({request(0, spec("d", {2})), request(1, on_cuda), request(2, on_cuda)}, 0);
  ready = c.take_ready(none);
  CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_MISMATCH);
  CHECK(ready[0].error_message.find("rank 0 has allreduce float32[2] op=sum;") !=
        std::string::npos);
  CHECK(ready[0].error_message.find("ranks 1, 2 have allreduce float32[2] op=sum on cuda") !=
        std::string::npos);
  // Phases must agree like dtypes: fresh gradients (0) never reduce with
  // resubmitted stale ones (1); the message names the phase.
  auto stale = spec("p", {2});
  stale.phase = 1;
  c.add({request(0, spec("p", {2})), request(1, stale), request(2, spec("p", {2}))}, 0);
  ready = c.take_ready(none);
  CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_MISMATCH);
  CHECK(ready[0].error_message.find("rank 1 has allreduce float32[2] op=sum phase=1") !=
        std::string::npos);
}

static void test_coordinator_stalls() {
  Coordinator c(3);
  // Stalls name the missing ranks; stall shutdown fails them.
  c.add({request(1, spec("s", {1}))}, 10.0);
  auto stalls = c.stalls(100.0, 60.0);
  CHECK(stalls.size() == 1 && stalls[0].missing_ranks == (std::vector<int32_t>{0, 2}));
  CHECK(c.stalls(20.0, 60.0).empty());
  auto failed = c.take_stalled(100.0, 60.0);
  CHECK(failed.size() == 1 && failed[0].error == FUSEOPT_RANK_FAILED);
  CHECK(failed[0].error_message.find("0, 2") != std::string::npos && c.waiting() == 0);
  // A request renegotiated after waiting in the cache keeps its age: its
  // stall is timed from the enqueue (here 50 s before it reached the table).
  Request aged = request(1, spec("aged", {1}));
  aged.waited_s = 50.0;
  c.add({aged}, 100.0);
  CHECK(c.stalls(111.0, 60.0).size() == 1 && c.stalls(109.0, 60.0).empty());
  CHECK(c.stalls(111.0, 60.0)[0].waiting_s > 60.0);
  c.take_stalled(111.0, 60.0);
}

static void test_row_split() {
  // 7 rows over 3 ranks: 3, 2, 2; every row lands somewhere.
  CHECK(reducescatter_rows(7, 0, 3) == 3 && reducescatter_rows(7, 1, 3) == 2 &&
        reducescatter_rows(7, 2, 3) == 2);
  CHECK(reducescatter_rows(2, 0, 4) == 1 && reducescatter_rows(2, 3, 4) == 0);
  CHECK(reducescatter_rows(8, 3, 4) == 2 && reducescatter_rows(0, 0, 1) == 0);
}

static void test_wire() {
  TensorSpec s = spec("w\xc3\xa9ird name", {0, 7, 1});
  s.dtype = FUSEOPT_BFLOAT16;
  s.reduce_op = FUSEOPT_PRODUCT;
  s.root = 3;
  s.prescale = 0.25;
  s.postscale = -2;
  s.device = FUSEOPT_DEVICE_NPU;
  s.phase = 7;
  Request q = request(5, s);
  q.waited_s = 12.5;
  auto qs = decode_requests(encode_requests({q}).data(), encode_requests({q}).size());
  CHECK(qs.size() == 1 && qs[0].rank == 5 && qs[0].spec.name == s.name);
  CHECK(qs[0].spec.device == FUSEOPT_DEVICE_NPU && qs[0].spec.phase == 7);
  CHECK(qs[0].waited_s == 12.5);
  CHECK(qs[0].spec.shape == s.shape && qs[0].spec.prescale == 0.25 && qs[0].spec.root == 3);
  Response r;
  r.spec = s;
  r.first_dims = {1, 2};
  r.joined = {4};
  r.error = FUSEOPT_MISMATCH;
  r.error_message = "boom";
  auto bytes = encode_responses({r, Response()});
  auto rs = decode_responses(bytes.data(), bytes.size());
  CHECK(rs.size() == 2 && rs[0].first_dims == r.first_dims && rs[0].joined == r.joined);
  CHECK(rs[0].error == FUSEOPT_MISMATCH && rs[0].error_message == "boom");
  bool threw = false;
  try {
    decode_responses(bytes.data(), bytes.size() - 3);
  } catch (const Error&) {
    threw = true;
  }
  CHECK(threw);
}

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
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(37), size_t(1) << 18}) {
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

// A synthetic job whose throughput peaks at a 16 MiB threshold and a 500 us
// cycle time: the tuner must try each candidate once, end on that pair, and
// hold it afterwards.
static void test_autotune() {
  const int64_t window = 3;
  Autotuner tuner({int64_t(64) << 20, 0}, window);
  auto seconds_per_round = [](TuneSetting s) {
    double t = 1.0 + std::fabs(std::log2(double(s.fusion_threshold_bytes) / (16 << 20)));
    return t + (s.cycle_time_us == 500 ? 0.0 : 0.5);
  };
  double now = 0;
  int scored = 0;
  for (int round = 0; round < 200 && !tuner.done(); ++round) {
    const double dt = seconds_per_round(tuner.current());
    if (tuner.observe(1000, now, now + dt)) ++scored;
    now += dt;
  }
  CHECK(tuner.done());
  CHECK(scored == 5 + 3);  // 5 thresholds, then the 3 other cycle times
  CHECK(static_cast<int>(tuner.trials().size()) == scored);
  CHECK(tuner.current() == (TuneSetting{int64_t(16) << 20, 500}));
  CHECK(tuner.best().setting == tuner.current());
  for (const TuneTrial& t : tuner.trials()) CHECK(t.rounds == window);
  CHECK(tuner.observe(1000, now, now + 1) == nullptr);  // holds once done
  CHECK(tuner.current() == (TuneSetting{int64_t(16) << 20, 500}));
}

int main() {
  test_autotune();
  test_planner();
  test_cache();
  test_coordinator_order();
  test_coordinator_mismatch();
  test_coordinator_stalls();
  test_row_split();
  test_wire();
  test_half();
  test_half16_kernels();
  test_narrow_widen_kernels();
  std::printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
