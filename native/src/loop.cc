#include "loop.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "log.h"
#include "polite_wait.h"

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

bool bit(const std::vector<uint64_t>& w, int64_t base, int64_t i) {
  return (w[base + i / 64] >> (i % 64)) & 1;
}
void set_bit(std::vector<uint64_t>& w, int64_t base, int64_t i, bool on) {
  uint64_t m = uint64_t(1) << (i % 64);
  if (on) w[base + i / 64] |= m;
  else w[base + i / 64] &= ~m;
}

}  // namespace

void Loop::run(std::promise<fuseopt_comm_info_t>* started) {
#ifdef __linux__
  // Linux rounds short sleeps up by the timer slack (50 us by default), which
  // would dominate the latency of polling a negotiation round.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  try {
    start();
  } catch (...) {
    started->set_exception(std::current_exception());
    return;
  }
  started->set_value(world_->info());
  Outcome reason;
  bool clean = true;
  try {
    while (round()) {
    }
    reason = stop_reason_;
  } catch (const Error& e) {
    reason = Outcome{e.status(), e.what()};
    clean = false;
  } catch (const std::exception& e) {
    reason = Outcome{FUSEOPT_INTERNAL, e.what()};
    clean = false;
  }
  if (!clean && !inbox_.aborted) FUSEOPT_LOG(kError, "runtime stopped: " << reason.message);
  stop(reason);
  if (stalled_here_) end_process_if_stuck(reason);
  // After a failure an MPI request may still be outstanding, and a peer may be
  // gone: leave the communicators and the shared-memory window (whose free is
  // collective) to process exit rather than free them under it, and skip
  // MPI_Finalize, which would wait at exit for a peer that may never come
  // (a rank ended by a stall shutdown, say).
  if (!clean) {
    MpiWorld::abandon();
    backend_.release();
    world_.release();
    executor_.release();  // device communicators, too, may wait for a lost peer
  }
}

void Loop::start() {
  busy_what_ = "starting MPI";
  world_.reset(new MpiWorld(config_.emulated_local_size));
  busy_what_ = "agreeing on the configuration with rank 0";
  rank_ = world_->info().rank;
  size_ = world_->info().size;
  set_log_rank(rank_);
  control_.reset(new ControlPlane(*world_));
  // Every rank must plan identical buckets and size identical round vectors,
  // so the coordinator's settings win; say so if they differed here.
  fuseopt_config_t agreed = config_;
  control_->broadcast_value(&agreed);
  bool differs = false;
  auto take = [&](int64_t& mine, int64_t theirs) {
    differs = differs || mine != theirs;
    mine = theirs;
  };
  take(config_.fusion_threshold_bytes, agreed.fusion_threshold_bytes);
  take(config_.cache_capacity, agreed.cache_capacity);
  take(config_.cycle_time_us, agreed.cycle_time_us);
  take(config_.stall_check_s, agreed.stall_check_s);
  take(config_.stall_shutdown_s, agreed.stall_shutdown_s);
  take(config_.shm_min_bytes, agreed.shm_min_bytes);
  take(config_.hierarchical_allreduce, agreed.hierarchical_allreduce);
  take(config_.autotune, agreed.autotune);
  take(config_.autotune_window_rounds, agreed.autotune_window_rounds);
  if (differs)
    FUSEOPT_LOG(kWarning, "configuration differs from rank 0; using rank 0's fusion threshold, "
                          "cycle time, cache capacity, stall timeouts, shared-memory size and "
                          "allreduce algorithm and autotune settings");
  backend_.reset(new MpiBackend(*world_, config_.shm_min_bytes, config_.hierarchical_allreduce));
  executor_.reset(new Executor(*backend_, handles_, metrics_, timeline_, rank_, size_));
  executor_->set_fusion_threshold(config_.fusion_threshold_bytes);
  executor_->enable_devices(*world_, config_.hierarchical_allreduce);
  cache_.reset(new ResponseCache(config_.cache_capacity));
  if (rank_ == 0) coordinator_.reset(new Coordinator(size_));
  start_autotune();
}

