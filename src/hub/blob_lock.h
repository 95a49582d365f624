// An exclusive lock on one blob of the cache, held while a process downloads it, so that two
// processes (or two workers of one) sharing a cache never write the same blob at once. The lock
// is flock(2) on {root}/.locks/…/{etag}.lock: the kernel drops it when its holder exits, so a
// download killed half-way never leaves a stale lock behind.
#pragma once

#include <filesystem>
#include <string>

namespace omni::hub {

class BlobLock {
 public:
  // Blocks until the lock is held; logs once when another process holds it. `what` names the
  // blob in that message. Throws omni::Error(kInternal) when the lock file cannot be opened.
  BlobLock(const std::filesystem::path& lock_file, const std::string& what);
  ~BlobLock();
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace omni::hub
