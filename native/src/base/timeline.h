// The timeline: a Chrome-trace / Perfetto JSON file of what the loop thread did
// to each tensor (negotiation, queueing, fusion-buffer copies, the collective).
//
// The loop thread only appends small event records under a mutex; a writer
// thread formats and writes them every kFlushInterval. After every flush the
// file ends in "]" and is valid JSON: the next flush overwrites that closing
// bracket. A process killed mid-write can leave one torn batch at the end,
// which `fuseopt timeline summarize` trims.
//
// Rows: every tensor name gets its own trace "process" (pid), so a viewer shows
// one row per tensor, as Horovod's timeline does; pid 0 holds cycle markers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fuseopt {

class Timeline {
 public:
  ~Timeline() { stop(); }

  // Opens path (truncating it) and starts the writer. Throws Error if the file
  // cannot be written or a timeline is already running.
  void start(const std::string& path, bool mark_cycles);
  // Flushes and closes. A no-op when not running. Any thread.
  void stop();
  bool on() const { return on_.load(std::memory_order_relaxed); }
  bool marks_cycles() const { return on() && mark_cycles_.load(std::memory_order_relaxed); }

  // A complete event (phase X) for one tensor, times from now_s(). args is a
  // JSON object body without braces, e.g. "\"bytes\": 4096", or empty.
  void span(const std::string& tensor, const char* name, double begin_s, double end_s,
            std::string args = "");
  // An instant event (phase i) on the tensor's row.
  void instant(const std::string& tensor, const char* name, double at_s, std::string args = "");
  // An instant event on the cycle row.
  void cycle(double at_s);

 private:
  struct Event {
    std::string tensor;  // empty: the cycle row
    const char* name;
    char phase;
    double begin_s, end_s;
    std::string args;
  };
  void push(Event e);
  void write_loop();
  void write(const std::vector<Event>& events);
  int row(const std::string& tensor, std::string* out);

  // Read by the loop thread before every event, without the mutex: a stale
  // read only drops or adds an event around start/stop.
  std::atomic<bool> on_{false};
  std::atomic<bool> mark_cycles_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Event> queue_;
  bool stopping_ = false;
  std::thread writer_;
  std::mutex stop_mu_;  // serialises start/stop callers

  // Writer thread only.
  FILE* file_ = nullptr;
  bool first_ = true;
  double origin_s_ = 0;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace fuseopt
