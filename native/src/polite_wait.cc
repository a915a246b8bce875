#include "polite_wait.h"

#include "mpi_world.h"
#include "poll_schedule.h"

namespace fuseopt {

void wait_politely(MPI_Request* request, const char* what) {
  poll_until(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
        return done != 0;
      },
      kCollectivePoll);
}

}  // namespace fuseopt
