// Turns: who runs the next round, the loop thread or a framework thread that
// waits on a handle. See Note [Turns].
#include "base/poll_schedule.h"
#include "loop/loop.h"

namespace fuseopt {

// Note [Turns]
// ~~~~~~~~~~~~
// A small op that a framework thread waits on at once (a SyncBatchNorm
// statistics allreduce, a metric, a barrier) cost two thread wake-ups per
// rank when only the loop thread ran rounds: the enqueue woke the loop
// thread, and the end of its round woke the waiting thread (25 us against
// MPI's 1.7 us here, docs/benchmarks.md). Rounds are lock-step among ranks,
// but nothing ties them to one thread: whoever holds rounds_mu_ runs the next
// one, so MPI is still called by one thread at a time (MPI_THREAD_SERIALIZED;
// the mutex orders the calls). A framework thread about to block on a handle
// takes the rounds if the loop thread is between rounds, and runs them itself
// until its handle completes or a round makes no progress (the other ranks
// are not there yet); then it hands the rounds back and blocks as before. A
// round is a wait for the other ranks that no thread can cut short, so at the
// deadline of the framework thread's wait (the Python binding waits in slices
// of 100 ms, to run signal handlers) it leaves a posted round to the loop
// thread (posted_), which completes it.
// The loop thread, on its next turn, skips a round that a framework thread has
// already run for it (nothing new queued, nothing in flight): an extra round
// here would be one the other ranks never post.
//
// A framework thread does not help:
//  - on a poll (a wait of 0 ms);
//  - with a cycle time (FUSEOPT_CYCLE_TIME_MS asks for fewer, fuller rounds);
//  - once the process has submitted device memory: a device backend makes
//    its device current on the thread that runs its collectives
//    (cudaSetDevice), which must not be the framework's.
// A failure, or an agreed shutdown, in a framework thread's round is handed to
// the loop thread, which stops the runtime as if its own round had ended so.

bool Loop::round() {
  wait_for_work(next_wait_);
  std::lock_guard<std::mutex> hold(rounds_mu_);
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.turn_handed_back = false;
  }
  if (helper_error_) std::rethrow_exception(helper_error_);
  if (helper_saw_shutdown_) return false;
  Turn turn = Turn::kMore;
  try {
    if (posted_.active) {
      turn = finish_round();  // a framework thread's, handed over
    } else {
      const bool shutdown = take_queue();
      const bool helped = round_number_ != next_wait_.round_number;
      if (shutdown || !helped || in_flight() > 0 || joined_) turn = run_round(shutdown);
    }
  } catch (...) {
    closed_ = true;
    throw;
  }
  closed_ = turn == Turn::kShutDown;
  next_wait_ = plan_wait();
  return !closed_;
}

void Loop::help(const std::function<bool()>& done,
                std::chrono::steady_clock::time_point deadline) {
  if (done()) return;  // most waits on a grouped op's handles after the first
  std::unique_lock<std::mutex> hold(rounds_mu_, std::try_to_lock);
  // config_ under the rounds' mutex: autotune changes the cycle time in a round.
  if (!hold.owns_lock() || closed_ || device_work_seen_ || config_.cycle_time_us > 0) return;
  FrameworkBlocked blocked;
  LoopTimerSlack slack;
  hand_over_at_ = deadline;
  bool ended = false;
  try {
    while (!done()) {
      const Turn turn = posted_.active ? finish_round() : run_round(take_queue());
      if (turn == Turn::kShutDown) helper_saw_shutdown_ = ended = true;
      if (turn != Turn::kMore || no_progress_rounds_ > 0 || device_work_seen_) break;
    }
  } catch (...) {
    helper_error_ = std::current_exception();
    ended = true;
  }
  hand_over_at_ = std::chrono::steady_clock::time_point::max();
  closed_ = ended;
  // The loop thread may be asleep on a plan made before these rounds (an
  // idle tick): wake it if anything is left for it to do.
  const bool hand_back = ended || posted_.active || in_flight() > 0 || joined_ || !done();
  hold.unlock();
  if (!hand_back) return;
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.turn_handed_back = true;
  }
  inbox_.wake.notify_all();
}

}  // namespace fuseopt
