#include "engine/decode_batch_sizes.h"

#include <algorithm>

namespace omni::engine {

std::vector<int> decode_batch_sizes(int max_num_seqs) {
  std::vector<int> sizes;
  const int wanted = std::min(max_num_seqs, kMaxDecodeBatchSize);
  for (int size = 1; wanted >= 1 && size <= kMaxDecodeBatchSize;) {
    sizes.push_back(size);
    if (size >= wanted) break;
    size = size < 4 ? 2 * size : size < 8 ? 8 : size < 256 ? size + 8 : size + 16;
  }
  return sizes;
}

}  // namespace omni::engine
