#include "loop/process_set_table.h"

#include <algorithm>
#include <sstream>

namespace fuseopt {

void ProcessSetTable::reset(int size, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.clear();
  Set all;
  for (int r = 0; r < size; ++r) all.ranks.push_back(r);
  all.rank = rank;
  sets_[0] = std::move(all);
  next_id_ = 1;
  rank_ = rank;
}

bool ProcessSetTable::find(int32_t id, Set* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return false;
  *out = it->second;
  return true;
}

int32_t ProcessSetTable::id_of(const std::vector<int32_t>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& kv : sets_)
    if (kv.second.ranks == ranks) return kv.first;
  return -1;
}

int32_t ProcessSetTable::add(const std::vector<int32_t>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  Set s;
  s.ranks = ranks;
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  s.rank = it == ranks.end() ? -1 : static_cast<int32_t>(it - ranks.begin());
  sets_[next_id_] = std::move(s);
  return next_id_++;
}

void ProcessSetTable::remove(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.erase(id);
}

int32_t ProcessSetTable::next_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_;
}

std::string ranks_string(const std::vector<int32_t>& ranks) {
  std::ostringstream m;
  m << "[";
  for (size_t i = 0; i < ranks.size(); ++i) m << (i ? ", " : "") << ranks[i];
  m << "]";
  return m.str();
}

}  // namespace fuseopt
