#include "engine/block_hash.h"

#include <cassert>

#include "model/causal_lm.h"

namespace omni::engine {

namespace {

// splitmix64's finaliser: a bijection with full avalanche, so nearby inputs give unrelated hashes.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  assert(tokens.size() == static_cast<size_t>(model::kKvBlockSize));
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ull);
  for (int32_t token : tokens) h = mix(h ^ static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull;
  return mix(h);
}

void extend_block_hashes(std::span<const int32_t> tokens, std::vector<BlockHash>& hashes) {
  size_t full = tokens.size() / model::kKvBlockSize;
  for (size_t i = hashes.size(); i < full; ++i) {
    BlockHash parent = i == 0 ? kRootBlockHash : hashes[i - 1];
    hashes.push_back(hash_block(parent, tokens.subspan(i * model::kKvBlockSize, model::kKvBlockSize)));
  }
}

}  // namespace omni::engine
