/*
 * fuseopt.h: the one public surface of the fuseopt native core.
 *
 * A process creates one context (fuseopt_init). The context owns a background
 * loop thread, which is the only thread that talks to the network. Framework
 * threads describe tensors in fuseopt_request_t, enqueue them, and get an
 * integer handle back at once; they later poll or wait on that handle.
 *
 * Conventions
 *  - Every entry point returns a fuseopt_status_t. When it is not FUSEOPT_OK,
 *    fuseopt_last_error() holds a human-readable detail for the calling thread.
 *  - No C++ exception crosses this boundary.
 *  - Buffers passed in a request belong to the caller, and must stay valid and
 *    untouched, until fuseopt_wait has returned a final status for the handle.
 *  - Tensor names are the negotiation key: the same logical tensor must carry
 *    the same name on every rank, and a name may not be reused while an earlier
 *    request with that name is still in flight on the same rank.
 *
 * The block between the cdef markers is read verbatim by fuseopt/_build.py
 * (cffi), so constants reach Python from here and are never copied by hand.
 * Keep it free of preprocessor conditionals and expressions in #defines.
 */
#ifndef FUSEOPT_FUSEOPT_H_
#define FUSEOPT_FUSEOPT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cdef-begin */
#define FUSEOPT_ABI_VERSION 1

typedef enum {
  FUSEOPT_OK = 0,
  FUSEOPT_INVALID_ARG = 1,     /* the caller passed something unusable          */
  FUSEOPT_NOT_INITIALIZED = 2, /* no context, or used before init              */
  FUSEOPT_UNSUPPORTED = 3,     /* valid, but this build/backend cannot do it     */
  FUSEOPT_MISMATCH = 4,        /* ranks disagree about a tensor (same on all)    */
  FUSEOPT_BACKEND = 5,         /* the communication library reported an error    */
  FUSEOPT_TIMEOUT = 6,         /* wait timed out; the handle stays valid         */
  FUSEOPT_SHUT_DOWN = 7,       /* the context was shut down before completion    */
  FUSEOPT_RANK_FAILED = 8,     /* a peer rank died or stalled past the limit     */
  FUSEOPT_INTERNAL = 9         /* a bug in fuseopt; please report it            */
} fuseopt_status_t;

typedef enum {
  FUSEOPT_UINT8 = 0,
  FUSEOPT_INT8 = 1,
  FUSEOPT_INT32 = 2,
  FUSEOPT_INT64 = 3,
  FUSEOPT_FLOAT16 = 4,
  FUSEOPT_BFLOAT16 = 5,
  FUSEOPT_FLOAT32 = 6,
  FUSEOPT_FLOAT64 = 7,
  FUSEOPT_INT16 = 8,          /* appended after ABI 1's first release */
  FUSEOPT_UINT16 = 9,
  FUSEOPT_DTYPE_COUNT = 10
} fuseopt_dtype_t;

typedef enum {
  FUSEOPT_ALLREDUCE = 0,
  FUSEOPT_ALLGATHER = 1,
  FUSEOPT_BROADCAST = 2,
  FUSEOPT_ALLTOALL = 3,
  FUSEOPT_REDUCESCATTER = 4,
  FUSEOPT_BARRIER = 5,
  FUSEOPT_JOIN = 6,
  /* Control operations of the global set, negotiated like tensors so that a
   * rank that asks for something else gets the same error as the others.
   * Add: input points at shape[0] int32 global ranks (ascending, distinct),
   * output at an int32_t that receives the new set's id. Remove: input points
   * at one int32 set id; output is NULL. */
  FUSEOPT_PROCESS_SET_ADD = 7,
  FUSEOPT_PROCESS_SET_REMOVE = 8,
  /* The reduction of every rank's input on root's output only (in place
   * allowed); other ranks' outputs are scratch. Host memory only. */
  FUSEOPT_REDUCE = 9,
  FUSEOPT_COLLECTIVE_COUNT = 10
} fuseopt_collective_t;

