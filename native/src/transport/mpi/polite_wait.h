// Completing a non-blocking MPI request without holding a core: polled on
// kCollectivePoll, or bulk_poll(bytes) for a collective that moves `bytes`.
// See Note [Poll schedule] (poll_schedule.h).
#pragma once

#include <mpi.h>

#include <cstdint>

namespace fuseopt {

void wait_politely(MPI_Request* request, const char* what, int64_t bytes = 0);

}  // namespace fuseopt
