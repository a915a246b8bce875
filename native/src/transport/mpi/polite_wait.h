// Waiting for MPI without holding a core, and the side work a waiting thread
// hands to the one that holds MPI.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace fuseopt {

// Note [Side work]
// ~~~~~~~~~~~~~~~~
// MPI runs SERIALIZED: one thread at a time calls it, the one that holds the
// loop's rounds (Note [Turns]). A framework thread in an agreed reduction
// (Note [Agreed reductions]) therefore waits for the loop thread to let go,
// and the loop thread holds on through a whole bucket's collective: during
// backward, with gradients in flight, each SyncBatchNorm layer's statistics
// waited out a bucket (ResNet-style CNN, batch 8: SyncBatchNorm added 6.4 ms
// to a step through fuseopt against 3.4 ms through raw MPI, where nothing
// else is in flight). So a waiting thread publishes its MPI work here, and
// the thread that holds MPI advances it between two polls of its own
// requests (wait_politely, the negotiation rounds): the agreed reduction
// moves on while the bucket's collective is in flight, on another
// communicator, without a second thread in MPI.
//
// One piece of work at a time (agreed reductions of one process run one
// after the other); advance() must never throw and never block.
class SideWork {
 public:
  virtual ~SideWork() = default;
  // By the thread that holds MPI.
  virtual void advance() = 0;
};

// Publishes work until the returned guard is withdrawn; a second publication
// while one is up is ignored (that thread advances its own work itself).
class PublishedSideWork {
 public:
  explicit PublishedSideWork(SideWork* work);
  ~PublishedSideWork();  // waits for an advance() in progress to end
  PublishedSideWork(const PublishedSideWork&) = delete;
  PublishedSideWork& operator=(const PublishedSideWork&) = delete;

 private:
  bool published_ = false;
};

// By the thread that holds MPI, between polls: advances the published work,
// if any. A relaxed load when there is none.
void run_side_work();
// Whether work is published: a thread that holds MPI and would sleep (a
// negotiation round's pause) polls instead.
bool side_work_pending();

// Completes a non-blocking MPI request polled on kCollectivePoll, or
// bulk_poll(bytes) for a collective that moves `bytes` (Note [Poll schedule],
// poll_schedule.h), advancing side work between polls.
void wait_politely(MPI_Request* request, const char* what, int64_t bytes = 0);

}  // namespace fuseopt
