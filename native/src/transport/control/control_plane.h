// The negotiation channel between ranks, over MPI.
//
// A *round* is one bitwise-AND allreduce of a small word vector (see loop.h
// for its layout), posted non-blocking and polled (see Note [Poll schedule]
// in poll_schedule.h); through shared memory where every rank shares the
// host (Note [Rounds through shared memory], shm_round.cc). Full negotiation
// (names, shapes) uses gather-to-coordinator and broadcast-from-coordinator
// of byte blobs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "transport/control/shm_round.h"
#include "transport/mpi/mpi_world.h"

namespace fuseopt {

class ControlPlane {
 public:
  explicit ControlPlane(const MpiWorld& world) : world_(world) {}

  // Collective: rounds of up to max_words words go through shared memory
  // from now on, where every rank shares this host.
  void use_shared_memory(int64_t max_words);
  // Collective: frees the window; rounds go through MPI from now on.
  void release_shared_memory() { shm_.reset(); }

  // How a pause between polls ended.
  enum class Pause { kTimedOut, kWoken, kAbandon, kHandOver };
  using PauseFn = std::function<Pause(std::chrono::microseconds)>;

  // Posts one AND-allreduce of words in place; words must stay put until
  // await_and returns true. One round at a time.
  MPI_Request post_and(std::vector<uint64_t>* words);
  // Polls the round until it completes (true). Between polls it calls pause,
  // which waits up to the given time and may end early (kWoken: something
  // happened locally, so peers are probably active too: poll eagerly again),
  // abandon the round (kAbandon: the function throws; stall shutdown), or
  // hand it over (kHandOver: returns false; another thread awaits it later).
  bool await_and(MPI_Request* request, std::vector<uint64_t>* words, const PauseFn& pause);

  // On the coordinator: every rank's blob, indexed by rank. Elsewhere: empty.
  std::vector<std::vector<char>> gather(const std::vector<char>& mine);

  // Every rank's flag, indexed by rank.
  std::vector<char> allgather_flag(bool mine);

  // Every rank's value, indexed by rank.
  std::vector<int64_t> allgather_value(int64_t mine);

  // The coordinator's blob, on every rank.
  std::vector<char> broadcast(std::vector<char> blob);

  // Broadcasts a fixed-size POD from the coordinator.
  template <typename T>
  void broadcast_value(T* value) {
    mpi_check(MPI_Bcast(value, sizeof(T), MPI_BYTE, 0, world_.comm()), "MPI_Bcast");
  }

 private:
  const MpiWorld& world_;
  std::unique_ptr<ShmRound> shm_;
  bool shm_posted_ = false;  // the round in flight went through shm_
};

}  // namespace fuseopt
