// Adasum over MPI: see adasum.h for the algorithm and its vocabulary.
#include "transport/mpi/adasum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "base/dtype.h"
#include "base/half16.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The stored element types, each read as a double and written back rounded
// once to nearest (16-bit floats through float, as the rest of the core).
struct AsFloat32 {
  using T = float;
  static double get(T v) { return v; }
  static T put(double v) { return float(v); }
};
struct AsFloat64 {
  using T = double;
  static double get(T v) { return v; }
  static T put(double v) { return v; }
};
struct AsFloat16 {
  using T = uint16_t;
  static double get(T v) { return half_to_float(v); }
  static T put(double v) { return float_to_half(float(v)); }
};
struct AsBfloat16 {
  using T = uint16_t;
  static double get(T v) { return bfloat_to_float(v); }
  static T put(double v) { return float_to_bfloat(float(v)); }
};

// A sum kept as m * 2^e. The squares of float64 values at either end of
// their range leave the double range (tiny^2 is 0, sqrt(max)^2 * n is inf),
// so a float64 slice is summed after scaling by a power of two that brings
// its largest element to [0.5, 1), and the exponent travels with the sum.
// Scaling by powers of two is exact, so nothing is lost but underflow of
// terms 2^-1000 below the largest. The narrower types' squares fit a double
// whatever their values: they keep e = 0 (Horovod's sums, in pairwise order).
struct ScaledSum {
  double m, e;  // e holds an integer; a double so that MPI moves one type
};

constexpr double kNoExponent = -1e6;  // the exponent of an all-zero slice

ScaledSum plus(ScaledSum x, ScaledSum y) {
  if (x.m == 0) return y;
  if (y.m == 0) return x;
  const double e = std::max(x.e, y.e);
  // Shifts below -1100 give 0 either way; the clamp keeps them ints.
  const int sx = int(std::max(x.e - e, -1100.0)), sy = int(std::max(y.e - e, -1100.0));
  return {std::ldexp(x.m, sx) + std::ldexp(y.m, sy), e};
}

void plus_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const ScaledSum* a = static_cast<const ScaledSum*>(in);
  ScaledSum* b = static_cast<ScaledSum*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = plus(a[i], b[i]);
}

// x * 2^-e for e from frexp, in two steps so that neither factor leaves the
// double range (e runs from -1073 to 1024).
struct PowerOfTwo {
  double first, second;
  explicit PowerOfTwo(int e) : first(std::ldexp(1.0, -e / 2)), second(std::ldexp(1.0, -e + e / 2)) {}
  double times(double x) const { return x * first * second; }
};

// The exponent that brings max into [0.5, 1), 0 for the types that need no
// scaling or for a max that is 0, inf or NaN (those sum as they are).
template <typename E>
int exponent_of(double max) {
  if (!std::is_same<E, AsFloat64>::value || !(max > 0) || !std::isfinite(max)) return 0;
  int e = 0;
  std::frexp(max, &e);
  return e;
}

// coefficient * x where coefficient = f * 2^s may overflow a double though
// the product does not (parallel float64 vectors 1e400 apart).
double times_scaled(double x, double f, double s) {
  int k = 0;
  const double m = std::frexp(x, &k);
  return std::ldexp(f * m, int(std::max(-2200.0, std::min(2200.0, s + k))));
}

// The part of each tensor that lies in [lo, hi) of the bucket: (first, end).
std::vector<std::pair<int64_t, int64_t>> clip(const std::vector<int64_t>& counts, int64_t lo,
                                              int64_t hi) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t c : counts) {
    out.emplace_back(std::max(begin, lo), std::min(begin + c, hi));
    begin += c;
  }
  return out;
}

void exchange(MPI_Comm comm, int partner, const char* send, int64_t send_bytes, char* recv,
              int64_t recv_bytes) {
  // MPI counts are int: move large halves in pieces.
  const int64_t piece = int64_t(1) << 30;
  for (int64_t done = 0; done < std::max(send_bytes, recv_bytes); done += piece) {
    const int s = int(std::max<int64_t>(0, std::min(piece, send_bytes - done)));
    const int r = int(std::max<int64_t>(0, std::min(piece, recv_bytes - done)));
    mpi_check(MPI_Sendrecv(send + std::min(done, send_bytes), s, MPI_BYTE, partner, 0,
                           recv + std::min(done, recv_bytes), r, MPI_BYTE, partner, 0, comm,
                           MPI_STATUS_IGNORE),
              "MPI_Sendrecv(adasum)");
  }
}

// [A.B, |A|^2, |B|^2] over n elements, each scaled by 2^-ea / 2^-eb for
// float64. Summed pairwise (blocks of 64 in four lanes, then halves): a
// plain running sum of 1024 terms puts about 3e-15 of error into a
// coefficient 1 - A.B / 2|A|^2 that cancels, 6 eps in the result.
struct Sums3 {
  double dot = 0, aa = 0, bb = 0;
  Sums3& operator+=(const Sums3& o) {
    dot += o.dot, aa += o.aa, bb += o.bb;
    return *this;
  }
};

