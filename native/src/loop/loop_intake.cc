// The loop's intake: how it waits for work (pacing) and how newly enqueued
// entries join the ones in flight (response-cache lookup). See loop.h.
#include <algorithm>
#include <chrono>
#include <thread>

#include "base/poll_schedule.h"
#include "loop/loop.h"

namespace fuseopt {

// The waits here follow Note [Poll schedule]. The loop thread does not hold
// the rounds here (Note [Turns]): it reads only the plan made while it did.
void Loop::wait_for_work(const WaitPlan& plan) {
  std::unique_lock<std::mutex> lock(inbox_.mu);
  auto has_news = [&] {
    return !inbox_.queue.empty() || inbox_.shutdown_requested || inbox_.turn_handed_back;
  };
  ++inbox_.round_waiters;
  if (plan.kind == WaitPlan::kIdle) {
    inbox_.wake.wait_for(lock, kIdleTick, has_news);
  } else if (plan.kind == WaitPlan::kBackoff) {
    inbox_.wake.wait_for(lock, plan.backoff, has_news);
  }
  --inbox_.round_waiters;
  if (!inbox_.queue.empty() && plan.cycle_time_us > 0) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(plan.cycle_time_us));
  } else if (!inbox_.queue.empty() && !FrameworkBlocked::now()) {
    // See Note [Burst intake]: nobody waits for results yet, so more
    // enqueues are probably coming; take them all in one round.
    lock.unlock();
    take_burst();
  }
}

Loop::WaitPlan Loop::plan_wait() const {
  WaitPlan plan;
  plan.round_number = round_number_;
  plan.cycle_time_us = config_.cycle_time_us;
  // With process sets, a rank with nothing in flight may still be needed
  // by the others' rounds (their sets' rounds follow the global one): it
  // ticks fast while anybody is busy, not every kIdleTick.
  if (in_flight() == 0 && !joined_ && !(others_busy_ && subsets_ > 0)) {
    plan.kind = WaitPlan::kIdle;
  } else if (no_progress_rounds_ > 0) {
    // Everyone has something in flight but nothing matched last round.
    plan.kind = WaitPlan::kBackoff;
    plan.backoff = kNoProgressWait * (1 << std::min(no_progress_rounds_, kNoProgressDoublings));
  }
  return plan;
}

bool Loop::take_queue() {
  std::deque<Entry> incoming;
  bool shutdown;
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    incoming.swap(inbox_.queue);
    inbox_.unannounced = false;
    shutdown = inbox_.shutdown_requested;
  }
  drain(&incoming);
  return shutdown;
}

// Note [Burst intake]
// ~~~~~~~~~~~~~~~~~~~
// Horovod-style code enqueues one tensor per call (allreduce_async_ for
// each gradient, then a wait for each). If the loop negotiated whatever had
// arrived at each wake-up, those 200 calls went out in about six rounds,
// each a negotiation plus a collective, with the loop thread taking CPU from
// the thread still enqueueing (2 ranks, 2 cores: 2.4 ms against 1.2 ms for
// one grouped call of the same tensors). So work queued while no framework
// thread is blocked on a handle is held back until one is (the caller has
// finished submitting and needs results: a lone op waits right after its
// enqueue, so it loses a few microseconds), or the stream pauses for
// kBurstQuiet (submissions between computations, such as gradient hooks),
// or kBurstMax has passed. The gap is polled with yields, not slept: a
// 20 us sleep takes several times that.
void Loop::take_burst() {
  using clock = std::chrono::steady_clock;
  auto now = clock::now();
  const auto deadline = now + kBurstMax;
  auto quiet_since = now;
  uint64_t seen = inbox_.enqueued.load(std::memory_order_relaxed);
  while (now < deadline && now - quiet_since < kBurstQuiet && !FrameworkBlocked::now()) {
    std::this_thread::yield();
    now = clock::now();
    const uint64_t count = inbox_.enqueued.load(std::memory_order_relaxed);
    if (count != seen) {
      seen = count;
      quiet_since = now;
    }
  }
}

void Loop::drain(std::deque<Entry>* incoming) {
  for (Entry& e : *incoming) {
    device_work_seen_ = device_work_seen_ || e.spec.device != FUSEOPT_DEVICE_HOST;
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
