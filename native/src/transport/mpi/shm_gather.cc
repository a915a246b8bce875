// Allgather, reduce-scatter and alltoall through the slots of
// shm_collectives.h: the collectives that carry a sharded optimizer's
// gradients and parameters, and a mixture of experts' tokens.
// Through MPICH (MPI_Iallgatherv, MPI_Ireduce_scatter) they ran at 0.71-0.84x
// and 0.62-0.99x the speed of MPICH's own blocking calls at 1-64 MiB per rank
// (2026-11-29; docs/design.md, "Shared-memory allreduce", has what the slots
// gave). Here every chunk costs one barrier, as a broadcast's: a rank refills
// a slot of its pair only after the barrier that follows everyone's reads of
// it.
//
// Cross-memory attach (process_vm_readv, one copy instead of two) was
// measured and not taken: 16 MiB from another process in 3.7-3.9 ms here,
// where the slots' two copies, the second one from the cache, broadcast 16
// MiB in 1.7 ms.
#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "kernels/pair_sum.h"
#include "transport/mpi/shm_collectives.h"

namespace fuseopt {
namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
  return offsets;
}

// The part of a size-element block that chunk k of q elements covers.
int64_t piece(int64_t size, int64_t k, int64_t q) {
  return std::max(int64_t(0), std::min(q, size - k * q));
}

}  // namespace

void ShmCollectives::allgatherv(const void* send, void* recv, const std::vector<int64_t>& bytes) {
  if (!window_.allocated()) attach();
  const std::vector<int64_t> at = offsets_of(bytes);
  const int64_t largest = *std::max_element(bytes.begin(), bytes.end());
  const char* mine = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const bool large = at.back() + bytes.back() > kStreamedOutputBytes;
  for (int64_t k = 0; k * slot_bytes_ < largest; ++k) {
    const int64_t from = k * slot_bytes_, len = piece(bytes[rank_], k, slot_bytes_);
    const int64_t chunk_bytes = std::min(largest - from, slot_bytes_);  // the largest piece
    const int64_t base = next_slot_base(chunk_bytes);
    const Chunk chunk(*this, StoreChoice::kAllgather, chunk_bytes);
    const bool stream_out = large || chunk.streamed();
    copy(slots(rank_) + base, mine + from, len, chunk.streamed());
    copy(out + at[rank_] + from, mine + from, len, stream_out);  // read just above
    sync();
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        copy(out + at[r] + from, slots(r) + base, piece(bytes[r], k, slot_bytes_), stream_out);
  }
}

bool ShmCollectives::alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                               void* recv, const std::vector<int64_t>& recv_bytes,
                               int64_t min_bytes) {
  if (!window_.allocated()) attach();
  // Agreement: every rank publishes what it sends in all and its largest
  // block for another rank; one barrier, and every rank reads the same figures.
  const int set = static_cast<int>(alltoalls_++ % 2);
  int64_t* mine = control_words(rank_, set);
  mine[0] = mine[1] = 0;
  for (int d = 0; d < size_; ++d) {
    mine[0] += send_bytes[d];
    if (d != rank_) mine[1] = std::max(mine[1], send_bytes[d]);
  }
  sync();
  int64_t exchanged = 0, largest = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t* theirs = control_words(r, set);
    exchanged += theirs[0];
    largest = std::max(largest, theirs[1]);
  }
  if (exchanged < min_bytes) return false;
  // Chunk k carries bytes [k q, (k + 1) q) of every block between two ranks:
  // rank s's block for rank d at place (d - s - 1) mod size in s's slot (its
  // own block goes straight from send to recv, not through the slot).
  const std::vector<int64_t> from = offsets_of(send_bytes), to = offsets_of(recv_bytes);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const bool large = to.back() + recv_bytes.back() > kStreamedOutputBytes;
  copy(out + to[rank_], in + from[rank_], send_bytes[rank_], large);  // as allgatherv's own piece
  const int64_t q = slot_bytes_ / (size_ - 1) / kSlotAlign * kSlotAlign;
  auto place = [&](int s, int d) { return ((d - s - 1 + size_) % size_) * q; };
  for (int64_t k = 0; k * q < largest; ++k) {
    const int64_t base = next_slot_base(q * (size_ - 1));
    const Chunk chunk(*this, StoreChoice::kAlltoall, std::min(largest - k * q, q) * (size_ - 1));
    for (int d = 0; d < size_; ++d)
      if (d != rank_)
        copy(slots(rank_) + base + place(rank_, d), in + from[d] + k * q,
             piece(send_bytes[d], k, q), chunk.streamed());
    sync();
    for (int s = 0; s < size_; ++s)
      if (s != rank_)
        copy(out + to[s] + k * q, slots(s) + base + place(s, rank_), piece(recv_bytes[s], k, q),
             large || chunk.streamed());
  }
  return true;
}

void ShmCollectives::reducescatter(const void* send, void* recv,
                                   const std::vector<int64_t>& counts, fuseopt_dtype_t dtype,
                                   fuseopt_reduce_op_t op) {
  // Chunk k holds the k-th q elements of every rank's block, so that every
  // rank publishes and reduces in every chunk (a chunk of the plain element
  // stream would fall within one rank's block and leave the others idle).
  // Rank s publishes its part of rank r's block at element r * q of its slot.
  if (!window_.allocated()) attach();
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t q = slot_bytes_ / esize / size_;
  const std::vector<int64_t> at = offsets_of(counts);
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  const MPI_Datatype type = MpiWorld::datatype(dtype);
  const MPI_Op mpi_op = MpiWorld::op(op, dtype);
  const bool two_floats = size_ == 2 && (op == FUSEOPT_SUM || op == FUSEOPT_AVERAGE) &&
                          (dtype == FUSEOPT_FLOAT32 || dtype == FUSEOPT_FLOAT64);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  for (int64_t k = 0; k * q < largest; ++k) {
    const int64_t base = next_slot_base(q * esize * size_);  // rank r's part at r * q
    auto slot = [&](int s, int r) { return slots(s) + base + r * q * esize; };
    auto input = [&](int r) { return in + (at[r] + k * q) * esize; };
    const Chunk chunk(*this, StoreChoice::kReducescatter,
                      std::min(largest - k * q, q) * esize * size_);
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        copy(slot(rank_, r), input(r), piece(counts[r], k, q) * esize, chunk.streamed());
    sync();
    const int64_t len = piece(counts[rank_], k, q);
    if (len == 0) continue;
    char* const result = out + k * q * esize;
    auto pair_sum = [&](auto zero) {
      using T = decltype(zero);
      kernels::pair_sum_publish(reinterpret_cast<const T*>(input(rank_)), 1.0,
                                reinterpret_cast<const T*>(slot(1 - rank_, rank_)),
                                reinterpret_cast<T*>(result), nullptr, 1.0, len);
    };
    if (two_floats && dtype == FUSEOPT_FLOAT32) {
      pair_sum(0.0f);
    } else if (two_floats) {
      pair_sum(0.0);
    } else {
      std::memcpy(result, input(rank_), len * esize);
      for (int j = 1; j < size_; ++j)
        mpi_check(MPI_Reduce_local(slot((rank_ + j) % size_, rank_), result,
                                   static_cast<int>(len), type, mpi_op),
                  "MPI_Reduce_local");
    }
  }
}

}  // namespace fuseopt
