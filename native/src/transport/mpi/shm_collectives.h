// Collectives through one shared-memory segment, for jobs whose ranks all
// share a host: allreduce, reduce and broadcast here (shm_collectives.cc),
// allgather and reducescatter in shm_gather.cc. MPICH's shared-memory
// allreduce streams large buffers through small cells with a handshake per
// cell (measured here: 33.6 MB in 26-28 ms, 1.3
// GB/s, against 8 GB/s for memcpy); with every rank's data mapped, a rank can
// reduce its share of the elements in one pass instead:
//   1. each rank copies its chunk into its own slot, straight from the
//      tensors of the bucket (no fusion buffer), applying prescale;
//   2. rank r reduces element range r of all slots into its slot (MPI's own
//      reduction kernels, MPI_Reduce_local, so 16-bit floats use our ops);
//   3. each rank copies every range from the slot of the rank that reduced it
//      straight into the output tensors, applying postscale.
// Each element is reduced by exactly one rank, so all ranks get the same bits.
// A reduction to one root (reduce) runs steps 1 and 2 with the root reducing
// every element; a broadcast is the root's copy-in and the others' copy-out.
// Barriers separate the phases (Note [Shared-memory barrier] in
// shm_collectives.cc). Every rank has two slots used in turn, so a
// rank may refill one while the others still read the other: the barrier
// after the next copy-in already orders it after their reads. Runs on the
// loop thread only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/poll_schedule.h"
#include "transport/backend.h"
#include "transport/mpi/mpi_world.h"
#include "transport/mpi/shared_window.h"
#include "transport/mpi/store_choice.h"

