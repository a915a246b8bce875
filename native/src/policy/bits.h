// Bit fields inside the round vector (loop.h): bit i of the section that
// starts at word `base`.
#pragma once

#include <cstdint>
#include <vector>

namespace fuseopt {

inline bool bit(const std::vector<uint64_t>& w, int64_t base, int64_t i) {
  return (w[base + i / 64] >> (i % 64)) & 1;
}

inline void set_bit(std::vector<uint64_t>& w, int64_t base, int64_t i, bool on) {
  const uint64_t m = uint64_t(1) << (i % 64);
  if (on) w[base + i / 64] |= m;
  else w[base + i / 64] &= ~m;
}

}  // namespace fuseopt
