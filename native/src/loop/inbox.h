// The inbox: what the framework threads (Context, context.h) and the loop
// thread (Loop, loop.h) share. A header of its own so that the context, which
// owns the loop, and the loop need not include each other.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "base/error.h"
#include "exec/entry.h"

namespace fuseopt {

// What the framework threads and the loop thread share, under one mutex.
struct Inbox {
  std::mutex mu;
  std::condition_variable wake;
  std::deque<Entry> queue;
  std::atomic<uint64_t> enqueued{0};         // count ever queued; read without mu
  bool shutdown_requested = false;
  int round_waiters = 0;                      // threads that run rounds, waiting on wake;
                                              // enqueue signals only if any
  int round_pausers = 0;                      // of those, the ones inside a round
                                              // (pause_round): published side work
                                              // signals only if any
  bool stopped = false;                       // the loop thread has exited
  bool unannounced = false;                   // queued without waking the loop thread
  bool turn_handed_back = false;              // a framework thread ran rounds: see Note [Turns]
  Outcome stop_reason;                        // why enqueue now fails
  std::atomic<bool> aborted{false};           // see Context::abort; read without mu
  // A framework thread was told that the runtime stopped (an enqueue or a
  // wait failed since): it is not stuck outside fuseopt.
  bool error_delivered = false;
};

}  // namespace fuseopt
