// The poll schedule: how every wait in the core paces itself, as constants and
// as poll_until. See Note [Poll schedule]; the measurements behind it are in
// docs/design.md, "Pacing".
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace fuseopt {

// Seconds on the monotonic clock: what waits, stall checks and the timeline
// measure time with.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Note [Poll schedule]
// ~~~~~~~~~~~~~~~~~~~~
// No wait in the core blocks in a library call or sleeps on a fixed timer.
// Each polls: a short spin, because the other side (a peer rank, a kernel,
// the loop thread) is usually right behind and a sleep's wake-up costs more
// than the wait; then yields; then sleeps that grow, so that a long wait costs
// next to no CPU.
//
// Why not block: MPICH's blocking calls busy-poll until the slowest rank
// arrives. When ranks share cores with training threads (two ranks on two
// cores here; any job whose framework uses every core), a loop thread
// spinning in a collective takes the CPU that its own rank's backward pass,
// or the late rank's loop thread, needs: with the PyTorch MLP a 45 KB bucket
// took up to 36 ms. So negotiation rounds and data-plane collectives are
// posted non-blocking and polled. Device streams are polled the same way, so
// that an asynchronous error of the device library (a dead peer) can end a
// wait that would otherwise never return. Linux rounds short sleeps up by the
// timer slack (50 us by default), which would dominate the latency of polling
// a round: the loop thread sets its own to kLoopTimerSlackNs.
//
// The waits and their schedules (constants below):
//  - MPI collectives (wait_politely): kCollectivePoll. Peers usually arrive
//    within microseconds.
//  - Device streams (a device backend's synchronize): kStreamPoll. Kernels
//    take a while: sleep at once, briefly (latency against CPU).
//  - Negotiation rounds (ControlPlane::and_round): kRoundSpin, then pauses of
//    kRoundFirstPause doubling to kRoundMaxPause, or to kRoundMaxPauseLong
//    once kRoundLongWait has passed without local activity. The pause is the
//    loop thread waiting on its inbox, not a timer: a local enqueue means the
//    other ranks are probably enqueueing too, so it ends the pause and the
//    schedule starts over.
//  - The loop's intake (Loop::wait_for_work): a rank with nothing in flight
//    posts no round until an enqueue or kIdleTick wakes it (it must still
//    answer a peer's round, say a shutdown), so an idle job costs next to no
//    CPU; a rank with work in flight posts at once. When every rank has work
//    in flight but the last round matched nothing, rounds would spin:
//    progress needs a new enqueue somewhere, so the rank waits for its own,
//    kNoProgressWait doubled per such round, kNoProgressDoublings times at
//    most. Work queued while no framework thread waits for results is held
//    until one does, or the stream pauses for kBurstQuiet (kBurstMax at most):
//    Note [Burst intake] in loop_intake.cc.
//  - Handle waits (HandleTable::wait_done): a blocked waiter pays a futex
//    wake-up when its handle completes, tens of microseconds on a virtual
//    machine, and a small op often completes sooner: it yields for
//    kHandleWaitSpin before blocking.
//
// Hurry: while a framework thread is blocked waiting for results
// (FrameworkBlocked), its rank's compute has stopped until we deliver, and a
// wait that sleeps adds its oversleep to the step. The polls of collectives,
// streams and rounds then keep their sleeps at the shortest length (a
// schedule's first_sleep, kRoundHurriedPause) for up to kHurriedWait.
// Sleeping, not yielding: a yield with the rank's compute thread runnable on
// the same core acts like a spin, and with many shared-memory barriers per
// bucket (1 MiB chunks, since dropped) the loop thread burnt 35 ms of CPU per
// MLP step against the peer's compute (step 53 -> 79 ms).

// Spin until `spin` has passed, yield until `yield`, then sleep, starting at
// `first_sleep` and doubling up to `max_sleep`.
struct PollSchedule {
  std::chrono::microseconds spin, yield, first_sleep, max_sleep;
};

constexpr PollSchedule kCollectivePoll{std::chrono::microseconds(20),
                                       std::chrono::microseconds(200),
                                       std::chrono::microseconds(10),
                                       std::chrono::microseconds(500)};
// An MPI collective that moves `bytes` (MPICH's non-blocking alltoallv,
// allgatherv, reduce-scatter, broadcast) advances by a bounded piece per
// MPI_Test over shared memory, so sleeping between tests stretched a 32 MiB
// alltoall to 1.1 s (against 18 ms for the shared-memory allreduce of the
// same bytes). Its poll yields instead for as long as the bytes need at
// kBulkBytesPerUs, then sleeps as any wait does. 100 MB/s, a tenth of what
// shared memory moves here: while backward computes on the same cores the
// transfer gets a share of them, and at 1 GB/s a 32 MiB alltoall inside
// training ran out of its window and crawled (0.5 s) in sleeps. A yield
// gives the core to any thread that wants it, so a late peer costs little.
constexpr int64_t kBulkBytesPerUs = 100;

inline PollSchedule bulk_poll(int64_t bytes) {
  PollSchedule s = kCollectivePoll;
  s.yield = std::max(s.yield, std::chrono::microseconds(bytes / kBulkBytesPerUs));
  return s;
}

constexpr PollSchedule kStreamPoll{std::chrono::microseconds(0), std::chrono::microseconds(0),
                                   std::chrono::microseconds(1), std::chrono::microseconds(64)};

constexpr std::chrono::microseconds kRoundSpin(30);
constexpr std::chrono::microseconds kRoundFirstPause(5);
constexpr std::chrono::microseconds kRoundMaxPause(200);
constexpr std::chrono::microseconds kRoundMaxPauseLong(2000);
constexpr std::chrono::milliseconds kRoundLongWait(20);
constexpr std::chrono::microseconds kRoundHurriedPause(10);

constexpr std::chrono::milliseconds kIdleTick(50);
constexpr std::chrono::microseconds kNoProgressWait(10);
constexpr int kNoProgressDoublings = 7;
constexpr std::chrono::microseconds kBurstQuiet(20);
constexpr std::chrono::microseconds kBurstMax(1000);

constexpr std::chrono::microseconds kHandleWaitSpin(50);

constexpr std::chrono::microseconds kHurriedWait(5000);
constexpr unsigned long kLoopTimerSlackNs = 1000;

// Linux rounds a short sleep up by the thread's timer slack, 50 us by default:
// a framework thread that polls on the core's behalf (a helping thread's
// rounds, an agreed reduction) takes the loop thread's slack while it does,
// and gets its own back afterwards. Only once it first sleeps (sleep_ahead):
// the three system calls took about 1 us of every small blocking allreduce
// (2 ranks, 4 KiB, 2026-12-06), which mostly ends without sleeping.
class LoopTimerSlack {
 public:
  LoopTimerSlack() : outer_(current()) { current() = this; }
  ~LoopTimerSlack() {
#ifdef __linux__
    if (saved_ >= 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_), 0, 0, 0);
#endif
    current() = outer_;
  }
  LoopTimerSlack(const LoopTimerSlack&) = delete;
  LoopTimerSlack& operator=(const LoopTimerSlack&) = delete;

  // Before any sleep or timed wait of the core: this thread's borrowed slack,
  // if it borrows one, now.
  static void sleep_ahead() {
    LoopTimerSlack* s = current();
    if (s == nullptr || s->taken_) return;
    s->taken_ = true;
#ifdef __linux__
    const int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old >= 0 && static_cast<unsigned long>(old) != kLoopTimerSlackNs) {
      s->saved_ = old;
      prctl(PR_SET_TIMERSLACK, kLoopTimerSlackNs, 0, 0, 0);
    }
#endif
  }

 private:
  static LoopTimerSlack*& current() {
    thread_local LoopTimerSlack* borrowing = nullptr;
    return borrowing;
  }
  LoopTimerSlack* outer_;
  bool taken_ = false;
  long saved_ = -1;
};

// Framework threads of this process now blocked waiting for results.
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
    LoopTimerSlack::sleep_ahead();
    if (hurry.at(now)) {
      std::this_thread::sleep_for(schedule.first_sleep);
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(schedule.max_sleep, sleep * 2);
  }
}

}  // namespace fuseopt
