#include "transport/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "base/error.h"
#include "base/dtype.h"
#include "base/log.h"
#include "transport/mpi/polite_wait.h"

namespace fuseopt {
namespace {

// MPI-3 counts are int. Reductions and broadcasts are element-wise, so larger
// buffers go through in chunks; the v-collectives take int byte offsets and
// are refused beyond that rather than silently truncated.
constexpr int64_t kChunkElements = int64_t(1) << 30;

bool fits_int_counts(const std::vector<int64_t>& v) {
  int64_t total = 0;
  for (int64_t x : v) {
    total += x;
    if (x > INT_MAX || total > INT_MAX) return false;
  }
  return true;
}

std::vector<int> to_int_vector(const std::vector<int64_t>& v, const char* what) {
  std::vector<int> out(v.size());
  int64_t total = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    total += v[i];
    if (v[i] > INT_MAX || total > INT_MAX)
      throw Error(FUSEOPT_UNSUPPORTED, std::string(what) + " of more than 2 GiB in one call");
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t(0));
}

}  // namespace

MpiBackend::MpiBackend(const MpiWorld& world, int64_t shm_min_bytes, bool hierarchical,
                       int64_t shm_stores)
    : world_(world), shm_min_bytes_(shm_min_bytes) {
  // With one node, or one rank per node, a hierarchy only adds steps.
  const fuseopt_comm_info_t& info = world.info();
  hierarchical_ = hierarchical && info.cross_size > 1 && info.local_size > 1;
  if (hierarchical_)
    FUSEOPT_LOG(kInfo, "hierarchical allreduce over " << info.cross_size << " nodes of "
                                                      << info.local_size << " ranks");
  if (shm_min_bytes_ >= 0) {
    shm_.reset(new ShmCollectives(world, static_cast<int>(shm_stores)));
    if (!shm_->usable()) shm_.reset();
    static const char* const kStores[] = {
        "plain or streaming stores, whichever is faster", "plain stores", "streaming stores"};
    const char* stores = kStores[shm_stores];
    const char* ops = "(allreduce, reduce, broadcast, allgather, reducescatter, alltoall)";
    if (shm_ && shm_min_bytes_ == 0)
      FUSEOPT_LOG(kInfo, "collectives of every size " << ops << " use the shared-memory path ("
                                                      << stores << ")");
    else if (shm_)
      FUSEOPT_LOG(kInfo, "collectives of " << shm_min_bytes_ << " bytes and more " << ops
                                           << " use the shared-memory path (" << stores << ")");
  }
}

void MpiBackend::allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                           fuseopt_reduce_op_t op) {
  const size_t esize = dtype_size(dtype);
  if (allreduce_segments({{send, recv, count, 1.0, dtype}}, dtype, op, 1.0)) return;
  for (int64_t done = 0; done < count; done += kChunkElements) {
    int n = static_cast<int>(std::min(kChunkElements, count - done));
    char* r = static_cast<char*>(recv) + done * esize;
    const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + done * esize;
    if (hierarchical_) {
      hierarchical_allreduce(s, r, n, MpiWorld::datatype(dtype), MpiWorld::op(op, dtype));
      continue;
    }
    MPI_Request request;
    mpi_check(MPI_Iallreduce(s, r, n, MpiWorld::datatype(dtype), MpiWorld::op(op, dtype),
                             world_.comm(), &request),
              "MPI_Iallreduce");
    wait_politely(&request, "MPI_Iallreduce", static_cast<int64_t>(n) * esize);
  }
}

bool MpiBackend::shm_takes(const std::vector<Segment>& segments, fuseopt_dtype_t dtype) const {
  int64_t count = 0;
  for (const Segment& s : segments) count += s.count;
  return shm_takes_bytes(count * static_cast<int64_t>(dtype_size(dtype)));
}

bool MpiBackend::shm_takes_bytes(int64_t bytes) const {
  return shm_ && bytes > 0 && bytes >= shm_min_bytes_;
}

bool MpiBackend::allreduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                    fuseopt_reduce_op_t op, double postscale) {
  if (!shm_takes(segments, dtype)) return false;
  shm_->allreduce(segments, dtype, op, postscale);
  return true;
}

bool MpiBackend::reduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                 fuseopt_reduce_op_t op, double postscale, int root) {
  if (!shm_takes(segments, dtype)) return false;
  shm_->reduce(segments, dtype, op, postscale, root);
  return true;
}

bool MpiBackend::broadcast_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                    int root) {
  if (!shm_takes(segments, dtype)) return false;
  shm_->broadcast(segments, dtype, root);
  return true;
}

void MpiBackend::reduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                        fuseopt_reduce_op_t op, int root) {
  const size_t esize = dtype_size(dtype);
  const bool at_root = world_.info().rank == root;
  for (int64_t done = 0; done < count; done += kChunkElements) {
    int n = static_cast<int>(std::min(kChunkElements, count - done));
    char* r = static_cast<char*>(recv) + done * esize;
    const char* s = static_cast<const char*>(send) + done * esize;
    MPI_Request request;
    // MPI_IN_PLACE is the root's only; the others' recv is ignored.
    mpi_check(MPI_Ireduce(at_root && send == recv ? MPI_IN_PLACE : s, r, n,
                          MpiWorld::datatype(dtype), MpiWorld::op(op, dtype), root,
                          world_.comm(), &request),
              "MPI_Ireduce");
    wait_politely(&request, "MPI_Ireduce", static_cast<int64_t>(n) * esize);
  }
}

