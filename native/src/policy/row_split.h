// How a reducescatter divides the first dimension among the ranks: the same
// rule for both executors and, through fuseopt_reducescatter_rows, for the
// bindings that size the result before enqueueing.
#pragma once

#include <cstdint>

namespace fuseopt {

// Rows of the result on rank (0 <= rank < size): rows / size, and one more on
// the first rows % size ranks.
int64_t reducescatter_rows(int64_t rows, int rank, int size);

}  // namespace fuseopt
