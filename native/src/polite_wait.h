// Completing an MPI request without holding a core.
//
// MPICH's blocking calls busy-poll until the slowest rank arrives. When ranks
// share cores with training threads (two ranks on two cores here; any job
// whose framework uses every core), a loop thread spinning in a collective
// takes the CPU that its own rank's backward pass, or the late rank's loop
// thread, needs: measured here with the PyTorch MLP, a 45 KB bucket took up to
// 36 ms. Data-plane collectives are therefore posted non-blocking and polled:
// a short spin (the peer is usually right behind), then yields, then sleeps
// that grow, so a long wait costs next to no CPU.
#pragma once

#include <mpi.h>

namespace fuseopt {

void wait_politely(MPI_Request* request, const char* what);

}  // namespace fuseopt
