#include "shm_allreduce.h"

#include <algorithm>
#include <cstring>

#include "dtype.h"

namespace fuseopt {
namespace {
// Bytes per rank's slot: buffers larger than this go through in chunks.
constexpr int64_t kSlotBytes = int64_t(16) << 20;
}  // namespace

ShmAllreduce::ShmAllreduce(const MpiWorld& world) {
  const int world_size = world.info().size;
  mpi_check(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &comm_),
            "MPI_Comm_split_type(shared memory)");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Every rank on this host, and more than one: all ranks reach the same answer.
  usable_ = size_ == world_size && size_ > 1;
}

ShmAllreduce::~ShmAllreduce() {
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void ShmAllreduce::attach() {
  char* mine = nullptr;
  mpi_check(MPI_Win_allocate_shared(kSlotBytes, 1, MPI_INFO_NULL, comm_, &mine, &win_),
            "MPI_Win_allocate_shared");
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all");
  slots_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint bytes;
    int unit;
    mpi_check(MPI_Win_shared_query(win_, r, &bytes, &unit, &slots_[r]), "MPI_Win_shared_query");
  }
}

void ShmAllreduce::sync() {
  // Stores before the barrier become visible to the other ranks' loads after it.
  MPI_Win_sync(win_);
  mpi_check(MPI_Barrier(comm_), "MPI_Barrier(shared memory)");
  MPI_Win_sync(win_);
}

void ShmAllreduce::allreduce(const void* send, void* recv, int64_t count,
                             fuseopt_dtype_t dtype, fuseopt_reduce_op_t op) {
  if (win_ == MPI_WIN_NULL) attach();
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t per_chunk = kSlotBytes / esize;
  const MPI_Datatype type = MpiWorld::datatype(dtype);
  const MPI_Op mpi_op = MpiWorld::op(op, dtype);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t n = std::min(per_chunk, count - done);
    char* chunk = out + done * esize;
    std::memcpy(slots_[rank_], in + done * esize, n * esize);
    sync();
    // Range r of the chunk is reduced by rank r, into its own slot.
    auto range = [&](int r) { return std::make_pair(n * r / size_, n * (r + 1) / size_); };
    const auto mine = range(rank_);
    const int64_t len = mine.second - mine.first;
    for (int k = 1; k < size_ && len > 0; ++k) {
      const int other = (rank_ + k) % size_;
      mpi_check(MPI_Reduce_local(slots_[other] + mine.first * esize,
                                 slots_[rank_] + mine.first * esize, static_cast<int>(len),
                                 type, mpi_op),
                "MPI_Reduce_local");
    }
    sync();
    for (int r = 0; r < size_; ++r) {
      const auto part = range(r);
      std::memcpy(chunk + part.first * esize, slots_[r] + part.first * esize,
                  (part.second - part.first) * esize);
    }
    sync();  // nobody refills a slot while another rank still reads it
  }
}

}  // namespace fuseopt
