#include "api/context.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <future>
#include <sstream>

#include "base/dtype.h"
#include "base/log.h"
#include "base/poll_schedule.h"
#include "loop/loop.h"
#include "transport/mpi/adasum.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

namespace {

std::mutex g_cancel_mu;
bool g_init_cancelled = false;
Outcome g_cancel_reason;

bool take_init_cancel(Outcome* reason) {
  std::lock_guard<std::mutex> lock(g_cancel_mu);
  if (!g_init_cancelled) return false;
  *reason = g_cancel_reason;
  return true;
}

}  // namespace

void cancel_init(const Outcome& reason) {
  std::lock_guard<std::mutex> lock(g_cancel_mu);
  if (g_init_cancelled) return;  // the first news wins
  g_init_cancelled = true;
  g_cancel_reason = reason;
}

Context::Context(const fuseopt_config_t& config) : config_(config) {
  validate_config(config_);
  set_log_level(config_.log_level);
  loop_.reset(new Loop(config_, inbox_, handles_, metrics_, timeline_, process_sets_));
  config_.autotune_log = nullptr;  // copied by the loop; the caller's string may go
}

void Context::start() {
  std::future<fuseopt_comm_info_t> info = started_.get_future();
  thread_ = std::thread([this] {
    loop_->run(&started_);
    loop_exited_ = true;
  });
  // Wait in slices: MPI_Init_thread and the first exchange block until every
  // rank has come, and a rank that failed before init never will.
  const double began = now_s();
  Outcome why;
  while (info.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const double waited = now_s() - began;
    if (!take_init_cancel(&why) && !(config_.init_timeout_s > 0 && waited > config_.init_timeout_s))
      continue;
    if (why.ok()) {
      std::ostringstream m;
      m << "fuseopt.init() waited " << static_cast<int64_t>(waited) << " s for the other ranks "
        << "while " << loop_->busy().what << " (FUSEOPT_INIT_TIMEOUT_S=" << config_.init_timeout_s
        << "): a rank failed before or during init(), or is stuck before calling it";
      why = Outcome{FUSEOPT_RANK_FAILED, m.str()};
    }
    MpiWorld::abandon();
    thread_.detach();
    abandoned_ = true;
    throw Error(why.status, why.message);
  }
  try {
    info_ = info.get();
  } catch (...) {
    thread_.join();
    throw;
  }
  if (config_.peer_timeout_s > 0 && info_.size > 1) watchdog_ = std::thread([this] { watch(); });
}

void Context::note_error_delivered() {
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.error_delivered = true;
  }
  inbox_.wake.notify_all();
}

Context::~Context() { shutdown(); }

void Context::shutdown() {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  closing_.store(true);
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.shutdown_requested = true;
  }
  inbox_.wake.notify_all();
  stop_watchdog();
  if (!thread_.joinable()) return;
  if (inbox_.aborted) {
    // The loop leaves at its next check, unless it is blocked inside MPI
    // waiting for the lost rank; then it never returns: let it be.
    for (int i = 0; i < 50 && !loop_exited_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!loop_exited_) {
      thread_.detach();
      loop_.release();
      return;
    }
  }
  thread_.join();
  while (helpers_.load() > 0) std::this_thread::yield();  // none can start now
  loop_.reset();  // MPI communicators and buffers; the handle table stays
  timeline_.stop();
}

void Context::abort(const Outcome& reason) {
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    if (inbox_.stopped || inbox_.aborted) return;  // already down: keep the first reason
    inbox_.aborted = true;
    inbox_.stopped = true;
    inbox_.stop_reason = reason;
    inbox_.queue.clear();
  }
  inbox_.wake.notify_all();
  MpiWorld::abandon();
  FUSEOPT_LOG(kError, reason.message);
  handles_.fail_pending(reason);
}

void Context::watch() {
  const double limit = config_.peer_timeout_s;
  const auto tick = std::chrono::milliseconds(
      std::max<int64_t>(20, std::min<int64_t>(1000, static_cast<int64_t>(limit * 100))));
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, tick, [&] { return watch_stop_; })) {
    if (loop_exited_) return;
    const Loop::Busy busy = loop_->busy();
    if (busy.since_s == 0 || now_s() - busy.since_s < limit) continue;
    std::ostringstream m;
    m << "no answer from the other ranks for " << static_cast<int64_t>(now_s() - busy.since_s)
      << " s while " << busy.what << " (FUSEOPT_PEER_TIMEOUT_S=" << limit
      << "): a rank has died, frozen or lost its network; restart the job, from a checkpoint";
    lock.unlock();
    abort(Outcome{FUSEOPT_RANK_FAILED, m.str()});
    return;
  }
}

