#include "hub/blob_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace omni::hub {

BlobLock::BlobLock(const std::filesystem::path& lock_file, const std::string& what) {
  std::filesystem::create_directories(lock_file.parent_path());
  fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw_error(ErrorCode::kInternal, "cannot open the lock file {}: {}", lock_file.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  spdlog::info("download: waiting for another process that is downloading {} (lock {})", what, lock_file.string());
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    ::close(fd_);
    throw_error(ErrorCode::kInternal, "cannot lock {}: {}", lock_file.string(), std::strerror(error));
  }
}

BlobLock::~BlobLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace omni::hub
