#include "polite_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "mpi_world.h"

namespace fuseopt {
namespace {
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kYield = std::chrono::microseconds(200);
constexpr auto kFirstSleep = std::chrono::microseconds(10);
constexpr auto kMaxSleep = std::chrono::microseconds(500);
}  // namespace

void wait_politely(MPI_Request* request, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto sleep = kFirstSleep;
  for (;;) {
    int done = 0;
    mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    const auto waited = clock::now() - start;
    if (waited < kSpin) continue;
    if (waited < kYield) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(kMaxSleep, sleep * 2);
  }
}

}  // namespace fuseopt
