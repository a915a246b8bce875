#include "policy/coordinator.h"

#include <algorithm>
#include <sstream>

namespace fuseopt {
namespace {

bool all_compatible(const std::vector<Request>& requests) {
  for (const Request& q : requests)
    if (!q.spec.compatible_with(requests.front().spec)) return false;
  return true;
}

// "ranks disagree about tensor 'w': rank 0 has allreduce float32[3] op=sum;
// ranks 1, 2, 3 have allreduce float32[4] op=sum". Groups ranks by what they
// asked for, so the message stays short at any scale.
std::string describe_disagreement(const std::vector<Request>& requests) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> groups;
  for (const Request& q : requests) {
    std::string what = q.spec.describe();
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == what; });
    if (it == groups.end()) groups.push_back({what, {q.rank}});
    else it->second.push_back(q.rank);
  }
  std::ostringstream m;
  m << "ranks disagree about tensor '" << requests.front().spec.name << "': ";
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& ranks = groups[i].second;
    m << (i ? "; " : "") << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t k = 0; k < ranks.size() && k < 8; ++k) m << (k ? ", " : "") << ranks[k];
    if (ranks.size() > 8) m << ", ... (" << ranks.size() << " ranks)";
    m << (ranks.size() == 1 ? " has " : " have ") << groups[i].first;
  }
  return m.str();
}

}  // namespace

Coordinator::Coordinator(int size) : size_(size) {
  for (int r = 0; r < size; ++r) members_.push_back(r);
}

Coordinator::Coordinator(std::vector<int32_t> members)
    : members_(std::move(members)), size_(static_cast<int>(members_.size())) {}

size_t Coordinator::index_of(int32_t rank) const {
  return std::lower_bound(members_.begin(), members_.end(), rank) - members_.begin();
}

void Coordinator::add(const std::vector<Request>& requests, double now_s) {
  for (const Request& q : requests) {
    auto it = table_.find(q.spec.name);
    if (it == table_.end()) {
      Entry e;
      e.present.assign(size_, false);
      e.first_seen_s = now_s;
      e.order = next_order_++;
      it = table_.emplace(q.spec.name, std::move(e)).first;
    }
    Entry& e = it->second;
    e.first_seen_s = std::min(e.first_seen_s, now_s - std::max(0.0, q.waited_s));
    // A rank cannot have two requests for one name in flight (enqueue refuses
    // it), so a repeat here can only be a bug; keep the first.
    const size_t at = index_of(q.rank);
    if (at < e.present.size() && !e.present[at]) {
      e.present[at] = true;
      e.requests.push_back(q);
    }
  }
}

Response Coordinator::make_response(Entry& entry, const std::vector<bool>& joined) const {
  std::sort(entry.requests.begin(), entry.requests.end(),
            [](const Request& a, const Request& b) { return a.rank < b.rank; });
  const Request& first = entry.requests.front();
  Response out;
  out.spec = first.spec;
  if (!all_compatible(entry.requests)) {
    out.error = FUSEOPT_MISMATCH;
    out.error_message = describe_disagreement(entry.requests);
    return out;
  }
  for (int r = 0; r < size_; ++r)
    if (!entry.present[r] && joined[r]) out.joined.push_back(members_[r]);
  // As Horovod: a joined rank has no tensor to gather, send or receive rows
  // for, or root a broadcast with; the ranks that still submit get an error
  // rather than a result that silently leaves it out.
  const fuseopt_collective_t c = first.spec.collective;
  if (!out.joined.empty() &&
      (c == FUSEOPT_ALLGATHER || c == FUSEOPT_BROADCAST || c == FUSEOPT_ALLTOALL ||
       c == FUSEOPT_REDUCE)) {
    out.error = FUSEOPT_INVALID_ARG;
    out.error_message = std::string(fuseopt_collective_name(c)) + " of '" + first.spec.name +
                        "' while rank " + std::to_string(out.joined.front()) +
                        " has joined: not supported with join (as in Horovod); " +
                        (c == FUSEOPT_ALLTOALL ? "rows sent to it would be lost"
                                               : "finish these before join()");
    return out;
  }
  if (first.spec.first_dim_may_differ()) {
    out.first_dims.assign(size_, 0);
    for (const Request& q : entry.requests)
      out.first_dims[index_of(q.rank)] = q.spec.shape.empty() ? 0 : q.spec.shape[0];
  }
  return out;
}

std::vector<Response> Coordinator::take_ready(const std::vector<bool>& joined) {
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& kv : table_) {
    bool all = true;
    for (int r = 0; r < size_ && all; ++r) all = kv.second.present[r] || joined[r];
    if (all) ready.emplace_back(kv.second.order, kv.first);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<Response> out;
  for (const auto& item : ready) {
    auto it = table_.find(item.second);
    out.push_back(make_response(it->second, joined));
    table_.erase(it);
  }
  return out;
}

double Coordinator::oldest_wait_s(double now_s) const {
  double oldest = 0;
  for (const auto& kv : table_) oldest = std::max(oldest, now_s - kv.second.first_seen_s);
  return oldest;
}

std::vector<Stall> Coordinator::stalls(double now_s, double min_s) const {
  std::vector<Stall> out;
  for (const auto& kv : table_) {
    if (now_s - kv.second.first_seen_s < min_s) continue;
    Stall s;
    s.name = kv.first;
    s.waiting_s = now_s - kv.second.first_seen_s;
    for (int r = 0; r < size_; ++r)
      if (!kv.second.present[r]) s.missing_ranks.push_back(members_[r]);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const Stall& a, const Stall& b) { return a.name < b.name; });
  return out;
}

std::vector<Response> Coordinator::take_stalled(double now_s, double min_s) {
  std::vector<Response> out;
  for (const Stall& s : stalls(now_s, min_s)) {
    auto it = table_.find(s.name);
    Response r;
    r.spec = it->second.requests.front().spec;
    r.error = FUSEOPT_RANK_FAILED;
    std::ostringstream m;
    m << "tensor '" << s.name << "' stalled for " << int(s.waiting_s) << " s: rank(s) ";
    for (size_t i = 0; i < s.missing_ranks.size(); ++i) m << (i ? ", " : "") << s.missing_ranks[i];
    m << " never submitted it (FUSEOPT_STALL_SHUTDOWN_S)";
    r.error_message = m.str();
    out.push_back(std::move(r));
    table_.erase(it);
  }
  return out;
}

}  // namespace fuseopt