typedef enum {
  FUSEOPT_SUM = 0,
  FUSEOPT_AVERAGE = 1,
  FUSEOPT_MIN = 2,
  FUSEOPT_MAX = 3,
  FUSEOPT_PRODUCT = 4,
  FUSEOPT_ADASUM = 5,          /* allreduce of float tensors on host memory, on a
                                  power-of-two number of ranks (adasum.h) */
  FUSEOPT_REDUCE_OP_COUNT = 6
} fuseopt_reduce_op_t;

/* Where a request's buffers live. Each device kind has its own backend
 * (docs/devices.md): host memory goes to MPI, CUDA memory to NCCL, Ascend NPU
 * memory to HCCL. The kind is negotiated like the dtype: every rank must
 * submit a tensor from the same kind of memory. */
typedef enum {
  FUSEOPT_DEVICE_HOST = 0,
  FUSEOPT_DEVICE_CUDA = 1,
  FUSEOPT_DEVICE_NPU = 2,
  FUSEOPT_DEVICE_COUNT = 3
} fuseopt_device_t;

/* Log levels (fuseopt_config_t.log_level): a level shows itself and the
 * ones above it. Python's FUSEOPT_LOG_LEVEL words are these names, lowercase. */
typedef enum {
  FUSEOPT_LOG_TRACE = 0,
  FUSEOPT_LOG_DEBUG = 1,
  FUSEOPT_LOG_INFO = 2,
  FUSEOPT_LOG_WARNING = 3,
  FUSEOPT_LOG_ERROR = 4,
  FUSEOPT_LOG_LEVEL_COUNT = 5
} fuseopt_log_level_t;

/* fuseopt_metrics_t.autotune_state */
typedef enum {
  FUSEOPT_AUTOTUNE_OFF = 0,
  FUSEOPT_AUTOTUNE_TUNING = 1,
  FUSEOPT_AUTOTUNE_DONE = 2     /* holding the best trial's settings */
} fuseopt_autotune_state_t;

#define FUSEOPT_MAX_NDIM 16

/* Runtime configuration. Fill with fuseopt_config_default(), then override.
 * struct_size lets later versions grow the struct without breaking callers. */
typedef struct {
  size_t struct_size;
  int64_t fusion_threshold_bytes; /* bytes per fused bucket; 0 disables fusion   */
  int64_t cycle_time_us;          /* extra wait to collect tensors after a wake  */
  int64_t cache_capacity;         /* response-cache entries; 0 disables the cache */
  int64_t stall_check_s;          /* warn about a stalled tensor after this; 0 off */
  int64_t stall_shutdown_s;       /* fail stalled tensors after this; 0 off       */
  int32_t log_level;              /* a fuseopt_log_level_t                         */
  int32_t emulated_local_size;    /* test knob: pretend nodes have this many ranks */
  int64_t shm_min_bytes;          /* collectives this large in all use the
                                     shared-memory path when all ranks share a
                                     host; -1 off                              */
  double peer_timeout_s;          /* a collective or negotiation round that has
                                     not finished after this long means a peer
                                     died or froze: fail everything; 0 off      */
  int64_t hierarchical_allreduce; /* 1: reduce within each node, allreduce among
                                     one leader per node, broadcast back        */
  int64_t autotune;               /* 1: tune fusion threshold and cycle time in
                                     the first rounds, then hold the best       */
  int64_t autotune_window_rounds; /* rounds with collectives per autotune trial */
  const char* autotune_log;       /* rank 0 writes its trials here as CSV;
                                     NULL or "" for none (copied at init)      */
  double init_timeout_s;          /* fuseopt_init fails with RANK_FAILED when the
                                     other ranks have not all started within
                                     this long (a rank died before or during
                                     init); 0 waits forever                     */
  int64_t mpi_thread_multiple;    /* 1: when fuseopt initialises MPI, ask for
                                     MPI_THREAD_MULTIPLE, so the program's own
                                     threads may call MPI too (mpi4py); 0:
                                     SERIALIZED, 2-5x faster here             */
  int64_t shm_stores;             /* how a rank writes the shared-memory slots
                                     others read: 0 chooses per chunk by speed,
                                     1 plain stores, 2 streaming stores       */
} fuseopt_config_t;

typedef struct {
  int32_t rank, size;
  int32_t local_rank, local_size; /* ranks on this node                          */
  int32_t cross_rank, cross_size; /* this node's index, number of nodes          */
} fuseopt_comm_info_t;

