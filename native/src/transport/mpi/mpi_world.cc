#include "transport/mpi/mpi_world.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"
#include "base/dtype.h"
#include "base/log.h"

namespace fuseopt {
namespace {

// User reduction ops for float16 / bfloat16: each pairwise step widens to
// float, combines, and rounds once (half16.h). Created once per process, never
// freed (MPI ops must outlive every communicator that might use them).
template <fuseopt_dtype_t Dtype, fuseopt_reduce_op_t Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  combine16(Dtype, Op, static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len);
}

struct Ops16 {
  MPI_Op half[FUSEOPT_REDUCE_OP_COUNT];
  MPI_Op bfloat[FUSEOPT_REDUCE_OP_COUNT];
};
Ops16 g_ops16;
std::once_flag g_ops16_once;

template <fuseopt_reduce_op_t Kind>
void create_pair(Ops16& ops) {
  MPI_Op_create(&reduce16<FUSEOPT_FLOAT16, Kind>, 1, &ops.half[Kind]);
  MPI_Op_create(&reduce16<FUSEOPT_BFLOAT16, Kind>, 1, &ops.bfloat[Kind]);
}

void create_ops16() {
  create_pair<FUSEOPT_SUM>(g_ops16);
  create_pair<FUSEOPT_MIN>(g_ops16);
  create_pair<FUSEOPT_MAX>(g_ops16);
  create_pair<FUSEOPT_PRODUCT>(g_ops16);
  g_ops16.half[FUSEOPT_AVERAGE] = g_ops16.half[FUSEOPT_SUM];
  g_ops16.bfloat[FUSEOPT_AVERAGE] = g_ops16.bfloat[FUSEOPT_SUM];
}

bool g_we_initialized = false;
std::atomic<bool> g_thread_multiple{false};  // the level MPI provides, once initialised
std::atomic<bool> g_abandoned{false};

void finalize_at_exit() {
  if (g_abandoned) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(FUSEOPT_BACKEND, std::string(what) + " failed: " + std::string(text, len));
}

#ifdef __GLIBC__
// Runs first at exit (registered last) and ends the process with the same
// status before MPI's and UCX's own exit handlers and destructors run: they
// would tear down state that the abandoned loop thread is still inside (seen:
// a survivor exiting with SIGSEGV instead of its status, about 1 run in 30).
static void exit_without_library_teardown(int status, void*) {
  std::fflush(nullptr);
  _exit(status);
}

// MPI_Finalize waits for every rank to finalize. A process that is failing
// (non-zero exit status) must not wait there for peers that may never come,
// say one stuck in user code: it leaves at once, and mpiexec (or fuseoptrun)
// stops the rest of the job on seeing it fail.
static void finalize_on_exit(int status, void*) {
  if (status != 0) exit_without_library_teardown(status, nullptr);
  finalize_at_exit();
}
#endif

void MpiWorld::abandon() {
  if (g_abandoned.exchange(true)) return;
#ifdef __GLIBC__
  on_exit(exit_without_library_teardown, nullptr);
#endif
}

bool MpiWorld::abandoned() { return g_abandoned; }

bool MpiWorld::thread_multiple() { return g_thread_multiple; }

MpiLibrary MpiWorld::library() {
  MpiLibrary out;
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(version, &len) == MPI_SUCCESS)
    out.version.assign(version, static_cast<size_t>(std::max(0, len)));
  while (!out.version.empty() && (out.version.back() == '\n' || out.version.back() == ' '))
    out.version.pop_back();
  MPI_Get_version(&out.standard_major, &out.standard_minor);
  // Which file the loader bound MPI's symbols to: the truth, whatever the
  // build-time RPATH said (LD_LIBRARY_PATH or LD_PRELOAD may have won).
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&MPI_Get_library_version), &info) && info.dli_fname)
    out.path = info.dli_fname;
  return out;
}

namespace {

// MPI itself, the first time in this process; then our 16-bit float ops.
void start_mpi(bool thread_multiple) {
  if (g_abandoned)
    throw Error(FUSEOPT_RANK_FAILED,
                "fuseopt was aborted in this process after a rank failure; MPI cannot be used "
                "again here: restart the job (from a checkpoint)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr,
                              thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED,
                              &provided),
              "MPI_Init_thread");
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    // Finalize at process exit rather than at shutdown, so a process can
    // init -> shutdown -> init again (MPI cannot be initialised twice).
#ifdef __GLIBC__
    if (!g_we_initialized) on_exit(finalize_on_exit, nullptr);
#else
    if (!g_we_initialized) std::atexit(finalize_at_exit);
#endif
    g_we_initialized = true;
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    // fuseopt's loop thread calls MPI at any time (at least every idle tick),
    // so a program that also calls MPI itself needs MPI_THREAD_MULTIPLE.
    if (provided < MPI_THREAD_MULTIPLE && !g_we_initialized)  // ours, from an earlier init
      throw Error(FUSEOPT_UNSUPPORTED,
                  "MPI was initialised by someone else below MPI_THREAD_MULTIPLE; fuseopt calls "
                  "MPI from its own background thread, so a program that also uses MPI must "
                  "initialise it with MPI_THREAD_MULTIPLE (mpi4py's default), or let fuseopt "
                  "initialise MPI and not call MPI itself.");
  }
  std::call_once(g_ops16_once, create_ops16);
}

