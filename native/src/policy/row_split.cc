#include "policy/row_split.h"

namespace fuseopt {

int64_t reducescatter_rows(int64_t rows, int rank, int size) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

}  // namespace fuseopt
