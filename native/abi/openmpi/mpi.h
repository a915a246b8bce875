// Open MPI's binary interface (libmpi.so.40: Open MPI 4.x and 5.x), declared
// here for the part of MPI that the core calls, so that every install carries
// a core for Open MPI without Open MPI's headers at build time (Note [One
// install, the MPI chosen at run time] in fuseopt/base/_native.py).
//
// What makes this ABI: handles are pointers to Open MPI's structures, and each
// predefined handle is the address of an object the library exports
// (ompi_mpi_comm_world, ompi_mpi_float, ompi_mpi_op_sum, ...); MPI_Status
// carries two private fields after the public three. The core is compiled
// against this file instead of an mpi.h and linked to no libmpi: the library
// is loaded before the core (RTLD_GLOBAL) and binds these names at load time,
// so a name spelt wrong fails the import, never a call.
//
// tests/unit/test_openmpi_abi.py compiles a probe against Open MPI's own
// mpi.h and against this file and compares every constant, type size and
// predefined symbol below; the Open MPI runs of tests/test_other_mpis.py then
// exercise every call.
#ifndef FUSEOPT_ABI_OPENMPI_MPI_H
#define FUSEOPT_ABI_OPENMPI_MPI_H

#include <stddef.h>

#define FUSEOPT_OPEN_MPI_ABI 1
#define MPI_VERSION 3
#define MPI_SUBVERSION 1

#ifdef __cplusplus
extern "C" {
#endif

typedef ptrdiff_t MPI_Aint;
typedef long long MPI_Count;
typedef struct ompi_communicator_t* MPI_Comm;
typedef struct ompi_datatype_t* MPI_Datatype;
typedef struct ompi_errhandler_t* MPI_Errhandler;
typedef struct ompi_info_t* MPI_Info;
typedef struct ompi_op_t* MPI_Op;
typedef struct ompi_request_t* MPI_Request;
typedef struct ompi_message_t* MPI_Message;
typedef struct ompi_win_t* MPI_Win;

typedef struct ompi_status_public_t {
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int _cancelled;   // private to Open MPI; here for the size
  size_t _ucount;
} MPI_Status;

typedef void(MPI_User_function)(void*, void*, int*, MPI_Datatype*);

enum { MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE };
enum { MPI_COMM_TYPE_SHARED };

#define MPI_SUCCESS 0
#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_UNDEFINED (-32766)
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256
#define MPI_MAX_LIBRARY_VERSION_STRING 256
#define MPI_MODE_NOCHECK 1
#define MPI_IN_PLACE ((void*)1)
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)

// The exported objects behind the predefined handles. Their types are never
// completed: only their addresses are taken.
#define FUSEOPT_OMPI_OBJECT(object) extern struct fuseopt_ompi_##object object;
#define FUSEOPT_OMPI_HANDLE(type, object) ((type)(void*)&(object))

FUSEOPT_OMPI_OBJECT(ompi_mpi_comm_world)
FUSEOPT_OMPI_OBJECT(ompi_mpi_comm_null)
FUSEOPT_OMPI_OBJECT(ompi_request_null)
FUSEOPT_OMPI_OBJECT(ompi_mpi_info_null)
FUSEOPT_OMPI_OBJECT(ompi_mpi_win_null)
FUSEOPT_OMPI_OBJECT(ompi_mpi_errors_return)
FUSEOPT_OMPI_OBJECT(ompi_mpi_op_sum)
FUSEOPT_OMPI_OBJECT(ompi_mpi_op_prod)
FUSEOPT_OMPI_OBJECT(ompi_mpi_op_min)
FUSEOPT_OMPI_OBJECT(ompi_mpi_op_max)
FUSEOPT_OMPI_OBJECT(ompi_mpi_op_band)
FUSEOPT_OMPI_OBJECT(ompi_mpi_byte)
FUSEOPT_OMPI_OBJECT(ompi_mpi_char)
FUSEOPT_OMPI_OBJECT(ompi_mpi_int)
FUSEOPT_OMPI_OBJECT(ompi_mpi_float)
FUSEOPT_OMPI_OBJECT(ompi_mpi_double)
FUSEOPT_OMPI_OBJECT(ompi_mpi_int8_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_uint8_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_int16_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_uint16_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_int32_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_int64_t)
FUSEOPT_OMPI_OBJECT(ompi_mpi_uint64_t)

