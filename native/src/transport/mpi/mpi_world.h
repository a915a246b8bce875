// The process's MPI state as the core sees it: initialisation at thread level
// SERIALIZED (one fuseopt thread at a time calls MPI; THREAD_MULTIPLE measured
// 2-5x slower, and is asked for only by the mpi_thread_multiple knob), a private duplicate of MPI_COMM_WORLD with errors returned rather
// than aborting, the node-local and cross-node communicators, and the mapping
// from fuseopt dtypes and reduce ops to MPI's (16-bit floats need our own ops).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

// The MPI library this process runs (MpiWorld::library).
struct MpiLibrary {
  std::string version;  // MPI_Get_library_version
  std::string path;     // the shared object MPI's symbols came from, or ""
  int standard_major = 0, standard_minor = 0;
};

class MpiWorld {
 public:
  // Initialises MPI if nobody has (on the calling thread, which then also
  // finalises it at process exit), at THREAD_MULTIPLE if thread_multiple,
  // else SERIALIZED. emulated_local_size > 0 pretends each node holds that
  // many consecutive ranks (to test topology on one host).
  MpiWorld(int emulated_local_size, bool thread_multiple);
  ~MpiWorld();
  // Collective over this world: a world of the ranks that pass member (ranks
  // in this world's order; the same nodes). Null where member is false.
  std::unique_ptr<MpiWorld> subset(bool member) const;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  MPI_Comm comm() const { return comm_; }
  MPI_Comm local_comm() const { return local_comm_; }
  MPI_Comm cross_comm() const { return cross_comm_; }
  // Agreed reductions' own communicator (Note [Agreed reductions]), so that
  // their traffic never matches a message of the loop's collectives.
  MPI_Comm agreed_comm() const { return agreed_comm_; }
  const fuseopt_comm_info_t& info() const { return info_; }

  // After a peer is lost MPI_Finalize would wait for it forever: skip it at
  // exit, and refuse to initialise again in this process.
  static void abandon();
  static bool abandoned();
  // Whether MPI runs at MPI_THREAD_MULTIPLE (false before it is initialised).
  static bool thread_multiple();

  // Callable before MPI_Init (MPI allows these two queries then).
  static MpiLibrary library();

  static MPI_Datatype datatype(fuseopt_dtype_t dtype);
  static MPI_Op op(fuseopt_reduce_op_t op, fuseopt_dtype_t dtype);

 private:
  MpiWorld(MPI_Comm comm, int node);  // adopts comm
  // Node-local and cross-node communicators; node is equal on one host.
  void split_nodes(int node);

  int node_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  MPI_Comm agreed_comm_ = MPI_COMM_NULL;
  fuseopt_comm_info_t info_{};
};

// Throws Error(FUSEOPT_BACKEND, "<what> failed: <MPI's message>") unless rc is
// MPI_SUCCESS.
void mpi_check(int rc, const char* what);

}  // namespace fuseopt
