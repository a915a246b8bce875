// The engine shared by the test shims (fake_cuda_nccl.cc, fake_acl_hccl.cc):
// "device memory" that is host memory, streams whose work is deferred, and
// collectives over MPI. Each shim wraps it in the real C symbols of its
// vendor, so that fuseopt's NCCL and HCCL backends run unchanged against it.
//
// Deferred streams. Nothing enqueued on a stream runs when it is enqueued: a
// stream's operations run, in order, only when someone waits for it (stream
// query/synchronize, event query/synchronize, a stream waiting on an event
// of another stream, a synchronous copy). So a backend that reads a device
// buffer without waiting for the stream that produces it, or completes a
// handle without synchronizing its own stream, sees stale bytes and the
// tests' exact checks fail.
//
// Collectives. A communicator is an MPI communicator split off
// MPI_COMM_WORLD by a colour derived from the unique id / root info, so only
// ranks that really received rank 0's id end up together. Reductions gather
// every rank's bytes (MPI_Iallgather) and reduce them in rank order in
// double precision, which covers every dtype and op, including NCCL's
// average and pre-multiplied sum. All MPI calls are non-blocking and
// polled, so a pending collective can notice that a peer failed.
//
// Fault injection. FUSEOPT_FAKE_ASYNC_ERROR=R:N makes the N-th collective on
// world rank R fail: it never runs, the communicator reports an
// asynchronous error, and the peers are told (as a dying peer's closed
// connections would tell them) so that they report a remote error instead of
// waiting forever.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fake {

enum class Type { I8, U8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64 };
enum class Op { Sum, Prod, Max, Min, Avg, PreMulSum };

inline size_t type_size(Type t) {
  switch (t) {
    case Type::I8: case Type::U8: return 1;
    case Type::I16: case Type::U16: case Type::F16: case Type::BF16: return 2;
    case Type::I32: case Type::U32: case Type::F32: return 4;
    default: return 8;
  }
}

// ---- 16-bit floats --------------------------------------------------------

inline float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do { ++e; m <<= 1; } while (!(m & 0x400));
    bits = sign | ((112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (x >> 16) & 0x8000;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  if (exp >= 0x1f) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    man |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) ++half;
    return sign | half;
  }
  uint32_t half = (exp << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | half;
}

inline float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

inline double load(Type t, const void* p, size_t i) {
  switch (t) {
    case Type::I8: return static_cast<const int8_t*>(p)[i];
    case Type::U8: return static_cast<const uint8_t*>(p)[i];
    case Type::I16: return static_cast<const int16_t*>(p)[i];
    case Type::U16: return static_cast<const uint16_t*>(p)[i];
    case Type::I32: return static_cast<const int32_t*>(p)[i];
    case Type::U32: return static_cast<const uint32_t*>(p)[i];
    case Type::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case Type::U64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case Type::F16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case Type::BF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case Type::F32: return static_cast<const float*>(p)[i];
    default: return static_cast<const double*>(p)[i];
  }
}

inline void store(Type t, void* p, size_t i, double v) {
  switch (t) {
    case Type::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case Type::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case Type::I16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case Type::U16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
    case Type::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case Type::U32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case Type::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case Type::U64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case Type::F16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case Type::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case Type::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    default: static_cast<double*>(p)[i] = v; break;
  }
}

inline bool is_integer(Type t) { return t != Type::F16 && t != Type::BF16 && t != Type::F32 && t != Type::F64; }

// out[i] = op over ranks of gathered[r][i], ranks in order.
inline void reduce(Type t, Op op, double scalar, const char* gathered, int nranks, size_t count,
                   void* out) {
  const size_t bytes = count * type_size(t);
  for (size_t i = 0; i < count; ++i) {
    double acc = 0;
    for (int r = 0; r < nranks; ++r) {
      double x = load(t, gathered + r * bytes, i);
      if (op == Op::PreMulSum) x *= scalar;
      if (r == 0) { acc = x; continue; }
      switch (op) {
        case Op::Prod: acc *= x; break;
        case Op::Max: acc = x > acc ? x : acc; break;
        case Op::Min: acc = x < acc ? x : acc; break;
        default: acc += x; break;
      }
    }
    if (op == Op::Avg) {
      if (is_integer(t)) acc = static_cast<double>(static_cast<int64_t>(acc) / nranks);
      else acc /= nranks;
    }
    store(t, out, i, acc);
  }
}

// ---- state ----------------------------------------------------------------

inline std::recursive_mutex& mu() {
  static std::recursive_mutex m;
  return m;
}

