#include "policy/autotune.h"

#include <algorithm>

namespace fuseopt {
namespace {

// Powers of four around the default (64 MiB): small buckets start
// collectives earlier, large ones pay per-call latency less often.
const int64_t kThresholds[] = {int64_t(1) << 20, int64_t(4) << 20, int64_t(16) << 20,
                               int64_t(64) << 20, int64_t(128) << 20};
// Waiting after a wake-up lets more tensors join a round (fewer, larger
// buckets) at the price of latency.
const int64_t kCycleTimesUs[] = {0, 500, 2000, 5000};

}  // namespace

Autotuner::Autotuner(TuneSetting start, int64_t window_rounds)
    : window_rounds_(std::max<int64_t>(1, window_rounds)), start_(start), current_(start) {
  for (int64_t t : kThresholds) queue_.push_back({t, start.cycle_time_us});
  if (std::find(queue_.begin(), queue_.end(), start) == queue_.end()) queue_.push_back(start);
  window_.setting = current_;
}

const TuneTrial& Autotuner::best() const {
  return *std::max_element(trials_.begin(), trials_.end(),
                           [](const TuneTrial& a, const TuneTrial& b) {
                             return a.score() < b.score();
                           });
}

const TuneTrial* Autotuner::observe(int64_t bytes, double begin_s, double end_s) {
  if (done_) return nullptr;
  if (window_.rounds == 0) window_begin_s_ = begin_s;
  window_.rounds += 1;
  window_.bytes += bytes;
  window_.seconds = end_s - window_begin_s_;
  if (window_.rounds < window_rounds_) return nullptr;
  const bool scored = !warming_up_;
  if (scored) trials_.push_back(window_);
  warming_up_ = false;
  next_candidate();
  return scored ? &trials_.back() : nullptr;
}

void Autotuner::next_candidate() {
  if (queue_.empty() && !cycle_phase_) {
    cycle_phase_ = true;
    const int64_t threshold = best().setting.fusion_threshold_bytes;
    for (int64_t c : kCycleTimesUs)
      if (c != start_.cycle_time_us) queue_.push_back({threshold, c});
  }
  if (queue_.empty()) {
    done_ = true;
    current_ = best().setting;
  } else {
    current_ = queue_.front();
    queue_.erase(queue_.begin());
  }
  window_ = TuneTrial();
  window_.setting = current_;
}

}  // namespace fuseopt
