#include "transport/mpi/shm_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <unistd.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/poll_schedule.h"
#include "kernels/pair_sum.h"
#include "transport/mpi/polite_wait.h"

namespace fuseopt {

// Walks a bucket's segments as one stream of elements, front to back.
class SegmentCursor {
 public:
  explicit SegmentCursor(const std::vector<Segment>& segments) : segments_(segments) {}
  // Calls piece(segment, element offset in it, offset from this call's start,
  // elements) for the next n elements of the stream.
  template <typename Piece>
  void take(int64_t n, Piece piece) {
    for (int64_t done = 0; done < n;) {
      const Segment& s = segments_[index_];
      const int64_t len = std::min(n - done, s.count - offset_);
      if (len > 0) piece(s, offset_, done, len);
      done += len;
      offset_ += len;
      if (offset_ == s.count) {
        ++index_;
        offset_ = 0;
      }
    }
  }

 private:
  const std::vector<Segment>& segments_;
  size_t index_ = 0;
  int64_t offset_ = 0;
};

ShmCollectives::ShmCollectives(const MpiWorld& world, int stores)
    : window_(world), rank_(window_.rank()), size_(window_.size()), stores_(stores) {}

void ShmCollectives::copy(void* dst, const void* src, int64_t bytes, bool streamed) {
  if (streamed)
    kernels::stream_copy(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

void ShmCollectives::attach() {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);  // 0 or -1 where unknown
  const int64_t mine_bytes =
      std::min(kMaxSlotBytes, std::max(kMinSlotBytes, static_cast<int64_t>(l2) & ~int64_t(4095)));
  mpi_check(MPI_Allreduce(&mine_bytes, &slot_bytes_, 1, MPI_INT64_T, MPI_MIN, window_.comm()),
            "MPI_Allreduce(slot size)");
  // All of it cleared, and every rank's pages mapped here, before the first
  // chunk: first touches would weigh on the first chunks' timing, by which
  // each kind of store is chosen (Note [Streamed slots]).
  const int64_t bytes = 2 * slot_bytes_ + kControlBytes;
  window_.allocate(bytes, 0, bytes, "shared-memory collectives");
  arrived_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    arrived_[r] = reinterpret_cast<uint64_t*>(slots(r) + 2 * slot_bytes_);
    for (int64_t page = 0; page < bytes; page += 4096)
      static_cast<void>(*static_cast<volatile const char*>(slots(r) + page));
  }
}

// Note [Shared-memory barrier]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each phase of a chunk ends in a barrier among the host's ranks. Through
// MPI (MPI_Ibarrier polled politely) one took 5-6 us here, two per chunk:
// most of a 256 KiB allreduce's time beside its copies. Every rank counts
// the barriers it has entered in a counter of its own, on a page of its
// own after its slots; a barrier publishes the new count and polls, on the
// poll schedule (Note [Poll schedule]), until every counter has reached it.
// Counts only grow and every rank runs the same collectives, so a rank that
// is one barrier ahead cannot be mistaken for one that is behind.
// Ordering: the slots' contents must be visible before the count that
// announces them. Streaming stores (stream_copy, pair_sum_publish) are
// weakly ordered on x86, so a full fence, not only a release store, comes
// first. A rank that never arrives (dead, stuck) leaves the barrier polling
// like an MPI wait would, until the peer timeout aborts the context; the
// abandoned runtime then ends the wait with an error instead of polling on.
void ShmCollectives::sync() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t count = ++barriers_;
  __atomic_store_n(arrived_[rank_], count, __ATOMIC_RELEASE);
  // The fence above drains this rank's streaming stores: a chunk's own work.
  const double start = now_s();
  int waiting_for = 0;
  poll_until(
      [&] {
        for (; waiting_for < size_; ++waiting_for) {
          if (__atomic_load_n(arrived_[waiting_for], __ATOMIC_ACQUIRE) >= count) continue;
          if (MpiWorld::abandoned())
            throw Error(FUSEOPT_RANK_FAILED, "shared-memory barrier abandoned");
          run_side_work();  // Note [Side work]
          return false;
        }
        return true;
      },
      kCollectivePoll);
  waited_s_ += now_s() - start;
}

void ShmCollectives::allreduce(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                fuseopt_reduce_op_t op, double postscale) {
  dispatch(segments, dtype, op, postscale, -1);
}

void ShmCollectives::reduce(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                             fuseopt_reduce_op_t op, double postscale, int root) {
  dispatch(segments, dtype, op, postscale, root);
}

