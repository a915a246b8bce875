// Unit tests of the runtime's result blocks (transport/output_pool.h): large
// blocks on huge pages (Note [Huge-page results]) and recycled (Note [Output
// pool]). No MPI, no ranks. Built and run by tests/unit/test_native_policy.py.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "check.h"
#include "transport/output_pool.h"

using namespace fuseopt;

// The VmFlags line of the mapping of this process that holds p ("" if none).
static std::string vm_flags_at(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> from >> dash >> to && dash == '-' && line.find(':') > 12) {
      inside = from <= at && at < to;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// Whether this kernel takes MADV_HUGEPAGE at all (transparent huge pages
// compiled in): where it does not, blocks keep 4 KiB pages by design.
static bool kernel_takes_huge_page_advice() {
  const size_t bytes = 2 * kHugePageBytes;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  const bool ok = madvise(m, bytes, MADV_HUGEPAGE) == 0;
  munmap(m, bytes);
  return ok;
}

static void test_large_blocks_on_advised_huge_pages() {
  for (int64_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 4096, int64_t(33) << 20}) {
    char* block = static_cast<char*>(output_alloc(bytes));
    CHECK(block != nullptr);
    if (!block) continue;
    CHECK(reinterpret_cast<uintptr_t>(block) % kHugePageBytes == 0);
    std::memset(block, 7, bytes);  // all of it is ours
    CHECK(block[bytes - 1] == 7);
    if (kernel_takes_huge_page_advice())
      CHECK(vm_flags_at(block).find(" hg") != std::string::npos);
    output_free(block);
  }
}

static void test_blocks_recycled_by_size() {
  void* large = output_alloc(5 * kHugePageBytes);
  output_free(large);
  CHECK(output_alloc(5 * kHugePageBytes) == large);  // the same pages, still mapped
  void* other = output_alloc(5 * kHugePageBytes);     // the first is lent out again
  CHECK(other != large && other != nullptr);
  output_free(large);
  output_free(other);
  void* small = output_alloc(kPooledMinBytes - 1);  // malloc's to recycle, not the pool's
  CHECK(small != nullptr);
  output_free(small);
  void* empty = output_alloc(0);
  CHECK(empty != nullptr);
  output_free(empty);
}

int main() {
  test_large_blocks_on_advised_huge_pages();
  test_blocks_recycled_by_size();
  std::printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
