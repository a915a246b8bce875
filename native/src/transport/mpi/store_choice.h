// How a rank writes into its shared-memory slots what the other ranks of its
// host read from them: plain or streaming stores (Note [Streamed slots]).
// Pure logic, no MPI: tested in native/tests/store_choice_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fuseopt {

// Note [Streamed slots]
// ~~~~~~~~~~~~~~~~~~~~~
// A slot's lines move from the core that writes them to the cores that read
// them. Where the cores share a last-level cache, plain stores are best: the
// readers find the lines in that cache. Where they do not (two sockets, two
// AMD core complexes, a virtual machine whose host has placed its vCPUs
// apart), a plain store first takes each line back from the reader's cache
// (the reader still holds it from the chunk before), and the reader fetches
// it back across; streaming stores write past the caches to memory instead,
// which the readers then stream in. Measured on the 2-vCPU VM of 2026-12-06,
// whose host moves its vCPUs between two placements for tens of seconds at a
// time (a cache line's round trip between the cores 60-80 ns, or 330-360 ns),
// 2 ranks, in-place allreduce, one call after a barrier: plain stores 1 MiB
// in 69 us and 16 MiB in 1.6 ms near, 740-860 us and 11.9-12.9 ms apart;
// streaming stores 165 us and 2.9 ms near, 142-155 us and 2.4-2.7 ms apart.
// MPICH's own allreduce meets the same two placements (its "two modes",
// docs/benchmarks.md).
//
// Neither kind wins both ways and the placement changes under a running job, so
// each rank chooses per chunk. Allreduce (with a 16-bit wire apart: float32
// tensors travelling as 16-bit floats and 16-bit tensors, whose conversions
// cost more per byte), allgather, reducescatter and alltoall are gauges: in
// them every rank writes and reads about the same bytes, so a rank's own work
// (its copies and reductions, not its barrier waits) shows what either kind
// costs the whole job. Each rank times its own work in each
// chunk of a gauge of at least kMinMeasuredBytes, per collective and per power
// of two of the chunk's size (near, the two kinds tie at 256 KiB and plain
// stores win by 2.4x at 1 MiB). A kind's figure is the median of its last
// kWindow chunks (single chunks are noisy here: an unlucky one would decide for
// thousands), each kind's first chunk left out (cold caches). At first the
// kinds alternate until both have their figures; then the faster is used, plain
// stores on a tie (within kMargin: ranks that split on noise, one plain and one
// streaming, were slower than either, allgather 4 MiB 1.6-2.4 ms against 0.8),
// and now and then the other is tried for kWindow chunks in a row, whose median
// replaces its figure (the placement may have changed since it was last used).
// The first trial comes after kExploreEvery measured chunks; a trial that
// changes nothing doubles the wait for the next, up to kExploreMax, one that
// changes the choice resets it: a host that keeps its placement pays a trial
// per kExploreMax chunks, this VM finds a new placement within kExploreEvery
// chunks. Ranks run the same chunks, so they try together. A broadcast and a
// reduction to one root follow the gauges' choice for their chunk size (plain
// stores before any): their own work would mislead, as a broadcast's root,
// which only writes, finds streaming faster while the readers, fetching from
// memory, pay for it. The bytes are the same either
// way: the choice needs no agreement between ranks.
class StoreChoice {
 public:
  // FUSEOPT_SHM_STORES.
  enum Mode { kAuto = 0, kCached = 1, kStreamed = 2 };
  // The gauges first; the broadcast and the reduction to one root follow.
  enum Kind { kAllreduce, kWire16, kAllgather, kReducescatter, kAlltoall, kBroadcast, kReduce };
  static constexpr int kGauges = kBroadcast;
  static constexpr int64_t kMinMeasuredBytes = int64_t(64) << 10;
  static constexpr int kWindow = 3;
  static constexpr int64_t kExploreEvery = 64;
  static constexpr int64_t kExploreMax = 1024;
  static constexpr int kSizes = 6;  // 64 KiB, 128 KiB, ..., 2 MiB and more
  // The other kind must be this much faster to be taken: on a tie each rank
  // keeps its choice, where figures that differ by noise would split them.
  static constexpr double kMargin = 0.9;

