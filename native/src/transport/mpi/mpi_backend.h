// Host-memory collectives over MPI. Runs on the loop thread only.
#pragma once

#include <memory>

#include "transport/backend.h"
#include "transport/mpi/adasum.h"
#include "transport/mpi/mpi_world.h"
#include "transport/mpi/shm_collectives.h"

namespace fuseopt {

class MpiBackend : public Backend {
 public:
  // Collective (sets up the shared-memory path). shm_min_bytes: see
  // fuseopt_config_t.
  // hierarchical: see fuseopt_config_t (used only with several multi-rank nodes).
  MpiBackend(const MpiWorld& world, int64_t shm_min_bytes, bool hierarchical,
             int64_t shm_stores);
  const char* name() const override { return "mpi"; }

  void allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                 fuseopt_reduce_op_t op) override;
  // Served by the shared-memory path when it applies.
  bool allreduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                          fuseopt_reduce_op_t op, double postscale) override;
  void reduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
              fuseopt_reduce_op_t op, int root) override;
  bool reduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                       fuseopt_reduce_op_t op, double postscale, int root) override;
  void broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root) override;
  bool broadcast_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                          int root) override;
  void allgatherv(const void* send, int64_t send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override;
  void alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                 const std::vector<int64_t>& recv_bytes) override;
  void alltoall_counts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) override;
  void reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                     fuseopt_dtype_t dtype, fuseopt_reduce_op_t op) override;
  void barrier() override;
  void adasum(void* buf, const std::vector<int64_t>& tensor_counts,
              fuseopt_dtype_t dtype) override;
  bool all_ok(bool ok) override;
  // MPI-3 counts and displacements are int.
  bool fits(const std::vector<int64_t>& send_bytes,
            const std::vector<int64_t>& recv_bytes) const override;
  // Collective: frees the shared-memory window; MPI's path serves what follows.
  void release_shared_memory() { shm_.reset(); }

 private:
  // Whether the shared-memory path takes this many elements of dtype.
  bool shm_takes(const std::vector<Segment>& segments, fuseopt_dtype_t dtype) const;
  // The same for a collective of this many bytes in all (the same on every rank).
  bool shm_takes_bytes(int64_t bytes) const;
  void hierarchical_allreduce(const void* send, void* recv, int n, MPI_Datatype type, MPI_Op op);

  const MpiWorld& world_;
  bool hierarchical_ = false;
  int64_t shm_min_bytes_;
  std::unique_ptr<ShmCollectives> shm_;  // null unless every rank shares this host
  std::unique_ptr<AdasumComms> adasum_comms_;  // made by the first Adasum bucket
};

}  // namespace fuseopt
