#include "tensor/free_block_cache.h"

namespace omni::tensor {

void FreeBlockCache::put(void* ptr, size_t size) {
  // In front of the blocks of the same size: the most recently freed is reused first.
  blocks_.emplace_hint(blocks_.lower_bound(size), size, ptr);
  bytes_ += size;
}

std::optional<FreeBlockCache::Block> FreeBlockCache::take(size_t size) {
  const auto it = blocks_.lower_bound(size);
  if (it == blocks_.end() || it->first > 2 * size) return std::nullopt;
  const Block block{.ptr = it->second, .size = it->first};
  blocks_.erase(it);
  bytes_ -= block.size;
  return block;
}

std::vector<FreeBlockCache::Block> FreeBlockCache::take_all() {
  std::vector<Block> all;
  all.reserve(blocks_.size());
  for (const auto& [size, ptr] : blocks_) all.push_back({.ptr = ptr, .size = size});
  blocks_.clear();
  bytes_ = 0;
  return all;
}

}  // namespace omni::tensor
