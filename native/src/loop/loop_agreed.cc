// Agreed reductions: a small allreduce that every rank repeats with the same
// name and size runs on the calling thread. See Note [Agreed reductions].
#include <chrono>
#include <optional>

#include "base/poll_schedule.h"
#include "loop/loop.h"

namespace fuseopt {

// Note [Agreed reductions]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A SyncBatchNorm layer sums the same 1 + 2C float64 statistics every step,
// waits for them at once, and cannot go on without them. Through the loop it
// paid a negotiation round and two thread wake-ups per call: 12.6 us for 4 B
// against MPI's 2.3 us (docs/benchmarks.md). An agreed reduction is
// negotiated once, on its first call, like any tensor (so ranks that disagree
// about its name, size or process set fail there, on every rank), and from
// then on each call is one non-blocking MPI sum on the set's agreed
// communicator (MpiWorld::agreed_comm), started and polled by the calling
// thread with rounds_mu_ held only around each MPI call (MPI stays
// SERIALIZED). It never waits while holding the mutex, so the loop thread's
// rounds and collectives, which other ranks may need before they reach their
// own agreed call, always get their turn: no deadlock, and the gradients'
// traffic, on other communicators, cannot match its messages.
//
// What negotiation checked on every call is now checked in the payload. The
// wire is [h, h*h, values...], where h, a small integer, identifies the
// reduction (a hash of its name and size). After the sum, every rank holds
// sum(h) and sum(h*h); both equal size*h and size*h*h only when every rank
// sent the same h (Cauchy-Schwarz), exactly: h is small enough for its sums
// to stay integers below 2^53 (AgreedReduction picks it). So ranks that call
// different agreed reductions at once all see the same two numbers and all
// raise a mismatch. MPI itself requires equal counts, so the first
// collective always carries kAgreedFirstWords doubles (values that do not fit
// follow in a second one, once the check has passed): a reduction of another
// size can make the check fail, never MPI.
//
// A dead or frozen peer: the wait is marked busy (Loop::busy), so the
// watchdog aborts the context after FUSEOPT_PEER_TIMEOUT_S, and an abort
// (the launcher's news, a watchdog's) ends the wait with its reason.
bool Loop::agreed_allreduce(int32_t set, double* wire, int64_t words, double check) {
  FrameworkBlocked blocked;
  int size = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  agreed_since_s_ = now_s();
  struct Done {
    std::atomic<double>& since;
    ~Done() { since = 0; }
  } done{agreed_since_s_};
  await_agreed([&] {
    auto it = sets_.find(set);
    if (it == sets_.end())
      throw Error(FUSEOPT_INVALID_ARG, "process set " + std::to_string(set) + " was removed");
    size = it->second->size();
    comm = it->second->world->agreed_comm();
  }, wire, kAgreedFirstWords, &comm);
  if (wire[0] != check * size || wire[1] != check * check * size) return false;
  if (words > kAgreedFirstWords)
    await_agreed([] {}, wire + kAgreedFirstWords, words - kAgreedFirstWords, &comm);
  return true;
}

template <typename Before>
void Loop::await_agreed(Before before, double* values, int64_t count, const MPI_Comm* comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  bool posted = false;
  int finished = 0;
  // Once the wait sleeps between polls (a late peer), it sleeps at the loop
  // thread's timer slack; two system calls, so not for the usual short wait.
  std::optional<LoopTimerSlack> slack;
  const auto started = std::chrono::steady_clock::now();
  // try_lock, never lock: after an abort the loop thread may keep the mutex
  // for good, stuck in MPI with the lost rank.
  poll_until([&] {
    throw_if_aborted();
    if (!slack && std::chrono::steady_clock::now() - started >= kCollectivePoll.yield)
      slack.emplace();
    if (!rounds_mu_.try_lock()) return false;
    std::lock_guard<std::mutex> hold(rounds_mu_, std::adopt_lock);
    if (closed_) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt has shut down");
    if (!posted) {
      before();
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                               *comm, &request),
                "MPI_Iallreduce (agreed reduction)");
      posted = true;
    }
    mpi_check(MPI_Test(&request, &finished, MPI_STATUS_IGNORE), "MPI_Test (agreed reduction)");
    return finished != 0;
  }, kCollectivePoll);
}

}  // namespace fuseopt
