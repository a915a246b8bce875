// Completing a non-blocking MPI request without holding a core: polled on
// kCollectivePoll. See Note [Poll schedule] (poll_schedule.h).
#pragma once

#include <mpi.h>

namespace fuseopt {

void wait_politely(MPI_Request* request, const char* what);

}  // namespace fuseopt
