// Adasum: adaptive summation of gradients (Maleki et al., "Scaling Distributed
// Training with Adaptive Summation", MLSys 2021), as Horovod runs it on host
// memory over MPI.
//
// Vocabulary. The pairwise operator combines two gradients a and b of one
// tensor into
//     adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// with a coefficient of 1 for a zero vector. Horovod gives 1 below
// sqrt(DBL_MIN), which for float16, bfloat16 and float32 is the same test;
// for float64 fuseopt keeps the exponents of the sums apart (ScaledSum in
// adasum.cc), so vectors at either end of the float64 range (whose squares
// leave the double range) combine like any other, where Horovod sums them.
// Orthogonal gradients add (a.b = 0); parallel equal ones average (a = b
// gives a). Over P ranks (a power of two) the result is the binary tree of
// pairwise combinations: at *level* L = 1, 2, 4, ... the *left* group (the L
// ranks whose bit L is clear) holds the combination A of its ranks, the
// *right* group the combination B, and the 2L ranks become adasum(A, B).
//
// The algorithm is vector halving, distance doubling: at each level a rank
// swaps half of its current slice with its partner (rank ^ L) and keeps the
// other half, so that the 2L ranks of a group hold disjoint slices of both A
// and B. Dot products and norms are summed per slice, then over the group
// (an MPI allreduce of 3 doubles per tensor on the group's communicator), so
// each tensor of a fused bucket gets its own coefficients: fused Adasum is
// per-tensor Adasum. Afterwards each rank holds 1/P of the result, and the
// levels run backwards to gather the whole vector everywhere.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

class AdasumComms {
 public:
  // Collective over comm (the first Adasum bucket of a job creates them).
  explicit AdasumComms(MPI_Comm comm);
  ~AdasumComms();
  MPI_Comm comm() const { return comm_; }
  // The communicator of the 2L ranks that combine at level L = 1 << index.
  MPI_Comm group(int index) const { return groups_[index]; }
  // The dot products' element (a sum and its power of two) and their sum.
  MPI_Datatype scaled_sum_type() const { return scaled_sum_type_; }
  MPI_Op scaled_sum_op() const { return scaled_sum_op_; }

 private:
  MPI_Comm comm_;
  std::vector<MPI_Comm> groups_;
  MPI_Datatype scaled_sum_type_;
  MPI_Op scaled_sum_op_;
};

// The dtypes Adasum reduces: float16, bfloat16, float32, float64 (checked at enqueue).
bool adasum_dtype(fuseopt_dtype_t dtype);

// Whether fuseopt can run Adasum on size ranks; sets *why if not.
bool adasum_supported(int size, const char** why);

// In place: buf holds the tensors of one bucket end to end (tensor_counts
// elements each); every rank ends with the same Adasum of all ranks' buffers.
void adasum_allreduce(const AdasumComms& comms, void* buf,
                      const std::vector<int64_t>& tensor_counts, fuseopt_dtype_t dtype);

}  // namespace fuseopt