namespace fuseopt {

class SegmentCursor;  // shm_collectives.cc

class ShmCollectives {
 public:
  // Collective over the world. usable() is the same on every rank.
  // stores: a StoreChoice::Mode (FUSEOPT_SHM_STORES).
  ShmCollectives(const MpiWorld& world, int stores);
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  bool usable() const { return window_.whole_world(); }
  // Collective: every rank calls it with the same total count, dtype and op
  // (the executor's plan guarantees it). A segment's out may equal its in.
  void allreduce(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                 fuseopt_reduce_op_t op, double postscale);
  // The same with the result on `root` (a rank of this host's communicator)
  // only: the other ranks' outputs are not written.
  void reduce(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
              fuseopt_reduce_op_t op, double postscale, int root);
  // Every rank's segments receive root's (whose in and out are equal).
  void broadcast(const std::vector<Segment>& segments, fuseopt_dtype_t dtype, int root);
  // Rank r's bytes[r] from send land at offset bytes[0] + ... + bytes[r-1] of
  // every rank's recv (send apart from recv).
  void allgatherv(const void* send, void* recv, const std::vector<int64_t>& bytes);
  // Rank r receives elements [c0 + ... + c(r-1), + cr) of the reduction of
  // every rank's send, counts[r] = cr (send apart from recv).
  void reducescatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                     fuseopt_dtype_t dtype, fuseopt_reduce_op_t op);
  // Rank r's send_bytes[d] bytes for rank d (one after another in send) land
  // in d's recv at recv_bytes[0] + ... + recv_bytes[r-1] (recv_bytes[r] is
  // send_bytes[d] of rank r). Collective, but each rank knows only its own
  // counts: the ranks first agree on the exchange's size, and return false
  // (having moved nothing) when all of it is smaller than min_bytes.
  bool alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                 const std::vector<int64_t>& recv_bytes, int64_t min_bytes);

 private:
  // Bytes per slot: buffers larger than this go through in chunks, each costing
  // one or two barriers. A chunk should stay in the caches between the phases (a
  // rank reads what the other has just written): the slot is this host's L2
  // cache per core, within [1 MiB, 2 MiB] (the smallest any rank reports:
  // hybrid CPUs differ per core). Measured 2026-11-28 (Intel, AVX-512), 2
  // ranks, float32 averages, 2 MiB against 16 MiB slots: 16 MiB allreduces in
  // 3.3-3.4 ms instead of 7.2-7.5, 64 MiB in 15.4-16.6 instead of 20.3-21.6, MLP
  // training overhead 7.8 ms instead of 12.1. Measured 2026-11-29 (AMD EPYC, 1
  // MiB L2), 2 ranks, two interleaved runs, 1 MiB against 2 MiB chunks: allreduce
  // 16 MiB 3.4-3.8 ms against 4.2-4.5, allgather 16 MiB 7.1-7.8 against
  // 10.3-10.8, reducescatter 4 MiB 0.43-0.51 against 0.65-0.73; 512 KiB chunks
  // doubled the allreduce's time (twice the barriers, each a polite wait).
  static constexpr int64_t kMinSlotBytes = int64_t(1) << 20;
  static constexpr int64_t kMaxSlotBytes = int64_t(2) << 20;
  static constexpr int64_t kControlBytes = 4096;  // a rank's barrier count, after its slots
  static constexpr int64_t kSlotAlign = 4096;     // of a chunk's start in its slot
  // An output apart from the input (out of place, an allgather's result) is
  // written past the caches, by streaming stores, when the collective's output
  // is larger than this or the slots are streamed (Note [Streamed slots]): a
  // plain store first reads each line of the output from memory, a streaming
  // store does not, but a smaller output's lines are often in the cache
  // already (a recycled result buffer) and stay there for the caller.
  // Measured 2026-12-06, 2 ranks, cores sharing a cache, plain against
  // streamed: allgather of 1 MiB per rank (2 MiB out) 101-106 us against
  // 217-252, 4 MiB 749-786 against 824-862, 16 MiB 5.1 ms against 4.1-4.9;
  // out-of-place allreduce 1 MiB 86-122 against 131-134, 4 MiB 343-426
  // against 455-457. With the cores apart, streamed outputs were the faster
  // out of place (4 MiB 483-530 us against 574-636).
  static constexpr int64_t kStreamedOutputBytes = int64_t(8) << 20;
  int64_t slot_bytes_ = kMaxSlotBytes;  // agreed in attach()
  // Float sums and averages: each rank publishes only the elements others
  // reduce, and reduces its own range straight from its tensors into its
  // outputs in one pass (scales folded in): about 27% less memory traffic
  // than staging everything, which matters when ranks share memory bandwidth.
  // root < 0: allreduce; else the reduction to root (see reduce()).
  template <typename T>
  void direct(const std::vector<Segment>& segments, double postscale, int root);
  // direct's steps for a 16-bit wire dtype, any op: float32 tensors that travel
  // as it, or tensors of that dtype (16-bit values staged took 1.2-1.6x float32's
  // time for the same element count, not half).
  void direct16(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                fuseopt_reduce_op_t op, double postscale, int root);
  // direct16's copies between a segment's memory and 16-bit values.
  static void load16(fuseopt_dtype_t dtype, const Segment& s, int64_t at, uint16_t* dst,
                     int64_t n);
  static void store16(fuseopt_dtype_t dtype, const uint16_t* src, const Segment& s, int64_t at,
                      int64_t n, bool streamed);
  // Every dtype and op: stage all, reduce in the slots, copy all out.
  void staged(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
              fuseopt_reduce_op_t op, double postscale, int root);
  void dispatch(const std::vector<Segment>& segments, fuseopt_dtype_t dtype,
                fuseopt_reduce_op_t op, double postscale, int root);
  // The elements [first, last) of an n-element chunk that rank r reduces:
  // an even share, or all of them on the root of a reduction (root >= 0).
  std::pair<int64_t, int64_t> range(int r, int64_t n, int root) const;
  // Walks a chunk of n elements with cursor c, rank r's range after rank
  // r-1's, calling piece(r, element in the chunk, segment, element in it,
  // length) for this rank's own range (own) or for everyone else's (!own).
  template <typename Piece>
  void walk(SegmentCursor& c, int64_t n, int root, bool own, Piece piece);
  // The byte offset in every rank's slot pair where the next chunk, of
  // `bytes` (the same on every rank), goes: the pair alternates (see the top
  // of this file), and within a slot the offset moves (Note [Moving slot
  // offsets] in shm_collectives.cc).
  int64_t next_slot_base(int64_t bytes);
  // Rank r's pair of slots, mapped into this process: the start of its region.
  char* slots(int r) const { return window_.region(r); }
  // Words rank r publishes on its control page, after its barrier count (a
  // cache line on): alltoallv's agreement, in two sets used by turns (a rank
  // rewrites a set only after the barrier that ends everyone's reads of it).
  int64_t* control_words(int r, int set) const {
    return reinterpret_cast<int64_t*>(slots(r) + 2 * slot_bytes_ + 64 * (1 + set));
  }
  void attach();  // allocates the segment on first use (collective)
  void sync();    // Note [Shared-memory barrier]
  class Chunk;    // times a chunk's own work for stores_ (below)
  // memcpy, or past the caches (streaming stores) when streamed.
  static void copy(void* dst, const void* src, int64_t bytes, bool streamed);

  SharedWindow window_;  // allocated on first use
  int rank_ = 0;         // window_'s
  int size_ = 1;
  int turn_ = 0;              // which slot of the pair the next chunk uses
  int64_t offsets_[2] = {0, 0};  // where in each slot the next chunk starts
  // Every rank's count of barriers entered, each on its own page after its
  // slots; and this rank's.
  std::vector<uint64_t*> arrived_;
  uint64_t barriers_ = 0;
  uint64_t alltoalls_ = 0;  // run so far: which set of control words is next
  double waited_s_ = 0;  // in barriers so far: not a chunk's own work
  StoreChoice stores_;   // Note [Streamed slots]
};

// The kind of stores a chunk writes its slot with, chosen as it starts, and
// the time of its own work (barrier waits left out) told back as it ends.
class ShmCollectives::Chunk {
 public:
  Chunk(ShmCollectives& c, StoreChoice::Kind kind, int64_t bytes)
      : c_(c), kind_(kind), bytes_(bytes), streamed_(c.stores_.streamed(kind, bytes)),
        start_(now_s()), waited_(c.waited_s_) {}
  ~Chunk() { c_.stores_.measured(kind_, bytes_, now_s() - start_ - (c_.waited_s_ - waited_)); }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  bool streamed() const { return streamed_; }

 private:
  ShmCollectives& c_;
  StoreChoice::Kind kind_;
  int64_t bytes_;
  bool streamed_;
  double start_, waited_;
};

}  // namespace fuseopt
