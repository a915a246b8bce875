// Runs agreed responses on this rank: plans fusion buckets, calls the backend
// once per bucket, and completes handles. A backend that can read and write
// the bucket's tensors directly gets them as segments (the shared-memory
// path); otherwise they move in and out of the fusion buffer (prescale
// applied on the way in, postscale on the way out).
//
// A rank that has joined has no tensor of its own for a response; it takes
// part with a scratch buffer holding the identity of the reduction (or no
// rows, for gathers), so that the others' results are unaffected.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/poll_schedule.h"
#include "base/metrics.h"
#include "base/timeline.h"
#include "exec/entry.h"
#include "exec/handle_table.h"
#include "exec/work.h"
#include "transport/backend.h"

namespace fuseopt {

class DeviceExecutor;
class MpiWorld;

class Executor {
 public:
  Executor(Backend& backend, HandleTable& handles, Metrics& metrics, Timeline& timeline, int rank,
           int size)
      : backend_(backend), handles_(handles), metrics_(metrics), timeline_(timeline), rank_(rank),
        size_(size) {}

  void set_fusion_threshold(int64_t bytes) { fusion_threshold_ = bytes; }
  // A process set's executor: rank and size are positions in members (the
  // set's global ranks, ascending), while a broadcast's root stays global.
  void set_members(std::vector<int32_t> members) { members_ = std::move(members); }
  // Device tensors (device_executor.h) need the topology to bootstrap their
  // communicators; without this call they fail as unsupported.
  void enable_devices(const MpiWorld& world, bool hierarchical);

  // Executes all work items (errors complete their handles at once).
  // Throws Error on a backend failure; the caller treats that as fatal.
  void run(std::vector<Work>& work);

 private:
  void run_bucket(std::vector<Work*>& bucket);
  // Timeline events of one bucket: its tensors' negotiation, queueing and the
  // phases marked below (fused buckets only copy through the fusion buffer).
  void trace_bucket(const std::vector<Work*>& bucket, int64_t bytes, double responded_s,
                    double begin_s, double end_s);
  void mark_copied_in() { copied_in_s_ = now_s(); }
  void mark_reduced() { reduced_s_ = now_s(); }
  void allreduce(std::vector<Work*>& bucket);
  void adasum(std::vector<Work*>& bucket);
  void reduce(std::vector<Work*>& bucket);
  void broadcast(std::vector<Work*>& bucket);
  // The bucket's tensors for a backend's *_segments call; narrowed: one travels
  // as a 16-bit float.
  std::vector<Segment> segments_of(const std::vector<Work*>& bucket, bool* narrowed) const;
  void allgather(Work& w);
  void alltoall(Work& w);
  void reducescatter(Work& w);
  // Handles complete once their bucket is done and traced, so that a caller
  // who stops the timeline after a wait finds the operation in it.
  void complete(Work& w, OwnedOutput output = OwnedOutput());
  void release_completed();
  void fail(Work& w, fuseopt_status_t status, const std::string& message);
  double postscale_of(const TensorSpec& spec) const;
  int comm_rank_of(int32_t global_rank) const;
  void finish_average(const TensorSpec& spec, void* buf, int64_t count) const;
  char* fusion_buffer(int64_t bytes);

  Backend& backend_;
  HandleTable& handles_;
  Metrics& metrics_;
  Timeline& timeline_;
  int rank_, size_;
  std::vector<int32_t> members_;  // empty: every rank, in order
  int64_t buckets_run_ = 0;
  double copied_in_s_ = 0, reduced_s_ = 0;  // phase marks of the running bucket
  int64_t fusion_threshold_ = 0;
  std::vector<char> fusion_buffer_;  // persistent, grows to the largest bucket
  std::vector<std::pair<int64_t, OwnedOutput>> completed_;  // this bucket's, not yet released
  std::shared_ptr<DeviceExecutor> devices_;  // device buckets go there
};

}  // namespace fuseopt
