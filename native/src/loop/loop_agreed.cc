// Agreed reductions: a small allreduce that every rank repeats with the same
// name and size runs on the calling thread. See Note [Agreed reductions].
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "base/poll_schedule.h"
#include "loop/loop.h"
#include "policy/agreed_schedule.h"
#include "transport/mpi/polite_wait.h"

namespace fuseopt {

// Note [Agreed reductions]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A SyncBatchNorm layer sums the same 1 + 2C float64 statistics every step,
// waits for them at once, and cannot go on without them. Through the loop it
// paid a negotiation round and two thread wake-ups per call: 12.6 us for 4 B
// against MPI's 2.3 us (docs/benchmarks.md). An agreed reduction is
// negotiated once, on its first call, like any tensor (so ranks that disagree
// about its name, size or process set fail there, on every rank), and from
// then on each call is a recursive-doubling sum of point-to-point messages on
// the set's agreed communicator (MpiWorld::agreed_comm), started and polled by
// the calling thread with rounds_mu_ held only around each MPI call (MPI
// stays SERIALIZED). It never waits while holding the mutex, so the loop
// thread's rounds and collectives, which other ranks may need before they
// reach their own agreed call, always get their turn: no deadlock, and the
// gradients' traffic, on other communicators, cannot match its messages.
//
// Why messages and not MPI_Iallreduce: a collective needs equal counts on
// every rank, so a reduction of another size (a rank calling the wrong layer)
// had to be padded into a fixed first collective of 128 doubles, and MPICH's
// non-blocking allreduce of 1 KiB took 4.6 us where its blocking one of 8 B
// takes 1.4. A message carries its own length: each exchange posts its
// receive before its send, with room for the longest wire there is
// (kAgreedMaxWords; only the pages a message reaches are ever touched), so
// a message of another length arrives whole and fails the check, where a
// shorter receive would truncate it and MPI would abort. Probing first
// (MPI_Improbe, then MPI_Imrecv) does the same with a buffer of the exact
// length but costs a second pass through MPI's queues: 2.2-3.4 us against
// 1.5 us for 8 B here. The sum is the same on every rank to the bit: each
// exchange adds two partial sums, and a + b == b + a.
//
// What negotiation checked on every call is now checked in the payload. The
// wire is [h, h*h, values...], where h, a small integer, identifies the
// reduction (a hash of its name and size). After the sum, every rank holds
// sum(h) and sum(h*h); both equal size*h and size*h*h only when every rank
// sent the same h (Cauchy-Schwarz), exactly: h is small enough for its sums
// to stay integers below 2^53 (AgreedReduction picks it). A message of
// another length adds only its h and makes h*h NaN, which every later sum
// carries to every rank. So ranks that call different agreed reductions at
// once all see the check fail and all raise a mismatch.
//
// A dead or frozen peer: the wait is marked busy (Loop::busy), so the
// watchdog aborts the context after FUSEOPT_PEER_TIMEOUT_S, and an abort
// (the launcher's news, a watchdog's) ends the wait with its reason.
namespace {

// Folds a received message of `got` words into the wire of `words`.
void fold(const AgreedExchange& e, double* wire, const double* message, int got, int64_t words) {
  if (got != words) {  // another reduction: keep its h for the message, fail the check
    if (e.receive == AgreedExchange::kResult || got < 1)
      wire[0] = std::numeric_limits<double>::quiet_NaN();
    else
      wire[0] += message[0];
    wire[1] = std::numeric_limits<double>::quiet_NaN();
  } else if (e.receive == AgreedExchange::kAdd) {
    for (int64_t i = 0; i < words; ++i) wire[i] += message[i];
  } else {
    std::memcpy(wire, message, sizeof(double) * words);
  }
}

// One agreed reduction's exchanges, advanced by whichever thread holds MPI:
// its caller, or (Note [Side work]) the loop thread between polls of a
// collective of its own.
class AgreedExchanges final : public SideWork {
 public:
  // find(comm, rank, size): the set's agreed communicator and this rank's
  // place in it, asked by the first advance() (its thread holds the rounds'
  // mutex, which guards the sets); it throws if the set cannot be used.
  using Find = std::function<void(MPI_Comm*, int*, int*)>;
  AgreedExchanges(double* wire, int64_t words, double* message, Find find)
      : wire_(wire), words_(words), message_(message), find_(std::move(find)) {}

  void advance() override {
    // Both threads advance only while holding MPI; the mutex makes that
    // exclusion this object's own business too.
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || finished_.load(std::memory_order_relaxed)) return;
    try {
      if (steps_ < 0) {
        int rank = 0;
        find_(&comm_, &rank, &size_);
        steps_ = agreed_schedule(rank, size_, exchanges_);
      }
      if (!step()) return;
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_.store(true, std::memory_order_release);
  }
  // Whether advance() has finished the reduction; then wire holds the sum.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }
  int size() const { return size_; }  // of the set, once finished