/* One tensor operation. Shapes are in elements, row-major; the first dimension
 * is the one that allgather concatenates and alltoall/reducescatter split. */
typedef struct {
  size_t struct_size;
  fuseopt_collective_t collective;
  const char* name;               /* NULL: an automatic per-collective name      */
  fuseopt_dtype_t dtype;
  fuseopt_reduce_op_t reduce_op;  /* allreduce, reducescatter, reduce            */
  int32_t ndim;
  const int64_t* shape;           /* ndim entries                                */
  const void* input;              /* may equal output (in place)                 */
  void* output;                   /* NULL for allgather/alltoall: see below; for
                                     join, NULL or an int32_t that receives the
                                     last rank to join                          */
  int32_t root;                   /* broadcast, reduce                           */
  double prescale;                /* applied to the input before reducing        */
  double postscale;               /* applied to the result after reducing        */
  const int64_t* splits;          /* alltoall: rows sent to each rank; NULL
                                     means an even split                         */
  int32_t num_splits;             /* entries in splits; must equal the size      */
  /* Added after ABI 1's first release; callers whose struct_size ends before
   * them get host memory. For a device request, input and output are device
   * pointers on device_id (this rank's own index), and the runtime-allocated
   * result of allgather/alltoall is device memory: free it with
   * fuseopt_free_device. */
  int32_t device_type;            /* fuseopt_device_t; 0 = host                  */
  int32_t device_id;              /* CUDA / NPU device index on this rank        */
  void* stream;                   /* cudaStream_t / aclrtStream that produces the
                                     input; NULL: the legacy default stream      */
  void* ready_event;              /* cudaEvent_t / aclrtEvent recorded after the
                                     input was produced; NULL: the runtime
                                     records one on stream when it runs the op  */
  /* Added later still; shorter structs get 0. Negotiated like the dtype:
   * requests for one name must carry the same phase on every rank, or the
   * operation fails with FUSEOPT_MISMATCH on all of them. A binding marks
   * with it what must not be mixed across ranks, e.g. gradients resubmitted
   * without a new backward pass (1) against fresh ones (0). >= 0. */
  int32_t phase;
  /* Added later still; shorter structs get 0, the global set (every rank).
   * The id of a process set made by FUSEOPT_PROCESS_SET_ADD: the operation
   * runs among that set's members only, on its own communicator, negotiated
   * and fused apart from every other set's. Only members may submit to it.
   * root stays a global rank. Host memory only (not yet for device tensors). */
  int32_t process_set;
  /* Added later still; shorter structs get 0 (FUSEOPT_WIRE_AS_IS). A float32
   * host allreduce may travel as a 16-bit float: each element is rounded on
   * its way into the fusion buffer (or shared window), reduced as that type,
   * and widened on its way out, with no pass of its own. The result is
   * bit for bit what casting the tensor, allreducing the 16-bit tensor and
   * casting back gives (NaN payloads aside). Ranks negotiate the wire type:
   * this request matches another rank's float16 tensor of the same name. */
  int32_t wire;                   /* fuseopt_wire_t                              */
} fuseopt_request_t;

typedef enum {
  FUSEOPT_WIRE_AS_IS = 0,
  FUSEOPT_WIRE_FLOAT16 = 1,
  FUSEOPT_WIRE_BFLOAT16 = 2
} fuseopt_wire_t;

/* A result whose size is decided by the other ranks (allgather, alltoall) is
 * allocated by the runtime. fuseopt_wait_output hands it over: the caller owns
 * data and recv_splits afterwards and frees both with fuseopt_free. */
typedef struct {
  void* data;
  int64_t nbytes;
  int64_t first_dim;              /* rows in the result                          */
  int64_t* recv_splits;           /* rows that came from each rank (size entries) */
} fuseopt_output_t;

typedef struct fuseopt_ctx fuseopt_ctx_t;

int fuseopt_abi_version(void);

/* Local; any time, before init too. What MPI this process runs: the library's
 * own version string (MPI_Get_library_version), the standard version it
 * implements, and the path of the shared library the MPI symbols were loaded
 * from (as the dynamic loader resolved them: RPATH, LD_LIBRARY_PATH, ...).
 * Strings are NUL-terminated, cut to their buffer's length. */
