#include "loop/loop.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "base/log.h"
#include "base/poll_schedule.h"
#include "policy/bits.h"
#include "transport/mpi/polite_wait.h"

namespace fuseopt {
namespace {

// Round-vector flag bits. "No*" bits are OR-facts stored inverted.
constexpr uint64_t kNoNewRequests = 1 << 0;  // nobody has uncached requests
constexpr uint64_t kNoShutdown = 1 << 1;     // nobody asked to shut down
constexpr uint64_t kIdle = 1 << 2;           // nobody has anything in flight
constexpr uint64_t kJoined = 1 << 3;         // everybody has joined
constexpr uint64_t kNoneJoined = 1 << 4;     // nobody has joined
constexpr uint64_t kNothingPending = 1 << 5; // nobody has a tensor in flight (join aside)
constexpr uint64_t kNoStallCheck = 1 << 6;   // the coordinator needs no stall check

}  // namespace

std::vector<uint64_t> Loop::slot_words(ProcessSet& ps, uint64_t flags, bool joined) {
  const int64_t W = words_per_section();
  std::vector<uint64_t> words(1 + 2 * W, 0);
  for (int64_t i = 0; i < W; ++i) words[1 + W + i] = ~uint64_t(0);
  words[0] = flags;
  const double now = now_s();
  const double stall_limit = stall_limit_s();
  for (auto& kv : ps.pending) {
    Entry& e = kv.second;
    if (e.state != Entry::State::kCached) continue;
    if (stall_limit > 0 && now - e.enqueued_s >= stall_limit) {
      // Renegotiate in full so the coordinator can time the stall and name
      // the missing ranks (the request carries its age: Request::waited_s).
      ps.invalid_slots.insert(e.slot);
    } else {
      set_bit(words, 1, e.slot, true);
    }
  }
  if (joined) {
    // A joined rank is ready for everything, except what it cannot fake from
    // the cache: gathers (its row count is now 0) and broadcasts, which the
    // coordinator refuses while a rank has joined (coordinator.cc).
    for (int64_t slot : ps.cache->used_slots()) {
      const TensorSpec& s = ps.cache->get(slot).spec;
      if (s.first_dim_may_differ() || s.collective == FUSEOPT_BROADCAST ||
          s.collective == FUSEOPT_REDUCE)
        ps.invalid_slots.insert(slot);
      else
        set_bit(words, 1, slot, true);
    }
  }
  for (int64_t slot : ps.invalid_slots) {
    set_bit(words, 1 + W, slot, false);
    set_bit(words, 1, slot, false);
  }
  ps.invalid_slots.clear();
  return words;
}

std::vector<uint64_t> Loop::build_round_vector(bool shutdown) {
  ProcessSet& all = global();
  uint64_t flags = 0;
  if (all.new_order.empty()) flags |= kNoNewRequests;
  if (!shutdown) flags |= kNoShutdown;
  if (in_flight() == 0 && !joined_) flags |= kIdle;
  flags |= joined_ ? kJoined : kNoneJoined;
  if (all.pending.empty()) flags |= kNothingPending;
  if (!stall_check_due(all, now_s())) flags |= kNoStallCheck;
  std::vector<uint64_t> words = slot_words(all, flags, joined_);
  put_set_activity(&words);
  put_tuned_setting(&words);
  return words;
}

size_t Loop::in_flight() const {
  size_t n = 0;
  for (const auto& kv : sets_) n += kv.second->pending.size();
  return n;
}

bool Loop::stall_check_due(ProcessSet& ps, double now) {
  // Stalls are found in full negotiation, which steady-state rounds skip: the
  // coordinator asks for one, at most once a second, while a name has waited
  // long enough to warn about or to fail.
  if (!ps.coordinator || now < ps.next_stall_check_s) return false;
  const double limit = stall_limit_s();
  if (limit <= 0 || ps.coordinator->oldest_wait_s(now) < limit) return false;
  ps.next_stall_check_s = now + 1.0;
  return true;
}

double Loop::stall_limit_s() const {
  int64_t limit = config_.stall_check_s;
  if (config_.stall_shutdown_s > 0 && (limit <= 0 || config_.stall_shutdown_s < limit))
    limit = config_.stall_shutdown_s;
  return static_cast<double>(limit);
}

bool Loop::keep_waiting(double started_s) {
  if (inbox_.aborted) return false;
  const double waited = now_s() - started_s;
  if (config_.stall_shutdown_s > 0 && waited > config_.stall_shutdown_s) return false;
  return true;
}

void Loop::throw_if_aborted() {
  if (!inbox_.aborted) return;
  std::lock_guard<std::mutex> lock(inbox_.mu);
  throw Error(inbox_.stop_reason.status, inbox_.stop_reason.message);
}

void Loop::and_round(ProcessSet& ps, std::vector<uint64_t>* words) {
  RoundWait wait;
  wait.started_s = now_s();
  MPI_Request request = ps.control->post_and(words);
  await_round(ps, &request, words, &wait);
}

bool Loop::await_round(ProcessSet& ps, MPI_Request* request, std::vector<uint64_t>* words,
                       RoundWait* wait) {
  busy_what_ = ps.id == 0 ? "negotiating" : "negotiating in a process set";
  busy_since_s_ = wait->started_s;
  try {
    return ps.control->await_and(request, words, [&](std::chrono::microseconds most) {
      return pause_round(ps, wait, most);
    });
  } catch (const Error& e) {
    if (e.status() != FUSEOPT_RANK_FAILED) throw;
    throw_if_aborted();
    throw Error(FUSEOPT_RANK_FAILED,
                "other ranks did not take part in negotiation for " +
                    std::to_string(config_.stall_shutdown_s) +
                    " s (FUSEOPT_STALL_SHUTDOWN_S); a rank has died or stalled");
  }
}

ControlPlane::Pause Loop::pause_round(ProcessSet& ps, RoundWait* wait,
                                      std::chrono::microseconds most) {
  if (!wait->warned && config_.stall_check_s > 0 &&
      now_s() - wait->started_s > config_.stall_check_s) {
    wait->warned = true;
    warn_slow_round(ps);
  }
  if (!keep_waiting(wait->started_s)) return ControlPlane::Pause::kAbandon;
  const auto now = std::chrono::steady_clock::now();
  if (ps.id == 0 && now >= hand_over_at_) return ControlPlane::Pause::kHandOver;
  // See Note [Poll schedule]: hurried pauses, and pausing on the inbox.
  if (wait->hurry.at(now)) most = std::min(most, kRoundHurriedPause);
  LoopTimerSlack::sleep_ahead();  // before the lock: system calls
  std::unique_lock<std::mutex> lock(inbox_.mu);
  // Published side work (a framework thread's agreed reduction, Note [Side
  // work]) ends the pause: the round's polls advance it.
  auto news = [&] {
    return inbox_.queue.size() != wait->seen || inbox_.shutdown_requested || side_work_pending();
  };
  ++inbox_.round_waiters;
  ++inbox_.round_pausers;
  const bool woken = inbox_.wake.wait_for(lock, most, news);
  --inbox_.round_pausers;
  --inbox_.round_waiters;
  wait->seen = inbox_.queue.size();
  return woken ? ControlPlane::Pause::kWoken : ControlPlane::Pause::kTimedOut;
}

void Loop::warn_slow_round(ProcessSet& ps) {
  metrics_.add(metrics_.stalls, 1);
  std::vector<std::string> names;
  for (auto& kv : ps.pending) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  FUSEOPT_LOG(kWarning, "waited " << config_.stall_check_s << " s for other ranks to "
                                  << "negotiate" << (ps.id ? " in process set " : "")
                                  << (ps.id ? std::to_string(ps.id) : std::string())
                                  << "; in flight here: "
                                  << (names.empty() ? "nothing" : join_names(names, 10)));
}

Loop::Turn Loop::run_round(bool shutdown) {
  throw_if_aborted();
  posted_.words = build_round_vector(shutdown);
  posted_.shutdown = shutdown;
  posted_.wait = RoundWait();
  posted_.wait.started_s = now_s();
  if (!(posted_.words[0] & kIdle)) timeline_.cycle(posted_.wait.started_s);
  posted_.request = global().control->post_and(&posted_.words);
  posted_.active = true;
  return finish_round();
}

Loop::Turn Loop::finish_round() {
  if (!await_round(global(), &posted_.request, &posted_.words, &posted_.wait))
    return Turn::kHandedOver;
  posted_.active = false;
  const std::vector<uint64_t> words = std::move(posted_.words);
  const double started = posted_.wait.started_s;
  ++round_number_;
  const uint64_t flags = words[0];
  others_busy_ = !(flags & kIdle);
  if (!(flags & kNoShutdown)) {
    stop_reason_ = shutdown_reason(posted_.shutdown);
    return Turn::kShutDown;
  }
  apply_tuned_setting(words);

  // When every rank has joined, nobody has a real tensor behind a cached
  // slot (joining demotes them to full requests): skip the stand-in work.
  const bool all_joined = flags & kJoined;
  const bool joined_anywhere = !(flags & kNoneJoined);
  const bool full = !(flags & kNoNewRequests) || !(flags & kNoStallCheck) ||
                    (joined_anywhere && !(flags & kIdle));
  std::vector<Work> work = collect_work(global(), words, full, all_joined);
  bool progress = !work.empty() || !(flags & kNoNewRequests);
  const std::vector<int32_t> active = active_sets(words);
  change_sets(work);
  const double executing = now_s();
  metrics_.add(metrics_.rounds, 1);
  metrics_.add(metrics_.negotiation_ns, static_cast<int64_t>((executing - started) * 1e9));
  const int64_t bytes_before = metrics_.bytes.load(std::memory_order_relaxed);
  execute(global(), work);
  if (!work.empty()) tune(metrics_.bytes.load(std::memory_order_relaxed) - bytes_before, started,
                          now_s());
  // Join completes once every rank has joined and no tensor is in flight
  // anywhere (a rank may have enqueued one just before joining).
  if ((flags & kJoined) && (flags & kNothingPending)) {
    complete_join();
    progress = true;
  }
  // Ascending ids on every rank: members of overlapping sets meet in the
  // same order. A set removed by this round's work is gone everywhere.
  for (int32_t id : active) {
    auto it = sets_.find(id);
    if (it == sets_.end()) continue;
    set_round(*it->second);
    progress = true;
  }
  no_progress_rounds_ = progress ? 0 : no_progress_rounds_ + 1;
  return Turn::kMore;
}

void Loop::set_round(ProcessSet& ps) {
  uint64_t flags = 0;
  if (ps.new_order.empty()) flags |= kNoNewRequests;
  if (!stall_check_due(ps, now_s())) flags |= kNoStallCheck;
  std::vector<uint64_t> words = slot_words(ps, flags, false);
  and_round(ps, &words);
  const bool full = !(words[0] & kNoNewRequests) || !(words[0] & kNoStallCheck);
  std::vector<Work> work = collect_work(ps, words, full, false);
  execute(ps, work);
}

std::vector<Work> Loop::collect_work(ProcessSet& ps, const std::vector<uint64_t>& words,
                                     bool full, bool all_joined) {
  const int64_t W = words_per_section();
  std::vector<Work> work;
  ResponseCache& cache = *ps.cache;
  for (int64_t slot : cache.used_slots())
    if (!bit(words, 1 + W, slot)) cache.erase(slot);
  for (int64_t slot : cache.used_slots()) {
    if (!bit(words, 1, slot) || all_joined) continue;
    cache.touch(slot);
    const Response& r = cache.get(slot);
    work.push_back(Work{r, own_entry(ps, r)});
  }
  if (full) {
    for (Response& r : negotiate_full(ps)) {
      if (is_cacheable(r)) cache.put(r);
      Entry* e = own_entry(ps, r);
      work.push_back(Work{std::move(r), e});
    }
  }
  // Entries announced by a slot that has since been evicted start over.
  for (auto& kv : ps.pending) {
    Entry& e = kv.second;
    if (e.state == Entry::State::kCached && !cache.holds(e.slot, e.spec.name)) {
      bool running = false;
      for (const Work& w : work) running = running || w.entry == &e;
      if (!running) {
        e.state = Entry::State::kNew;
        ps.new_order.push_back(e.spec.name);
      }
    }
  }
  return work;
}

void Loop::execute(ProcessSet& ps, std::vector<Work>& work) {
  busy_what_ = "running collectives";
  busy_since_s_ = now_s();
  ps.executor->run(work);
  throw_if_aborted();  // the buffers of aborted handles may be gone
  finish(ps, work);
  busy_since_s_ = 0;
  // A tensor stalled past FUSEOPT_STALL_SHUTDOWN_S stops the runtime on every
  // rank (all received this response), not only on the ranks that submitted it.
  const Work* stalled = nullptr;
  for (const Work& w : work) {
    if (w.response.error != FUSEOPT_RANK_FAILED) continue;
    if (!stalled) stalled = &w;
    stalled_here_ = stalled_here_ || w.entry == nullptr;  // this rank never submitted it
  }
  if (stalled) throw Error(FUSEOPT_RANK_FAILED, stalled->response.error_message);
}

void Loop::complete_join() {
  const int last = last_to_join();
  if (join_output_) *join_output_ = last;
  join_output_ = nullptr;
  if (join_handle_) handles_.complete(join_handle_, Outcome());
  joined_ = false;
  join_handle_ = 0;
}

int Loop::last_to_join() {
  // Among ranks that joined in the same round the highest wins, as in
  // Horovod, whose coordinator counts ranks in ascending order.
  const std::vector<int64_t> rounds = global().control->allgather_value(join_round_);
  int last = 0;
  for (int r = 1; r < static_cast<int>(rounds.size()); ++r)
    if (rounds[r] >= rounds[last]) last = r;
  return last;
}

Entry* Loop::own_entry(ProcessSet& ps, const Response& r) {
  // Counted as joined for this name: take part with a stand-in even if a
  // same-named tensor of ours is pending (it will be negotiated on its own).
  for (int32_t j : r.joined)
    if (j == rank_) return nullptr;
  return ps.pending_entry(r.spec.name);
}

void Loop::finish(ProcessSet& ps, std::vector<Work>& work) {
  std::vector<std::string> done;
  for (const Work& w : work)
    if (w.entry) done.push_back(w.entry->spec.name);
  for (const std::string& name : done) ps.pending.erase(name);
}

}  // namespace fuseopt
