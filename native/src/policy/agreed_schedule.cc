#include "policy/agreed_schedule.h"

namespace fuseopt {
namespace {

constexpr int kFoldTag = 1, kDoublingTag = 2, kResultTag = 3;

}  // namespace

int agreed_schedule(int rank, int size, AgreedExchange out[kMaxAgreedExchanges]) {
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