// Reduce to each node's leader (local rank 0) over the fast intra-node links,
// allreduce among the leaders (the only traffic between nodes: one copy per
// node instead of one per rank), then broadcast within each node. Every rank
// ends with the leaders' result, so all ranks agree bit for bit.
void MpiBackend::hierarchical_allreduce(const void* send, void* recv, int n, MPI_Datatype type,
                                        MPI_Op op) {
  const bool leader = world_.info().local_rank == 0;
  const void* local_send = send;
  if (send == MPI_IN_PLACE && !leader) local_send = recv;  // IN_PLACE is for the root only
  mpi_check(MPI_Reduce(local_send, leader ? recv : nullptr, n, type, op, 0, world_.local_comm()),
            "MPI_Reduce(node)");
  if (leader)
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, recv, n, type, op, world_.cross_comm()),
              "MPI_Allreduce(leaders)");
  mpi_check(MPI_Bcast(recv, n, type, 0, world_.local_comm()), "MPI_Bcast(node)");
}

void MpiBackend::broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) {
  const size_t esize = dtype_size(dtype);
  for (int64_t done = 0; done < count; done += kChunkElements) {
    int n = static_cast<int>(std::min(kChunkElements, count - done));
    MPI_Request request;
    mpi_check(MPI_Ibcast(static_cast<char*>(buf) + done * esize, n, MpiWorld::datatype(dtype),
                         root, world_.comm(), &request),
              "MPI_Ibcast");
    wait_politely(&request, "MPI_Ibcast", static_cast<int64_t>(n) * esize);
  }
}

void MpiBackend::allgatherv(const void* send, int64_t send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) {
  if (shm_takes_bytes(total(recv_bytes))) return shm_->allgatherv(send, recv, recv_bytes);
  std::vector<int> counts = to_int_vector(recv_bytes, "allgather");
  std::vector<int> displs = displacements(counts);
  MPI_Request request;
  mpi_check(MPI_Iallgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(),
                            displs.data(), MPI_BYTE, world_.comm(), &request),
            "MPI_Iallgatherv");
  wait_politely(&request, "MPI_Iallgatherv", total(recv_bytes));
}

void MpiBackend::alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                           const std::vector<int64_t>& recv_bytes) {
  // Each rank knows only its own counts: the shared-memory path agrees on the
  // exchange's size before it decides (MPICH's own, polled, took 2.2-4.5x the
  // time of its blocking MPI_Alltoall at 256 KiB-256 MiB here).
  const int64_t min_bytes = std::max<int64_t>(1, shm_min_bytes_);
  if (shm_ && shm_->alltoallv(send, send_bytes, recv, recv_bytes, min_bytes)) return;
  std::vector<int> scounts = to_int_vector(send_bytes, "alltoall");
  std::vector<int> rcounts = to_int_vector(recv_bytes, "alltoall");
  std::vector<int> sdispls = displacements(scounts), rdispls = displacements(rcounts);
  MPI_Request request;
  mpi_check(MPI_Ialltoallv(send, scounts.data(), sdispls.data(), MPI_BYTE, recv, rcounts.data(),
                           rdispls.data(), MPI_BYTE, world_.comm(), &request),
            "MPI_Ialltoallv");
  wait_politely(&request, "MPI_Ialltoallv", std::max(total(send_bytes), total(recv_bytes)));
}

void MpiBackend::alltoall_counts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) {
  recv->assign(send.size(), 0);
  mpi_check(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv->data(), 1, MPI_INT64_T,
                         world_.comm()),
            "MPI_Alltoall");
}

void MpiBackend::reducescatter(const void* send, void* recv,
                               const std::vector<int64_t>& recv_counts, fuseopt_dtype_t dtype,
                               fuseopt_reduce_op_t op) {
  if (shm_takes_bytes(total(recv_counts) * static_cast<int64_t>(dtype_size(dtype))))
    return shm_->reducescatter(send, recv, recv_counts, dtype, op);
  std::vector<int> counts = to_int_vector(recv_counts, "reducescatter");
  MPI_Request request;
  mpi_check(MPI_Ireduce_scatter(send, recv, counts.data(), MpiWorld::datatype(dtype),
                                MpiWorld::op(op, dtype), world_.comm(), &request),
            "MPI_Ireduce_scatter");
  wait_politely(&request, "MPI_Ireduce_scatter",
                total(recv_counts) * static_cast<int64_t>(dtype_size(dtype)));
}

void MpiBackend::barrier() {
  MPI_Request request;
  mpi_check(MPI_Ibarrier(world_.comm(), &request), "MPI_Ibarrier");
  wait_politely(&request, "MPI_Ibarrier");
}

bool MpiBackend::fits(const std::vector<int64_t>& send_bytes,
                      const std::vector<int64_t>& recv_bytes) const {
  return fits_int_counts(send_bytes) && fits_int_counts(recv_bytes);
}

bool MpiBackend::all_ok(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  mpi_check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world_.comm()), "MPI_Allreduce(ok)");
  return all == 1;
}

void MpiBackend::adasum(void* buf, const std::vector<int64_t>& tensor_counts,
                        fuseopt_dtype_t dtype) {
  // Every rank runs the same buckets in the same order, so the first Adasum
  // bucket is a safe place for the collective set-up.
  if (!adasum_comms_) adasum_comms_.reset(new AdasumComms(world_.comm()));
  adasum_allreduce(*adasum_comms_, buf, tensor_counts, dtype);
}

}  // namespace fuseopt
