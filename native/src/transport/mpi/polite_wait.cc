#include "transport/mpi/polite_wait.h"

#include "base/poll_schedule.h"
#include "transport/mpi/mpi_world.h"
#include "transport/mpi/side_work.h"

namespace fuseopt {

void wait_politely(MPI_Request* request, const char* what, int64_t bytes) {
  poll_until(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
        if (!done) run_side_work();  // Note [Side work]
        return done != 0;
      },
      bytes > 0 ? bulk_poll(bytes) : kCollectivePoll);
}

}  // namespace fuseopt
