// The exchanges of an agreed reduction among the ranks of a set: recursive
// doubling, with the ranks beyond a power of two folded in first. Pure
// policy: loop/loop_agreed.cc runs it with MPI messages.
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
int agreed_schedule(int rank, int size, AgreedExchange out[kMaxAgreedExchanges]);

}  // namespace fuseopt
