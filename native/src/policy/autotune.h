// Autotune (FUSEOPT_AUTOTUNE=1): picks the fusion threshold and cycle time
// during the first rounds of training, then holds the best pair.
//
// Only rank 0 runs the tuner. The loop sends its current choice in the round
// vector (other ranks contribute all-ones to the AND), so every rank switches
// at the same round and the fusion plan never differs between ranks.
//
// Search: one warm-up window (not scored: caches and buffers still filling),
// then each fusion threshold candidate with the starting cycle time, then each
// cycle time candidate with the best threshold so far. A window is a number of
// rounds that ran collectives; its score is bytes reduced per second of wall
// time from the window's first such round to its last, so time the framework
// spends computing between steps counts too (it is the same for every
// candidate, and a setting that delays rounds shows in it). The best scoring
// trial wins. Pure policy: no MPI, unit-tested in native/tests.
#pragma once

#include <cstdint>
#include <vector>

namespace fuseopt {

struct TuneSetting {
  int64_t fusion_threshold_bytes;
  int64_t cycle_time_us;
  bool operator==(const TuneSetting& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_us == o.cycle_time_us;
  }
};

struct TuneTrial {
  TuneSetting setting;
  int64_t rounds = 0;
  int64_t bytes = 0;
  double seconds = 0;
  double score() const { return seconds > 0 ? bytes / seconds : 0; }
};

class Autotuner {
 public:
  Autotuner(TuneSetting start, int64_t window_rounds);

  // After a round that ran collectives: its payload bytes and wall-clock span.
  // Returns the finished trial when this round closed a scored window.
  const TuneTrial* observe(int64_t bytes, double begin_s, double end_s);

  TuneSetting current() const { return current_; }
  bool done() const { return done_; }
  const std::vector<TuneTrial>& trials() const { return trials_; }
  const TuneTrial& best() const;

 private:
  void next_candidate();

  const int64_t window_rounds_;
  TuneSetting start_;
  TuneSetting current_;
  std::vector<TuneSetting> queue_;  // candidates not yet tried
  bool warming_up_ = true;
  bool cycle_phase_ = false;
  bool done_ = false;
  TuneTrial window_;
  double window_begin_s_ = 0;
  std::vector<TuneTrial> trials_;
};

}  // namespace fuseopt
