#include "log.h"

#include <atomic>
#include <cstdio>

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

}  // namespace fuseopt
