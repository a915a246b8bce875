// Unit tests of the pure policy parts of the core: fusion planning, the
// response cache, the coordinator's message table, the wire encoding, the
// reducescatter row split and the autotuner (element types and 16-bit
// kernels: dtype_test.cc). No MPI, no ranks. Built and run by
// tests/test_native_policy.py.
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "base/error.h"
#include "check.h"
#include "policy/agreed_schedule.h"
#include "policy/autotune.h"
#include "policy/coordinator.h"
#include "policy/fusion_planner.h"
#include "policy/response_cache.h"
#include "policy/row_split.h"
#include "policy/message_codec.h"

using namespace fuseopt;


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
  // Joined ranks count as present: an allreduce runs, with their stand-ins.
  c.add({request(0, spec("r", {2})), request(2, spec("r", {2}))}, 0);
  ready = c.take_ready({false, true, false});
  CHECK(ready.size() == 1 && !ready[0].is_error() && ready[0].joined == std::vector<int32_t>{1});
  // Allgather and broadcast (whatever the root) fail while a rank has
  // joined, as Horovod's: an error on the submitting ranks, not a hang.
  auto g = spec("g", {5, 2}, FUSEOPT_ALLGATHER);
  c.add({request(0, g), request(2, spec("g", {1, 2}, FUSEOPT_ALLGATHER))}, 0);
  CHECK(c.take_ready(none).empty());
  ready = c.take_ready({false, true, false});
  CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_INVALID_ARG &&
        ready[0].error_message.find("joined") != std::string::npos);
  for (int32_t root : {0, 1}) {
    auto bc = spec("bc", {1}, FUSEOPT_BROADCAST);
    bc.root = root;
    c.add({request(0, bc), request(2, bc)}, 0);
    ready = c.take_ready({false, true, false});
    CHECK(ready.size() == 1 && ready[0].error == FUSEOPT_INVALID_ARG);
  }
  // With nobody joined, allgather records each rank's rows.
  c.add({request(0, g), request(1, spec("g", {0, 2}, FUSEOPT_ALLGATHER)),
         request(2, spec("g", {1, 2}, FUSEOPT_ALLGATHER))}, 0);
  ready = c.take_ready(none);
  CHECK(ready.size() == 1 && ready[0].first_dims == (std::vector<int64_t>{5, 0, 1}));
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

// The agreed schedule at every set size up to 70 (and a few large ones for
// its length): simulated message by message, every rank ends with every
// rank's values exactly once, no exchange waits forever, and every message
// sent is received.
static void test_agreed_schedule() {
  for (int size = 1; size <= 70; ++size) {
    std::vector<std::vector<AgreedExchange>> plans(size);
    for (int r = 0; r < size; ++r) {
      AgreedExchange out[kMaxAgreedExchanges];
      const int n = agreed_schedule(r, size, out);
      plans[r].assign(out, out + n);
    }
    // held[r][o]: how many times rank o's values are in rank r's wire.
    std::vector<std::vector<int>> held(size, std::vector<int>(size, 0));
    for (int r = 0; r < size; ++r) held[r][r] = 1;
    std::map<std::tuple<int, int, int>, std::deque<std::vector<int>>> channels;
    std::vector<size_t> next(size, 0);
    std::vector<bool> sent(size, false);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < size; ++r) {
        if (next[r] == plans[r].size()) continue;
        const AgreedExchange& e = plans[r][next[r]];
        CHECK(e.peer >= 0 && e.peer < size && e.peer != r);
        if (e.send && !sent[r]) {
          channels[{r, e.peer, e.tag}].push_back(held[r]);
          sent[r] = progress = true;
        }
        if (e.receive != AgreedExchange::kNone) {
          auto& queue = channels[{e.peer, r, e.tag}];
          if (queue.empty()) continue;
          for (int o = 0; o < size; ++o)
            held[r][o] = (e.receive == AgreedExchange::kAdd ? held[r][o] : 0) + queue.front()[o];
          queue.pop_front();
        }
        sent[r] = false;
        ++next[r];
        progress = true;
      }
    }
    for (int r = 0; r < size; ++r) {
      CHECK(next[r] == plans[r].size());
      CHECK(held[r] == std::vector<int>(size, 1));
    }
    for (auto& kv : channels) CHECK(kv.second.empty());
  }
  AgreedExchange out[kMaxAgreedExchanges];
  CHECK(agreed_schedule(0, 1, out) == 0);
  CHECK(agreed_schedule(1, (1 << 30) + 3, out) == 32);  // fold, 30 doublings, result
}

int main() {
  test_agreed_schedule();
  test_autotune();
  test_planner();
  test_cache();
  test_coordinator_order();
  test_coordinator_mismatch();
  test_coordinator_stalls();
  test_row_split();
  test_wire();
  std::printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