void ShmCollectives::dispatch(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                               fuseopt_reduce_op_t op, double postscale, int root) {
  if (!window_.allocated()) attach();
  const bool sum = op == FUSEOPT_SUM || op == FUSEOPT_AVERAGE;
  bool as_is = true, wire16 = is_16bit_float(dtype);
  for (const Segment& s : segments) {
    as_is = as_is && s.memory_dtype == dtype;
    wire16 = wire16 && (s.memory_dtype == dtype || s.memory_dtype == FUSEOPT_FLOAT32);
  }
  if (as_is && sum && dtype == FUSEOPT_FLOAT32) return direct<float>(segments, postscale, root);
  if (as_is && sum && dtype == FUSEOPT_FLOAT64) return direct<double>(segments, postscale, root);
  if (wire16) return direct16(segments, dtype, op, postscale, root);
  staged(segments, dtype, op, postscale, root);
}

void ShmCollectives::broadcast(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                                int root) {
  // One barrier per chunk: the root refills a slot only after the barrier
  // that follows everyone's reads of it two chunks before (the slot pair).
  if (!window_.allocated()) attach();
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t per_chunk = slot_bytes_ / esize;
  int64_t count = 0;
  for (const Segment& s : segments) count += s.count;
  SegmentCursor cursor(segments);
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t n = std::min(per_chunk, count - done);
    char* const slot = slots(root) + next_slot_base(n * esize);
    const Chunk chunk(*this, StoreChoice::kBroadcast, n * esize);
    if (rank_ == root) {
      cursor.take(n, [&](const Segment& s, int64_t at, int64_t to, int64_t len) {
        copy(slot + to * esize, static_cast<const char*>(s.in) + at * esize, len * esize,
             chunk.streamed());
      });
      sync();
    } else {
      sync();
      cursor.take(n, [&](const Segment& s, int64_t at, int64_t from, int64_t len) {
        std::memcpy(static_cast<char*>(s.out) + at * esize, slot + from * esize, len * esize);
      });
    }
  }
}

// Note [Moving slot offsets]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A chunk smaller than a slot starts where the previous chunk in that slot
// ended (page-aligned), wrapping to the slot's start when it would not fit.
// Writing a line costs more while another core still holds a copy of it:
// every store must first take the line back from that core's cache. A
// chunk written at a slot's start every time meets, in every line, the copy
// the other ranks read two chunks before; a moving one meets lines they read
// several chunks ago, mostly gone from their caches. Measured 2026-12-06, 2
// ranks on cores sharing a cache, blocking allreduce, median of 300 calls,
// fixed against moving offsets: 64 KiB 14.8-15.7 against 10.5 us, 128 KiB
// 22.9-28.1 against 13.3, 256 KiB 31.4-34.0 against 19.9; per phase at 256
// KiB, the copy into the slot 5.8-7.4 against 3.2-3.4 us, the reduction 9.3-13.2
// against 5.6-6.4. Safety is the slot pair's: the region a chunk writes was
// last read two or more chunks before, and the barriers of the chunk in
// between order those reads first (the top of shm_collectives.h).
int64_t ShmCollectives::next_slot_base(int64_t bytes) {
  const int64_t need = (bytes + kSlotAlign - 1) & ~(kSlotAlign - 1);
  int64_t& offset = offsets_[turn_];
  if (offset + need > slot_bytes_) offset = 0;
  const int64_t base = turn_ * slot_bytes_ + offset;
  offset += need;
  turn_ ^= 1;
  return base;
}

std::pair<int64_t, int64_t> ShmCollectives::range(int r, int64_t n, int root) const {
  if (root >= 0) return r == root ? std::make_pair(int64_t(0), n) : std::make_pair(n, n);
  return {n * r / size_, n * (r + 1) / size_};
}

template <typename Piece>
void ShmCollectives::walk(SegmentCursor& c, int64_t n, int root, bool own, Piece piece) {
  for (int r = 0; r < size_; ++r) {
    const auto part = range(r, n, root);
    c.take(part.second - part.first, [&](const Segment& s, int64_t at, int64_t from,
                                         int64_t len) {
      if ((r == rank_) == own) piece(r, part.first + from, s, at, len);
    });
  }
}

namespace {
// out = publish = (in * pre + others[0] + others[1] + ...) * post, one pass.
// The arithmetic is scale_copy's (double, rounded back) and the summation
// order MPI_Reduce_local's in staged(), so both paths give the same bits.
template <typename T>
void reduce_and_publish(const T* in, double pre, const std::vector<const T*>& others, T* out,
                        T* publish, double post, int64_t n, bool stream_out,
                        bool stream_publish) {
  if (others.size() == 1)  // more ranks: the loop below, plain stores
    return kernels::pair_sum_publish(in, pre, others[0], out, publish, post, n,
                                     stream_out && out != in && publish != out,
                                     stream_publish && publish != out);
  for (int64_t i = 0; i < n; ++i) {
    T acc = static_cast<T>(in[i] * pre);
    for (const T* o : others) acc = o[i] + acc;
    const T r = static_cast<T>(acc * post);
    out[i] = r;
    publish[i] = r;
  }
}
}  // namespace

