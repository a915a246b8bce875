// One MPI shared-memory window among the ranks of this host, every rank's
// region mapped into this process. The shared-memory collectives and the
// negotiation rounds through shared memory each hold one.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "transport/mpi/mpi_world.h"

namespace fuseopt {

class SharedWindow {
 public:
  // Collective over world: splits off the ranks that share this host.
  explicit SharedWindow(const MpiWorld& world);
  ~SharedWindow();
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;

  int rank() const { return rank_; }  // in this host's communicator
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  // Every rank of the world shares this host, and there are several: the
  // same answer on every rank.
  bool whole_world() const { return whole_world_; }

  // Collective over this host's ranks: each rank gets a region of `bytes`,
  // whose [clear_from, clear_from + clear_bytes) reads zero on every rank
  // once this returns (MPI does not promise zeroed memory, and counters
  // there must not be read before their owner has cleared them).
  void allocate(int64_t bytes, int64_t clear_from, int64_t clear_bytes, const char* what);
  bool allocated() const { return win_ != MPI_WIN_NULL; }
  char* region(int r) const { return regions_[r]; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool whole_world_ = false;
  std::vector<char*> regions_;
};

}  // namespace fuseopt