 private:
  // One pass of MPI calls; true once the last exchange is done.
  bool step() {
    while (next_ < steps_) {
      const AgreedExchange& e = exchanges_[next_];
      if (!posted_) {
        // The receive first, so that the message lands in it. Room for the
        // longest wire, whatever this rank's own length: a peer calling
        // another reduction must fail the check, not truncate (MPI aborts).
        if (e.receive != AgreedExchange::kNone)
          mpi_check(MPI_Irecv(message_, static_cast<int>(Loop::kAgreedMaxWords), MPI_DOUBLE,
                              e.peer, e.tag, comm_, &requests_[1]),
                    "MPI_Irecv (agreed reduction)");
        if (e.send)
          mpi_check(MPI_Isend(wire_, static_cast<int>(words_), MPI_DOUBLE, e.peer, e.tag, comm_,
                              &requests_[0]),
                    "MPI_Isend (agreed reduction)");
        posted_ = true;
      }
      int done = 0;
      MPI_Status statuses[2];
      mpi_check(MPI_Testall(2, requests_, &done, statuses), "MPI_Testall (agreed reduction)");
      if (!done) return false;
      if (e.receive != AgreedExchange::kNone) {
        int got = 0;
        mpi_check(MPI_Get_count(&statuses[1], MPI_DOUBLE, &got), "MPI_Get_count (agreed reduction)");
        fold(e, wire_, message_, got, words_);
      }
      posted_ = false;
      ++next_;
    }
    return true;
  }

  double* wire_;
  int64_t words_;
  double* message_;
  Find find_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  AgreedExchange exchanges_[kMaxAgreedExchanges];
  int steps_ = -1;  // not started
  int next_ = 0;
  bool posted_ = false;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::mutex mu_;
  std::atomic<bool> finished_{false};
  std::exception_ptr error_;
};

}  // namespace

// A negotiation round pausing on the inbox hears of published side work
// (pause_round) and polls on; read under the lock, so that the news cannot
// fall between its check and its wait. An idle loop thread (waiting for work)
// is not woken: it would find nothing to do, and its wake-up took a core from
// a rank's own thread (back-to-back 4 B agreed reductions, 2 ranks on 2
// cores: 4.4 us against raw MPI's 2.1 us).
void Loop::tell_paused_round() {
  bool pausing;
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    pausing = inbox_.round_pausers > 0;
  }
  if (pausing) inbox_.wake.notify_all();
}

bool Loop::agreed_allreduce(int32_t set, double* wire, int64_t words, double check) {
  FrameworkBlocked blocked;
  agreed_since_s_ = now_s();
  struct Done {
    std::atomic<double>& since;
    ~Done() { since = 0; }
  } done{agreed_since_s_};
  // Allocated, never written as a whole: only the pages a message reaches
  // become memory.
  thread_local std::unique_ptr<double[]> message(new double[kAgreedMaxWords]);
  AgreedExchanges exchanges(wire, words, message.get(), [&](MPI_Comm* comm, int* rank,
                                                             int* size) {
    if (closed_) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt has shut down");
    auto it = sets_.find(set);
    if (it == sets_.end())
      throw Error(FUSEOPT_INVALID_ARG, "process set " + std::to_string(set) + " was removed");
    *comm = it->second->world->agreed_comm();
    *rank = it->second->world->info().rank;
    *size = it->second->size();
  });
  // Published at once (Note [Side work]): while another thread holds MPI (the
  // loop thread in a negotiation round that waits for a peer, or in a
  // bucket's collective), it advances this reduction between its polls.
  // Published only once this thread had advanced it itself, a SyncBatchNorm
  // layer's reduction during backward waited out the loop thread's round:
  // ResNet-style CNN, batch 8, 2 ranks, SyncBatchNorm steps of 90.55-91.96 ms
  // against 83.34 ms published at once (BatchNorm 75-80 ms; 2026-11-29;
  // benchmarks/results/syncbn-resnet8.md).
  std::optional<PublishedSideWork> published(&exchanges);
  bool told = false;  // the loop thread's pause cut short, once
  // Once the wait sleeps between polls (a late peer), it sleeps at the loop
  // thread's timer slack.
  LoopTimerSlack slack;
  // try_lock, never lock: after an abort the loop thread may keep the mutex
  // for good, stuck in MPI with the lost rank.
  poll_until([&] {
    throw_if_aborted();
    if (exchanges.finished()) return true;  // the loop thread did it
    if (rounds_mu_.try_lock()) {
      std::lock_guard<std::mutex> hold(rounds_mu_, std::adopt_lock);
      if (closed_) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt has shut down");
      exchanges.advance();
      if (exchanges.finished()) return true;
    }
    if (!told) {
      told = true;
      tell_paused_round();
    }
    return false;
  }, kCollectivePoll);
  published.reset();
  exchanges.rethrow();
  const int size = exchanges.size();
  return wire[0] == check * size && wire[1] == check * check * size;
}

}  // namespace fuseopt