  explicit StoreChoice(int mode = kAuto) : mode_(mode) {}

  // Whether the next chunk of `kind`, of `bytes`, writes with streaming stores.
  bool streamed(Kind kind, int64_t bytes) {
    if (mode_ != kAuto) return mode_ == kStreamed;
    if (kind >= kGauges) {
      for (int g = 0; g < kGauges; ++g)
        if (track(Kind(g), bytes).known()) return track(Kind(g), bytes).best;
      return last_;
    }
    Track& t = track(kind, bytes);
    if (!t.known()) {
      t.current = t.seen[1] < t.seen[0];  // plain and streamed in turn at first
    } else if (t.trial_left > 0) {
      t.current = t.trial_kind;
    } else if (bytes >= kMinMeasuredBytes && t.measured >= t.next_trial) {
      t.before_trial = t.best;
      t.current = t.trial_kind = !t.before_trial;
      t.trial_left = kWindow;
    } else {
      t.current = t.best;
    }
    return t.current;
  }

  // The chunk streamed() was last asked about took `seconds` of own work.
  void measured(Kind kind, int64_t bytes, double seconds) {
    if (mode_ != kAuto || kind >= kGauges || bytes < kMinMeasuredBytes) return;
    Track& t = track(kind, bytes);
    const int k = t.current ? 1 : 0;
    if (t.seen[k]++ > 0) t.ring[k][t.count[k]++ % kWindow] = seconds / static_cast<double>(bytes);
    ++t.measured;
    if (t.known()) {
      const double plain = t.figure(0), streaming = t.figure(1);
      if (t.best ? plain < kMargin * streaming : streaming < kMargin * plain) t.best = !t.best;
      last_ = t.best;
    }
    if (t.trial_left > 0 && --t.trial_left == 0) {
      t.interval =
          t.best == t.before_trial ? std::min(2 * t.interval, kExploreMax) : kExploreEvery;
      t.next_trial = t.measured + t.interval;
    }
  }

  // Seconds per byte of either kind in a gauge's chunks of about `bytes`:
  // the median of its last kWindow (0 before it has them).
  double per_byte(Kind gauge, int64_t bytes, bool streamed_kind) {
    const Track& t = track(gauge, bytes);
    return t.count[streamed_kind] >= kWindow ? t.figure(streamed_kind) : 0;
  }

 private:
  struct Track {
    double ring[2][kWindow] = {};  // the last per-byte times, plain and streamed
    int64_t seen[2] = {0, 0};      // chunks of either kind
    int64_t count[2] = {0, 0};     // of them in the ring (the first left out)
    int64_t measured = 0;
    int64_t next_trial = kExploreEvery, interval = kExploreEvery;
    int trial_left = 0;
    bool trial_kind = false, before_trial = false;
    bool current = false;  // the kind of the chunk under way
    bool best = false;     // the faster kind: streamed if true
    bool known() const { return count[0] >= kWindow && count[1] >= kWindow; }
    double figure(int k) const {
      double v[kWindow];
      std::copy(ring[k], ring[k] + kWindow, v);
      std::sort(v, v + kWindow);
      return v[kWindow / 2];
    }
  };
  Track& track(Kind gauge, int64_t bytes) {
    int size = 0;  // chunks below kMinMeasuredBytes follow the smallest measured
    while (size + 1 < kSizes && bytes >= (kMinMeasuredBytes << (size + 1))) ++size;
    return tracks_[gauge][size];
  }
  int mode_;
  Track tracks_[kGauges][kSizes];
  bool last_ = false;  // the faster kind after the last gauge chunk that knew
};

}  // namespace fuseopt