inline void complain(const std::string& what) {
  std::fprintf(stderr, "[fake device] %s\n", what.c_str());
  std::fflush(stderr);
}

// Device allocations: begin -> size. A "device pointer" is one inside them.
inline std::map<const char*, size_t>& allocations() {
  static std::map<const char*, size_t> a;
  return a;
}

inline void* device_alloc(size_t bytes) {
  char* p = static_cast<char*>(std::malloc(bytes ? bytes : 1));
  std::memset(p, 0xA5, bytes);  // not zeros: forgetting to copy must show
  allocations()[p] = bytes ? bytes : 1;
  return p;
}

inline bool device_free(void* p) {
  auto it = allocations().find(static_cast<const char*>(p));
  if (it == allocations().end()) return p == nullptr;
  allocations().erase(it);
  std::free(p);
  return true;
}

// Whether [p, p + bytes) lies inside one device allocation.
inline bool on_device(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const char* c = static_cast<const char*>(p);
  auto& a = allocations();
  auto it = a.upper_bound(c);
  if (it == a.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

// A deferred operation: returns true once finished (it may be called many
// times; the first call starts it).
using Work = std::function<bool()>;

struct Stream {
  std::deque<Work> ops;
  uint64_t pushed = 0, finished = 0;
};

struct Event {
  Stream* stream = nullptr;
  uint64_t target = 0;  // done once stream->finished reaches it
};

inline Stream* default_stream() {
  static Stream s;
  return &s;
}

inline Stream* stream_of(void* s) { return s ? static_cast<Stream*>(s) : default_stream(); }

inline void push(void* s, Work w) {
  Stream* st = stream_of(s);
  st->ops.push_back(std::move(w));
  ++st->pushed;
}

// Runs a stream's operations until one is still pending. True if empty.
inline bool progress(Stream* s) {
  while (!s->ops.empty()) {
    Work w = s->ops.front();  // a copy: running it may touch the deque
    if (!w()) return false;
    s->ops.pop_front();
    ++s->finished;
  }
  return true;
}

inline bool event_done(Event* e) {
  if (!e->stream) return true;  // never recorded: complete, as in CUDA
  while (e->stream->finished < e->target)
    if (!progress(e->stream) && e->stream->finished < e->target) return false;
  return true;
}

inline void record(Event* e, void* s) {
  e->stream = stream_of(s);
  e->target = e->stream->pushed;
}

inline void wait_event(void* s, Event* e) {
  Event snapshot = *e;  // the event may be recorded again later
  push(s, [snapshot]() mutable { return event_done(&snapshot); });
}

inline void sync_stream(void* s) {
  while (!progress(stream_of(s))) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// ---- communicators --------------------------------------------------------

constexpr int kAbortTag = 7171;

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;  // collectives
  MPI_Comm ctl = MPI_COMM_NULL;   // failure notices
  int rank = 0, size = 1;
  int async_error = 0;            // vendor code; 0 = none
  int launched = 0;               // collectives started, for fault injection
  int fail_at = 0;                // 1-based collective that fails here; 0 never
  int local_error = 0, remote_error = 0;  // vendor codes to report
};

// Colour for MPI_Comm_split from the id's bytes (FNV-1a).
inline int colour_of(const void* id, size_t bytes) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(id)[i]) * 16777619u;
  return static_cast<int>(h & 0x3fffffff);
}

// Collective over MPI_COMM_WORLD. Returns an error message, "" on success.
inline std::string init_comm(Comm* c, const void* id, size_t id_bytes, int nranks, int rank,
                             int local_error, int remote_error) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_split(MPI_COMM_WORLD, colour_of(id, id_bytes), rank, &c->comm);
  MPI_Comm_dup(c->comm, &c->ctl);
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  c->local_error = local_error;
  c->remote_error = remote_error;
  if (c->size != nranks || c->rank != rank)
    return "ranks did not all receive the same unique id (communicator of " +
           std::to_string(c->size) + " instead of " + std::to_string(nranks) + ")";
  if (const char* spec = std::getenv("FUSEOPT_FAKE_ASYNC_ERROR")) {
    int r = -1, n = 0;
    if (std::sscanf(spec, "%d:%d", &r, &n) == 2 && r == world_rank) c->fail_at = n;
  }
  return "";
}

// Pending work notices a peer's failure notice.
inline void poll_notices(Comm* c) {
  int flag = 0;
  MPI_Status st;
  MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, c->ctl, &flag, &st);
  if (!flag) return;
  int code = 0;
  MPI_Recv(&code, 1, MPI_INT, st.MPI_SOURCE, kAbortTag, c->ctl, MPI_STATUS_IGNORE);
  if (!c->async_error) c->async_error = c->remote_error;
}