void Context::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
}

// Validation runs on every enqueue, so the message is only built on failure.
#define REQUIRE(ok, what)                                   \
  do {                                                      \
    if (!(ok)) throw Error(FUSEOPT_INVALID_ARG, (what));    \
  } while (0)

std::string Context::auto_name(int32_t set, int collective, bool advance) {
  // Each set counts on its own: its members alone submit to it, and the
  // names of the other sets' and the global set's requests must still match.
  uint64_t& n = set == 0 ? auto_name_counter_[collective] : set_name_counters_[{set, collective}];
  std::string name = std::string(fuseopt_collective_name(collective)) + ".noname." +
                     (set == 0 ? std::string() : "set" + std::to_string(set) + ".") +
                     std::to_string(n);
  if (advance) ++n;
  return name;
}

namespace {

// "allreduce 'name'", for messages.
std::string who(const TensorSpec& s) {
  return std::string(fuseopt_collective_name(s.collective)) + " '" + s.name + "'";
}

// The tensor itself: dtype, shape and input buffer (the name is set).
void take_tensor(const fuseopt_request_t& q, Entry* e) {
  TensorSpec& s = e->spec;
  REQUIRE(!s.name.empty(), "tensor name must not be empty");
  REQUIRE(is_valid_dtype(q.dtype), "unsupported dtype code " + std::to_string(q.dtype) +
                                       " for tensor '" + s.name + "'");
  s.dtype = q.dtype;
  REQUIRE(q.ndim >= 0 && q.ndim <= FUSEOPT_MAX_NDIM,
          who(s) + ": ndim must be 0.." + std::to_string(FUSEOPT_MAX_NDIM));
  REQUIRE(q.ndim == 0 || q.shape, who(s) + ": shape is NULL");
  for (int i = 0; i < q.ndim; ++i) {
    REQUIRE(q.shape[i] >= 0, who(s) + ": negative dimension in shape");
    s.shape.push_back(q.shape[i]);
  }
  REQUIRE(s.num_elements() == 0 || q.input, who(s) + ": input buffer is NULL");
}

// Allreduce and reducescatter: the reduce op and scale factors.
void take_reduction(const fuseopt_request_t& q, TensorSpec* s) {
  REQUIRE(q.reduce_op >= 0 && q.reduce_op < FUSEOPT_REDUCE_OP_COUNT,
          who(*s) + ": unknown reduce op " + std::to_string(q.reduce_op));
  REQUIRE(std::isfinite(q.prescale) && std::isfinite(q.postscale),
          who(*s) + ": prescale and postscale must be finite");
  s->reduce_op = q.reduce_op;
  s->prescale = q.prescale;
  s->postscale = q.postscale;
}

// Alltoall: the rows for each rank of the set, or an even split.
void take_splits(const fuseopt_request_t& q, int set_size, Entry* e) {
  const TensorSpec& s = e->spec;
  if (!q.splits) {
    REQUIRE(s.shape[0] % set_size == 0,
            who(s) + ": first dimension " + std::to_string(s.shape[0]) +
                " is not divisible by the number of ranks; pass splits");
    return;
  }
  REQUIRE(q.num_splits == set_size, who(s) + ": " + std::to_string(q.num_splits) +
                                        " splits given for " + std::to_string(set_size) +
                                        " ranks");
  int64_t total = 0;
  for (int r = 0; r < set_size; ++r) {
    REQUIRE(q.splits[r] >= 0, who(s) + ": negative split");
    total += q.splits[r];
    e->splits.push_back(q.splits[r]);
  }
  REQUIRE(total == s.shape[0], who(s) + ": splits add up to " + std::to_string(total) +
                                   " rows but the first dimension is " +
                                   std::to_string(s.shape[0]));
}

// What runs on host memory only, known once the device is (take_device).
void check_host_only(const Entry& e) {
  const TensorSpec& s = e.spec;
  if (s.collective == FUSEOPT_REDUCE && s.device != FUSEOPT_DEVICE_HOST)
    throw Error(FUSEOPT_UNSUPPORTED, who(s) + ": reduce runs on host memory only so far; copy "
                                              "the tensor to the CPU");
  if (e.process_set != 0 && s.device != FUSEOPT_DEVICE_HOST)
    throw Error(FUSEOPT_UNSUPPORTED, who(s) + ": process sets run on host memory only so far; "
                                              "copy the tensor to the CPU, or use the global set");
  if (s.reduce_op != FUSEOPT_ADASUM) return;
  REQUIRE(s.collective == FUSEOPT_ALLREDUCE, who(s) + ": Adasum is an allreduce op only");
  REQUIRE(adasum_dtype(s.dtype), who(s) + ": Adasum reduces float16, bfloat16, float32 "
                                          "and float64 tensors only, not " + fuseopt_dtype_name(s.dtype));
  if (s.device != FUSEOPT_DEVICE_HOST)
    throw Error(FUSEOPT_UNSUPPORTED, who(s) + ": Adasum runs on host memory only; copy the "
                                              "tensor to the CPU (NCCL/HCCL Adasum is not built)");
}

// A float32 allreduce that travels as a 16-bit float (fuseopt_request_t::wire):
// spec.dtype becomes the wire type, which is what the ranks negotiate.
void take_wire(const fuseopt_request_t& q, Entry* e) {
  constexpr size_t kWireEnd = offsetof(fuseopt_request_t, wire) + sizeof(int32_t);
  if (q.struct_size < kWireEnd || q.wire == FUSEOPT_WIRE_AS_IS) return;
  TensorSpec& s = e->spec;
  REQUIRE(q.wire == FUSEOPT_WIRE_FLOAT16 || q.wire == FUSEOPT_WIRE_BFLOAT16,
          who(s) + ": unknown wire type " + std::to_string(q.wire));
  REQUIRE(s.collective == FUSEOPT_ALLREDUCE,
          who(s) + ": only an allreduce may travel as a 16-bit float");
  REQUIRE(s.dtype == FUSEOPT_FLOAT32, who(s) + ": only a float32 tensor may travel as a 16-bit "
                                               "float, not " + fuseopt_dtype_name(s.dtype));
  REQUIRE(s.reduce_op != FUSEOPT_ADASUM,
          who(s) + ": Adasum does not reduce tensors that travel as 16-bit floats");
  if (s.device != FUSEOPT_DEVICE_HOST)
    throw Error(FUSEOPT_UNSUPPORTED, who(s) + ": only host tensors travel as 16-bit floats; "
                                              "cast a device tensor before the allreduce");
  s.dtype = q.wire == FUSEOPT_WIRE_FLOAT16 ? FUSEOPT_FLOAT16 : FUSEOPT_BFLOAT16;
  e->narrowed = true;
}

}  // namespace

