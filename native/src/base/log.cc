#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <sstream>

namespace fuseopt {
namespace {
std::atomic<int> g_level{kWarning};
std::atomic<int> g_rank{-1};
const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR"};
}  // namespace

void set_log_level(int level) { g_level = level; }
void set_log_rank(int rank) { g_rank = rank; }
bool log_enabled(int level) { return level >= g_level.load(std::memory_order_relaxed); }

void log_line(int level, const std::string& message) {
  if (level < kTrace || level > kError) level = kError;
  std::fprintf(stderr, "[fuseopt rank %d] %s: %s\n", g_rank.load(), kNames[level],
               message.c_str());
  std::fflush(stderr);
}

std::string join_names(const std::vector<std::string>& names, size_t max) {
  std::ostringstream s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s << (i ? ", " : "") << names[i];
  if (names.size() > max) s << ", ... (" << names.size() << " in all)";
  return s.str();
}

}  // namespace fuseopt
