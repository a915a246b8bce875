// Process sets in the loop (process_set.h): adding and removing them, which
// runs as global work so that every rank changes its sets in the same round
// and order, and the per-set activity field of the global round vector,
// which tells a set's members to run a round of that set.
#include <algorithm>

#include "base/log.h"
#include "loop/loop.h"
#include "policy/bits.h"

namespace fuseopt {

std::unique_ptr<ProcessSet> Loop::make_set(int32_t id, std::vector<int32_t> ranks) {
  const auto at = std::lower_bound(ranks.begin(), ranks.end(), rank_);
  const bool member = at != ranks.end() && *at == rank_;
  // Collective over every rank, members or not.
  std::unique_ptr<MpiWorld> world = global().world->subset(member);
  if (!member) return nullptr;
  std::unique_ptr<ProcessSet> ps(new ProcessSet);
  ps->id = id;
  ps->rank = static_cast<int>(at - ranks.begin());
  ps->global_rank = rank_;
  ps->ranks = std::move(ranks);
  ps->world = std::move(world);
  ps->control.reset(new ControlPlane(*ps->world));
  // No shared-memory path (-1): it would need a window per set, while the
  // set's collectives run over its own communicator at MPI's speed.
  ps->backend.reset(new MpiBackend(*ps->world, -1, config_.hierarchical_allreduce, config_.shm_stores));
  ps->executor.reset(
      new Executor(*ps->backend, handles_, metrics_, timeline_, ps->rank, ps->size()));
  ps->executor->set_members(ps->ranks);
  ps->executor->set_fusion_threshold(config_.fusion_threshold_bytes);
  ps->cache.reset(new ResponseCache(config_.cache_capacity));
  if (ps->rank == 0) ps->coordinator.reset(new Coordinator(ps->ranks));
  return ps;
}

void Loop::change_sets(std::vector<Work>& work) {
  std::vector<Work> rest;
  for (Work& w : work) {
    const fuseopt_collective_t c = w.response.spec.collective;
    if (c != FUSEOPT_PROCESS_SET_ADD && c != FUSEOPT_PROCESS_SET_REMOVE) {
      rest.push_back(std::move(w));
      continue;
    }
    if (w.response.is_error()) {
      if (w.entry)
        handles_.complete(w.entry->handle, Outcome{w.response.error, w.response.error_message});
    } else if (c == FUSEOPT_PROCESS_SET_ADD) {
      add_set(w);
    } else {
      remove_set(w);
    }
    if (w.entry) global().pending.erase(w.response.spec.name);
  }
  work.swap(rest);
}

void Loop::add_set(Work& w) {
  const std::vector<int32_t> ranks(w.response.spec.shape.begin(), w.response.spec.shape.end());
  Outcome outcome;
  const int32_t existing = table_.id_of(ranks);
  if (existing >= 0) {
    outcome = Outcome{FUSEOPT_INVALID_ARG, "a process set of ranks " + ranks_string(ranks) +
                                               " exists already (id " +
                                               std::to_string(existing) + ")"};
  } else {
    const int32_t id = table_.next_id();
    std::unique_ptr<ProcessSet> ps = make_set(id, ranks);
    table_.add(ranks);
    if (ps) sets_[id] = std::move(ps);
    ++subsets_;
    if (w.entry && w.entry->output) *static_cast<int32_t*>(w.entry->output) = id;
    FUSEOPT_LOG(kDebug, "process set " << id << " of ranks " << ranks_string(ranks) << " added");
  }
  if (w.entry) handles_.complete(w.entry->handle, outcome);
}

void Loop::remove_set(Work& w) {
  const int32_t id = static_cast<int32_t>(w.response.spec.shape.at(0));
  Outcome outcome;
  ProcessSetTable::Set known;
  if (!table_.find(id, &known)) {
    outcome = Outcome{FUSEOPT_INVALID_ARG,
                      "process set " + std::to_string(id) + " does not exist (removed already?)"};
  } else {
    auto it = sets_.find(id);
    if (it != sets_.end()) {
      const Outcome gone{FUSEOPT_INVALID_ARG, "process set " + std::to_string(id) +
                                                  " was removed while this operation was in "
                                                  "flight"};
      for (auto& kv : it->second->pending) handles_.complete(kv.second.handle, gone);
      sets_.erase(it);  // frees its communicators: every member, in the same round
    }
    table_.remove(id);
    --subsets_;
  }
  if (w.entry) handles_.complete(w.entry->handle, outcome);
}

int64_t Loop::set_words() const { return (set_ids_at_round_ + 63) / 64; }

void Loop::put_set_activity(std::vector<uint64_t>* words) {
  // Inverted, like the other OR-facts: bit id stays 1 unless somebody has a
  // tensor of set id in flight.
  set_ids_at_round_ = table_.next_id();
  const int64_t base = static_cast<int64_t>(words->size());
  words->resize(words->size() + set_words(), ~uint64_t(0));
  for (const auto& kv : sets_)
    if (kv.first != 0 && !kv.second->pending.empty()) set_bit(*words, base, kv.first, false);
}

std::vector<int32_t> Loop::active_sets(const std::vector<uint64_t>& words) const {
  std::vector<int32_t> active;
  const int64_t base = 1 + 2 * words_per_section();
  for (const auto& kv : sets_)
    if (kv.first != 0 && kv.first < set_ids_at_round_ && !bit(words, base, kv.first))
      active.push_back(kv.first);
  return active;  // ascending: sets_ is ordered by id
}

}  // namespace fuseopt
