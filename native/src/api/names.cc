// Names of status codes, dtypes, collectives and reduce ops: exported, and
// used in error messages. Free of MPI so that policy unit tests can link it.
#include "base/dtype.h"
#include "fuseopt/fuseopt.h"

extern "C" {

const char* fuseopt_status_string(int status) {
  static const char* names[] = {"OK",       "INVALID_ARG", "NOT_INITIALIZED", "UNSUPPORTED",
                                "MISMATCH", "BACKEND",     "TIMEOUT",         "SHUT_DOWN",
                                "RANK_FAILED", "INTERNAL"};
  return status >= 0 && status <= FUSEOPT_INTERNAL ? names[status] : "UNKNOWN_STATUS";
}

const char* fuseopt_dtype_name(int dtype) {
  static const char* names[] = {"uint8",    "int8",     "int32",   "int64",
                                "float16",  "bfloat16", "float32", "float64",
                                "int16",    "uint16"};
  return fuseopt::is_valid_dtype(dtype) ? names[dtype] : "unknown_dtype";
}

int fuseopt_dtype_size(int dtype) {
  return fuseopt::is_valid_dtype(dtype)
             ? static_cast<int>(fuseopt::dtype_size(static_cast<fuseopt_dtype_t>(dtype)))
             : 0;
}

const char* fuseopt_collective_name(int c) {
  static const char* names[] = {"allreduce",     "allgather", "broadcast", "alltoall",
                                "reducescatter", "barrier",   "join",      "process_set_add",
                                "process_set_remove", "reduce"};
  return c >= 0 && c < FUSEOPT_COLLECTIVE_COUNT ? names[c] : "unknown_collective";
}

const char* fuseopt_reduce_op_name(int op) {
  static const char* names[] = {"sum", "average", "min", "max", "product", "adasum"};
  return op >= 0 && op < FUSEOPT_REDUCE_OP_COUNT ? names[op] : "unknown_op";
}

}  // extern "C"
