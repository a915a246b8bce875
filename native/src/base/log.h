// Minimal leveled logging to stderr, prefixed with the rank. The level is
// process-wide because log lines may come from any layer.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

enum LogLevel {
  kTrace = FUSEOPT_LOG_TRACE,
  kDebug = FUSEOPT_LOG_DEBUG,
  kInfo = FUSEOPT_LOG_INFO,
  kWarning = FUSEOPT_LOG_WARNING,
  kError = FUSEOPT_LOG_ERROR
};

void set_log_level(int level);
void set_log_rank(int rank);
bool log_enabled(int level);
void log_line(int level, const std::string& message);
// "a, b, c, ... (12 in all)": lists in messages stay one line at any scale.
std::string join_names(const std::vector<std::string>& names, size_t max);

}  // namespace fuseopt

#define FUSEOPT_LOG(level, expr)                                  \
  do {                                                            \
    if (::fuseopt::log_enabled(::fuseopt::level)) {               \
      std::ostringstream fuseopt_log_stream_;                     \
      fuseopt_log_stream_ << expr;                                \
      ::fuseopt::log_line(::fuseopt::level, fuseopt_log_stream_.str()); \
    }                                                             \
  } while (0)
