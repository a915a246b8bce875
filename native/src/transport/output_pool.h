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
//
// Note [Huge-page results]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A collective writes its result at memory speed, and with 4 KiB pages each
// 4 KiB of it is a TLB entry of its own (and a page fault the first time).
// Where the kernel's transparent huge pages are in "madvise" mode (the
// default of many distributions, and of this project's VM) a block gets
// 2 MiB pages only if asked for: numpy asks for its arrays of 4 MiB and
// more, malloc does not. Blocks of kHugePageBytes and more start on a huge
// page and are advised (MADV_HUGEPAGE). Measured 2026-12-06, 2 ranks, cores
// apart, three interleaved jobs each, allgather of 4 / 16 / 64 MiB per rank:
// 0.55-0.62 / 2.19-2.56 / 9.2-11.1 ms against 0.70-0.74 / 3.35-3.63 /
// 11.8-14.0 with malloc's blocks (alltoall and reducescatter unchanged).
#pragma once

#include <cstdint>

namespace fuseopt {

constexpr int64_t kPooledMinBytes = int64_t(1) << 20;
constexpr int64_t kIdleMaxBytes = int64_t(1) << 30;
constexpr int64_t kHugePageBytes = int64_t(2) << 20;

// A block of at least `bytes` (one byte for zero), or nullptr.
void* output_alloc(int64_t bytes);
// Takes back a block of output_alloc's, or frees any other malloc'ed block.
void output_free(void* p);

}  // namespace fuseopt