template <typename T>
void ShmCollectives::direct(const std::vector<Segment>& segments, double postscale, int root) {
  constexpr int64_t esize = sizeof(T);
  const int64_t per_chunk = slot_bytes_ / esize;
  int64_t count = 0;
  for (const Segment& s : segments) count += s.count;
  const bool large = count * esize > kStreamedOutputBytes;
  SegmentCursor in(segments), own(segments), out(segments);
  std::vector<const T*> others(size_ - 1);
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t n = std::min(per_chunk, count - done);
    const int64_t base = next_slot_base(n * esize);
    auto slot = [&](int r, int64_t element) {
      return reinterpret_cast<T*>(slots(r) + base) + element;
    };
    const Chunk chunk(*this, root < 0 ? StoreChoice::kAllreduce : StoreChoice::kReduce,
                      n * esize);
    const bool stream_out = large || chunk.streamed();
    // 1. Publish the elements the other ranks reduce.
    walk(in, n, root, false, [&](int, int64_t e, const Segment& s, int64_t at, int64_t len) {
      if (s.prescale == 1.0)
        copy(slot(rank_, e), static_cast<const T*>(s.in) + at, len * esize, chunk.streamed());
      else
        scale_copy(esize == 4 ? FUSEOPT_FLOAT32 : FUSEOPT_FLOAT64,
                   static_cast<const T*>(s.in) + at, slot(rank_, e), len, s.prescale);
    });
    sync();
    // 2. Reduce this rank's range straight from its own tensors and the
    //    others' slots into its outputs, and publish the result (a root
    //    keeps it: its output is written twice, in the cache).
    walk(own, n, root, true, [&](int, int64_t e, const Segment& s, int64_t at, int64_t len) {
      for (int k = 1; k < size_; ++k) others[k - 1] = slot((rank_ + k) % size_, e);
      T* out = static_cast<T*>(s.out) + at;
      reduce_and_publish(static_cast<const T*>(s.in) + at, s.prescale, others, out,
                         root < 0 ? slot(rank_, e) : out, postscale, len, stream_out,
                         chunk.streamed());
    });
    if (root >= 0) continue;  // one barrier per chunk: see broadcast()
    sync();
    // 3. Fetch the other ranges, already scaled, from the ranks that reduced them.
    //    A large output apart from the input is written past the caches
    //    (kStreamedOutputBytes): out-of-place allreduces of 16 MiB took 5.1-5.2 ms
    //    instead of 5.6-5.9, 64 MiB 19.6-20.4 instead of 20.8-24.2 (2026-11-29,
    //    interleaved, 2 ranks).
    walk(out, n, root, false, [&](int r, int64_t e, const Segment& s, int64_t at, int64_t len) {
      copy(static_cast<T*>(s.out) + at, slot(r, e), len * esize, s.out != s.in && stream_out);
    });
  }
}

// A 16-bit wire's values from segment s's memory (float32, rounded here, or
// the wire's own 16-bit dtype), prescaled: the bits of staged()'s copy-in.
void ShmCollectives::load16(fuseopt_dtype_t dtype, const Segment& s, int64_t at, uint16_t* dst,
                            int64_t n) {
  if (s.memory_dtype == FUSEOPT_FLOAT32)
    return narrow16(dtype, static_cast<const float*>(s.in) + at, dst, n,
                    static_cast<float>(s.prescale));
  scale_copy(dtype, static_cast<const uint16_t*>(s.in) + at, dst, n, s.prescale);
}

// Reduced (and postscaled) 16-bit values into segment s's output memory.
void ShmCollectives::store16(fuseopt_dtype_t dtype, const uint16_t* src, const Segment& s,
                             int64_t at, int64_t n, bool streamed) {
  if (s.memory_dtype == FUSEOPT_FLOAT32)
    return widen16(dtype, src, static_cast<float*>(s.out) + at, n, 1.0f);
  copy(static_cast<uint16_t*>(s.out) + at, src, n * 2, streamed);
}

