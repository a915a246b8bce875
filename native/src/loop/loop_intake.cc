// The loop's intake: how it waits for work (pacing) and how newly enqueued
// entries join the ones in flight (response-cache lookup). See loop.h.
#include <algorithm>
#include <chrono>
#include <thread>

#include "base/poll_schedule.h"
#include "loop/loop.h"

namespace fuseopt {

// The waits here follow Note [Poll schedule].
bool Loop::wait_for_work() {
  std::deque<Entry> incoming;
  bool shutdown;
  {
    std::unique_lock<std::mutex> lock(inbox_.mu);
    auto has_news = [&] { return !inbox_.queue.empty() || inbox_.shutdown_requested; };
    inbox_.loop_waiting = true;
    // With process sets, a rank with nothing in flight may still be needed
    // by the others' rounds (their sets' rounds follow the global one): it
    // ticks fast while anybody is busy, not every kIdleTick.
    if (in_flight() == 0 && !joined_ && !(others_busy_ && subsets_ > 0)) {
      inbox_.wake.wait_for(lock, kIdleTick, has_news);
    } else if (no_progress_rounds_ > 0) {
      // Everyone has something in flight but nothing matched last round.
      auto backoff = kNoProgressWait * (1 << std::min(no_progress_rounds_, kNoProgressDoublings));
      inbox_.wake.wait_for(lock, backoff, has_news);
    }
    inbox_.loop_waiting = false;
    if (!inbox_.queue.empty() && config_.cycle_time_us > 0) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(config_.cycle_time_us));
      lock.lock();
    } else if (!inbox_.queue.empty() && (inbox_.calls - calls_taken_ > 1 || gap_caught_)) {
      // Adaptive batching: while tensors are still streaming in (a burst of
      // small gradients from separate calls), wait until the stream pauses
      // for kBurstQuiet, so that they are negotiated and fused together
      // instead of in many small rounds. A stream shows as several calls
      // queued since the last intake, or as the last gap catching one; a lone
      // call (one tensor, or one grouped batch) goes straight to negotiation.
      lock.unlock();
      using clock = std::chrono::steady_clock;
      auto now = clock::now();
      const auto deadline = now + kBurstMax;
      auto quiet_since = now;
      const uint64_t before = inbox_.enqueued.load(std::memory_order_relaxed);
      uint64_t seen = before;
      while (now < deadline && now - quiet_since < kBurstQuiet) {
        std::this_thread::yield();
        now = clock::now();
        const uint64_t count = inbox_.enqueued.load(std::memory_order_relaxed);
        if (count != seen) {
          seen = count;
          quiet_since = now;
        }
      }
      gap_caught_ = seen != before;
      lock.lock();
    }
    calls_taken_ = inbox_.calls;
    incoming.swap(inbox_.queue);
    shutdown = inbox_.shutdown_requested;
  }
  drain(&incoming);
  return shutdown;
}

void Loop::drain(std::deque<Entry>* incoming) {
  for (Entry& e : *incoming) {
    if (e.spec.collective == FUSEOPT_JOIN) {
      joined_ = true;
      join_handle_ = e.handle;
      join_round_ = round_number_;
      join_output_ = static_cast<int32_t*>(e.output);
      // Our own tensors still in flight go to the coordinator in full, so it
      // sees us as present (with our real spec) for them, not as joined.
      ProcessSet& all = global();
      for (auto& kv : all.pending) {
        if (kv.second.state == Entry::State::kCached) {
          kv.second.state = Entry::State::kNew;
          all.new_order.push_back(kv.first);
        }
      }
      continue;
    }
    auto set = sets_.find(e.process_set);
    if (set == sets_.end()) {  // removed between the enqueue and now
      handles_.complete(e.handle, Outcome{FUSEOPT_INVALID_ARG,
                                          "process set " + std::to_string(e.process_set) +
                                              " was removed before '" + e.spec.name + "' ran"});
      continue;
    }
    ProcessSet& ps = *set->second;
    int64_t slot = -1;
    switch (ps.cache->lookup(e.spec, ps.rank, &slot)) {
      case ResponseCache::Lookup::kHit:
        metrics_.add(metrics_.cache_hits, 1);
        e.state = Entry::State::kCached;
        e.slot = slot;
        break;
      case ResponseCache::Lookup::kStale:
        metrics_.add(metrics_.cache_misses, 1);
        ps.invalid_slots.insert(slot);
        e.state = Entry::State::kNew;
        ps.new_order.push_back(e.spec.name);
        break;
      case ResponseCache::Lookup::kMiss:
        metrics_.add(metrics_.cache_misses, 1);
        e.state = Entry::State::kNew;
        ps.new_order.push_back(e.spec.name);
        break;
    }
    std::string name = e.spec.name;
    ps.pending.emplace(name, std::move(e));
  }
}

}  // namespace fuseopt
