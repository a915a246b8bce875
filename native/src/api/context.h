// The runtime context: what fuseopt_init creates. It validates and queues
// requests from framework threads, owns the handle table, and runs the loop
// thread (loop.h) that negotiates and executes them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/metrics.h"
#include "base/timeline.h"
#include "exec/entry.h"
#include "exec/handle_table.h"
#include "loop/inbox.h"
#include "loop/process_set_table.h"

namespace fuseopt {

class Loop;

// fuseopt_cancel_init: what a waiting or later fuseopt_init fails with.
void cancel_init(const Outcome& reason);

class Context {
 public:
  explicit Context(const fuseopt_config_t& config);  // throws Error
  ~Context();

  // Starts the loop thread, which starts MPI, and waits until every rank has
  // (FUSEOPT_INIT_TIMEOUT_S, fuseopt_cancel_init). Throws Error; after a
  // timeout or a cancel, abandoned() is true: the loop thread may still be
  // blocked in MPI with this context's members, so the context must leak.
  void start();
  bool abandoned() const { return abandoned_; }
  // A framework thread received a failure: see Inbox::error_delivered.
  void note_error_delivered();

  void shutdown();
  // Fails everything now and abandons the loop thread (fuseopt_abort).
  void abort(const Outcome& reason);
  const fuseopt_comm_info_t& comm_info() const { return info_; }
  // Queues count requests, all or none (throws Error), one handle each.
  // announce: wake the loop thread if it waits; false when the caller waits
  // on the handles next (fuseopt_enqueue_for_wait).
  void enqueue(const fuseopt_request_t* requests, int64_t count, int64_t* handles,
               bool announce = true);
  HandleTable& handles() { return handles_; }
  // Waits for handles, running rounds on this thread while the loop thread
  // is between rounds (Note [Turns], loop_turns.cc). timeout_ms < 0: none.
  Outcome wait(int64_t handle, int64_t timeout_ms, OwnedOutput* out);
  Outcome wait_all(const int64_t* handles, int64_t count, int64_t timeout_ms);
  const ProcessSetTable& process_sets() const { return process_sets_; }
  // Loop::agreed_allreduce, unless the context is shutting down (then throws
  // Error(SHUT_DOWN)); the loop outlives the call as it outlives a helper.
  bool agreed_allreduce(int32_t set, double* wire, int64_t words, double check);
  const Metrics& metrics() const { return metrics_; }
  Timeline& timeline() { return timeline_; }

 private:
  Entry validate(const fuseopt_request_t& request);
  Entry validate_barrier_or_join(const fuseopt_request_t& request, Entry entry);
  void take_root(const fuseopt_request_t& request, const ProcessSetTable::Set& set,
                 Entry* entry) const;
  // process_set_request.cc: the request's process set (members only), and
  // the requests that add or remove one.
  void take_process_set(const fuseopt_request_t& request, Entry* entry,
                        ProcessSetTable::Set* set) const;
  Entry validate_set_change(const fuseopt_request_t& request);
  // device_request.cc: the request's device fields (absent from older, shorter
  // structs), and the i-th request of an array at the caller's struct size.
  void take_device(const fuseopt_request_t& request, Entry* entry) const;
  static fuseopt_request_t request_at(const fuseopt_request_t* requests, int64_t i);
  // The time left of timeout_ms after helping (Loop::help) with handles.
  int64_t help(const int64_t* handles, int64_t count, int64_t timeout_ms);
  void watch();  // watchdog thread: aborts when a round outlives the peer timeout
  void stop_watchdog();

  fuseopt_config_t config_;
  fuseopt_comm_info_t info_{};
  HandleTable handles_;
  Metrics metrics_;
  Timeline timeline_;  // before loop_: the loop thread writes to it
  ProcessSetTable process_sets_;  // before loop_, likewise
  Inbox inbox_;
  std::unique_ptr<Loop> loop_;
  std::promise<fuseopt_comm_info_t> started_;  // set by the loop thread, maybe late
  bool abandoned_ = false;
  std::thread thread_;
  std::atomic<bool> loop_exited_{false};
  std::thread watchdog_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::mutex shutdown_mu_;  // shutdown may be called from several threads
  // Framework threads inside loop_->help, and whether shutdown has begun: the
  // loop is destroyed only when none is left (seq_cst: a helper counts itself
  // before it reads closing_, shutdown sets closing_ before it reads helpers_).
  std::atomic<int> helpers_{0};
  std::atomic<bool> closing_{false};
  // Names of unnamed requests: "<collective>.noname.<n>" (global set) or
  // "<collective>.noname.set<id>.<n>"; advance only for accepted requests.
  std::string auto_name(int32_t set, int collective, bool advance);
  uint64_t auto_name_counter_[FUSEOPT_COLLECTIVE_COUNT] = {};
  std::map<std::pair<int32_t, int>, uint64_t> set_name_counters_;
};

void default_config(fuseopt_config_t* config);
void validate_config(const fuseopt_config_t& config);  // throws Error

}  // namespace fuseopt
