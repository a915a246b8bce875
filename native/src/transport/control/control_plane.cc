#include "transport/control/control_plane.h"

#include <algorithm>
#include <thread>

#include "base/error.h"
#include "base/poll_schedule.h"
#include "transport/mpi/polite_wait.h"

namespace fuseopt {

void ControlPlane::use_shared_memory(int64_t max_words) {
  shm_.reset(new ShmRound(world_, max_words));
  if (!shm_->usable()) shm_.reset();
}

MPI_Request ControlPlane::post_and(std::vector<uint64_t>* words) {
  shm_posted_ = shm_ && shm_->fits(words->size());
  if (shm_posted_) {
    shm_->post(*words);
    return MPI_REQUEST_NULL;
  }
  MPI_Request request;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, words->data(), static_cast<int>(words->size()),
                           MPI_UINT64_T, MPI_BAND, world_.comm(), &request),
            "MPI_Iallreduce(negotiation)");
  return request;
}

bool ControlPlane::await_and(MPI_Request* request, std::vector<uint64_t>* words,
                             const PauseFn& pause) {
  // See Note [Poll schedule].
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto sleep = kRoundFirstPause;
  auto spin_until = start + kRoundSpin;
  auto active_since = start;
  for (;;) {
    int done = 0;
    if (shm_posted_)
      done = shm_->test(words);
    else
      mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), "MPI_Test(negotiation)");
    if (done) return true;
    run_side_work();  // Note [Side work]
    const auto now = clock::now();
    if (now < spin_until) continue;
    const Pause how = pause(sleep);
    if (how == Pause::kHandOver) return false;
    if (how == Pause::kAbandon) {
      // The request cannot be cancelled portably, and MPI may still write
      // into the buffer later: leak it (moving a vector keeps its storage).
      new std::vector<uint64_t>(std::move(*words));
      throw Error(FUSEOPT_RANK_FAILED, "negotiation round abandoned");
    }
    if (how == Pause::kWoken) {
      sleep = kRoundFirstPause;
      active_since = clock::now();
      spin_until = active_since + kRoundSpin;
      continue;
    }
    const bool long_wait = clock::now() - active_since > kRoundLongWait;
    const auto cap = long_wait ? kRoundMaxPauseLong : kRoundMaxPause;
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
