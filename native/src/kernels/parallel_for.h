// Splitting a kernel's work among threads: the framework's own thread and up
// to threads - 1 helpers of a pool that lives as long as the process.
//
// A kernel is told how many threads it may use (torch.get_num_threads(), the
// TensorFlow intra-op setting): a rank that trains with several threads must
// not find its SyncBatchNorm single-threaded where torch's BatchNorm is not.
// The pool is process-wide, unlike everything else in the core, because the
// kernels are (they run without a context). Idle helpers sleep on a condition
// variable: they cost nothing between calls, and a wake-up (tens of
// microseconds here) is paid only by calls large enough to split.
#pragma once

#include <cstdint>
#include <functional>

namespace fuseopt {
namespace kernels {

// Runs task(i) for every i in [0, tasks), on the calling thread and up to
// threads - 1 pool threads, and returns when all are done. The first
// exception a task throws is rethrown here (the other tasks still run).
void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& task);

}  // namespace kernels
}  // namespace fuseopt
