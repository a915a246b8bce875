// Waiting without holding a core: poll a condition with pauses that grow.
//
// MPICH's blocking calls busy-poll until the slowest rank arrives. When ranks
// share cores with training threads (two ranks on two cores here; any job
// whose framework uses every core), a loop thread spinning in a collective
// takes the CPU that its own rank's backward pass, or the late rank's loop
// thread, needs: measured here with the PyTorch MLP, a 45 KB bucket took up to
// 36 ms. Data-plane collectives are therefore posted non-blocking and polled:
// a short spin (the peer is usually right behind), then yields, then sleeps
// that grow, so a long wait costs next to no CPU. Device streams are polled
// the same way, so that an asynchronous error of the device library (a dead
// peer) can end a wait that would otherwise never return.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace fuseopt {

// Framework threads of this process now blocked waiting for results. While
// one is, this rank's compute has stopped until we deliver, and a wait that
// sleeps adds its oversleep to the step: the sleeps grow to 500 us. Waits
// then keep their sleeps at the shortest length for up to kHurriedWait.
// Sleeping, not yielding: a yield with the rank's compute thread runnable
// on the same core acts like a spin, and with many shared-memory barriers
// per bucket (1 MiB chunks, since dropped) the loop thread burnt 35 ms of CPU
// per MLP step against the peer's compute (step 53 -> 79 ms).
class FrameworkBlocked {
 public:
  FrameworkBlocked() { count().fetch_add(1, std::memory_order_relaxed); }
  ~FrameworkBlocked() { count().fetch_sub(1, std::memory_order_relaxed); }
  FrameworkBlocked(const FrameworkBlocked&) = delete;
  FrameworkBlocked& operator=(const FrameworkBlocked&) = delete;
  static bool now() { return count().load(std::memory_order_relaxed) > 0; }

 private:
  static std::atomic<int>& count() {
    static std::atomic<int> blocked{0};
    return blocked;
  }
};
constexpr std::chrono::microseconds kHurriedWait(5000);

// One wait's view of FrameworkBlocked: whether its sleeps stay short at time
// t (the window starts when this wait first sees a blocked framework).
class Hurry {
 public:
  bool at(std::chrono::steady_clock::time_point t) {
    if (!FrameworkBlocked::now()) return false;
    since_ = std::min(since_, t);
    return t - since_ < kHurriedWait;
  }

 private:
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::time_point::max();
};

// Spin until `spin` has passed, yield until `yield`, then sleep, starting at
// `first_sleep` and doubling up to `max_sleep`.
struct PollSchedule {
  std::chrono::microseconds spin, yield, first_sleep, max_sleep;
};

// MPI collectives: peers usually arrive within microseconds.
constexpr PollSchedule kCollectivePoll{std::chrono::microseconds(20),
                                       std::chrono::microseconds(200),
                                       std::chrono::microseconds(10),
                                       std::chrono::microseconds(500)};
// Device streams: kernels take a while; sleep at once, briefly (latency vs. CPU).
constexpr PollSchedule kStreamPoll{std::chrono::microseconds(0), std::chrono::microseconds(0),
                                   std::chrono::microseconds(1), std::chrono::microseconds(64)};

// Calls done() until it returns true (done may throw to give up).
template <typename Done>
void poll_until(Done done, const PollSchedule& schedule) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto sleep = schedule.first_sleep;
  Hurry hurry;
  while (!done()) {
    const auto now = clock::now();
    const auto waited = now - start;
    if (waited < schedule.spin) continue;
    if (waited < schedule.yield) {
      std::this_thread::yield();
      continue;
    }
    if (hurry.at(now)) {
      std::this_thread::sleep_for(schedule.first_sleep);
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(schedule.max_sleep, sleep * 2);
  }
}

// Completes an MPI request on kCollectivePoll.
void wait_politely(MPI_Request* request, const char* what);

}  // namespace fuseopt
