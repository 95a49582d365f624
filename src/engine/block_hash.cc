#include "engine/block_hash.h"

#include <cassert>

#include "base/splitmix64.h"
#include "model/causal_lm.h"

namespace omni::engine {

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  assert(tokens.size() == static_cast<size_t>(model::kKvBlockSize));
  // splitmix64's mixer has full avalanche, so nearby inputs give unrelated hashes.
  uint64_t h = splitmix64_mix(parent + kSplitmix64Increment);
  for (int32_t token : tokens) h = splitmix64_mix(h ^ static_cast<uint32_t>(token)) + kSplitmix64Increment;
  return splitmix64_mix(h);
}

void extend_block_hashes(std::span<const int32_t> tokens, std::vector<BlockHash>& hashes) {
  size_t full = tokens.size() / model::kKvBlockSize;
  for (size_t i = hashes.size(); i < full; ++i) {
    BlockHash parent = i == 0 ? kRootBlockHash : hashes[i - 1];
    hashes.push_back(hash_block(parent, tokens.subspan(i * model::kKvBlockSize, model::kKvBlockSize)));
  }
}

}  // namespace omni::engine
