// The loop thread: the only code that talks to other ranks.
//
// Vocabulary. A *round* is one pass of negotiation that every rank takes
// part in, in lock-step:
//   1. drain newly enqueued entries; look each up in the response cache;
//   2. post the *round vector*: one AND-allreduce of
//        [flags][ready bit per cache slot][not-invalid bit per cache slot]
//      where OR-style facts ("someone wants to shut down") are stored
//      inverted so a single AND answers both kinds;
//   3. evict slots anyone marked invalid; slots ready everywhere become work;
//   4. if anyone has uncached requests, run *full negotiation*: gather them
//      to the coordinator (rank 0), which answers every rank with the same
//      ordered response list (coordinator.h);
//   5. execute the work in fusion buckets (executor.h) and complete handles.
//
// Process sets (process_set.h) each have their own cache, coordinator and
// communicator. The global round carries one bit per set: "nobody here has a
// tensor of this set in flight". For each set that somebody does, its members
// then run steps 2-5 among themselves, on the set's communicator, in
// ascending id order on every rank (so that overlapping sets cannot deadlock).
//
// Pacing: see Note [Poll schedule] (poll_schedule.h). Who runs a round, the
// loop thread or a framework thread waiting on a handle: Note [Turns]
// (loop_turns.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/metrics.h"
#include "base/poll_schedule.h"
#include "base/timeline.h"
#include "exec/executor.h"
#include "exec/handle_table.h"
#include "transport/control/control_plane.h"
#include "loop/inbox.h"
#include "loop/process_set.h"
#include "loop/process_set_table.h"
#include "policy/autotune.h"
#include "policy/coordinator.h"
#include "policy/response_cache.h"
#include "transport/mpi/mpi_backend.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

class Loop {
 public:
  // MPI is started by the loop thread itself (run), so that the framework
  // thread in fuseopt_init can stop waiting for a peer that never comes
  // (Context::start); MPI_Init_thread would block it without a way out.
  Loop(const fuseopt_config_t& config, Inbox& inbox, HandleTable& handles, Metrics& metrics,
       Timeline& timeline, ProcessSetTable& table)
      : config_(config), inbox_(inbox), handles_(handles), metrics_(metrics),
        timeline_(timeline), table_(table),
        autotune_log_(config.autotune_log ? config.autotune_log : "") {
    config_.autotune_log = nullptr;  // the caller's string lives only through init
  }
  ~Loop() {
    if (autotune_csv_) std::fclose(autotune_csv_);
  }

  // Thread body. Reports MPI start-up (topology or failure) through started.
  void run(std::promise<fuseopt_comm_info_t>* started);

  // Called by a framework thread about to block until done() (a handle it
  // waits on without a time limit): runs rounds itself while the loop thread
  // is between rounds, instead of waking it (Note [Turns]). Returns at once
  // when the loop thread holds the rounds, or after a round without progress.
  // At deadline it hands a round still waiting for the other ranks over to
  // the loop thread and returns.
  void help(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);

  // Since when (now_s(), 0 between rounds) this rank has been waiting on the
  // other ranks, and for what. Read by the context's watchdog thread.
  struct Busy {
    double since_s;
    const char* what;
  };
  Busy busy() const {
    const double agreed = agreed_since_s_.load(), round = busy_since_s_.load();
    if (agreed > 0 && (round == 0 || agreed < round)) return Busy{agreed, "in an agreed reduction"};
    return Busy{round, busy_what_.load()};
  }

  // Note [Agreed reductions] (loop_agreed.cc). Sums wire (words doubles: the
  // check words, then the values) among process set's members, on the
  // calling thread. False when the ranks called different agreed reductions
  // (check differs; every rank sees it), after which wire holds garbage.
  // Throws Error when the context was aborted or shut down.
  bool agreed_allreduce(int32_t set, double* wire, int64_t words, double check);
  // The longest wire: two check words and at most 2^20 values (a small
  // repeated sum, not a gradient bucket).
  static constexpr int64_t kAgreedMaxWords = 2 + (int64_t(1) << 20);