std::vector<uint64_t> Loop::build_round_vector(bool shutdown) {
  const int64_t W = words_per_section();
  std::vector<uint64_t> words(1 + 2 * W, 0);
  for (int64_t i = 0; i < W; ++i) words[1 + W + i] = ~uint64_t(0);
  uint64_t flags = 0;
  if (new_order_.empty()) flags |= kNoNewRequests;
  if (!shutdown) flags |= kNoShutdown;
  if (pending_.empty() && !joined_) flags |= kIdle;
  flags |= joined_ ? kJoined : kNoneJoined;
  if (pending_.empty()) flags |= kNothingPending;
  const double now = now_s();
  if (!stall_check_due(now)) flags |= kNoStallCheck;
  words[0] = flags;
  const double stall_limit = stall_limit_s();
  for (auto& kv : pending_) {
    Entry& e = kv.second;
    if (e.state != Entry::State::kCached) continue;
    if (stall_limit > 0 && now - e.enqueued_s >= stall_limit) {
      // Renegotiate in full so the coordinator can time the stall and name
      // the missing ranks (the request carries its age: Request::waited_s).
      invalid_slots_.insert(e.slot);
    } else {
      set_bit(words, 1, e.slot, true);
    }
  }
  if (joined_) {
    // A joined rank is ready for everything, except what it cannot fake from
    // the cache: gathers (its row count is now 0) and broadcasts it roots.
    for (int64_t slot : cache_->used_slots()) {
      const TensorSpec& s = cache_->get(slot).spec;
      if (s.first_dim_may_differ() || (s.collective == FUSEOPT_BROADCAST && s.root == rank_))
        invalid_slots_.insert(slot);
      else
        set_bit(words, 1, slot, true);
    }
  }
  for (int64_t slot : invalid_slots_) {
    set_bit(words, 1 + W, slot, false);
    set_bit(words, 1, slot, false);
  }
  invalid_slots_.clear();
  put_tuned_setting(&words);
  return words;
}

