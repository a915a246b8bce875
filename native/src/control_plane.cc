#include "control_plane.h"

#include <algorithm>
#include <thread>

#include "common.h"

namespace fuseopt {
namespace {
// Peers usually post their part of a round within microseconds of us; a
// short spin catches that without a sleep's wake-up latency.
constexpr int kSpinMicros = 30;
}  // namespace

void ControlPlane::and_round(std::vector<uint64_t>* words, const PauseFn& pause) {
  MPI_Request request;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, words->data(), static_cast<int>(words->size()),
                           MPI_UINT64_T, MPI_BAND, world_.comm(), &request),
            "MPI_Iallreduce(negotiation)");
  // Poll: spin briefly (peers are usually right behind us), then sleep with
  // exponential backoff so that waiting for a slow rank costs next to no CPU.
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto sleep = std::chrono::microseconds(5);
  const auto max_sleep_short = std::chrono::microseconds(200);
  const auto max_sleep_long = std::chrono::microseconds(2000);
  auto spin_until = start + std::chrono::microseconds(kSpinMicros);
  auto active_since = start;
  for (;;) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(negotiation)");
    if (done) return;
    const auto now = clock::now();
    if (now < spin_until) continue;
    const Pause how = pause(sleep);
    if (how == Pause::kAbandon) {
      // The request cannot be cancelled portably, and MPI may still write
      // into the buffer later: leak it (moving a vector keeps its storage).
      new std::vector<uint64_t>(std::move(*words));
      throw Error(FUSEOPT_RANK_FAILED, "negotiation round abandoned");
    }
    if (how == Pause::kWoken) {  // local activity: the others are likely close
      sleep = std::chrono::microseconds(5);
      active_since = clock::now();
      spin_until = active_since + std::chrono::microseconds(kSpinMicros);
      continue;
    }
    const bool long_wait = clock::now() - active_since > std::chrono::milliseconds(20);
    const auto cap = long_wait ? max_sleep_long : max_sleep_short;
    sleep = std::min(cap, sleep * 2);
  }
}

std::vector<std::vector<char>> ControlPlane::gather(const std::vector<char>& mine) {
  const int size = world_.info().size;
  const bool coordinator = world_.info().rank == 0;
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(coordinator ? size : 0);
  mpi_check(MPI_Gather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, world_.comm()),
            "MPI_Gather(negotiation sizes)");
  std::vector<int> displs(sizes.size(), 0);
  int total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    displs[r] = total;
    total += sizes[r];
  }
  std::vector<char> all(total);
  mpi_check(MPI_Gatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), displs.data(),
                        MPI_BYTE, 0, world_.comm()),
            "MPI_Gatherv(negotiation)");
  std::vector<std::vector<char>> out;
  for (size_t r = 0; r < sizes.size(); ++r)
    out.emplace_back(all.begin() + displs[r], all.begin() + displs[r] + sizes[r]);
  return out;
}

std::vector<char> ControlPlane::allgather_flag(bool mine) {
  char flag = mine ? 1 : 0;
  std::vector<char> all(world_.info().size);
  mpi_check(MPI_Allgather(&flag, 1, MPI_CHAR, all.data(), 1, MPI_CHAR, world_.comm()),
            "MPI_Allgather(shutdown)");
  return all;
}

std::vector<int64_t> ControlPlane::allgather_value(int64_t mine) {
  std::vector<int64_t> all(world_.info().size);
  mpi_check(MPI_Allgather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, world_.comm()),
            "MPI_Allgather(value)");
  return all;
}

std::vector<char> ControlPlane::broadcast(std::vector<char> blob) {
  int64_t n = static_cast<int64_t>(blob.size());
  broadcast_value(&n);
  blob.resize(n);
  mpi_check(MPI_Bcast(blob.data(), static_cast<int>(n), MPI_BYTE, 0, world_.comm()),
            "MPI_Bcast(negotiation)");
  return blob;
}

}  // namespace fuseopt
