// Adasum over MPI: see adasum.h for the algorithm and its vocabulary.
#include "transport/mpi/adasum.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/dtype.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Elements as doubles, whatever the stored type.
struct Access {
  size_t esize;
  double (*load)(const char* p);
  void (*store)(char* p, double v);
};

Access access_for(fuseopt_dtype_t dtype) {
  switch (dtype) {
    case FUSEOPT_FLOAT32:
      return {4, [](const char* p) { float f; std::memcpy(&f, p, 4); return double(f); },
              [](char* p, double v) { float f = float(v); std::memcpy(p, &f, 4); }};
    case FUSEOPT_FLOAT64:
      return {8, [](const char* p) { double d; std::memcpy(&d, p, 8); return d; },
              [](char* p, double v) { std::memcpy(p, &v, 8); }};
    case FUSEOPT_FLOAT16:
      return {2, [](const char* p) { uint16_t h; std::memcpy(&h, p, 2); return double(half_to_float(h)); },
              [](char* p, double v) { uint16_t h = float_to_half(float(v)); std::memcpy(p, &h, 2); }};
    default: throw Error(FUSEOPT_INTERNAL, "adasum: unsupported dtype");
  }
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

// One level on the slice this rank keeps, from keep_lo, in parts (per
// tensor, clip): element i of buf and element i - keep_lo of the partner's
// half (theirs) become adasum(A, B), A being the left group's. Per tensor
// [A.B, |A|^2, |B|^2] is summed over the slice, then over the level's group.
void combine(const Access& io, MPI_Comm group,
             const std::vector<std::pair<int64_t, int64_t>>& parts, char* buf,
             const char* theirs, int64_t keep_lo, bool left) {
  std::vector<double> sums(3 * parts.size(), 0.0);
  for (size_t t = 0; t < parts.size(); ++t) {
    for (int64_t i = parts[t].first; i < parts[t].second; ++i) {
      const double mine = io.load(buf + i * io.esize);
      const double other = io.load(theirs + (i - keep_lo) * io.esize);
      const double a = left ? mine : other, b = left ? other : mine;
      sums[3 * t] += a * b;
      sums[3 * t + 1] += a * a;
      sums[3 * t + 2] += b * b;
    }
  }
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE,
                          MPI_SUM, group),
            "MPI_Allreduce(adasum dot products)");
  for (size_t t = 0; t < parts.size(); ++t) {
    const double dot = sums[3 * t], a_sq = sums[3 * t + 1], b_sq = sums[3 * t + 2];
    const double ca = a_sq >= 1e-8 ? 1.0 - dot / a_sq * 0.5 : 1.0;
    const double cb = b_sq >= 1e-8 ? 1.0 - dot / b_sq * 0.5 : 1.0;
    for (int64_t i = parts[t].first; i < parts[t].second; ++i) {
      const double mine = io.load(buf + i * io.esize);
      const double other = io.load(theirs + (i - keep_lo) * io.esize);
      io.store(buf + i * io.esize, left ? ca * mine + cb * other : ca * other + cb * mine);
    }
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
}

AdasumComms::~AdasumComms() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& c : groups_) MPI_Comm_free(&c);
}

bool adasum_dtype(fuseopt_dtype_t dtype) {
  return dtype == FUSEOPT_FLOAT16 || dtype == FUSEOPT_FLOAT32 || dtype == FUSEOPT_FLOAT64;
}

bool adasum_supported(int size, const char** why) {
  if (power_of_two(size)) return true;
  *why = "Adasum needs a power-of-two number of ranks";
  return false;
}

void adasum_allreduce(const AdasumComms& comms, void* buffer,
                      const std::vector<int64_t>& tensor_counts, fuseopt_dtype_t dtype) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comms.comm(), &rank);
  MPI_Comm_size(comms.comm(), &size);
  const Access io = access_for(dtype);
  char* buf = static_cast<char*>(buffer);
  int64_t lo = 0, hi = 0;
  for (int64_t c : tensor_counts) hi += c;
  std::vector<char> theirs(static_cast<size_t>((hi - lo + 1) / 2 + 1) * io.esize);
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
    exchange(comms.comm(), partner, buf + give_lo * io.esize, (give_hi - give_lo) * io.esize,
             theirs.data(), (keep_hi - keep_lo) * io.esize);
    held.push_back(Held{lo, hi, left});
    combine(io, comms.group(index), clip(tensor_counts, keep_lo, keep_hi), buf, theirs.data(),
            keep_lo, left);
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
    exchange(comms.comm(), partner, buf + lo * io.esize, (hi - lo) * io.esize,
             buf + other_lo * io.esize, (other_hi - other_lo) * io.esize);
    lo = parent.lo;
    hi = parent.hi;
  }
}

}  // namespace fuseopt
