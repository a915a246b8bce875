#include "transport/device/device_backend.h"

#include <string>
#include <vector>

namespace fuseopt {

void* DeviceBackend::fusion_buffer(int64_t bytes) {
  if (bytes <= fusion_bytes_) return fusion_;
  if (fusion_) release(fusion_);
  fusion_ = nullptr;
  fusion_bytes_ = 0;
  fusion_ = allocate(bytes);
  fusion_bytes_ = bytes;
  return fusion_;
}

void DeviceBackend::free_fusion_buffer() {
  if (fusion_) release(fusion_);
  fusion_ = nullptr;
  fusion_bytes_ = 0;
}

std::string first_error_everywhere(Backend& host, int size, const std::string& mine) {
  if (host.all_ok(mine.empty())) return "";
  // Rare path: share the messages, lengths first (one to every rank), then bytes.
  std::vector<int64_t> lengths;
  host.alltoall_counts(std::vector<int64_t>(size, static_cast<int64_t>(mine.size())), &lengths);
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  std::vector<char> all(total + 1);
  host.allgatherv(mine.data(), static_cast<int64_t>(mine.size()), all.data(), lengths);
  int64_t offset = 0;
  for (int r = 0; r < size; ++r) {
    if (lengths[r] > 0)
      return "rank " + std::to_string(r) + ": " + std::string(all.data() + offset, lengths[r]);
    offset += lengths[r];
  }
  return "a rank failed without a message";
}

}  // namespace fuseopt
