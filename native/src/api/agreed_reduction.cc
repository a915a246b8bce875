#include "api/agreed_reduction.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "api/context.h"
#include "base/error.h"
#include "loop/loop.h"

namespace fuseopt {
namespace {

constexpr int64_t kMaxCount = Loop::kAgreedMaxWords - 2;  // the check words

// Every check value this process has made, with the name it stands for: on
// two ranks the other rank's value is sum - own, and it names what that rank
// called (every agreed reduction is negotiated on every rank, so a peer's is
// known here too once both have run it).
std::mutex g_names_mu;
std::map<double, std::string>& names_by_check() {
  static std::map<double, std::string> names;
  return names;
}

// h of Note [Agreed reductions], from the name, size and set: 1 <= h < 2^bits,
// where bits (20 up to 8,192 ranks, fewer beyond) keeps ranks * h * h below
// 2^53, so the sums of h and h * h stay exact in a double.
double check_value(const std::string& name, int64_t count, int32_t set, int ranks) {
  int rank_bits = 0;
  while ((int64_t(1) << rank_bits) < ranks) ++rank_bits;
  const int bits = std::max(4, std::min(20, (53 - rank_bits) / 2));
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash ^= static_cast<const unsigned char*>(p)[i];
      hash *= 1099511628211ull;
    }
  };
  mix(name.data(), name.size());
  mix(&count, sizeof count);
  mix(&set, sizeof set);
  return static_cast<double>(1 + hash % ((uint64_t(1) << bits) - 1));
}

}  // namespace

AgreedReduction::AgreedReduction(Context& context, const std::string& name, int64_t count,
                                 int32_t set, fuseopt_reduce_op_t op)
    : context_(context), name_(name), count_(count), set_(set), op_(op) {
  if (count < 1 || count > kMaxCount)
    throw Error(FUSEOPT_INVALID_ARG, "agreed reduction '" + name + "': count must be 1.." +
                                         std::to_string(kMaxCount));
  if (op != FUSEOPT_SUM && op != FUSEOPT_AVERAGE)
    throw Error(FUSEOPT_UNSUPPORTED, "agreed reduction '" + name + "': only Sum and Average");
  ProcessSetTable::Set members;
  if (!context.process_sets().find(set, &members) || members.rank < 0)
    throw Error(FUSEOPT_INVALID_ARG, "agreed reduction '" + name + "': this rank is not a member "
                                     "of process set " + std::to_string(set));
  set_size_ = static_cast<int32_t>(members.ranks.size());
  check_ = check_value(name, count, set, set_size_);
  wire_.assign(static_cast<size_t>(2 + count), 0.0);
  std::lock_guard<std::mutex> lock(g_names_mu);
  names_by_check()[check_] = name;
}

void AgreedReduction::run(double* values) {
  if (!agreed_) {
    negotiate(values);
  } else {
    wire_[0] = check_;
    wire_[1] = check_ * check_;
    std::memcpy(wire_.data() + 2, values, sizeof(double) * count_);
    if (!context_.agreed_allreduce(set_, wire_.data(), 2 + count_, check_)) throw_mismatch();
    std::memcpy(values, wire_.data() + 2, sizeof(double) * count_);
  }
  if (op_ == FUSEOPT_AVERAGE)
    for (int64_t i = 0; i < count_; ++i) values[i] /= set_size_;
}

void AgreedReduction::negotiate(double* values) {
  const int64_t shape[1] = {count_};
  fuseopt_request_t r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.collective = FUSEOPT_ALLREDUCE;
  const std::string name = "agreed." + name_;
  r.name = name.c_str();
  r.dtype = FUSEOPT_FLOAT64;
  r.reduce_op = FUSEOPT_SUM;
  r.ndim = 1;
  r.shape = shape;
  r.input = values;
  r.output = values;
  r.prescale = r.postscale = 1.0;
  r.process_set = set_;
  int64_t handle = 0;
  context_.enqueue(&r, 1, &handle, false);
  const Outcome outcome = context_.wait(handle, -1, nullptr);
  if (!outcome.ok()) throw Error(outcome.status, outcome.message);
  agreed_ = true;
}

void AgreedReduction::throw_mismatch() const {
  std::string other;
  if (set_size_ == 2) {
    std::lock_guard<std::mutex> lock(g_names_mu);
    auto it = names_by_check().find(wire_[0] - check_);
    if (it != names_by_check().end()) other = " while the other rank called '" + it->second + "'";
  }
  throw Error(FUSEOPT_MISMATCH,
              "ranks disagree about agreed reduction '" + name_ + "' (" + std::to_string(count_) +
                  " values): this rank called it" + other +
                  "; every rank must call the same agreed reductions in the same order");
}

}  // namespace fuseopt