void ShmCollectives::direct16(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                               fuseopt_reduce_op_t op, double postscale, int root) {
  // direct<T>'s three steps for a 16-bit wire, the tensors float32 (rounded
  // on the copies) or of the wire's dtype: the slots hold 16-bit values.
  // Rank r's range is reduced in blocks that stay in L1, in staged()'s order
  // (the others' slots one after another into the rounded own values), so
  // the bits match staged(), and for float32 tensors a cast, the 16-bit
  // allreduce and a cast back.
  constexpr int64_t kBlock = 2048;
  const int64_t per_chunk = slot_bytes_ / 2;
  const float post = static_cast<float>(postscale);
  int64_t count = 0;
  for (const Segment& s : segments) count += s.count;
  const bool large = count * 2 > kStreamedOutputBytes;
  SegmentCursor in(segments), own(segments), out(segments);
  uint16_t block[kBlock];
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t n = std::min(per_chunk, count - done);
    const int64_t base = next_slot_base(n * 2);
    auto slot = [&](int r, int64_t element) {
      return reinterpret_cast<uint16_t*>(slots(r) + base) + element;
    };
    const Chunk chunk(*this, root < 0 ? StoreChoice::kWire16 : StoreChoice::kReduce, n * 2);
    walk(in, n, root, false, [&](int, int64_t e, const Segment& s, int64_t at, int64_t len) {
      if (!chunk.streamed()) return load16(dtype, s, at, slot(rank_, e), len);
      for (int64_t i = 0; i < len; i += kBlock) {  // rounded in L1, streamed out
        const int64_t m = std::min(kBlock, len - i);
        load16(dtype, s, at + i, block, m);
        copy(slot(rank_, e + i), block, m * 2, true);
      }
    });
    sync();
    walk(own, n, root, true, [&](int, int64_t e, const Segment& s, int64_t at, int64_t len) {
      // 16-bit tensors are reduced in their output (in place: no copy at
      // all before the reduction), float32 ones in a block on the stack.
      const bool wide = s.memory_dtype == FUSEOPT_FLOAT32;
      for (int64_t i = 0; i < len; i += kBlock) {
        const int64_t m = std::min(kBlock, len - i);
        uint16_t* const acc = wide ? block : static_cast<uint16_t*>(s.out) + at + i;
        load16(dtype, s, at + i, acc, m);
        for (int k = 1; k < size_; ++k)
          combine16(dtype, op, slot((rank_ + k) % size_, e + i), acc, m);
        if (post != 1.0f) scale16(dtype, acc, acc, m, post);
        if (root < 0) copy(slot(rank_, e + i), acc, m * 2, chunk.streamed());
        if (wide) store16(dtype, block, s, at + i, m, false);
      }
    });
    if (root >= 0) continue;
    sync();
    walk(out, n, root, false, [&](int r, int64_t e, const Segment& s, int64_t at, int64_t len) {
      store16(dtype, slot(r, e), s, at, len, s.out != s.in && (large || chunk.streamed()));
    });
  }
}

void ShmCollectives::staged(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                             fuseopt_reduce_op_t op, double postscale, int root) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t per_chunk = slot_bytes_ / esize;
  const MPI_Datatype type = MpiWorld::datatype(dtype);
  const MPI_Op mpi_op = MpiWorld::op(op, dtype);
  int64_t count = 0;
  for (const Segment& s : segments) count += s.count;
  SegmentCursor in(segments), out(segments);
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t n = std::min(per_chunk, count - done);
    const int64_t base = next_slot_base(n * esize);
    char* const mine_slot = slots(rank_) + base;
    in.take(n, [&](const Segment& s, int64_t at, int64_t to, int64_t len) {
      convert_copy(s.memory_dtype, static_cast<const char*>(s.in) + at * dtype_size(s.memory_dtype),
                   dtype, mine_slot + to * esize, len, s.prescale);
    });
    sync();
    // Range r of the chunk is reduced by rank r, into its own slot.
    const auto mine = range(rank_, n, root);
    const int64_t len = mine.second - mine.first;
    for (int k = 1; k < size_ && len > 0; ++k) {
      const int other = (rank_ + k) % size_;
      mpi_check(MPI_Reduce_local(slots(other) + base + mine.first * esize,
                                 mine_slot + mine.first * esize, static_cast<int>(len), type,
                                 mpi_op),
                "MPI_Reduce_local");
    }
    if (root < 0) sync();  // a root reads only its own slot
    for (int r = 0; r < size_; ++r) {
      const auto part = range(r, n, root);
      const char* reduced = slots(r) + base + part.first * esize;
      out.take(part.second - part.first, [&](const Segment& s, int64_t at, int64_t from,
                                             int64_t len) {
        if (root >= 0 && r != rank_) return;
        convert_copy(dtype, reduced + from * esize, s.memory_dtype,
                     static_cast<char*>(s.out) + at * dtype_size(s.memory_dtype), len, postscale);
      });
    }
  }
}

}  // namespace fuseopt