bool Loop::stall_check_due(double now) {
  // Stalls are found in full negotiation, which steady-state rounds skip: the
  // coordinator asks for one, at most once a second, while a name has waited
  // long enough to warn about or to fail.
  if (!coordinator_ || now < next_stall_check_s_) return false;
  const double limit = stall_limit_s();
  if (limit <= 0 || coordinator_->oldest_wait_s(now) < limit) return false;
  next_stall_check_s_ = now + 1.0;
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

bool Loop::round() {
  const bool shutdown = wait_for_work();
  throw_if_aborted();
  std::vector<uint64_t> words = build_round_vector(shutdown);
  const double started = now_s();
  if (!(words[0] & kIdle)) timeline_.cycle(started);
  busy_what_ = "negotiating";
  busy_since_s_ = started;
  bool warned = false;
  Hurry hurry;
  try {
    size_t seen = 0;  // queue length at our last wake-up
    control_->and_round(&words, [&](std::chrono::microseconds most) {
      if (!warned && config_.stall_check_s > 0 && now_s() - started > config_.stall_check_s) {
        warned = true;
        metrics_.add(metrics_.stalls, 1);
        std::vector<std::string> names;
        for (auto& kv : pending_) names.push_back(kv.first);
        std::sort(names.begin(), names.end());
        FUSEOPT_LOG(kWarning, "waited " << config_.stall_check_s
                                        << " s for other ranks to negotiate; in flight here: "
                                        << (names.empty() ? "nothing" : join_names(names, 10)));
      }
      if (!keep_waiting(started)) return ControlPlane::Pause::kAbandon;
      // Short sleeps while a framework thread waits on us (polite_wait.h).
      if (hurry.at(std::chrono::steady_clock::now()))
        most = std::min(most, std::chrono::microseconds(10));
      // Sleep on the inbox, not a timer: a local enqueue means the other ranks
      // are probably enqueueing too, so poll again at once.
      std::unique_lock<std::mutex> lock(inbox_.mu);
      auto news = [&] { return inbox_.queue.size() != seen || inbox_.shutdown_requested; };
      inbox_.loop_waiting = true;
      const bool woken = inbox_.wake.wait_for(lock, most, news);
      inbox_.loop_waiting = false;
      seen = inbox_.queue.size();
      return woken ? ControlPlane::Pause::kWoken : ControlPlane::Pause::kTimedOut;
    });
  } catch (const Error& e) {
    if (e.status() != FUSEOPT_RANK_FAILED) throw;
    throw_if_aborted();
    throw Error(FUSEOPT_RANK_FAILED,
                "other ranks did not take part in negotiation for " +
                    std::to_string(config_.stall_shutdown_s) +
                    " s (FUSEOPT_STALL_SHUTDOWN_S); a rank has died or stalled");
  }
  ++round_number_;
  const uint64_t flags = words[0];
  if (!(flags & kNoShutdown)) {
    stop_reason_ = shutdown_reason(shutdown);
    return false;
  }
  apply_tuned_setting(words);

  const int64_t W = words_per_section();
  std::vector<Work> work;
  for (int64_t slot : cache_->used_slots())
    if (!bit(words, 1 + W, slot)) cache_->erase(slot);
  // When every rank has joined, nobody has a real tensor behind a cached
  // slot (joining demotes them to full requests): skip the stand-in work.
  const bool all_joined = flags & kJoined;
  for (int64_t slot : cache_->used_slots()) {
    if (!bit(words, 1, slot) || all_joined) continue;
    cache_->touch(slot);
    const Response& r = cache_->get(slot);
    work.push_back(Work{r, own_entry(r)});
  }
  const bool joined_anywhere = !(flags & kNoneJoined);
  bool progress = !work.empty() || !(flags & kNoNewRequests);
  if (!(flags & kNoNewRequests) || !(flags & kNoStallCheck) ||
      (joined_anywhere && !(flags & kIdle))) {
    for (Response& r : negotiate_full()) {
      if (is_cacheable(r)) cache_->put(r);
      progress = true;
      Entry* e = own_entry(r);
      work.push_back(Work{std::move(r), e});
    }
  }
  // Entries announced by a slot that has since been evicted start over.
  for (auto& kv : pending_) {
    Entry& e = kv.second;
    if (e.state == Entry::State::kCached && !cache_->holds(e.slot, e.spec.name)) {
      bool running = false;
      for (const Work& w : work) running = running || w.entry == &e;
      if (!running) {
        e.state = Entry::State::kNew;
        new_order_.push_back(e.spec.name);
      }
    }
  }
  busy_what_ = "running collectives";
  const double executing = now_s();
  metrics_.add(metrics_.rounds, 1);
  metrics_.add(metrics_.negotiation_ns, static_cast<int64_t>((executing - started) * 1e9));
  const int64_t bytes_before = metrics_.bytes.load(std::memory_order_relaxed);
  executor_->run(work);
  const double executed = now_s();
  if (!work.empty()) tune(metrics_.bytes.load(std::memory_order_relaxed) - bytes_before, started,
                          executed);
  throw_if_aborted();  // the buffers of aborted handles may be gone
  finish(work);
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
  // Join completes once every rank has joined and no tensor is in flight
  // anywhere (a rank may have enqueued one just before joining).
  if ((flags & kJoined) && (flags & kNothingPending)) {
    const int last = last_to_join();
    if (join_output_) *join_output_ = last;
    join_output_ = nullptr;
    if (join_handle_) handles_.complete(join_handle_, Outcome());
    joined_ = false;
    join_handle_ = 0;
    progress = true;
  }
  no_progress_rounds_ = progress ? 0 : no_progress_rounds_ + 1;
  return true;
}

int Loop::last_to_join() {
  // Among ranks that joined in the same round the highest wins, as in
  // Horovod, whose coordinator counts ranks in ascending order.
  const std::vector<int64_t> rounds = control_->allgather_value(join_round_);
  int last = 0;
  for (int r = 1; r < static_cast<int>(rounds.size()); ++r)
    if (rounds[r] >= rounds[last]) last = r;
  return last;
}

Entry* Loop::own_entry(const Response& r) {
  // Counted as joined for this name: take part with a stand-in even if a
  // same-named tensor of ours is pending (it will be negotiated on its own).
  for (int32_t j : r.joined)
    if (j == rank_) return nullptr;
  return pending_entry(r.spec.name);
}

Entry* Loop::pending_entry(const std::string& name) {
  auto it = pending_.find(name);
  return it == pending_.end() ? nullptr : &it->second;
}

void Loop::finish(std::vector<Work>& work) {
  std::vector<std::string> done;
  for (const Work& w : work)
    if (w.entry) done.push_back(w.entry->spec.name);
  for (const std::string& name : done) pending_.erase(name);
}

// How long a rank named by a stall shutdown may take to notice it. Its
// framework thread has not called fuseopt for FUSEOPT_STALL_SHUTDOWN_S: it is
// stuck elsewhere (a deadlock, a data loader that never returns) and would
// hold the job, and its allocation, forever. If it reaches fuseopt in this
// time it gets the error like every other rank; if not, the process ends, as
// PyTorch's NCCL watchdog ends a process whose collective timed out.
constexpr auto kStuckRankGrace = std::chrono::seconds(5);

void Loop::end_process_if_stuck(const Outcome& reason) {
  {
    std::unique_lock<std::mutex> lock(inbox_.mu);
    if (inbox_.wake.wait_for(lock, kStuckRankGrace,
                             [&] { return inbox_.error_delivered || inbox_.shutdown_requested; }))
      return;
  }
  FUSEOPT_LOG(kError, reason.message << "; this rank never submitted it, and its training thread "
                                        "has not called fuseopt in the "
                                     << kStuckRankGrace.count()
                                     << " s since: it is stuck outside fuseopt. Ending the "
                                        "process with exit code 1 so that the job stops");
  std::fflush(nullptr);
  _exit(1);
}

void Loop::stop(const Outcome& reason) {
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    if (!inbox_.aborted) {
      inbox_.stopped = true;
      inbox_.stop_reason = reason;
    }
    inbox_.queue.clear();
  }
  pending_.clear();
  handles_.fail_pending(reason);
}

}  // namespace fuseopt
