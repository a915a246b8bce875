// The data-plane interface: one collective on one buffer, already negotiated
// and fused. Backends (MPI for host memory; NCCL and HCCL for device memory,
// through device_backend.h, chosen by backend_registry.h) implement what they
// can. Anything left out fails with "backend X does not support Y" instead
// of misbehaving.
//
// Counts are in elements of dtype; byte-sized arguments say so. A send buffer
// equal to the receive buffer means in place.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

// One tensor of a fused allreduce: `count` elements read from `in`, scaled by
// `prescale` on the way in; the result, scaled by the bucket's postscale, lands
// in `out` (which may equal `in`). Both hold `memory_dtype`, which may be
// float32 where the bucket reduces a 16-bit float: convert_copy on the copies.
struct Segment {
  const void* in;
  void* out;
  int64_t count;
  double prescale;
  fuseopt_dtype_t memory_dtype;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  virtual void allreduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                         fuseopt_reduce_op_t op);
  // Allreduce of a bucket's tensors without a fusion buffer, for a backend
  // that can read and write them in place of one. False when it can't (the
  // executor then packs them into its fusion buffer and calls allreduce).
  virtual bool allreduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                  fuseopt_reduce_op_t op, double postscale) {
    return false;
  }
  // Reduces every rank's send into root's recv (send == recv: in place).
  // Other ranks' recv is not written.
  virtual void reduce(const void* send, void* recv, int64_t count, fuseopt_dtype_t dtype,
                      fuseopt_reduce_op_t op, int root);
  // reduce of a bucket's tensors without a fusion buffer, as allreduce_segments.
  virtual bool reduce_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                               fuseopt_reduce_op_t op, double postscale, int root) {
    return false;
  }
  virtual void broadcast(void* buf, int64_t count, fuseopt_dtype_t dtype, int root);
  // broadcast of a bucket's tensors (in == out) without a fusion buffer.
  virtual bool broadcast_segments(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                  int root) {
    return false;
  }
  // Concatenates every rank's bytes, rank order; recv_bytes[r] from rank r.
  virtual void allgatherv(const void* send, int64_t send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes);
  // send_bytes[r] go to rank r; recv_bytes[r] arrive from rank r.
  virtual void alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                         const std::vector<int64_t>& recv_bytes);
  // Exchanges one int64 per rank pair (used to learn alltoall receive sizes).
  virtual void alltoall_counts(const std::vector<int64_t>& send, std::vector<int64_t>* recv);
  // Reduces, then leaves recv_counts[r] elements of the result on rank r.
  virtual void reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                             fuseopt_dtype_t dtype, fuseopt_reduce_op_t op);
  virtual void barrier();
  // Adasum (adasum.h) of a bucket of tensor_counts tensors laid end to end, in place.
  virtual void adasum(void* buf, const std::vector<int64_t>& tensor_counts,
                      fuseopt_dtype_t dtype);
  // True on every rank iff ok is true on every rank. Used before a collective
  // that a rank may be unable to run (buffer too large, out of memory), so
  // that all ranks skip it together instead of some waiting forever.
  virtual bool all_ok(bool ok);
  // Whether one v-collective can carry these per-rank byte counts.
  virtual bool fits(const std::vector<int64_t>& send_bytes,
                    const std::vector<int64_t>& recv_bytes) const {
    return true;
  }

 protected:
  [[noreturn]] void unsupported(const char* what) const;
};

}  // namespace fuseopt