int fuseopt_mpi_library(char* version, int64_t version_len, char* path, int64_t path_len,
                        int32_t* standard_major, int32_t* standard_minor);

/* Fills cfg with the built-in defaults. */
int fuseopt_config_default(fuseopt_config_t* cfg);

/* Starts the loop thread and, if nobody has yet, MPI (thread level
 * SERIALIZED; MPI is only ever called from the loop thread). Collective: every
 * rank must call it. cfg may be NULL for the defaults. */
int fuseopt_init(const fuseopt_config_t* cfg, fuseopt_ctx_t** out);

/* Collective. Agrees with the other ranks to stop, fails every pending handle
 * with FUSEOPT_SHUT_DOWN, and joins the loop thread. Idempotent. The context
 * pointer stays valid (its small shell is never freed): later enqueues fail
 * with FUSEOPT_SHUT_DOWN and waits return each handle's final status. */
int fuseopt_shutdown(fuseopt_ctx_t* ctx);

/* Local, not collective: for when this rank knows the job is broken (a peer
 * died; the launcher said so). Fails every pending and later operation with
 * status (e.g. FUSEOPT_RANK_FAILED) and message, and abandons the loop thread,
 * which may be stuck in MPI for good: shutdown then returns without joining
 * it, MPI is not finalised, and fuseopt_init cannot be called again in this
 * process. The first abort's message wins; later ones do nothing. */
int fuseopt_abort(fuseopt_ctx_t* ctx, int status, const char* message);

/* Local. Makes a fuseopt_init that is waiting for its peers in this process
 * (now, or the next one to start) fail with status and message: for a
 * launcher's news that a peer died before or during init. As after an abort,
 * MPI is abandoned and fuseopt_init cannot succeed again in this process.
 * Process-wide, because MPI is: there is no context yet to name. */
int fuseopt_cancel_init(int status, const char* message);

int fuseopt_comm_info(fuseopt_ctx_t* ctx, fuseopt_comm_info_t* out);

/* *supported = 1 when MPI runs at MPI_THREAD_MULTIPLE (the
 * mpi_thread_multiple knob, or whoever initialised MPI asked for it), so
 * other threads may call MPI while fuseopt runs; 0 otherwise. */
int fuseopt_mpi_threads_supported(fuseopt_ctx_t* ctx, int* supported);

/* A process set this rank knows (0: every rank): its size, and this rank's
 * position in it (-1 if not a member). FUSEOPT_INVALID_ARG for an id that
 * names no set (never added, or removed). */
int fuseopt_process_set_info(fuseopt_ctx_t* ctx, int32_t process_set, int32_t* rank,
                             int32_t* size);

/* Validates the request, copies its metadata (not its buffers) and returns a
 * handle at once. Errors that need the other ranks to detect (mismatches)
 * surface later, from fuseopt_wait. */
int fuseopt_enqueue(fuseopt_ctx_t* ctx, const fuseopt_request_t* req, int64_t* handle);

/* Enqueues count requests at once, all or none: on an error nothing is
 * queued. handles[i] belongs to requests[i]. Cheaper than count single calls
 * and they reach the loop thread together, so they negotiate and fuse in one
 * round. */
int fuseopt_enqueue_many(fuseopt_ctx_t* ctx, const fuseopt_request_t* requests, int64_t count,
                         int64_t* handles);

/* As fuseopt_enqueue_many, for a caller that waits on these handles next (a
 * blocking collective): the runtime's loop thread is not woken for them,
 * because the wait runs the negotiation round and the collective on the
 * calling thread when it can (two thread wake-ups fewer per small op). A
 * wait that cannot (a poll, a device tensor in the process, a cycle time)
 * wakes the loop thread then; requests never waited on still run, at the
 * loop thread's next round (within 50 ms). */
int fuseopt_enqueue_for_wait(fuseopt_ctx_t* ctx, const fuseopt_request_t* requests,
                             int64_t count, int64_t* handles);

/* fuseopt_enqueue_for_wait of one request, then fuseopt_wait on its handle:
 * a blocking collective in one call, for a request whose output the caller
 * supplies. *handle is 0 when the enqueue failed (its status is returned);
 * on FUSEOPT_TIMEOUT it is the handle, to be waited on again. */
