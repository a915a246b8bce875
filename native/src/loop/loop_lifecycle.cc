// The loop thread's life: starting MPI and agreeing on the configuration
// (start), the thread body around the rounds (run), and stopping: failing
// what is pending, and ending a process whose training thread is stuck.
#include <chrono>
#include <cstdio>

#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "base/log.h"
#include "base/poll_schedule.h"
#include "loop/loop.h"

namespace fuseopt {

void Loop::run(std::promise<fuseopt_comm_info_t>* started) {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, kLoopTimerSlackNs, 0, 0, 0);  // see Note [Poll schedule]
#endif
  try {
    start();
  } catch (...) {
    started->set_exception(std::current_exception());
    return;
  }
  started->set_value(global().world->info());
  Outcome reason;
  bool clean = true;
  try {
    while (round()) {
    }
    reason = stop_reason_;
    // Freeing a shared-memory window is collective. Every rank's loop thread
    // is here after the round that agreed to shut down, also on a rank whose
    // framework thread is stuck in user code and may never call shutdown(),
    // where the rest of the teardown happens.
    global().control->release_shared_memory();
    global().backend->release_shared_memory();
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
    for (auto& kv : sets_) kv.second->abandon();  // device communicators, too
  }
}

void Loop::start() {
  busy_what_ = "starting MPI";
  std::unique_ptr<ProcessSet> all(new ProcessSet);
  all->world.reset(new MpiWorld(config_.emulated_local_size, config_.mpi_thread_multiple != 0));
  busy_what_ = "agreeing on the configuration with rank 0";
  rank_ = all->world->info().rank;
  size_ = all->world->info().size;
  set_log_rank(rank_);
  all->control.reset(new ControlPlane(*all->world));
  // Every rank must plan identical buckets and size identical round vectors,
  // so the coordinator's settings win; say so if they differed here.
  fuseopt_config_t agreed = config_;
  all->control->broadcast_value(&agreed);
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
  all->id = 0;
  for (int r = 0; r < size_; ++r) all->ranks.push_back(r);
  all->rank = all->global_rank = rank_;
  // Rounds through shared memory unless that path is off, sized for the round
  // vector with room for the tuning words and some 8,000 process sets' bits.
  if (config_.shm_min_bytes >= 0)
    all->control->use_shared_memory(1 + 2 * words_per_section() + 128);
  all->backend.reset(
      new MpiBackend(*all->world, config_.shm_min_bytes, config_.hierarchical_allreduce,
                     config_.shm_stores));
  all->executor.reset(new Executor(*all->backend, handles_, metrics_, timeline_, rank_, size_));
  all->executor->set_fusion_threshold(config_.fusion_threshold_bytes);
  all->executor->enable_devices(*all->world, config_.hierarchical_allreduce);
  all->cache.reset(new ResponseCache(config_.cache_capacity));
  if (rank_ == 0) all->coordinator.reset(new Coordinator(size_));
  sets_[0] = std::move(all);
  table_.reset(size_, rank_);
  start_autotune();
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
  for (auto& kv : sets_) kv.second->pending.clear();
  handles_.fail_pending(reason);
}

}  // namespace fuseopt