#define MPI_COMM_WORLD FUSEOPT_OMPI_HANDLE(MPI_Comm, ompi_mpi_comm_world)
#define MPI_COMM_NULL FUSEOPT_OMPI_HANDLE(MPI_Comm, ompi_mpi_comm_null)
#define MPI_REQUEST_NULL FUSEOPT_OMPI_HANDLE(MPI_Request, ompi_request_null)
#define MPI_INFO_NULL FUSEOPT_OMPI_HANDLE(MPI_Info, ompi_mpi_info_null)
#define MPI_WIN_NULL FUSEOPT_OMPI_HANDLE(MPI_Win, ompi_mpi_win_null)
#define MPI_ERRORS_RETURN FUSEOPT_OMPI_HANDLE(MPI_Errhandler, ompi_mpi_errors_return)
#define MPI_SUM FUSEOPT_OMPI_HANDLE(MPI_Op, ompi_mpi_op_sum)
#define MPI_PROD FUSEOPT_OMPI_HANDLE(MPI_Op, ompi_mpi_op_prod)
#define MPI_MIN FUSEOPT_OMPI_HANDLE(MPI_Op, ompi_mpi_op_min)
#define MPI_MAX FUSEOPT_OMPI_HANDLE(MPI_Op, ompi_mpi_op_max)
#define MPI_BAND FUSEOPT_OMPI_HANDLE(MPI_Op, ompi_mpi_op_band)
#define MPI_BYTE FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_byte)
#define MPI_CHAR FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_char)
#define MPI_INT FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_int)
#define MPI_FLOAT FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_float)
#define MPI_DOUBLE FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_double)
#define MPI_INT8_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_int8_t)
#define MPI_UINT8_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_uint8_t)
#define MPI_INT16_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_int16_t)
#define MPI_UINT16_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_uint16_t)
#define MPI_INT32_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_int32_t)
#define MPI_INT64_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_int64_t)
#define MPI_UINT64_T FUSEOPT_OMPI_HANDLE(MPI_Datatype, ompi_mpi_uint64_t)

// The MPI-3.1 C bindings of the calls the core makes.
int MPI_Init(int* argc, char*** argv);
int MPI_Init_thread(int* argc, char*** argv, int required, int* provided);
int MPI_Initialized(int* flag);
int MPI_Finalized(int* flag);
int MPI_Finalize(void);
int MPI_Query_thread(int* provided);
int MPI_Get_version(int* version, int* subversion);
int MPI_Get_library_version(char* version, int* resultlen);
int MPI_Get_processor_name(char* name, int* resultlen);
int MPI_Error_string(int errorcode, char* string, int* resultlen);

int MPI_Comm_size(MPI_Comm comm, int* size);
int MPI_Comm_rank(MPI_Comm comm, int* rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm);
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm* newcomm);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm);
int MPI_Comm_free(MPI_Comm* comm);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request* request);
int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm);
int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request);
int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm);
int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request* request);
int MPI_Reduce_local(const void* inbuf, void* inoutbuf, int count, MPI_Datatype datatype,
                     MPI_Op op);
int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request);
int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request* request);
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* request);
int MPI_Barrier(MPI_Comm comm);
int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request);

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status);
int MPI_Testall(int count, MPI_Request array_of_requests[], int* flag,
                MPI_Status array_of_statuses[]);
int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request* request);
int MPI_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request* request);
int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status);
int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message,
                MPI_Status* status);
int MPI_Imrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message,
               MPI_Request* request);
int MPI_Get_count(const MPI_Status* status, MPI_Datatype datatype, int* count);

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype* newtype);
int MPI_Type_commit(MPI_Datatype* datatype);
int MPI_Type_free(MPI_Datatype* datatype);
int MPI_Op_create(MPI_User_function* user_fn, int commute, MPI_Op* op);
int MPI_Op_free(MPI_Op* op);

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                            void* baseptr, MPI_Win* win);
int MPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint* size, int* disp_unit, void* baseptr);
int MPI_Win_lock_all(int assert_, MPI_Win win);
int MPI_Win_unlock_all(MPI_Win win);
int MPI_Win_sync(MPI_Win win);
int MPI_Win_free(MPI_Win* win);

#ifdef __cplusplus
}
#endif

#endif  // FUSEOPT_ABI_OPENMPI_MPI_H