Entry Context::validate(const fuseopt_request_t& q) {
  REQUIRE(q.collective >= 0 && q.collective < FUSEOPT_COLLECTIVE_COUNT,
          "unknown collective " + std::to_string(q.collective));
  if (q.collective == FUSEOPT_PROCESS_SET_ADD || q.collective == FUSEOPT_PROCESS_SET_REMOVE)
    return validate_set_change(q);
  Entry e;
  TensorSpec& s = e.spec;
  s.collective = q.collective;
  ProcessSetTable::Set set;
  take_process_set(q, &e, &set);
  if (q.collective == FUSEOPT_BARRIER || q.collective == FUSEOPT_JOIN)
    return validate_barrier_or_join(q, std::move(e));
  // Unnamed requests match across ranks by count, so the counter advances only
  // for requests that are accepted (at the end of this function).
  s.name = q.name ? std::string(q.name) : auto_name(e.process_set, q.collective, false);
  take_tensor(q, &e);
  const bool reduces = q.collective == FUSEOPT_ALLREDUCE ||
                       q.collective == FUSEOPT_REDUCESCATTER || q.collective == FUSEOPT_REDUCE;
  if (reduces) take_reduction(q, &s);
  if (reduces || q.collective == FUSEOPT_BROADCAST)
    REQUIRE(s.num_elements() == 0 || q.output, who(s) + ": output buffer is NULL");
  if (q.collective == FUSEOPT_BROADCAST || q.collective == FUSEOPT_REDUCE) take_root(q, set, &e);
  if (q.collective == FUSEOPT_REDUCESCATTER || q.collective == FUSEOPT_ALLTOALL ||
      q.collective == FUSEOPT_ALLGATHER)
    REQUIRE(q.ndim >= 1, who(s) + ": needs at least one dimension");
  if (q.collective == FUSEOPT_ALLTOALL) take_splits(q, static_cast<int>(set.ranks.size()), &e);
  REQUIRE(q.phase >= 0, who(s) + ": negative phase");  // 0 for structs that predate it
  s.phase = q.phase;
  e.input = q.input;
  e.output = q.output;
  take_device(q, &e);  // device_request.cc
  check_host_only(e);
  take_wire(q, &e);
  if (!q.name) auto_name(e.process_set, q.collective, true);
  return e;
}