template <typename E>
Sums3 pairwise_sums(const typename E::T* a, const typename E::T* b, int64_t n,
                    const PowerOfTwo& sa, const PowerOfTwo& sb) {
  if (n > 64) {
    const int64_t half = n / 2;
    Sums3 left = pairwise_sums<E>(a, b, half, sa, sb);
    return left += pairwise_sums<E>(a + half, b + half, n - half, sa, sb);
  }
  Sums3 lane[4];
  for (int64_t i = 0; i < n; ++i) {
    double x = E::get(a[i]), y = E::get(b[i]);
    if constexpr (std::is_same<E, AsFloat64>::value) x = sa.times(x), y = sb.times(y);
    Sums3& l = lane[i & 3];
    l.dot += x * y;
    l.aa += x * x;
    l.bb += y * y;
  }
  lane[0] += lane[1];
  lane[2] += lane[3];
  return lane[0] += lane[2];
}

// Per tensor [A.B, |A|^2, |B|^2] of this rank's part, as scaled sums.
template <typename E>
void local_sums(const typename E::T* a, const typename E::T* b, int64_t n, ScaledSum* out) {
  double max_a = 0, max_b = 0;
  if (std::is_same<E, AsFloat64>::value) {
    for (int64_t i = 0; i < n; ++i) {
      max_a = std::max(max_a, std::fabs(E::get(a[i])));
      max_b = std::max(max_b, std::fabs(E::get(b[i])));
    }
  }
  const int ea = exponent_of<E>(max_a), eb = exponent_of<E>(max_b);
  const Sums3 s = pairwise_sums<E>(a, b, n, PowerOfTwo(ea), PowerOfTwo(eb));
  out[0] = {s.dot, s.dot == 0 ? kNoExponent : double(ea + eb)};
  out[1] = {s.aa, s.aa == 0 ? kNoExponent : double(2 * ea)};
  out[2] = {s.bb, s.bb == 0 ? kNoExponent : double(2 * eb)};
}

// One level on the slice this rank keeps, from keep_lo, in parts (per
// tensor, clip): element i of buf and element i - keep_lo of the partner's
// half (theirs) become adasum(A, B), A being the left group's. Per tensor
// [A.B, |A|^2, |B|^2] is summed over the slice, then over the level's group.
template <typename E>
void combine(const AdasumComms& comms, MPI_Comm group,
             const std::vector<std::pair<int64_t, int64_t>>& parts, typename E::T* buf,
             const typename E::T* theirs, int64_t keep_lo, bool left) {
  std::vector<ScaledSum> sums(3 * parts.size());
  for (size_t t = 0; t < parts.size(); ++t) {
    const int64_t first = parts[t].first, n = std::max<int64_t>(0, parts[t].second - first);
    const auto* mine = buf + first;
    const auto* other = theirs + (first - keep_lo);
    local_sums<E>(left ? mine : other, left ? other : mine, n, &sums[3 * t]);
  }
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()),
                          comms.scaled_sum_type(), comms.scaled_sum_op(), group),
            "MPI_Allreduce(adasum dot products)");
  for (size_t t = 0; t < parts.size(); ++t) {
    const ScaledSum dot = sums[3 * t], a_sq = sums[3 * t + 1], b_sq = sums[3 * t + 2];
    // A zero vector takes coefficient 1; Horovod's threshold sqrt(DBL_MIN)
    // on an unscaled squared norm is the same test for float16 and float32,
    // whose nonzero squares are all above it.
    const double fa = a_sq.m != 0 ? dot.m / a_sq.m * 0.5 : 0.0, sa = dot.e - a_sq.e;
    const double fb = b_sq.m != 0 ? dot.m / b_sq.m * 0.5 : 0.0, sb = dot.e - b_sq.e;
    const double alpha = fa == 0 ? 0.0 : std::ldexp(fa, int(std::max(-2200.0, std::min(2200.0, sa))));
    const double beta = fb == 0 ? 0.0 : std::ldexp(fb, int(std::max(-2200.0, std::min(2200.0, sb))));
    const bool representable = std::isfinite(alpha) && std::isfinite(beta);
    const double ca = 1.0 - alpha, cb = 1.0 - beta;
    // float64 combines at the scale of the larger vector and rounds once on
    // the way back, not once per product: near the bottom of the range the
    // products are subnormal and each would lose bits.
    const int shift = std::is_same<E, AsFloat64>::value && std::max(a_sq.e, b_sq.e) > kNoExponent
                          ? int(std::max(a_sq.e, b_sq.e)) / 2 : 0;
    const PowerOfTwo down(shift);
    for (int64_t i = parts[t].first; i < parts[t].second; ++i) {
      const double mine = E::get(buf[i]), other = E::get(theirs[i - keep_lo]);
      double a = left ? mine : other, b = left ? other : mine;
      if (shift != 0) a = down.times(a), b = down.times(b);
      const double out = representable
                             ? ca * a + cb * b
                             : (a - times_scaled(a, fa, sa)) + (b - times_scaled(b, fb, sb));
      buf[i] = E::put(shift != 0 ? std::ldexp(out, shift) : out);
    }
  }
}

