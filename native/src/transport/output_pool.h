// Result buffers the runtime allocates (allgather, alltoall), recycled.
//
// Note [Output pool]
// ~~~~~~~~~~~~~~~~~~
// A training loop gathers the same sizes every step and drops each result
// before the next. glibc serves blocks of 32 MiB and more with a fresh mmap
// each time, so every such result paid a page fault per 4 KiB and the
// kernel's zeroing: a 32 MiB alltoall of 2 ranks took 22 ms here where
// 16 MiB took 4.5; with its result buffers recycled, 7-10 ms.
// Blocks of kPooledMinBytes and more that the caller frees (fuseopt_free)
// are kept, up to kIdleMaxBytes in all (1 GiB: a sharded optimizer's 134M
// parameters gather 0.5 GiB per step), and handed out again for a result of
// the same size: their pages stay mapped. Smaller blocks go to malloc, which
// recycles them itself. Any thread may free; the loop thread allocates.
#pragma once

#include <cstdint>

namespace fuseopt {

constexpr int64_t kPooledMinBytes = int64_t(1) << 20;
constexpr int64_t kIdleMaxBytes = int64_t(1) << 30;

// A block of at least `bytes` (one byte for zero), or nullptr.
void* output_alloc(int64_t bytes);
// Takes back a block of output_alloc's, or frees any other malloc'ed block.
void output_free(void* p);

}  // namespace fuseopt
