// The loop's side of autotune (autotune.h): carrying rank 0's choice to every
// rank in the round vector, feeding the tuner, and logging its trials.
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "loop/loop.h"

namespace fuseopt {
namespace {

// Tail words of the round vector when autotune is on.
enum : int64_t { kTunedThreshold, kTunedCycle, kTunedDone, kTuneWords };

}  // namespace

int64_t Loop::tune_words() const { return config_.autotune ? kTuneWords : 0; }

void Loop::start_autotune() {
  metrics_.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  metrics_.cycle_time_us = config_.cycle_time_us;
  metrics_.autotune_state = config_.autotune ? FUSEOPT_AUTOTUNE_TUNING : FUSEOPT_AUTOTUNE_OFF;
  if (!config_.autotune || rank_ != 0) return;
  tuner_.reset(new Autotuner({config_.fusion_threshold_bytes, config_.cycle_time_us},
                             config_.autotune_window_rounds));
  if (autotune_log_.empty()) return;
  autotune_csv_ = std::fopen(autotune_log_.c_str(), "w");
  if (!autotune_csv_) {
    FUSEOPT_LOG(kWarning, "autotune: cannot write '" << autotune_log_
                                                     << "': " << std::strerror(errno));
    return;
  }
  std::fputs("trial,fusion_threshold_bytes,cycle_time_ms,rounds,bytes,seconds,"
             "bytes_per_second,note\n", autotune_csv_);
  std::fflush(autotune_csv_);
}

void Loop::put_tuned_setting(std::vector<uint64_t>* words) const {
  if (!config_.autotune) return;
  // Other ranks contribute all ones, so the AND leaves rank 0's words.
  uint64_t tail[kTuneWords] = {~uint64_t(0), ~uint64_t(0), ~uint64_t(0)};
  if (tuner_) {
    const TuneSetting s = tuner_->current();
    tail[kTunedThreshold] = static_cast<uint64_t>(s.fusion_threshold_bytes);
    tail[kTunedCycle] = static_cast<uint64_t>(s.cycle_time_us);
    tail[kTunedDone] = tuner_->done() ? 1 : 0;
  }
  words->insert(words->end(), tail, tail + kTuneWords);
}

void Loop::apply_tuned_setting(const std::vector<uint64_t>& words) {
  if (!config_.autotune) return;
  const uint64_t* tail = words.data() + words.size() - kTuneWords;
  config_.fusion_threshold_bytes = static_cast<int64_t>(tail[kTunedThreshold]);
  config_.cycle_time_us = static_cast<int64_t>(tail[kTunedCycle]);
  for (auto& kv : sets_) kv.second->executor->set_fusion_threshold(config_.fusion_threshold_bytes);
  metrics_.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  metrics_.cycle_time_us = config_.cycle_time_us;
  metrics_.autotune_state = tail[kTunedDone] ? FUSEOPT_AUTOTUNE_DONE : FUSEOPT_AUTOTUNE_TUNING;
}

void Loop::tune(int64_t bytes, double begin_s, double end_s) {
  if (!tuner_ || tuner_->done()) return;
  const TuneTrial* trial = tuner_->observe(bytes, begin_s, end_s);
  if (trial) log_trial(*trial, tuner_->trials().size(), "");
  if (tuner_->done()) {
    const TuneTrial& best = tuner_->best();
    log_trial(best, &best - tuner_->trials().data() + 1, "chosen");
    FUSEOPT_LOG(kInfo, "autotune: holding fusion threshold "
                           << best.setting.fusion_threshold_bytes << " bytes, cycle time "
                           << best.setting.cycle_time_us / 1000.0 << " ms ("
                           << best.score() / 1e6 << " MB/s)");
  }
}

void Loop::log_trial(const TuneTrial& t, size_t number, const char* note) {
  if (!autotune_csv_) return;
  std::fprintf(autotune_csv_, "%zu,%lld,%.3f,%lld,%lld,%.6f,%.1f,%s\n", number,
               static_cast<long long>(t.setting.fusion_threshold_bytes),
               t.setting.cycle_time_us / 1000.0, static_cast<long long>(t.rounds),
               static_cast<long long>(t.bytes), t.seconds, t.score(), note);
  std::fflush(autotune_csv_);
  if (*note) {
    std::fclose(autotune_csv_);
    autotune_csv_ = nullptr;
  }
}

}  // namespace fuseopt
