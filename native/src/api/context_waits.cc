// Waits on handles, where a framework thread may run the rounds itself
// (Note [Turns], loop/loop_turns.cc) instead of sleeping until the loop thread
// has run them.
#include <algorithm>
#include <chrono>
#include <mutex>

#include "api/context.h"
#include "loop/loop.h"

namespace fuseopt {

Outcome Context::wait(int64_t handle, int64_t timeout_ms, OwnedOutput* out) {
  return handles_.wait(handle, help(&handle, 1, timeout_ms), out);
}

Outcome Context::wait_all(const int64_t* handles, int64_t count, int64_t timeout_ms) {
  return handles_.wait_all(handles, count, help(handles, count, timeout_ms));
}

int64_t Context::help(const int64_t* handles, int64_t count, int64_t timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = timeout_ms < 0 ? clock::time_point::max()
                                       : clock::now() + std::chrono::milliseconds(timeout_ms);
  auto done = [&] {
    try {
      for (int64_t i = 0; i < count; ++i)
        if (!handles_.poll(handles[i])) return false;
    } catch (const Error&) {  // an unknown handle: the wait itself says so
    }
    return true;
  };
  if (done()) return timeout_ms;
  helpers_.fetch_add(1);
  if (timeout_ms != 0 && !closing_.load() && loop_) loop_->help(done, deadline);
  helpers_.fetch_sub(1);
  // Work queued by fuseopt_enqueue_for_wait that this thread did not finish
  // itself: the loop thread must now hear of it.
  bool wake = false;
  if (!done()) {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    wake = inbox_.unannounced;
    inbox_.unannounced = false;
  }
  if (wake) inbox_.wake.notify_all();
  if (timeout_ms < 0) return timeout_ms;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
  return std::max<int64_t>(0, left.count());
}

bool Context::agreed_allreduce(int32_t set, double* wire, int64_t words, double check) {
  helpers_.fetch_add(1);
  struct Leave {
    std::atomic<int>& helpers;
    ~Leave() { helpers.fetch_sub(1); }
  } leave{helpers_};
  if (closing_.load() || !loop_) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt has shut down");
  return loop_->agreed_allreduce(set, wire, words, check);
}

}  // namespace fuseopt
