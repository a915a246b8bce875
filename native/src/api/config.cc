// Built-in defaults for every knob, declared once. The Python layer reads
// these through fuseopt_config_default and only adds environment overrides.
#include <cmath>
#include <string>

#include "api/context.h"
#include "base/error.h"

namespace fuseopt {

void default_config(fuseopt_config_t* c) {
  c->struct_size = sizeof(fuseopt_config_t);
  // Bounds bucket (and fusion buffer) size. Buckets hold only what is ready,
  // so a large threshold never delays a collective; 64 MiB keeps memory modest
  // while a 64 MiB MPI allreduce already runs at full bandwidth.
  c->fusion_threshold_bytes = int64_t(64) << 20;
  // No artificial delay: the loop wakes on enqueue, and tensors that arrive
  // while a round is in progress are batched into the next one anyway.
  c->cycle_time_us = 0;
  c->cache_capacity = 1024;
  c->stall_check_s = 60;
  c->stall_shutdown_s = 0;
  c->log_level = FUSEOPT_LOG_WARNING;
  c->emulated_local_size = 0;
  c->mpi_thread_multiple = 0;
  // Plain or streaming stores, whichever is faster where the host has put
  // the ranks' cores now (Note [Streamed slots]).
  c->shm_stores = 0;
  // Every size: with barriers through shared memory (Note [Shared-memory
  // barrier]) the path beats MPICH's non-blocking allreduce from 4 KiB up
  // (2 ranks, 4 KiB 25-40 us against 40-60, 64 KiB 34-61 against 84-158).
  c->shm_min_bytes = 0;
  // Healthy rounds finish within an idle tick (50 ms) and a collective within
  // seconds even for huge buckets, so 30 s of silence means a lost peer.
  c->peer_timeout_s = 30;
  c->hierarchical_allreduce = 0;
  c->autotune = 0;
  // A training step runs one to a few rounds with collectives, so a window is
  // roughly 10-30 steps: long enough to average out this machine's jitter.
  c->autotune_window_rounds = 30;
  c->autotune_log = nullptr;
  // Starting MPI on a busy cluster takes seconds; two minutes without every
  // rank means one never came.
  c->init_timeout_s = 120;
}

void validate_config(const fuseopt_config_t& c) {
  auto bad = [](const std::string& what) { throw Error(FUSEOPT_INVALID_ARG, what); };
  if (c.struct_size < sizeof(fuseopt_config_t))
    bad("config.struct_size is smaller than this library's fuseopt_config_t");
  if (c.fusion_threshold_bytes < 0) bad("fusion_threshold (FUSEOPT_FUSION_THRESHOLD) must be >= 0 bytes");
  if (c.cycle_time_us < 0) bad("cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0");
  if (c.cache_capacity < 0) bad("cache_capacity (FUSEOPT_CACHE_CAPACITY) must be >= 0");
  if (c.cache_capacity > (int64_t(1) << 20)) bad("cache_capacity (FUSEOPT_CACHE_CAPACITY) must be <= 1048576");
  if (c.stall_check_s < 0 || c.stall_shutdown_s < 0) bad("stall_check_s and stall_shutdown_s (FUSEOPT_STALL_*_S) must be >= 0");
  if (c.log_level < 0 || c.log_level >= FUSEOPT_LOG_LEVEL_COUNT) bad("log_level (FUSEOPT_LOG_LEVEL) must be 0 (trace) .. 4 (error)");
  if (c.emulated_local_size < 0) bad("emulated_local_size (FUSEOPT_EMULATED_LOCAL_SIZE) must be >= 0");
  if (!(c.peer_timeout_s >= 0) || !std::isfinite(c.peer_timeout_s))
    bad("peer_timeout_s (FUSEOPT_PEER_TIMEOUT_S) must be a finite number >= 0 (0: off)");
  if (c.hierarchical_allreduce != 0 && c.hierarchical_allreduce != 1)
    bad("hierarchical_allreduce (FUSEOPT_HIERARCHICAL_ALLREDUCE) must be 0 or 1");
  if (c.autotune != 0 && c.autotune != 1) bad("autotune (FUSEOPT_AUTOTUNE) must be 0 or 1");
  if (c.autotune_window_rounds < 1) bad("autotune_window_rounds (FUSEOPT_AUTOTUNE_WINDOW_ROUNDS) must be >= 1");
  if (c.shm_stores < 0 || c.shm_stores > 2)
    bad("shm_stores (FUSEOPT_SHM_STORES) must be auto (0), cached (1) or streamed (2)");
  if (c.shm_min_bytes < -1) bad("shm_min_bytes (FUSEOPT_SHM_MIN_BYTES) must be >= 0 bytes, or -1 (off)");
  if (!(c.init_timeout_s >= 0) || !std::isfinite(c.init_timeout_s))
    bad("init_timeout_s (FUSEOPT_INIT_TIMEOUT_S) must be a finite number >= 0 (0: wait forever)");
}

}  // namespace fuseopt
