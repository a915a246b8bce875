// Unit tests of how a rank chooses the stores it writes its shared-memory
// slots with (transport/mpi/store_choice.h, Note [Streamed slots]): pure
// logic fed with made-up timings. No MPI, no ranks. Built and run by
// tests/unit/test_native_policy.py.
#include <cstdio>
#include <vector>

#include "check.h"
#include "transport/mpi/store_choice.h"

using namespace fuseopt;

// Note [Streamed slots]: a StoreChoice past its first chunks, the kinds in
// turn until each has kWindow past its first: plain taking `plain` seconds a
// chunk of kMinMeasuredBytes, streaming `streaming`.
static StoreChoice taught(double plain, double streaming) {
  StoreChoice c;
  for (int i = 0; i < 2 * (StoreChoice::kWindow + 1); ++i) {
    const bool s = c.streamed(StoreChoice::kAllreduce, StoreChoice::kMinMeasuredBytes);
    CHECK(s == (i % 2 == 1));
    c.measured(StoreChoice::kAllreduce, StoreChoice::kMinMeasuredBytes,
               i < 2 ? 1.0 : s ? (i == 3 ? 100 * streaming : streaming) : plain);
  }
  return c;
}

// The faster by median (an outlier ignored, the cold first chunks left out);
// the other tried for kWindow chunks after kExploreEvery measured ones, the
// wait doubling while trials change nothing and reset when one does; the
// broadcast follows the gauges, before any plain.
static void test_store_choice_trials() {
  const StoreChoice::Kind ar = StoreChoice::kAllreduce, bc = StoreChoice::kBroadcast;
  const int64_t big = StoreChoice::kMinMeasuredBytes;
  const int w = StoreChoice::kWindow;
  CHECK(!StoreChoice().streamed(bc, big));
  StoreChoice c = taught(1e-3, 2e-4);
  int64_t measured = 2 * (w + 1);
  CHECK(c.per_byte(ar, big, false) == 1e-3 / big && c.per_byte(ar, big, true) == 2e-4 / big);
  CHECK(c.streamed(bc, big) && c.streamed(bc, 8 * big));  // follow
  CHECK(c.streamed(StoreChoice::kReduce, big));
  CHECK(!c.streamed(StoreChoice::kWire16, big));       // a gauge of its own
  CHECK(!c.streamed(StoreChoice::kAllgather, big));      // a gauge of its own
  std::vector<int64_t> trials;
  for (int i = 0; i < 4 * StoreChoice::kExploreEvery; ++i, ++measured) {
    const bool s = c.streamed(ar, big);
    if (!s) trials.push_back(measured);
    c.measured(ar, big, s ? 2e-4 : 1e-3);
  }
  CHECK(trials.size() == 2u * w && trials[0] == StoreChoice::kExploreEvery &&
        trials[w - 1] == StoreChoice::kExploreEvery + w - 1 &&
        trials[w] == trials[w - 1] + 1 + 2 * StoreChoice::kExploreEvery);
  // The placement changes: plain is faster at the next trial, and stays.
  bool switched = false;
  for (int i = 0; i < 8 * StoreChoice::kExploreEvery && !switched; ++i) {
    c.measured(ar, big, c.streamed(ar, big) ? 2e-4 : 1e-4);
    switched = c.per_byte(ar, big, false) == 1e-4 / big && !c.streamed(ar, big);
  }
  CHECK(switched);
  for (int i = 0; i < 10; ++i) {
    CHECK(!c.streamed(ar, big) && !c.streamed(bc, big));
    c.measured(ar, big, 1e-4);
  }
}

// A tie keeps the choice (only tried); small chunks follow it without
// counting; chunk sizes keep their own figures; fixed modes never change.
static void test_store_choice_ties_and_modes() {
  const StoreChoice::Kind ar = StoreChoice::kAllreduce, bc = StoreChoice::kBroadcast;
  const int64_t big = StoreChoice::kMinMeasuredBytes;
  StoreChoice c = taught(1e-4, 0.95e-4);
  int run = 0, runs = 0;
  for (int i = 0; i < 2 * StoreChoice::kExploreMax; ++i) {
    const bool s = c.streamed(ar, big);
    if (s) ++run;
    if (!s && run) {
      CHECK(run == StoreChoice::kWindow);
      ++runs;
      run = 0;
    }
    c.measured(ar, big, s ? 0.95e-4 : 1e-4);
  }
  CHECK(runs >= 2 && !c.streamed(ar, big) && c.per_byte(ar, big, true) == 0.95e-4 / big);
  for (int i = 0; i < 3 * StoreChoice::kExploreMax; ++i) {
    CHECK(!c.streamed(ar, big - 1));
    c.measured(ar, big - 1, 1.0);
  }
  CHECK(c.per_byte(ar, big, false) == 1e-4 / big);
  CHECK(!c.streamed(ar, 2 * big) && c.per_byte(ar, 2 * big, false) == 0);
  StoreChoice plain(StoreChoice::kCached), streamed(StoreChoice::kStreamed);
  for (int i = 0; i < 2 * StoreChoice::kExploreEvery; ++i) {
    CHECK(!plain.streamed(ar, big) && streamed.streamed(ar, big));
    CHECK(!plain.streamed(bc, big) && streamed.streamed(bc, big));
    plain.measured(ar, big, i % 2 ? 1.0 : 1e-6);
    streamed.measured(ar, big, i % 2 ? 1.0 : 1e-6);
  }
}

int main() {
  test_store_choice_trials();
  test_store_choice_ties_and_modes();
  std::printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
