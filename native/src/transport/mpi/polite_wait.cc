#include "transport/mpi/polite_wait.h"

#include <atomic>
#include <mutex>

#include "base/poll_schedule.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {
namespace {

std::atomic<bool> g_any{false};
std::mutex g_mu;  // guards g_work, and an advance() through it
SideWork* g_work = nullptr;

}  // namespace

PublishedSideWork::PublishedSideWork(SideWork* work) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_work) return;
  g_work = work;
  published_ = true;
  g_any.store(true, std::memory_order_release);
}

PublishedSideWork::~PublishedSideWork() {
  if (!published_) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_work = nullptr;
  g_any.store(false, std::memory_order_relaxed);
}

bool side_work_pending() { return g_any.load(std::memory_order_acquire); }

void run_side_work() {
  if (!g_any.load(std::memory_order_acquire)) return;
  // try_lock: the publisher may be withdrawing; nothing to do then.
  std::unique_lock<std::mutex> lock(g_mu, std::try_to_lock);
  if (lock.owns_lock() && g_work) g_work->advance();
}


void wait_politely(MPI_Request* request, const char* what, int64_t bytes) {
  poll_until(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
        if (!done) run_side_work();  // Note [Side work]
        return done != 0;
      },
      bytes > 0 ? bulk_poll(bytes) : kCollectivePoll);
}

}  // namespace fuseopt