 private:
  void tell_paused_round();  // of an agreed reduction's published side work
  void start();             // MPI, backend, agreed configuration
  // After a stall shutdown that names this rank: ends the process unless
  // its framework thread hears of the failure soon (see loop.cc).
  void end_process_if_stuck(const Outcome& reason);
  // The loop thread's turn (loop_turns.cc): waits for work, then runs a
  // round unless a framework thread has already run it. False once every
  // rank agreed to shut down.
  bool round();
  // How a round ended for the thread that ran it.
  enum class Turn { kMore, kShutDown, kHandedOver };
  Turn run_round(bool shutdown);  // steps 2-5
  Turn finish_round();            // of the posted global round, from its AND on
  // How the loop thread waits before its next turn, decided while it holds
  // the rounds (the state it reads is theirs).
  struct WaitPlan {
    enum Kind { kNone, kIdle, kBackoff } kind = kNone;
    std::chrono::microseconds backoff{0};
    int64_t round_number = 0;  // rounds run so far when planned
    int64_t cycle_time_us = 0;  // config_'s, which autotune may change in a round
  };
  WaitPlan plan_wait() const;
  void wait_for_work(const WaitPlan& plan);  // without holding the rounds
  bool take_queue();        // step 1; returns whether this rank asked to shut down
  void drain(std::deque<Entry>* incoming);
  void take_burst();        // Note [Burst intake]
  // [flags][ready bit per cache slot][not-invalid bit per cache slot] of ps.
  std::vector<uint64_t> slot_words(ProcessSet& ps, uint64_t flags, bool joined);
  std::vector<uint64_t> build_round_vector(bool shutdown);
  // What the pauses of one round remember.
  struct RoundWait {
    double started_s = 0;
    bool warned = false;  // about a slow round (FUSEOPT_STALL_CHECK_S)
    Hurry hurry;
    size_t seen = 0;  // queue length at the last wake-up
  };
  // One AND-allreduce among ps's members, paced by the inbox (loop.cc).
  void and_round(ProcessSet& ps, std::vector<uint64_t>* words);
  // Awaits a posted AND among ps's members; false if handed over (only the
  // global round may be: Note [Turns]).
  bool await_round(ProcessSet& ps, MPI_Request* request, std::vector<uint64_t>* words,
                   RoundWait* wait);
  // Between two polls of a round: warns once if it is slow, abandons it past
  // the stall shutdown, hands the global round over past a helping thread's
  // deadline, else waits on the inbox for up to most.
  ControlPlane::Pause pause_round(ProcessSet& ps, RoundWait* wait, std::chrono::microseconds most);
  void warn_slow_round(ProcessSet& ps);
  // Steps 3-4 of a round for ps: the work its AND (words) and, when asked
  // for, full negotiation make ready.
  std::vector<Work> collect_work(ProcessSet& ps, const std::vector<uint64_t>& words,
                                 bool full, bool all_joined);
  void execute(ProcessSet& ps, std::vector<Work>& work);  // step 5
  void set_round(ProcessSet& ps);  // steps 2-5 for a set other than the global one
  bool keep_waiting(double started_s);
  bool stall_check_due(ProcessSet& ps, double now);  // set coordinator: ask for a full negotiation
  // The earlier of the stall warning and shutdown limits in force (0: none).
  double stall_limit_s() const;
  void warn_stalls(ProcessSet& ps, double now);  // set coordinator, in full negotiation
  void throw_if_aborted();  // throws the abort's reason (Context::abort)
  std::vector<Response> negotiate_full(ProcessSet& ps);
  void finish(ProcessSet& ps, std::vector<Work>& work);
  void complete_join();  // every rank has joined and nothing is in flight anywhere
  int last_to_join();  // collective: every rank, in the round join completes
  void stop(const Outcome& reason);
  Outcome shutdown_reason(bool requested_here);
  size_t in_flight() const;  // entries pending here, in every set

