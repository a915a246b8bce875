// Full negotiation (loop.h, step 4 of a round): uncached requests go to the
// coordinator, which answers every rank with the same ordered responses and
// names stalled tensors; and the one-off exchange that says who asked to shut
// down.
#include <algorithm>
#include <map>
#include <sstream>

#include "base/log.h"
#include "base/poll_schedule.h"
#include "loop/loop.h"
#include "policy/message_codec.h"

namespace fuseopt {

std::vector<Response> Loop::negotiate_full(ProcessSet& ps) {
  std::vector<Request> mine;
  for (const std::string& name : ps.new_order) {
    Entry* e = ps.pending_entry(name);
    if (!e || e->state != Entry::State::kNew) continue;
    e->state = Entry::State::kSent;
    mine.push_back(Request{rank_, e->spec, now_s() - e->enqueued_s});
  }
  ps.new_order.clear();
  metrics_.add(metrics_.full_negotiations, 1);
  std::vector<char> blob = encode_requests(mine);
  blob.insert(blob.begin(), static_cast<char>(ps.id == 0 && joined_));  // join is global
  std::vector<std::vector<char>> all = ps.control->gather(blob);
  std::vector<char> answer;
  if (ps.coordinator) {
    const double now = now_s();
    std::vector<bool> joined(ps.size(), false);
    for (int i = 0; i < ps.size(); ++i) {
      joined[i] = all[i][0] != 0;
      std::vector<Request> requests = decode_requests(all[i].data() + 1, all[i].size() - 1);
      // Which rank's request reached the coordinator in which round: the
      // per-rank readiness a timeline shows for full negotiations.
      if (timeline_.on())
        for (const Request& q : requests)
          timeline_.instant(q.spec.name, "READY", now, "\"rank\": " + std::to_string(q.rank));
      ps.coordinator->add(std::move(requests), now);
    }
    std::vector<Response> ready = ps.coordinator->take_ready(joined);
    warn_stalls(ps, now);
    if (config_.stall_shutdown_s > 0) {
      std::vector<Response> failed = ps.coordinator->take_stalled(now, config_.stall_shutdown_s);
      ready.insert(ready.end(), failed.begin(), failed.end());
    }
    answer = encode_responses(ready);
  }
  answer = ps.control->broadcast(std::move(answer));
  return decode_responses(answer.data(), answer.size());
}

void Loop::warn_stalls(ProcessSet& ps, double now) {
  if (config_.stall_check_s <= 0) return;
  // One line per set of missing ranks: 200 stalled gradients of one step are
  // one fact ("rank 3 is not there"), not 200.
  std::map<std::vector<int32_t>, std::vector<Stall>> due;
  std::map<std::string, double> next;  // names no longer stalled are forgotten
  for (Stall& s : ps.coordinator->stalls(now, config_.stall_check_s)) {
    auto it = ps.stall_next_warning_s.find(s.name);
    if (it != ps.stall_next_warning_s.end() && now < it->second) {
      next.insert(*it);
      continue;
    }
    next[s.name] = now + config_.stall_check_s;
    due[s.missing_ranks].push_back(std::move(s));
  }
  ps.stall_next_warning_s.swap(next);
  for (const auto& group : due) {
    metrics_.add(metrics_.stalls, 1);
    const std::vector<Stall>& stalls = group.second;
    double longest = 0;
    std::vector<std::string> names;
    for (const Stall& s : stalls) {
      longest = std::max(longest, s.waiting_s);
      names.push_back("'" + s.name + "'");
    }
    std::ostringstream ranks;
    for (size_t i = 0; i < group.first.size(); ++i) ranks << (i ? ", " : "") << group.first[i];
    std::ostringstream m;
    if (stalls.size() == 1)
      m << "tensor " << names[0] << " has waited " << int(longest) << " s: ranks " << ranks.str()
        << " have not submitted it";
    else
      m << stalls.size() << " tensors have waited up to " << int(longest) << " s: ranks "
        << ranks.str() << " have not submitted them: " << join_names(names, 10);
    if (ps.id != 0) m << " (process set " << ps.id << ", ranks " << ranks_string(ps.ranks) << ")";
    m << " (FUSEOPT_STALL_CHECK_S=" << config_.stall_check_s << "; warned again every "
      << config_.stall_check_s << " s while it lasts)";
    FUSEOPT_LOG(kWarning, m.str());
  }
}

Outcome Loop::shutdown_reason(bool requested_here) {
  // Who asked? Only when stopping, so one small allgather is affordable, and
  // it lets a rank that is shut down by another say so in its error.
  std::vector<char> asked = global().control->allgather_flag(requested_here);
  std::ostringstream m;
  m << "fuseopt has been shut down";
  if (!requested_here) {
    m << " by rank";
    int count = 0;
    for (int r = 0; r < size_; ++r)
      if (asked[r]) m << (count++ ? ", " : " ") << r;
    m << " (it called shutdown() or its process is exiting)";
  }
  return Outcome{FUSEOPT_SHUT_DOWN, m.str()};
}

}  // namespace fuseopt