inline void fail_here(Comm* c) {
  c->async_error = c->local_error;
  complain("injected asynchronous error on rank " + std::to_string(c->rank));
  for (int r = 0; r < c->size; ++r) {
    if (r == c->rank) continue;
    static int code = 1;
    MPI_Request req;
    MPI_Isend(&code, 1, MPI_INT, r, kAbortTag, c->ctl, &req);
    MPI_Request_free(&req);
  }
}

// A collective as stream work: `start` posts non-blocking MPI requests,
// `finish` runs once they all completed.
inline Work collective(Comm* c, std::function<void(std::vector<MPI_Request>*)> start,
                       std::function<void()> finish = [] {}) {
  auto reqs = std::make_shared<std::vector<MPI_Request>>();
  auto started = std::make_shared<bool>(false);
  return [=]() {
    if (!*started) {
      *started = true;
      if (c->async_error) return false;
      if (c->fail_at && ++c->launched == c->fail_at) {
        fail_here(c);
        return false;
      }
      start(reqs.get());
    }
    if (c->async_error) return false;  // stuck for good, as on real hardware
    int done = 1;
    if (!reqs->empty()) MPI_Testall(static_cast<int>(reqs->size()), reqs->data(), &done,
                                    MPI_STATUSES_IGNORE);
    if (!done) {
      poll_notices(c);
      return false;
    }
    finish();
    return true;
  };
}

// The collectives both shims offer, on byte counts that fit MPI's int.
// root < 0: every rank gets the result; else only root (a reduce).
inline Work allreduce(Comm* c, const void* send, void* recv, size_t count, Type t, Op op,
                      double scalar, int root = -1) {
  const size_t bytes = count * type_size(t);
  auto all = std::make_shared<std::vector<char>>(bytes * c->size + 1);
  return collective(
      c,
      [=](std::vector<MPI_Request>* r) {
        r->resize(1);
        MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, all->data(),
                       static_cast<int>(bytes), MPI_BYTE, c->comm, &(*r)[0]);
      },
      [=] {
        if (root < 0 || root == c->rank) reduce(t, op, scalar, all->data(), c->size, count, recv);
      });
}

inline Work reduce_scatter(Comm* c, const void* send, void* recv, size_t recv_count, Type t,
                           Op op, double scalar) {
  const size_t part = recv_count * type_size(t), bytes = part * c->size;
  auto all = std::make_shared<std::vector<char>>(bytes * c->size + 1);
  auto full = std::make_shared<std::vector<char>>(bytes + 1);
  return collective(
      c,
      [=](std::vector<MPI_Request>* r) {
        r->resize(1);
        MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, all->data(),
                       static_cast<int>(bytes), MPI_BYTE, c->comm, &(*r)[0]);
      },
      [=] {
        reduce(t, op, scalar, all->data(), c->size, recv_count * c->size, full->data());
        std::memcpy(recv, full->data() + part * c->rank, part);
      });
}

inline Work broadcast(Comm* c, const void* send, void* recv, size_t bytes, int root) {
  return collective(c, [=](std::vector<MPI_Request>* r) {
    if (c->rank == root && send != recv) std::memmove(recv, send, bytes);
    r->resize(1);
    MPI_Ibcast(recv, static_cast<int>(bytes), MPI_BYTE, root, c->comm, &(*r)[0]);
  });
}

inline Work allgather(Comm* c, const void* send, void* recv, size_t send_bytes) {
  return collective(c, [=](std::vector<MPI_Request>* r) {
    r->resize(1);
    MPI_Iallgather(send, static_cast<int>(send_bytes), MPI_BYTE, recv,
                   static_cast<int>(send_bytes), MPI_BYTE, c->comm, &(*r)[0]);
  });
}

// Byte counts and displacements per rank. (MPI reads the arrays until the
// request completes, so they live with the work, not on a caller's stack.)
inline Work alltoallv(Comm* c, const void* send, std::vector<int> sc, std::vector<int> sd,
                      void* recv, std::vector<int> rc, std::vector<int> rd) {
  auto v = std::make_shared<std::vector<std::vector<int>>>(
      std::vector<std::vector<int>>{std::move(sc), std::move(sd), std::move(rc), std::move(rd)});
  return collective(c, [=](std::vector<MPI_Request>* r) {
    r->resize(1);
    MPI_Ialltoallv(send, (*v)[0].data(), (*v)[1].data(), MPI_BYTE, recv, (*v)[2].data(),
                   (*v)[3].data(), MPI_BYTE, c->comm, &(*r)[0]);
  });
}

}  // namespace fake
