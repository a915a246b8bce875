#include "transport/mpi/shared_window.h"

#include <cstring>
#include <string>

namespace fuseopt {

SharedWindow::SharedWindow(const MpiWorld& world) {
  mpi_check(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &comm_),
            "MPI_Comm_split_type(shared memory)");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  whole_world_ = size_ == world.info().size && size_ > 1;
}

// Freeing the window is collective: the owner must call this on every rank at
// the same point (the loop thread's teardown after the agreed shutdown round).
SharedWindow::~SharedWindow() {
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void SharedWindow::allocate(int64_t bytes, int64_t clear_from, int64_t clear_bytes,
                            const char* what) {
  const std::string name = std::string("(") + what + ")";
  char* mine = nullptr;
  mpi_check(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, comm_, &mine, &win_),
            ("MPI_Win_allocate_shared" + name).c_str());
  // Passive-target access for the window's life: ranks load and store
  // directly, ordered by their own fences and atomics.
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), ("MPI_Win_lock_all" + name).c_str());
  regions_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size;
    int unit;
    mpi_check(MPI_Win_shared_query(win_, r, &size, &unit, &regions_[r]),
              ("MPI_Win_shared_query" + name).c_str());
  }
  std::memset(mine + clear_from, 0, static_cast<size_t>(clear_bytes));
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  MPI_Win_sync(win_);
  mpi_check(MPI_Barrier(comm_), ("MPI_Barrier" + name).c_str());
}

}  // namespace fuseopt
