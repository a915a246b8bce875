// The exchanges of an agreed reduction among the ranks of a set: recursive
// doubling, with the ranks beyond a power of two folded in first. Pure
// policy (header only): loop/loop_agreed.cc runs it with MPI messages.
#pragma once

namespace fuseopt {

// One exchange: send the wire to peer, receive from peer (adding the message
// to the wire, or taking it as the result), or both. Tags keep the kinds of
// message of one call apart; messages of one kind between two ranks arrive
// in order, so successive calls never mix.
struct AgreedExchange {
  enum Receive { kNone, kAdd, kResult };
  int peer;
  bool send;
  Receive receive;
  int tag;
};

// Enough for any int rank count: two fold exchanges and one per doubling.
constexpr int kMaxAgreedExchanges = 34;

// Fills out with rank's exchanges among size ranks, in order; returns how
// many. With size not a power of two, the first 2 * (size - 2^k) ranks pair
// up: the even one of each pair sends its values to the odd one, which
// stands for both in the doubling and sends it the result at the end. Every
// rank ends with the same bits: each exchange adds two partial sums, and
// floating-point addition is commutative.
inline int agreed_schedule(int rank, int size, AgreedExchange out[kMaxAgreedExchanges]) {
  constexpr int kFoldTag = 1, kDoublingTag = 2, kResultTag = 3;
  int pof2 = 1;
  while (pof2 <= size / 2) pof2 *= 2;
  const int rem = size - pof2;
  int n = 0, vrank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      out[n++] = {rank + 1, true, AgreedExchange::kNone, kFoldTag};
      out[n++] = {rank + 1, false, AgreedExchange::kResult, kResultTag};
      return n;
    }
    out[n++] = {rank - 1, false, AgreedExchange::kAdd, kFoldTag};
    vrank = rank / 2;
  } else {
    vrank = rank - rem;
  }
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vpeer = vrank ^ mask;
    out[n++] = {vpeer < rem ? 2 * vpeer + 1 : vpeer + rem, true, AgreedExchange::kAdd,
                kDoublingTag};
  }
  if (rank < 2 * rem) out[n++] = {rank - 1, true, AgreedExchange::kNone, kResultTag};
  return n;
}

}  // namespace fuseopt