// The lowest rank of comm on this host, which names the node. By host name,
// not MPI_COMM_TYPE_SHARED: with MPIR_CVAR_NOLOCAL (what fuseoptrun sets
// when a host runs more ranks than it has cores) MPICH reports every rank as
// a node of its own, but local_rank must still count the ranks of one
// machine (it picks a GPU, shards node-local data).
int node_by_host_name(MPI_Comm comm, int rank, int size) {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  mpi_check(MPI_Get_processor_name(mine, &len), "MPI_Get_processor_name");
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
            "MPI_Allgather(host names)");
  for (int r = 0; r < size; ++r) {
    if (std::strncmp(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME], mine,
                     MPI_MAX_PROCESSOR_NAME) == 0)
      return r;
  }
  return rank;
}

}  // namespace

MpiWorld::MpiWorld(int emulated_local_size, bool thread_multiple) {
  start_mpi(thread_multiple);
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &info_.rank);
  MPI_Comm_size(comm_, &info_.size);
  split_nodes(emulated_local_size > 0 ? info_.rank / emulated_local_size
                                      : node_by_host_name(comm_, info_.rank, info_.size));
}

MpiWorld::MpiWorld(MPI_Comm comm, int node) : comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &info_.rank);
  MPI_Comm_size(comm_, &info_.size);
  split_nodes(node);
}

void MpiWorld::split_nodes(int node) {
  node_ = node;
  mpi_check(MPI_Comm_split(comm_, node, info_.rank, &local_comm_), "MPI_Comm_split(node)");
  MPI_Comm_set_errhandler(local_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(local_comm_, &info_.local_rank);
  MPI_Comm_size(local_comm_, &info_.local_size);
  mpi_check(MPI_Comm_split(comm_, info_.local_rank, info_.rank, &cross_comm_),
            "MPI_Comm_split(cross)");
  MPI_Comm_set_errhandler(cross_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(cross_comm_, &info_.cross_rank);
  MPI_Comm_size(cross_comm_, &info_.cross_size);
  mpi_check(MPI_Comm_dup(comm_, &agreed_comm_), "MPI_Comm_dup(agreed)");
  MPI_Comm_set_errhandler(agreed_comm_, MPI_ERRORS_RETURN);
}

std::unique_ptr<MpiWorld> MpiWorld::subset(bool member) const {
  // Collective over every rank of this world, so that non-members need no
  // communicator of their own to take part.
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, info_.rank, &comm),
            "MPI_Comm_split(process set)");
  if (!member) return nullptr;
  return std::unique_ptr<MpiWorld>(new MpiWorld(comm, node_));
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&agreed_comm_, &cross_comm_, &local_comm_, &comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

MPI_Datatype MpiWorld::datatype(fuseopt_dtype_t dtype) {
  switch (dtype) {
    case FUSEOPT_UINT8: return MPI_UINT8_T;
    case FUSEOPT_INT8: return MPI_INT8_T;
    case FUSEOPT_INT16: return MPI_INT16_T;
    case FUSEOPT_UINT16: return MPI_UINT16_T;
    case FUSEOPT_INT32: return MPI_INT32_T;
    case FUSEOPT_INT64: return MPI_INT64_T;
    case FUSEOPT_FLOAT16:
    case FUSEOPT_BFLOAT16: return MPI_UINT16_T;
    case FUSEOPT_FLOAT32: return MPI_FLOAT;
    case FUSEOPT_FLOAT64: return MPI_DOUBLE;
    default: throw Error(FUSEOPT_INTERNAL, "no MPI datatype for dtype");
  }
}

MPI_Op MpiWorld::op(fuseopt_reduce_op_t op, fuseopt_dtype_t dtype) {
  if (op == FUSEOPT_ADASUM) throw Error(FUSEOPT_INTERNAL, "Adasum is no MPI op (adasum.h)");
  if (dtype == FUSEOPT_FLOAT16) return g_ops16.half[op];
  if (dtype == FUSEOPT_BFLOAT16) return g_ops16.bfloat[op];
  switch (op) {
    case FUSEOPT_SUM:
    case FUSEOPT_AVERAGE: return MPI_SUM;  // average = sum, then postscale 1/size
    case FUSEOPT_MIN: return MPI_MIN;
    case FUSEOPT_MAX: return MPI_MAX;
    case FUSEOPT_PRODUCT: return MPI_PROD;
    default: throw Error(FUSEOPT_INTERNAL, "no MPI op for reduce op");
  }
}

}  // namespace fuseopt