template <typename E>
void allreduce_as(const AdasumComms& comms, void* buffer,
                  const std::vector<int64_t>& tensor_counts) {
  using T = typename E::T;
  int rank = 0, size = 1;
  MPI_Comm_rank(comms.comm(), &rank);
  MPI_Comm_size(comms.comm(), &size);
  T* buf = static_cast<T*>(buffer);
  const int64_t esize = sizeof(T);
  int64_t lo = 0, hi = 0;
  for (int64_t c : tensor_counts) hi += c;
  std::vector<T> theirs(static_cast<size_t>((hi - lo + 1) / 2 + 1));
  struct Held {
    int64_t lo, hi;  // the slice held before a level
    bool left;       // whether the left half of it was kept
  };
  std::vector<Held> held;
  int index = 0;
  for (int level = 1; level < size; level <<= 1, ++index) {
    const int partner = rank ^ level;
    const bool left = (rank & level) == 0;
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t keep_lo = left ? lo : mid, keep_hi = left ? mid : hi;
    const int64_t give_lo = left ? mid : lo, give_hi = left ? hi : mid;
    exchange(comms.comm(), partner, reinterpret_cast<const char*>(buf + give_lo),
             (give_hi - give_lo) * esize, reinterpret_cast<char*>(theirs.data()),
             (keep_hi - keep_lo) * esize);
    held.push_back(Held{lo, hi, left});
    combine<E>(comms, comms.group(index), clip(tensor_counts, keep_lo, keep_hi), buf,
               theirs.data(), keep_lo, left);
    lo = keep_lo;
    hi = keep_hi;
  }
  // Gather back, levels in reverse: the partner holds the rest of the parent slice.
  for (int level = size >> 1; level >= 1; level >>= 1) {
    const int partner = rank ^ level;
    const Held parent = held.back();
    held.pop_back();
    const int64_t other_lo = parent.left ? hi : parent.lo;
    const int64_t other_hi = parent.left ? parent.hi : lo;
    exchange(comms.comm(), partner, reinterpret_cast<const char*>(buf + lo), (hi - lo) * esize,
             reinterpret_cast<char*>(buf + other_lo), (other_hi - other_lo) * esize);
    lo = parent.lo;
    hi = parent.hi;
  }
}

}  // namespace

AdasumComms::AdasumComms(MPI_Comm comm) : comm_(comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  for (int level = 1; level < size; level <<= 1) {
    MPI_Comm group;
    mpi_check(MPI_Comm_split(comm, rank / (2 * level), rank, &group), "MPI_Comm_split(adasum)");
    groups_.push_back(group);
  }
  // Two doubles as one element, so that MPI never splits a sum from its exponent.
  mpi_check(MPI_Type_contiguous(2, MPI_DOUBLE, &scaled_sum_type_), "MPI_Type_contiguous(adasum)");
  mpi_check(MPI_Type_commit(&scaled_sum_type_), "MPI_Type_commit(adasum)");
  mpi_check(MPI_Op_create(&plus_op, 1, &scaled_sum_op_), "MPI_Op_create(adasum)");
}

AdasumComms::~AdasumComms() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& c : groups_) MPI_Comm_free(&c);
  MPI_Op_free(&scaled_sum_op_);
  MPI_Type_free(&scaled_sum_type_);
}

bool adasum_dtype(fuseopt_dtype_t dtype) {
  return dtype == FUSEOPT_FLOAT16 || dtype == FUSEOPT_BFLOAT16 || dtype == FUSEOPT_FLOAT32 ||
         dtype == FUSEOPT_FLOAT64;
}

bool adasum_supported(int size, const char** why) {
  if (power_of_two(size)) return true;
  *why = "Adasum needs a power-of-two number of ranks";
  return false;
}

void adasum_allreduce(const AdasumComms& comms, void* buffer,
                      const std::vector<int64_t>& tensor_counts, fuseopt_dtype_t dtype) {
  switch (dtype) {
    case FUSEOPT_FLOAT32: return allreduce_as<AsFloat32>(comms, buffer, tensor_counts);
    case FUSEOPT_FLOAT64: return allreduce_as<AsFloat64>(comms, buffer, tensor_counts);
    case FUSEOPT_FLOAT16: return allreduce_as<AsFloat16>(comms, buffer, tensor_counts);
    case FUSEOPT_BFLOAT16: return allreduce_as<AsBfloat16>(comms, buffer, tensor_counts);
    default: throw Error(FUSEOPT_INTERNAL, "adasum: unsupported dtype");
  }
}

}  // namespace fuseopt
