// The free blocks of a caching device allocator (tensor/cuda/allocator.cc), looked up best-fit.
//
// A request takes the smallest cached block that is at least its size and at most twice it, so
// that a process whose activation shapes vary from step to step (the code2wav stage batching a
// different number of streams and frames each call) reuses the blocks it already holds instead of
// asking the device for a new one per distinct size, while a small request never pins a block far
// larger than itself. Blocks are never split: a device block is freed back to the driver whole.
//
// Not thread-safe: the allocator guards each cache with its own mutex. Holds pointers only; it
// never dereferences or frees them.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <vector>

namespace omni::tensor {

class FreeBlockCache {
 public:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // the block's whole size, as allocated from the device
  };

  // Caches a free block of `size` bytes.
  void put(void* ptr, size_t size);
  // Removes and returns the smallest cached block of at least `size` and at most 2 × `size` bytes
  // (of several that size, the one cached last), or nothing when no cached block fits.
  std::optional<Block> take(size_t size);
  // Removes and returns every cached block.
  std::vector<Block> take_all();
  // Bytes of all cached blocks.
  size_t bytes() const { return bytes_; }

 private:
  std::multimap<size_t, void*> blocks_;  // size -> block
  size_t bytes_ = 0;
};

}  // namespace omni::tensor
