#include "context.h"

#include <cmath>
#include <future>

#include "dtype.h"
#include "log.h"
#include "loop.h"
#include "mpi_world.h"

namespace fuseopt {

Context::Context(const fuseopt_config_t& config) : config_(config) {
  validate_config(config_);
  set_log_level(config_.log_level);
  std::unique_ptr<MpiWorld> world(new MpiWorld(config_.emulated_local_size));
  loop_.reset(new Loop(config_, inbox_, handles_, std::move(world)));
  std::promise<fuseopt_comm_info_t> started;
  std::future<fuseopt_comm_info_t> info = started.get_future();
  thread_ = std::thread([this, &started] { loop_->run(&started); });
  try {
    info_ = info.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

Context::~Context() { shutdown(); }

void Context::shutdown() {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.shutdown_requested = true;
  }
  inbox_.wake.notify_all();
  if (thread_.joinable()) thread_.join();
  loop_.reset();  // MPI communicators and buffers; the handle table stays
}

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(FUSEOPT_INVALID_ARG, what);
}

}  // namespace

Entry Context::validate(const fuseopt_request_t& q) {
  require(q.struct_size >= sizeof(fuseopt_request_t),
          "request.struct_size is smaller than this library's fuseopt_request_t");
  require(q.collective >= 0 && q.collective < FUSEOPT_COLLECTIVE_COUNT,
          "unknown collective " + std::to_string(q.collective));
  Entry e;
  TensorSpec& s = e.spec;
  s.collective = q.collective;
  if (q.collective == FUSEOPT_BARRIER || q.collective == FUSEOPT_JOIN) {
    s.dtype = FUSEOPT_UINT8;
    s.shape = {0};
    if (q.collective == FUSEOPT_JOIN) s.name = "join";
    else s.name = q.name ? q.name : "barrier.noname." + std::to_string(auto_name_counter_[q.collective]++);
    return e;  // nothing left to refuse, so the counter may advance
  }
  std::string prefix = std::string(fuseopt_collective_name(q.collective));
  // Unnamed requests match across ranks by count, so the counter advances only
  // for requests that are accepted (at the end of this function).
  s.name = q.name ? std::string(q.name)
                  : prefix + ".noname." + std::to_string(auto_name_counter_[q.collective]);
  require(!s.name.empty(), "tensor name must not be empty");
  require(is_valid_dtype(q.dtype), "unsupported dtype code " + std::to_string(q.dtype) +
                                       " for tensor '" + s.name + "'");
  s.dtype = q.dtype;
  const std::string who = prefix + " '" + s.name + "'";
  require(q.ndim >= 0 && q.ndim <= FUSEOPT_MAX_NDIM,
          who + ": ndim must be 0.." + std::to_string(FUSEOPT_MAX_NDIM));
  require(q.ndim == 0 || q.shape, who + ": shape is NULL");
  for (int i = 0; i < q.ndim; ++i) {
    require(q.shape[i] >= 0, who + ": negative dimension in shape");
    s.shape.push_back(q.shape[i]);
  }
  const int64_t n = s.num_elements();
  require(n == 0 || q.input, who + ": input buffer is NULL");
  if (q.collective == FUSEOPT_ALLREDUCE || q.collective == FUSEOPT_REDUCESCATTER) {
    require(q.reduce_op >= 0 && q.reduce_op < FUSEOPT_REDUCE_OP_COUNT,
            who + ": unknown reduce op " + std::to_string(q.reduce_op));
    require(std::isfinite(q.prescale) && std::isfinite(q.postscale),
            who + ": prescale and postscale must be finite");
    s.reduce_op = q.reduce_op;
    s.prescale = q.prescale;
    s.postscale = q.postscale;
  }
  if (q.collective == FUSEOPT_ALLREDUCE || q.collective == FUSEOPT_BROADCAST ||
      q.collective == FUSEOPT_REDUCESCATTER)
    require(n == 0 || q.output, who + ": output buffer is NULL");
  if (q.collective == FUSEOPT_BROADCAST) {
    require(q.root >= 0 && q.root < info_.size,
            who + ": root " + std::to_string(q.root) + " is not a rank (size " +
                std::to_string(info_.size) + ")");
    s.root = q.root;
  }
  if (q.collective == FUSEOPT_REDUCESCATTER || q.collective == FUSEOPT_ALLTOALL ||
      q.collective == FUSEOPT_ALLGATHER)
    require(q.ndim >= 1, who + ": needs at least one dimension");
  if (q.collective == FUSEOPT_ALLTOALL) {
    if (q.splits) {
      require(q.num_splits == info_.size,
              who + ": " + std::to_string(q.num_splits) + " splits given for " +
                  std::to_string(info_.size) + " ranks");
      int64_t total = 0;
      for (int r = 0; r < info_.size; ++r) {
        require(q.splits[r] >= 0, who + ": negative split");
        total += q.splits[r];
        e.splits.push_back(q.splits[r]);
      }
      require(total == s.shape[0], who + ": splits add up to " + std::to_string(total) +
                                       " rows but the first dimension is " +
                                       std::to_string(s.shape[0]));
    } else {
      require(s.shape[0] % info_.size == 0,
              who + ": first dimension " + std::to_string(s.shape[0]) +
                  " is not divisible by the number of ranks; pass splits");
    }
  }
  e.input = q.input;
  e.output = q.output;
  if (!q.name) ++auto_name_counter_[q.collective];
  return e;
}

int64_t Context::enqueue(const fuseopt_request_t& request) {
  std::unique_lock<std::mutex> lock(inbox_.mu);
  if (inbox_.stopped) throw Error(inbox_.stop_reason.status, inbox_.stop_reason.message);
  if (inbox_.shutdown_requested) throw Error(FUSEOPT_SHUT_DOWN, "fuseopt is shutting down");
  Entry e = validate(request);
  e.handle = handles_.create(e.spec.name);
  const int64_t handle = e.handle;
  inbox_.queue.push_back(std::move(e));
  // A busy loop thread drains the queue on its own; a futex wake per tensor
  // would cost a system call each.
  const bool wake = inbox_.loop_waiting;
  lock.unlock();
  if (wake) inbox_.wake.notify_one();
  return handle;
}

}  // namespace fuseopt
