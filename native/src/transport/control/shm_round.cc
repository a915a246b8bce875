#include "transport/control/shm_round.h"

#include <algorithm>
#include <cstring>

namespace fuseopt {

// Note [Rounds through shared memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every enqueued tensor costs at least one round, and a round's AND through
// MPI (MPI_Iallreduce polled) took 5-6 us here between two ranks of one host:
// about as long as MPI's whole blocking allreduce of 4 KiB. When every rank
// shares the host, each rank instead writes its round vector into a buffer of
// its own in a shared window and then publishes the count of rounds it has
// posted; a rank's round is complete once every count has reached it, and
// the AND is taken from the others' buffers. Each rank has two buffers, used
// in turn: a rank can post round k + 2 (overwriting its round-k buffer) only
// after it has seen every rank post round k + 1, which each does only after it
// has finished reading round k. Rounds too long for the buffers (more process
// sets than the window was sized for) go through MPI; the length of a round
// is the same on every rank, so all of them take the same path. Pacing, hand
// over and abandonment are the control plane's, as for an MPI round.
namespace {
constexpr int64_t kHeaderBytes = 64;  // the posted count, alone in its cache line
}  // namespace

ShmRound::ShmRound(const MpiWorld& world, int64_t max_words)
    : window_(world), rank_(window_.rank()), size_(window_.size()), capacity_(max_words) {
  if (!window_.whole_world() || capacity_ <= 0) return;  // the same on every rank
  window_.allocate(kHeaderBytes + 2 * capacity_ * static_cast<int64_t>(sizeof(uint64_t)), 0,
                   kHeaderBytes, "negotiation");
}

uint64_t* ShmRound::posted(int r) const { return reinterpret_cast<uint64_t*>(window_.region(r)); }

uint64_t* ShmRound::words(int r, uint64_t round) const {
  return reinterpret_cast<uint64_t*>(window_.region(r) + kHeaderBytes) + (round % 2) * capacity_;
}

void ShmRound::post(const std::vector<uint64_t>& mine) {
  ++round_;
  std::memcpy(words(rank_, round_), mine.data(), mine.size() * sizeof(uint64_t));
  __atomic_store_n(posted(rank_), round_, __ATOMIC_RELEASE);  // the words before the count
  next_ = 0;
}

bool ShmRound::test(std::vector<uint64_t>* mine) {
  for (; next_ < size_; ++next_) {
    if (next_ == rank_) continue;
    if (__atomic_load_n(posted(next_), __ATOMIC_ACQUIRE) < round_) return false;
    const uint64_t* theirs = words(next_, round_);
    for (size_t i = 0; i < mine->size(); ++i) (*mine)[i] &= theirs[i];
  }
  return true;
}

}  // namespace fuseopt