int fuseopt_enqueue_and_wait(fuseopt_ctx_t* ctx, const fuseopt_request_t* request,
                             int64_t timeout_ms, int64_t* handle);

/* *done becomes 1 once the handle has a final status. Does not release it. */
int fuseopt_poll(fuseopt_ctx_t* ctx, int64_t handle, int* done);

/* Blocks until the handle completes or timeout_ms passes (negative: forever).
 * Returns the operation's final status and releases the handle, except on
 * FUSEOPT_TIMEOUT, after which the handle may be waited on again. A runtime-
 * allocated output (allgather, alltoall) is freed: use fuseopt_wait_output. */
int fuseopt_wait(fuseopt_ctx_t* ctx, int64_t handle, int64_t timeout_ms);

/* Waits for count handles (a grouped operation) in one call: blocks until all
 * have completed or timeout_ms passes. Then releases them all (any runtime-
 * allocated output is freed) and returns the first failure in list order, or
 * FUSEOPT_OK; on FUSEOPT_TIMEOUT none is released. */
int fuseopt_wait_all(fuseopt_ctx_t* ctx, const int64_t* handles, int64_t count,
                     int64_t timeout_ms);

/* As fuseopt_wait, and on FUSEOPT_OK moves a runtime-allocated output into *out
 * (for requests made with output == NULL; otherwise *out is zeroed). */
int fuseopt_wait_output(fuseopt_ctx_t* ctx, int64_t handle, int64_t timeout_ms,
                        fuseopt_output_t* out);

/* Frees memory handed over by fuseopt_wait_output. NULL is a no-op. */
void fuseopt_free(void* p);

/* Frees device memory handed over by fuseopt_wait_output for a device request
 * (cudaFree / aclrtFree of the library the backend loaded). NULL is a no-op. */
int fuseopt_free_device(int device_type, void* p);

/* Counters since init, for fuseopt.metrics(). Fill struct_size first. */
typedef struct {
  size_t struct_size;
  int64_t rounds;              /* negotiation rounds                            */
  int64_t full_negotiations;   /* rounds that gathered new requests to rank 0   */
  int64_t cache_hits;          /* enqueued tensors answered by the cache        */
  int64_t cache_misses;
  int64_t tensors;             /* tensors completed by a collective             */
  int64_t collectives;         /* fused buckets, one collective call each       */
  int64_t bytes;               /* this rank's payload bytes in those buckets    */
  int64_t stalls;              /* stall warnings on this rank                   */
  double negotiation_s;        /* loop time spent negotiating                   */
  double execution_s;          /* loop time spent running collectives           */
  int64_t fusion_threshold_bytes; /* in use now (autotune may change it)        */
  int64_t cycle_time_us;          /* in use now                                 */
  int64_t autotune_state;         /* a fuseopt_autotune_state_t                  */
} fuseopt_metrics_t;

int fuseopt_metrics(fuseopt_ctx_t* ctx, fuseopt_metrics_t* out);

/* Local (not collective). Starts writing a Chrome-trace / Perfetto JSON
 * timeline of this rank's operations to path (truncated): per tensor its
 * negotiation, queueing, fusion-buffer copies and collective; with
 * mark_cycles, a marker per negotiation round. The file is valid JSON after
 * every periodic flush (about 10 a second) and after stop. */
int fuseopt_start_timeline(fuseopt_ctx_t* ctx, const char* path, int mark_cycles);
/* Flushes and closes the timeline; a no-op if none is running. */
int fuseopt_stop_timeline(fuseopt_ctx_t* ctx);
/* Handles enqueued and not yet released: for leak checks. */
int fuseopt_pending_handles(fuseopt_ctx_t* ctx, int64_t* count);

