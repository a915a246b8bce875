// A negotiation round's AND through shared memory, for a world whose ranks
// all share one host. See Note [Rounds through shared memory].
#pragma once

#include <cstdint>
#include <vector>

#include "transport/mpi/mpi_world.h"
#include "transport/mpi/shared_window.h"

namespace fuseopt {

class ShmRound {
 public:
  // Collective over world. Rounds of up to max_words words can go through it.
  ShmRound(const MpiWorld& world, int64_t max_words);
  ShmRound(const ShmRound&) = delete;
  ShmRound& operator=(const ShmRound&) = delete;

  // Whether every rank of the world shares this host (the same on every rank).
  bool usable() const { return window_.allocated(); }
  bool fits(size_t words) const { return static_cast<int64_t>(words) <= capacity_; }
  // Publishes this rank's words as the next round.
  void post(const std::vector<uint64_t>& words);
  // Whether every rank has posted that round; then words (this rank's) holds
  // the AND of all of them. Never blocks.
  bool test(std::vector<uint64_t>* words);

 private:
  uint64_t* posted(int r) const;  // rank r's count of rounds posted
  uint64_t* words(int r, uint64_t round) const;  // rank r's words of that round

  SharedWindow window_;
  int rank_ = 0;  // window_'s
  int size_ = 1;
  int64_t capacity_ = 0;  // words per round buffer
  uint64_t round_ = 0;  // rounds this rank has posted
  int next_ = 0;        // the first rank whose words the pending test has not taken
};

}  // namespace fuseopt
