// The eviction order of the prefix cache: the KV blocks that no sequence references but that still
// hold a cached prefix, least recently used first. A block enters when its last reference goes,
// leaves when a cache hit revives it or when the pool evicts it to reuse its storage.
// Every operation is O(1) and allocation-free (an intrusive list over block ids).
// Not thread-safe; the engine thread owns it through the BlockPool.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace omni::engine {

class LruEvictor {
 public:
  explicit LruEvictor(int num_blocks);

  // Makes `block` the most recently used evictable block. It must not be in the evictor.
  void add(int32_t block);
  // Takes `block` out (a cache hit revived it). Returns whether it was in the evictor.
  bool remove(int32_t block);
  // Takes out and returns the least recently used block, or nullopt when empty.
  std::optional<int32_t> pop_lru();

  bool contains(int32_t block) const { return in_list_[block]; }
  int size() const { return size_; }

 private:
  static constexpr int32_t kNone = -1;
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  std::vector<bool> in_list_;
  int32_t head_ = kNone;  // least recently used
  int32_t tail_ = kNone;  // most recently used
  int size_ = 0;
};

}  // namespace omni::engine
