// The host kernels of the shared-memory collectives: the reduction step of
// the two-rank allreduce
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
// (the reduce-scatter, shm_gather.cc). stream_out, stream_publish: out, or
// publish, is written past the caches (see stream_copy; Note [Streamed
// slots] in transport/mpi/store_choice.h).
void pair_sum_publish(const float* in, double pre, const float* other, float* out,
                      float* publish, double post, int64_t n, bool stream_out = false,
                      bool stream_publish = false);
void pair_sum_publish(const double* in, double pre, const double* other, double* out,
                      double* publish, double post, int64_t n, bool stream_out = false,
                      bool stream_publish = false);

// memcpy with streaming stores, for a result nobody reads before the
// collective ends (an out-of-place allreduce's output, an allgather's): in
// place, the output's lines are in the cache already; apart, a plain store
// first reads each line from memory, a streaming store does not (measured
// here, 64 MiB from a cached 1 MiB source: 11.2-12.2 ms with memcpy, 4.6-6.1
// ms streamed).
void stream_copy(void* dst, const void* src, int64_t bytes);

}  // namespace kernels
}  // namespace fuseopt