  // Process sets (loop_process_sets.cc). add and remove run as global work,
  // which every rank executes in the same order.
  std::unique_ptr<ProcessSet> make_set(int32_t id, std::vector<int32_t> ranks);
  void change_sets(std::vector<Work>& work);  // takes add/remove out of work
  void add_set(Work& w);
  void remove_set(Work& w);
  int64_t set_words() const;  // words of the per-set activity field
  void put_set_activity(std::vector<uint64_t>* words);  // and notes set_ids_at_round_
  std::vector<int32_t> active_sets(const std::vector<uint64_t>& words) const;

  // Autotune (autotune.h): rank 0's choice rides at the end of the round
  // vector; every rank applies it right after the round's AND.
  void start_autotune();
  int64_t tune_words() const;
  void put_tuned_setting(std::vector<uint64_t>* words) const;
  void apply_tuned_setting(const std::vector<uint64_t>& words);
  void tune(int64_t bytes, double begin_s, double end_s);  // rank 0
  void log_trial(const TuneTrial& t, size_t number, const char* note);  // 1-based number

  Entry* own_entry(ProcessSet& ps, const Response& response);
  int64_t words_per_section() const { return (config_.cache_capacity + 63) / 64; }
  ProcessSet& global() { return *sets_.at(0); }

  fuseopt_config_t config_;
  Inbox& inbox_;
  HandleTable& handles_;
  Metrics& metrics_;
  Timeline& timeline_;
  ProcessSetTable& table_;  // what framework threads validate against

  // By id; 0 (every rank) always. A rank holds only the sets it belongs to.
  std::map<int32_t, std::unique_ptr<ProcessSet>> sets_;
  int32_t set_ids_at_round_ = 1;  // table_.next_id() when the round vector was built
  bool others_busy_ = false;      // the last round had something in flight somewhere
  int subsets_ = 0;               // sets besides the global one, on every rank
  std::unique_ptr<Autotuner> tuner_;          // rank 0 only, with FUSEOPT_AUTOTUNE
  std::string autotune_log_;
  FILE* autotune_csv_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::atomic<double> busy_since_s_{0};
  std::atomic<const char*> busy_what_{""};
  std::atomic<double> agreed_since_s_{0};  // a framework thread in agreed_allreduce

  bool stalled_here_ = false;  // a stall shutdown named this rank as missing
  bool joined_ = false;
  int64_t join_handle_ = 0;
  // Rounds run in lock-step, so their numbers compare across ranks: the
  // round in which this rank joined tells who joined last (last_to_join).
  int64_t round_number_ = 0;
  int64_t join_round_ = -1;
  int32_t* join_output_ = nullptr;
  int no_progress_rounds_ = 0;
  // Burst detection (loop_intake.cc): enqueue calls taken in so far, and
  // whether the last quiet-gap wait caught another arrival.
  Outcome stop_reason_;

  // Note [Turns]: whoever holds rounds_mu_ runs rounds (and alone calls MPI).
  std::mutex rounds_mu_;
  WaitPlan next_wait_;
  // The global round between its post and its AND's completion: a framework
  // thread may post it and leave the rest to the loop thread.
  struct PostedRound {
    bool active = false;
    std::vector<uint64_t> words;
    MPI_Request request;
    bool shutdown = false;
    RoundWait wait;
  };
  PostedRound posted_;
  // When the thread running rounds must hand the global round over: a helping
  // framework thread's deadline; never for the loop thread.
  std::chrono::steady_clock::time_point hand_over_at_ = std::chrono::steady_clock::time_point::max();
  bool closed_ = false;             // no more rounds: stopped, or failed
  std::exception_ptr helper_error_;  // a framework thread's round failed
  bool helper_saw_shutdown_ = false;  // a framework thread's round agreed to shut down
  bool device_work_seen_ = false;   // device backends may bind the running thread
};

}  // namespace fuseopt
