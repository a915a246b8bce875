#include "transport/output_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

namespace fuseopt {
namespace {

struct Pool {
  std::mutex mu;
  std::unordered_map<void*, int64_t> lent;  // pooled blocks in use -> size
  std::multimap<int64_t, void*> idle;      // size -> block
  int64_t idle_bytes = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: frees may come during exit
  return *p;
}

// Note [Huge-page results]: a block of kHugePageBytes or more, on a huge-page
// boundary and advised to transparent huge pages (advice only: where the
// kernel cannot, the block keeps 4 KiB pages).
void* fresh_block(int64_t bytes) {
  if (bytes < kHugePageBytes) return std::malloc(bytes);
  void* block = nullptr;
  if (posix_memalign(&block, kHugePageBytes, bytes) != 0) return nullptr;
  madvise(block, bytes & ~(kHugePageBytes - 1), MADV_HUGEPAGE);
  return block;
}

}  // namespace

void* output_alloc(int64_t bytes) {
  if (bytes < kPooledMinBytes) return std::malloc(bytes > 0 ? bytes : 1);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.idle.find(bytes);
    if (it != p.idle.end()) {
      void* block = it->second;
      p.idle.erase(it);
      p.idle_bytes -= bytes;
      p.lent[block] = bytes;
      return block;
    }
  }
  void* block = fresh_block(bytes);
  if (block) {
    std::lock_guard<std::mutex> lock(p.mu);
    p.lent[block] = bytes;
  }
  return block;
}

void output_free(void* block) {
  if (!block) return;
  Pool& p = pool();
  std::unique_lock<std::mutex> lock(p.mu);
  auto it = p.lent.find(block);
  if (it == p.lent.end()) {
    lock.unlock();
    std::free(block);
    return;
  }
  const int64_t bytes = it->second;
  p.lent.erase(it);
  // Room first: the largest idle blocks go (a size that stopped recurring is
  // usually a large one), then this block stays if it fits at all.
  while (p.idle_bytes + bytes > kIdleMaxBytes && !p.idle.empty()) {
    auto largest = std::prev(p.idle.end());
    std::free(largest->second);
    p.idle_bytes -= largest->first;
    p.idle.erase(largest);
  }
  if (bytes > kIdleMaxBytes) {
    lock.unlock();
    std::free(block);
    return;
  }
  p.idle.emplace(bytes, block);
  p.idle_bytes += bytes;
}

}  // namespace fuseopt