Entry Context::validate_barrier_or_join(const fuseopt_request_t& q, Entry e) {
  TensorSpec& s = e.spec;
  REQUIRE(q.collective == FUSEOPT_BARRIER || e.process_set == 0,
          "join is for every rank (the global process set), as in Horovod");
  s.dtype = FUSEOPT_UINT8;
  s.shape = {0};
  if (q.collective == FUSEOPT_JOIN) {
    s.name = "join";
    e.output = q.output;  // NULL, or an int32 for the last rank to join
  }
  else s.name = q.name ? q.name : auto_name(e.process_set, q.collective, true);
  return e;  // nothing left to refuse, so the counter may advance
}

void Context::take_root(const fuseopt_request_t& q, const ProcessSetTable::Set& set,
                        Entry* e) const {
  const TensorSpec& s = e->spec;
  REQUIRE(q.root >= 0 && q.root < info_.size,
          who(s) + ": root " + std::to_string(q.root) + " is not a rank (size " +
              std::to_string(info_.size) + ")");
  REQUIRE(std::binary_search(set.ranks.begin(), set.ranks.end(), q.root),
          who(s) + ": root " + std::to_string(q.root) + " is not a member of process set " +
              std::to_string(e->process_set) + " (ranks " + ranks_string(set.ranks) + ")");
  e->spec.root = q.root;
}

void Context::enqueue(const fuseopt_request_t* requests, int64_t count, int64_t* handles,
                      bool announce) {
  std::unique_lock<std::mutex> lock(inbox_.mu);
  if (inbox_.stopped) {
    const Outcome reason = inbox_.stop_reason;
    lock.unlock();
    note_error_delivered();
    throw Error(reason.status, reason.message);
  }
  if (inbox_.shutdown_requested) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt is shutting down");
  // All or nothing: a refused request must not leave earlier ones of the same
  // call queued, nor advance the counters that name unnamed requests (other
  // ranks match those by count).
  uint64_t counters[FUSEOPT_COLLECTIVE_COUNT];
  std::copy(auto_name_counter_, auto_name_counter_ + FUSEOPT_COLLECTIVE_COUNT, counters);
  const auto set_counters = set_name_counters_;
  std::vector<Entry> entries;
  entries.reserve(count);
  try {
    for (int64_t i = 0; i < count; ++i) {
      entries.push_back(validate(request_at(requests, i)));  // device_request.cc
      Entry& e = entries.back();
      e.handle = handles_.create(e.spec.name, e.process_set);
    }
  } catch (...) {
    for (const Entry& e : entries)
      if (e.handle) handles_.discard(e.handle);
    std::copy(counters, counters + FUSEOPT_COLLECTIVE_COUNT, auto_name_counter_);
    set_name_counters_ = set_counters;
    throw;
  }
  const double now = now_s();
  for (int64_t i = 0; i < count; ++i) {
    handles[i] = entries[i].handle;
    entries[i].enqueued_s = now;
    inbox_.queue.push_back(std::move(entries[i]));
  }
  inbox_.enqueued.fetch_add(count, std::memory_order_relaxed);
  // A busy loop thread drains the queue on its own; a futex wake per tensor
  // would cost a system call each. Unannounced work: see help().
  const bool wake = inbox_.round_waiters > 0 && announce;
  inbox_.unannounced = inbox_.unannounced || !announce;
  lock.unlock();
  if (wake) inbox_.wake.notify_all();  // the loop thread, and a framework thread's round
}

#undef REQUIRE

}  // namespace fuseopt
