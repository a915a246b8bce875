// The reduction step of the two-rank shared-memory allreduce
// (transport/mpi/shm_collectives.cc): this rank's elements plus the other
// rank's, written to the output and to the slot the other rank reads, in one
// pass, in vector clones per instruction set (vector_lanes.h): at -O2 GCC
// leaves such a loop scalar (three pointers it cannot prove apart), which made
// the step compute-bound (16 MiB: 4.2-4.5 ms for 32 MiB of traffic, against
// ~1.4 ms for a two-reads-one-write loop over the same bytes here).
#pragma once

#include <cstdint>

namespace fuseopt {
namespace kernels {

// out[i] = publish[i] = T((other[i] + T(in[i] * pre)) * post), the products in
// double (as scale_copy rounds), so the bits equal the staged path's whatever
// the CPU. out may equal in; publish is apart from both, or nullptr: out only
// (the reduce-scatter, shm_gather.cc).
void pair_sum_publish(const float* in, double pre, const float* other, float* out,
                      float* publish, double post, int64_t n);
void pair_sum_publish(const double* in, double pre, const double* other, double* out,
                      double* publish, double post, int64_t n);

}  // namespace kernels
}  // namespace fuseopt
