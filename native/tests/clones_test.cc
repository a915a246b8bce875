// The vector kernels' results for one fixed input, as one digest line per
// kernel. tests/unit/test_kernel_clones.py builds this once per instruction
// set (FUSEOPT_CLONES defined empty, -mavx2 / -mavx512f / none) and requires
// the same lines from every build this CPU can run: the clones promise the
// same bits on every CPU (kernels/vector_lanes.h).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/channel_rows.h"
#include "kernels/pair_sum.h"

using namespace fuseopt::kernels;

namespace {

// Values with long mantissas and mixed signs and magnitudes, so that any
// change in the order or width of an operation changes some bit.
template <class T>
std::vector<T> values(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const double unit = static_cast<double>(seed >> 11) / 9007199254740992.0;  // [0, 1)
    x = static_cast<T>((unit - 0.37) * (1.0 + static_cast<double>(seed % 7) * 13.1));
  }
  return v;
}

// FNV-1a of the bytes.
template <class T>
uint64_t digest(const std::vector<T>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

template <class T>
void report(const char* kernel, const char* type, const std::vector<T>& out) {
  std::printf("%s<%s> %016llx\n", kernel, type, static_cast<unsigned long long>(digest(out)));
}

// Rows of 1,037 values (vector bodies and a scalar tail), 5 rows 1,100 apart.
template <class T>
void run(const char* type) {
  const int64_t n = 1037, rows = 5, stride = 1100, total = rows * stride;
  const std::vector<T> u = values<T>(total, 1), v = values<T>(total, 2);
  std::vector<double> sums(2, 0.0);
  channel_row_sums(u.data(), v.data(), n, rows, stride, stride, &sums[0], &sums[1]);
  channel_row_sums(u.data(), u.data(), n, rows, stride, stride, &sums[0], &sums[1]);
  report("channel_row_sums", type, sums);
  std::vector<double> su(n, 0.5), suv(n, -0.25);
  position_row_sums(u.data(), v.data(), n, su.data(), suv.data());
  position_row_sums(u.data(), u.data(), n, su.data(), suv.data());
  su.insert(su.end(), suv.begin(), suv.end());
  report("position_row_sums", type, su);
  std::vector<T> out(total, T(0));
  const int64_t strides[3] = {stride, stride, stride};
  channel_row_affine(out.data(), u.data(), T(0.7), v.data(), T(-1.3), T(0.1), n, rows, strides);
  channel_row_affine(out.data() + 3, u.data(), T(1.9), nullptr, T(0), T(-0.2), n - 3, rows,
                     strides);
  report("channel_row_affine", type, out);
  const std::vector<T> p = values<T>(n, 3), q = values<T>(n, 4), r = values<T>(n, 5);
  std::vector<T> pos(2 * n, T(0));
  position_row_affine(pos.data(), u.data(), p.data(), v.data(), q.data(), r.data(), n);
  position_row_affine(pos.data() + n, u.data(), p.data(), nullptr, nullptr, r.data(), n);
  report("position_row_affine", type, pos);
  // Out and publish at every alignment of the streaming stores' head.
  std::vector<T> sum(total, T(0)), publish(total, T(0));
  for (int64_t shift = 0; shift < 4; ++shift) {
    T* o = sum.data() + shift * stride + shift;
    pair_sum_publish(u.data() + shift, 0.5, v.data(), o, publish.data() + shift * stride, 0.25,
                     n, shift % 2 == 1);
    pair_sum_publish(u.data() + shift, 1.0, v.data(), o + n, nullptr, 1.0, 50, shift >= 2);
  }
  sum.insert(sum.end(), publish.begin(), publish.end());
  report("pair_sum_publish", type, sum);
}

}  // namespace

int main() {
  run<float>("float");
  run<double>("double");
  return 0;
}