/* ---- Agreed reductions ------------------------------------------------
 * A sum of the same count float64 values that the caller repeats under one
 * name, and waits for at once (SyncBatchNorm statistics, metrics, counts).
 * The first call is negotiated like any allreduce: ranks that disagree about
 * the name, count or process set fail there with FUSEOPT_MISMATCH. Every
 * later call is one MPI collective run on the calling thread, without a
 * negotiation round or the loop thread; the ranks check in its payload that
 * they all called the same reduction (FUSEOPT_MISMATCH on every rank if not).
 * Only members of process_set may create one for it. Not for device memory.
 * Every rank must call agreed reductions in the same order; a peer that
 * never calls ends the wait after FUSEOPT_PEER_TIMEOUT_S (RANK_FAILED). */
typedef struct fuseopt_agreed fuseopt_agreed_t;

/* Local. count >= 1 values; reduce_op FUSEOPT_SUM or FUSEOPT_AVERAGE. The
 * object refers to ctx: free it before the context is shut down, or calls on
 * it fail with FUSEOPT_SHUT_DOWN. */
int fuseopt_agreed_create(fuseopt_ctx_t* ctx, const char* name, int64_t count,
                          int32_t process_set, int32_t reduce_op, fuseopt_agreed_t** out);
/* Collective among the set's members: values (count doubles) is replaced by
 * the reduction, in place. Blocks until done. On an error values is left
 * unspecified. */
int fuseopt_agreed_allreduce(fuseopt_agreed_t* agreed, double* values);
/* NULL is a no-op. */
void fuseopt_agreed_free(fuseopt_agreed_t* agreed);

/* ---- Batch normalization kernels ----------------------------------------
 * A host tensor seen as [outer][channels][inner], strides in elements: NCHW
 * is (N, C, H*W) with strides (C*H*W, H*W, 1); NHWC is (N*H*W, C, 1) with
 * strides (C, 1, 1). dtype FLOAT32, FLOAT64, FLOAT16 or BFLOAT16 (these two
 * compute in float32); sums are accumulated in float64. */
typedef struct {
  void* data;
  int32_t dtype;
  int64_t outer, channels, inner;
  int64_t outer_stride, channel_stride, inner_stride;
} fuseopt_channel_view_t;

/* Training-mode batch normalization of x into y (which may be x) over the
 * batch of every rank: per channel, count, sum and sum of squares are summed
 * by `stats`, an agreed reduction of 1 + 2 * channels values (NULL: this
 * rank's batch alone), then y = (x - mean) * invstd * weight + bias. The
 * per-channel arrays are `channels` values of param_dtype (weight, bias) or
 * running_dtype (running_mean, running_var); NULL weight/bias mean 1 and 0,
 * NULL running buffers are not updated (else they move by momentum towards
 * the batch mean and the unbiased batch variance). saved_mean and
 * saved_invstd (channels doubles each) and saved_count receive what the
 * backward pass needs. FUSEOPT_INVALID_ARG when the global batch is empty. */
typedef struct {
  size_t struct_size;
  fuseopt_channel_view_t x, y;
  int32_t param_dtype, running_dtype;
  const void* weight;
  const void* bias;
  void* running_mean;
  void* running_var;
  double momentum, eps;
  double* saved_mean;
  double* saved_invstd;
  double* saved_count;
  int32_t threads;                /* threads the kernel may use (the framework's
                                     intra-op setting); <= 1: the caller's only.
                                     Results do not depend on it. */
} fuseopt_batch_norm_forward_t;

int fuseopt_batch_norm_forward(fuseopt_agreed_t* stats, const fuseopt_batch_norm_forward_t* args);

/* The gradient of the forward pass above with respect to x, into dx (which
 * may be dy): `sums`, an agreed reduction of 2 * channels values (NULL: this
 * rank alone), sums sum(dy) and sum(dy * x_hat) over the ranks. grad_weight
 * and grad_bias (param_dtype, or NULL) receive this rank's own sum(dy * x_hat)
 * and sum(dy): the optimizer averages them like any gradient. */
typedef struct {
  size_t struct_size;
  fuseopt_channel_view_t x, dy, dx;
  int32_t param_dtype;
  const void* weight;
  const double* saved_mean;
  const double* saved_invstd;
  double saved_count;
  void* grad_weight;
  void* grad_bias;
  int32_t threads;                /* as in fuseopt_batch_norm_forward_t */
} fuseopt_batch_norm_backward_t;

int fuseopt_batch_norm_backward(fuseopt_agreed_t* sums, const fuseopt_batch_norm_backward_t* args);

/* The two calls above for a binding that keeps one argument struct per layer
 * and passes only what changes between calls: the tensors' addresses as
 * integers (a framework's data_ptr) and `saved`, 2 * channels + 1 doubles
 * [mean, invstd, count] (forward writes them, backward reads them). The
 * struct's data and saved_* fields are ignored. Why: from Python, a pointer
 * cast and a struct field set per address cost as much as the kernel itself
 * at a small layer's size. grad_weight/grad_bias may be 0. */
int fuseopt_batch_norm_forward_at(fuseopt_agreed_t* stats,
                                  const fuseopt_batch_norm_forward_t* args, uintptr_t x,
                                  uintptr_t y, double* saved);
int fuseopt_batch_norm_backward_at(fuseopt_agreed_t* sums,
                                   const fuseopt_batch_norm_backward_t* args, uintptr_t x,
                                   uintptr_t dy, uintptr_t dx, const double* saved,
                                   uintptr_t grad_weight, uintptr_t grad_bias);

/* The halves of the two calls above, for a caller that sums over the ranks
 * itself (its own transport; benchmarks/syncbn.py's raw-MPI floor). *_sums
 * writes this rank's sums (forward: 1 + 2 * channels values, backward:
 * 2 * channels); *_apply finishes the pass from the sums over every rank
 * (total; backward also takes this rank's own, local). */
int fuseopt_batch_norm_forward_sums(const fuseopt_batch_norm_forward_t* args, double* sums);
int fuseopt_batch_norm_forward_apply(const fuseopt_batch_norm_forward_t* args, const double* total);
int fuseopt_batch_norm_backward_sums(const fuseopt_batch_norm_backward_t* args, double* sums);
int fuseopt_batch_norm_backward_apply(const fuseopt_batch_norm_backward_t* args,
                                      const double* local, const double* total);

/* ---- ef_sign compression kernels (Compression.ef_sign) --------------------
 * One gradient of count float32 values, on host memory. encode: c =
 * residual + gradient; step = max|c| / levels (NaN when c holds a non-finite
 * value); q = round(c / step) (ties to even) within [-levels, levels], 0
 * everywhere when step is 0 or not finite, written to values (the payload
 * to sum over the ranks) and to kept (for decode); residual = c - q * step.
 * levels: 1-127 (127 // ranks, so that the sum fits an int8). */
typedef struct {
  size_t struct_size;
  int64_t count;
  const float* gradient;
  float* residual;
  int8_t* values;
  int8_t* kept;
  int32_t levels;
  int32_t threads;                /* as in fuseopt_batch_norm_forward_t */
  float step;                     /* out */
} fuseopt_ef_sign_encode_t;

int fuseopt_ef_sign_encode(fuseopt_ef_sign_encode_t* args);

/* After values and steps were summed over `ranks` ranks: with mean =
 * step_sum / ranks, residual -= kept * (mean - step) (the others decode this
 * rank's q with the mean step) and out = sum * (mean / ranks): the average
 * gradient, identical on every rank. out may be the gradient. */
typedef struct {
  size_t struct_size;
  int64_t count;
  const int8_t* sum;
  const int8_t* kept;
  float* residual;
  float* out;
  float step_sum, step;
  int32_t ranks;
  int32_t threads;
} fuseopt_ef_sign_decode_t;

int fuseopt_ef_sign_decode(const fuseopt_ef_sign_decode_t* args);

const char* fuseopt_status_string(int status);
const char* fuseopt_dtype_name(int dtype);
int fuseopt_dtype_size(int dtype);  /* bytes per element; 0 for an unknown code */
const char* fuseopt_collective_name(int collective);
const char* fuseopt_reduce_op_name(int op);
/* Rows of a reducescatter result on rank (0 <= rank < size) for a first
 * dimension of rows: rows / size, and one more on the first rows % size
 * ranks. 0 when size <= 0. */
int64_t fuseopt_reducescatter_rows(int64_t rows, int rank, int size);

/* Detail of the last failing call on this thread. */
const char* fuseopt_last_error(void);
/* cdef-end */

#ifdef __cplusplus
}
#endif

#endif /* FUSEOPT_FUSEOPT_H_ */
